// The depthwise kernel: convolutions whose groups hold few input channels (depthwise, with
// any channel multiplier, and narrow grouped layers). There is almost no arithmetic per byte,
// so the kernel is built to stream the input once: each invocation computes a strip of VX
// neighbouring outputs along a row for VC output channels of one group, loading each input
// row segment it needs once into registers (SPAN values) and reusing it for every tap and
// output of the strip. Invocations next to each other take strips next to each other, so a
// workgroup reads contiguous runs of the input rows and writes contiguous runs of the output.
//
// Padded taps are explicit zeros that are multiplied, like every other family (an infinite
// weight on a padded tap gives NaN, as IEEE 0 × inf).
// CPU twin: src/families/depthwise/mod.rs (`strip_twin`), against src/reference.rs.

#import params
#import precision
#import config

struct Grid {
    x_strips: u32,   // strips of VX outputs per output row
    c_blocks: u32,   // blocks of VC output channels per group
    c_out_pad: u32,  // a group's output channels padded to whole VC blocks (the weights' rows)
    threads: u32,    // invocations with work in this dispatch
}

@group(0) @binding(1) var<storage, read> input: array<f32>;
@group(0) @binding(2) var<storage, read> weight: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(5) var<storage, read_write> output: array<f32>;
@group(0) @binding(7) var<uniform> grid: Grid;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    // The grid may be folded into two dimensions (65 535 workgroups per dimension).
    let t = (wid.x + wid.y * nwg.x) * WG + lid;
    if (t >= grid.threads) {
        return;
    }
    // Strips fastest, then rows, channel blocks, groups and images.
    let xs = t % grid.x_strips;
    let t1 = t / grid.x_strips;
    let oy = t1 % p.oh;
    let t2 = t1 / p.oh;
    let cb = t2 % grid.c_blocks;
    let t3 = t2 / grid.c_blocks;
    let g = t3 % p.groups;
    let img = t3 / p.groups;

    let ox0 = xs * VX;
    let n0 = cb * VC;                       // first output channel of the block, in the group
    let x0 = i32(ox0 * STRIDE_W) - i32(p.pad_left);
    let taps = KH * KW;

    var acc: array<array<f32, VX>, VC>;
    for (var ic = 0u; ic < p.c_in_per_group; ic++) {
        let plane = p.in_offset + ((img * p.c_in + g * p.c_in_per_group + ic) * p.h) * p.w;
        // The weights of this input channel for the block's channels: [c_out_pad][cin_g][taps].
        let w_base = ((g * grid.c_out_pad + n0) * p.c_in_per_group + ic) * taps;
        for (var ky = 0u; ky < KH; ky++) {
            let iy = i32(oy * STRIDE_H + ky * DIL_H) - i32(p.pad_top);
            let row_in = iy >= 0 && iy < i32(p.h);
            let row = plane + u32(max(iy, 0)) * p.w;
            // The row segment this strip reads: explicit zeros outside the image.
            var seg: array<f32, SPAN>;
            for (var j = 0u; j < SPAN; j++) {
                let ix = x0 + i32(j);
                var v = 0.0;
                if (row_in && ix >= 0 && ix < i32(p.w)) {
                    v = to_operand(input[row + u32(ix)]);
                }
                seg[j] = v;
            }
            for (var c = 0u; c < VC; c++) {
                let w_row = w_base + c * p.c_in_per_group * taps + ky * KW;
                for (var kx = 0u; kx < KW; kx++) {
                    let wv = weight[w_row + kx];
                    for (var x = 0u; x < VX; x++) {
                        acc[c][x] = fma(seg[x * STRIDE_W + kx * DIL_W], wv, acc[c][x]);
                    }
                }
            }
        }
    }
    report_range();
    let ohw = p.oh * p.ow;
    for (var c = 0u; c < VC; c++) {
        let n = n0 + c;
        if (n < p.c_out_per_group) {
            let oc = g * p.c_out_per_group + n;
            let b = bias[oc];
            let out_row = p.out_offset + (img * p.c_out + oc) * ohw + oy * p.ow;
            for (var x = 0u; x < VX; x++) {
                if (ox0 + x < p.ow) {
                    output[out_row + ox0 + x] = activate(acc[c][x] + b);
                }
            }
        }
    }
}
