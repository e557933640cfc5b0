//! Winograd's F(4×4, 3×3) and F(4×4, 5×5) with their GEMMs on the matrix units
//! (`coop-winograd-f32`: the input transform scaled and split into f16 halves, `coop-nhwc-f32`
//! as n² GEMMs, `winograd-f4`'s output transform) keep the f32 contract: a seeded
//! random-shape property test per kernel side over channel counts (whole vectors or not),
//! odd and even sizes, asymmetric padding, batch 1, bias and ReLU, on every config of its
//! sweep in turn, through `encode` into NaN-poisoned output; inputs and weights of any
//! magnitude; infinities and NaN in the input as the f32 kernels give them; channels-last and
//! f16 tensors; refused weights and shapes.
//!
//! Cooperative-matrix devices only (the H100 and H200 through Vulkan): on others each test
//! says it was skipped. Lavapipe checks the family's SPIR-V (tests/portable.rs) and its CPU
//! twin (the unit tests).

mod common;
use common::*;
use wgconv::{Conv2d, Conv2dSpec, Error, Kernel, Padding, Precision, Shape4};

const FAMILY: &str = "coop-winograd-f32";

fn family_kernels(gpu: &wgconv::Gpu) -> Vec<Kernel> {
    let limits = gpu.kernel_limits();
    wgconv::advanced::sweep(FAMILY).unwrap().into_iter().filter(|k| k.check_limits(&limits).is_ok()).collect()
}

/// `count` random shapes of a square kernel of side `kernel`, one config of the sweep on
/// each in turn ([`check_random_square_shapes`]).
fn random_shapes(kernel: u32, count: usize) {
    let Some(gpu) = coop_gpu() else { return };
    let what = format!("{FAMILY} {kernel}x{kernel} random shapes");
    check_random_square_shapes(&gpu, &what, &family_kernels(&gpu), kernel, count, 40);
}

#[test]
fn random_shapes_f4x4_3x3() {
    random_shapes(3, 40);
}

#[test]
fn random_shapes_f4x4_5x5() {
    random_shapes(5, 30);
}

/// Inputs and weights far from 1: the input scale (with the transform's headroom) and the
/// weights' put both into f16's range, and the error stays within the f32 bound.
#[test]
fn accuracy_at_any_magnitude() {
    let Some(gpu) = coop_gpu() else { return };
    for r in [3, 5] {
        let spec = Conv2dSpec::new(16, 17, r).padding(Padding::uniform(r / 2));
        let base = Case::new("wino_f32_magnitudes", spec, Shape4::new(2, 16, 10, 9));
        let k = Some(family_kernels(&gpu)[0].clone());
        let factors = [(1e-30f32, 1.0f32), (1e-6, 1e-3), (1e6, 1e4), (1e30, 1e-20), (1e-33, 1e30)];
        check_magnitudes(&gpu, &base, k, &factors, &format!("{r}x{r}, "));
    }
}

/// +inf, -inf and NaN inputs give NaN and ±inf exactly where the reference has them (the
/// tiles whose products are not finite computed directly), the finite outputs within the f32
/// bound.
#[test]
fn special_values_as_f32() {
    let Some(gpu) = coop_gpu() else { return };
    for r in [3, 5] {
        let spec = Conv2dSpec::new(8, 12, r).padding(Padding::uniform(r / 2)).with_bias(true);
        let mut case = Case::new("wino_f32_special_values", spec, Shape4::new(2, 8, 9, 10));
        case.w[(3 * 8 + 2) * r as usize * r as usize + 4] = 0.0;
        case.x[2 * 90 + 4 * 10 + 5] = f32::INFINITY;
        case.x[720 + 5 * 90 + 1] = f32::NEG_INFINITY;
        case.x[720 + 7 * 90 + 88] = f32::NAN;
        case.want = reference_out(&case.problem, &case.x, &case.w, case.b.as_deref());
        assert!(case.want.iter().any(|v| v.is_nan()) && case.want.iter().any(|v| v.is_infinite()));
        let conv = Conv2d::new(
            &gpu,
            spec,
            &case.w,
            case.b.as_deref(),
            options_at(Precision::F32, Some(kernel(FAMILY)), false),
        )
        .unwrap();
        let got = run_poisoned_with(&gpu, &conv, &case.x, case.shape, 12345.0, 0).0;
        let label = case.label(&format!("{r}x{r}"));
        assert_special_values_as_f32(&label, &got, &case.want);
    }
}

/// Channels-last and f16 tensors: layout passes around the three passes.
#[test]
fn channels_last_and_f16_tensors() {
    let Some(gpu) = coop_gpu() else { return };
    let spec = Conv2dSpec::new(6, 10, 3).padding(Padding::uniform(1)).with_bias(true);
    let case = Case::new("wino_f32_forms", spec, Shape4::new(2, 6, 9, 12));
    check_in_every_layout(&gpu, &case, &kernel(FAMILY));
}

/// Non-finite weights and the shapes F(4×4, r×r) does not cover are refused by name.
#[test]
fn refusals() {
    let Some(gpu) = coop_gpu() else { return };
    let spec = Conv2dSpec::new(8, 8, 3).padding(Padding::uniform(1));
    let (mut w, _) = params(&spec, 7);
    w[11] = f32::INFINITY;
    match Conv2d::new(&gpu, spec, &w, None, options_at(Precision::F32, Some(kernel(FAMILY)), false)) {
        Err(Error::KernelRefused { reason, .. }) => assert!(reason.contains("finite weights"), "{reason}"),
        other => panic!("expected KernelRefused, got {:?}", other.map(|c| c.kernel().clone())),
    }
    let e = kernel(FAMILY).check(&Conv2dSpec::new(4, 4, 3).stride((2, 2)), gpu.caps()).unwrap_err().to_string();
    assert!(e.contains(FAMILY) && e.contains("F(4×4, 3×3) and F(4×4, 5×5)"), "{e}");
    let e = kernel(FAMILY).check(&Conv2dSpec::new(129, 4, 5), gpu.caps()).unwrap_err().to_string();
    assert!(e.contains("up to 128"), "{e}");
}

/// The channel counts the rule gives it (256–512), one not a whole number of vectors of 8:
/// within the f32 bound on both kernel sides.
#[test]
fn wide_channels() {
    let Some(gpu) = coop_gpu() else { return };
    for (c, r) in [(512, 3), (259, 3), (128, 5)] {
        let spec = Conv2dSpec::new(c, 40, r).padding(Padding::uniform(r / 2)).with_bias(true);
        let case = Case::new("wino_f32_wide", spec, Shape4::new(2, c, 9, 11));
        case.check_encode(&gpu, &case.conv(&gpu, Some(kernel(FAMILY))));
    }
}

/// A binding limit that holds two images' staged input (36 components × 16 channels × 15 ×
/// 15 tiles × two f16 halves = 518,400 B per image): chunks of two, each with its own input
/// maximum and three passes; outputs past the last one untouched.
#[test]
fn batch_chunks() {
    let _serial = serial();
    let Some(gpu) = coop_gpu_with_limits(|l| l.max_storage_buffer_binding_size = 1_100_000) else { return };
    let spec = Conv2dSpec::new(16, 8, 3).padding(Padding::uniform(1)).with_bias(true);
    let mut case = Case::new("wino_f32_chunked", spec, Shape4::new(5, 16, 60, 60));
    // Each image at its own magnitude: each chunk is scaled on its own.
    let per_image = 16 * 60 * 60;
    for (i, v) in case.x.iter_mut().enumerate() {
        *v *= [1e-6f32, 1.0, 1e6, 1e3, 1e-3][i / per_image];
    }
    case.want = reference_out(&case.problem, &case.x, &case.w, case.b.as_deref());
    let opts = options_at(Precision::F32, Some(kernel(&format!("{FAMILY}:m64n64k16-t4x8-w4-s1"))), false);
    let conv = Conv2d::new(&gpu, spec, &case.w, case.b.as_deref(), opts).unwrap();
    // Per chunk: the input maximum, the input transform, the GEMM, the output transform.
    check_chunked(&gpu, &case, &conv, Some(4));
}
