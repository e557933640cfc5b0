//! The channels-last kernel on the matrix units (`coop-nhwc-f16`) in every tensor form
//! against the f64 CPU reference: a seeded random-shape property test over the configs of
//! its sweep, strides, zero padding (asymmetric too), dilation, groups, kernels up to 5×5,
//! odd sizes and batch 1, on NCHW and channels-last tensors of f32 and f16. On f16
//! channels-last tensors whose groups hold whole vectors of 8 channels the kernel reads the
//! input in place (with border masks where it is padded, and from K = 256 on with the sums'
//! watch for infinities where the output is written in quads), which shapes of f32 tensors
//! never reach; channel counts that are not whole vectors, or outputs not in whole quads,
//! take the staged and per-element paths in the same run.
//!
//! Cooperative-matrix devices only (the H100 through Vulkan): on others the test says it was
//! skipped. Lavapipe checks the kernel's SPIR-V (tests/portable.rs) and its CPU twins.

mod common;
use common::*;
use rand::Rng;
use wgconv::{Conv2dSpec, Padding, Shape4};

const FAMILY: &str = "coop-nhwc-f16";

/// 24 random convolutions in every tensor form, each on a config of the sweep drawn at
/// random, within the f16 bound of the reference. Two thirds have whole vectors of 8 input channels
/// per group (read in place on f16 channels-last tensors), a third of those K ≥ 256.
#[test]
fn random_shapes_in_every_form() {
    let Some(gpu) = coop_gpu() else { return };
    let (seed, mut rng) = seeded_rng("coop-nhwc every form");
    let sweep = wgconv::advanced::sweep(FAMILY).unwrap();
    for i in 0..24 {
        let k = sweep[rng.random_range(0..sweep.len())].clone();
        let case = loop {
            let groups = [1u32, 1, 2][rng.random_range(0..3)];
            let cin_g = match i % 3 {
                0 => 8 * rng.random_range(1..=2u32),
                1 => 8 * rng.random_range(3..=6u32),
                _ => rng.random_range(1..=20u32),
            };
            let cout_g =
                if rng.random_bool(0.7) { 4 * rng.random_range(1..=10u32) } else { rng.random_range(1..=30u32) };
            let kernel = [1u32, 3, 3, 5][rng.random_range(0..4)];
            let pad = |rng: &mut rand::rngs::StdRng| if rng.random_bool(0.3) { 0 } else { rng.random_range(0..=2u32) };
            let spec = Conv2dSpec::new(cin_g * groups, cout_g * groups, kernel)
                .groups(groups)
                .stride(rng.random_range(1..=2u32))
                .dilation(if rng.random_bool(0.25) { 2 } else { 1 })
                .padding(Padding::new(pad(&mut rng), pad(&mut rng), pad(&mut rng), pad(&mut rng)))
                .with_bias(rng.random_bool(0.5));
            let n = if rng.random_bool(0.5) { 1 } else { 2 };
            let shape = Shape4::new(n, spec.in_channels, rng.random_range(3..=13u32), rng.random_range(3..=13u32));
            if spec.problem(shape).is_ok() {
                break Case::with_seed(&format!("forms_{i}"), spec, shape, seed.wrapping_add(i as u64))
                    .replayed_by(seed);
            }
        };
        check_f16_in_every_form(&gpu, &case, &k);
    }
}
