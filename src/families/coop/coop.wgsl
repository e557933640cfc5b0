// The tiled implicit GEMM on the matrix units, through wgpu's experimental cooperative
// matrices: f16 operands, f32 accumulation, f32 in and out of memory. Same operand loaders
// as tiled/tiled.wgsl (tiled/gather.wgsl), A and B staged in workgroup memory as f16 (as one f16
// each, or as the split kernel's high and low halves); each warp owns FM×FN 16×16
// accumulator fragments covering a (16·FM)×(16·FN) sub-block. The header (tile constants,
// WARPS_M/N, FM/FN) and the per-fragment statements (the generated `fragment_*` modules)
// come from coop/mod.rs (one statement per fragment: WGSL cannot index an array of
// cooperative matrices). Warps are local_invocation_index / 32: the host only builds this kernel where
// the subgroup size is 32.
// CPU twin: src/reference.rs (conv2d) with operands rounded to f16 (the f16 kernel), or
// src/reference.rs `conv2d` itself (the f16x3 kernel: see coop_operands_f16x3.wgsl).

#import config
#import params
#import precision
#import gather

const FRAG: u32 = 16u;
// f16 elements per staged operand row; the pad of 8 keeps every row 16-byte aligned and
// shifts consecutive rows across banks.
const A_STRIDE: u32 = BM + 8u;
const B_STRIDE: u32 = BN + 8u;
const WARP_M: u32 = FM * FRAG;
const WARP_N: u32 = FN * FRAG;

// The operand staging (tiles a_tile and b_tile, and the f16x3 kernel's low halves; store_a,
// store_b, WeightVec): one f16 per operand, or the f16x3 kernel's two halves.
#ifdef F16X3
#import operands_f16x3
#else
#import operands_f16
#endif

var<workgroup> c_scratch: array<f32, WARPS_M * WARPS_N * 256u>; // one fragment per warp

#import fragment_decls

// `who` = (wm0, wn0): the warp's first row and column in the block.
fn multiply(buf: u32, who: vec2<u32>) {
    let wm0 = who.x;
    let wn0 = who.y;
    for (var kk = 0u; kk < BK; kk += FRAG) {
        // A fragment (m × k) is column-major in a_tile, B fragment (k × n) row-major in b_tile.
        let a_at = (buf * BK + kk) * A_STRIDE + wm0;
        let b_at = (buf * BK + kk) * B_STRIDE + wn0;
        #import fragment_mma
    }
}

// Writes one accumulator fragment through the warp's scratch: coopStore, then every lane
// stores 8 of its 256 elements with bias and activation (rows past the problem skipped).
fn store_fragment(blk: Block, warp: u32, lane: u32, m_base: u32, n_base: u32) {
    workgroupBarrier();
    for (var e = 0u; e < 8u; e++) {
        let idx = lane + e * 32u;
        let m = idx % FRAG;
        let n = idx / FRAG;
        store_output(blk, m_base + m, n_base + n, c_scratch[warp * 256u + n * FRAG + m]);
    }
    workgroupBarrier();
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let blk = locate_block(wid, nwg);
    if (!blk.valid) {
        return;
    }
    let warp = t / 32u;
    let lane = t % 32u;
    let wm0 = (warp % WARPS_M) * WARP_M;
    let wn0 = (warp / WARPS_M) * WARP_N;
    #import fragment_init
    main_loop(t, blk, vec2<u32>(wm0, wn0));
    let scratch = warp * 256u;
    #import fragment_store
    report_range();
}
