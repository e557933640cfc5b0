// The tiled implicit GEMM on the matrix units, through wgpu's experimental cooperative
// matrices: f16 operands (rounded by the precision prelude), f32 accumulation, f32 in and
// out of memory. Same operand loaders as conv_tiled.wgsl (gather.wgsl), A and B staged in
// workgroup memory as f16; each warp owns FM×FN 16×16 accumulator fragments covering a
// (16·FM)×(16·FN) sub-block. The header (tile constants, WARPS_M/N, FM/FN) and the
// per-fragment statements at the `//@FRAGMENT_*` markers come from src/kernel.rs (one
// statement per fragment: WGSL cannot index an array of cooperative matrices). Warps are local_invocation_index / 32: the host only
// builds this kernel where the subgroup size is 32.
// CPU twin: src/reference.rs (conv2d) with operands rounded to f16.

const FRAG: u32 = 16u;
// f16 elements per staged row; the pad of 8 keeps every row 16-byte aligned and shifts
// consecutive rows across banks.
const A_STRIDE: u32 = BM + 8u;
const B_STRIDE: u32 = BN + 8u;
const WARP_M: u32 = FM * FRAG;
const WARP_N: u32 = FN * FRAG;

var<workgroup> a_tile: array<f16, STAGES * BK * A_STRIDE>;     // A[k][m]
var<workgroup> b_tile: array<f16, STAGES * BK * B_STRIDE>;     // B[k][n]
var<workgroup> c_scratch: array<f32, WARPS_M * WARPS_N * 256u>; // one fragment per warp

fn store_a(buf: u32, k: u32, m: u32, v: f32) {
    a_tile[(buf * BK + k) * A_STRIDE + m] = f16(v);
}

// Weights are f16 in memory (rounded at upload).
alias WeightVec = vec4<f16>;

fn store_b(buf: u32, k: u32, n4: u32, v: WeightVec) {
    let i = (buf * BK + k) * B_STRIDE + n4 * 4u;
    b_tile[i] = v.x;
    b_tile[i + 1u] = v.y;
    b_tile[i + 2u] = v.z;
    b_tile[i + 3u] = v.w;
}

//@FRAGMENT_DECLS

// `who` = (wm0, wn0): the warp's first row and column in the block.
fn multiply(buf: u32, who: vec2<u32>) {
    let wm0 = who.x;
    let wn0 = who.y;
    for (var kk = 0u; kk < BK; kk += FRAG) {
        // A fragment (m × k) is column-major in a_tile, B fragment (k × n) row-major in b_tile.
        let a_at = (buf * BK + kk) * A_STRIDE + wm0;
        let b_at = (buf * BK + kk) * B_STRIDE + wn0;
        //@FRAGMENT_MMA
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
    //@FRAGMENT_INIT
    main_loop(t, blk, vec2<u32>(wm0, wn0));
    let scratch = warp * 256u;
    //@FRAGMENT_STORE
    report_range();
}
