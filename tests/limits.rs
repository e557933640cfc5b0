//! Device limits: batch chunking under a small storage-binding limit, grid folding under
//! a small workgroup-count limit, and tile configs refused (or replaced) when over the
//! device's limits. Each test opens a device on the test adapter with a few limits
//! lowered from the adapter's own (`common::gpu_with_limits`), so small shapes hit paths
//! that real GPUs reach only with huge batches.

mod common;
use common::*;
use wgconv::advanced::default_sweep;
use wgconv::{ConfigSource, Conv2d, Conv2dOptions, Error, Shape4, TileConfig};
use wgconv::{Conv2dSpec as S, Padding as P};

/// Images per chunk as the library must compute it: each chunk's input and output window,
/// plus up to one offset alignment of slack, fits the binding limit.
fn expected_images_per_chunk(case: &Case, limits: &wgpu::Limits) -> u64 {
    let cap = (limits.max_storage_buffer_binding_size - limits.min_storage_buffer_offset_alignment as u64) / 4;
    cap / case.problem.input.per_image().max(case.problem.output.per_image())
}

/// A binding limit of 8224 B splits a batch of 7 images (429 input and 715 output
/// elements each: odd counts, so chunk starts fall off every alignment) into 4 chunks.
#[test]
fn batch_chunking_encode_and_forward() {
    let spec = S::new(3, 5, 3).padding(P::uniform(1)).with_bias(true);
    let case = Case::new("chunked", spec, Shape4::new(7, 3, 13, 11));
    let (per_in, per_out) = (case.problem.input.per_image(), case.problem.output.per_image());
    assert_eq!((per_in, per_out), (429, 715));
    // Large enough for the seed config's packed weights (K and C_out padded to whole
    // blocks: 32 × 64 floats = 8192 B, bound whole) and for two images.
    let seed = TileConfig::seed();
    let packed = (spec.k_total().div_ceil(seed.block_k)
        * seed.block_k
        * spec.out_channels.div_ceil(seed.block_n)
        * seed.block_n) as u64
        * 4;
    let binding = packed.max(2 * per_out * 4) + 32;
    assert_eq!(binding, 8224);
    let _serial = serial();
    let gpu = gpu_with_limits(|l| l.max_storage_buffer_binding_size = binding);
    let limits = gpu.limits();
    assert_eq!(limits.max_storage_buffer_binding_size, binding, "the device did not take the lowered limit");
    let per_chunk = expected_images_per_chunk(&case, &limits);
    assert_eq!(per_chunk, 2);
    let align = limits.min_storage_buffer_offset_alignment as u64;
    // Chunk starts (bytes) are neither 256-aligned nor aligned to the device's offset alignment.
    for first in (per_chunk..case.shape.n as u64).step_by(per_chunk as usize) {
        for bytes in [first * per_in * 4, first * per_out * 4] {
            assert!(bytes % 256 != 0 && bytes % align != 0, "chunk start {bytes} B is aligned");
        }
    }
    // The whole batch is over the limit: without chunking the bindings would be refused.
    assert!(case.shape.len() * 4 > binding && case.problem.output.len() * 4 > binding);

    for kind in [tiled_kernel("tiled", seed), direct_kernel()] {
        let conv = case.conv(&gpu, Some(kind));
        let (x, y) = buffers(&gpu, &case);
        let plan = conv.plan(case.shape, &x, &y).unwrap();
        assert_eq!(plan.chunks() as u64, (case.shape.n as u64).div_ceil(per_chunk), "{}", conv.kernel().kernel);
        assert!(plan.chunks() > 1);
        // encode (NaN-poisoned output, with a poisoned tail that must stay untouched) and forward.
        let (got, tail) = run_poisoned_with(&gpu, &conv, &case.x, case.shape, f32::NAN, 61);
        assert_close(&case.label(&format!("chunked encode, {}", conv.kernel().kernel)), &got, &case.want, TOL_F32);
        assert!(tail.iter().all(|v| v.is_nan()), "{}: wrote past the output", case.label("tail"));
        case.check_forward(&conv);
    }
}

/// A batch whose single image exceeds the binding limit is refused with TooLarge.
#[test]
fn image_over_binding_limit_is_refused() {
    let spec = S::new(3, 5, 3).padding(P::uniform(1));
    let _serial = serial();
    let gpu = gpu_with_limits(|l| l.max_storage_buffer_binding_size = 2048);
    let conv = Conv2d::new(&gpu, spec, &vec![0.5; spec.weight_len()], None, direct()).unwrap();
    let shape = Shape4::new(2, 3, 13, 11);
    let e = conv.forward(&vec![1.0; shape.len() as usize], shape).unwrap_err();
    assert!(matches!(e, Error::TooLarge(_)), "{e:?}");
    assert!(e.to_string().contains("2048"), "{e}");
}

fn direct() -> Conv2dOptions {
    Conv2dOptions::default().kernel(direct_kernel())
}

/// Input and output buffers for `case` (STORAGE; output also COPY_SRC).
fn buffers(gpu: &wgconv::Gpu, case: &Case) -> (wgpu::Buffer, wgpu::Buffer) {
    let mk = |elems: u64, extra: wgpu::BufferUsages| {
        gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("test"),
            size: elems * 4,
            usage: wgpu::BufferUsages::STORAGE | extra,
            mapped_at_creation: false,
        })
    };
    (
        mk(case.problem.input.len(), wgpu::BufferUsages::COPY_DST),
        mk(case.problem.output.len(), wgpu::BufferUsages::COPY_SRC),
    )
}

/// At most 16 workgroups per dimension: grids of up to 256 workgroups are folded into
/// two dimensions, the tail of the last row idle.
#[test]
fn grid_folding_tiled_and_direct() {
    let _serial = serial();
    let gpu = gpu_with_limits(|l| l.max_compute_workgroups_per_dimension = 16);
    assert_eq!(gpu.limits().max_compute_workgroups_per_dimension, 16);
    let cfg = TileConfig::seed();
    // Tiled (32×64 blocks): M = 2·15·13 = 390 → 13 M tiles; C_out 70 → 2 N tiles: 26 workgroups.
    let tiled =
        Case::new("fold_tiled", S::new(3, 70, 3).padding(P::uniform(1)).with_bias(true), Shape4::new(2, 3, 15, 13));
    // Grouped: 35 channels per group → 1 N tile, 13 M tiles, 2 groups: 26 workgroups.
    let grouped =
        Case::new("fold_grouped", S::new(4, 70, 3).groups(2).padding(P::uniform(1)), Shape4::new(2, 4, 15, 13));
    for case in [&tiled, &grouped] {
        let conv = case.conv(&gpu, Some(tiled_kernel("tiled", cfg)));
        case.check_encode(&gpu, &conv);
        case.check_forward(&conv);
    }
    // Direct (64 outputs per workgroup): 70·15·13 = 13650 outputs → 214 workgroups.
    let direct_case = Case::new("fold_direct", S::new(3, 70, 3).padding(P::uniform(1)), Shape4::new(1, 3, 15, 13));
    assert!(direct_case.problem.output.len().div_ceil(64) > 16 * 13);
    let conv = direct_case.conv(&gpu, Some(direct_kernel()));
    direct_case.check_encode(&gpu, &conv);
    direct_case.check_forward(&conv);
}

/// One image needing more than 16² workgroups cannot be folded: TooLarge, named.
#[test]
fn grid_over_folding_is_refused() {
    let _serial = serial();
    let gpu = gpu_with_limits(|l| l.max_compute_workgroups_per_dimension = 16);
    let spec = S::new(3, 70, 3).padding(P::uniform(1));
    let conv = Conv2d::new(&gpu, spec, &vec![0.5; spec.weight_len()], None, direct()).unwrap();
    let shape = Shape4::new(1, 3, 20, 20); // 28000 outputs → 438 workgroups > 256
    let e = conv.forward(&vec![1.0; shape.len() as usize], shape).unwrap_err();
    assert!(matches!(e, Error::TooLarge(_)), "{e:?}");
    assert!(e.to_string().contains("438"), "{e}");
}

/// A config over the device's workgroup memory is refused with KernelRefused by
/// `Conv2d::new` (wgpu 30 itself does not check workgroup memory at pipeline creation,
/// so only the library's own check can refuse it).
#[test]
fn config_over_device_limits_is_refused() {
    let seed = TileConfig::seed();
    let limit = below(seed.workgroup_bytes());
    let _serial = serial();
    let gpu = gpu_with_limits(|l| l.max_compute_workgroup_storage_size = limit);
    let spec = S::new(3, 8, 3);
    let w = vec![0.25; spec.weight_len()];
    let opts = Conv2dOptions::default().kernel(tiled_kernel("tiled", seed));
    let e = Conv2d::new(&gpu, spec, &w, None, opts).err().expect("an over-limit config must be refused");
    match &e {
        Error::KernelRefused { kernel: config, reason } => {
            // Named by the whole kernel, so that the refusal says which family refused.
            assert_eq!(config, &format!("tiled:{seed}"));
            assert!(
                reason.contains(&seed.workgroup_bytes().to_string()) && reason.contains(&limit.to_string()),
                "{reason}"
            );
        }
        other => panic!("expected KernelRefused, got {other:?}"),
    }
    assert_eq!(tiled_kernel("tiled", seed).check_limits(&gpu.kernel_limits()).unwrap_err(), e);
}

/// A workgroup-memory limit just under `bytes` (a multiple of 16).
fn below(bytes: u64) -> u32 {
    ((bytes - 1) / 16 * 16) as u32
}

/// Too many invocations per workgroup for the seed (128): refused with KernelRefused.
/// wgpu refuses that pipeline itself (checked below), and that would have come back as
/// Error::Wgpu { stage: "pipeline creation" }: KernelRefused shows the config was
/// checked before any pipeline was built.
#[test]
fn config_over_invocation_limit_is_refused() {
    let _serial = serial();
    let gpu = gpu_with_limits(|l| {
        l.max_compute_invocations_per_workgroup = 64;
        l.max_compute_workgroup_size_x = 64;
    });
    let spec = S::new(3, 8, 3);
    let opts = Conv2dOptions::default().kernel(tiled_kernel("tiled", TileConfig::seed()));
    let e = Conv2d::new(&gpu, spec, &vec![0.25; spec.weight_len()], None, opts).err().unwrap();
    assert!(matches!(e, Error::KernelRefused { .. }), "{e:?}");
    assert!(e.to_string().contains("128") && e.to_string().contains("64"), "{e}");
    let seed = TileConfig::seed();
    // Without the check, a pipeline of the seed's workgroup size is invalid on this device.
    // (The kernel's own WGSL is no longer public, `wgconv::kernel::source` is gone: a shader
    // with the seed's workgroup size stands in for it.)
    let src = format!(
        "@group(0) @binding(0) var<storage, read_write> out: array<f32>;\n\
         @compute @workgroup_size({})\n\
         fn main(@builtin(local_invocation_index) i: u32) {{ out[i] = 1.0; }}\n",
        seed.invocations()
    );
    let scope = gpu.device.push_error_scope(wgpu::ErrorFilter::Validation);
    let module = gpu.device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("over-limit"),
        source: wgpu::ShaderSource::Wgsl(src.into()),
    });
    let _ = gpu.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("over-limit"),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let err = pollster::block_on(scope.pop());
    assert!(err.is_some(), "wgpu accepted a pipeline over the invocation limit");
    eprintln!("wgpu on the over-limit pipeline: {}", err.unwrap());
}

/// When the default config does not fit, the default kernel is the first sweep config
/// that does (ConfigSource::Fallback), and it computes the right thing.
#[test]
fn default_falls_back_to_a_config_that_fits() {
    // Workgroup memory just under the default config's (the one the f32 rule picks for this
    // kind of device).
    let default = wgconv::advanced::default_kernel(gpu().caps(), wgconv::Precision::F32).unwrap().tile().unwrap();
    let _serial = serial();
    let gpu = gpu_with_limits(|l| l.max_compute_workgroup_storage_size = below(default.workgroup_bytes()));
    let limits = gpu.kernel_limits();
    assert!(default.validate(&limits).is_err());
    let expected = default_sweep()
        .into_iter()
        .find(|c| c.validate(&limits).is_ok())
        .expect("no sweep config needs less workgroup memory than the default: this test needs one");
    let case = Case::new(
        "fallback",
        S::new(5, 19, 3).stride((2, 1)).padding(P::uniform(1)).with_bias(true),
        Shape4::new(2, 5, 9, 13),
    );
    let conv = case.conv(&gpu, None);
    assert_eq!(
        (&conv.kernel().kernel, conv.kernel().source),
        (&tiled_kernel("tiled", expected), ConfigSource::Fallback)
    );
    case.check_encode(&gpu, &conv);
}

/// When no tile config fits, the default kernel is the direct one.
#[test]
fn default_falls_back_to_direct() {
    // Workgroup memory just under what the smallest tile config needs.
    let least = default_sweep().iter().filter(|c| c.check_shape().is_ok()).map(|c| c.workgroup_bytes()).min().unwrap();
    let _serial = serial();
    let gpu = gpu_with_limits(|l| l.max_compute_workgroup_storage_size = below(least));
    let limits = gpu.kernel_limits();
    assert!(default_sweep().iter().all(|c| c.validate(&limits).is_err()));
    // Ungrouped: narrow groups would run the depthwise family by its own rule (since ab6c678),
    // which this fallback is not about.
    let case = Case::new("fallback_direct", S::new(4, 6, 3).padding(P::uniform(1)), Shape4::new(1, 4, 7, 8));
    let conv = case.conv(&gpu, None);
    assert_eq!((&conv.kernel().kernel, conv.kernel().source), (&direct_kernel(), ConfigSource::Fallback));
    case.check_encode(&gpu, &conv);
}

/// A kernel with a staging pass (the channels-last family, on cooperative-matrix devices)
/// under a small binding limit: its scratch is sized per chunk and reused chunk after
/// chunk; a batch of 7 runs in 4 chunks, through `encode` and `forward`.
#[test]
fn staged_kernel_chunks() {
    let spec = S::new(16, 32, 3).padding(P::uniform(1)).with_bias(true);
    let case = Case::new("staged_chunks", spec, Shape4::new(7, 16, 9, 9));
    // Two images' output (2 × 32 × 81 × 4 B) plus an alignment of slack; the f16 weights of
    // m32n64k32 (K 144 → 160, C_out 32 → 64: 20,480 B) fit too.
    let binding = 2 * 32 * 81 * 4 + 256 + 8;
    let _serial = serial();
    let Some(gpu) = coop_gpu_with_limits(|l| l.max_storage_buffer_binding_size = binding) else { return };
    let kernel = wgconv::Kernel::parse("coop-nhwc-f16:m32n64k32-t4x8-w2-s2").unwrap();
    let options = options_at(wgconv::Precision::F16Accum32, Some(kernel), false);
    let conv = Conv2d::new(&gpu, spec, &case.w, case.b.as_deref(), options).unwrap();
    let (x, y) = buffers(&gpu, &case);
    let plan = conv.plan(case.shape, &x, &y).unwrap();
    assert_eq!(plan.chunks(), 4);
    let (got, tail) = run_poisoned_with(&gpu, &conv, &case.x, case.shape, f32::NAN, 61);
    assert_close(&case.label("chunked staged encode"), &got, &case.want, TOL_F16);
    assert!(tail.iter().all(|v| v.is_nan()), "{}: wrote past the output", case.label("tail"));
    let got = conv.forward(&case.x, case.shape).unwrap();
    assert_close(&case.label("chunked staged forward"), &got, &case.want, TOL_F16);
}

/// Chunks whose output starts are not 16-byte aligned in the caller's buffer: 660 output
/// positions per image (a multiple of 4, so the tiled kernel stores vec4s) and a 256-byte
/// offset alignment, so each chunk's window starts below its first image.
#[test]
fn vec4_stores_in_chunks() {
    let spec = S::new(3, 5, 3).padding(P::uniform(1));
    let case = Case::new("chunked_vec4", spec, Shape4::new(7, 3, 12, 11));
    assert_eq!(case.problem.output.per_image(), 660);
    let _serial = serial();
    let gpu = gpu_with_limits(|l| {
        l.max_storage_buffer_binding_size = 8480;
        l.min_storage_buffer_offset_alignment = 256;
    });
    let mut kernels = vec![tiled_kernel("tiled", TileConfig::seed())];
    if gpu.device.features().contains(wgpu::Features::SHADER_F16) {
        kernels.push(tiled_kernel("tiled-f16", TileConfig::seed()));
    }
    for kernel in kernels {
        let opts = Conv2dOptions::default().kernel(kernel.clone()).precision(kernel.precision());
        let conv = Conv2d::new(&gpu, spec, &case.w, None, opts).unwrap();
        let (x, y) = buffers(&gpu, &case);
        assert!(conv.plan(case.shape, &x, &y).unwrap().chunks() > 2, "{kernel}");
        let got = run_poisoned(&gpu, &conv, &case.x, case.shape);
        assert_close(&case.label(&format!("chunked encode, {kernel}")), &got, &case.want, tolerance(&kernel));
    }
}
