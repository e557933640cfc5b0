// The staging pass of the channels-last kernels (nhwc.wgsl): the chunk's input (NCHW, or the
// caller's NHWC tensor where `CHANNELS_LAST`; f32, or the caller's f16 tensor where
// `F16_TENSORS`) rewritten as f16 [n][HP][WP][C8]
// vectors of 8 channels (f16x3: then the low halves, same layout), the padding written out
// (zeros, or the padding mode's mirrored, clamped or wrapped pixels) and each group's
// channels padded with zeros to whole vectors. The matrix kernel then gathers 16-byte runs
// of channels with no bounds tests and no border logic.
// The sizes are the problem's (composed per input size, as `stage_config`): H, W, C, the
// padded HP, WP, the vectors per pixel C8 and per group CG8, CG channels per group, the
// leading padding PT, PL.
// The F32 kernel on the matrix units (`SCALED_INPUT`) first multiplies each value by the
// chunk's input scale (input_scale.wgsl) and stages infinities and NaN as they are in both
// halves, so that every product with them has the sign f32's would (the weights' halves
// carry their weight's sign: coop/mod.rs `split_weights`).
// CPU twin: `stage_input` in nhwc/mod.rs.

#import stage_config
#import layout_config
#import params
#import precision
#ifdef SCALED_INPUT
#import input_scale
#endif

#ifdef F16_TENSORS
@group(0) @binding(1) var<storage, read> input: array<f16>;
#else
@group(0) @binding(1) var<storage, read> input: array<f32>;
#endif
@group(0) @binding(5) var<storage, read_write> staged: array<vec4<u32>>;

// The input element a padded coordinate reads, or -1 for a zero.
fn source_index(n: u32, c: u32, y: u32, x: u32) -> i32 {
    var iy = i32(y) - i32(PT);
    var ix = i32(x) - i32(PL);
    if (!(u32(iy) < H && u32(ix) < W)) {
        let mode = pad_mode();
        if (mode == 0u) {
            return -1;
        }
        iy = pad_coord(iy, i32(H), mode);
        ix = pad_coord(ix, i32(W), mode);
    }
    if (CHANNELS_LAST) {
        return i32(p.in_offset + ((n * H + u32(iy)) * W + u32(ix)) * C + c);
    }
    return i32(p.in_offset + ((n * C + c) * H + u32(iy)) * W + u32(ix));
}

// Channel `c` at staged pixel (y, x) as the operand (range-checked under the f16 precisions;
// rounded to f16 by the packing below); 0 for padding channels and zero padding.
fn channel(n: u32, c: u32, real: bool, y: u32, x: u32) -> f32 {
    if (!real) {
        return 0.0;
    }
    let i = source_index(n, c, y, x);
    if (i < 0) {
        return 0.0;
    }
    return checked_operand(f32(input[u32(i)]));
}

#ifdef F16X3
const LO_SCALE: f32 = 2048.0;
#endif

#ifdef SCALED_INPUT
// (`half_bits`: input_scale.wgsl.)
fn pack8(h: array<f32, 8>) -> vec4<u32> {
    var w: vec4<u32>;
    for (var i = 0u; i < 4u; i++) {
        w[i] = half_bits(h[2u * i]) | (half_bits(h[2u * i + 1u]) << 16u);
    }
    return w;
}
#else

fn pack8(h: array<f32, 8>) -> vec4<u32> {
    return vec4<u32>(
        pack2x16float(vec2<f32>(h[0], h[1])),
        pack2x16float(vec2<f32>(h[2], h[3])),
        pack2x16float(vec2<f32>(h[4], h[5])),
        pack2x16float(vec2<f32>(h[6], h[7])),
    );
}
#endif

// One invocation per output vector, x fastest for an NCHW input (a warp reads 32
// neighbouring pixels of each of its 8 channels and writes 32 vectors one pixel apart),
// channel vectors fastest for an NHWC one.
@compute @workgroup_size(STAGE_WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = gid.x + gid.y * nwg.x * STAGE_WG;
    if (e >= p.batch * HP * WP * C8) {
        return;
    }
    var x = e % WP;
    var c8 = (e / WP) % C8;
    if (CHANNELS_LAST) {
        // Channel vectors fastest: a warp reads 32 runs of 8 neighbouring channels.
        c8 = e % C8;
        x = (e / C8) % WP;
    }
    let r2 = e / (WP * C8);
    let y = r2 % HP;
    let n = r2 / HP;
    let g = c8 / CG8;
    let c0 = (c8 % CG8) * 8u;
    var h: array<f32, 8>;
#ifdef F16X3
    var l: array<f32, 8>;
#endif
#ifdef SCALED_INPUT
    let scale = input_scale();
#endif
    for (var i = 0u; i < 8u; i++) {
#ifdef SCALED_INPUT
        let v = channel(n, g * CG + c0 + i, c0 + i < CG, y, x) * scale;
        if ((bitcast<u32>(v) & 0x7f800000u) == 0x7f800000u) {
            h[i] = v;
            l[i] = v;
            continue;
        }
#else
        let v = channel(n, g * CG + c0 + i, c0 + i < CG, y, x);
#endif
#ifdef F16X3
        // The high half through a packing the compiler cannot see through (NVIDIA takes
        // f32(f16(v)) for v: coop/operands_f16x3.wgsl), the low half scaled by LO_SCALE.
        let hi = unpack2x16float(pack2x16float(vec2<f32>(v, 0.0)) ^ opaque_zero()).x;
        h[i] = hi;
        l[i] = (v - hi) * LO_SCALE;
#else
        h[i] = v;
#endif
    }
    let at = ((n * HP + y) * WP + x) * C8 + c8;
    staged[at] = pack8(h);
#ifdef F16X3
    staged[p.batch * HP * WP * C8 + at] = pack8(l);
#endif
    report_range();
}
