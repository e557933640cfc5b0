//! Split-K on the matrix units (`coop-splitk-f16`: the channels-last f16 kernel on S slices
//! of the input channels, then a reduction) against the f64 CPU reference: a seeded
//! random-shape property test over kernels, strides, padding, dilation, slices, odd sizes,
//! batch 1, bias and ReLU, on every config of its sweep in turn, through `encode` into
//! NaN-poisoned output and `forward`; every tensor form (NCHW and channels last, f32 and
//! f16), which its passes read and write themselves; refusals of the channels it cannot cut.
//!
//! Cooperative-matrix devices only (the H100 through Vulkan): on others each test says it
//! was skipped. Lavapipe checks the family's SPIR-V (tests/portable_f16.rs) and its CPU twin.

mod common;
use common::*;
use rand::Rng;
use wgconv::{Conv2d, Conv2dSpec, Padding, Precision, Shape4};

const FAMILY: &str = "coop-splitk-f16";

/// 30 random convolutions whose channels the config's slices divide, one config of the sweep
/// on each in turn, within the f16 bound of the reference; ReLU on every third.
#[test]
fn random_shapes_match_the_reference() {
    let Some(gpu) = coop_gpu() else { return };
    let (seed, mut rng) = seeded_rng("coop-splitk random shapes");
    let sweep = wgconv::advanced::sweep(FAMILY).unwrap();
    for i in 0..30 {
        let k = sweep[i % sweep.len()].clone();
        let slices: u32 = k.to_string().rsplit_once("-k").unwrap().1.parse().unwrap();
        let case = loop {
            let kernel = [1u32, 3, 5][rng.random_range(0..3)];
            let spec =
                Conv2dSpec::new(8 * slices * rng.random_range(1..=3u32), 4 * rng.random_range(1..=12u32), kernel)
                    .stride(rng.random_range(1..=2u32))
                    .dilation(rng.random_range(1..=2u32))
                    .padding(Padding::new(rng.random_range(0..=2), rng.random_range(0..=2), rng.random_range(0..=2), 1))
                    .with_bias(rng.random_bool(0.5));
            let n = if rng.random_bool(0.5) { 1 } else { 2 };
            let shape = Shape4::new(n, spec.in_channels, rng.random_range(3..=14u32), rng.random_range(3..=14u32));
            if spec.problem(shape).is_ok() {
                break Case::with_seed(&format!("random_{i}"), spec, shape, seed.wrapping_add(i as u64))
                    .replayed_by(seed);
            }
        };
        check_f16_kernel(&gpu, &case, &k, i % 3 == 0);
    }
}

/// NCHW and channels last, f32 and f16 tensors, with unpadded 1×1 and zero-padded 3×3 layers
/// (both read in place on f16 channels-last tensors, the 3×3 one with border masks).
#[test]
fn every_tensor_form() {
    let Some(gpu) = coop_gpu() else { return };
    for (name, spec) in [
        ("splitk_3x3", Conv2dSpec::new(64, 36, 3).padding(Padding::uniform(1)).with_bias(true)),
        ("splitk_1x1", Conv2dSpec::new(64, 20, 1).with_bias(true)),
    ] {
        let case = Case::new(name, spec, Shape4::new(2, 64, 7, 9));
        check_f16_in_every_form(&gpu, &case, &kernel(FAMILY));
    }
}

/// An input beyond f16's range is flagged (the staging pass checks the slices' operands).
#[test]
fn range_flag() {
    let Some(gpu) = coop_gpu() else { return };
    let spec = Conv2dSpec::new(32, 8, 3).padding(Padding::uniform(1));
    let shape = Shape4::new(1, 32, 6, 6);
    let (w, _) = params(&spec, 3);
    let opts = options_at(Precision::F16Accum32, Some(kernel(FAMILY)), false);
    let conv = Conv2d::new(&gpu, spec, &w, None, opts).unwrap();
    let mut x = randn(shape.len() as usize, 4);
    let _ = run_poisoned(&gpu, &conv, &x, shape);
    assert!(!conv.take_range_flag().unwrap(), "flag on normal data");
    x[100] = 7.0e4;
    let _ = run_poisoned(&gpu, &conv, &x, shape);
    assert!(conv.take_range_flag().unwrap(), "7e4 not flagged");
}
