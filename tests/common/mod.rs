//! Shared by the GPU-vs-CPU tests: one device per test binary, seeded random data,
//! NaN-poisoned outputs, comparison with the CPU reference.
#![allow(dead_code)]

pub mod as_h100;

use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;
use std::sync::OnceLock;
use wgconv::{
    reference, Conv2d, Conv2dOptions, Conv2dSpec, ConvProblem, Gpu, GpuOptions, Kernel, Layout, Padding, Precision,
    Shape4, Storage,
};

/// The tolerance of the fp32 path against the f64 reference (the benchmark's
/// `F32_TOLERANCE`, which lives in the CLI crate now).
pub const TOL_F32: f64 = 1e-5;
/// The tolerance of f16 storage: the output's rounding to f16 (relative L2).
pub const TOL_STORAGE: f64 = 1e-3;
/// The tolerance of f16 operands with f32 accumulation (the benchmark's `F16_TOLERANCE`).
pub const TOL_F16: f64 = 1e-3;
/// The tolerance of the f16x3 kernels: the f32 class (the benchmark's `F16X3_TOLERANCE`).
pub const TOL_F16X3: f64 = 1e-6;

/// A kernel by its name (`family:config`, or a family alone for its reference kernel).
#[track_caller]
pub fn kernel(name: &str) -> Kernel {
    Kernel::parse(name).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// A kernel of `family` with a tile config (`tiled`, `tiled-f16`, `coop-f16`, `coop-f16x3`).
#[track_caller]
pub fn tiled_kernel(family: &str, tile: wgconv::TileConfig) -> Kernel {
    kernel(&format!("{family}:{tile}"))
}

/// The direct kernel.
pub fn direct_kernel() -> Kernel {
    kernel("direct")
}

/// The test binary's one device (one device per process: creating several at once hangs
/// NVIDIA's Linux driver). Cooperative matrices are enabled where the adapter has them, so
/// the f16 tests reach the matrix-unit kernel there; f32 kernels are unaffected.
pub fn gpu() -> Gpu {
    static GPU: OnceLock<Gpu> = OnceLock::new();
    GPU.get_or_init(|| {
        let opts = GpuOptions::default().cooperative_matrix(true);
        Gpu::with_options(opts).expect("a wgpu adapter (lavapipe in CI)")
    })
    .clone()
}

/// Whether the device has an f16 path (cooperative matrices or SHADER_F16).
pub fn has_f16(gpu: &Gpu) -> bool {
    gpu.has_coop_f16() || gpu.device.features().contains(wgpu::Features::SHADER_F16)
}

/// The tolerance of a kernel's precision: 1e-5 for f32, 1e-3 for f16 operands, 1e-6 for
/// f16x3.
pub fn tolerance(kernel: &Kernel) -> f64 {
    precision_tolerance(kernel.precision())
}

/// The tolerance of a precision.
pub fn precision_tolerance(precision: Precision) -> f64 {
    match precision {
        Precision::F32 => TOL_F32,
        Precision::F16Accum32 => TOL_F16,
        Precision::F16x3 => TOL_F16X3,
        p => panic!("no tolerance for {p:?}"),
    }
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
    run_poisoned_with(gpu, conv, input, shape, f32::NAN, 0).0
}

/// Like [`run_poisoned`] with another poison value (a NaN test needs a non-NaN one) and
/// `extra` more poisoned elements after the output: returns the output and that tail, which
/// must still hold the poison (nothing written past the output).
pub fn run_poisoned_with(
    gpu: &Gpu,
    conv: &Conv2d,
    input: &[f32],
    shape: Shape4,
    poison: f32,
    extra: usize,
) -> (Vec<f32>, Vec<f32>) {
    use wgpu::util::DeviceExt;
    let out_len = conv.spec().problem(shape).unwrap().output.len() as usize;
    let x = gpu.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: Some("test input"),
        contents: bytemuck::cast_slice(input),
        usage: wgpu::BufferUsages::STORAGE,
    });
    let y = gpu.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: Some("test output"),
        contents: bytemuck::cast_slice(&vec![poison; out_len + extra]),
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
    });
    let mut enc = gpu.device.create_command_encoder(&Default::default());
    conv.encode(&mut enc, shape, &x, &y).unwrap();
    gpu.queue.submit([enc.finish()]);
    let mut all = gpu.read_buffer::<f32>(&y, 0, out_len + extra).unwrap();
    let tail = all.split_off(out_len);
    (all, tail)
}

/// Asserts `got` matches the reference within `tol` (relative L2) and has no NaN.
pub fn assert_close(label: &str, got: &[f32], want: &[f32], tol: f64) {
    assert_close_on_scale(label, got, want, want, tol);
}

/// Asserts `got` matches `want` within `tol` relative to the L2 norm of `scale` (`want`
/// itself, or `want` before an activation) and has no NaN.
pub fn assert_close_on_scale(label: &str, got: &[f32], want: &[f32], scale: &[f32], tol: f64) {
    assert_eq!(got.len(), want.len(), "{label}: length");
    let nan = got.iter().filter(|v| v.is_nan()).count();
    assert_eq!(nan, 0, "{label}: {nan} NaN (unwritten) outputs");
    let diff: f64 = got.iter().zip(want).map(|(&g, &w)| (g as f64 - w as f64).powi(2)).sum();
    let norm: f64 = scale.iter().map(|&v| (v as f64).powi(2)).sum();
    let err = if norm == 0.0 { diff.sqrt() } else { (diff / norm).sqrt() };
    assert!(err <= tol, "{label}: relative L2 {err:.3e} > {tol:.0e}");
}

/// The reference output of a problem.
pub fn reference_out(problem: &ConvProblem, x: &[f32], w: &[f32], b: Option<&[f32]>) -> Vec<f32> {
    reference::conv2d(problem, x, w, b).unwrap()
}

/// A fresh random seed per call, or `WGCONV_TEST_SEED` to replay a failure.
pub fn test_seed() -> u64 {
    match std::env::var("WGCONV_TEST_SEED") {
        Ok(s) => s.trim().parse().expect("WGCONV_TEST_SEED must be a u64"),
        Err(_) => rand_seed(),
    }
}

/// A random test's seed ([`test_seed`]), printed with what the test is, and a generator
/// seeded with it.
pub fn seeded_rng(what: &str) -> (u64, rand::rngs::StdRng) {
    let seed = test_seed();
    eprintln!("{what}: WGCONV_TEST_SEED={seed}");
    (seed, rand::rngs::StdRng::seed_from_u64(seed))
}

/// One problem with its random data and reference output.
pub struct Case {
    pub name: String,
    pub spec: Conv2dSpec,
    pub shape: Shape4,
    pub problem: ConvProblem,
    pub seed: u64,
    /// The `WGCONV_TEST_SEED` that replays the case: its own seed, or the test's seed where
    /// the test derives the case's shape and seed from that ([`Case::replayed_by`]).
    pub replay: u64,
    pub x: Vec<f32>,
    pub w: Vec<f32>,
    pub b: Option<Vec<f32>>,
    pub want: Vec<f32>,
}

impl Case {
    /// Random normal input, weights and bias from a fresh seed (printed, so a failure can
    /// be replayed with `WGCONV_TEST_SEED`), and the f64 CPU reference.
    pub fn new(name: &str, spec: Conv2dSpec, shape: Shape4) -> Case {
        Case::with_seed(name, spec, shape, test_seed())
    }

    pub fn with_seed(name: &str, spec: Conv2dSpec, shape: Shape4, seed: u64) -> Case {
        let problem = spec.problem(shape).unwrap_or_else(|e| panic!("{name}: {e}"));
        eprintln!("{name}: {problem} seed {seed}");
        let x = randn(shape.len() as usize, seed);
        let (w, b) = params(&spec, seed.wrapping_add(1));
        let want = reference_out(&problem, &x, &w, b.as_deref());
        Case { name: name.to_string(), spec, shape, problem, seed, replay: seed, x, w, b, want }
    }

    /// The case as one of a test's random cases, all derived from the test's seed `base`:
    /// failures name `base` to replay it.
    pub fn replayed_by(mut self, base: u64) -> Case {
        self.replay = base;
        self
    }

    /// A label for assertions: the case, the kernel and how to replay the data.
    pub fn label(&self, what: &str) -> String {
        format!("{} [{what}] {} (replay: WGCONV_TEST_SEED={})", self.name, self.problem, self.replay)
    }

    /// Builds the op on `gpu` (`kernel: None`: the library's default choice).
    pub fn conv(&self, gpu: &Gpu, kernel: Option<Kernel>) -> Conv2d {
        self.conv_at(gpu, kernel, Precision::F32)
    }

    /// Builds the op at a precision (`kernel: None`: the library's default for it).
    pub fn conv_at(&self, gpu: &Gpu, kernel: Option<Kernel>, precision: Precision) -> Conv2d {
        let what = format!("{kernel:?}");
        let opts = Conv2dOptions::default().kernel(kernel).precision(precision);
        Conv2d::new(gpu, self.spec, &self.w, self.b.as_deref(), opts)
            .unwrap_or_else(|e| panic!("{}: {e}", self.label(&what)))
    }

    /// Runs through `encode` on NaN-poisoned output and checks against the reference.
    pub fn check_encode(&self, gpu: &Gpu, conv: &Conv2d) {
        let kernel = &conv.kernel().kernel;
        let got = run_poisoned(gpu, conv, &self.x, self.shape);
        assert_close(&self.label(&format!("encode, {kernel}")), &got, &self.want, tolerance(kernel));
    }

    /// Builds the op with `kernel` in f32 and ReLU, runs it through `encode` on NaN-poisoned
    /// output and checks it against the reference with ReLU applied, the error measured on
    /// the scale of the reference before the ReLU (the convolution's output, which the F32
    /// bound is about). ReLU adds no error but can zero most of a small output and leave one
    /// value whose sum cancelled: a 2×1×1×2 output kept 0.0317 from products summing to
    /// several units, 2.5e-6 from the f64 reference after the f32 sums (7.8e-5 of itself).
    pub fn check_relu(&self, gpu: &Gpu, kernel: Kernel) {
        let opts = options_at(Precision::F32, Some(kernel.clone()), true);
        let conv = Conv2d::new(gpu, self.spec, &self.w, self.b.as_deref(), opts)
            .unwrap_or_else(|e| panic!("{}: {e}", self.label(&format!("{kernel} relu"))));
        let want: Vec<f32> = self.want.iter().map(|&v| reference::relu(v)).collect();
        let got = run_poisoned(gpu, &conv, &self.x, self.shape);
        assert_close_on_scale(&self.label(&format!("{kernel} relu")), &got, &want, &self.want, TOL_F32);
    }

    /// Runs through `forward` (host slices) and checks against the reference.
    pub fn check_forward(&self, conv: &Conv2d) {
        let kernel = &conv.kernel().kernel;
        let got = conv.forward(&self.x, self.shape).unwrap_or_else(|e| panic!("{}: {e}", self.label("forward")));
        assert_close(&self.label(&format!("forward, {kernel}")), &got, &self.want, tolerance(kernel));
    }
}

/// Options for an op at a precision: a kernel (`None`: the library's choice), ReLU or none.
pub fn options_at(precision: Precision, kernel: Option<Kernel>, relu: bool) -> Conv2dOptions {
    let activation = if relu { wgconv::Activation::Relu } else { wgconv::Activation::None };
    Conv2dOptions::default().kernel(kernel).activation(activation).precision(precision)
}

/// A reduced-precision op (f16, f16x3) through `encode` into NaN-poisoned output and through
/// `forward`, both within `tol` of `want`, and no range flag raised on normal data. Returns
/// the larger of the two errors.
pub fn check_encode_and_forward(gpu: &Gpu, case: &Case, conv: &Conv2d, want: &[f32], tol: f64) -> f64 {
    let runs = encode_and_forward(gpu, case, conv);
    for (label, got) in &runs {
        assert_close(label, got, want, tol);
    }
    runs.iter().map(|(_, got)| reference::relative_l2(got, want)).fold(0.0, f64::max)
}

/// [`check_encode_and_forward`] for an op with f16 operands (`Precision::F16Accum32`) on
/// random data, against the case's reference through [`assert_f16_operands_close`].
pub fn check_f16_encode_and_forward(gpu: &Gpu, case: &Case, conv: &Conv2d) {
    for (label, got) in encode_and_forward(gpu, case, conv) {
        assert_f16_operands_close(&label, &got, &case.want, case, |r| r);
    }
}

/// The op's output through `encode` into NaN-poisoned output, then through `forward`, each
/// with its label; no range flag raised on normal data in between.
fn encode_and_forward(gpu: &Gpu, case: &Case, conv: &Conv2d) -> [(String, Vec<f32>); 2] {
    let kind = &conv.kernel().kernel;
    let encoded = run_poisoned(gpu, conv, &case.x, case.shape);
    assert!(!conv.take_range_flag().unwrap(), "{}: range flag on normal data", case.label(&kind.to_string()));
    let forward = conv.forward(&case.x, case.shape).unwrap_or_else(|e| panic!("{}: {e}", case.label("forward")));
    [(case.label(&format!("encode, {kind}")), encoded), (case.label(&format!("forward, {kind}")), forward)]
}

/// Asserts an f16-operand result (`Precision::F16Accum32`) matches the case: within
/// [`TOL_F16`] of `want`, or, where rounding the operands alone puts it beyond that (random
/// data whose products cancel), within [`TOL_F32`] of one of [`f16_operand_references`],
/// which `form` puts in `want`'s form (layout, activation).
pub fn assert_f16_operands_close(
    what: &str,
    got: &[f32],
    want: &[f32],
    case: &Case,
    form: impl Fn(Vec<f32>) -> Vec<f32>,
) {
    let err = reference::relative_l2(got, want);
    if err <= TOL_F16 {
        return assert_close(what, got, want, TOL_F16);
    }
    let rounded = f16_operand_references(case).map(|r| reference::relative_l2(got, &form(r)));
    assert!(
        rounded.iter().any(|&e| e <= TOL_F32),
        "{what}: relative L2 {err:.3e} > {TOL_F16:e}, and {:.2e} / {:.2e} from the rounded operands' references",
        rounded[0],
        rounded[1]
    );
}

/// `got` is NaN exactly where `want` is, and `want` has a NaN somewhere.
pub fn assert_same_nans(label: &str, got: &[f32], want: &[f32]) {
    let nans = |v: &[f32]| -> Vec<usize> { (0..v.len()).filter(|&i| v[i].is_nan()).collect() };
    assert!(!nans(want).is_empty(), "{label}: the reference has no NaN");
    assert_eq!(nans(got), nans(want), "{label}: NaN positions");
}

/// `got` is NaN, +inf and -inf exactly where `want` is, and its finite outputs are within the
/// f32 bound of `want`'s.
pub fn assert_special_values_as_f32(label: &str, got: &[f32], want: &[f32]) {
    let class = |v: f32| match v {
        v if v.is_nan() => 0,
        f32::INFINITY => 1,
        f32::NEG_INFINITY => 2,
        _ => 3,
    };
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert_eq!(class(g), class(w), "{label}: output {i} is {g}, the reference {w}");
    }
    let finite: Vec<usize> = (0..got.len()).filter(|&i| want[i].is_finite()).collect();
    let g: Vec<f32> = finite.iter().map(|&i| got[i]).collect();
    let w: Vec<f32> = finite.iter().map(|&i| want[i]).collect();
    assert_close(label, &g, &w, TOL_F32);
}

/// An empty directory for one test process's files that must outlive each test (a tuning
/// cache the tests share through the environment), under Cargo's `CARGO_TARGET_TMPDIR`,
/// never in the system's temporary directory. Named by the process (test runners that run
/// one process per test run them side by side); those of earlier processes are removed
/// once an hour old.
pub fn binary_dir(name: &str) -> std::path::PathBuf {
    let root = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let stale = |e: &std::fs::DirEntry| {
        let age = e.metadata().and_then(|m| m.modified()).ok().and_then(|t| t.elapsed().ok());
        e.file_name().to_string_lossy().starts_with(&format!("{name}-"))
            && age.is_some_and(|a| a > std::time::Duration::from_secs(3600))
    };
    for entry in std::fs::read_dir(root).into_iter().flatten().flatten().filter(stale) {
        let _ = std::fs::remove_dir_all(entry.path());
    }
    let dir = root.join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}

/// Serialises the tests that open their own devices: creating (and using) several Vulkan
/// devices from parallel test threads hangs on NVIDIA's Linux driver (seen on an H100 with
/// 16 test threads; see gfx-rs/wgpu#10010, #10234). Hold the guard for the whole test,
/// declared before the device so that the device is dropped first.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The test device where it has cooperative matrices, or `None` (saying so).
pub fn coop_gpu() -> Option<Gpu> {
    let gpu = gpu();
    if gpu.has_coop_f16() {
        Some(gpu)
    } else {
        eprintln!("skipped: {} has no cooperative matrices (f16 16x16x16, subgroup 32)", gpu.info.name);
        None
    }
}

/// A device on the same adapter as [`gpu`] with some limits lowered (`lower` edits a copy
/// of the adapter's limits, so every other limit stays what the adapter allows).
pub fn gpu_with_limits(lower: impl FnOnce(&mut wgpu::Limits)) -> Gpu {
    let base = gpu();
    let mut limits = base.limits();
    lower(&mut limits);
    let opts = GpuOptions::default().adapter(base.info.name.clone()).limits(limits);
    Gpu::with_options(opts).expect("a device with lowered limits")
}

/// [`gpu_with_limits`] with cooperative matrices opted in, or `None` (saying so) where the
/// adapter has none.
pub fn coop_gpu_with_limits(lower: impl FnOnce(&mut wgpu::Limits)) -> Option<Gpu> {
    let base = gpu();
    let mut limits = base.limits();
    lower(&mut limits);
    let opts = GpuOptions::default().adapter(base.info.name.clone()).limits(limits).cooperative_matrix(true);
    let gpu = Gpu::with_options(opts).expect("a device with lowered limits");
    if !gpu.has_coop_f16() {
        eprintln!("skipped: {} has no cooperative matrices", gpu.info.name);
        return None;
    }
    Some(gpu)
}

/// Ragged shapes for the f16 and f16x3 tests: strides, asymmetric padding, dilation, groups /
/// depthwise, C_out 1, 3, 17, 96, bias on and off, ReLU on and off, N = 1..3.
/// `(name, spec, [N, H, W], relu)`.
pub fn ragged_shapes() -> Vec<(&'static str, Conv2dSpec, [u32; 3], bool)> {
    vec![
        (
            "stride2x1_asym_pad_cout17_bias",
            Conv2dSpec::new(3, 17, 3).stride((2, 1)).padding(Padding::new(1, 0, 2, 1)).with_bias(true),
            [2, 13, 11],
            false,
        ),
        (
            "dilation2_relu_n3",
            Conv2dSpec::new(3, 8, 3).dilation((2, 2)).padding(Padding::uniform(2)),
            [3, 12, 12],
            true,
        ),
        ("groups3_stride2_bias", Conv2dSpec::new(6, 9, 3).groups(3).stride((2, 2)).with_bias(true), [1, 11, 12], false),
        (
            "depthwise_3x3_bias_relu",
            Conv2dSpec::new(8, 8, 3).groups(8).padding(Padding::uniform(1)).with_bias(true),
            [2, 10, 10],
            true,
        ),
        ("cout1_bias", Conv2dSpec::new(3, 1, 3).padding(Padding::uniform(1)).with_bias(true), [2, 9, 7], false),
        ("cout3_stride3x2_relu", Conv2dSpec::new(5, 3, 3).stride((3, 2)), [1, 10, 12], true),
        (
            "cout96_5x5_stride2_bias",
            Conv2dSpec::new(3, 96, 5).stride((2, 2)).padding(Padding::uniform(2)).with_bias(true),
            [1, 15, 13],
            false,
        ),
        (
            "k1x1_stride2_pad1_cout17_n3",
            Conv2dSpec::new(16, 17, 1).stride((2, 2)).padding(Padding::uniform(1)),
            [3, 9, 8],
            false,
        ),
        (
            "k11_stride4_cout17_bias_relu",
            Conv2dSpec::new(3, 17, 11).stride((4, 4)).padding(Padding::uniform(2)).with_bias(true),
            [2, 31, 27],
            true,
        ),
        (
            "groups4_dilation2_asym_pad",
            Conv2dSpec::new(8, 12, 3).groups(4).stride((2, 1)).dilation((2, 2)).padding(Padding::new(2, 1, 0, 3)),
            [2, 13, 9],
            false,
        ),
    ]
}

/// The references an f16-operand result may equal where the operands' rounding alone puts
/// it beyond [`TOL_F16`] of the f64 reference (one product per output cancelling against the
/// bias, ReLU leaving mostly those): weights rounded to f16, the input rounded or left exact
/// (drivers may fold a kernel's f32 → f16 → f32 round trip away, as NVIDIA's does). NCHW.
pub fn f16_operand_references(case: &Case) -> [Vec<f32>; 2] {
    let round = |v: &[f32]| -> Vec<f32> { v.iter().map(|&v| wgconv::half::f16::from_f32(v).to_f32()).collect() };
    let w = round(&case.w);
    [
        reference_out(&case.problem, &round(&case.x), &w, case.b.as_deref()),
        reference_out(&case.problem, &case.x, &w, case.b.as_deref()),
    ]
}

/// A kernel that reads NCHW f32 tensors, run on the other forms through layout passes: f16
/// tensors in both layouts ([`check_f16_storage`]) and channels-last f32 tensors through
/// `forward`, each against the reference.
pub fn check_in_every_layout(gpu: &Gpu, case: &Case, kernel: &Kernel) {
    for layout in [Layout::Nchw, Layout::Nhwc] {
        check_f16_storage(gpu, case, Some(kernel.clone()), layout);
    }
    let opts = Conv2dOptions::default().kernel(Some(kernel.clone())).layout(Layout::Nhwc);
    let conv = Conv2d::new(gpu, case.spec, &case.w, case.b.as_deref(), opts).unwrap();
    let x = reference::to_nhwc(&case.x, case.shape).unwrap();
    let want = reference::to_nhwc(&case.want, case.problem.output).unwrap();
    assert_close(&case.label(&format!("{kernel} NHWC")), &conv.forward(&x, case.shape).unwrap(), &want, TOL_F32);
}

/// `conv` (built on a device whose binding limit holds a few images) planned in at least 3
/// chunks, each of `dispatches_per_chunk` dispatches where given, run on NaN-poisoned output:
/// the result against the reference, the output past the last image untouched.
pub fn check_chunked(gpu: &Gpu, case: &Case, conv: &Conv2d, dispatches_per_chunk: Option<usize>) {
    let output = gpu.create_buffer("out", case.problem.output.len() * 4, wgpu::BufferUsages::STORAGE).unwrap();
    let input = gpu.buffer_init("in", bytemuck::cast_slice(&case.x), wgpu::BufferUsages::STORAGE).unwrap();
    let plan = conv.plan(case.shape, &input, &output).unwrap();
    assert!(plan.chunks() >= 3, "{} chunks", plan.chunks());
    if let Some(d) = dispatches_per_chunk {
        assert_eq!(plan.dispatches(), d * plan.chunks());
    }
    let (got, tail) = run_poisoned_with(gpu, conv, &case.x, case.shape, f32::NAN, 5);
    assert_close(&case.label("chunked"), &got, &case.want, TOL_F32);
    assert!(tail.iter().all(|v| v.is_nan()));
}

/// The kernel on f16 tensors (`Storage::F16`; on devices with `SHADER_F16` it reads and
/// writes them itself) against the reference of the f16-rounded input: what remains is the
/// output's rounding to f16.
/// Returns the op, whose kernel a first forward may have selected.
pub fn check_f16_storage(gpu: &Gpu, case: &Case, kernel: Option<Kernel>, layout: Layout) -> Conv2d {
    use wgconv::half::f16;
    let x16: Vec<f16> = case.x.iter().map(|&v| f16::from_f32(v)).collect();
    let rounded: Vec<f32> = x16.iter().map(|v| v.to_f32()).collect();
    let mut want = reference_out(&case.problem, &rounded, &case.w, case.b.as_deref());
    let x = match layout {
        Layout::Nhwc => {
            want = reference::to_nhwc(&want, case.problem.output).unwrap();
            reference::to_nhwc(&rounded, case.shape).unwrap().iter().map(|&v| f16::from_f32(v)).collect()
        }
        _ => x16,
    };
    let mut opts = Conv2dOptions::default().layout(layout).storage(Storage::F16);
    opts.kernel = kernel;
    let conv = Conv2d::new(gpu, case.spec, &case.w, case.b.as_deref(), opts)
        .unwrap_or_else(|e| panic!("{}: {e}", case.label("f16 storage")));
    let what = case.label(&format!("{}, {layout:?} f16 storage", conv.kernel().kernel));
    let got = conv.forward_f16(&x, case.shape).unwrap_or_else(|e| panic!("{what}: {e}"));
    let got: Vec<f32> = got.iter().map(|v| v.to_f32()).collect();
    assert_close(&what, &got, &want, TOL_STORAGE);
    conv
}

/// A random 3×3 stride-1 convolution (1 to `max_channels` input and output channels, 0–2
/// padding per side, bias or not) and input (batch 1 or 2, 1–19 rows and columns) from
/// `rng`: the Winograd families' property tests.
pub fn random_3x3_case(rng: &mut rand::rngs::StdRng, i: usize, seed: u64, max_channels: u32) -> Case {
    random_square_case(rng, i, seed, max_channels, 3)
}

/// [`random_3x3_case`] with a square kernel of side `kernel`.
pub fn random_square_case(rng: &mut rand::rngs::StdRng, i: usize, seed: u64, max_channels: u32, kernel: u32) -> Case {
    loop {
        let pad = |r: &mut rand::rngs::StdRng| r.random_range(0..=2u32);
        let padding = Padding::new(pad(rng), pad(rng), pad(rng), pad(rng));
        let spec = Conv2dSpec::new(rng.random_range(1..=max_channels), rng.random_range(1..=max_channels), kernel)
            .padding(padding)
            .with_bias(rng.random_bool(0.5));
        let n = if rng.random_bool(0.5) { 1 } else { 2 };
        let shape = Shape4::new(n, spec.in_channels, rng.random_range(1..=19u32), rng.random_range(1..=19u32));
        if spec.problem(shape).is_ok() {
            return Case::with_seed(&format!("random_{i}"), spec, shape, seed.wrapping_add(i as u64)).replayed_by(seed);
        }
    }
}

/// `count` seeded random shapes of a square kernel of side `kernel` ([`random_square_case`],
/// up to `max_channels`), one of `kernels` on each in turn, f32 within 1e-5 of the reference
/// through `encode` into NaN-poisoned output; ReLU on every third: the Winograd families'
/// property tests (`what` names the seed's stream).
pub fn check_random_square_shapes(
    gpu: &Gpu,
    what: &str,
    kernels: &[Kernel],
    kernel: u32,
    count: usize,
    max_channels: u32,
) {
    let (seed, mut rng) = seeded_rng(what);
    for i in 0..count {
        let case = random_square_case(&mut rng, i, seed, max_channels, kernel);
        let k = kernels[i % kernels.len()].clone();
        if i % 3 == 0 {
            case.check_relu(gpu, k);
        } else {
            case.check_encode(gpu, &case.conv(gpu, Some(k)));
        }
    }
}

/// `kernel` at f16 precision on the case's tensors in every form — NCHW and channels last,
/// f32 and f16 — through `forward` (`forward_f16`), within the f16 bound of the reference
/// (of the f16-rounded input for f16 tensors), and no range flag raised.
pub fn check_f16_in_every_form(gpu: &Gpu, case: &Case, kernel: &Kernel) {
    use wgconv::half::f16;
    let rounded: Vec<f32> = case.x.iter().map(|&v| f16::from_f32(v).to_f32()).collect();
    let want16 = reference_out(&case.problem, &rounded, &case.w, case.b.as_deref());
    for layout in [Layout::Nchw, Layout::Nhwc] {
        let (x, want, x16, want16) = match layout {
            Layout::Nhwc => (
                reference::to_nhwc(&case.x, case.shape).unwrap(),
                reference::to_nhwc(&case.want, case.problem.output).unwrap(),
                reference::to_nhwc(&rounded, case.shape).unwrap(),
                reference::to_nhwc(&want16, case.problem.output).unwrap(),
            ),
            _ => (case.x.clone(), case.want.clone(), rounded.clone(), want16.clone()),
        };
        for storage in [Storage::F32, Storage::F16] {
            let opts = options_at(Precision::F16Accum32, Some(kernel.clone()), false).layout(layout).storage(storage);
            let conv = Conv2d::new(gpu, case.spec, &case.w, case.b.as_deref(), opts).unwrap();
            let what = case.label(&format!("{kernel}, {layout:?} {storage:?}"));
            if storage == Storage::F32 {
                let got = conv.forward(&x, case.shape).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_close(&what, &got, &want, TOL_F16);
            } else {
                let x: Vec<f16> = x16.iter().map(|&v| f16::from_f32(v)).collect();
                let got = conv.forward_f16(&x, case.shape).unwrap_or_else(|e| panic!("{what}: {e}"));
                let got: Vec<f32> = got.iter().map(|v| v.to_f32()).collect();
                assert_close(&what, &got, &want16, TOL_F16);
            }
            assert!(!conv.take_range_flag().unwrap(), "{what}: range flag on normal data");
        }
    }
}

/// `kernel` at f16 precision (ReLU where `relu`) on the case through `encode` into
/// NaN-poisoned output and `forward`, within the f16 bound of the reference (ReLU applied).
pub fn check_f16_kernel(gpu: &Gpu, case: &Case, kernel: &Kernel, relu: bool) {
    let want: Vec<f32> = match relu {
        true => case.want.iter().map(|&v| reference::relu(v)).collect(),
        false => case.want.clone(),
    };
    let opts = options_at(Precision::F16Accum32, Some(kernel.clone()), relu);
    let conv = Conv2d::new(gpu, case.spec, &case.w, case.b.as_deref(), opts)
        .unwrap_or_else(|e| panic!("{}: {e}", case.label(&kernel.to_string())));
    check_encode_and_forward(gpu, case, &conv, &want, TOL_F16);
}

/// An f32 op of `kernel` on `base`'s spec and shape with its inputs and weights scaled by each
/// pair of `factors` (no bias): within the f32 bound of the reference on the scaled data.
/// `what` names the case in the labels.
pub fn check_magnitudes(gpu: &Gpu, base: &Case, kernel: Option<Kernel>, factors: &[(f32, f32)], what: &str) {
    for &(fx, fw) in factors {
        let x: Vec<f32> = base.x.iter().map(|v| v * fx).collect();
        let w: Vec<f32> = base.w.iter().map(|v| v * fw).collect();
        let want = reference_out(&base.problem, &x, &w, None);
        let conv = Conv2d::new(gpu, base.spec, &w, None, options_at(Precision::F32, kernel.clone(), false)).unwrap();
        let got = run_poisoned(gpu, &conv, &x, base.shape);
        let label = base.label(&format!("{what}inputs × {fx:e}, weights × {fw:e}"));
        assert_close(&label, &got, &want, TOL_F32);
        eprintln!("{label}: relative L2 {:.2e}", reference::relative_l2(&got, &want));
    }
}
