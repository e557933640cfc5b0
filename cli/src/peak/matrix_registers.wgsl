// f16 × f16 → f32 cooperative-matrix rate from registers: each warp loads FM A and FN B
// 16×16 fragments once and runs ITERS steps of FM·FN multiply-adds into FM·FN independent
// accumulators — the matrix units' rate with no memory traffic, the ceiling of any
// cooperative-matrix kernel on this device. All warps store their accumulators to the same
// place at the end (the values are not used; the stores keep the work alive).
// Prepended by peak.rs: `const ITERS: u32`, `WG`, and the generated `fragment_*` text.

@group(0) @binding(0) var<storage, read> seeds: array<f16>;
@group(0) @binding(1) var<storage, read_write> sink: array<f32>;

//{fragment_decls}

@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_index) t: u32) {
    //{fragment_loads}
    //{fragment_init}
    for (var i = 0u; i < ITERS; i++) {
        //{fragment_mma}
    }
    //{fragment_store}
}
