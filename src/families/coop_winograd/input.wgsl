// The input transform of `coop-winograd-f16` (F(2×2, 3×3)), its staging pass: each
// invocation takes the 4×4 input patch of one tile (ty, tx) of one image for one vector of 8
// channels (the padding read as zeros, channels past C as zeros), computes V = Bᵀ d B per
// channel and writes its 16 components as f16 vectors of the GEMM's channels-last input
// `[n][TH][TW][16][C8]` (component ξ = 4·row + col, then the channel vector): the layout the
// channels-last kernel reads in place as a 1×1 convolution of 16 groups of C8·8 channels.
// Inputs beyond f16's range and components that overflow it (a component adds or subtracts
// four inputs) are clamped and flagged, as the f16 kernels flag their operands.
// The input: NCHW, or channels last (`CHANNELS_LAST`); f32, or f16 (`F16_TENSORS`).
// CPU twin: `coop_winograd_twin` in coop_winograd/mod.rs.

#import wino_config
#import layout_config
#import params
#import precision

#ifdef F16_TENSORS
@group(0) @binding(1) var<storage, read> input: array<f16>;
#else
@group(0) @binding(1) var<storage, read> input: array<f32>;
#endif
@group(0) @binding(5) var<storage, read_write> staged: array<vec4<u32>>;

// Channel c of image n at (iy, ix), range-checked; 0 outside the image and past C.
fn value(n: u32, c: u32, iy: i32, ix: i32) -> f32 {
    if (c >= C || !(u32(iy) < H && u32(ix) < W)) {
        return 0.0;
    }
    var at = p.in_offset + ((n * C + c) * H + u32(iy)) * W + u32(ix);
    if (CHANNELS_LAST) {
        at = p.in_offset + ((n * H + u32(iy)) * W + u32(ix)) * C + c;
    }
    return checked_operand(f32(input[at]));
}

// V = Bᵀ d B of channel c's patch from (y0, x0); Bᵀ = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1].
fn transform(n: u32, c: u32, y0: i32, x0: i32) -> array<f32, 16> {
    var b: array<array<f32, 4>, 4>;
    for (var j = 0; j < 4; j++) {
        let d0 = value(n, c, y0, x0 + j);
        let d1 = value(n, c, y0 + 1, x0 + j);
        let d2 = value(n, c, y0 + 2, x0 + j);
        let d3 = value(n, c, y0 + 3, x0 + j);
        b[0][j] = d0 - d2;
        b[1][j] = d1 + d2;
        b[2][j] = d2 - d1;
        b[3][j] = d1 - d3;
    }
    var v: array<f32, 16>;
    for (var i = 0u; i < 4u; i++) {
        v[4u * i] = checked_operand(b[i][0] - b[i][2]);
        v[4u * i + 1u] = checked_operand(b[i][1] + b[i][2]);
        v[4u * i + 2u] = checked_operand(b[i][2] - b[i][1]);
        v[4u * i + 3u] = checked_operand(b[i][1] - b[i][3]);
    }
    return v;
}

// One invocation per tile and channel vector: channel vectors fastest for a channels-last
// input (a warp reads runs of neighbouring channels and writes 32 neighbouring vectors per
// component), tiles along a row fastest for an NCHW one (a warp reads along rows).
@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = gid.x + gid.y * nwg.x * WG;
    if (e >= p.batch * TH * TW * C8) {
        return;
    }
    var tx = e % TW;
    var cv = (e / TW) % C8;
    if (CHANNELS_LAST) {
        cv = e % C8;
        tx = (e / C8) % TW;
    }
    let r = e / (TW * C8);
    let ty = r % TH;
    let n = r / TH;
    let y0 = i32(2u * ty) - i32(PT);
    let x0 = i32(2u * tx) - i32(PL);
    var words: array<vec4<u32>, 16>;
    for (var q = 0u; q < 4u; q++) {
        let c = cv * 8u + 2u * q;
        let lo = transform(n, c, y0, x0);
        let hi = transform(n, c + 1u, y0, x0);
        for (var xi = 0u; xi < 16u; xi++) {
            words[xi][q] = pack2x16float(vec2<f32>(lo[xi], hi[xi]));
        }
    }
    let at = ((n * TH + ty) * TW + tx) * 16u * C8 + cv;
    for (var xi = 0u; xi < 16u; xi++) {
        staged[at + xi * C8] = words[xi];
    }
    report_range();
}
