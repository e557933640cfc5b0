//! The Winograd families (`winograd`: F(2×2, 3×3) and F(2×2, 5×5); `winograd-f4`: F(4×4,
//! 3×3) and F(4×4, 5×5); `winograd-f6`: F(6×6, 3×3); input transform, n² GEMMs on the tiled kernel, output transform)
//! against the f64 CPU reference: a seeded random-shape property test per algorithm over
//! channel counts, odd and even sizes, asymmetric padding, batch 1, bias and ReLU, on every
//! config of the family's sweep in turn, through `encode` into NaN-poisoned output;
//! channels-last and f16 tensors (layout passes around it); batch chunks under a lowered
//! binding limit; the plan's three dispatches per chunk; refusals of the shapes it cannot run.
//!
//! Shapes stay small: CI runs this on lavapipe (Vulkan on the CPU, about 1 GFLOP/s).

mod common;
use common::*;
use wgconv::{Conv2d, Conv2dOptions, Conv2dSpec, Padding, Shape4};

/// `count` random shapes of a square kernel of side `kernel`, one config of the family's
/// sweep on each in turn ([`check_random_square_shapes`]).
fn random_shapes(family: &str, kernel: u32, count: usize) {
    let sweep = wgconv::advanced::sweep(family).unwrap();
    check_random_square_shapes(&gpu(), &format!("{family} {kernel}x{kernel} random shapes"), &sweep, kernel, count, 24);
}

#[test]
fn random_shapes_f2x2_3x3() {
    random_shapes("winograd", 3, 40);
}

#[test]
fn random_shapes_f2x2_5x5() {
    random_shapes("winograd", 5, 30);
}

#[test]
fn random_shapes_f4x4_3x3() {
    random_shapes("winograd-f4", 3, 40);
}

#[test]
fn random_shapes_f4x4_5x5() {
    random_shapes("winograd-f4", 5, 30);
}

#[test]
fn random_shapes_f6x6_3x3() {
    random_shapes("winograd-f6", 3, 30);
}

/// Channels-last and f16 tensors: layout passes around the three passes.
#[test]
fn channels_last_and_f16_tensors() {
    let gpu = gpu();
    let spec = Conv2dSpec::new(6, 10, 3).padding(Padding::uniform(1)).with_bias(true);
    let case = Case::new("wino_forms", spec, Shape4::new(2, 6, 9, 12));
    check_in_every_layout(&gpu, &case, &kernel("winograd"));
    check_in_every_layout(&gpu, &case, &kernel("winograd-f4"));
    check_in_every_layout(&gpu, &case, &kernel("winograd-f6"));
}

/// A 5-image batch of `h`×`w` inputs under a binding limit of `binding` bytes, which holds
/// two images' scratch: chunks of two, each through its own three passes; outputs past the
/// last one untouched.
fn batch_chunks_under(label: &str, kernel_name: &str, binding: u64, [h, w]: [u32; 2]) {
    let spec = Conv2dSpec::new(3, 5, 3).padding(Padding::uniform(1)).with_bias(true);
    let case = Case::new(label, spec, Shape4::new(5, 3, h, w));
    let _serial = serial();
    let gpu = gpu_with_limits(|l| l.max_storage_buffer_binding_size = binding);
    let opts = Conv2dOptions::default().kernel(Some(kernel(kernel_name)));
    let conv = Conv2d::new(&gpu, spec, &case.w, case.b.as_deref(), opts).unwrap();
    check_chunked(&gpu, &case, &conv, Some(3));
}

/// F(2×2, 3×3): products per image 16 × 5 × 20 × 20 floats = 128,000 B (the transformed
/// input 76,800); the packed weights, padded to whole tiles per component, 131,072 B.
#[test]
fn batch_chunks() {
    batch_chunks_under("wino_chunked", "winograd", 262_144, [40, 39]);
}

/// F(4×4, 3×3): products per image 36 × 5 × 10 × 10 floats = 72,000 B (the transformed input
/// 43,200).
#[test]
fn batch_chunks_f4() {
    batch_chunks_under("wino_f4_chunked", "winograd-f4:m32n32k32-t4x4-w2-s2", 160_000, [40, 39]);
}

/// F(4×4, 3×3) with each image's 11×11 tiles (121) padded to 124 GEMM rows, in chunks: products
/// per image 36 × 5 × 124 floats = 89,280 B (the transformed input 53,568).
#[test]
fn batch_chunks_f4_padded_rows() {
    batch_chunks_under("wino_f4_chunked_padded", "winograd-f4:m32n32k32-t4x4-w2-s2", 200_000, [42, 41]);
}

/// Both of the GEMM's layouts: each image's 3×3 tiles (9) padded to 12 rows up to 256 input
/// channels and left at 9 beyond, over a batch of three images, with bias and ReLU.
#[test]
fn padded_and_unpadded_tile_rows() {
    let gpu = gpu();
    for c in [256, 257] {
        let spec = Conv2dSpec::new(c, 4, 3).padding(Padding::uniform(1)).with_bias(true);
        let case = Case::new(&format!("wino_rows_{c}"), spec, Shape4::new(3, c, 10, 9));
        let conv = case.conv(&gpu, Some(kernel("winograd-f4:m32n32k32-t4x4-w2-s2")));
        case.check_encode(&gpu, &conv);
        case.check_relu(&gpu, kernel("winograd-f4:m32n32k32-t4x4-w2-s2"));
    }
}

/// Shapes the algorithms do not cover are refused by name, never run.
#[test]
fn other_shapes_are_refused() {
    let gpu = gpu();
    let k = kernel("winograd");
    for spec in [
        Conv2dSpec::new(4, 4, 7),
        Conv2dSpec::new(4, 4, 3).stride((2, 2)),
        Conv2dSpec::new(4, 4, 3).dilation((2, 2)),
        Conv2dSpec::new(4, 4, 5).groups(2),
    ] {
        let e = k.check(&spec, gpu.caps()).unwrap_err().to_string();
        assert!(e.contains("winograd") && e.contains("F(2×2, 3×3) and F(2×2, 5×5)"), "{e}");
        let (w, _) = params(&spec, 1);
        let opts = Conv2dOptions::default().kernel(Some(k.clone()));
        assert!(Conv2d::new(&gpu, spec, &w, None, opts).is_err());
    }
    let e = kernel("winograd-f4").check(&Conv2dSpec::new(4, 4, 7), gpu.caps()).unwrap_err().to_string();
    assert!(e.contains("winograd-f4") && e.contains("F(4×4, 3×3) and F(4×4, 5×5)"), "{e}");
    let e = kernel("winograd-f6").check(&Conv2dSpec::new(4, 4, 5), gpu.caps()).unwrap_err().to_string();
    assert!(e.contains("winograd-f6") && e.contains("F(6×6, 3×3) runs 3x3 kernels") && e.contains("not 5x5"), "{e}");
    let e = kernel("winograd-f6").check(&Conv2dSpec::new(129, 4, 3), gpu.caps()).unwrap_err().to_string();
    assert!(e.contains("F(6×6, 3×3) keeps f32's 1e-5") && e.contains("up to 128"), "{e}");
    let reflect = Conv2dSpec::new(4, 4, 3).padding(Padding::uniform(1)).padding_mode(wgconv::PaddingMode::Reflect);
    assert!(k.check(&reflect, gpu.caps()).unwrap_err().to_string().contains("padding_mode"));
}
