// The workgroup grid of the kernels that walk output rows (the row-band and stem families),
// written by their host side (`RowGrid`, same field order): a workgroup's tile number counts
// channel tiles fastest, then column tiles, row tiles, images and groups.
struct Grid {
    n_pad: u32,        // the group's output channels padded to whole BN blocks
    n_tiles: u32,      // n_pad / BN
    total_tiles: u32,  // workgroups in the dispatch (the grid may be folded and padded)
    row_tiles: u32,    // row tiles (runs of output rows) per image
    x_tiles: u32,      // column tiles per output row
    x_clamp: u32,      // the largest fragment start: OW - 16 (0 for rows narrower than 16)
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(7) var<uniform> grid: Grid;

// A workgroup's place in the grid.
struct GridTile {
    nt: u32,
    xt: u32,
    rt: u32,
    img: u32,
    g: u32,
}

fn grid_tile(tile: u32) -> GridTile {
    let q1 = tile / grid.n_tiles;
    let q2 = q1 / grid.x_tiles;
    let q3 = q2 / grid.row_tiles;
    return GridTile(tile % grid.n_tiles, q1 % grid.x_tiles, q2 % grid.row_tiles, q3 % p.batch, q3 / p.batch);
}
