// The input scale of the F32 kernel on the matrix units: a power of two that puts the chunk's
// largest finite input magnitude (found by input_max.wgsl) in [2^13, 2^14), as the weights'
// scale does for them (coop/mod.rs `split_weights`): far inside f16's range, and values down
// to 2^-27 of the largest keep their high halves out of f16's subnormals. The staging pass
// multiplies the input by `input_scale()`; the kernel undoes it with the weights' scale
// (`sums_exponent` in nhwc.wgsl). Exact: powers of two, exponents within f32's normal range.
// CPU twin: `input_scale_exponent` in families/nhwc/mod.rs.

@group(0) @binding(8) var<storage, read> input_max: u32;

#ifdef WINOGRAD_INPUT
// The staged values are a Winograd input transform of the chunk's input (coop_winograd_f32),
// up to 2^8 times its largest magnitude (`Minimal::input_bound`): the scale leaves them that
// headroom, so that they stay within f16's range too.
const INPUT_HEADROOM: i32 = 8;
#else
const INPUT_HEADROOM: i32 = 0;
#endif

// The scale's exponent: 13 - floor(log2(max)) (less the headroom), within [-126, 126] (an
// all-zero or subnormal input gets the largest).
fn input_scale_exponent() -> i32 {
    let e = i32(input_max >> 23u) - 127;
    return clamp(13 - e - INPUT_HEADROOM, -126, 126);
}

// 2^k for k in [-126, 127], built from its bits.
fn pow2(k: i32) -> f32 {
    return bitcast<f32>(u32(k + 127) << 23u);
}

fn input_scale() -> f32 {
    return pow2(input_scale_exponent());
}

// f16 bits of a scaled value: finite ones are within f16's range after the scale (and
// pack2x16float is undefined beyond it), infinities and NaN are written as f16's own.
fn half_bits(v: f32) -> u32 {
    let bits = bitcast<u32>(v);
    if ((bits & 0x7f800000u) != 0x7f800000u) {
        return pack2x16float(vec2<f32>(v, 0.0)) & 0xffffu;
    }
    let sign = (bits >> 16u) & 0x8000u;
    return select(sign | 0x7c00u, 0x7e00u, is_nan(v));
}
