// The Winograd family's output transform F(m×m, r×r), its finishing pass: each invocation
// reads the N² components of one tile of one output channel from the products the tiled
// kernel wrote (`[batch][N²·K][TT]`, channel ξ·K + k, tile ty·TW + tx), computes Y = Aᵀ M A by the
// generated `output_1d` (Aᵀ of one column, then of one row), adds the bias and the
// activation, and writes the tile's (up to) M×M outputs. Where a product or an output is not
// finite (an infinite or NaN input in the tile's patch, or a transform that overflowed), the
// transforms would have mixed it into outputs a direct convolution keeps finite, or turned
// ±inf into NaN: that tile's outputs are computed directly, in f32, from the input and the
// weights as given — a slow path that keeps f32's semantics of special values, taken by no
// tile of finite data within range.
// CPU twin: src/families/winograd/mod.rs (`winograd_twin`), against src/reference.rs.

#import params
#import config

@group(0) @binding(1) var<storage, read> products: array<f32>;
// The family's bias buffer: N²·K zeros, which the tiled kernel adds to the products, then
// the K biases.
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(5) var<storage, read_write> output: array<f32>;
@group(0) @binding(12) var<storage, read> input: array<f32>;
// [K][C][R][R], finite (the family refuses others at upload).
@group(0) @binding(13) var<storage, read> weight: array<f32>;

// Output (oy, ox) of channel k of image img, summed directly; padded taps are skipped, which
// equals multiplying their zeros by finite weights.
fn direct(img: u32, k: u32, oy: u32, ox: u32) -> f32 {
    var acc = 0.0;
    for (var c = 0u; c < C; c++) {
        let plane = p.in_offset + (img * C + c) * H * W;
        for (var ky = 0u; ky < R; ky++) {
            let iy = i32(oy + ky) - i32(p.pad_top);
            for (var kx = 0u; kx < R; kx++) {
                let ix = i32(ox + kx) - i32(p.pad_left);
                if (iy >= 0 && iy < i32(H) && ix >= 0 && ix < i32(W)) {
                    acc = fma(input[plane + u32(iy) * W + u32(ix)], weight[((k * C + c) * R + ky) * R + kx], acc);
                }
            }
        }
    }
    return acc;
}

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
    let b = bias[N * N * K + k];
    let oy0 = (tile / TW) * M;
    let ox0 = (tile % TW) * M;
    let plane = p.out_offset + (img * K + k) * OH * OW;
    let at = (img * N * N * K + k) * TT + tile;
    let component = K * TT;
    var finite = true;
    // Aᵀ M, column by column: u[i][j] = (Aᵀ M[·][j])[i].
    var u: array<array<f32, N>, M>;
    for (var j = 0u; j < N; j++) {
        var column: array<f32, N>;
        for (var i = 0u; i < N; i++) {
            column[i] = products[at + (i * N + j) * component];
            finite = finite && is_finite(column[i]);
        }
        let v = output_1d(column);
        for (var i = 0u; i < M; i++) {
            u[i][j] = v[i];
        }
    }
    // (Aᵀ M) A, row by row.
    var y: array<array<f32, M>, M>;
    for (var r = 0u; r < M; r++) {
        y[r] = output_1d(u[r]);
        for (var s = 0u; s < M; s++) {
            finite = finite && is_finite(y[r][s]);
        }
    }
    // Two store loops rather than one with the fallback inside: a loop that calls `direct`
    // is too large for the driver to unroll, and a loop left rolled indexes `y` at run time,
    // which moves the tile's outputs to local memory.
    if (finite) {
        for (var r = 0u; r < M; r++) {
            for (var s = 0u; s < M; s++) {
                let oy = oy0 + r;
                let ox = ox0 + s;
                if (oy < OH && ox < OW) {
                    output[plane + oy * OW + ox] = activate(y[r][s] + b);
                }
            }
        }
    } else {
        for (var r = 0u; r < M; r++) {
            for (var s = 0u; s < M; s++) {
                let oy = oy0 + r;
                let ox = ox0 + s;
                if (oy < OH && ox < OW) {
                    output[plane + oy * OW + ox] = activate(direct(img, k, oy, ox) + b);
                }
            }
        }
    }
}
