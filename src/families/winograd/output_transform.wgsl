// The Winograd family's output transform F(2×2, 3×3), its finishing pass: each invocation
// reads the 16 components of one tile of one output channel from the products the tiled
// kernel wrote (`[N][16·K][TH][TW]`, channel ξ·K + k), computes Y = Aᵀ M A, adds the bias
// and the activation, and writes the tile's (up to) 2×2 outputs.
// CPU twin: src/families/winograd/mod.rs (`winograd_twin`), against src/reference.rs.

#import params
#import config

@group(0) @binding(1) var<storage, read> products: array<f32>;
// The family's bias buffer: 16·K zeros, which the tiled kernel adds to the products, then
// the K biases.
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(5) var<storage, read_write> output: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let t = (wid.x + wid.y * nwg.x) * WG + lid;
    let per_image = K * TH * TW;
    if (t >= p.batch * per_image) {
        return;
    }
    let img = t / per_image;
    let k = (t % per_image) / (TH * TW);
    let tile = t % (TH * TW);
    let at = (img * 16u * K + k) * TH * TW + tile;
    let component = K * TH * TW;
    var m: array<array<f32, 4>, 4>;
    for (var i = 0u; i < 4u; i++) {
        for (var j = 0u; j < 4u; j++) {
            m[i][j] = products[at + (i * 4u + j) * component];
        }
    }
    // Aᵀ M (rows), then (Aᵀ M) A (columns); Aᵀ = [1 1 1 0; 0 1 -1 -1].
    var u: array<array<f32, 4>, 2>;
    for (var j = 0u; j < 4u; j++) {
        u[0][j] = m[0][j] + m[1][j] + m[2][j];
        u[1][j] = m[1][j] - m[2][j] - m[3][j];
    }
    let b = bias[16u * K + k];
    let oy0 = (tile / TW) * 2u;
    let ox0 = (tile % TW) * 2u;
    let plane = p.out_offset + (img * K + k) * OH * OW;
    for (var r = 0u; r < 2u; r++) {
        if (oy0 + r < OH) {
            let row = plane + (oy0 + r) * OW + ox0;
            output[row] = activate(u[r][0] + u[r][1] + u[r][2] + b);
            if (ox0 + 1u < OW) {
                output[row + 1u] = activate(u[r][1] - u[r][2] - u[r][3] + b);
            }
        }
    }
}
