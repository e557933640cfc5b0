// How an operand enters the products, by precision (`#define F16`, `F16X3`, or neither for
// f32): `to_operand` and `report_range`. The f16 precisions clamp and flag (`RANGE_FLAG`);
// the F32 kernel on the matrix units defines `F16X3` without it: its staging pass scales the
// input into f16's range instead (`input_scale.wgsl`), and operands enter unchanged.
//
// Under the f16 precisions a value beyond f16's range is clamped, so no infinity enters the
// sums (NaN stays NaN: `is_nan` tests the bits, a clamp may drop it), and noted in a private
// flag that `report_range` publishes once at the end: an atomic inside the gather loop keeps
// the compiler from overlapping the loads (the f16 kernel ran 1.8× slower with one on the
// H100). The host then refuses the result.
#ifdef RANGE_FLAG
@group(0) @binding(6) var<storage, read_write> range_flag: atomic<u32>;
const F16_MAX: f32 = 65504.0;
var<private> out_of_range: bool = false;
fn report_range() {
    if (out_of_range) {
        atomicOr(&range_flag, 1u);
    }
}
#else
fn report_range() {}
#endif
#ifdef RANGE_FLAG
#ifdef F16
// Rounded to f16 here, for kernels that keep operands in f32 registers or workgroup memory
// (the kernels that store them as WGSL f16 take `checked_operand` and convert). A driver may
// fold the round trip away: NVIDIA's Vulkan compiler does, leaving the H100's SIMT f16
// kernels' inputs unrounded, which only makes their results closer to f32's. Rounding on the
// bits instead, which no compiler may drop, cost those kernels 5–36 % on the H100.
fn to_operand(v: f32) -> f32 {
    out_of_range = out_of_range || abs(v) > F16_MAX;
    return select(f32(f16(clamp(v, -F16_MAX, F16_MAX))), v, is_nan(v));
}
#endif
#ifdef F16X3
// Range-checked, not rounded: the split into two f16 happens in the kernel's `store_a`.
fn to_operand(v: f32) -> f32 {
    return checked_operand(v);
}
#endif
// Clamped and flagged, not rounded: an operand that is an f16 value already (an f16
// tensor's, where only ±inf can be out of range), or one the kernel converts to WGSL f16
// itself (the conversion rounds: to the nearest, ties to even, on lavapipe and the H100).
fn checked_operand(v: f32) -> f32 {
    out_of_range = out_of_range || abs(v) > F16_MAX;
    return select(clamp(v, -F16_MAX, F16_MAX), v, is_nan(v));
}
#else
fn to_operand(v: f32) -> f32 {
    return v;
}
fn checked_operand(v: f32) -> f32 {
    return v;
}
#endif
