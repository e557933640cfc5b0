// Operand staging of the f16x3 cooperative kernel (coop.wgsl): every operand x is
// held as two f16, x ≈ hi + lo / LO_SCALE with hi = f16(x) and lo = f16((x - hi) · LO_SCALE):
// two halves of 11 significant bits whose sum is within 2^-22 of x, relatively (f32
// rounding: 2^-24). The multiply then forms hi·hi + (hi·lo + lo·hi) / LO_SCALE on the matrix
// units (f16 products are exact in f32); the dropped lo·lo term is ≤ 2^-22 of a product.
// These are worst-case bounds per operand; over a sum they average out: AlexNet conv1 lands
// at relative L2 1.3e-7, under the f32 FMA kernel's 3.4e-7. LO_SCALE lifts
// the low halves out of f16's subnormal range for inputs above 2^-14 in magnitude; the
// weights are scaled by a power of two at upload for the same reason (`Params.out_scale`
// undoes it).
// CPU twin: src/reference.rs `conv2d` (the split is an f32-accurate representation; the
// tests hold this kernel to the f32 bound of the GPU-vs-CPU suite).

const LO_SCALE: f32 = 2048.0;
const LO_WEIGHT: f32 = 1.0 / 2048.0;

var<workgroup> a_tile: array<f16, STAGES * BK * A_STRIDE>;     // hi of A[k][m]
var<workgroup> a_lo_tile: array<f16, STAGES * BK * A_STRIDE>;  // lo of A[k][m]
var<workgroup> b_tile: array<f16, STAGES * BK * B_STRIDE>;     // hi of B[k][n]
var<workgroup> b_lo_tile: array<f16, STAGES * BK * B_STRIDE>;  // lo of B[k][n]

// `v` arrives clamped to f16's range (NaN kept) by the precision module, unrounded. The
// high half is rounded to f16 and back through a packing the compiler cannot see through:
// NVIDIA's compiler takes `f32(f16(v))` for the identity, so `v - f32(f16(v))` became 0 and
// every low half vanished (relative L2 2.1e-4 on the H100).
fn store_a(buf: u32, k: u32, m: u32, v: f32) {
    let i = (buf * BK + k) * A_STRIDE + m;
    let hi = unpack2x16float(pack2x16float(vec2<f32>(v, 0.0)) ^ opaque_zero()).x;
    a_tile[i] = f16(hi);
    a_lo_tile[i] = f16((v - hi) * LO_SCALE);
}

// Four weights as split at upload (src/conv2d.rs, `split_weights`).
struct WeightVec {
    hi: vec4<f16>,
    lo: vec4<f16>,
}

fn store_b(buf: u32, k: u32, n4: u32, v: WeightVec) {
    let i = (buf * BK + k) * B_STRIDE + n4 * 4u;
    b_tile[i] = v.hi.x;
    b_tile[i + 1u] = v.hi.y;
    b_tile[i + 2u] = v.hi.z;
    b_tile[i + 3u] = v.hi.w;
    b_lo_tile[i] = v.lo.x;
    b_lo_tile[i + 1u] = v.lo.y;
    b_lo_tile[i + 2u] = v.lo.z;
    b_lo_tile[i + 3u] = v.lo.w;
}
