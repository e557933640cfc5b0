// The finishing pass of `coop-splitk-f16`: each invocation sums the S partial sums of one
// output position for a quad of output channels, which the channels-last kernel wrote as
// the outputs of S groups (`[n][OH·OW][S][K]` f32, slice s's channel k at s·K + k), in the
// order s = 0, 1, …, S − 1 (deterministic: no atomics, the same sum on every run), adds
// the bias and the activation, and writes the output: NCHW, or channels last
// (`CHANNELS_LAST`); f32, or f16 (`F16_TENSORS`).
// CPU twin: `coop_splitk_twin` in coop_splitk/mod.rs.

#import reduce_config
#import layout_config
#import params

@group(0) @binding(1) var<storage, read> partials: array<vec4<f32>>;
// The family's bias buffer: S·K zeros, which the kernel adds to the partial sums, then the
// K biases.
@group(0) @binding(3) var<storage, read> bias: array<vec4<f32>>;
#import output_tensor

// Quads fastest on a channels-last output (a warp reads and writes runs of channels),
// positions fastest on an NCHW one (a warp writes runs of a channel's positions).
@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = gid.x + gid.y * nwg.x * WG;
    if (e >= p.batch * PLANE * KQ) {
        return;
    }
    var kq = e % KQ;
    var at = e / KQ;
    if (!CHANNELS_LAST) {
        let pos = e % PLANE;
        kq = (e / PLANE) % KQ;
        at = (e / (PLANE * KQ)) * PLANE + pos;
    }
    // `at`: the image's position n·PLANE + pos.
    let first = at * S * KQ + kq;
    var acc = partials[first];
    for (var s = 1u; s < S; s++) {
        acc += partials[first + s * KQ];
    }
    let y = activate4(acc + bias[S * KQ + kq]);
    let n = at / PLANE;
    let pos = at % PLANE;
    for (var j = 0u; j < 4u; j++) {
        let k = 4u * kq + j;
        var o = p.out_offset + (n * 4u * KQ + k) * PLANE + pos;
        if (CHANNELS_LAST) {
            o = p.out_offset + at * 4u * KQ + k;
        }
        output[o] = output_value(y[j]);
    }
}
