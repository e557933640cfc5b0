// fp32 FMA rate: every invocation runs eight independent multiply-add chains for ITERS
// steps (independent, so the rate is issue-bound rather than latency-bound). The sum is
// written only where it equals a value it never takes, which keeps the chains alive.
// Prepended by peak.rs: `const ITERS: u32` and the workgroup size `WG`.

@group(0) @binding(0) var<storage, read> seeds: array<f32>;
@group(0) @binding(1) var<storage, read_write> sink: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let m = seeds[0];
    let c = seeds[1];
    let x = f32(gid.x) * seeds[2];
    var x0 = x;
    var x1 = x + 1.0;
    var x2 = x + 2.0;
    var x3 = x + 3.0;
    var x4 = x + 4.0;
    var x5 = x + 5.0;
    var x6 = x + 6.0;
    var x7 = x + 7.0;
    for (var i = 0u; i < ITERS; i++) {
        // 4 × 8 multiply-adds per step, written out: NVIDIA's compiler left an inner loop
        // of four rolled, and its counter and branch halved the FMA rate.
        x0 = fma(x0, m, c);
        x1 = fma(x1, m, c);
        x2 = fma(x2, m, c);
        x3 = fma(x3, m, c);
        x4 = fma(x4, m, c);
        x5 = fma(x5, m, c);
        x6 = fma(x6, m, c);
        x7 = fma(x7, m, c);
        x0 = fma(x0, m, c);
        x1 = fma(x1, m, c);
        x2 = fma(x2, m, c);
        x3 = fma(x3, m, c);
        x4 = fma(x4, m, c);
        x5 = fma(x5, m, c);
        x6 = fma(x6, m, c);
        x7 = fma(x7, m, c);
        x0 = fma(x0, m, c);
        x1 = fma(x1, m, c);
        x2 = fma(x2, m, c);
        x3 = fma(x3, m, c);
        x4 = fma(x4, m, c);
        x5 = fma(x5, m, c);
        x6 = fma(x6, m, c);
        x7 = fma(x7, m, c);
        x0 = fma(x0, m, c);
        x1 = fma(x1, m, c);
        x2 = fma(x2, m, c);
        x3 = fma(x3, m, c);
        x4 = fma(x4, m, c);
        x5 = fma(x5, m, c);
        x6 = fma(x6, m, c);
        x7 = fma(x7, m, c);
    }
    let s = ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7));
    if (s == seeds[3]) {
        sink[gid.x % arrayLength(&sink)] = s;
    }
}
