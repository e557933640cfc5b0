// The pointwise kernel: 1×1 convolutions at stride 1, without padding or groups, on NCHW
// tensors, where an output is a weighted sum of one position's input channels. On layers of
// few output channels there is little arithmetic per byte, and the tiled kernels pad those
// channels to whole blocks and stage the input through workgroup memory; this kernel streams
// the input once instead. Each invocation owns 4 positions and CB output channels: it walks
// the input channels, loading the 4 positions of each and adding them into the CB channels'
// sums. The positions run over the batch's M = N·OH·OW outputs: 4 neighbouring ones, one
// 16-byte vector, where each plane holds whole vectors (`VEC4`), else 4 that lie LANES apart,
// so each of the 4 loads is a contiguous run over the workgroup. The block's weights, all
// input channels' (C_IN_PAD × CB), are copied into workgroup memory once, then read by every
// invocation at the same address (broadcast, no bank conflicts): the K loop has no barrier,
// so the input loads of many channels can be in flight at once. With KS > 1 the
// workgroup's invocations are KS slices of LANES = WG / KS, each slice summing its own
// contiguous share of the input channels for the same positions (KS times the invocations
// per position, for maps too small to fill the device otherwise); the slices' sums are then
// added in slice order through workgroup memory. On the H100 (Vulkan
// 580.159.04) chunks of 16 channels' weights between barriers ran MobileNetV2's 28×28
// projections ~1.2× slower than the tiled kernel, and the weights loaded from the buffer at
// every step (a load instruction per 4 channels, at the same address in every invocation)
// 1.2–2× slower than those chunks.
// CPU twin: pointwise/mod.rs (`pointwise_twin`).

#import params
#import precision
#import config

// Written by the host (`PointwiseGrid`, same field order).
struct Grid {
    m_blocks: u32,      // blocks of 4·LANES positions over the batch
    c_blocks: u32,      // blocks of CB output channels
    _pad: u32,
    total: u32,         // workgroups with work in this dispatch
}

#ifdef VEC4
@group(0) @binding(1) var<storage, read> input: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> output: array<vec4<f32>>;
#else
@group(0) @binding(1) var<storage, read> input: array<f32>;
@group(0) @binding(5) var<storage, read_write> output: array<f32>;
#endif
// [c_blocks][c_in_pad][CB] as vectors of 4 output channels: zeros past the input channels
// and past the output channels.
@group(0) @binding(2) var<storage, read> weight: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(7) var<uniform> grid: Grid;

const CB4: u32 = CB / 4u;
const LANES: u32 = WG / KS;
// Input channels per slice (C_IN_PAD is a whole number of KS · KC).
const K_SLICE: u32 = C_IN_PAD / KS;
var<workgroup> w_block: array<vec4<f32>, C_IN_PAD * CB4>;
#ifdef K_SLICES
// Slices 1 … KS − 1's sums, each lane's CB vectors, for slice 0 to add.
var<workgroup> partial: array<vec4<f32>, (KS - 1u) * LANES * CB>;
#endif
// acc[c]: output channel c's sums at the invocation's 4 positions.
var<private> acc: array<vec4<f32>, CB>;
// Where the invocation's positions of input channel 0 lie (element index; `VEC4`: the
// vector's first, all 4 alike), and whether each lies inside the batch.
var<private> at0: vec4<u32>;
var<private> inside: vec4<bool>;

// The invocation's 4 positions from its first, `m` (`VEC4`: 4 neighbours; else m + i·LANES).
fn locate(m: u32, plane: u32) {
    for (var i = 0u; i < 4u; i++) {
#ifdef VEC4
        let mi = m;
#else
        let mi = m + i * LANES;
#endif
        inside[i] = mi < p.m_total;
        // Past the batch: its last position's place (read, never stored).
        let mc = min(mi, p.m_total - 1u);
        at0[i] = p.in_offset + (mc / plane) * p.c_in * plane + mc % plane;
    }
}

// Input channel `k`'s values at the 4 positions.
fn load4(k: u32, plane: u32) -> vec4<f32> {
    let off = k * plane;
#ifdef VEC4
    // Every plane and every chunk's start are whole vectors (`PointwiseShaped::grid`).
    return input[(at0.x + off) / 4u];
#else
    return vec4<f32>(input[at0.x + off], input[at0.y + off], input[at0.z + off], input[at0.w + off]);
#endif
}

// Adds input channel `k`'s values `x` times its weights into the sums.
fn accumulate(x: vec4<f32>, k: u32) {
    for (var j = 0u; j < CB4; j++) {
        let w = w_block[k * CB4 + j];
        acc[4u * j] = fma(x, vec4<f32>(w.x), acc[4u * j]);
        acc[4u * j + 1u] = fma(x, vec4<f32>(w.y), acc[4u * j + 1u]);
        acc[4u * j + 2u] = fma(x, vec4<f32>(w.z), acc[4u * j + 2u]);
        acc[4u * j + 3u] = fma(x, vec4<f32>(w.w), acc[4u * j + 3u]);
    }
}

// Output channel `oc`'s 4 values (bias and activation applied) at the invocation's positions.
fn store4(oc: u32, m: u32, plane: u32, v: vec4<f32>) {
#ifdef VEC4
    let at = p.out_offset + ((m / plane) * p.c_out + oc) * plane + m % plane;
    output[at / 4u] = v;
#else
    for (var i = 0u; i < 4u; i++) {
        let mi = m + i * LANES;
        if (inside[i]) {
            output[p.out_offset + ((mi / plane) * p.c_out + oc) * plane + mi % plane] = v[i];
        }
    }
#endif
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    // The grid may be folded into two dimensions (65 535 workgroups per dimension).
    let wg = wid.x + wid.y * nwg.x;
    if (wg >= grid.total) {
        return;
    }
    // The output-channel blocks of one run of positions are neighbours, so the input they
    // all read is still in the L2 cache for all but the first.
    let cb = wg % grid.c_blocks;
    let mb = wg / grid.c_blocks;
    let plane = p.oh * p.ow;
    let lane = t % LANES;
    let slice = t / LANES;
#ifdef VEC4
    let m = (mb * LANES + lane) * 4u;
#else
    let m = mb * 4u * LANES + lane;
#endif
    locate(m, plane);
    for (var c = 0u; c < CB; c++) {
        acc[c] = vec4<f32>(0.0);
    }
    let w0 = cb * C_IN_PAD * CB4;
    for (var i = t; i < C_IN_PAD * CB4; i += WG) {
        w_block[i] = weight[w0 + i];
    }
    workgroupBarrier();
    let k_first = slice * K_SLICE;
    for (var k0 = k_first; k0 < k_first + K_SLICE; k0 += KC) {
        for (var kk = 0u; kk < KC; kk++) {
            let k = k0 + kk;
            // Past the input channels: zeros (a real channel's values are read, and
            // dropped: an infinite one times the zero weight would be NaN).
            let x = load4(min(k, p.c_in - 1u), plane);
            accumulate(select(vec4<f32>(0.0), x, k < p.c_in), k);
        }
    }
#ifdef K_SLICES
    if (slice > 0u) {
        for (var c = 0u; c < CB; c++) {
            partial[((slice - 1u) * LANES + lane) * CB + c] = acc[c];
        }
    }
    workgroupBarrier();
    if (slice > 0u) {
        return;
    }
    for (var s = 1u; s < KS; s++) {
        for (var c = 0u; c < CB; c++) {
            acc[c] += partial[((s - 1u) * LANES + lane) * CB + c];
        }
    }
#endif
    if (!inside.x) {
        return;
    }
    for (var c = 0u; c < CB; c++) {
        let oc = cb * CB + c;
        if (oc < p.c_out) {
            store4(oc, m, plane, activate4(acc[c] + vec4<f32>(bias[oc])));
        }
    }
}
