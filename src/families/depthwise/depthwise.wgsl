// The depthwise kernel: convolutions whose groups hold few input channels (depthwise, with
// any channel multiplier, and narrow grouped layers). There is almost no arithmetic per byte,
// so the kernel is built to stream the input once: each invocation computes a block of VY
// rows × VX neighbouring columns of outputs for VC output channels of one group, with the
// block's filter taps in registers, and walks the input rows the block needs one at a time,
// loading each row segment (SPAN_X values) once for every output and tap that uses it.
// Neighbouring invocations take neighbouring columns, so with VX = 1 and stride 1 a
// subgroup's loads and stores are contiguous runs of a row.
//
// Padded taps are explicit zeros that are multiplied, like every other family (an infinite
// weight on a padded tap gives NaN, as IEEE 0 × inf).
// CPU twin: src/families/depthwise/mod.rs (`strip_twin`), against src/reference.rs.

#import params
#import precision
#import tensors
#import config

struct Grid {
    x_blocks: u32,   // blocks of VX columns per output row
    y_blocks: u32,   // blocks of VY rows per output plane
    c_blocks: u32,   // blocks of VC output channels per group
    c_out_pad: u32,  // a group's output channels padded to whole VC blocks (the weights' rows)
    threads: u32,    // invocations with work in this dispatch
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(2) var<storage, read> weight: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(7) var<uniform> grid: Grid;

const TAPS: u32 = KH * KW;

#ifdef RANGE_FLAG
#ifdef F16_TENSORS
// Whether a block's sums are all finite: their one sum is exactly when they all are (an
// infinite or NaN term makes it ±inf or NaN; products of f16 values over at most 16
// channels' taps stay far inside f32's range). Taken by value: a pointer to the
// accumulators may keep them out of registers.
fn sums_finite(acc: array<array<array<f32, VX>, VY>, VC>) -> bool {
    var total = 0.0;
    for (var c = 0u; c < VC; c++) {
        for (var y = 0u; y < VY; y++) {
            for (var x = 0u; x < VX; x++) {
                total += acc[c][y][x];
            }
        }
    }
    return is_finite(total);
}

// Where a block's sums are not all finite, whether an input it read is ±inf (beyond f16's
// range: flagged); NaN inputs are in range. Sums of finite f16 inputs are finite, so this
// runs only on blocks that read a special value.
fn rescan_block(img: u32, g: u32, x0: i32, y0: i32) {
    for (var ic = 0u; ic < p.c_in_per_group; ic++) {
        let plane = p.in_offset + ((img * p.c_in + g * p.c_in_per_group + ic) * p.h) * p.w;
        for (var r = 0u; r < SPAN_Y; r++) {
            let iy = y0 + i32(r);
            for (var j = 0u; j < SPAN_X; j++) {
                let ix = x0 + i32(j);
                if (iy >= 0 && iy < i32(p.h) && ix >= 0 && ix < i32(p.w)) {
                    let v = input_value(plane + u32(iy) * p.w + u32(ix));
                    out_of_range = out_of_range || abs(v) > F16_MAX;
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
    // The grid may be folded into two dimensions (65 535 workgroups per dimension).
    let t = (wid.x + wid.y * nwg.x) * WG + lid;
    if (t >= grid.threads) {
        return;
    }
    // Column blocks fastest, then row blocks, channel blocks, groups and images.
    let xb = t % grid.x_blocks;
    let t1 = t / grid.x_blocks;
    let yb = t1 % grid.y_blocks;
    let t2 = t1 / grid.y_blocks;
    let cb = t2 % grid.c_blocks;
    let t3 = t2 / grid.c_blocks;
    let g = t3 % p.groups;
    let img = t3 / p.groups;

    let ox0 = xb * VX;
    let oy0 = yb * VY;
    let n0 = cb * VC;                       // first output channel of the block, in the group
    let x0 = i32(ox0 * STRIDE_W) - i32(p.pad_left);
    let y0 = i32(oy0 * STRIDE_H) - i32(p.pad_top);

    // Which columns of the segment lie inside the image: the same for every row.
    var col_in: array<bool, SPAN_X>;
    for (var j = 0u; j < SPAN_X; j++) {
        let ix = x0 + i32(j);
        col_in[j] = ix >= 0 && ix < i32(p.w);
    }

    var acc: array<array<array<f32, VX>, VY>, VC>;
    for (var ic = 0u; ic < p.c_in_per_group; ic++) {
        let plane = p.in_offset + ((img * p.c_in + g * p.c_in_per_group + ic) * p.h) * p.w;
        // The block's taps of this input channel: weights are [c_out_pad][cin_g][taps].
        var taps: array<array<f32, TAPS>, VC>;
        for (var c = 0u; c < VC; c++) {
            let w_base = ((g * grid.c_out_pad + n0 + c) * p.c_in_per_group + ic) * TAPS;
            for (var k = 0u; k < TAPS; k++) {
                taps[c][k] = weight[w_base + k];
            }
        }
        for (var r = 0u; r < SPAN_Y; r++) {
            let iy = y0 + i32(r);
            let row_in = iy >= 0 && iy < i32(p.h);
            let row = plane + u32(max(iy, 0)) * p.w;
            // The row segment: explicit zeros outside the image.
            var seg: array<f32, SPAN_X>;
            for (var j = 0u; j < SPAN_X; j++) {
                var v = 0.0;
                if (row_in && col_in[j]) {
                    v = load_summed(row + u32(x0 + i32(j)));
                }
                seg[j] = v;
            }
            // Every output row of the block that this input row feeds, through tap row ky.
            for (var y = 0u; y < VY; y++) {
                let d = i32(r) - i32(y * STRIDE_H);
                if (d >= 0 && u32(d) % DIL_H == 0u && u32(d) / DIL_H < KH) {
                    let ky = u32(d) / DIL_H;
                    for (var c = 0u; c < VC; c++) {
                        for (var kx = 0u; kx < KW; kx++) {
                            let wv = taps[c][ky * KW + kx];
                            for (var x = 0u; x < VX; x++) {
                                acc[c][y][x] = fma(seg[x * STRIDE_W + kx * DIL_W], wv, acc[c][y][x]);
                            }
                        }
                    }
                }
            }
        }
    }
#ifdef RANGE_FLAG
#ifdef F16_TENSORS
    if (!sums_finite(acc)) {
        rescan_block(img, g, x0, y0);
    }
#endif
#endif
    report_range();
    let ohw = p.oh * p.ow;
    for (var c = 0u; c < VC; c++) {
        let n = n0 + c;
        if (n < p.c_out_per_group) {
            let oc = g * p.c_out_per_group + n;
            let b = bias[oc];
            let out_plane = p.out_offset + (img * p.c_out + oc) * ohw;
            for (var y = 0u; y < VY; y++) {
                if (oy0 + y < p.oh) {
                    for (var x = 0u; x < VX; x++) {
                        if (ox0 + x < p.ow) {
                            store_output(out_plane + (oy0 + y) * p.ow + ox0 + x, activate(acc[c][y][x] + b));
                        }
                    }
                }
            }
        }
    }
}
