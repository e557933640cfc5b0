// f16 × f16 → f32 cooperative-matrix rate with the operands read from workgroup memory, as
// the channels-last kernel reads them: a block of (WARPS_M·FM·16) × (WARPS_N·FN·16) outputs,
// A staged [m][k] and B [k][n] as f16 pairs with rows padded by 8 f16, every step loading
// each warp's FM A and FN B fragments at the next 16-deep K slice (the slices cycle through
// the tile's BK, so no load is loop-invariant) and running FM·FN multiply-adds. With
// `BARRIER_EVERY_K_STEP`, every BK-deep step ends at a workgroup barrier, as a kernel's K
// loop does. No global memory is read in the loop: the rate of the inner loop alone.
// Prepended by peak.rs: `const ITERS`, `WG`, `WARPS_M`, `FM`, `FN`, `BM`, `BN`, `BK`,
// `BARRIER_EVERY_K_STEP`, and the generated `fragment_*` text.

@group(0) @binding(0) var<storage, read> seeds: array<f16>;
@group(0) @binding(1) var<storage, read_write> sink: array<f32>;

const A_PSTRIDE: u32 = (BK + 8u) / 2u;
const B_PSTRIDE: u32 = (BN + 8u) / 2u;
const SLICES: u32 = BK / 16u;

var<workgroup> a_tile: array<vec2<f16>, BM * A_PSTRIDE>;
var<workgroup> b_tile: array<vec2<f16>, BK * B_PSTRIDE>;

//{fragment_decls}

@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_index) t: u32) {
    let s = arrayLength(&seeds);
    for (var i = t; i < BM * A_PSTRIDE; i += WG) {
        a_tile[i] = vec2<f16>(seeds[i % s], seeds[(i + 1u) % s]);
    }
    for (var i = t; i < BK * B_PSTRIDE; i += WG) {
        b_tile[i] = vec2<f16>(seeds[(i + 2u) % s], seeds[(i + 3u) % s]);
    }
    workgroupBarrier();
    let warp = t / 32u;
    let wm0 = (warp % WARPS_M) * FM * 16u;
    let wn0 = (warp / WARPS_M) * FN * 16u;
    //{fragment_init}
    for (var i = 0u; i < ITERS; i++) {
        let kk = (i % SLICES) * 16u;
        let a_at = wm0 * A_PSTRIDE + kk / 2u;
        let b_at = kk * B_PSTRIDE + wn0 / 2u;
        //{fragment_tile_loads}
        //{fragment_mma}
        if (BARRIER_EVERY_K_STEP && i % SLICES == SLICES - 1u) {
            workgroupBarrier();
        }
    }
    //{fragment_store}
}
