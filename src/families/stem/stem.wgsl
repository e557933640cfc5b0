// The stem kernel: an implicit GEMM on cooperative matrices (f16 operands, f32 accumulation,
// f32 tensors in memory) for convolutions with few input channels per group — a network's
// first layer, such as AlexNet conv1. Three ideas, each against a cost measured in the
// gathering kernel (coop/coop.wgsl: on AlexNet conv1 its K loop's per-step skeleton alone
// took 0.39 ms):
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
// 2. Weights stationary in registers. Each multiplying warp owns one 16-channel N fragment
//    and loads its K_FRAGS B fragments once; there is no K loop and no weight traffic after
//    that. Hence the family's limit: K_FRAGS·4 registers per invocation (at most
//    MAX_STEM_K_FRAGS fragments, stem/mod.rs).
// 3. Rows streamed by specialised warps. A workgroup walks a run of output rows of one
//    image through a ring of TY + 1 space-to-depth rows. The first WARPS_M·WARPS_N warps
//    multiply; the HELPERS warps after them stage and store. In pass i the multiplying
//    warps work on row i (reading ring rows i .. i+TY-1, writing their sums to scratch
//    buffer i mod 2), while the helpers put row i+TY (loaded in pass i-1) into the free
//    ring row, start row i+TY+1's loads and store output row i-1 from the other scratch
//    buffer: one barrier per pass, and the phases overlap. (Every warp doing every phase
//    between barriers made the phases add up.) Every input element
//    is read from memory once per workgroup.
//
//    Each role runs its own loop, with as many barriers (one before the first pass, one
//    per pass), so the loads a helper keeps in flight across a barrier hold no registers
//    in the multiplying warps' code. SPIR-V asks every invocation to reach the same
//    barrier instruction; here the roles reach two different ones, equally often. NVIDIA's
//    hardware barrier counts arrivals, and the H100 tests pass, but it is outside the
//    spec: selection makes this kernel a default only on NVIDIA (src/select.rs).
//
// Slots and taps that match no weight (slots ≥ SLOTS, taps kx ≥ KW or ky ≥ KH) meet zero
// weights; the pad slots hold zeros, but the surplus taps read real neighbouring inputs, so
// a NaN input can reach an output through a zero weight (the family's documented caveat, as
// the row-band family's).
//
// The generated `config` module (tile constants, the warp layout WARPS_M, WARPS_N, FM,
// HELPERS of StemLayout and the geometry SH, SW, CG, TY, TX, CSP, CST, BAND_COLS) and the
// per-fragment statements (the generated `stem_*` modules) come from stem/mod.rs (WGSL
// cannot index an array of cooperative matrices). Warps are
// local_invocation_index / 32: the host builds this kernel only where subgroups are 32
// wide. Roles go by warp, so the multiplying warps' cooperative-matrix operations run in
// control flow uniform per subgroup, as SPIR-V asks (the diagnostic directive below turns off
// naga's rule that would have them uniform per workgroup). CPU twin of the indexing:
// stem/mod.rs (conv_stem); of the arithmetic: src/reference.rs (conv2d) with operands
// rounded to f16.


diagnostic(off, derivative_uniformity);

#import config
#import params
#import precision
#import row_grid

const FRAG: u32 = 16u;
const RING: u32 = TY + 1u;                        // space-to-depth rows in workgroup memory
const MMA_WARPS: u32 = WARPS_M * WARPS_N;
const HELPER_THREADS: u32 = HELPERS * 32u;
const SCR: u32 = BM + 4u;                         // scratch stride: channel-major, 4 banks apart
const TILE: u32 = BN * SCR;                       // scratch elements per output row
const CH_STEP: u32 = max(HELPER_THREADS / BM, 1u); // channels a row store covers per pass
const STORE_ITERS: u32 = (BN + CH_STEP - 1u) / CH_STEP;
const SLOTS: u32 = SH * SW * CG;
const ROW_ELEMS: u32 = BAND_COLS * CST;           // ring elements per space-to-depth row
const STAGE_COLS: u32 = BAND_COLS * SW;           // input columns per staged row
const STAGE_ELEMS: u32 = SH * CG * STAGE_COLS;    // input elements per staged row
const STAGE_ITERS: u32 = (STAGE_ELEMS + HELPER_THREADS - 1u) / HELPER_THREADS;
const PAD_SLOTS: u32 = CSP - SLOTS;
const PAD_DIV: u32 = max(PAD_SLOTS, 1u);         // (no division by zero where there are none)

@group(0) @binding(1) var<storage, read> input: array<f32>;
// f16, packed by the host as [group][k][n_pad], k = (ty·TX + tx)·CSP + s (stem/mod.rs).
@group(0) @binding(2) var<storage, read> weight: array<f16>;
// The bias as one 16×16 row-major f32 matrix per 16 output channels (every row the same:
// [group][n_pad / 16][16][16], stem/mod.rs): a fragment's accumulator restarts from its
// matrix each row (a second one, where there is one, from zero), so the helpers neither
// load nor add a bias (adding it there made them slower).
@group(0) @binding(4) var<storage, read> bias_tiles: array<f32>;
@group(0) @binding(5) var<storage, read_write> output: array<f32>;

var<workgroup> ring: array<f16, RING * ROW_ELEMS>;
var<workgroup> c_scratch: array<f32, 2u * TILE>;  // [output row mod 2][channel][column]
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

// Global → registers, by helper invocation h: space-to-depth row `y` (input rows
// y·SH .. y·SH+SH-1 of the padded input, band columns xb..xb+BAND_COLS-1). Neighbouring
// invocations read neighbouring input columns (coalesced); zeros outside the input.
fn fetch_row(t: Tile, y: u32, h: u32) {
    let plane = p.h * p.w;
    let img_base = p.in_offset + (t.img * p.c_in + t.g * CG) * plane;
    let iy0 = i32(y * SH) - i32(p.pad_top);
    let ix0 = i32(t.xb * SW) - i32(p.pad_left);
    for (var j = 0u; j < STAGE_ITERS; j++) {
        let e = h + j * HELPER_THREADS;
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

// Registers → ring row `slot`, as f16 (through the precision module: clamped and flagged
// beyond f16's range), each element at its slot (dy·SW + dx)·CG + c of band column col / SW.
fn stash_row(slot: u32, h: u32) {
    for (var j = 0u; j < STAGE_ITERS; j++) {
        let e = h + j * HELPER_THREADS;
        if (e < STAGE_ELEMS) {
            let col = e % STAGE_COLS;
            let r = e / STAGE_COLS;
            let s = ((r / CG) * SW + col % SW) * CG + r % CG;
            ring[slot * ROW_ELEMS + (col / SW) * CST + s] = f16(checked_operand(staged[j]));
        }
    }
}

// Where fragment f (0 ≤ f < BM/16) of the row starts: its first output column (the last
// fragments are moved left to end at OW: they recompute columns and do not store them),
// and its band column.
fn frag_x(t: Tile, f: u32) -> u32 {
    return min(t.ox0 + f * FRAG, grid.x_clamp);
}
fn frag_band_col(t: Tile, f: u32) -> u32 {
    return min(frag_x(t, f) - t.xb, BAND_COLS + 1u - FRAG - TX);
}

// Stores output row oy of the tile from scratch buffer `buf`, with the activation, by
// helper invocation h: column m = h mod BM of channels h / BM + k·CH_STEP (neighbours store
// neighbouring columns). A column another fragment owns (the last fragments recompute
// columns) or past the output is skipped whole; the address is computed once and stepped.
// All the loads come before all the stores: with a load and a store per pass (the driver
// does not unroll the loop) each store waited for its load, and the helpers were the
// kernel's bottleneck.
fn store_row(t: Tile, oy: u32, buf: u32, h: u32) {
    let m = h % BM;
    let f = m / FRAG;
    let ox = frag_x(t, f) + m % FRAG;
    if (ox < t.ox0 + f * FRAG || ox >= p.ow) {
        return;
    }
    let relu = (p.flags & FLAG_RELU) != 0u;
    let n_first = h / BM;
    let plane = p.oh * p.ow;
    let at = p.out_offset + (t.img * p.c_out * p.oh + oy) * p.ow + ox
        + (t.g * p.c_out_per_group + t.n0 + n_first) * plane;
    let src = buf + n_first * SCR + m;
    // All loads first, then all stores (one loop with both kept them in turn, unrolled or not).
    var v: array<f32, STORE_ITERS>;
    for (var k = 0u; k < STORE_ITERS; k++) {
        // (Channels past the tile, where CH_STEP does not divide BN, read its last channel:
        // the other buffer is being written.)
        v[k] = c_scratch[src + min(k * CH_STEP, BN - 1u - n_first) * SCR];
    }
    // Every channel of the tile in the group and no activation (AlexNet conv1): stores alone.
    if (BN % CH_STEP == 0u && t.n0 + BN <= p.c_out_per_group && !relu) {
        for (var k = 0u; k < STORE_ITERS; k++) {
            output[at + k * CH_STEP * plane] = v[k];
        }
        return;
    }
    for (var k = 0u; k < STORE_ITERS; k++) {
        let n = n_first + k * CH_STEP;
        if (n < BN && t.n0 + n < p.c_out_per_group) {
            output[at + k * CH_STEP * plane] = select(v[k], 0.0, relu && v[k] < 0.0 && !is_nan(v[k]));
        }
    }
}

#import stem_decls

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) inv: u32) {
    // Tested here, not through grid_tile: naga's uniformity analysis takes a function's
    // result as non-uniform, and the barriers below need this return to be uniform.
    let tile = wid.x + wid.y * nwg.x;
    if (tile >= grid.total_tiles) {
        return;
    }
    let c = grid_tile(tile);
    let run = (p.oh + grid.row_tiles - 1u) / grid.row_tiles;   // rows per run (the host makes none empty)
    let ox0 = c.xt * BM;
    let t = Tile(c.g, c.img, c.rt * run, min(c.rt * run + run, p.oh), ox0, min(ox0, grid.x_clamp), c.nt * BN);
    let warp = inv / 32u;
    let wm = warp % WARPS_M;                       // a multiplying warp's fragments wm·FM ..
    let wn = min(warp / WARPS_M, WARPS_N - 1u);    // and its N fragment
    let h = inv - min(inv, MMA_WARPS * 32u);       // a helper's index among the helpers
    // The pad slots are never staged: zero them once.
    for (var e = inv; e < RING * BAND_COLS * PAD_SLOTS; e += WG) {
        ring[(e / PAD_DIV) * CST + SLOTS + e % PAD_DIV] = f16(0.0);
    }
    // The step is 1, but only the host knows it: with a known trip count NVIDIA's compiler
    // unrolled the row loop 8 times (10 000 instructions, 251 registers). One
    // pass more than the run has rows: the helpers store the last row in it.
    let row_step = 1u + opaque_zero();
    // Each role has its code and its loop, with as many barriers (see the note on them
    // above).
    if (warp < MMA_WARPS) {
        // The warp's weights, K fragment k at rows k·16.. of the group's packed weights,
        // loaded while the helpers stage the run's first rows.
        let w_base = t.g * K_FRAGS * FRAG * grid.n_pad + t.n0 + wn * FRAG;
        let bias_at = ((t.g * grid.n_pad + t.n0) / FRAG + wn) * 256u;
        let scratch_at = wn * FRAG * SCR + wm * FM * FRAG;
        #import stem_weights
        #import stem_init
        workgroupBarrier();
        for (var i = t.r0; i <= t.r1; i += row_step) {
            if (i < t.r1) {
                let buf = (i % 2u) * TILE;
                #import stem_mma
                #import stem_scratch
            }
            workgroupBarrier();
        }
    } else {
        // The run's first TY rows, then row TY's loads in flight.
        for (var y = 0u; y < TY; y++) {
            fetch_row(t, t.r0 + y, h);
            stash_row((t.r0 + y) % RING, h);
        }
        if (t.r0 + row_step < t.r1) {
            fetch_row(t, t.r0 + TY, h);
        }
        workgroupBarrier();
        for (var i = t.r0; i <= t.r1; i += row_step) {
            // Row i+TY (fetched in the previous pass) goes to the ring row of row i-1, which
            // no warp reads any more (the multiplying warps read rows i .. i+TY-1); row
            // i+TY+1's loads stay in flight until the next pass; then output row i-1.
            if (i + row_step < t.r1) {
                stash_row((i + TY) % RING, h);
            }
            if (i + 2u * row_step < t.r1) {
                fetch_row(t, i + TY + 1u, h);
            }
            if (i > t.r0) {
                store_row(t, i - 1u, ((i - 1u) % 2u) * TILE, h);
            }
            workgroupBarrier();
        }
    }
    report_range();
}
