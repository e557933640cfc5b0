// The layout passes of a convolution whose tensors are not in the form its kernel reads and
// writes (f32, in the kernel's layout): channels-last tensors (`Layout::Nhwc`) for a kernel
// of NCHW, and f16 tensors (`Storage::F16`) for any kernel. Before the kernel, the caller's
// input window (binding 1) into an f32 scratch (binding 5) (INTO_KERNEL); after it, the
// kernel's f32 output scratch (binding 1) into the caller's output window (binding 5).
// TRANSPOSE: the caller's side is NHWC and the kernel's NCHW (else both sides share one
// layout and only the element type changes). F16: the caller's side is packed f16, two per
// u32, the lower half first (else f32). C, H, W are the tensor's (input or output); the
// caller's side sits at the chunk's offset in its bound window (`Params.in_offset` for the
// input pass, `Params.out_offset` for the output pass), in elements. Composed per problem
// (`layout_config`). CPU twin: `reference::to_nchw` / `reference::to_nhwc`.
//
// Without TILED, one invocation per element written, except for an f16 output: one per u32
// word, so that no two invocations write one word. TILED (transposing, with enough channels
// per pixel: `kernel::layout_pass_tiled`): one workgroup per tile of 32 pixels × 32
// channels of an image, staged in workgroup memory so that both the reads and the writes are
// runs along the side's fastest dimension (a gather straight from the other layout reads one
// element per 32-byte sector); an f16 word is written by the tile of its lower element,
// which reads its upper one from the source where it lies in another tile. A word the chunk shares with its neighbour (an odd chunk start or end) keeps
// the neighbour's half as it is: the neighbour's dispatch is ordered before or after this
// one, never beside it.

#import layout_config
#import params

#ifdef INTO_KERNEL
#ifdef F16
@group(0) @binding(1) var<storage, read> src: array<u32>;
#else
@group(0) @binding(1) var<storage, read> src: array<f32>;
#endif
@group(0) @binding(5) var<storage, read_write> dst: array<f32>;
#else
@group(0) @binding(1) var<storage, read> src: array<f32>;
#ifdef F16
@group(0) @binding(5) var<storage, read_write> dst: array<u32>;
#else
@group(0) @binding(5) var<storage, read_write> dst: array<f32>;
#endif
#endif

// The index on the source side of element `e` of the destination side, both within the chunk.
fn source_index(e: u32) -> u32 {
#ifdef TRANSPOSE
    let x = e % W;
#ifdef INTO_KERNEL
    // e indexes the NCHW scratch: (n, c, y, x); the source is NHWC.
    let y = (e / W) % H;
    let c = (e / (W * H)) % C;
    let n = e / (W * H * C);
    return ((n * H + y) * W + x) * C + c;
#else
    // e indexes the NHWC output: (n, y, x, c); the source is the NCHW scratch.
    let c = e % C;
    let xx = (e / C) % W;
    let y = (e / (C * W)) % H;
    let n = e / (C * W * H);
    return ((n * C + c) * H + y) * W + xx;
#endif
#else
    return e;
#endif
}

#ifdef F16
#import f16_bits
#endif

#ifdef TILED
const TILE: u32 = 32u;
const ROWS: u32 = 256u / TILE;                    // tile rows each pass of the workgroup covers
const HW: u32 = H * W;
const HW_TILES: u32 = (HW + TILE - 1u) / TILE;
const C_TILES: u32 = (C + TILE - 1u) / TILE;
// [pixel][channel] on the way in, [channel][pixel] on the way out; rows padded by one so that
// a column read hits 32 banks.
var<workgroup> tile: array<f32, TILE * (TILE + 1u)>;

#ifdef INTO_KERNEL
// Element `at` of the caller's input window.
fn load_source(at: u32) -> f32 {
#ifdef F16
    let pair = unpack2x16float(src[at / 2u]);
    return select(pair.x, pair.y, (at & 1u) == 1u);
#else
    return src[at];
#endif
}
#endif

// Workgroup t: image t / (HW_TILES · C_TILES), then channel tiles fastest.
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let t = wid.x + wid.y * nwg.x;
    let n = t / (HW_TILES * C_TILES);
    if (n >= p.batch) {
        return;
    }
    let r = t % (HW_TILES * C_TILES);
    let c0 = (r % C_TILES) * TILE;
    let s0 = (r / C_TILES) * TILE;
    let lane = lid % TILE;
    let row = lid / TILE;
#ifdef INTO_KERNEL
    // NHWC source, neighbouring invocations on neighbouring channels.
    for (var k = row; k < TILE; k += ROWS) {
        let s = s0 + k;
        let c = c0 + lane;
        if (s < HW && c < C) {
            tile[k * (TILE + 1u) + lane] = load_source(p.in_offset + (n * HW + s) * C + c);
        }
    }
    workgroupBarrier();
    // NCHW scratch, neighbouring invocations on neighbouring pixels.
    for (var k = row; k < TILE; k += ROWS) {
        let c = c0 + k;
        let s = s0 + lane;
        if (s < HW && c < C) {
            dst[(n * C + c) * HW + s] = tile[lane * (TILE + 1u) + k];
        }
    }
#else
    // NCHW scratch, neighbouring invocations on neighbouring pixels.
    for (var k = row; k < TILE; k += ROWS) {
        let c = c0 + k;
        let s = s0 + lane;
        if (s < HW && c < C) {
            tile[k * (TILE + 1u) + lane] = src[(n * C + c) * HW + s];
        }
    }
    workgroupBarrier();
    // NHWC output, neighbouring invocations on neighbouring channels.
    for (var k = row; k < TILE; k += ROWS) {
        let s = s0 + k;
        let c = c0 + lane;
        if (s < HW && c < C) {
            let v = tile[lane * (TILE + 1u) + k];
            let e = (n * HW + s) * C + c;
#ifdef F16
            let total = p.batch * C * HW;
            let g = p.out_offset + e;
            let word = g / 2u;
            if ((g & 1u) == 0u) {
                // The word's lower element; its upper one is the next of the chunk, in this
                // tile or (past its channels) read from the source, or the neighbour's.
                var bits = f16_bits(v);
                if (e + 1u < total) {
                    var hi: f32;
                    if (c + 1u < C && lane + 1u < TILE) {
                        hi = tile[(lane + 1u) * (TILE + 1u) + k];
                    } else {
                        hi = src[source_index(e + 1u)];
                    }
                    bits = bits | (f16_bits(hi) << 16u);
                } else {
                    bits = bits | (dst[word] & 0xffff0000u);
                }
                dst[word] = bits;
            } else if (e == 0u) {
                // The chunk's first element is the upper half of a word the chunk before owns.
                dst[word] = (dst[word] & 0xffffu) | (f16_bits(v) << 16u);
            }
#else
            dst[p.out_offset + e] = v;
#endif
        }
    }
#endif
}
#else
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    let total = p.batch * C * H * W;
#ifdef INTO_KERNEL
    if (i >= total) {
        return;
    }
#ifdef F16
    let at = p.in_offset + source_index(i);
    let pair = unpack2x16float(src[at / 2u]);
    dst[i] = select(pair.x, pair.y, (at & 1u) == 1u);
#else
    dst[i] = src[p.in_offset + source_index(i)];
#endif
#else
#ifdef F16
    // i counts the words of the window that hold an element of the chunk; `lo` is the
    // element (of the window) in the lower half of this one.
    let word = p.out_offset / 2u + i;
    let lo = 2u * word;
    let end = p.out_offset + total;
    if (lo >= end) {
        return;
    }
    let has_lo = lo >= p.out_offset;
    let has_hi = lo + 1u < end;
    var bits = 0u;
    if (has_lo) {
        bits = f16_bits(src[source_index(lo - p.out_offset)]);
    }
    if (has_hi) {
        bits = bits | (f16_bits(src[source_index(lo + 1u - p.out_offset)]) << 16u);
    }
    if (!has_lo) {
        bits = bits | (dst[word] & 0xffffu);
    }
    if (!has_hi) {
        bits = bits | (dst[word] & 0xffff0000u);
    }
    dst[word] = bits;
#else
    if (i >= total) {
        return;
    }
    dst[p.out_offset + i] = src[source_index(i)];
#endif
#endif
}
#endif
