// The tiled, im2col-free implicit GEMM on the SIMT units: C[m, n] = Σ_k A[m, k] · B[k, n]
//   m = (image, oy, ox) over the chunk's output positions,
//   n = output channel within the workgroup's group,
//   k = (ic, ky, kx) over C_in/g · KH · KW.
// Operands come through gather.wgsl; each invocation accumulates a TM×TN register tile.
// The tile constants come from the generated `config` module (a TileConfig's): one source
// for every config, f32 operands or f16-rounded ones (the precision module).
// CPU twin: src/reference.rs (conv2d).

#import config
#import params
#import precision
#import gather

const RM: u32 = BM / TM;            // invocations along M
const RN: u32 = BN / TN;            // invocations along N
const BM4: u32 = BM / 4u;
// A rows in workgroup memory are padded by one vec4: the loader writes BK different rows
// per warp, and the pad spreads them over all banks.
const A_STRIDE4: u32 = BM4 + 1u;

// A stored k-major as vec4 along m, B k-major as vec4 along n. Invocation (tm, tn) reads
// its i-th A vec4 at i·RM + tm and its j-th B vec4 at j·RN + tn, so neighbouring
// invocations read neighbouring vec4s (no bank conflicts) and stores stay coalesced.
var<workgroup> a_tile: array<vec4<f32>, STAGES * BK * A_STRIDE4>;
var<workgroup> b_tile: array<vec4<f32>, STAGES * BK * BN4>;

fn store_a(buf: u32, k: u32, m: u32, v: f32) {
    a_tile[(buf * BK + k) * A_STRIDE4 + m / 4u][m % 4u] = v;
}

alias WeightVec = vec4<f32>;

fn store_b(buf: u32, k: u32, n4: u32, v: WeightVec) {
    b_tile[(buf * BK + k) * BN4 + n4] = v;
}

// The register tile, in groups of 4 rows: acc0 holds rows 0-3, acc1 rows 4-7, ... (TM ≤ 16).
// One array of TM×TN floats would be simpler, but NVIDIA's Vulkan compiler stopped keeping
// it in registers at 8×12 (27.7 ms vs 2.36 ms for 4×12 on the H100);
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

// `who` = (tm, tn): the invocation's column of A vec4s and of B vec4s.
fn multiply(buf: u32, who: vec2<u32>) {
    let tm = who.x;
    let tn = who.y;
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
    let blk = locate_block(wid, nwg);
    if (!blk.valid) {
        return;
    }
    for (var r = 0u; r < 4u; r++) {
        for (var j = 0u; j < TN / 4u; j++) {
            acc0[r][j] = vec4<f32>(0.0);
            acc1[r][j] = vec4<f32>(0.0);
            acc2[r][j] = vec4<f32>(0.0);
            acc3[r][j] = vec4<f32>(0.0);
        }
    }
    let tm = t % RM;
    let tn = t / RM;
    main_loop(t, blk, vec2<u32>(tm, tn));

#ifdef VEC4_OUTPUT
    // Each group of 4 register rows is 4 consecutive output positions: one vec4 per column,
    // neighbouring invocations writing neighbouring vec4s.
    for (var g = 0u; g < TM / 4u; g++) {
        let m_local = (g * RM + tm) * 4u;
        for (var j = 0u; j < TN; j++) {
            let n_local = ((j / 4u) * RN + tn) * 4u + j % 4u;
            let c = j % 4u;
            let rows = vec4<f32>(acc_get(g * 4u, j / 4u)[c], acc_get(g * 4u + 1u, j / 4u)[c],
                                 acc_get(g * 4u + 2u, j / 4u)[c], acc_get(g * 4u + 3u, j / 4u)[c]);
            store_output4(blk, m_local, n_local, rows);
        }
    }
#else
    for (var i = 0u; i < TM; i++) {
        let m_local = ((i / 4u) * RM + tm) * 4u + i % 4u;
        for (var j = 0u; j < TN; j++) {
            let n_local = ((j / 4u) * RN + tn) * 4u + j % 4u;
            store_output(blk, m_local, n_local, acc_get(i, j / 4u)[j % 4u]);
        }
    }
#endif
    report_range();
}
