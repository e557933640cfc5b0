// The split-K family's finishing pass: each invocation sums one output's S partial sums, which
// the tiled kernel wrote as the outputs of S groups (`[N][S·K][OH][OW]`, group s's output k at
// channel s·K + k), in the order s = 0, 1, …, S − 1 (deterministic: no atomics, the same sum on
// every run), adds the bias and the activation, and writes the output (`[N][K][OH][OW]`).
// CPU twin: src/families/splitk/mod.rs (`splitk_twin`), against src/reference.rs.

#import params
#import config

@group(0) @binding(1) var<storage, read> partials: array<f32>;
// The family's bias buffer: S·K zeros, which the tiled kernel adds to the partial sums, then
// the K biases.
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(5) var<storage, read_write> output: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let t = (wid.x + wid.y * nwg.x) * WG + lid;
    let per_image = K * PLANE;
    if (t >= p.batch * per_image) {
        return;
    }
    let img = t / per_image;
    let within = t % per_image;
    var acc = 0.0;
    for (var s = 0u; s < S; s++) {
        acc += partials[(img * S + s) * per_image + within];
    }
    output[p.out_offset + img * per_image + within] = activate(acc + bias[S * K + within / PLANE]);
}
