// Implicit GEMM on the matrix units over a channels-last f16 input staged by stage.wgsl (or
// the caller's f16 channels-last tensor read in place: `IN_PLACE_INPUT`):
// K runs over chunks of one K step's channels, each chunk through every tap (the K table
// and the weight packing, nhwc/mod.rs), so for one output position the K step's channels
// are contiguous and every A load is a 16-byte vector of 8 f16, with no bounds
// test where the padding is in the staged input (read in place with zero padding, one test
// of the row's mask of taps inside the image: `BORDER_TAPS`). A and B are staged in workgroup memory
// row-major ([m][k] and [k][n], rows padded by 8 f16), the next K step's vectors are loaded
// into registers before this step's multiply-adds, and each warp owns FM×FN 16×16 f32
// accumulator fragments (the generated `fragment_*` modules, as in coop/coop.wgsl).
// Output: NCHW or channels last, f32 or f16 (`F16_TENSORS`), with bias and activation,
// stored straight from the fragments where it can be and else through a per-warp scratch
// fragment (f16 channels last: in quads of channels where the groups' channels allow).
// CPU twins (nhwc/mod.rs): `stage_input` + `conv_staged`; read in place, `conv_in_place`
// and `window_taps`.

#import config
#import layout_config
#import params
#import precision
#ifdef SCALED_INPUT
// F32 on the matrix units: the staging pass scaled the input by `input_scale()`.
#import input_scale

// The sums carry the weights' scale (`p.out_scale` is its inverse, a power of two) and the
// input's: undone as 2^e with e the sum of both exponents, applied as two factors within
// f32's normal range that move the same way, so that a finite result never passes through
// inf (huge weights on tiny inputs) or a needless subnormal.
fn sums_exponent() -> i32 {
    let weights = i32((bitcast<u32>(p.out_scale) >> 23u) & 0xffu) - 127;
    return weights - input_scale_exponent();
}
fn unscale_first() -> f32 {
    return pow2(clamp(sums_exponent(), -126, 127));
}
fn unscale_second() -> f32 {
    let e = sums_exponent();
    return pow2(e - clamp(e, -126, 127));
}
#else
fn unscale_first() -> f32 {
    return p.out_scale;
}
fn unscale_second() -> f32 {
    return 1.0;
}
#endif

// The staged input: [n][HP][WP][C8] vectors of 8 f16 (the chunk's images). Where
// `IN_PLACE_INPUT`, the caller's f16 channels-last tensor itself (whole vectors of channels
// per group; HP, WP its own height and width), from element `p.in_offset` of the bound
// window on; with zero padding around it where `BORDER_TAPS` (each row's taps inside the
// image are its mask in `row_taps`, and only those are loaded).
@group(0) @binding(1) var<storage, read> staged: array<vec4<u32>>;
// Weights [groups][K_PAD][N_PAD] f16, 8 per vector, K in the K table's order with each
// group's channels padded to whole vectors; zeros past K and past the group's channels.
// `DIAGONAL`: [blocks][taps][16][BN], each K step's diagonal 16×16 blocks (`pack_diagonal`).
@group(0) @binding(2) var<storage, read> weight: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
// Per K vector (8 channels of one tap): its offset in vectors from an output position's
// window origin; NO_TAP past K. With `BORDER_TAPS`, that offset and the tap's index in the
// window (31, a bit no row's mask holds, past K).
#ifdef BORDER_TAPS
alias KEntry = vec2<u32>;
#else
alias KEntry = u32;
#endif
@group(0) @binding(4) var<storage, read> ktab: array<KEntry>;
// The output: f32, or the caller's f16 tensor (`F16_TENSORS`), which only the scratch path
// of the epilogue writes (a cooperative store writes the f32 fragment's own element type).
#ifdef F16_TENSORS
#import f16_bits
#ifdef QUAD_STORES
// Channels last with each group's output channels in whole quads: written 4 f16 at a time.
@group(0) @binding(5) var<storage, read_write> output: array<vec4<f16>>;
#else
@group(0) @binding(5) var<storage, read_write> output: array<f16>;
fn output_value(v: f32) -> f16 {
    return to_f16(v);
}
#endif
#else
@group(0) @binding(5) var<storage, read_write> output: array<f32>;
fn output_value(v: f32) -> f32 {
    return v;
}
#endif

// Written by the host (`StagedGrid`, same field order).
struct Grid {
    k_steps: u32,      // K_PAD / BK
    n_pad: u32,        // the group's output channels padded to whole BN blocks
    m_tiles: u32,
    n_tiles: u32,
    total_tiles: u32,
    hp: u32,           // staged rows and columns per image (read in place: the caller's H, W)
    wp: u32,
    c8: u32,           // vectors per staged pixel
    cg8: u32,          // vectors per group
    w_lo: u32,         // f16x3: where the weights' low halves start, in vectors
    _pad0: u32,
    _pad1: u32,
}
@group(0) @binding(7) var<uniform> grid: Grid;

const FRAG: u32 = 16u;
const NO_TAP: u32 = 0xffffffffu;
const BK8: u32 = BK / 8u;
const BN8: u32 = BN / 8u;
// Staged rows in quads of f16, padded by 8 f16 (16 bytes) so that neighbouring rows start in
// other banks.
const A_QSTRIDE: u32 = (BK + 8u) / 4u;                // quads per staged A row [m][k]
const B_QSTRIDE: u32 = (BN + 8u) / 4u;                // quads per staged B row [k][n]
#ifdef DIAGONAL
// Grouped convolutions whose groups each take as many input as output channels, 8 or 16
// (coop_grouped/mod.rs): a block's BN channels are several groups, each K step one tap of
// all their input channels (BK = BN), and the weights block-diagonal. Each 16 columns' B is
// its 16 × 16 diagonal block, so B is 16 rows per step, and column block j of the warp
// multiplies only A's matching 16 channels.
const B_ROWS: u32 = FRAG;
#else
const B_ROWS: u32 = BK;
#endif
const A_VECS: u32 = BM * BK8 / WG;                    // A vectors each invocation loads per step
const B_VECS: u32 = (B_ROWS * BN8 + WG - 1u) / WG;
const WARP_M: u32 = FM * FRAG;
const WARP_N: u32 = FN * FRAG;

// The tiles hold quads of f16 (each loaded vector of 8 f16 is two neighbouring quads: two
// 8-byte stores, where pairs took four 4-byte ones and ran VGG-16's f16 layers of 128 and 256
// channels 1-2.5 % slower on the H200); the cooperative loads read them as f16 matrices with
// their stride counted in quads. Every workgroup variable here is a whole number of 16-byte
// granules (`portable::check_workgroup_granules`): NVIDIA's driver appears to place them one
// after another, and one of 4 or 8 bytes made the kernel write wrong results.
var<workgroup> a_tile: array<vec4<f16>, STAGES * BM * A_QSTRIDE>;
var<workgroup> b_tile: array<vec4<f16>, STAGES * B_ROWS * B_QSTRIDE>;
#ifdef F16X3
// f16x3: the operands' low halves, staged like the high ones (the staging pass writes the
// input's low halves after the chunk's high ones; the weights' low halves follow theirs).
// Each multiply step forms hi·hi + (hi·lo + lo·hi) · LO_WEIGHT (coop/operands_f16x3.wgsl
// derives the error bound).
const LO_WEIGHT: f32 = 1.0 / 2048.0;
var<workgroup> a_lo_tile: array<vec4<f16>, STAGES * BM * A_QSTRIDE>;
var<workgroup> b_lo_tile: array<vec4<f16>, STAGES * B_ROWS * B_QSTRIDE>;
var<private> a_next_lo: array<vec4<u32>, A_VECS>;
var<private> b_next_lo: array<vec4<u32>, B_VECS>;
#endif
var<workgroup> c_scratch: array<f32, WARPS_M * WARPS_N * 256u>;
// Per block row: (window origin in staged vectors, or -1 past the problem; output offset).
// With `BORDER_TAPS` the origin may be any value, -1 included; rows past the problem are
// those whose mask of taps is empty.
var<workgroup> row_info: array<vec2<i32>, BM>;
#ifdef BORDER_TAPS
// Per block row: bit t set where tap t of its window lies inside the image (none past the
// problem). The origin itself may then lie outside the image, and below 0.
var<workgroup> row_taps: array<u32, BM>;
#endif

var<private> a_next: array<vec4<u32>, A_VECS>;
// The window origins (and masks) of the rows this invocation loads A for, which are the
// same at every K step: kept in registers, not read from workgroup memory at each step
// (which ran VGG-16's 512-channel layers 5 % slower on the H100).
var<private> a_origin: array<i32, A_VECS>;
#ifdef BORDER_TAPS
var<private> a_taps: array<u32, A_VECS>;
#endif
var<private> b_next: array<vec4<u32>, B_VECS>;

#import fragment_decls

#import block

#ifdef BORDER_TAPS
// The mask of a window's taps inside the image, its top-left pixel at (y, x).
fn window_taps(y: i32, x: i32) -> u32 {
    var taps = 0u;
    for (var ky = 0u; ky < p.kh; ky++) {
        let inside = u32(y + i32(ky * p.dil_h)) < p.h;
        for (var kx = 0u; kx < p.kw; kx++) {
            if (inside && u32(x + i32(kx * p.dil_w)) < p.w) {
                taps |= 1u << (ky * p.kw + kx);
            }
        }
    }
    return taps;
}
#endif

fn init_rows(t: u32, b: Block) {
    let ohw = p.oh * p.ow;
    for (var r = t; r < BM; r += WG) {
        let m = b.m0 + r;
        var info = vec2<i32>(-1, -1);
#ifdef BORDER_TAPS
        var taps = 0u;
#endif
        if (m < p.m_total) {
            let img = m / ohw;
            let pos = m % ohw;
#ifdef BORDER_TAPS
            let y = i32((pos / p.ow) * p.stride_h) - i32(p.pad_top);
            let x = i32((pos % p.ow) * p.stride_w) - i32(p.pad_left);
            taps = window_taps(y, x);
            var origin = u32(((i32(img * grid.hp) + y) * i32(grid.wp) + x) * i32(grid.c8)) + b.g * grid.cg8;
#else
            let y = (pos / p.ow) * p.stride_h;
            let x = (pos % p.ow) * p.stride_w;
            var origin = ((img * grid.hp + y) * grid.wp + x) * grid.c8 + b.g * grid.cg8;
#endif
#ifdef IN_PLACE_INPUT
            // Whole vectors: each image holds a multiple of 8 elements, so the chunk's start
            // in its window does too.
            origin += p.in_offset / 8u;
#endif
            // The output element of channel 0 of the group: NCHW, or channels last
            // (`CHANNELS_LAST`, where the kernel writes the caller's NHWC tensor itself).
            var out = p.out_offset + (img * p.c_out + b.g * p.c_out_per_group) * ohw + pos;
            if (CHANNELS_LAST) {
                out = p.out_offset + m * p.c_out + b.g * p.c_out_per_group;
            }
            info = vec2<i32>(i32(origin), i32(out));
        }
        row_info[r] = info;
#ifdef BORDER_TAPS
        row_taps[r] = taps;
#endif
    }
    workgroupBarrier();
    for (var j = 0u; j < A_VECS; j++) {
        let row = t / BK8 + j * (WG / BK8);
        a_origin[j] = row_info[row].x;
#ifdef BORDER_TAPS
        a_taps[j] = row_taps[row];
#endif
    }
}

// Global → registers: K step `ks` of A (8 channels of one tap per vector) and B.
// Invocation t loads K vector t % BK8 of rows t / BK8 + j·(WG / BK8). Called for every
// step in order (`entry_ahead`).
// The K table's entry of this invocation's K vector at the next step, loaded one step
// ahead: read in the step it is used, its latency came before every A load's (the A
// addresses depend on it), and VGG-16's and AlexNet's layers ran 11–19 % slower on the H100.
var<private> entry_ahead: KEntry;
fn fetch(ks: u32, t: u32, b: Block) {
    let entry = entry_ahead;
    entry_ahead = ktab[min(ks + 1u, grid.k_steps - 1u) * BK8 + t % BK8];
#ifdef BORDER_TAPS
    let tap = entry.x;
    let tap_bit = 1u << entry.y;
#else
    let tap = entry;
#endif
    for (var j = 0u; j < A_VECS; j++) {
        let origin = a_origin[j];
        var v = vec4<u32>(0u);
#ifdef F16X3
        var lo = vec4<u32>(0u);
#endif
#ifdef BORDER_TAPS
        // Wrapping u32 arithmetic: the origin may lie before the tensor, the tap never does.
        if ((a_taps[j] & tap_bit) != 0u) {
#else
        if (origin >= 0 && tap != NO_TAP) {
#endif
            v = staged[u32(origin) + tap];
#ifdef F16X3
            lo = staged[staged_lo() + u32(origin) + tap];
#endif
        }
        a_next[j] = v;
#ifdef F16X3
        a_next_lo[j] = lo;
#endif
    }
    let w0 = (b.g * grid.k_steps + ks) * B_ROWS * (grid.n_pad / 8u) + b.n0 / 8u;
    for (var j = 0u; j < B_VECS; j++) {
        let e = t + j * WG;
        if (e < B_ROWS * BN8) {
            b_next[j] = weight[w0 + (e / BN8) * (grid.n_pad / 8u) + e % BN8];
#ifdef F16X3
            b_next_lo[j] = weight[grid.w_lo + w0 + (e / BN8) * (grid.n_pad / 8u) + e % BN8];
#endif
        }
    }
}

// A loaded vector of 8 f16 as its quad `i` (exact: unpack2x16float widens f16 bit patterns,
// and naga has no bitcast from u32 to f16 vectors).
fn quad(v: vec4<u32>, i: u32) -> vec4<f16> {
    return vec4<f16>(vec2<f16>(unpack2x16float(v[2u * i])), vec2<f16>(unpack2x16float(v[2u * i + 1u])));
}

fn store_quads_a(at: u32, j: u32) {
    a_tile[at] = quad(a_next[j], 0u);
    a_tile[at + 1u] = quad(a_next[j], 1u);
#ifdef F16X3
    a_lo_tile[at] = quad(a_next_lo[j], 0u);
    a_lo_tile[at + 1u] = quad(a_next_lo[j], 1u);
#endif
}

fn store_quads_b(at: u32, j: u32) {
    b_tile[at] = quad(b_next[j], 0u);
    b_tile[at + 1u] = quad(b_next[j], 1u);
#ifdef F16X3
    b_lo_tile[at] = quad(b_next_lo[j], 0u);
    b_lo_tile[at + 1u] = quad(b_next_lo[j], 1u);
#endif
}

#ifdef F16X3
// Where the staged low halves start: after the chunk's high halves.
fn staged_lo() -> u32 {
    return p.batch * grid.hp * grid.wp * grid.c8;
}
#endif

#ifdef IN_PLACE_INPUT
// The input read in place has had no staging pass to clamp and flag its values: ±inf, the
// only f16 values beyond the range, are flagged (the flagged run's output is not specified).

// Whether a vector of 8 f16 holds ±inf: a half's magnitude is inf's (0x7c00) where the
// masked word XOR inf's bits has a zero half, which the borrow of subtracting one from each
// half exposes in its top bit.
fn holds_infinity(v: vec4<u32>) -> bool {
    let y = (v & vec4<u32>(0x7fff7fffu)) ^ vec4<u32>(0x7c007c00u);
    return any(((y - vec4<u32>(0x00010001u)) & ~y & vec4<u32>(0x80008000u)) != vec4<u32>(0u));
}

#ifdef SUM_WATCH
// Testing each loaded vector cost 5–10 % of a layer with a long K (VGG-16's 512-channel
// layers on the H100), and less than this on K of 64 and 128. Where the output is stored in
// quads and K is longer, the epilogue watches the sums instead: f16 products of finite
// values cannot overflow an f32 sum, so a window that holds ±inf (or NaN) makes every sum of its row non-finite (0 · inf is NaN), the sums of its
// group's first 16 channels included. The invocations that store those (blocks of the first
// output channels of their group, the warps' first fragment column) note each such row
// (bit 2·i + e: row wm0 + 16·i + lane / 4 + 8·e, its quads' rows) and afterwards read the
// row's window again, testing each value: rare, exact, and without a barrier. A diagonal
// GEMM's columns 16·j … 16·j + 15 sum its input channels 16·j … 16·j + 15 only: there
// every fragment column watches (0 · inf is NaN, so a zero weight does not hide one).
var<private> nonfinite_rows: u32;

fn watch_sums(blk: Block, warp: u32, q: u32, e: u32, m_base: u32, n_base: u32) {
#ifndef DIAGONAL
    if (blk.n0 + n_base != 0u) {
        return;
    }
#endif
    let s = warp * 256u + (q / 4u) * FRAG + (q % 4u) * 4u;
    let bits = vec4<u32>(bitcast<u32>(c_scratch[s]), bitcast<u32>(c_scratch[s + 1u]),
        bitcast<u32>(c_scratch[s + 2u]), bitcast<u32>(c_scratch[s + 3u]));
    if (any((bits & vec4<u32>(0x7f800000u)) == vec4<u32>(0x7f800000u))) {
        nonfinite_rows |= 1u << (((m_base % WARP_M) / FRAG) * 2u + e);
    }
}

fn find_infinities(lane: u32, wm0: u32) {
    var rows = nonfinite_rows;
    while (rows != 0u) {
        let k = firstTrailingBit(rows);
        rows &= rows - 1u;
        let row = wm0 + (k / 2u) * FRAG + lane / 4u + (k % 2u) * 8u;
        let origin = row_info[row].x;
        for (var kv = 0u; kv < grid.k_steps * BK8; kv++) {
#ifdef BORDER_TAPS
            let entry = ktab[kv];
            let tap = entry.x;
            let inside = (row_taps[row] & (1u << entry.y)) != 0u;
#else
            let tap = ktab[kv];
            let inside = tap != NO_TAP;
#endif
            if (inside && holds_infinity(staged[u32(origin) + tap])) {
                out_of_range = true;
            }
        }
    }
}
#else
// Every loaded vector is tested (`stash`).
fn note_infinities(v: vec4<u32>) {
    out_of_range = out_of_range || holds_infinity(v);
}
#endif
#endif

// Registers → workgroup buffer `buf`.
fn stash(buf: u32, t: u32) {
    for (var j = 0u; j < A_VECS; j++) {
#ifdef IN_PLACE_INPUT
#ifndef SUM_WATCH
        note_infinities(a_next[j]);
#endif
#endif
        let row = t / BK8 + j * (WG / BK8);
        store_quads_a((buf * BM + row) * A_QSTRIDE + (t % BK8) * 2u, j);
    }
    for (var j = 0u; j < B_VECS; j++) {
        let e = t + j * WG;
        if (e < B_ROWS * BN8) {
            store_quads_b((buf * B_ROWS + e / BN8) * B_QSTRIDE + (e % BN8) * 2u, j);
        }
    }
}

// `who` = (wm0, wn0): the warp's first row and column in the block.
fn multiply(buf: u32, who: vec2<u32>) {
    let wm0 = who.x;
    let wn0 = who.y;
#ifdef DIAGONAL
    // The warp's columns wn0 + 16·j take A's channels wn0 + 16·j (the step's K is the
    // block's channels at one tap) against B's diagonal block j.
    let a_at = (buf * BM + wm0) * A_QSTRIDE + wn0 / 4u;
    let b_at = buf * B_ROWS * B_QSTRIDE + wn0 / 4u;
    #import fragment_mma
#else
    for (var kk = 0u; kk < BK; kk += FRAG) {
        // A (m × k) and B (k × n) fragments, both row-major in their tiles.
        let a_at = (buf * BM + wm0) * A_QSTRIDE + kk / 4u;
        let b_at = (buf * BK + kk) * B_QSTRIDE + wn0 / 4u;
        #import fragment_mma
    }
#endif
}

// Channels apart in the output: OH·OW in NCHW, 1 channels last.
fn out_channel_stride() -> u32 {
    return select(p.oh * p.ow, 1u, CHANNELS_LAST);
}

#ifdef QUAD_STORES
// The bias of the 4 channels from `n_base` + 4·(lane % 4) on: the quad a lane stores in every
// row of a fragment whose first channel is `n_base` (zeros past the group's channels). Loaded
// for all of a warp's fragment columns before the epilogue's first barrier, so their latency
// is paid once, not once per fragment behind a barrier.
fn quad_bias(blk: Block, n_base: u32, lane: u32) -> vec4<f32> {
    let nn = blk.n0 + n_base + (lane % 4u) * 4u;
    if (nn >= p.c_out_per_group) {
        return vec4<f32>(0.0);
    }
    let b = blk.g * p.c_out_per_group + nn;
    return vec4<f32>(bias[b], bias[b + 1u], bias[b + 2u], bias[b + 3u]);
}

// The scratch fragment (stored row-major) as quads of neighbouring channels: lane + 32·e takes
// quad q of row q / 4, so each store instruction writes 8 rows' 32-byte runs of 16 channels
// with one 8-byte store per lane. Whole quads lie inside or outside the group's channels
// (its channels and every row's start are multiples of 4: `StagedShaped::grid` checks).
// `b`: the lane's quad of bias ([`quad_bias`]). Each quad is stored by the plain conversion,
// with no branch (a branch per quad to the exact path cost more than the conversions: it kept
// the stores from being issued together); where any of the lane's values was beyond ±65504
// or NaN (one test per fragment, after the stores), the plain conversion's result is not
// defined and its quads are stored again exactly (`to_f16x4`), by the same invocation, so
// the second store is the one that stays.
fn store_quads(blk: Block, warp: u32, lane: u32, m_base: u32, n_base: u32, b: vec4<f32>) {
    workgroupBarrier();
    var beyond = false;
    for (var e = 0u; e < 2u; e++) {
        let q = lane + e * 32u;
        let at = quad_at(blk, q, m_base, n_base);
        if (at >= 0) {
#ifdef SUM_WATCH
            watch_sums(blk, warp, q, e, m_base, n_base);
#endif
            let v = quad_value(warp, q, b);
            beyond = beyond || beyond_f16x4(v);
            output[u32(at)] = vec4<f16>(v);
        }
    }
    if (beyond) {
        for (var e = 0u; e < 2u; e++) {
            let q = lane + e * 32u;
            let at = quad_at(blk, q, m_base, n_base);
            if (at >= 0) {
                output[u32(at)] = to_f16x4(quad_value(warp, q, b));
            }
        }
    }
    workgroupBarrier();
}

// Quad q's vector in the output, or -1 past the problem's rows or the group's channels.
fn quad_at(blk: Block, q: u32, m_base: u32, n_base: u32) -> i32 {
    let out = row_info[m_base + q / 4u].y;
    let nn = blk.n0 + n_base + (q % 4u) * 4u;
    if (out < 0 || nn >= p.c_out_per_group) {
        return -1;
    }
    return i32((u32(out) + nn) / 4u);
}

// Quad q's four sums from the scratch fragment, unscaled, with bias and activation.
fn quad_value(warp: u32, q: u32, b: vec4<f32>) -> vec4<f32> {
    let s = warp * 256u + (q / 4u) * FRAG + (q % 4u) * 4u;
    let acc = vec4<f32>(c_scratch[s], c_scratch[s + 1u], c_scratch[s + 2u], c_scratch[s + 3u]);
    return activate4(vec4<f32>(sums_scale(acc.x), sums_scale(acc.y), sums_scale(acc.z), sums_scale(acc.w)) + b);
}
#else
// Neighbouring lanes take neighbouring positions (NCHW) or channels (channels last), so
// each store instruction writes runs of neighbouring elements.
fn store_fragment(blk: Block, warp: u32, lane: u32, m_base: u32, n_base: u32) {
    workgroupBarrier();
    for (var e = 0u; e < 8u; e++) {
        let idx = lane + e * 32u;
        let m = select(idx % FRAG, idx / FRAG, CHANNELS_LAST);
        let n = select(idx / FRAG, idx % FRAG, CHANNELS_LAST);
        let out = row_info[m_base + m].y;
        let nn = blk.n0 + n_base + n;
        if (out >= 0 && nn < p.c_out_per_group) {
            let acc = c_scratch[warp * 256u + n * FRAG + m];
            output[u32(out) + nn * out_channel_stride()] =
                output_value(activate(sums_scale(acc) + bias[blk.g * p.c_out_per_group + nn]));
        }
    }
    workgroupBarrier();
}
#endif

// The sums undone of the operands' scales.
fn sums_scale(acc: f32) -> f32 {
    return unscale_second() * (unscale_first() * acc);
}

// Bias[n .. n + 16] broadcast over 16 rows: a row-major load of stride 0. (A function of
// its own: naga does not carry the uniformity of the epilogue's test, which depends on the
// workgroup alone, into the helpers that compute it, and would refuse the load inline.)
fn bias_fragment(n: u32) -> coop_mat16x16<f32, C> {
    return coopLoadT<coop_mat16x16<f32, C>>(&bias[n], 0u);
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
    let who = vec2<u32>(wm0, wn0);
    #import fragment_init
    init_rows(t, blk);
    entry_ahead = ktab[t % BK8];
    fetch(0u, t, blk);
    stash(0u, t);
    workgroupBarrier();
    for (var ks = 0u; ks < grid.k_steps; ks++) {
        let has_next = ks + 1u < grid.k_steps;
        if (has_next) {
            fetch(ks + 1u, t, blk);
        }
        multiply(ks % STAGES, who);
        if (has_next) {
            if (STAGES == 1u) {
                workgroupBarrier();
            }
            stash((ks + 1u) % STAGES, t);
        }
        workgroupBarrier();
    }
    // The epilogue. For an f32 output where the block lies inside the problem (rows and the
    // group's channels), every 16-row fragment inside one image (OH·OW a multiple of 16;
    // channels last: rows of C_out a multiple of 4), the output 16-byte aligned and no
    // activation asked for, each warp stores its fragments straight into the output, the
    // bias added as a broadcast fragment (a row-major load of stride 0): no workgroup
    // barrier. Else, and always for an f16 output (the generated store has no direct
    // branch then), each fragment goes through the warp's scratch fragment (bias,
    // activation and conversion per element, two barriers per fragment). The test is the
    // workgroup's alone: cooperative operations need uniform control flow.
    let ohw = p.oh * p.ow;
    // A `let`, not `p.c_out` in the store itself: naga 30's SPIR-V writer panics on a
    // cooperative store whose stride is a uniform's field ("Expression … is not cached").
    let c_out = p.c_out;
    // Channels last: every row is C_out elements long, so no fragment straddles anything;
    // the rows must stay 16-byte aligned (C_out a multiple of 4).
    let aligned = select(ohw % 16u == 0u, p.c_out % 4u == 0u, CHANNELS_LAST);
    let direct = (p.flags & FLAG_RELU) == 0u && aligned && p.out_offset % 4u == 0u
        && blk.m0 + BM <= p.m_total && blk.n0 + BN <= p.c_out_per_group;
    let scratch = warp * 256u;
#ifdef QUAD_STORES
    #import quad_bias
#endif
    #import fragment_store
#ifdef SUM_WATCH
    find_infinities(lane, wm0);
#endif
#ifdef IN_PLACE_INPUT
    report_range();
#endif
}
