// Imported into gather.wgsl's A loader where the problem's padding mode is not zeros: a
// border tap of a real row and tap loads the input element it mirrors, clamps or wraps to.
// row.x + tab.x addresses (iy, ix) of the tap's channel, so moving to (sy, sx) is an offset
// of whole rows and columns. Rows past the problem and padded K rows still load zero.
if (!(u32(iy) < p.h && u32(ix) < p.w) && row.w >= 0 && tab.y != OUT_OF_RANGE) {
    let mode = pad_mode();
    let sy = pad_coord(iy, i32(p.h), mode);
    let sx = pad_coord(ix, i32(p.w), mode);
    v = input_at(u32(row.x + tab.x + (sy - iy) * i32(p.w) + (sx - ix)));
}
