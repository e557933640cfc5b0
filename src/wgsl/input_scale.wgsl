// The input scale of the F32 kernel on the matrix units: a power of two that puts the chunk's
// largest finite input magnitude (found by input_max.wgsl) in [2^13, 2^14), as the weights'
// scale does for them (coop/mod.rs `split_weights`): far inside f16's range, and values down
// to 2^-27 of the largest keep their high halves out of f16's subnormals. The staging pass
// multiplies the input by `input_scale()`; the kernel undoes it with the weights' scale
// (`sums_exponent` in nhwc.wgsl). Exact: powers of two, exponents within f32's normal range.
// CPU twin: `input_scale_exponent` in families/nhwc/mod.rs.

@group(0) @binding(8) var<storage, read> input_max: u32;

// The scale's exponent: 13 - floor(log2(max)), within [-126, 126] (an all-zero or subnormal
// input gets the largest).
fn input_scale_exponent() -> i32 {
    let e = i32(input_max >> 23u) - 127;
    return clamp(13 - e, -126, 126);
}

// 2^k for k in [-126, 127], built from its bits.
fn pow2(k: i32) -> f32 {
    return bitcast<f32>(u32(k + 127) << 23u);
}

fn input_scale() -> f32 {
    return pow2(input_scale_exponent());
}
