// The Winograd family's input transform F(m×m, r×r), its staging pass: each invocation
// takes one N×N input patch (tile ty, tx of one channel of one image, N = M + R − 1, tiles M
// apart; the padding read as zeros), computes V = Bᵀ d B by the generated `input_1d` (Bᵀ of
// one column, then of one row) and writes its N² values as N² channels of the derived
// problem's input, `[batch][N²·C][TT]` with channel ξ·C + c for component ξ = N·row + col:
// the layout of an NCHW tensor, which the tiled kernel then reads as a 1×1 convolution of N²
// groups (one GEMM per component). Each image's TH·TW tiles of a channel are one row of TT
// positions (TT ≥ TH·TW: whole vec4s); the GEMM's rows past TH·TW are never written here
// nor read by the output transform. An infinite or NaN input, or a transform that
// overflows, reaches the products of its tiles as non-finite values, which the output
// transform then computes directly (see output_transform.wgsl).
// CPU twin: src/families/winograd/mod.rs (`winograd_twin`), against src/reference.rs.

#import params
#import config

@group(0) @binding(1) var<storage, read> input: array<f32>;
@group(0) @binding(5) var<storage, read_write> staged: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let t = (wid.x + wid.y * nwg.x) * WG + lid;
    let per_image = C * TH * TW;
    if (t >= p.batch * per_image) {
        return;
    }
    let img = t / per_image;
    let c = (t % per_image) / (TH * TW);
    let tile = t % (TH * TW);
    let y0 = i32((tile / TW) * M) - i32(p.pad_top);
    let x0 = i32((tile % TW) * M) - i32(p.pad_left);
    let plane = p.in_offset + (img * C + c) * H * W;
    var d: array<array<f32, N>, N>;
    for (var i = 0u; i < N; i++) {
        let iy = y0 + i32(i);
        for (var j = 0u; j < N; j++) {
            let ix = x0 + i32(j);
            let inside = iy >= 0 && iy < i32(H) && ix >= 0 && ix < i32(W);
            let at = select(0u, u32(iy) * W + u32(ix), inside);
            d[i][j] = select(0.0, input[plane + at], inside);
        }
    }
    // Bᵀ d, column by column: b[i][j] = (Bᵀ d[·][j])[i].
    var b: array<array<f32, N>, N>;
    for (var j = 0u; j < N; j++) {
        var column: array<f32, N>;
        for (var i = 0u; i < N; i++) {
            column[i] = d[i][j];
        }
        let v = input_1d(column);
        for (var i = 0u; i < N; i++) {
            b[i][j] = v[i];
        }
    }
    // (Bᵀ d) B, row by row, each component to its channel.
    let out = (img * N * N * C + c) * TT + tile;
    let component = C * TT;
    for (var i = 0u; i < N; i++) {
        let v = input_1d(b[i]);
        for (var j = 0u; j < N; j++) {
            staged[out + (i * N + j) * component] = v[j];
        }
    }
}
