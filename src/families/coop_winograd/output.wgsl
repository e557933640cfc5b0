// The output transform of `coop-winograd-f16` (F(2×2, 3×3)), its finishing pass: each
// invocation reads the 16 components of one tile for a quad of output channels from the
// products the channels-last kernel wrote (`[n][TH][TW][16][K4]` f16, K padded to K4, whole
// quads), computes Y = Aᵀ M A, adds the bias and the activation, and writes the tile's (up
// to) 2×2 outputs of the quad's channels below K.
// The output: NCHW, or channels last (`CHANNELS_LAST`); f32, or f16 (`F16_TENSORS`).
// CPU twin: `coop_winograd_twin` in coop_winograd/mod.rs.

#import wino_config
#import layout_config
#import params
#import precision

// Four f16 products per element.
@group(0) @binding(1) var<storage, read> products: array<vec2<u32>>;
fn product(i: u32) -> vec4<f32> {
    let w = products[i];
    let m = vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y));
    // An infinity is a product that overflowed f16 (the operands are finite and in range,
    // or flagged already): flagged, as its outputs are not the convolution's.
    out_of_range = out_of_range || any(abs(m) == vec4<f32>(bitcast<f32>(0x7f800000u)));
    return m;
}
// The family's bias buffer: 16·K4 zeros, which the GEMM adds to the products, then the K
// biases (K4 of them, padded with zeros).
@group(0) @binding(3) var<storage, read> bias: array<vec4<f32>>;
#import output_tensor

// Quads fastest: a warp reads 32 neighbouring quads of each component.
@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = gid.x + gid.y * nwg.x * WG;
    if (e >= p.batch * TH * TW * K4Q) {
        return;
    }
    let kq = e % K4Q;
    let tile = e / K4Q;
    let tx = tile % TW;
    let ty = (tile / TW) % TH;
    let n = tile / (TW * TH);
    let at = tile * 16u * K4Q + kq;
    var m: array<vec4<f32>, 16>;
    for (var xi = 0u; xi < 16u; xi++) {
        m[xi] = product(at + xi * K4Q);
    }
    // Aᵀ M (rows), then (Aᵀ M) A (columns); Aᵀ = [1 1 1 0; 0 1 -1 -1].
    var u: array<array<vec4<f32>, 4>, 2>;
    for (var j = 0u; j < 4u; j++) {
        u[0][j] = m[j] + m[4u + j] + m[8u + j];
        u[1][j] = m[4u + j] - m[8u + j] - m[12u + j];
    }
    let b = bias[16u * K4Q + kq];
    for (var r = 0u; r < 2u; r++) {
        let oy = 2u * ty + r;
        let row = array<vec4<f32>, 2>(u[r][0] + u[r][1] + u[r][2], u[r][1] - u[r][2] - u[r][3]);
        for (var s = 0u; s < 2u; s++) {
            let ox = 2u * tx + s;
            if (oy >= OH || ox >= OW) {
                continue;
            }
            let y = activate4(row[s] + b);
            for (var j = 0u; j < 4u; j++) {
                let k = 4u * kq + j;
                if (k < K) {
                    var o = p.out_offset + ((n * K + k) * OH + oy) * OW + ox;
                    if (CHANNELS_LAST) {
                        o = p.out_offset + ((n * OH + oy) * OW + ox) * K + k;
                    }
                    output[o] = output_value(y[j]);
                }
            }
        }
    }
    report_range();
}
