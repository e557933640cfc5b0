// Operand staging of the f16 cooperative kernel (coop.wgsl): A and B as one f16 each.
// A arrives rounded to f16 by the precision module's to_operand; the weights are f16 in
// memory (rounded once at upload).

var<workgroup> a_tile: array<f16, STAGES * BK * A_STRIDE>;     // A[k][m]
var<workgroup> b_tile: array<f16, STAGES * BK * B_STRIDE>;     // B[k][n]

fn store_a(buf: u32, k: u32, m: u32, v: f32) {
    a_tile[(buf * BK + k) * A_STRIDE + m] = f16(v);
}

alias WeightVec = vec4<f16>;

fn store_b(buf: u32, k: u32, n4: u32, v: WeightVec) {
    let i = (buf * BK + k) * B_STRIDE + n4 * 4u;
    b_tile[i] = v.x;
    b_tile[i + 1u] = v.y;
    b_tile[i + 2u] = v.z;
    b_tile[i + 3u] = v.w;
}
