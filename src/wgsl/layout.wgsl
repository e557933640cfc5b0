// The layout passes of a channels-last (`Layout::Nhwc`) convolution whose kernel reads and
// writes NCHW: before it, the chunk's NHWC input (binding 1) into an NCHW scratch
// (binding 5); after it, the kernel's NCHW output scratch (binding 1) into the chunk's NHWC
// output (binding 5). One invocation per element, in the order of the NCHW side; C, H, W
// are the tensor's (input or output), OFFSET_IN / OFFSET_OUT say which side sits at the
// chunk's offset in its bound window (`Params.in_offset` for the input pass,
// `Params.out_offset` for the output pass). Composed per problem (`layout_config`).
// CPU twin: `reference::to_nchw` / `reference::to_nhwc`.

#import layout_config
#import params

@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(5) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = gid.x + gid.y * nwg.x * 256u;
    if (e >= p.batch * C * H * W) {
        return;
    }
    // e indexes the NCHW side: (n, c, y, x).
    let x = e % W;
    let y = (e / W) % H;
    let c = (e / (W * H)) % C;
    let n = e / (W * H * C);
    let nhwc = ((n * H + y) * W + x) * C + c;
#ifdef TO_NCHW
    dst[e] = src[p.in_offset + nhwc];
#else
    dst[p.out_offset + nhwc] = src[e];
#endif
}
