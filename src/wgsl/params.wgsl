// Shared by every conv kernel: the convolution and the chunk one dispatch covers, written
// by src/kernel.rs (`ConvParams`, same field order). One dispatch covers `batch` images of
// one chunk; `in_offset` / `out_offset` place the chunk inside the bound buffer windows
// (binding offsets must be aligned, chunk starts need not be). How a family lays its
// workgroups over that is its own `Grid` (binding 7).
struct Params {
    c_in: u32, h: u32, w: u32, c_out: u32,
    oh: u32, ow: u32, batch: u32, m_total: u32,
    kh: u32, kw: u32, stride_h: u32, stride_w: u32,
    pad_top: u32, pad_left: u32, dil_h: u32, dil_w: u32,
    c_in_per_group: u32, c_out_per_group: u32, groups: u32, k_total: u32,
    in_offset: u32, out_offset: u32, flags: u32,
    // What the sums are multiplied by before the bias: 1, or the inverse of the power of two
    // the f16x3 kernel's weights were scaled by at upload (coop/operands_f16x3.wgsl).
    out_scale: f32,
}

// flags (the host sets only bits below 16)
const FLAG_RELU: u32 = 1u;
// Bits 1-2: the padding mode (0 zeros, 1 reflect, 2 replicate, 3 circular); the host keeps
// every padding below the input size (reflect) or at most it (circular).
const PAD_MODE_SHIFT: u32 = 1u;

fn pad_mode() -> u32 {
    return (p.flags >> PAD_MODE_SHIFT) & 3u;
}

// The input coordinate a padded coordinate `i` reads along an axis of `n` under a non-zero
// padding mode (CPU twin: PaddingMode::source in src/spec.rs).
fn pad_coord(i: i32, n: i32, mode: u32) -> i32 {
    if (mode == 1u) {
        return select(select(i, 2 * (n - 1) - i, i >= n), -i, i < 0);
    }
    if (mode == 2u) {
        return clamp(i, 0, n - 1);
    }
    return ((i % n) + n) % n;
}

@group(0) @binding(0) var<uniform> p: Params;

// Zero, but only the host knows it: keeps the compiler from folding an exact-looking
// round trip that is not exact (coop/operands_f16x3.wgsl).
fn opaque_zero() -> u32 {
    return p.flags >> 16u;
}

// NaN, tested on the bits: Vulkan drivers may assume float arithmetic sees no NaN (no float
// controls are requested), and NVIDIA's turned `select(v, 0.0, v < 0.0)` into a max that maps
// NaN to 0 (tests/activation.rs on the H100). Integer tests cannot be folded away.
fn is_nan(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;
}

// Not ±inf or NaN: the exponent's bits not all ones (a test on the bits, which no compiler's
// fast-math assumptions fold away).
fn is_finite(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7f800000u) != 0x7f800000u;
}

// ReLU as PyTorch's: NaN stays NaN.
fn activate(v: f32) -> f32 {
    if ((p.flags & FLAG_RELU) != 0u) {
        return select(v, 0.0, v < 0.0 && !is_nan(v));
    }
    return v;
}

// `activate` on four values, tested on the bits: as i32, the negative values but -0.0 lie
// from i32::MIN + 1 (the smallest negative subnormal) to -inf's bits (-8388608), and the
// negative NaNs above them.
fn activate4(v: vec4<f32>) -> vec4<f32> {
    if ((p.flags & FLAG_RELU) != 0u) {
        let i = bitcast<vec4<i32>>(v);
        return select(v, vec4<f32>(0.0), (i <= vec4<i32>(-8388608)) & (i != vec4<i32>(bitcast<i32>(0x80000000u))));
    }
    return v;
}
