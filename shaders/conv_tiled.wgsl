// The tiled, im2col-free implicit GEMM: C[m, n] = Σ_k A[m, k] · B[k, n] with
//   m = (image, oy, ox) over the chunk's output positions,
//   n = output channel within the workgroup's group,
//   k = (ic, ky, kx) over C_in/g · KH · KW,
// A gathered straight from the NCHW input (zero padding by bounds test), B from weights
// packed at upload as [groups][k_pad][n_pad] (zero-padded, so B loads need no test).
// The tile constants (BM, BN, BK, TM, TN, WG, STAGES) come from the header that
// src/kernel.rs writes from a TileConfig; there is one source for every config.
// CPU twin: src/reference.rs (conv2d).

@group(0) @binding(1) var<storage, read> input: array<f32>;
@group(0) @binding(2) var<storage, read> weight: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
// Gather table, one row per k (host-computed, so the inner loops never divide):
// x = element offset ic·H·W + ky·dh·W + kx·dw, y = ky·dh, z = kx·dw.
// Rows past K hold y = OUT_OF_RANGE, which fails the bounds test and yields 0.
@group(0) @binding(4) var<storage, read> ktab: array<vec4<i32>>;
@group(0) @binding(5) var<storage, read_write> output: array<f32>;

const RM: u32 = BM / TM;            // invocations along M
const RN: u32 = BN / TN;            // invocations along N
const BM4: u32 = BM / 4u;
const BN4: u32 = BN / 4u;
const A_LOADS: u32 = BM * BK / WG;                  // A elements each invocation gathers per K step
const A_ROW_STEP: u32 = WG / BK;                    // rows between one invocation's A elements
// A rows in workgroup memory are padded by one vec4: the loader writes BK different rows
// per warp, and the pad spreads them over all banks.
const A_STRIDE4: u32 = BM4 + 1u;
const B_LOADS: u32 = (BK * BN4 + WG - 1u) / WG;      // B vec4s each invocation loads per K step
const OUT_OF_RANGE: i32 = -1073741824;

// A stored k-major as vec4 along m, B k-major as vec4 along n. Invocation (tm, tn) reads
// its i-th A vec4 at i·RM + tm and its j-th B vec4 at j·RN + tn, so neighbouring
// invocations read neighbouring vec4s (no bank conflicts) and stores stay coalesced.
var<workgroup> a_tile: array<vec4<f32>, STAGES * BK * A_STRIDE4>;
var<workgroup> b_tile: array<vec4<f32>, STAGES * BK * BN4>;
// Per output row of the block: (element offset of its window origin, iy0, ix0, -).
var<workgroup> row_info: array<vec4<i32>, BM>;

var<private> a_next: array<f32, A_LOADS>;
var<private> b_next: array<vec4<f32>, B_LOADS>;
// The register tile, in groups of 4 rows: acc0 holds rows 0-3, acc1 rows 4-7, ... (TM ≤ 16).
// One array of TM×TN floats would be simpler, but NVIDIA's Vulkan compiler stopped keeping
// it in registers at 8×12 (27.7 ms vs 2.36 ms for 4×12 on the H100, BENCHMARKS.md run 1);
// groups of at most 4×16 floats stay in registers. Unused groups are dead code.
const ACC_GROUPS: u32 = TM / 4u;
var<private> acc0: array<array<vec4<f32>, TN / 4u>, 4>;
var<private> acc1: array<array<vec4<f32>, TN / 4u>, 4>;
var<private> acc2: array<array<vec4<f32>, TN / 4u>, 4>;
var<private> acc3: array<array<vec4<f32>, TN / 4u>, 4>;

fn acc_get(i: u32, j: u32) -> vec4<f32> {
    let r = i % 4u;
    switch (i / 4u) {
        case 0u: { return acc0[r][j]; }
        case 1u: { return acc1[r][j]; }
        case 2u: { return acc2[r][j]; }
        default: { return acc3[r][j]; }
    }
}

// Global → registers: K step `kt` of A (gathered) and B (packed weights).
// Invocation t gathers the tap k = t % BK for rows t / BK + j·A_ROW_STEP: neighbouring
// invocations read neighbouring taps (kx), i.e. neighbouring input columns, so a warp's
// loads are coalesced whatever the stride; and each invocation needs one table row per step.
fn fetch(kt: u32, t: u32, g: u32, n0: u32) {
    let tab = ktab[kt * BK + t % BK];
    for (var j = 0u; j < A_LOADS; j++) {
        let row = row_info[t / BK + j * A_ROW_STEP];
        let iy = row.y + tab.y;
        let ix = row.z + tab.z;
        var v = 0.0;
        if (u32(iy) < p.h && u32(ix) < p.w) {
            v = input[u32(row.x + tab.x)];
        }
        a_next[j] = v;
    }
    let k0 = kt * BK;
    let w_row0 = (g * p.k_tiles * BK + k0) * (p.n_pad / 4u) + n0 / 4u;
    for (var j = 0u; j < B_LOADS; j++) {
        let e = t + j * WG;
        if (e < BK * BN4) {
            b_next[j] = weight[w_row0 + (e / BN4) * (p.n_pad / 4u) + e % BN4];
        }
    }
}

// Registers → workgroup buffer `buf`.
fn stash(buf: u32, t: u32) {
    let k = t % BK;
    for (var j = 0u; j < A_LOADS; j++) {
        let m = t / BK + j * A_ROW_STEP;
        a_tile[(buf * BK + k) * A_STRIDE4 + m / 4u][m % 4u] = a_next[j];
    }
    for (var j = 0u; j < B_LOADS; j++) {
        let e = t + j * WG;
        if (e < BK * BN4) {
            b_tile[buf * BK * BN4 + e] = b_next[j];
        }
    }
}

fn multiply(buf: u32, tm: u32, tn: u32) {
    for (var k = 0u; k < BK; k++) {
        var a: array<vec4<f32>, TM / 4u>;
        var b: array<vec4<f32>, TN / 4u>;
        for (var i = 0u; i < TM / 4u; i++) {
            a[i] = a_tile[(buf * BK + k) * A_STRIDE4 + i * RM + tm];
        }
        for (var j = 0u; j < TN / 4u; j++) {
            b[j] = b_tile[(buf * BK + k) * BN4 + j * RN + tn];
        }
        for (var r = 0u; r < 4u; r++) {
            let a0 = vec4<f32>(a[0][r]);
            for (var j = 0u; j < TN / 4u; j++) {
                acc0[r][j] = fma(a0, b[j], acc0[r][j]);
            }
            if (ACC_GROUPS > 1u) {
                let a1 = vec4<f32>(a[min(1u, ACC_GROUPS - 1u)][r]);
                for (var j = 0u; j < TN / 4u; j++) {
                    acc1[r][j] = fma(a1, b[j], acc1[r][j]);
                }
            }
            if (ACC_GROUPS > 2u) {
                let a2 = vec4<f32>(a[min(2u, ACC_GROUPS - 1u)][r]);
                for (var j = 0u; j < TN / 4u; j++) {
                    acc2[r][j] = fma(a2, b[j], acc2[r][j]);
                }
            }
            if (ACC_GROUPS > 3u) {
                let a3 = vec4<f32>(a[min(3u, ACC_GROUPS - 1u)][r]);
                for (var j = 0u; j < TN / 4u; j++) {
                    acc3[r][j] = fma(a3, b[j], acc3[r][j]);
                }
            }
        }
    }
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    // Tiles are numbered n-tile fastest, so workgroups that run together share input rows.
    // The grid may be folded into two dimensions (65 535 workgroups per dimension).
    let tile = wid.x + wid.y * nwg.x;
    if (tile >= p.total_tiles) {
        return;
    }
    let nt = tile % p.n_tiles;
    let mt = (tile / p.n_tiles) % p.m_tiles;
    let g = tile / (p.n_tiles * p.m_tiles);
    let m0 = mt * BM;
    let n0 = nt * BN;
    let ohw = p.oh * p.ow;
    let hw = p.h * p.w;

    for (var r = t; r < BM; r += WG) {
        let m = m0 + r;
        var info = vec4<i32>(0, OUT_OF_RANGE, OUT_OF_RANGE, 0);
        if (m < p.m_total) {
            let img = m / ohw;
            let pos = m % ohw;
            let iy0 = i32((pos / p.ow) * p.stride_h) - i32(p.pad_top);
            let ix0 = i32((pos % p.ow) * p.stride_w) - i32(p.pad_left);
            let base = i32(p.in_offset + (img * p.c_in + g * p.c_in_per_group) * hw);
            info = vec4<i32>(base + iy0 * i32(p.w) + ix0, iy0, ix0, 0);
        }
        row_info[r] = info;
    }
    for (var r = 0u; r < 4u; r++) {
        for (var j = 0u; j < TN / 4u; j++) {
            acc0[r][j] = vec4<f32>(0.0);
            acc1[r][j] = vec4<f32>(0.0);
            acc2[r][j] = vec4<f32>(0.0);
            acc3[r][j] = vec4<f32>(0.0);
        }
    }
    workgroupBarrier();

    fetch(0u, t, g, n0);
    stash(0u, t);
    workgroupBarrier();

    let tm = t % RM;
    let tn = t / RM;
    for (var kt = 0u; kt < p.k_tiles; kt++) {
        let has_next = kt + 1u < p.k_tiles;
        if (has_next) {
            fetch(kt + 1u, t, g, n0);     // in flight while we multiply
        }
        multiply(kt % STAGES, tm, tn);
        if (has_next) {
            if (STAGES == 1u) {
                workgroupBarrier();       // one buffer: everyone must be done reading it
            }
            stash((kt + 1u) % STAGES, t);
        }
        workgroupBarrier();
    }

    // Epilogue: bias (zeros when the conv has none) and activation, fused in the store.
    for (var i = 0u; i < TM; i++) {
        let m = m0 + ((i / 4u) * RM + tm) * 4u + i % 4u;
        if (m >= p.m_total) {
            continue;
        }
        let img = m / ohw;
        let pos = m % ohw;
        let out_row = p.out_offset + (img * p.c_out + g * p.c_out_per_group) * ohw + pos;
        for (var j = 0u; j < TN; j++) {
            let n = n0 + ((j / 4u) * RN + tn) * 4u + j % 4u;
            if (n < p.c_out_per_group) {
                let v = acc_get(i, j / 4u)[j % 4u] + bias[g * p.c_out_per_group + n];
                output[out_row + n * ohw] = activate(v);
            }
        }
    }
}
