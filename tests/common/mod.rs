//! Shared by the GPU-vs-CPU tests: one device per test binary, seeded random data,
//! NaN-poisoned outputs, comparison with the CPU reference.
#![allow(dead_code)]

use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;
use std::sync::{Arc, OnceLock};
use wgconv::{reference, Conv2d, Conv2dSpec, ConvProblem, Gpu, Shape4};

/// The tolerance of the fp32 path against the f64 reference.
pub const TOL_F32: f64 = 1e-5;

pub fn gpu() -> Arc<Gpu> {
    static GPU: OnceLock<Arc<Gpu>> = OnceLock::new();
    GPU.get_or_init(|| Arc::new(Gpu::new().expect("a wgpu adapter (lavapipe in CI)"))).clone()
}

/// Standard-normal values from a seed: never zeros, different per call site.
pub fn randn(len: usize, seed: u64) -> Vec<f32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..len).map(|_| rng.sample::<f32, _>(StandardNormal)).collect()
}

pub fn rand_seed() -> u64 {
    rand::rng().random()
}

/// Weights and bias for a spec.
pub fn params(spec: &Conv2dSpec, seed: u64) -> (Vec<f32>, Option<Vec<f32>>) {
    let w = randn(spec.weight_len(), seed);
    let b = spec.bias.then(|| randn(spec.out_channels as usize, seed ^ 0x5eed));
    (w, b)
}

/// Runs `conv` through `encode` on buffers it owns, the output poisoned with NaN first,
/// and returns what the GPU wrote.
pub fn run_poisoned(gpu: &Gpu, conv: &Conv2d, input: &[f32], shape: Shape4) -> Vec<f32> {
    use wgpu::util::DeviceExt;
    let problem = conv.spec().problem(shape).unwrap();
    let x = gpu.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: Some("test input"),
        contents: bytemuck::cast_slice(input),
        usage: wgpu::BufferUsages::STORAGE,
    });
    let poison = vec![f32::NAN; problem.output.len() as usize];
    let y = gpu.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: Some("test output"),
        contents: bytemuck::cast_slice(&poison),
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
    });
    let mut enc = gpu.device.create_command_encoder(&Default::default());
    conv.encode(&mut enc, shape, &x, &y).unwrap();
    gpu.queue.submit([enc.finish()]);
    gpu.read_buffer::<f32>(&y, 0, problem.output.len() as usize).unwrap()
}

/// Asserts `got` matches the reference within `tol` (relative L2) and has no NaN.
pub fn assert_close(label: &str, got: &[f32], want: &[f32], tol: f64) {
    assert_eq!(got.len(), want.len(), "{label}: length");
    let nan = got.iter().filter(|v| v.is_nan()).count();
    assert_eq!(nan, 0, "{label}: {nan} NaN (unwritten) outputs");
    let err = reference::relative_l2(got, want);
    assert!(err <= tol, "{label}: relative L2 {err:.3e} > {tol:.0e}");
}

/// The reference output of a problem.
pub fn reference_out(problem: &ConvProblem, x: &[f32], w: &[f32], b: Option<&[f32]>) -> Vec<f32> {
    reference::conv2d(problem, x, w, b).unwrap()
}
