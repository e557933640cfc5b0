// The depthwise family on channels-last tensors for depthwise layers of multiplier 1 whose
// channels are a multiple of 4, and (`GROUPED`) for narrow grouped layers whose groups read
// and write a multiple of 4 channels each: each invocation computes a block of VY rows × VX
// neighbouring columns of outputs for 4 neighbouring output channels, loading each input
// pixel's channels 4 at a time as one vector and each input row segment once for every
// output row of the block it feeds.
// Against depthwise_nhwc.wgsl (one channel per invocation), a warp's loads are 4× as wide
// and each bounds test and address serves 4 channels: the scalar shader pays a branch, a
// bounds test and address arithmetic per loaded value, which bound it rather than the bytes.
// Depthwise: the taps come from the tap vectors after the family's packed weights
// ([KH·KW][C/4] vectors, `pack_weights`), one per tap and 4 channels. Grouped: from the tap
// matrices there ([C_out/4][KH·KW][IN_VECS] 4×4 matrices, column i the 4 outputs' weights
// of the vector's input channel i), each tap of an input vector one matrix-vector product.
// Padded taps are explicit zeros that are multiplied, as in the other shaders.
// CPU twin: src/reference.rs (`conv2d` on `to_nchw` of the input, `to_nhwc` of the result).

#import params
#import precision
#import config

#ifdef F16_TENSORS
#import f16_bits
@group(0) @binding(1) var<storage, read> input: array<vec4<f16>>;
@group(0) @binding(5) var<storage, read_write> output: array<vec4<f16>>;

fn input_values(i: u32) -> vec4<f32> {
    return vec4<f32>(input[i]);
}

// f16 values are f16 operands already, and the only ones beyond f16's range are ±inf. Those
// make every sum they reach ±inf or NaN (sums of products of f16 values over a depthwise
// kernel's taps stay far inside f32's range), so instead of a range check per loaded value
// the kernel checks its sums and rescans its inputs only where one is not finite
// (`sums_finite`, `rescan_block`), under the f16 precisions.
fn operands(v: vec4<f32>) -> vec4<f32> {
    return v;
}

fn store_outputs(i: u32, v: vec4<f32>) {
    output[i] = to_f16x4(v);
}
#else
@group(0) @binding(1) var<storage, read> input: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> output: array<vec4<f32>>;

fn input_values(i: u32) -> vec4<f32> {
    return input[i];
}

fn operands(v: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(to_operand(v.x), to_operand(v.y), to_operand(v.z), to_operand(v.w));
}

fn store_outputs(i: u32, v: vec4<f32>) {
    output[i] = v;
}
#endif

struct Grid {
    threads: u32,    // invocations with work in this dispatch
    c_out_pad: u32,  // (depthwise_nhwc.wgsl's; this shader reads the tap vectors instead)
    taps_at: u32,    // where the tap vectors start, in vectors
    _pad0: u32,
}

// The family's packed weights, then the same taps as vectors of 4 neighbouring channels,
// [KH·KW][C/4], or (`GROUPED`) as 4×4 matrices, [C_out/4][KH·KW][IN_VECS] (`pack_weights`):
// one 16-byte load per 4 weights instead of four.
@group(0) @binding(2) var<storage, read> weight: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(7) var<uniform> grid: Grid;

const TAPS: u32 = KH * KW;

#ifdef GROUPED
// Tap `k` of output vector `cv` for the group's input vector `j`: column i holds the 4
// outputs' weights of that vector's channel i, so the product with the input vector is the
// tap's contribution to the 4 outputs.
fn tap_matrix(k: u32, cv: u32, j: u32) -> mat4x4<f32> {
    let at = grid.taps_at + ((cv * TAPS + k) * IN_VECS + j) * 4u;
    return mat4x4<f32>(weight[at], weight[at + 1u], weight[at + 2u], weight[at + 3u]);
}
#else
// Tap `k` of channel vector `cv`.
fn tap_vector(k: u32, cv: u32) -> vec4<f32> {
    return weight[grid.taps_at + k * (p.c_out / 4u) + cv];
}
#endif

#ifdef RANGE_FLAG
#ifdef F16_TENSORS
// Whether a block's sums are all finite: their one sum is exactly when they all are (an
// infinite or NaN term makes it ±inf or NaN, and finite ones stay far from f32's largest
// value). Taken by value: a pointer to the accumulators may keep them out of registers.
fn sums_finite(acc: array<array<vec4<f32>, VX>, VY>) -> bool {
    var total = vec4<f32>(0.0);
    for (var y = 0u; y < VY; y++) {
        for (var x = 0u; x < VX; x++) {
            total += acc[y][x];
        }
    }
    return is_finite(total.x) && is_finite(total.y) && is_finite(total.z) && is_finite(total.w);
}

// Where a block's sums are not all finite, whether an input it read is ±inf (beyond f16's
// range: flagged); NaN inputs are in range. Sums of finite inputs are finite, so this runs
// only on blocks that read a special value. `image`: the block's first input vector of its
// image; `vectors`: input vectors per pixel.
fn rescan_block(image: u32, x0: i32, y0: i32, vectors: u32) {
    for (var row = 0u; row < SPAN_Y; row++) {
        let iy = y0 + i32(row);
        for (var j = 0u; j < SPAN_X; j++) {
            let ix = x0 + i32(j);
            if (iy >= 0 && iy < i32(p.h) && ix >= 0 && ix < i32(p.w)) {
                for (var iv = 0u; iv < IN_VECS; iv++) {
                    let v = input_values(image + (u32(iy) * p.w + u32(ix)) * vectors + iv);
                    out_of_range = out_of_range || any(abs(v) > vec4<f32>(F16_MAX));
                }
            }
        }
    }
}
#endif
#endif

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let t = (wid.x + wid.y * nwg.x) * WG + lid;
    if (t >= grid.threads) {
        return;
    }
    // Output channel vectors fastest, then blocks of VX columns, blocks of VY rows and
    // images. Offsets and pixels count vectors of 4 channels (chunk offsets are whole
    // images). Grouped: the group's IN_VECS input vectors sit side by side in each pixel.
    let vectors = p.c_out / 4u;
    let in_vectors = p.c_in / 4u;
    let x_blocks = (p.ow + VX - 1u) / VX;
    let y_blocks = (p.oh + VY - 1u) / VY;
    let cv = t % vectors;
    let r = t / vectors;
    let ox0 = (r % x_blocks) * VX;
    let oy0 = ((r / x_blocks) % y_blocks) * VY;
    let img = r / (x_blocks * y_blocks);
    let x0 = i32(ox0 * STRIDE_W) - i32(p.pad_left);
    let y0 = i32(oy0 * STRIDE_H) - i32(p.pad_top);
    // Per column of the segment: whether it is inside the image, and the column it loads
    // (clamped into the image; a value loaded outside is replaced by zero). Every load is
    // unconditional, so a row's loads issue together with no branch between them.
    var col_in: array<bool, SPAN_X>;
    var col_at: array<u32, SPAN_X>;
    for (var j = 0u; j < SPAN_X; j++) {
        let ix = x0 + i32(j);
        col_in[j] = ix >= 0 && ix < i32(p.w);
        col_at[j] = u32(clamp(ix, 0, i32(p.w) - 1)) * in_vectors;
    }
#ifdef GROUPED
    let first_in = (cv / OUT_VECS) * IN_VECS;
#else
    let first_in = cv;
#endif
    let image = p.in_offset / 4u + img * p.h * p.w * in_vectors + first_in;
#ifndef GROUPED
    // The taps in registers where they fit (HELD_TAPS = TAPS), else read at each use.
    var taps: array<vec4<f32>, HELD_TAPS>;
    if (HELD_TAPS == TAPS) {
        for (var k = 0u; k < TAPS; k++) {
            taps[k] = tap_vector(k, cv);
        }
    }
#endif
    var acc: array<array<vec4<f32>, VX>, VY>;
    for (var row = 0u; row < SPAN_Y; row++) {
        let iy = y0 + i32(row);
        let row_in = iy >= 0 && iy < i32(p.h);
        let row_at = image + u32(clamp(iy, 0, i32(p.h) - 1)) * p.w * in_vectors;
        // The row segment of each input vector: explicit zeros outside the image.
        var seg: array<array<vec4<f32>, SPAN_X>, IN_VECS>;
        for (var iv = 0u; iv < IN_VECS; iv++) {
            for (var j = 0u; j < SPAN_X; j++) {
                let v = input_values(row_at + col_at[j] + iv);
                seg[iv][j] = operands(select(vec4<f32>(0.0), v, row_in && col_in[j]));
            }
        }
        // Every output row of the block that this input row feeds, through tap row ky.
        for (var y = 0u; y < VY; y++) {
            let d = i32(row) - i32(y * STRIDE_H);
            if (d >= 0 && u32(d) % DIL_H == 0u && u32(d) / DIL_H < KH) {
                let ky = u32(d) / DIL_H;
                for (var kx = 0u; kx < KW; kx++) {
#ifdef GROUPED
                    for (var iv = 0u; iv < IN_VECS; iv++) {
                        let m = tap_matrix(ky * KW + kx, cv, iv);
                        for (var x = 0u; x < VX; x++) {
                            acc[y][x] += m * seg[iv][x * STRIDE_W + kx * DIL_W];
                        }
                    }
#else
                    var wv: vec4<f32>;
                    if (HELD_TAPS == TAPS) {
                        wv = taps[ky * KW + kx];
                    } else {
                        wv = tap_vector(ky * KW + kx, cv);
                    }
                    for (var x = 0u; x < VX; x++) {
                        acc[y][x] = fma(seg[0][x * STRIDE_W + kx * DIL_W], wv, acc[y][x]);
                    }
#endif
                }
            }
        }
    }
#ifdef RANGE_FLAG
#ifdef F16_TENSORS
    if (!sums_finite(acc)) {
        rescan_block(image, x0, y0, in_vectors);
    }
#endif
#endif
    report_range();
    let b = vec4<f32>(bias[4u * cv], bias[4u * cv + 1u], bias[4u * cv + 2u], bias[4u * cv + 3u]);
    for (var y = 0u; y < VY; y++) {
        if (oy0 + y < p.oh) {
            for (var x = 0u; x < VX; x++) {
                if (ox0 + x < p.ow) {
                    let pix = (img * p.oh + oy0 + y) * p.ow + ox0 + x;
                    store_outputs(p.out_offset / 4u + pix * vectors + cv, activate4(acc[y][x] + b));
                }
            }
        }
    }
}
