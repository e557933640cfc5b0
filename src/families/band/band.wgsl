// The row-band implicit GEMM on cooperative matrices: f16 operands, f32 accumulation, f32
// tensors in memory. Where coop/coop.wgsl gathers every A element from global memory, this
// kernel stages the input band its output rows need once, coalesced, and then reads every
// A fragment straight out of it with one strided coopLoad. Opt-in: slower than
// coop/coop.wgsl on the H100 (1.0 vs 0.72 ms on AlexNet conv1).
//
// The layout that makes this work is a space-to-depth of the band by the column stride S:
// band column X holds input columns X·S .. X·S+S-1 of CHUNK_CH channels in CP = BK slots,
// slot c' = c·S + ph. For an output row, output column ox and tap (ky, kx = kx'·S + ph) read
// band[ky-row][ox + kx'][c']; so for a fixed kernel row the A operand is
//     A[ox][k] = band[row][ox·CP + k],   k = kx'·CP + c'  (0 ≤ k < TAPS·CP, TAPS = ⌈KW/S⌉)
// a row-major matrix with row stride CP. Slots that match no tap (kx ≥ KW, c ≥ C_in/g) meet
// zero weights; there the band holds zeros or neighbouring inputs (so a NaN input can reach
// an output through a zero weight: the family's documented caveat).
//
// A workgroup computes WG_ROWS output rows × FX fragments of 16 columns (chosen by the
// host from the output width; WG_ROWS·FX ≤ BM/16) × BN channels. The last
// fragment of a row is moved left to end at OW (it recomputes a few columns and does not
// store them), so no fragment reads past its row. Weights (f16, packed by the host as
// [group][chunk][ky][k][n_pad]) are staged one kernel row at a time into STAGES buffers,
// the next row's loaded after this row's multiply (B fragments read straight from the
// storage buffer were slower; loading them before the multiply, into registers held across
// it, was 4 % slower). The channel chunks are a
// compile-time count (CHUNKS): with one chunk, as for AlexNet, the accumulators are not
// live while the band is staged (145 → 130 registers). Still one workgroup per SM:
// the band, weight stages and scratch take ~45 KiB, and NVIDIA's Vulkan driver leaves
// about 51 KiB per SM to resident workgroups, so the staging of one workgroup is
// never hidden behind another's multiply. That, more than the gather it avoids, is why
// this kernel is slower than coop/coop.wgsl here.
//
// The header (tile constants, WARPS_M/N, FM/FN and the band geometry BAND_ROWS, BAND_COLS,
// SW, SH, DH, CHUNK_CH, K_FRAGS, FX, WG_ROWS) come from the generated `config` module and
// the per-fragment statements from the generated `fragment_*` modules (band/mod.rs); warps are
// local_invocation_index / 32 (the host builds this kernel only where subgroups are 32 wide).
// CPU twin of the indexing: band/mod.rs (conv_band); of the arithmetic: src/reference.rs
// (conv2d) with operands rounded to f16.

#import config
#import params
#import precision
#import row_grid

const FRAG: u32 = 16u;
const CP: u32 = BK;
const SLOTS: u32 = (CP + SW - 1u) / SW;           // channel slots per band column (last may be partial)
const N_COLS: u32 = BAND_COLS * SW;               // input columns in the band
const COL_ITERS: u32 = (N_COLS + WG - 1u) / WG;   // band columns per invocation
const ROW_ELEMS: u32 = BAND_COLS * CP;            // band elements per input row
const STAGE_ROWS: u32 = 8u;                       // input rows staged per step (1, 2, 4 and 8 measured)
const B_ROWS: u32 = K_FRAGS * FRAG;               // weight rows per kernel row
const TAPS: u32 = B_ROWS / CP;                    // band columns one output column reads
// The kernel rows the band was sized for: every band index below stays under BAND_ROWS and
// BAND_COLS by these constants alone, whatever the uniform says (no runtime bounds checks).
const KH_BAND: u32 = (BAND_ROWS - 1u - (WG_ROWS - 1u) * SH) / DH + 1u;
const B_VEC_PER_ROW: u32 = BN / 8u;
const B_LOADS: u32 = (B_ROWS * B_VEC_PER_ROW + WG - 1u) / WG;
// Rows of the weight stages are padded by 8 (16 bytes) against bank conflicts.
const B_STRIDE: u32 = BN + 8u;

@group(0) @binding(1) var<storage, read> input: array<f32>;
// 8 f16 weights per element (n_pad is a multiple of 16).
@group(0) @binding(2) var<storage, read> weight: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(5) var<storage, read_write> output: array<f32>;

var<workgroup> band: array<f16, BAND_ROWS * ROW_ELEMS>;
var<workgroup> b_tile: array<f16, STAGES * B_ROWS * B_STRIDE>;
var<workgroup> c_scratch: array<f32, WARPS_M * WARPS_N * 256u>; // one fragment per warp
var<private> b_next: array<vec4<u32>, B_LOADS>;

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
    let c = grid_tile(wid.x + wid.y * nwg.x);
    let ox0 = c.xt * FRAG * FX;
    return Tile(c.g, c.img, c.rt * WG_ROWS, ox0, min(ox0, grid.x_clamp), c.nt * BN);
}

// Fragment q (0 ≤ q < BM/16) of the workgroup: its output row (relative), and its first
// output column. Fragments past WG_ROWS·FX are idle: they read row WG_ROWS-1 and store nothing.
fn frag_row(q: u32) -> u32 {
    return min(q / FX, WG_ROWS - 1u);
}
fn frag_nominal_x(t: Tile, q: u32) -> u32 {
    return t.ox0 + (q % FX) * FRAG;
}
fn frag_x(t: Tile, q: u32) -> u32 {
    return min(frag_nominal_x(t, q), grid.x_clamp);
}
// Where fragment q's A operand starts in the band, for kernel row 0 and k = 0.
fn frag_band_offset(t: Tile, q: u32) -> u32 {
    let col = min(frag_x(t, q) - t.xb, BAND_COLS + 1u - FRAG - TAPS);
    return frag_row(q) * SH * ROW_ELEMS + col * CP;
}

// Global → band, for input channels chunk·CHUNK_CH .. +CHUNK_CH-1, as f16 (through the
// precision module: clamped and flagged beyond f16's range). Invocations take band
// columns, so a warp's loads are consecutive input columns of one row; every slot is
// written (zeros for padding, absent channels and the slots past CHUNK_CH·SW).
// STAGE_ROWS rows go together for every slot (their loads are issued before any store),
// under a row loop the compiler cannot unroll (its bound comes from the uniform). On the
// H100 one row at a time left every load's latency exposed and
// a fully unrolled stage was far slower still (register pressure beside the accumulators).
fn stage_band(t: Tile, chunk: u32, inv: u32) {
    // BAND_ROWS, from the uniform: a constant bound would unroll the row loop.
    let band_rows = min((WG_ROWS - 1u) * SH + (p.kh - 1u) * DH + 1u, BAND_ROWS);
    let c0 = chunk * CHUNK_CH;
    let iy0 = i32(t.oy0 * SH) - i32(p.pad_top);
    let plane = p.h * p.w;
    let img_base = p.in_offset + (t.img * p.c_in + t.g * p.c_in_per_group) * plane;
    for (var i = 0u; i < COL_ITERS; i++) {
        let col = inv + i * WG;
        let ph = col % SW;
        let ix = i32(t.xb * SW + col) - i32(p.pad_left);
        let x_ok = col < N_COLS && u32(ix) < p.w;
        let band_col = (col / SW) * CP + ph;
        for (var br = 0u; br < band_rows; br += STAGE_ROWS) {
            var v: array<array<f32, STAGE_ROWS>, SLOTS>;
            for (var cl = 0u; cl < SLOTS; cl++) {
                let c = c0 + cl;
                let ok = x_ok && cl < CHUNK_CH && c < p.c_in_per_group;
                let src = img_base + c * plane + u32(ix);
                v[cl] = array<f32, STAGE_ROWS>();
                for (var j = 0u; j < STAGE_ROWS; j++) {
                    let iy = iy0 + i32(br + j);
                    if (ok && br + j < band_rows && u32(iy) < p.h) {
                        v[cl][j] = input[src + u32(iy) * p.w];
                    }
                }
            }
            for (var cl = 0u; cl < SLOTS; cl++) {
                if (col < N_COLS && cl * SW + ph < CP) {
                    for (var j = 0u; j < STAGE_ROWS; j++) {
                        if (br + j < band_rows) {
                            band[(br + j) * ROW_ELEMS + band_col + cl * SW] = f16(checked_operand(v[cl][j]));
                        }
                    }
                }
            }
        }
    }
}

// Global → registers: the weights of kernel row `ky` of band `chunk`, 8 f16 per load.
fn fetch_weights(t: Tile, chunk: u32, ky: u32, inv: u32) {
    let row0 = ((t.g * CHUNKS + chunk) * p.kh + ky) * B_ROWS;
    for (var j = 0u; j < B_LOADS; j++) {
        let e = inv + j * WG;
        if (e < B_ROWS * B_VEC_PER_ROW) {
            b_next[j] = weight[((row0 + e / B_VEC_PER_ROW) * grid.n_pad + t.n0) / 8u + e % B_VEC_PER_ROW];
        }
    }
}

// Registers → b_tile[buf].
fn stash_weights(buf: u32, inv: u32) {
    for (var j = 0u; j < B_LOADS; j++) {
        let e = inv + j * WG;
        if (e < B_ROWS * B_VEC_PER_ROW) {
            let at = (buf * B_ROWS + e / B_VEC_PER_ROW) * B_STRIDE + (e % B_VEC_PER_ROW) * 8u;
            for (var i = 0u; i < 4u; i++) {
                let pair = unpack2x16float(b_next[j][i]);   // exact: f16 → f32 → f16
                b_tile[at + 2u * i] = f16(pair.x);
                b_tile[at + 2u * i + 1u] = f16(pair.y);
            }
        }
    }
}

#import fragment_decls

// Writes one accumulator fragment (block fragment q, channels n_base..n_base+15 of the
// block) through the warp's scratch, with bias and activation; skips columns another
// fragment owns, columns and rows past the output, and channels past the group.
fn store_fragment(t: Tile, warp: u32, lane: u32, q: u32, n_base: u32) {
    workgroupBarrier();
    let oy = t.oy0 + frag_row(q);
    let x_start = frag_x(t, q);
    let x_nominal = frag_nominal_x(t, q);
    let live = q < FX * WG_ROWS && oy < p.oh;
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
    if (wid.x + wid.y * nwg.x >= grid.total_tiles) {
        return;
    }
    let t = locate_tile(wid, nwg);
    let warp = inv / 32u;
    let lane = inv % 32u;
    let q0 = (warp % WARPS_M) * FM;          // the warp's first block fragment along M
    let wn0 = (warp / WARPS_M) * FN * FRAG;  // and its first channel
    #import fragment_init
    let kh = min(p.kh, KH_BAND);
    // Each chunk starts after the barrier that ends the previous one's last kernel row.
    for (var chunk = 0u; chunk < CHUNKS; chunk++) {
        fetch_weights(t, chunk, 0u, inv);
        stage_band(t, chunk, inv);
        stash_weights(0u, inv);
        workgroupBarrier();
        for (var ky = 0u; ky < kh; ky++) {
            let next = ky + 1u < kh;
            let b_base = (ky % STAGES) * B_ROWS * B_STRIDE + wn0;
            for (var kf = 0u; kf < K_FRAGS; kf++) {
                let a_off = ky * DH * ROW_ELEMS + kf * FRAG;
                let b_at = b_base + kf * FRAG * B_STRIDE;
                #import fragment_mma
            }
            if (next) {
                if (STAGES == 1u) {
                    workgroupBarrier();     // one buffer: everyone must be done reading it
                }
                fetch_weights(t, chunk, ky + 1u, inv);
                stash_weights((ky + 1u) % STAGES, inv);
            }
            workgroupBarrier();
        }
    }
    let scratch = warp * 256u;
    #import fragment_store
    report_range();
}
