// f32 to f16 as every pass and kernel that writes f16 tensors rounds (`Storage::F16`): the
// layout pass's packed words and the kernels that store WGSL f16 themselves (`to_f16`).

#import params

// f32 to the bits of the nearest f16 (the low 16 bits). WGSL leaves pack2x16float of a value
// beyond f16's finite range (±65504) indeterminate: from 65520 up (what rounds to inf in
// f16) ±inf, as a cast to f16 in PyTorch; below it the magnitude clamped to 65504 (where
// those values round); NaN stays NaN. Tested on the bits: drivers may assume no NaN or inf.
fn f16_bits(v: f32) -> u32 {
    let bits = bitcast<u32>(v);
    let sign = (bits >> 16u) & 0x8000u;
    if (is_nan(v)) {
        return sign | 0x7e00u;
    }
    // 0x477ff000 = 65520.
    if ((bits & 0x7fffffffu) >= 0x477ff000u) {
        return sign | 0x7c00u;
    }
    return pack2x16float(vec2<f32>(clamp(v, -65504.0, 65504.0), 0.0)) & 0xffffu;
}

#ifdef F16_TENSORS
// f32 to the f16 a kernel stores in an f16 tensor, rounded as `f16_bits` rounds: inside
// f16's range (beyond 65504 only what rounds back to it) a plain conversion; beyond it and
// for NaN the f16 of `f16_bits(v)`, a conversion of a value f16 holds exactly (±inf and NaN
// included), never of one beyond its range, which WGSL leaves indeterminate. (The plain path
// is the common one: the exact one costs three conversions, ~10 % of a depthwise layer's
// time on the H100.)
fn to_f16(v: f32) -> f16 {
    if (abs(v) < 65520.0) {
        return f16(clamp(v, -65504.0, 65504.0));
    }
    return f16(unpack2x16float(f16_bits(v)).x);
}

// Whether any of four values is beyond ±65504 or NaN: one test on the largest magnitude's
// bits (NaN's lie above every finite value's).
fn beyond_f16x4(v: vec4<f32>) -> bool {
    let mag = bitcast<vec4<u32>>(v) & vec4<u32>(0x7fffffffu);
    // 0x477fe000 = 65504.
    return max(max(mag.x, mag.y), max(mag.z, mag.w)) > 0x477fe000u;
}

// Four at a time. The common case ([`beyond_f16x4`] false): all four convert as they are,
// with no clamp; the rest (beyond ±65504, or NaN) go through `to_f16` one by one.
fn to_f16x4(v: vec4<f32>) -> vec4<f16> {
    if (!beyond_f16x4(v)) {
        return vec4<f16>(v);
    }
    return vec4<f16>(to_f16(v.x), to_f16(v.y), to_f16(v.z), to_f16(v.w));
}
#endif
