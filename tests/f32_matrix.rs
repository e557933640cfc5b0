//! `Precision::F32` on the matrix units (`coop-nhwc-f32`: the f16x3 split with each chunk's
//! input scaled by a power of two) keeps the f32 contract: relative L2 ≤ 1e-5 against the
//! f64 reference on random inputs at any magnitude, each chunk scaled on its own, and
//! infinities and NaN in the input give what the f32 kernels give (the reference: IEEE
//! products, 0 · inf = NaN). GPU tests need cooperative matrices (skipped on lavapipe,
//! saying so); the kernel's naga check runs everywhere (tests/portable.rs).

mod common;
use common::*;
use wgconv::{reference, Conv2d, Error, Kernel, Precision, Shape4};
use wgconv::{Conv2dSpec as S, Padding as P};

fn f32_matrix_kernels(gpu: &wgconv::Gpu) -> Vec<Kernel> {
    let limits = gpu.kernel_limits();
    wgconv::advanced::sweep("coop-nhwc-f32").unwrap().into_iter().filter(|k| k.check_limits(&limits).is_ok()).collect()
}

/// Every config of the family on the ragged shapes (strides, padding, dilation, groups,
/// bias, ReLU), through `encode` on poisoned output and through `forward`.
#[test]
fn f32_matrix_on_ragged_shapes() {
    let Some(gpu) = coop_gpu() else { return };
    let kernels = f32_matrix_kernels(&gpu);
    assert!(!kernels.is_empty());
    let mut worst = 0.0f64;
    for (name, spec, [n, h, w], relu) in ragged_shapes() {
        let case = Case::new(name, spec, Shape4::new(n, spec.in_channels, h, w));
        let want: Vec<f32> =
            if relu { case.want.iter().map(|&v| reference::relu(v)).collect() } else { case.want.clone() };
        for kernel in &kernels {
            let opts = options_at(Precision::F32, Some(kernel.clone()), relu);
            let conv = Conv2d::new(&gpu, spec, &case.w, case.b.as_deref(), opts)
                .unwrap_or_else(|e| panic!("{}: {e}", case.label(&kernel.to_string())));
            worst = worst.max(check_encode_and_forward(&gpu, &case, &conv, &want, TOL_F32));
        }
    }
    eprintln!("coop-nhwc-f32 on {}: worst relative L2 {worst:.2e} (bound {TOL_F32:.0e})", gpu.info.name);
}

/// Inputs and weights far outside f16's range, or far below it: the scales put both into
/// it, and the error stays within the f32 bound.
#[test]
fn f32_matrix_accuracy_at_any_magnitude() {
    let Some(gpu) = coop_gpu() else { return };
    let spec = S::new(16, 17, 3).padding(P::uniform(1));
    let base = Case::new("magnitudes", spec, Shape4::new(2, 16, 10, 9));
    let kernel = Some(f32_matrix_kernels(&gpu)[0].clone());
    // Huge weights on tiny inputs and the reverse: the two scales are undone as one exponent,
    // so a finite result never passes through inf or a needless subnormal.
    let factors = [
        (1e-30f32, 1.0f32),
        (1e-6, 1e-3),
        (1.0, 1.0),
        (1e6, 1e4),
        (1e30, 1e-20),
        (3e5, 1e-9),
        (1e-34, 1e34),
        (1e34, 1e-34),
        (1e-33, 1e33),
    ];
    check_magnitudes(&gpu, &base, kernel, &factors, "");
}

/// A batch in three chunks (3, 3 and 1 images) whose magnitudes differ by 10^10 from chunk
/// to chunk: each chunk's input is scaled on its own (one slot per chunk), so every image
/// keeps the f32 bound.
#[test]
fn f32_matrix_scales_each_chunk() {
    let spec = S::new(16, 32, 3).padding(P::uniform(1)).with_bias(true);
    let mut case = Case::new("chunk_scales", spec, Shape4::new(7, 16, 9, 9));
    let per_image = 16 * 81;
    for (i, v) in case.x.iter_mut().enumerate() {
        *v *= [1e-10f32, 1.0, 1e10][i / per_image / 3];
    }
    case.want = reference_out(&case.problem, &case.x, &case.w, case.b.as_deref());
    // Three images' output (3 × 32 × 81 × 4 B = 31,104) and an alignment of slack, not four;
    // the split weights (K 144 → 160, C_out 32 → 64, two f16 halves: 40,960 B) fit.
    let binding = 41_000;
    let _serial = serial();
    let Some(gpu) = coop_gpu_with_limits(|l| l.max_storage_buffer_binding_size = binding) else { return };
    let kernel = Kernel::parse("coop-nhwc-f32:m64n64k32-t4x8-w4-s2").unwrap();
    let conv =
        Conv2d::new(&gpu, spec, &case.w, case.b.as_deref(), options_at(Precision::F32, Some(kernel), false)).unwrap();
    let (x, y) = (
        gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: case.x.len() as u64 * 4,
            usage: wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        }),
        gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: case.want.len() as u64 * 4,
            usage: wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        }),
    );
    assert_eq!(conv.plan(case.shape, &x, &y).unwrap().chunks(), 3);
    let (got, tail) = run_poisoned_with(&gpu, &conv, &case.x, case.shape, f32::NAN, 61);
    assert!(tail.iter().all(|v| v.is_nan()), "{}: wrote past the output", case.label("tail"));
    let out_image = 32 * 81;
    for (img, (g, w)) in got.chunks(out_image).zip(case.want.chunks(out_image)).enumerate() {
        assert_close(&case.label(&format!("image {img}")), g, w, TOL_F32);
    }
    let got = conv.forward(&case.x, case.shape).unwrap();
    for (img, (g, w)) in got.chunks(out_image).zip(case.want.chunks(out_image)).enumerate() {
        assert_close(&case.label(&format!("forward, image {img}")), g, w, TOL_F32);
    }
}

/// +inf, -inf and NaN inputs, and a zero weight, give NaN and ±inf exactly where the
/// reference has them (and the tiled f32 kernel agrees), the finite outputs within the f32
/// bound: the f32 semantics of special values (README, "Semantics of special values").
#[test]
fn f32_matrix_special_values_as_f32() {
    let Some(gpu) = coop_gpu() else { return };
    let spec = S::new(8, 12, 3).padding(P::uniform(1)).with_bias(true);
    let mut case = Case::new("special_values", spec, Shape4::new(2, 8, 9, 10));
    // Output channel 3 reads input channel 2 through a zero weight at its centre tap.
    case.w[(3 * 8 + 2) * 9 + 4] = 0.0;
    case.x[2 * 90 + 4 * 10 + 5] = f32::INFINITY;
    case.x[720 + 5 * 90 + 1] = f32::NEG_INFINITY;
    case.x[720 + 7 * 90 + 88] = f32::NAN;
    case.want = reference_out(&case.problem, &case.x, &case.w, case.b.as_deref());
    let special = case.want.iter().filter(|v| !v.is_finite()).count();
    assert!(special > 0 && case.want.iter().any(|v| v.is_nan()) && case.want.iter().any(|v| v.is_infinite()));
    for kernel in f32_matrix_kernels(&gpu).into_iter().take(2).chain([kernel("tiled")]) {
        let conv = Conv2d::new(&gpu, spec, &case.w, case.b.as_deref(), options_at(Precision::F32, Some(kernel), false))
            .unwrap();
        let got = run_poisoned_with(&gpu, &conv, &case.x, case.shape, 12345.0, 0).0;
        let label = case.label(&conv.kernel().kernel.to_string());
        assert_special_values_as_f32(&label, &got, &case.want);
    }
}

/// Named explicitly with a non-finite weight, the kernel refuses it (selection never picks it
/// for such weights: the default op runs and agrees with the reference's special values).
#[test]
fn f32_matrix_refuses_non_finite_weights() {
    let Some(gpu) = coop_gpu() else { return };
    let spec = S::new(8, 8, 3).padding(P::uniform(1));
    let (mut w, _) = params(&spec, 7);
    w[11] = f32::INFINITY;
    let named = options_at(Precision::F32, Some(kernel("coop-nhwc-f32")), false);
    match Conv2d::new(&gpu, spec, &w, None, named) {
        Err(Error::KernelRefused { reason, .. }) => assert!(reason.contains("inf"), "{reason}"),
        other => panic!("expected KernelRefused, got {:?}", other.map(|c| c.kernel().clone())),
    }
    let conv = Conv2d::new(&gpu, spec, &w, None, options_at(Precision::F32, None, false)).unwrap();
    assert_ne!(conv.kernel().kernel.family(), "coop-nhwc-f32", "{}", conv.kernel().reason);
}
