// The depthwise family on channels-last tensors (`Layout::Nhwc`): one output element per
// invocation, output channels fastest, so a warp's loads and stores are runs of
// neighbouring channels of one pixel (the input channels a group reads sit side by side in
// NHWC). The taps of the invocation's output channel come from the family's packed weights
// ([groups][c_out_pad][C_in/groups][KH·KW]). Padded taps are explicit zeros that are
// multiplied, as in depthwise.wgsl and every other family.
// CPU twin: src/reference.rs (`conv2d` on `to_nchw` of the input, `to_nhwc` of the result).

#import params
#import precision
#import config

struct Grid {
    threads: u32,    // output elements of this dispatch
    c_out_pad: u32,  // a group's output channels in the packed weights
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(1) var<storage, read> input: array<f32>;
@group(0) @binding(2) var<storage, read> weight: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(5) var<storage, read_write> output: array<f32>;
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
    let oc = t % p.c_out;
    let pix = t / p.c_out;                    // (img · OH + oy) · OW + ox
    let ox = pix % p.ow;
    let oy = (pix / p.ow) % p.oh;
    let img = pix / (p.ow * p.oh);
    let g = oc / p.c_out_per_group;
    let n = oc % p.c_out_per_group;
    let x0 = i32(ox * STRIDE_W) - i32(p.pad_left);
    let y0 = i32(oy * STRIDE_H) - i32(p.pad_top);
    var acc = 0.0;
    for (var ic = 0u; ic < p.c_in_per_group; ic++) {
        let channel = p.in_offset + img * p.h * p.w * p.c_in + g * p.c_in_per_group + ic;
        let w_base = ((g * grid.c_out_pad + n) * p.c_in_per_group + ic) * TAPS;
        for (var ky = 0u; ky < KH; ky++) {
            let iy = y0 + i32(ky * DIL_H);
            for (var kx = 0u; kx < KW; kx++) {
                let ix = x0 + i32(kx * DIL_W);
                var v = 0.0;
                if (iy >= 0 && iy < i32(p.h) && ix >= 0 && ix < i32(p.w)) {
                    v = to_operand(input[channel + (u32(iy) * p.w + u32(ix)) * p.c_in]);
                }
                acc = fma(v, weight[w_base + ky * KW + kx], acc);
            }
        }
    }
    report_range();
    output[p.out_offset + pix * p.c_out + oc] = activate(acc + bias[oc]);
}
