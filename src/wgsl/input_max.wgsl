// The input-maximum pass of the F32 kernel on the matrix units: the largest finite
// magnitude of the chunk's input, as its f32 bits (non-negative floats order as their bits),
// which the staging pass and the kernel turn into a power-of-two scale (input_scale.wgsl).
// Infinities and NaN are left out: they are staged as they are, and the largest finite value
// alone decides the scale. A grid-stride loop, a tree over the workgroup, one atomic per
// workgroup into the chunk's word (cleared by the host before the compute pass).
// CPU twin: `input_scale_exponent` in families/nhwc/mod.rs (the scale from the maximum).

#import params
#import input_max_config

// f32, or the caller's f16 tensor (`F16_TENSORS`: widened, which keeps every value).
#ifdef F16_TENSORS
@group(0) @binding(1) var<storage, read> input: array<f16>;
#else
@group(0) @binding(1) var<storage, read> input: array<f32>;
#endif
@group(0) @binding(9) var<storage, read_write> input_max: atomic<u32>;

const FINITE_END: u32 = 0x7f800000u;   // the bits of +inf: magnitudes below it are finite

var<workgroup> partial: array<u32, MAX_WG>;

@compute @workgroup_size(MAX_WG)
fn main(@builtin(local_invocation_index) lid: u32,
        @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let total = p.batch * p.c_in * p.h * p.w;
    let stride = nwg.x * nwg.y * MAX_WG;
    var m = 0u;
    for (var e = (wid.x + wid.y * nwg.x) * MAX_WG + lid; e < total; e += stride) {
        let bits = bitcast<u32>(f32(input[p.in_offset + e])) & 0x7fffffffu;
        if (bits < FINITE_END) {
            m = max(m, bits);
        }
    }
    partial[lid] = m;
    workgroupBarrier();
    for (var width = MAX_WG / 2u; width > 0u; width /= 2u) {
        if (lid < width) {
            partial[lid] = max(partial[lid], partial[lid + width]);
        }
        workgroupBarrier();
    }
    if (lid == 0u && partial[0] != 0u) {
        atomicMax(&input_max, partial[0]);
    }
}
