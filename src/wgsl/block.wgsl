// The block a workgroup of a tiled implicit GEMM computes (tiled/gather.wgsl and
// nhwc/nhwc.wgsl): tiles are numbered n-tile fastest, so workgroups that run together
// share input rows; the grid may be folded into two dimensions. The including kernel has
// the constants BM and BN and a `grid` uniform with m_tiles, n_tiles and total_tiles.
struct Block {
    valid: bool,
    g: u32,
    m0: u32,
    n0: u32,
}

fn locate_block(wid: vec3<u32>, nwg: vec3<u32>) -> Block {
    let tile = wid.x + wid.y * nwg.x;
    let nt = tile % grid.n_tiles;
    let mt = (tile / grid.n_tiles) % grid.m_tiles;
    let g = tile / (grid.n_tiles * grid.m_tiles);
    return Block(tile < grid.total_tiles, g, mt * BM, nt * BN);
}
