// The direct kernel: one output element per invocation, weights in their original
// [C_out, C_in/groups, KH, KW] layout. The GPU-side oracle of the tiled kernels, the
// fallback when no tile config fits a device, and (until a depthwise family exists) the
// kernel of depthwise convolutions, where the tiled kernels' blocks are mostly padding. With
// f32 operands, or rounded to f16 by the precision module (the weights at upload).
// CPU twin: src/reference.rs (conv2d). Padding is explicit zeros that enter the products,
// as in every kernel: a padded tap of an infinite or NaN weight gives NaN (0 · inf), so the
// result does not depend on which kernel runs (README, "Semantics of special values").

#import params
#import precision

const DIRECT_WG: u32 = 64u;

@group(0) @binding(1) var<storage, read> input: array<f32>;
@group(0) @binding(2) var<storage, read> weight: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(5) var<storage, read_write> output: array<f32>;

@compute @workgroup_size(DIRECT_WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    // The grid may be folded into two dimensions (65 535 workgroups per dimension).
    let idx = (wid.x + wid.y * nwg.x) * DIRECT_WG + lid;
    let ohw = p.oh * p.ow;
    let per_image = p.c_out * ohw;
    if (idx >= p.batch * per_image) {
        return;
    }
    let img = idx / per_image;
    let rem = idx % per_image;
    let oc = rem / ohw;
    let pos = rem % ohw;
    let oy = pos / p.ow;
    let ox = pos % p.ow;
    let g = oc / p.c_out_per_group;

    var acc = bias[oc];
    let in_base = p.in_offset + (img * p.c_in + g * p.c_in_per_group) * p.h * p.w;
    let w_base = oc * p.k_total;
    // Zeros: a padded tap multiplies an explicit zero (IEEE: 0 × inf = NaN, as every kernel
    // and the reference); the other modes read the border from the input (uniform: one branch).
    let mode = pad_mode();
    for (var ic = 0u; ic < p.c_in_per_group; ic++) {
        for (var ky = 0u; ky < p.kh; ky++) {
            var iy = i32(oy * p.stride_h + ky * p.dil_h) - i32(p.pad_top);
            var row_in = iy >= 0 && iy < i32(p.h);
            if (!row_in && mode != 0u) {
                iy = pad_coord(iy, i32(p.h), mode);
                row_in = true;
            }
            for (var kx = 0u; kx < p.kw; kx++) {
                var ix = i32(ox * p.stride_w + kx * p.dil_w) - i32(p.pad_left);
                var col_in = ix >= 0 && ix < i32(p.w);
                if (!col_in && mode != 0u) {
                    ix = pad_coord(ix, i32(p.w), mode);
                    col_in = true;
                }
                var x = 0.0;
                if (row_in && col_in) {
                    x = to_operand(input[in_base + (ic * p.h + u32(iy)) * p.w + u32(ix)]);
                }
                acc = fma(x, weight[w_base + (ic * p.kh + ky) * p.kw + kx], acc);
            }
        }
    }
    report_range();
    output[p.out_offset + idx] = activate(acc);
}
