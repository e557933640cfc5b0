//! The split-K family (the tiled kernel over slices of the input channels as groups, then a
//! reduction pass) against the f64 CPU reference: a seeded random-shape property test over
//! kernel sizes, strides, dilations, asymmetric padding, padding modes, odd sizes, batch 1,
//! bias and ReLU, on every config of its sweep in turn, through `encode` into NaN-poisoned
//! output; channels-last and f16 tensors (layout passes around it); batch chunks under a
//! lowered binding limit with two dispatches per chunk; refusals.
//!
//! Shapes stay small: CI runs this on lavapipe (Vulkan on the CPU, about 1 GFLOP/s).

mod common;
use common::*;
use rand::Rng;
use wgconv::{Conv2d, Conv2dOptions, Conv2dSpec, Padding, PaddingMode, Shape4};

/// A random ungrouped convolution whose input channels are a multiple of `slices`.
fn random_case(rng: &mut rand::rngs::StdRng, i: usize, seed: u64, slices: u32) -> Case {
    loop {
        let k = rng.random_range(1..=5u32);
        let pad = |r: &mut rand::rngs::StdRng| r.random_range(0..=2u32);
        // Each config meets every mode over the sweep's rounds (`i / 12`).
        let modes = [PaddingMode::Zeros, PaddingMode::Reflect, PaddingMode::Replicate, PaddingMode::Circular];
        let mode = modes[(i / 12 + i) % modes.len()];
        let spec = Conv2dSpec::new(slices * rng.random_range(1..=4u32), rng.random_range(1..=20u32), k)
            .stride((rng.random_range(1..=2u32), rng.random_range(1..=2u32)))
            .dilation(if rng.random_bool(0.2) { 2 } else { 1 })
            .padding(Padding::new(pad(rng), pad(rng), pad(rng), pad(rng)))
            .padding_mode(mode)
            .with_bias(rng.random_bool(0.5));
        let n = if rng.random_bool(0.5) { 1 } else { 2 };
        let shape = Shape4::new(n, spec.in_channels, rng.random_range(3..=14u32), rng.random_range(3..=14u32));
        if spec.problem(shape).is_ok() {
            return Case::with_seed(&format!("random_{i}"), spec, shape, seed.wrapping_add(i as u64)).replayed_by(seed);
        }
    }
}

/// Four random shapes per config of the sweep (48), f32 within 1e-5, each config with every
/// padding mode; ReLU on a third of them.
#[test]
fn random_shapes_match_the_reference() {
    let gpu = gpu();
    let (seed, mut rng) = seeded_rng("split-K random shapes");
    let sweep = wgconv::advanced::split_sweep();
    for i in 0..4 * sweep.len() {
        let cfg = sweep[i % sweep.len()];
        let case = random_case(&mut rng, i, seed, cfg.slices);
        let k = kernel(&format!("splitk:{}", cfg.name()));
        if (i / 12 + i) % 3 == 0 {
            case.check_relu(&gpu, k);
        } else {
            case.check_encode(&gpu, &case.conv(&gpu, Some(k)));
        }
    }
}

/// Channels-last and f16 tensors: layout passes around the two passes.
#[test]
fn channels_last_and_f16_tensors() {
    let gpu = gpu();
    let spec = Conv2dSpec::new(8, 10, 3).padding(Padding::uniform(1)).with_bias(true);
    let case = Case::new("splitk_forms", spec, Shape4::new(2, 8, 9, 12));
    check_in_every_layout(&gpu, &case, &kernel("splitk:m32n32k32-t4x4-w2-s2-k4"));
}

/// A binding limit that holds a few images' partial sums: chunks, each through its own two
/// passes; outputs past the last one untouched.
#[test]
fn batch_chunks() {
    let spec = Conv2dSpec::new(8, 6, 3).padding(Padding::uniform(1)).with_bias(true);
    // Odd images (8 × 19 × 19 floats): chunk windows start inside an aligned block, so the
    // kernel reads the input at a nonzero offset.
    let case = Case::new("splitk_chunked", spec, Shape4::new(7, 8, 19, 19));
    let _serial = serial();
    // Partial sums per image: 8 slices × 6 × 19 × 19 floats = 69,312 B.
    let gpu = gpu_with_limits(|l| l.max_storage_buffer_binding_size = 160_000);
    let opts = Conv2dOptions::default().kernel(Some(kernel("splitk:m32n32k32-t4x4-w2-s2-k8")));
    let conv = Conv2d::new(&gpu, spec, &case.w, case.b.as_deref(), opts).unwrap();
    check_chunked(&gpu, &case, &conv, Some(2));
}

/// Grouped convolutions and channel counts the slices do not divide are refused by name,
/// never run.
#[test]
fn refusals() {
    let gpu = gpu();
    let k = kernel("splitk:m32n32k32-t4x4-w2-s2-k4");
    for spec in [Conv2dSpec::new(6, 4, 3), Conv2dSpec::new(8, 8, 3).groups(2)] {
        let e = k.check(&spec, gpu.caps()).unwrap_err().to_string();
        assert!(e.contains("splitk") && e.contains("4 equal slices"), "{e}");
        let (w, _) = params(&spec, 1);
        let opts = Conv2dOptions::default().kernel(Some(k.clone()));
        assert!(Conv2d::new(&gpu, spec, &w, None, opts).is_err());
    }
}
