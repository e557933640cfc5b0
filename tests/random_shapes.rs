//! What a default `Conv2d` runs, against the f64 CPU reference on 200 seeded random shapes
//! (stride, asymmetric padding, dilation, groups, odd sizes, batch 1): the kernel selection
//! picks without the input shape and again at the first forward (f32 within 1e-5, and f16
//! where the device has it), plus one tiled sweep config per shape in turn (on every fourth
//! shape also on f16 tensors, which it reads and writes itself where the device has
//! `SHADER_F16`). The seed is printed; replay with `WGCONV_TEST_SEED`.
//!
//! Shapes stay small: CI runs this on lavapipe (Vulkan on the CPU, about 1 GFLOP/s).

mod common;
use common::*;
use rand::Rng;
use wgconv::advanced::default_sweep;
use wgconv::{Conv2dSpec, Layout, Padding, Precision, Shape4};

/// A random dense or grouped convolution and input from `rng`.
fn random_case(rng: &mut rand::rngs::StdRng, i: usize, seed: u64) -> Case {
    loop {
        let groups = [1, 1, 1, 2, 3][rng.random_range(0..5usize)];
        let cin_g = rng.random_range(1..=12u32);
        let cout_g = rng.random_range(1..=12u32);
        let (kh, kw) = if rng.random_bool(0.7) {
            let k = rng.random_range(1..=5u32);
            (k, k)
        } else {
            (rng.random_range(1..=5u32), rng.random_range(1..=5u32))
        };
        let stride = (rng.random_range(1..=3u32), rng.random_range(1..=3u32));
        let d = if rng.random_bool(0.2) { 2 } else { 1 };
        let pad = |r: &mut rand::rngs::StdRng| r.random_range(0..=2u32);
        let padding = Padding::new(pad(rng), pad(rng), pad(rng), pad(rng));
        let spec = Conv2dSpec::new(groups * cin_g, groups * cout_g, kh)
            .kernel_hw((kh, kw))
            .groups(groups)
            .stride(stride)
            .dilation((d, d))
            .padding(padding)
            .with_bias(rng.random_bool(0.5));
        let n = if rng.random_bool(0.5) { 1 } else { rng.random_range(2..=3u32) };
        let shape = Shape4::new(n, spec.in_channels, rng.random_range(1..=15u32), rng.random_range(1..=17u32));
        if spec.problem(shape).is_ok() {
            return Case::with_seed(&format!("random_{i}"), spec, shape, seed.wrapping_add(i as u64)).replayed_by(seed);
        }
    }
}

#[test]
fn what_selection_runs_matches_the_reference_on_random_shapes() {
    let gpu = gpu();
    let (seed, mut rng) = seeded_rng("random shapes");
    let limits = gpu.kernel_limits();
    let sweep: Vec<_> = default_sweep()
        .into_iter()
        .map(|t| tiled_kernel("tiled", t))
        .filter(|k| k.check_limits(&limits).is_ok())
        .collect();
    assert!(!sweep.is_empty(), "the adapter accepted no sweep config");
    let f16 = has_f16(&gpu);
    let (mut runs, mut families) = (0, std::collections::BTreeSet::new());
    for i in 0..200 {
        let case = random_case(&mut rng, i, seed);
        // The default op: selection without the shape, then again at this first forward.
        let conv = case.conv(&gpu, None);
        case.check_forward(&conv);
        families.insert(conv.kernel().kernel.family());
        runs += 1;
        let tiled = &sweep[i % sweep.len()];
        case.check_encode(&gpu, &case.conv(&gpu, Some(tiled.clone())));
        runs += 1;
        if i % 4 == 1 {
            check_f16_storage(&gpu, &case, Some(tiled.clone()), Layout::Nchw);
        }
        if f16 && i % 4 == 0 {
            let conv = case.conv_at(&gpu, None, Precision::F16Accum32);
            let got = run_poisoned(&gpu, &conv, &case.x, case.shape);
            let label = case.label(&format!("encode, {}", conv.kernel().kernel));
            assert_f16_operands_close(&label, &got, &case.want, &case, |r| r);
            families.insert(conv.kernel().kernel.family());
        }
    }
    eprintln!("{runs} f32 runs; default families: {families:?}");
    assert!(runs >= 400);
}
