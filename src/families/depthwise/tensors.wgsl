// How the depthwise shaders read their input and write their output: f32 tensors, or f16
// ones that the kernel reads and writes itself (F16_TENSORS, `Storage::F16` on devices with
// SHADER_F16), in place of conversion passes around an f32 kernel. Values are summed in f32
// either way; an f16 output is rounded as the layout passes round it (`f16_bits.wgsl`).

#import precision

#ifdef F16_TENSORS
#import f16_bits
@group(0) @binding(1) var<storage, read> input: array<f16>;
@group(0) @binding(5) var<storage, read_write> output: array<f16>;

// An f16 value: rounding it to an f16 operand is exact, so only the range check remains.
fn load_input(i: u32) -> f32 {
    return input_operand(input_value(i));
}

// The input value as f32, and the operand made of it (separately: a caller may select a zero
// in place of a value it loaded unconditionally before the operand's range check sees it).
fn input_value(i: u32) -> f32 {
    return f32(input[i]);
}

fn input_operand(v: f32) -> f32 {
    return checked_operand(v);
}

fn store_output(i: u32, v: f32) {
    output[i] = to_f16(v);
}

// An input value for a kernel that checks its sums instead of each value (`sums_finite` and
// `rescan_block` in depthwise.wgsl): f16 values are f16 operands already, and the only ones
// beyond f16's range are ±inf, which make every sum they reach ±inf or NaN.
fn load_summed(i: u32) -> f32 {
    return input_value(i);
}
#else
@group(0) @binding(1) var<storage, read> input: array<f32>;
@group(0) @binding(5) var<storage, read_write> output: array<f32>;

fn load_input(i: u32) -> f32 {
    return input_operand(input_value(i));
}

fn input_value(i: u32) -> f32 {
    return input[i];
}

fn input_operand(v: f32) -> f32 {
    return to_operand(v);
}

fn store_output(i: u32, v: f32) {
    output[i] = v;
}

// f32 values: rounded and checked one by one (their sums cannot tell a finite value beyond
// f16's range).
fn load_summed(i: u32) -> f32 {
    return load_input(i);
}
#endif
