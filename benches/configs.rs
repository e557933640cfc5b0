//! Criterion comparison of a handful of kernels on one small convolution (N=2, 16→32
//! channels, 32×32, 3×3, padding 1, bias) on the default adapter (`WGCONV_ADAPTER` picks
//! another), through the public API only: the tiled family's reference (the seed's
//! config), the next configs of its sweep that fit the device, the direct kernel, and the
//! kernel a default `Conv2d` of each other precision selects on this device (f16: the
//! cooperative or the SIMT f16 kernel; f16x3: cooperative matrices only). Each kernel's
//! `Conv2d` and `ConvPlan` are built once (and checked against the CPU reference); an
//! iteration is encode + submit + `gpu.wait()`, so the times are host wall-clock and
//! include submission (`wgconv bench` reports GPU timestamps instead). Throughput is in
//! FLOP (criterion prints it as elem/s).
//!
//! Sample sizes are small so that `cargo bench --bench configs` finishes in well under a
//! minute on lavapipe. `cargo test --all-targets` runs each benchmark once (test mode).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput};
use std::time::Duration;
use wgconv::advanced::{select, sweep};
use wgconv::{reference, Conv2d, Conv2dOptions, Conv2dSpec, Gpu, GpuOptions, Kernel, Padding, Precision, Shape4};

/// Sweep configs compared besides the seed (the first ones after it that fit the device).
const SWEEP_CONFIGS: usize = 3;

fn data(len: usize, seed: u32) -> Vec<f32> {
    // A small deterministic generator: no RNG state to share with the library.
    (0..len as u32)
        .map(|i| {
            let v = i.wrapping_mul(2_654_435_761).wrapping_add(seed.wrapping_mul(40_503)) >> 8;
            v as f32 / (1u32 << 24) as f32 - 0.5
        })
        .collect()
}

/// The accuracy bound of a precision's kernels against the CPU reference (relative L2),
/// as `wgconv bench` checks them.
fn tolerance(p: Precision) -> f64 {
    match p {
        Precision::F32 => 1e-5,
        Precision::F16Accum32 => 1e-3,
        Precision::F16x3 => 1e-6,
        p => panic!("no bound for {p:?}"),
    }
}

fn kernels(gpu: &Gpu, spec: &Conv2dSpec) -> Vec<Kernel> {
    let fits = |k: &Kernel| match k.check(spec, gpu.caps()) {
        Ok(()) => true,
        Err(e) => {
            eprintln!("configs bench: {k} left out: {e}");
            false
        }
    };
    let tiled = sweep("tiled").expect("the tiled family");
    let seed = Kernel::parse("tiled").expect("the tiled family's reference");
    let mut kernels: Vec<Kernel> = Vec::new();
    if fits(&seed) {
        kernels.push(seed.clone());
    }
    kernels.extend(tiled.into_iter().filter(|k| *k != seed && fits(k)).take(SWEEP_CONFIGS));
    kernels.push(Kernel::parse("direct").expect("the direct kernel"));
    for precision in [Precision::F16Accum32, Precision::F16x3] {
        let options = Conv2dOptions::default().precision(precision);
        match select(gpu.caps(), spec, &options) {
            Ok(s) => kernels.push(s.kernel),
            Err(e) => eprintln!("configs bench: no {precision} kernel: {e}"),
        }
    }
    kernels
}

fn configs(c: &mut Criterion) {
    let opts = GpuOptions::default().cooperative_matrix(true);
    let gpu = Gpu::with_options(opts).expect("a wgpu adapter (lavapipe on a machine without GPU)");
    let spec = Conv2dSpec::new(16, 32, 3).padding(Padding::uniform(1)).with_bias(true);
    let shape = Shape4::new(2, 16, 32, 32);
    let problem = spec.problem(shape).expect("a valid problem");
    let x = data(shape.len() as usize, 1);
    let w = data(spec.weight_len(), 2);
    let b = data(spec.out_channels as usize, 3);
    let want = reference::conv2d(&problem, &x, &w, Some(&b)).expect("the reference");

    use wgpu::util::DeviceExt;
    let input = gpu.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: Some("bench input"),
        contents: bytemuck::cast_slice(&x),
        usage: wgpu::BufferUsages::STORAGE,
    });
    let output = gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("bench output"),
        size: problem.output.len() * 4,
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });

    // Criterion shortens long ids (and then numbers them): keep the group name short and
    // say the problem and adapter here.
    eprintln!("configs bench: {problem} on {} ({:?})", gpu.info.name, gpu.info.backend);
    let mut group = c.benchmark_group("conv2d");
    // Flat sampling: iterations take milliseconds on a CPU adapter (no "unable to complete
    // 10 samples" warning for the slow direct kernel).
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    group.throughput(Throughput::Elements(problem.flops() as u64));
    for kernel in kernels(&gpu, &spec) {
        let opts = Conv2dOptions::default().kernel(kernel.clone()).precision(kernel.precision());
        let conv = Conv2d::new(&gpu, spec, &w, Some(&b), opts).unwrap_or_else(|e| panic!("{kernel}: {e}"));
        let plan = conv.plan(shape, &input, &output).unwrap_or_else(|e| panic!("{kernel}: {e}"));
        // A wrong kernel's time means nothing: check once before timing.
        let mut enc = gpu.device.create_command_encoder(&Default::default());
        plan.encode(&mut enc, None);
        gpu.queue.submit([enc.finish()]);
        let got = gpu.read_buffer::<f32>(&output, 0, want.len()).expect("read back");
        let err = reference::relative_l2(&got, &want);
        let bound = tolerance(kernel.precision());
        assert!(err <= bound, "{kernel}: relative L2 {err:.2e} against the reference (bound {bound:.0e})");
        group.bench_function(BenchmarkId::from_parameter(kernel.to_string()), |bench| {
            bench.iter(|| {
                let mut enc = gpu.device.create_command_encoder(&Default::default());
                plan.encode(&mut enc, None);
                gpu.queue.submit([enc.finish()]);
                gpu.wait().expect("the queue drains");
            })
        });
    }
    group.finish();
}

criterion_group!(benches, configs);
criterion_main!(benches);
