// The stem kernel: an implicit GEMM on cooperative matrices (f16 operands, f32 accumulation,
// f32 tensors in memory) for convolutions with few input channels per group — a network's
// first layer, such as AlexNet conv1. Three ideas, each against a cost measured in the
// gathering kernel (conv_coop.wgsl; BENCHMARKS.md, run 57: its K loop's per-step skeleton
// alone took 0.39 ms):
//
// 1. Space-to-depth by the strides, in both directions. Padded input row Y·SH+dy and
//    column X·SW+dx of channel c become slot s = (dy·SW + dx)·CG + c of "pixel" (Y, X), so
//    the strided KH×KW conv is a stride-1 TY×TX conv (TY = ⌈KH/SH⌉, TX = ⌈KW/SW⌉) over
//    SLOTS = SH·SW·CG channels, padded to CSP (a multiple of 16). For output (oy, ox) and
//    tap (ty, tx) the A operand is row oy+ty of that grid, columns ox+tx..:
//        A[ox][k] = ring[row(oy+ty)][(ox + tx)·CST + 16·j + k]    (K fragment (ty, tx, j))
//    a row-major matrix with row stride CST: every A fragment is one coopLoadT straight
//    from workgroup memory, no per-element gather. AlexNet: 3·4·4 = 48 slots, K 432 for
//    363 useful (×1.19).
// 2. Weights stationary in registers. Each warp owns one 16-channel N fragment and loads
//    its K_FRAGS B fragments once; there is no K loop and no weight traffic after that.
//    Hence the family's limit: K_FRAGS·4 registers per invocation (at most
//    MAX_STEM_K_FRAGS fragments, src/stem.rs).
// 3. Rows streamed. A workgroup walks a run of output rows of one image; each row needs
//    one new space-to-depth row, fetched into registers while the current row multiplies
//    and kept in a ring of TY + 1 rows: every input element is read from memory once per
//    workgroup. A row costs one workgroup barrier: the extra ring row lets a warp stash
//    the next row while slower warps still multiply this one, and each warp's epilogue
//    goes through scratch of its own, ordered by subgroup barriers. (The first version,
//    with a ring of TY rows and shared scratch, needed two barriers per row; they made the
//    warps' phases add up instead of overlap: BENCHMARKS.md, run 74.)
//
// Slots and taps that match no weight (slots ≥ SLOTS, taps kx ≥ KW or ky ≥ KH) meet zero
// weights; the pad slots hold zeros, but the surplus taps read real neighbouring inputs, so
// a NaN input can reach an output through a zero weight (the caveat on
// `KernelKind::CoopStem`, as on `CoopBand`).
//
// The header (tile constants, WARPS_M, WARPS_N, FM and the geometry SH, SW, CG, TY, TX,
// CSP, CST, BAND_COLS from src/stem.rs) and the per-fragment statements at the `//@STEM_*`
// markers come from src/kernel.rs (WGSL cannot index an array of cooperative matrices).
// Warps are local_invocation_index / 32: the host builds this kernel only where subgroups
// are 32 wide. CPU twin of the indexing: src/stem.rs (conv_stem); of the arithmetic:
// src/reference.rs (conv2d) with operands rounded to f16.

const FRAG: u32 = 16u;
const RING: u32 = TY + 1u;                        // space-to-depth rows in workgroup memory
const SLOTS: u32 = SH * SW * CG;
const ROW_ELEMS: u32 = BAND_COLS * CST;           // ring elements per space-to-depth row
const STAGE_COLS: u32 = BAND_COLS * SW;           // input columns per staged row
const STAGE_ELEMS: u32 = SH * CG * STAGE_COLS;    // input elements per staged row
const STAGE_ITERS: u32 = (STAGE_ELEMS + WG - 1u) / WG;
const PAD_SLOTS: u32 = CSP - SLOTS;
const PAD_DIV: u32 = max(PAD_SLOTS, 1u);         // (no division by zero where there are none)

@group(0) @binding(1) var<storage, read> input: array<f32>;
// f16, packed by the host as [group][k][n_pad], k = (ty·TX + tx)·CSP + s (src/stem.rs).
@group(0) @binding(2) var<storage, read> weight: array<f16>;
// The bias as one 16×16 row-major f32 matrix per 16 output channels (every row the same:
// [group][n_pad / 16][16][16], src/stem.rs): the accumulators start from it, so the
// epilogue neither loads nor adds a bias.
@group(0) @binding(4) var<storage, read> bias_tiles: array<f32>;
@group(0) @binding(5) var<storage, read_write> output: array<f32>;

var<workgroup> ring: array<f16, RING * ROW_ELEMS>;
var<workgroup> c_scratch: array<f32, WARPS_M * WARPS_N * 256u>;      // one fragment per warp
var<private> staged: array<f32, STAGE_ITERS>;

// The workgroup's tile: group, image, output rows r0..r1, first output column ox0 (band
// column 0 is output column xb = min(ox0, x_clamp)), first output channel n0 of the group.
struct Tile {
    g: u32,
    img: u32,
    r0: u32,
    r1: u32,
    ox0: u32,
    xb: u32,
    n0: u32,
}

// Global → registers: space-to-depth row `y` (input rows y·SH .. y·SH+SH-1 of the padded
// input, band columns xb..xb+BAND_COLS-1). Neighbouring invocations read neighbouring input
// columns (coalesced); zeros outside the input.
fn fetch_row(t: Tile, y: u32, inv: u32) {
    let plane = p.h * p.w;
    let img_base = p.in_offset + (t.img * p.c_in + t.g * CG) * plane;
    let iy0 = i32(y * SH) - i32(p.pad_top);
    let ix0 = i32(t.xb * SW) - i32(p.pad_left);
    for (var j = 0u; j < STAGE_ITERS; j++) {
        let e = inv + j * WG;
        let col = e % STAGE_COLS;
        let r = e / STAGE_COLS;           // dy·CG + c
        let iy = iy0 + i32(r / CG);
        let ix = ix0 + i32(col);
        var v = 0.0;
        if (e < STAGE_ELEMS && u32(iy) < p.h && u32(ix) < p.w) {
            v = input[img_base + (r % CG) * plane + u32(iy) * p.w + u32(ix)];
        }
        staged[j] = v;
    }
}

// Registers → ring row `slot`, as f16 (through the precision prelude: clamped and flagged
// beyond f16's range), each element at its slot (dy·SW + dx)·CG + c of band column col / SW.
fn stash_row(slot: u32, inv: u32) {
    for (var j = 0u; j < STAGE_ITERS; j++) {
        let e = inv + j * WG;
        if (e < STAGE_ELEMS) {
            let col = e % STAGE_COLS;
            let r = e / STAGE_COLS;
            let s = ((r / CG) * SW + col % SW) * CG + r % CG;
            ring[slot * ROW_ELEMS + (col / SW) * CST + s] = f16(to_operand(staged[j]));
        }
    }
}

// Where fragment f (0 ≤ f < BM/16) of the row starts: its first output column (the last
// fragments are moved left to end at OW: they recompute columns and do not store them),
// and its band column.
fn frag_x(t: Tile, f: u32) -> u32 {
    return min(t.ox0 + f * FRAG, p.x_clamp);
}
fn frag_band_col(t: Tile, f: u32) -> u32 {
    return min(frag_x(t, f) - t.xb, BAND_COLS + 1u - FRAG - TX);
}

// Writes fragment f of output row oy from the warp's scratch fragment `slot` (channels
// n_base.. of the tile; the bias is in it already), with the activation; skips columns
// another fragment owns, columns past the output and channels past the group. Each lane owns one column (lane % 16) of the
// channels lane / 16 + 2e: the address is computed once and stepped by two channel planes
// (per element, the first version's address arithmetic took ~30 instructions).
fn store_fragment(t: Tile, oy: u32, lane: u32, f: u32, slot: u32, n_base: u32) {
    let m = lane % FRAG;
    let ox = frag_x(t, f) + m;
    if (ox < t.ox0 + f * FRAG || ox >= p.ow) {
        return;
    }
    let n0 = t.n0 + n_base + lane / FRAG;          // this lane's first channel in the group
    let oc0 = t.g * p.c_out_per_group + n0;
    let step = 2u * p.oh * p.ow;
    let at = p.out_offset + ((t.img * p.c_out + oc0) * p.oh + oy) * p.ow + ox;
    let src = slot * 256u + (lane / FRAG) * FRAG + m;
    let relu = (p.flags & FLAG_RELU) != 0u;
    for (var e = 0u; e < 8u; e++) {
        if (n0 + 2u * e < p.c_out_per_group) {
            let v = c_scratch[src + e * 32u];
            output[at + e * step] = select(v, 0.0, relu && v < 0.0 && !is_nan(v));
        }
    }
}

//@STEM_DECLS

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) inv: u32) {
    // The tile is computed here, not in a function: naga's uniformity analysis takes a
    // function's result as non-uniform, and the row loop below holds barriers and
    // cooperative-matrix operations. Tiles are numbered n-tile fastest, then column tile,
    // row run, image and group.
    let tile = wid.x + wid.y * nwg.x;
    if (tile >= p.total_tiles) {
        return;
    }
    let nt = tile % p.n_tiles;
    let q1 = tile / p.n_tiles;
    let xt = q1 % p.x_tiles;
    let q2 = q1 / p.x_tiles;
    let rt = q2 % p.row_tiles;
    let q3 = q2 / p.row_tiles;
    let run = (p.oh + p.row_tiles - 1u) / p.row_tiles;   // rows per run (the host makes none empty)
    let ox0 = xt * BM;
    let t = Tile(q3 / p.batch, q3 % p.batch, rt * run, min(rt * run + run, p.oh), ox0, min(ox0, p.x_clamp), nt * BN);
    let warp = inv / 32u;
    let lane = inv % 32u;
    let wm = warp % WARPS_M;              // the warp's fragments wm·FM .. wm·FM+FM-1 of the row
    let wn = warp / WARPS_M;              // and its N fragment
    // This warp's weights, K fragment k at rows k·16.. of the group's packed weights.
    let w_base = t.g * K_FRAGS * FRAG * p.n_pad + t.n0 + wn * FRAG;
    let bias_at = ((t.g * p.n_pad + t.n0) / FRAG + wn) * 256u;
    //@STEM_WEIGHTS
    //@STEM_INIT
    // The pad slots are never staged: zero them once.
    for (var e = inv; e < RING * BAND_COLS * PAD_SLOTS; e += WG) {
        ring[(e / PAD_DIV) * CST + SLOTS + e % PAD_DIV] = f16(0.0);
    }
    // The ring starts with the run's first TY-1 rows; row TY-1 waits in registers.
    for (var y = 0u; y + 1u < TY; y++) {
        fetch_row(t, t.r0 + y, inv);
        stash_row((t.r0 + y) % RING, inv);
    }
    fetch_row(t, t.r0 + TY - 1u, inv);
    // The step is 1, but only the host knows it: with a known trip count NVIDIA's compiler
    // unrolled this loop 8 times (10 000 instructions, 251 registers: BENCHMARKS.md).
    let row_step = 1u + opaque_zero();
    for (var oy = t.r0; oy < t.r1; oy += row_step) {
        // Into the slot of row oy-2, which only output row oy-2 read: every warp is past
        // that row, as it is past the previous row's barrier.
        stash_row((oy + TY - 1u) % RING, inv);
        workgroupBarrier();
        if (oy + row_step < t.r1) {
            fetch_row(t, oy + TY, inv);     // in flight while this row multiplies
        }
        //@STEM_MMA
        // Each fragment through the warp's scratch; the accumulators restart from the bias.
        //@STEM_STORE
    }
    report_range();
}
