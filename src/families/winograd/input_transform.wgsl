// The Winograd family's input transform F(2×2, 3×3), its staging pass: each invocation
// takes one 4×4 input patch (tile ty, tx of one channel of one image; the padding read as
// zeros), computes V = Bᵀ d B and writes its 16 values as 16 channels of the derived
// problem's input, `[N][16·C][TH][TW]` with channel ξ·C + c for component ξ = 4·row + col:
// the layout of an NCHW tensor, which the tiled kernel then reads as a 1×1 convolution of 16
// groups (one GEMM per component). An infinite or NaN input, or a transform that overflows,
// reaches the products of its tiles as non-finite values, which the output transform then
// computes directly (see output_transform.wgsl).
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
    let y0 = i32((tile / TW) * 2u) - i32(p.pad_top);
    let x0 = i32((tile % TW) * 2u) - i32(p.pad_left);
    let plane = p.in_offset + (img * C + c) * H * W;
    var d: array<array<f32, 4>, 4>;
    for (var i = 0u; i < 4u; i++) {
        let iy = y0 + i32(i);
        for (var j = 0u; j < 4u; j++) {
            let ix = x0 + i32(j);
            let inside = iy >= 0 && iy < i32(H) && ix >= 0 && ix < i32(W);
            let at = select(0u, u32(iy) * W + u32(ix), inside);
            d[i][j] = select(0.0, input[plane + at], inside);
        }
    }
    // Bᵀ d (rows), then (Bᵀ d) B (columns); Bᵀ = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1].
    var b: array<array<f32, 4>, 4>;
    for (var j = 0u; j < 4u; j++) {
        b[0][j] = d[0][j] - d[2][j];
        b[1][j] = d[1][j] + d[2][j];
        b[2][j] = d[2][j] - d[1][j];
        b[3][j] = d[1][j] - d[3][j];
    }
    let out = (img * 16u * C + c) * TH * TW + tile;
    let component = C * TH * TW;
    for (var i = 0u; i < 4u; i++) {
        let row = out + i * 4u * component;
        staged[row] = b[i][0] - b[i][2];
        staged[row + component] = b[i][1] + b[i][2];
        staged[row + 2u * component] = b[i][2] - b[i][1];
        staged[row + 3u * component] = b[i][1] - b[i][3];
    }
}
