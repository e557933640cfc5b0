//! The Winograd family (F(2×2, 3×3): input transform, 16 GEMMs on the tiled kernel, output
//! transform) against the f64 CPU reference: a seeded random-shape property test over
//! channel counts, odd and even sizes, asymmetric padding, batch 1, bias and ReLU, on every
//! config of its sweep in turn, through `encode` into NaN-poisoned output; channels-last and
//! f16 tensors (layout passes around it); batch chunks under a lowered binding limit; the
//! plan's three dispatches per chunk; refusals of the shapes it cannot run.
//!
//! Shapes stay small: CI runs this on lavapipe (Vulkan on the CPU, about 1 GFLOP/s).

mod common;
use common::*;
use wgconv::{Conv2d, Conv2dOptions, Conv2dSpec, Padding, Shape4};

/// 60 random shapes, one config of the sweep on each in turn, f32 within 1e-5; ReLU on
/// every third.
#[test]
fn random_shapes_match_the_reference() {
    let gpu = gpu();
    let (seed, mut rng) = seeded_rng("winograd random shapes");
    let sweep = wgconv::advanced::sweep("winograd").unwrap();
    for i in 0..60 {
        let case = random_3x3_case(&mut rng, i, seed, 24);
        let k = sweep[i % sweep.len()].clone();
        if i % 3 == 0 {
            case.check_relu(&gpu, k);
        } else {
            case.check_encode(&gpu, &case.conv(&gpu, Some(k)));
        }
    }
}

/// Channels-last and f16 tensors: layout passes around the three passes.
#[test]
fn channels_last_and_f16_tensors() {
    let gpu = gpu();
    let spec = Conv2dSpec::new(6, 10, 3).padding(Padding::uniform(1)).with_bias(true);
    let case = Case::new("wino_forms", spec, Shape4::new(2, 6, 9, 12));
    check_in_every_layout(&gpu, &case, &kernel("winograd"));
}

/// A binding limit that holds two images' products: chunks of two, each through its own
/// three passes; outputs past the last one untouched.
#[test]
fn batch_chunks() {
    let spec = Conv2dSpec::new(3, 5, 3).padding(Padding::uniform(1)).with_bias(true);
    let case = Case::new("wino_chunked", spec, Shape4::new(5, 3, 40, 39));
    let _serial = serial();
    // Products per image: 16 × 5 × 20 × 20 floats = 128,000 B (the transformed input 76,800);
    // the packed weights, padded to whole tiles per component, 131,072 B.
    let gpu = gpu_with_limits(|l| l.max_storage_buffer_binding_size = 262_144);
    let conv =
        Conv2d::new(&gpu, spec, &case.w, case.b.as_deref(), Conv2dOptions::default().kernel(Some(kernel("winograd"))))
            .unwrap();
    check_chunked(&gpu, &case, &conv, Some(3));
}

/// Shapes F(2×2, 3×3) does not cover are refused by name, never run.
#[test]
fn other_shapes_are_refused() {
    let gpu = gpu();
    let k = kernel("winograd");
    for spec in [
        Conv2dSpec::new(4, 4, 5),
        Conv2dSpec::new(4, 4, 3).stride((2, 2)),
        Conv2dSpec::new(4, 4, 3).dilation((2, 2)),
        Conv2dSpec::new(4, 4, 3).groups(2),
    ] {
        let e = k.check(&spec, gpu.caps()).unwrap_err().to_string();
        assert!(e.contains("winograd") && e.contains("F(2×2, 3×3)"), "{e}");
        let (w, _) = params(&spec, 1);
        let opts = Conv2dOptions::default().kernel(Some(k.clone()));
        assert!(Conv2d::new(&gpu, spec, &w, None, opts).is_err());
    }
    let reflect = Conv2dSpec::new(4, 4, 3).padding(Padding::uniform(1)).padding_mode(wgconv::PaddingMode::Reflect);
    assert!(k.check(&reflect, gpu.caps()).unwrap_err().to_string().contains("padding_mode"));
}
