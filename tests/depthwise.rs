//! The depthwise family against the f64 CPU reference: a seeded random-shape property test
//! over kernel sizes 1–7, strides, dilations, channel multipliers, narrow groups,
//! asymmetric padding, odd sizes and batch 1, on every config of its sweep (f32, and f16
//! where the device has `SHADER_F16`), through `encode` into NaN-poisoned output, and on
//! f16 tensors in both layouts (every third shape, its first config); the
//! selection's choice on such layers; and a refusal that names its limit.
//!
//! Shapes stay small: CI runs this on lavapipe (Vulkan on the CPU, about 1 GFLOP/s).

mod common;
use common::*;
use rand::{Rng, SeedableRng};
use wgconv::advanced::{depthwise_rule_applies, staged_sweep, strip_sweep};
use wgconv::{Activation, ConfigSource, Conv2d, Conv2dOptions, Conv2dSpec, Layout, Padding, Precision, Shape4};

/// A random depthwise or narrow grouped convolution and input from `rng`.
fn random_case(rng: &mut rand::rngs::StdRng, i: usize, seed: u64) -> Case {
    loop {
        let groups = rng.random_range(1..=6u32);
        // Mostly depthwise (one input channel per group), sometimes 2–4 per group.
        let cin_g = if rng.random_bool(0.7) { 1 } else { rng.random_range(2..=4u32) };
        // Multiplier 1 half the time: the staged configs run only those.
        let mult = if rng.random_bool(0.5) { 1 } else { rng.random_range(2..=3u32) };
        let (kh, kw) = if rng.random_bool(0.7) {
            let k = rng.random_range(1..=7u32);
            (k, k)
        } else {
            (rng.random_range(1..=7u32), rng.random_range(1..=7u32))
        };
        let s = rng.random_range(1..=2u32);
        let d = if rng.random_bool(0.25) { 2 } else { 1 };
        let pad = |r: &mut rand::rngs::StdRng| r.random_range(0..=3u32);
        let padding = Padding::new(pad(rng), pad(rng), pad(rng), pad(rng));
        let spec = Conv2dSpec::new(groups * cin_g, groups * cin_g * mult, kh)
            .kernel_hw((kh, kw))
            .groups(groups)
            .stride((rng.random_range(1..=s), s))
            .dilation((d, d))
            .padding(padding)
            .with_bias(rng.random_bool(0.5));
        let n = if rng.random_bool(0.5) { 1 } else { 2 };
        let shape = Shape4::new(n, spec.in_channels, rng.random_range(1..=17u32), rng.random_range(1..=19u32));
        if spec.problem(shape).is_ok() {
            return Case::with_seed(&format!("random_{i}"), spec, shape, seed.wrapping_add(i as u64)).replayed_by(seed);
        }
    }
}

/// 200 random shapes (one config of the sweep, strip and staged configs in turn, on each,
/// and the whole sweep on every tenth), f32 within 1e-5; f16 on every fifth where the device has `SHADER_F16`; f16 tensors
/// (f32 operands) on every third, within 1e-3 of the reference of the f16-rounded input.
#[test]
fn random_shapes_match_the_reference() {
    let gpu = gpu();
    let (seed, mut rng) = seeded_rng("random shapes");
    let sweep: Vec<String> = strip_sweep()
        .iter()
        .map(|c| c.name())
        .zip(staged_sweep().iter().map(|c| c.name()).cycle())
        .flat_map(|(strip, staged)| [strip, staged])
        .collect();
    let f16 = has_f16(&gpu);
    let (mut runs, mut staged_runs) = (0, 0);
    for i in 0..200 {
        let case = random_case(&mut rng, i, seed);
        let configs = if i % 10 == 0 { &sweep[..] } else { &sweep[i % sweep.len()..][..1] };
        for cfg in configs {
            let f32_kernel = kernel(&format!("depthwise:{cfg}"));
            // A strip too wide for its registers is refused, never run; so is a staged
            // config on a layer other than depthwise of multiplier 1.
            if let Err(e) = f32_kernel.check(&case.spec, gpu.caps()) {
                let e = e.to_string();
                let known = e.contains("fit in registers") || e.contains("multiplier 1") || e.contains("B it may use");
                assert!(known, "{}: {e}", case.label(&f32_kernel.to_string()));
                continue;
            }
            staged_runs += cfg.starts_with("staged") as u32;
            case.check_encode(&gpu, &case.conv(&gpu, Some(f32_kernel.clone())));
            runs += 1;
            if i % 3 == 0 && cfg == &configs[0] {
                let layout = if i % 2 == 0 { Layout::Nchw } else { Layout::Nhwc };
                check_f16_storage(&gpu, &case, Some(f32_kernel), layout);
            }
            if f16 && i % 5 == 0 {
                let f16_kernel = kernel(&format!("depthwise-f16:{cfg}"));
                let conv = case.conv_at(&gpu, Some(f16_kernel), Precision::F16Accum32);
                check_f16_encode_and_forward(&gpu, &case, &conv);
            }
        }
    }
    eprintln!("{runs} depthwise runs, {staged_runs} of staged configs");
    assert!(runs >= 200 && staged_runs >= 40, "{runs} runs, {staged_runs} staged");
}

/// Depthwise and narrow grouped layers pick the family by default (with ReLU too), with
/// output channels per invocation up to the group's.
#[test]
fn selected_by_default() {
    let gpu = gpu();
    let cases = [
        ("dw3", Conv2dSpec::new(8, 8, 3).groups(8).padding(Padding::uniform(1)).with_bias(true), [2, 10, 9], "x1y4c1"),
        (
            "dw5_m2_s2",
            Conv2dSpec::new(4, 8, 5).groups(4).stride((2, 2)).padding(Padding::uniform(2)),
            [1, 13, 11],
            "x1y4c2",
        ),
        ("grouped_4", Conv2dSpec::new(16, 16, 3).groups(4).padding(Padding::uniform(1)), [1, 9, 8], "x1y4c4"),
    ];
    for (name, spec, [n, h, w], cfg) in cases {
        assert!(depthwise_rule_applies(gpu.caps(), &spec, Precision::F32, Layout::Nchw));
        let case = Case::new(name, spec, Shape4::new(n, spec.in_channels, h, w));
        let conv = case.conv(&gpu, None);
        let s = conv.kernel();
        assert_eq!((s.kernel.family(), s.source), ("depthwise", ConfigSource::Default), "{name}: {s}");
        assert!(s.kernel.config_name().starts_with(cfg), "{name}: {s}");
        case.check_encode(&gpu, &conv);
        case.check_forward(&conv);
        let opts = Conv2dOptions::default().activation(Activation::Relu);
        let relu = Conv2d::new(&gpu, spec, &case.w, case.b.as_deref(), opts).unwrap();
        let want: Vec<f32> = case.want.iter().map(|&v| wgconv::reference::relu(v)).collect();
        assert_close(&case.label("relu"), &run_poisoned(&gpu, &relu, &case.x, case.shape), &want, TOL_F32);
    }
}

/// Groups of more input channels than the family runs are refused by name; selection sends
/// them to the GEMM.
#[test]
fn wide_groups_are_refused_and_not_selected() {
    let gpu = gpu();
    let spec = Conv2dSpec::new(64, 64, 3).groups(2);
    let e = kernel("depthwise").check(&spec, gpu.caps()).unwrap_err().to_string();
    assert!(e.contains("depthwise:x1y4c1-w128") && e.contains("32 input channels per group"), "{e}");
    let (w, _) = params(&spec, 1);
    let conv = Conv2d::new(&gpu, spec, &w, None, Conv2dOptions::default()).unwrap();
    assert_eq!(conv.kernel().kernel.family(), "tiled");
}

/// On GPUs, small maps of depthwise layers of multiplier 1 run the staged kernel by default
/// once the input shape is known (at the first forward), on f16 tensors and with f16
/// operands; larger maps, and every map on a CPU adapter, keep the strip kernel. Each
/// matches the reference.
#[test]
fn staged_by_default_on_small_maps() {
    let gpu = gpu();
    if !has_f16(&gpu) {
        eprintln!("skipped: no SHADER_F16 on this adapter");
        return;
    }
    let spec = Conv2dSpec::new(24, 24, 3).groups(24).padding(Padding::uniform(1)).with_bias(true);
    let gpu_adapter = !gpu.is_cpu();
    for (hw, small) in [(7, true), (14, true), (30, false)] {
        let staged = small && gpu_adapter;
        let case = Case::new(&format!("dw_{hw}"), spec, Shape4::new(2, 24, hw, hw));
        // f16 tensors, f32 operands.
        let conv = check_f16_storage(&gpu, &case, None, Layout::Nchw);
        let s = conv.kernel();
        assert_eq!(s.kernel.config_name().starts_with("staged"), staged, "{hw}: {s}");
        // f32 tensors, f16 operands.
        let conv = case.conv_at(&gpu, None, Precision::F16Accum32);
        let got = conv.forward(&case.x, case.shape).unwrap();
        let s = conv.kernel();
        assert_eq!(s.kernel.config_name().starts_with("staged"), staged, "{hw}: {s}");
        assert_close(&case.label(&format!("f16, {}", s.kernel)), &got, &case.want, TOL_F16);
    }
}

/// A case's input and wanted output in NHWC (ReLU applied to the output where `relu`).
fn channels_last_case(case: &Case, relu: bool) -> (Vec<f32>, Vec<f32>) {
    use wgconv::reference::to_nhwc;
    let mut want = to_nhwc(&case.want, case.problem.output).unwrap();
    if relu {
        want.iter_mut().for_each(|v| *v = wgconv::reference::relu(*v));
    }
    (to_nhwc(&case.x, case.shape).unwrap(), want)
}

/// Runs a channels-last op through `encode` into NaN-poisoned output and checks it against
/// `want` (the reference in NHWC, ReLU applied where `relu`): within 1e-5 for f32 operands,
/// within the f16-operand bound of the reference of the rounded operands for f16 ones; and
/// nothing written past the output.
fn check_channels_last(gpu: &wgconv::Gpu, conv: &Conv2d, case: &Case, x: &[f32], want: &[f32], relu: bool, what: &str) {
    use wgconv::reference::to_nhwc;
    let (got, tail) = run_poisoned_with(gpu, conv, x, case.shape, f32::NAN, 7);
    if conv.kernel().kernel.precision() == Precision::F16Accum32 {
        assert_f16_operands_close(what, &got, want, case, |r| {
            let mut r = to_nhwc(&r, case.problem.output).unwrap();
            if relu {
                r.iter_mut().for_each(|v| *v = wgconv::reference::relu(*v));
            }
            r
        });
    } else {
        assert_close(what, &got, want, TOL_F32);
    }
    assert!(tail.iter().all(|v| v.is_nan()), "{what}: wrote past the output");
}

/// Channels-last depthwise layers of multiplier 1 over a multiple of 4 channels run over
/// vectors of 4 channels (`depthwise_nhwc4.wgsl`): random kernel sizes, strides, dilations,
/// padding, bias and ReLU, odd maps, batch 1–2, on f32 tensors (through `encode` into
/// NaN-poisoned output, f32 and, where the device has `SHADER_F16`, f16 operands) and on f16
/// tensors; 6 channels run the one-channel shader beside them.
#[test]
fn channel_vectors_match_the_reference() {
    let gpu = gpu();
    let seed = test_seed();
    eprintln!("channel vectors: WGCONV_TEST_SEED={seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0x4e48_5743);
    let f16 = has_f16(&gpu);
    let mut vector_cases = 0;
    for i in 0..24 {
        let c = [4u32, 8, 12, 20, 6][i % 5];
        let k = rng.random_range(1..=7u32);
        let s = rng.random_range(1..=2u32);
        let d = if rng.random_bool(0.25) { 2 } else { 1 };
        let pad = |r: &mut rand::rngs::StdRng| r.random_range(0..=2u32);
        let spec = Conv2dSpec::new(c, c, k)
            .groups(c)
            .stride((s, s))
            .dilation((d, d))
            .padding(Padding::new(pad(&mut rng), pad(&mut rng), pad(&mut rng), pad(&mut rng)))
            .with_bias(rng.random_bool(0.5));
        let shape =
            Shape4::new(rng.random_range(1..=2u32), c, rng.random_range(3..=13u32), rng.random_range(3..=15u32));
        if spec.problem(shape).is_err() {
            continue;
        }
        let case = Case::with_seed(&format!("vectors_{i}"), spec, shape, seed.wrapping_add(i as u64)).replayed_by(seed);
        let relu = i % 3 == 1;
        let activation = if relu { Activation::Relu } else { Activation::None };
        let (x, want) = channels_last_case(&case, relu);
        let precisions: &[Precision] = if f16 { &[Precision::F32, Precision::F16Accum32] } else { &[Precision::F32] };
        // The default, then a config of the sweep in turn (its columns and rows), counted
        // over the shapes that run over vectors, so that each config meets them.
        let sweep = strip_sweep();
        let named = kernel(&format!("depthwise:{}", sweep[vector_cases % sweep.len()].name()));
        vector_cases += c.is_multiple_of(4) as usize;
        // (A config whose taps would not fit in registers is refused by name.)
        let named = named.check(&spec, gpu.caps()).is_ok().then_some(named);
        let runs = precisions.iter().map(|&p| (p, None)).chain(named.map(|k| (Precision::F32, Some(k))));
        for (precision, named) in runs {
            let opts =
                Conv2dOptions::default().layout(Layout::Nhwc).precision(precision).activation(activation).kernel(named);
            let conv = Conv2d::new(&gpu, spec, &case.w, case.b.as_deref(), opts).unwrap();
            let kind = conv.kernel().kernel.clone();
            assert!(kind.family().starts_with("depthwise"), "{}: {kind}", case.label("default"));
            let what = case.label(&format!("NHWC {precision}, {kind}"));
            check_channels_last(&gpu, &conv, &case, &x, &want, relu, &what);
        }
        if f16 && !relu {
            check_f16_storage(&gpu, &case, None, Layout::Nhwc);
        }
    }
}

/// Channels-last grouped layers whose groups read and write a multiple of 4 channels run
/// over vectors of 4 channels with 4×4 tap matrices (`depthwise_nhwc4.wgsl`, `GROUPED`):
/// random groups of 4–16 input and 4–8 output channels, kernel sizes, strides, dilations,
/// padding, bias and ReLU, odd maps, batch 1–2; each named config of the sweep in turn on
/// f32 tensors (through `encode` into NaN-poisoned output; f32 operands, and f16 operands
/// where the device has `SHADER_F16`) and, there, on f16 tensors (f32 operands).
#[test]
fn group_vectors_match_the_reference() {
    let gpu = gpu();
    let seed = test_seed();
    eprintln!("group vectors: WGCONV_TEST_SEED={seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0x4752_5056);
    let f16 = has_f16(&gpu);
    let sweep = strip_sweep();
    for i in 0..16 {
        let cin_g = [4u32, 8, 4, 12, 16, 8][i % 6];
        let cout_g = if rng.random_bool(0.5) { cin_g.min(8) } else { 4 * rng.random_range(1..=2u32) };
        let groups = rng.random_range(1..=3u32);
        let k = rng.random_range(1..=5u32);
        let s = rng.random_range(1..=2u32);
        let d = if rng.random_bool(0.25) { 2 } else { 1 };
        let pad = |r: &mut rand::rngs::StdRng| r.random_range(0..=2u32);
        let spec = Conv2dSpec::new(groups * cin_g, groups * cout_g, k)
            .groups(groups)
            .stride((s, s))
            .dilation((d, d))
            .padding(Padding::new(pad(&mut rng), pad(&mut rng), pad(&mut rng), pad(&mut rng)))
            .with_bias(rng.random_bool(0.5));
        let shape = Shape4::new(
            rng.random_range(1..=2u32),
            spec.in_channels,
            rng.random_range(3..=11u32),
            rng.random_range(3..=13u32),
        );
        if spec.problem(shape).is_err() {
            continue;
        }
        let case = Case::with_seed(&format!("groups_{i}"), spec, shape, seed.wrapping_add(i as u64)).replayed_by(seed);
        let relu = i % 3 == 1;
        let activation = if relu { Activation::Relu } else { Activation::None };
        let (x, want) = channels_last_case(&case, relu);
        let config = sweep[i % sweep.len()].name();
        let families: &[&str] = if f16 { &["depthwise", "depthwise-f16"] } else { &["depthwise"] };
        for family in families {
            let named = kernel(&format!("{family}:{config}"));
            if let Err(e) = named.check(&spec, gpu.caps()) {
                // A config whose taps would not fit in registers is refused by name.
                assert!(e.to_string().contains("taps"), "{}: {e}", case.label(family));
                continue;
            }
            let precision = named.precision();
            let opts = Conv2dOptions::default()
                .layout(Layout::Nhwc)
                .precision(precision)
                .activation(activation)
                .kernel(Some(named.clone()));
            let conv = Conv2d::new(&gpu, spec, &case.w, case.b.as_deref(), opts).unwrap();
            let what = case.label(&format!("NHWC grouped {named}"));
            check_channels_last(&gpu, &conv, &case, &x, &want, relu, &what);
            if f16 && !relu && *family == "depthwise" {
                check_f16_storage(&gpu, &case, Some(named), Layout::Nhwc);
            }
        }
    }
}

/// Over channel vectors, a batch split into chunks (each chunk's offset a whole number of
/// images, so of vectors), f32 and f16 tensors.
#[test]
fn channel_vectors_in_chunks() {
    use wgconv::reference::to_nhwc;
    let _serial = serial();
    // 12 channels × 9 × 9 f32 = 3,888 B per image: 4 images per 16 KiB binding, 5 chunks.
    let gpu = gpu_with_limits(|l| l.max_storage_buffer_binding_size = 16_384);
    let spec = Conv2dSpec::new(12, 12, 3).groups(12).padding(Padding::uniform(1)).with_bias(true);
    let case = Case::new("vectors_chunked", spec, Shape4::new(17, 12, 9, 9));
    let opts = Conv2dOptions::default().layout(Layout::Nhwc);
    let conv = Conv2d::new(&gpu, spec, &case.w, case.b.as_deref(), opts).unwrap();
    let x = to_nhwc(&case.x, case.shape).unwrap();
    let output = gpu.create_buffer("out", case.problem.output.len() * 4, wgpu::BufferUsages::STORAGE).unwrap();
    let input = gpu.buffer_init("in", bytemuck::cast_slice(&x), wgpu::BufferUsages::STORAGE).unwrap();
    assert!(conv.plan(case.shape, &input, &output).unwrap().chunks() >= 4);
    let (got, tail) = run_poisoned_with(&gpu, &conv, &x, case.shape, f32::NAN, 5);
    assert_close(&case.label("chunked NHWC"), &got, &to_nhwc(&case.want, case.problem.output).unwrap(), TOL_F32);
    assert!(tail.iter().all(|v| v.is_nan()));
    if has_f16(&gpu) {
        check_f16_storage(&gpu, &case, None, Layout::Nhwc);
    }
}

/// Under f16 operands on f16 tensors the kernels check their sums instead of each loaded
/// value: an infinite input is still a range error wherever it sits (in a block's first or
/// last column or row, in a channel of a vector, multiplied by a zero weight), NaN is not,
/// and finite data sets no flag; both layouts.
#[test]
fn f16_tensors_flag_infinite_inputs() {
    use wgconv::half::f16;
    use wgconv::{Error, Storage};
    let gpu = gpu();
    if !has_f16(&gpu) {
        eprintln!("skipped: no SHADER_F16 on this adapter");
        return;
    }
    let spec = Conv2dSpec::new(8, 8, 3).groups(8).padding(Padding::uniform(1)).with_bias(true);
    let shape = Shape4::new(2, 8, 9, 10);
    let (mut w, b) = params(&spec, 3);
    // A zero weight: an infinite input on its tap makes NaN, not ±inf.
    w[9 * 5 + 4] = 0.0;
    for layout in [Layout::Nchw, Layout::Nhwc] {
        let opts = Conv2dOptions::default().layout(layout).storage(Storage::F16).precision(Precision::F16Accum32);
        let conv = Conv2d::new(&gpu, spec, &w, b.as_deref(), opts).unwrap();
        let x: Vec<f16> = randn(shape.len() as usize, 4).iter().map(|&v| f16::from_f32(v)).collect();
        conv.forward_f16(&x, shape).unwrap_or_else(|e| panic!("{layout:?}, finite data: {e}"));
        // Positions as (image, channel, row, column), written in the layout's order.
        let at = |n: u32, c: u32, y: u32, xx: u32| match layout {
            Layout::Nhwc => (((n * 9 + y) * 10 + xx) * 8 + c) as usize,
            _ => (((n * 8 + c) * 9 + y) * 10 + xx) as usize,
        };
        for (n, c, y, xx) in [(0, 0, 0, 0), (1, 7, 8, 9), (0, 5, 4, 4), (1, 3, 0, 9)] {
            for special in [f16::INFINITY, f16::NEG_INFINITY] {
                let mut bad = x.clone();
                bad[at(n, c, y, xx)] = special;
                match conv.forward_f16(&bad, shape) {
                    Err(Error::F16Range { .. }) => {}
                    other => panic!(
                        "{layout:?}: {special} at {:?}: expected F16Range, got {:?}",
                        (n, c, y, xx),
                        other.map(|v| v.len())
                    ),
                }
            }
            let mut nan = x.clone();
            nan[at(n, c, y, xx)] = f16::NAN;
            let got = conv.forward_f16(&nan, shape).unwrap_or_else(|e| panic!("{layout:?}: NaN: {e}"));
            assert!(got.iter().any(|v| v.is_nan()), "{layout:?}: NaN did not propagate");
        }
    }
}
