// Shared by every conv kernel: the per-dispatch parameters, written by src/kernel.rs
// (`ConvParams`, same field order). One dispatch covers `batch` images of one chunk;
// `in_offset` / `out_offset` place the chunk inside the bound buffer windows (binding
// offsets must be aligned, chunk starts need not be).
struct Params {
    c_in: u32, h: u32, w: u32, c_out: u32,
    oh: u32, ow: u32, batch: u32, m_total: u32,
    kh: u32, kw: u32, stride_h: u32, stride_w: u32,
    pad_top: u32, pad_left: u32, dil_h: u32, dil_w: u32,
    c_in_per_group: u32, c_out_per_group: u32, groups: u32, k_total: u32,
    k_tiles: u32, n_pad: u32, m_tiles: u32, n_tiles: u32,
    total_tiles: u32, in_offset: u32, out_offset: u32, flags: u32,
    // The row-band kernel's grid (conv_band.wgsl; zero for the other kernels; the rest of
    // its geometry, its channel-chunk count included, is compiled in).
    row_tiles: u32, x_tiles: u32, x_clamp: u32,
    // A power of two the gathering kernels' sums are multiplied by before the bias
    // (gather.wgsl's store_output): it undoes the f16x3 kernel's weight scaling
    // (coop_operands_f16x3.wgsl); 1 for the others. The row-band and direct kernels do
    // not read it (they never run f16x3).
    out_scale: f32,
}

// A workgroup's place in the grid of the row-band and stem kernels, from its tile number as
// the host counts them (src/conv2d.rs): channel tile fastest, then column tile, row tile,
// image and group.
struct GridTile {
    nt: u32,
    xt: u32,
    rt: u32,
    img: u32,
    g: u32,
}

fn grid_tile(tile: u32) -> GridTile {
    let q1 = tile / p.n_tiles;
    let q2 = q1 / p.x_tiles;
    let q3 = q2 / p.row_tiles;
    return GridTile(tile % p.n_tiles, q1 % p.x_tiles, q2 % p.row_tiles, q3 % p.batch, q3 / p.batch);
}

// flags (the host sets only bits below 16)
const FLAG_RELU: u32 = 1u;

@group(0) @binding(0) var<uniform> p: Params;

// Zero, but only the host knows it: keeps the compiler from folding an exact-looking
// round trip that is not exact (coop_operands_f16x3.wgsl).
fn opaque_zero() -> u32 {
    return p.flags >> 16u;
}

// NaN, tested on the bits: Vulkan drivers may assume float arithmetic sees no NaN (no float
// controls are requested), and NVIDIA's turned `select(v, 0.0, v < 0.0)` into a max that maps
// NaN to 0 (tests/activation.rs on the H100). Integer tests cannot be folded away.
fn is_nan(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;
}

// ReLU as PyTorch's: NaN stays NaN.
fn activate(v: f32) -> f32 {
    if ((p.flags & FLAG_RELU) != 0u) {
        return select(v, 0.0, v < 0.0 && !is_nan(v));
    }
    return v;
}
