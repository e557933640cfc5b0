// The implicit-GEMM operand loaders, shared by the tiled kernels (tiled.wgsl and
// coop/coop.wgsl). A[m, k] is gathered straight from the NCHW input (zero padding by a
// bounds test), B[k, n] read from weights packed at upload as [groups][k_pad][n_pad]
// (zero-padded to whole tiles, so B loads need no test). The including kernel supplies
//   fn store_a(buf: u32, k: u32, m: u32, v: f32)          one A element into workgroup memory
//   fn store_b(buf: u32, k: u32, n4: u32, v: WeightVec)   B elements n4·4 .. n4·4+3
//   WeightVec                                               4 weights as stored (alias or struct)
// and the precision module supplies to_operand(v) (identity, rounding to f16, or the f16
// range check alone) and report_range() (called once at the end by each kernel).
// Tile constants BM, BN, BK, WG, STAGES come from the generated `config` module.

// F16_TENSORS: the caller's f16 tensors read and written as WGSL f16 (the SIMT kernel on
// `Storage::F16`), rounded on the way out as `f16_bits.wgsl` rounds.
#ifdef F16_TENSORS
#import f16_bits
@group(0) @binding(1) var<storage, read> input: array<f16>;
fn input_at(i: u32) -> f32 {
    return f32(input[i]);
}
#else
@group(0) @binding(1) var<storage, read> input: array<f32>;
fn input_at(i: u32) -> f32 {
    return input[i];
}
#endif
// Weights in the including kernel's `WeightVec`: vec4<f32> (tiled.wgsl), vec4<f16>
// (coop/operands_f16.wgsl: rounded to f16 once at upload, so its K loop neither converts them
// nor holds f32 copies in registers), or their f16 high and low halves
// (coop/operands_f16x3.wgsl: split once at upload).
@group(0) @binding(2) var<storage, read> weight: array<WeightVec>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
// Gather table, one row per k (host-computed, so the loaders never divide):
// x = element offset ic·H·W + ky·dh·W + kx·dw, y = ky·dh, z = kx·dw.
// Rows past K hold y = OUT_OF_RANGE, which fails the bounds test and yields 0.
@group(0) @binding(4) var<storage, read> ktab: array<vec4<i32>>;
#ifdef VEC4_OUTPUT
// Whole vec4s of output positions (H·W and the chunk's offset multiples of 4: every aligned
// group of 4 rows lies in one image and one channel's contiguous run).
#ifdef F16_TENSORS
@group(0) @binding(5) var<storage, read_write> output: array<vec4<f16>>;
fn output_value4(v: vec4<f32>) -> vec4<f16> {
    return to_f16x4(v);
}
#else
@group(0) @binding(5) var<storage, read_write> output: array<vec4<f32>>;
fn output_value4(v: vec4<f32>) -> vec4<f32> {
    return v;
}
#endif
#else
#import output_tensor
#endif

// The grid, written by the host (`GatherGrid`, same field order): `block_m × block_n` tiles
// per group, n-tile fastest.
struct Grid {
    k_tiles: u32,      // K steps: ceil(K / BK)
    n_pad: u32,        // the group's output channels padded to whole BN blocks
    m_tiles: u32,      // ceil(m_total / BM)
    n_tiles: u32,      // n_pad / BN
    total_tiles: u32,  // m_tiles · n_tiles · groups
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}
@group(0) @binding(7) var<uniform> grid: Grid;

const BN4: u32 = BN / 4u;
const A_LOADS: u32 = BM * BK / WG;                  // A elements each invocation gathers per K step
const A_ROW_STEP: u32 = WG / BK;                    // rows between one invocation's A elements
const B_LOADS: u32 = (BK * BN4 + WG - 1u) / WG;     // B vec4s each invocation loads per K step
const OUT_OF_RANGE: i32 = -1073741824;

// Per output row of the block: (element offset of its input window origin, iy0, ix0,
// element offset of its output at channel 0, or -1 past the problem).
var<workgroup> row_info: array<vec4<i32>, BM>;
var<private> a_next: array<f32, A_LOADS>;
var<private> b_next: array<WeightVec, B_LOADS>;

#import block

// Where each of the block's output rows reads its input window from. Ends with a barrier.
fn init_rows(t: u32, b: Block) {
    let ohw = p.oh * p.ow;
    for (var r = t; r < BM; r += WG) {
        let m = b.m0 + r;
        var info = vec4<i32>(0, OUT_OF_RANGE, OUT_OF_RANGE, -1);
        if (m < p.m_total) {
            let img = m / ohw;
            let pos = m % ohw;
            let iy0 = i32((pos / p.ow) * p.stride_h) - i32(p.pad_top);
            let ix0 = i32((pos % p.ow) * p.stride_w) - i32(p.pad_left);
            let base = i32(p.in_offset + (img * p.c_in + b.g * p.c_in_per_group) * p.h * p.w);
            let out = i32(p.out_offset + (img * p.c_out + b.g * p.c_out_per_group) * ohw + pos);
            info = vec4<i32>(base + iy0 * i32(p.w) + ix0, iy0, ix0, out);
        }
        row_info[r] = info;
    }
    workgroupBarrier();
}

// Which A element (block row, tap k) invocation t gathers as its j-th of a K step.
#ifdef GATHER_ROWS
// Rows fastest: neighbouring invocations read neighbouring output positions of one tap, i.e.
// input columns `stride` apart. For 1×1 kernels the taps are channels, H·W apart in NCHW, so
// the taps-fastest order below would spread a warp's loads over BK channels' rows.
fn a_element(t: u32, j: u32) -> vec2<u32> {
    if (WG % BM == 0u) {
        return vec2<u32>(t % BM, t / BM + j * (WG / BM));
    }
    let e = t + j * WG;
    return vec2<u32>(e % BM, e / BM);
}
#else
// Taps fastest: invocation t gathers tap t % BK of rows t / BK + j·A_ROW_STEP.
fn a_element(t: u32, j: u32) -> vec2<u32> {
    return vec2<u32>(t / BK + j * A_ROW_STEP, t % BK);
}
#endif

// Global → registers: K step `kt` of A (gathered, raw) and B (packed weights). Nothing here
// touches a loaded value: A's rounding to the operand type waits for `stash`, after the
// multiply, so the loads stay in flight across it. (With to_operand applied here, NVIDIA's
// compiler placed the f16 range check right behind each load and every warp waited for its
// gathers before multiplying: the f16 kernel took 0.93 ms instead of 0.76 on the H100.)
// Invocation t gathers the elements `a_element` names (taps fastest by default: neighbouring
// invocations read neighbouring taps (kx), i.e. neighbouring input columns, so a warp's
// loads are coalesced whatever the stride, and each invocation needs one table row per step).
fn fetch(kt: u32, t: u32, b: Block) {
    for (var j = 0u; j < A_LOADS; j++) {
        let at = a_element(t, j);
        let tab = ktab[kt * BK + at.y];
        let row = row_info[at.x];
        let iy = row.y + tab.y;
        let ix = row.z + tab.z;
        var v = 0.0;
        if (u32(iy) < p.h && u32(ix) < p.w) {
            v = input_at(u32(row.x + tab.x));
        }
        // Border taps under a non-zero padding mode (border_taps.wgsl); an empty module for
        // zero padding, so that this loop compiles as it did before padding modes: a branch
        // here, even never taken, cost the H100 5–30 % on dense layers (up to 2.9× on
        // 32×32 tiles).
        #import border_taps
        a_next[j] = v;
    }
    let w_row0 = (b.g * grid.k_tiles * BK + kt * BK) * (grid.n_pad / 4u) + b.n0 / 4u;
    for (var j = 0u; j < B_LOADS; j++) {
        let e = t + j * WG;
        if (e < BK * BN4) {
            b_next[j] = weight[w_row0 + (e / BN4) * (grid.n_pad / 4u) + e % BN4];
        }
    }
}

// Registers → workgroup buffer `buf`, through the kernel's accessors; A goes through
// to_operand here (and is rounded or split by store_a).
fn stash(buf: u32, t: u32) {
    for (var j = 0u; j < A_LOADS; j++) {
        let at = a_element(t, j);
        store_a(buf, at.y, at.x, to_operand(a_next[j]));
    }
    for (var j = 0u; j < B_LOADS; j++) {
        let e = t + j * WG;
        if (e < BK * BN4) {
            store_b(buf, e / BN4, e % BN4, b_next[j]);
        }
    }
}

// The K loop both kernels share: the next step's global loads are issued into registers
// before this step's multiply, then stashed into the next buffer of the STAGES-deep ring.
fn main_loop(t: u32, blk: Block, who: vec2<u32>) {
    init_rows(t, blk);
    fetch(0u, t, blk);
    stash(0u, t);
    workgroupBarrier();
    for (var kt = 0u; kt < grid.k_tiles; kt++) {
        let has_next = kt + 1u < grid.k_tiles;
        if (has_next) {
            fetch(kt + 1u, t, blk);       // in flight while we multiply
        }
        multiply(kt % STAGES, who);
        if (has_next) {
            if (STAGES == 1u) {
                workgroupBarrier();       // one buffer: everyone must be done reading it
            }
            stash((kt + 1u) % STAGES, t);
        }
        workgroupBarrier();
    }
}

// The epilogue of one output element (block-relative m, n): the sum's scale (exact: a power
// of two), bias (zeros when the conv has none) and activation fused into the store; rows and
// columns past the problem are skipped.
// The row's output offset comes from row_info (no division here).
#ifdef VEC4_OUTPUT
// Rows m_local .. m_local + 3 (m_local a multiple of 4) of column n_local at once.
fn store_output4(b: Block, m_local: u32, n_local: u32, acc: vec4<f32>) {
    let out = row_info[m_local].w;
    let n = b.n0 + n_local;
    if (out < 0 || n >= p.c_out_per_group) {
        return;
    }
    let oc = b.g * p.c_out_per_group + n;
    let v = acc * p.out_scale + bias[oc];
    output[(u32(out) + n * p.oh * p.ow) / 4u] =
        output_value4(activate4(v));
}
#else
fn store_output(b: Block, m_local: u32, n_local: u32, acc: f32) {
    let out = row_info[m_local].w;
    let n = b.n0 + n_local;
    if (out < 0 || n >= p.c_out_per_group) {
        return;
    }
    let oc = b.g * p.c_out_per_group + n;
    output[u32(out) + n * p.oh * p.ow] = output_value(activate(acc * p.out_scale + bias[oc]));
}
#endif
