// The input transform of `coop-winograd-f32`, its staging pass: each invocation takes the
// n×n input patches (tiles m apart, the padding read as zeros) of one tile of one image for
// one pair of channels, computes V = Bᵀ d B by the generated `input_1d` (Bᵀ of each column,
// then of each row), scales it by the chunk's input scale with the Winograd headroom
// (input_scale.wgsl, `WINOGRAD_INPUT`) and writes it split into f16 halves — as the
// channels-last kernel's staging pass writes a scaled input — in that kernel's staged layout
// of its GEMM, a 1×1 convolution of n² groups: `[n][TH][TW][n²][CG8]` vectors of 8 channels
// (the pair's word in each component's run; channels past C as zeros), all high halves, then
// all low ones. A warp takes PB neighbouring pairs (a 32-byte sector of words, or 16 where
// the pairs are not whole blocks of 8) of 32 / PB neighbouring tiles: it writes whole sectors
// per component and reads each patch row of PB·2 planes across neighbouring tiles.
// An infinite or NaN input, or a component it makes non-finite, is written as it is in both
// halves; the products of its tiles are then not finite, and the output transform computes
// those tiles directly (winograd/output_transform.wgsl).
// CPU twins: `coop_winograd_f32_twin` (the arithmetic) and `transform_lane` (which invocation
// takes which tile and pair) in coop_winograd_f32/mod.rs.

#import config
#import params
#import precision
#import input_scale

@group(0) @binding(1) var<storage, read> input: array<f32>;
@group(0) @binding(5) var<storage, read_write> staged: array<u32>;

// Bᵀ d of channel c's patch from (y0, x0), column by column: b[i][j] = (Bᵀ d[·][j])[i];
// zeros for a channel past C.
fn bt_d(img: u32, c: u32, y0: i32, x0: i32) -> array<array<f32, N>, N> {
    let real = c < C;
    let plane = p.in_offset + (img * C + min(c, C - 1u)) * H * W;
    var b: array<array<f32, N>, N>;
    for (var j = 0u; j < N; j++) {
        let ix = x0 + i32(j);
        var column: array<f32, N>;
        for (var i = 0u; i < N; i++) {
            let iy = y0 + i32(i);
            let inside = real && iy >= 0 && iy < i32(H) && ix >= 0 && ix < i32(W);
            let at = select(0u, u32(iy) * W + u32(ix), inside);
            column[i] = select(0.0, input[plane + at], inside);
        }
        let v = input_1d(column);
        for (var i = 0u; i < N; i++) {
            b[i][j] = v[i];
        }
    }
    return b;
}

// The f16 halves of a scaled value as the staging pass splits them (nhwc/stage.wgsl): the high
// half through a packing the compiler cannot see through, the low half scaled by 2048; a
// value that is not finite in both.
fn halves(v: f32) -> vec2<u32> {
    if ((bitcast<u32>(v) & 0x7f800000u) == 0x7f800000u) {
        return vec2<u32>(half_bits(v));
    }
    let hi = unpack2x16float(pack2x16float(vec2<f32>(v, 0.0)) ^ opaque_zero()).x;
    return vec2<u32>(half_bits(hi), half_bits((v - hi) * 2048.0));
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let e = (wid.x + wid.y * nwg.x) * WG + lid;
    // e = (((img · PBLOCKS + pair block) · TBLOCKS + tile block) · TB + tile) · PB + pair.
    let block = e / (PB * TB);
    let tile = (block % TBLOCKS) * TB + (e / PB) % TB;
    let cp = ((block / TBLOCKS) % PBLOCKS) * PB + e % PB;
    let img = block / (TBLOCKS * PBLOCKS);
    if (img >= p.batch || tile >= TH * TW) {
        return;
    }
    let y0 = i32((tile / TW) * M) - i32(PT);
    let x0 = i32((tile % TW) * M) - i32(PL);
    let b0 = bt_d(img, 2u * cp, y0, x0);
    let b1 = bt_d(img, 2u * cp + 1u, y0, x0);
    let scale = input_scale();
    // Each staged pixel holds n²·CP words, component ξ's from ξ·CP on.
    let at = (img * TH * TW + tile) * N * N * CP + cp;
    let low = p.batch * TH * TW * N * N * CP;
    // (Bᵀ d) B, row by row.
    for (var i = 0u; i < N; i++) {
        let r0 = input_1d(b0[i]);
        let r1 = input_1d(b1[i]);
        for (var j = 0u; j < N; j++) {
            let h0 = halves(r0[j] * scale);
            let h1 = halves(r1[j] * scale);
            let w = at + (i * N + j) * CP;
            staged[w] = h0.x | (h1.x << 16u);
            staged[low + w] = h0.y | (h1.y << 16u);
        }
    }
}
