// The row-band implicit GEMM on cooperative matrices: f16 operands, f32 accumulation, f32
// tensors in memory. Where conv_coop.wgsl gathers every A element from global memory, this
// kernel stages the input band its output rows need once, coalesced, and then reads every
// A fragment straight out of it with one strided coopLoad.
//
// The layout that makes this work is a space-to-depth of the band by the column stride S:
// band column X holds input columns X·S .. X·S+S-1 of CC channels in CP = BK slots,
// slot c'= c·S + ph. For an output row, output column ox and tap (ky, kx = kx'·S + ph) read
// band[ky-row][ox + kx'][c' ]; so for a fixed kernel row the A operand is
//     A[ox][k] = band[row][ox·CP + k],   k = kx'·CP + c'  (0 ≤ k < KW'·CP, KW' = ⌈KW/S⌉)
// a row-major matrix with row stride CP. Slots that match no tap (kx ≥ KW, c ≥ C_in/g) meet
// zero weights; the band holds finite values there (zeros or neighbouring inputs).
//
// A workgroup computes WG_ROWS output rows × FX fragments of 16 columns (both runtime,
// chosen by the host from the output width; WG_ROWS·FX ≤ BM/16) × BN channels. The last
// fragment of a row is moved left to end at OW (it recomputes a few columns and does not
// store them), so no fragment reads past its row. Weights (f16, packed by the host as
// [group][chunk][ky][k][n_pad]) are staged one kernel row at a time into STAGES buffers
// (with 2, the next row's weights are copied while this row multiplies): B fragments read
// straight from the storage buffer took 2.7 ms instead of ... (BENCHMARKS.md run 26).
//
// The header (tile constants, WARPS_M/N, FM/FN, BAND_CAP, B_ROWS) and the per-fragment statements
// at the `//@FRAGMENT_*` markers come from src/kernel.rs; warps are
// local_invocation_index / 32 (the host builds this kernel only where subgroups are 32 wide).
// CPU twin: src/reference.rs (conv2d) with operands rounded to f16.

const FRAG: u32 = 16u;
const CP: u32 = BK;

@group(0) @binding(1) var<storage, read> input: array<f32>;
// 8 f16 weights per element (n_pad is a multiple of 16).
@group(0) @binding(2) var<storage, read> weight: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(5) var<storage, read_write> output: array<f32>;

var<workgroup> band: array<f16, BAND_CAP>;
// One kernel row of weights per stage: B_ROWS = k_frags·16 rows of BN channels, rows
// padded by 8 (16 bytes) against bank conflicts.
const B_STRIDE: u32 = BN + 8u;
var<workgroup> b_tile: array<f16, STAGES * B_ROWS * B_STRIDE>;
var<workgroup> c_scratch: array<f32, WARPS_M * WARPS_N * 256u>; // one fragment per warp

// The block a workgroup computes. Tiles are numbered n-tile fastest, then column tile,
// row tile, image and group, so workgroups that run together share input rows.
struct Tile {
    g: u32,
    img: u32,
    oy0: u32,   // first output row
    ox0: u32,   // first output column (nominal start of fragment column 0)
    xb: u32,    // band column 0 = the leftmost fragment start
    n0: u32,    // first output channel within the group
}

fn locate_tile(wid: vec3<u32>, nwg: vec3<u32>) -> Tile {
    let tile = wid.x + wid.y * nwg.x;
    let nt = tile % p.n_tiles;
    let r1 = tile / p.n_tiles;
    let xt = r1 % p.x_tiles;
    let r2 = r1 / p.x_tiles;
    let yt = r2 % p.row_tiles;
    let r3 = r2 / p.row_tiles;
    let ox0 = xt * FRAG * p.fx;
    return Tile(r3 / p.batch, r3 % p.batch, yt * p.wg_rows, ox0, min(ox0, p.x_clamp), nt * BN);
}

// Fragment q (0 ≤ q < BM/16) of the workgroup: its output row (relative), and its first
// output column. Fragments past WG_ROWS·FX are idle: they read row WG_ROWS-1 and store nothing.
fn frag_row(q: u32) -> u32 {
    return min(q / p.fx, p.wg_rows - 1u);
}
fn frag_nominal_x(t: Tile, q: u32) -> u32 {
    return t.ox0 + (q % p.fx) * FRAG;
}
fn frag_x(t: Tile, q: u32) -> u32 {
    return min(frag_nominal_x(t, q), p.x_clamp);
}
// Where fragment q's A operand starts in the band, for kernel row 0 and k = 0.
fn frag_band_offset(t: Tile, q: u32) -> u32 {
    return (frag_row(q) * p.stride_h * p.band_cols + frag_x(t, q) - t.xb) * CP;
}

// Global → band, for input channels chunk·CC .. chunk·CC+CC-1, as f16 (through the
// precision prelude: clamped and flagged beyond f16's range). Invocations take band
// columns, so a warp's loads are consecutive input columns of one row; every slot is
// written (zeros for padding, absent channels and the slots past CC·S).
fn stage_band(t: Tile, chunk: u32, inv: u32) {
    let s = p.stride_w;
    let n_cols = p.band_cols * s;
    let slots = (CP + s - 1u) / s;
    let c0 = chunk * p.chunk_ch;
    let iy0 = i32(t.oy0 * p.stride_h) - i32(p.pad_top);
    let plane = p.h * p.w;
    let img_base = p.in_offset + (t.img * p.c_in + t.g * p.c_in_per_group) * plane;
    for (var col = inv; col < n_cols; col += WG) {
        let ph = col % s;
        let ix = i32(t.xb * s + col) - i32(p.pad_left);
        let x_ok = u32(ix) < p.w;
        let band_col = (col / s) * CP + ph;
        // Slot cl·S + ph must exist (CP need not be a multiple of S).
        for (var cl = 0u; cl < slots && cl * s + ph < CP; cl++) {
            let c = c0 + cl;
            let ok = x_ok && cl < p.chunk_ch && c < p.c_in_per_group;
            let src = img_base + c * plane + u32(ix);
            for (var br = 0u; br < p.band_rows; br++) {
                let iy = iy0 + i32(br);
                var v = 0.0;
                if (ok && u32(iy) < p.h) {
                    v = to_operand(input[src + u32(iy) * p.w]);
                }
                band[br * p.band_cols * CP + band_col + cl * s] = f16(v);
            }
        }
    }
}

// Global → b_tile[buf]: the weights of kernel row `ky` of band `chunk`, 8 per load.
fn stage_weights(t: Tile, chunk: u32, ky: u32, buf: u32, inv: u32) {
    let rows = p.k_frags * FRAG;
    let row0 = ((t.g * p.chunks + chunk) * p.kh + ky) * rows;
    let per_row = BN / 8u;
    for (var e = inv; e < rows * per_row; e += WG) {
        let r = e / per_row;
        let c8 = e % per_row;
        let v = weight[((row0 + r) * p.n_pad + t.n0) / 8u + c8];
        let at = (buf * B_ROWS + r) * B_STRIDE + c8 * 8u;
        for (var i = 0u; i < 4u; i++) {
            let pair = unpack2x16float(v[i]);   // exact: f16 → f32 → f16
            b_tile[at + 2u * i] = f16(pair.x);
            b_tile[at + 2u * i + 1u] = f16(pair.y);
        }
    }
}

//@FRAGMENT_DECLS

// Writes one accumulator fragment (block fragment q, channels n_base..n_base+15 of the
// block) through the warp's scratch, with bias and activation; skips columns another
// fragment owns, columns and rows past the output, and channels past the group.
fn store_fragment(t: Tile, warp: u32, lane: u32, q: u32, n_base: u32) {
    workgroupBarrier();
    let oy = t.oy0 + frag_row(q);
    let x_start = frag_x(t, q);
    let x_nominal = frag_nominal_x(t, q);
    let live = q < p.fx * p.wg_rows && oy < p.oh;
    for (var e = 0u; e < 8u; e++) {
        let idx = lane + e * 32u;
        let m = idx % FRAG;
        let n = t.n0 + n_base + idx / FRAG;
        let ox = x_start + m;
        if (live && ox >= x_nominal && ox < p.ow && n < p.c_out_per_group) {
            let oc = t.g * p.c_out_per_group + n;
            let at = p.out_offset + ((t.img * p.c_out + oc) * p.oh + oy) * p.ow + ox;
            output[at] = activate(c_scratch[warp * 256u + (idx / FRAG) * FRAG + m] + bias[oc]);
        }
    }
    workgroupBarrier();
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) inv: u32) {
    // Tested here, not through locate_tile: naga's uniformity analysis takes a function's
    // result as non-uniform, and the cooperative-matrix operations below need this return
    // to be uniform.
    if (wid.x + wid.y * nwg.x >= p.total_tiles) {
        return;
    }
    let t = locate_tile(wid, nwg);
    let warp = inv / 32u;
    let lane = inv % 32u;
    let q0 = (warp % WARPS_M) * FM;          // the warp's first block fragment along M
    let wn0 = (warp / WARPS_M) * FN * FRAG;  // and its first channel
    //@FRAGMENT_INIT
    let band_row_step = p.dil_h * p.band_cols * CP;
    for (var chunk = 0u; chunk < p.chunks; chunk++) {
        if (chunk > 0u) {
            workgroupBarrier();             // everyone is done with the previous band
        }
        stage_band(t, chunk, inv);
        stage_weights(t, chunk, 0u, 0u, inv);
        workgroupBarrier();
        for (var ky = 0u; ky < p.kh; ky++) {
            let buf = ky % STAGES;
            let next = ky + 1u < p.kh;
            if (STAGES > 1u && next) {
                stage_weights(t, chunk, ky + 1u, (ky + 1u) % STAGES, inv);
            }
            for (var kf = 0u; kf < p.k_frags; kf++) {
                let a_off = ky * band_row_step + kf * FRAG;
                let b_at = (buf * B_ROWS + kf * FRAG) * B_STRIDE + wn0;
                //@FRAGMENT_MMA
            }
            if (STAGES == 1u && next) {
                workgroupBarrier();         // one buffer: everyone must be done reading it
                stage_weights(t, chunk, ky + 1u, 0u, inv);
            }
            workgroupBarrier();
        }
    }
    let scratch = warp * 256u;
    //@FRAGMENT_STORE
    report_range();
}
