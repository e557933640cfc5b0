// The depthwise family on channels-last tensors (`Layout::Nhwc`): each invocation computes
// VX neighbouring outputs of one row for one output channel, loading the row segment they
// share once per tap row; output channels are fastest, so a warp's loads and stores are runs
// of neighbouring channels of one pixel (the input channels a group reads sit side by side
// in NHWC). The taps of the invocation's output channel come from the family's packed weights
// ([groups][c_out_pad][C_in/groups][KH·KW]). Padded taps are explicit zeros that are
// multiplied, as in depthwise.wgsl and every other family.
// CPU twin: src/reference.rs (`conv2d` on `to_nchw` of the input, `to_nhwc` of the result).

#import params
#import precision
#import tensors
#import config

struct Grid {
    threads: u32,    // invocations with work in this dispatch
    c_out_pad: u32,  // a group's output channels in the packed weights
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(2) var<storage, read> weight: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(7) var<uniform> grid: Grid;

const TAPS: u32 = KH * KW;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let t = (wid.x + wid.y * nwg.x) * WG + lid;
    if (t >= grid.threads) {
        return;
    }
    // Output channels fastest, then blocks of VX columns, rows and images.
    let x_blocks = (p.ow + VX - 1u) / VX;
    let oc = t % p.c_out;
    let r = t / p.c_out;
    let ox0 = (r % x_blocks) * VX;
    let oy = (r / x_blocks) % p.oh;
    let img = r / (x_blocks * p.oh);
    let g = oc / p.c_out_per_group;
    let n = oc % p.c_out_per_group;
    let x0 = i32(ox0 * STRIDE_W) - i32(p.pad_left);
    let y0 = i32(oy * STRIDE_H) - i32(p.pad_top);
    // Which columns of the row segment lie inside the image: the same for every row.
    var col_in: array<bool, SPAN_X>;
    for (var j = 0u; j < SPAN_X; j++) {
        let ix = x0 + i32(j);
        col_in[j] = ix >= 0 && ix < i32(p.w);
    }
    var acc: array<f32, VX>;
    for (var ic = 0u; ic < p.c_in_per_group; ic++) {
        let channel = p.in_offset + img * p.h * p.w * p.c_in + g * p.c_in_per_group + ic;
        let w_base = ((g * grid.c_out_pad + n) * p.c_in_per_group + ic) * TAPS;
        for (var ky = 0u; ky < KH; ky++) {
            let iy = y0 + i32(ky * DIL_H);
            let row_in = iy >= 0 && iy < i32(p.h);
            // The row segment the block's outputs read through this tap row, loaded once:
            // explicit zeros outside the image.
            var seg: array<f32, SPAN_X>;
            for (var j = 0u; j < SPAN_X; j++) {
                var v = 0.0;
                if (row_in && col_in[j]) {
                    v = load_input(channel + (u32(iy) * p.w + u32(x0 + i32(j))) * p.c_in);
                }
                seg[j] = v;
            }
            for (var kx = 0u; kx < KW; kx++) {
                let wv = weight[w_base + ky * KW + kx];
                for (var x = 0u; x < VX; x++) {
                    acc[x] = fma(seg[x * STRIDE_W + kx * DIL_W], wv, acc[x]);
                }
            }
        }
    }
    report_range();
    let b = bias[oc];
    for (var x = 0u; x < VX; x++) {
        if (ox0 + x < p.ow) {
            let pix = (img * p.oh + oy) * p.ow + ox0 + x;
            store_output(p.out_offset + pix * p.c_out + oc, activate(acc[x] + b));
        }
    }
}
