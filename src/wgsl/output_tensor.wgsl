// The output tensor at binding 5, element by element: the caller's f16 tensor
// (`F16_TENSORS`, each value rounded as `f16_bits.wgsl` rounds) or f32, written through
// `output_value`. For the passes that write the caller's tensor in either element type.

#ifdef F16_TENSORS
#import f16_bits
@group(0) @binding(5) var<storage, read_write> output: array<f16>;
fn output_value(v: f32) -> f16 {
    return to_f16(v);
}
#else
@group(0) @binding(5) var<storage, read_write> output: array<f32>;
fn output_value(v: f32) -> f32 {
    return v;
}
#endif
