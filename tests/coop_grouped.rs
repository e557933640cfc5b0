//! Grouped convolutions on the matrix units (`coop-grouped-f16`: the channels-last f16
//! kernel on blocks of several groups, block-diagonal weights) against the f64 CPU
//! reference: a seeded random-shape property test over groups of 8 and 16 channels, blocks,
//! kernels, strides, padding, dilation, odd sizes, batch 1, bias and ReLU, on every config
//! of its sweep in turn, through `encode` into NaN-poisoned output and `forward`; every
//! tensor form (NCHW and channels last, f32 and f16: the f16 channels-last input is read in
//! place, with border masks where it is padded); ±inf in an input read in place is flagged.
//!
//! Cooperative-matrix devices only (the H100 through Vulkan): on others each test says it
//! was skipped. Lavapipe checks the family's SPIR-V (tests/portable.rs) and its CPU twin.

mod common;
use common::*;
use rand::Rng;
use wgconv::half::f16;
use wgconv::{Conv2d, Conv2dSpec, Error, Layout, Padding, Precision, Shape4, Storage};

const FAMILY: &str = "coop-grouped-f16";

/// A random grouped convolution the config runs: groups of 8 or 16 channels, 1 to 3 blocks
/// of `block_n` channels.
fn random_case(rng: &mut impl Rng, block_n: u32, name: &str, seed: u64, replay: u64) -> Case {
    loop {
        let c = [8u32, 16][rng.random_range(0..2)];
        let channels = block_n * rng.random_range(1..=3u32);
        let kernel = [1u32, 3, 5][rng.random_range(0..3)];
        let spec = Conv2dSpec::new(channels, channels, kernel)
            .groups(channels / c)
            .stride(rng.random_range(1..=2u32))
            .dilation(rng.random_range(1..=2u32))
            .padding(Padding::new(
                rng.random_range(0..=2),
                rng.random_range(0..=2),
                rng.random_range(0..=2),
                rng.random_range(0..=2),
            ))
            .with_bias(rng.random_bool(0.5));
        let n = if rng.random_bool(0.5) { 1 } else { 2 };
        let shape = Shape4::new(n, channels, rng.random_range(3..=14u32), rng.random_range(3..=14u32));
        if spec.problem(shape).is_ok() {
            return Case::with_seed(name, spec, shape, seed).replayed_by(replay);
        }
    }
}

fn block_n(kernel: &wgconv::Kernel) -> u32 {
    kernel.tile().expect("a tile config").block_n
}

/// 30 random grouped convolutions, each on a config of the sweep drawn at random, within the
/// f16 bound of the reference (NCHW f32 tensors: staged); ReLU on a third, drawn apart.
#[test]
fn random_shapes_match_the_reference() {
    let Some(gpu) = coop_gpu() else { return };
    let (seed, mut rng) = seeded_rng("coop-grouped random shapes");
    let sweep = wgconv::advanced::sweep(FAMILY).unwrap();
    for i in 0..30 {
        let k = sweep[rng.random_range(0..sweep.len())].clone();
        let case = random_case(&mut rng, block_n(&k), &format!("random_{i}"), seed.wrapping_add(i as u64), seed);
        let relu = rng.random_bool(1.0 / 3.0);
        check_f16_kernel(&gpu, &case, &k, relu);
    }
}

/// 10 random grouped convolutions in every tensor form, each on a config of the sweep drawn
/// at random: on f16 channels-last tensors the kernel reads the input in place (border
/// masks where padded, none where not).
#[test]
fn random_shapes_in_every_form() {
    let Some(gpu) = coop_gpu() else { return };
    let (seed, mut rng) = seeded_rng("coop-grouped every form");
    let sweep = wgconv::advanced::sweep(FAMILY).unwrap();
    for i in 0..10 {
        let k = sweep[rng.random_range(0..sweep.len())].clone();
        let case = random_case(&mut rng, block_n(&k), &format!("forms_{i}"), seed.wrapping_add(i as u64), seed);
        check_f16_in_every_form(&gpu, &case, &k);
    }
}

/// ResNeXt-50's grouped 3×3 layers (32 groups of 8 and 16 channels, stride 1 and 2), small
/// maps, in every form.
#[test]
fn resnext_layers_in_every_form() {
    let Some(gpu) = coop_gpu() else { return };
    for (name, spec, hw) in [
        ("g32_c8", Conv2dSpec::new(256, 256, 3).groups(32).padding(Padding::uniform(1)).with_bias(true), 9),
        ("g32_c8_s2", Conv2dSpec::new(256, 256, 3).groups(32).stride(2).padding(Padding::uniform(1)), 11),
        ("g32_c16", Conv2dSpec::new(512, 512, 3).groups(32).padding(Padding::uniform(1)), 7),
    ] {
        let case = Case::new(name, spec, Shape4::new(2, spec.in_channels, hw, hw));
        check_f16_in_every_form(&gpu, &case, &kernel(FAMILY));
    }
}

/// ±inf in an f16 channels-last input read in place is flagged: `forward_f16` answers
/// `Error::F16Range`. A 3×3 layer (K = 576: the sums' watch, every fragment column noting
/// the rows whose sums are not finite, then reading their windows again) and a 1×1 layer
/// (K = 64: each loaded vector tested); the infinities lie in the last group of the second
/// block of channels and in the first block.
#[test]
fn in_place_input_flags_infinities() {
    let Some(gpu) = coop_gpu() else { return };
    let specs =
        [Conv2dSpec::new(128, 128, 3).groups(16).padding(Padding::uniform(1)), Conv2dSpec::new(128, 128, 1).groups(8)];
    for spec in specs {
        let shape = Shape4::new(2, 128, 6, 5);
        let (w, _) = params(&spec, 5);
        let opts =
            options_at(Precision::F16Accum32, Some(kernel(FAMILY)), false).layout(Layout::Nhwc).storage(Storage::F16);
        let conv = Conv2d::new(&gpu, spec, &w, None, opts).unwrap();
        let x: Vec<f16> = randn(shape.len() as usize, 6).iter().map(|&v| f16::from_f32(v)).collect();
        conv.forward_f16(&x, shape).unwrap();
        for (at, value) in [(37 * 128 + 127, f16::INFINITY), (4 * 128 + 40, f16::NEG_INFINITY)] {
            let mut bad = x.clone();
            bad[at] = value;
            let got = conv.forward_f16(&bad, shape);
            assert!(matches!(got, Err(Error::F16Range { .. })), "{spec:?}: input {value} at {at}: {got:?}");
        }
    }
}
