//! GPU against the f64 CPU reference on many shapes: every shape runs on the library's
//! default kernel and on the direct kernel, through `encode` into NaN-poisoned output,
//! with fresh random normal data (the seed is printed; replay with `WGCONV_TEST_SEED`).
//! Then every tile config of the declared sweep on shapes ragged in M, N and K, the
//! `forward` host path, bias on and off, and the fused ReLU.
//!
//! Shapes stay small: CI runs this on lavapipe (Vulkan on the CPU, about 1 GFLOP/s).

mod common;
use common::*;
use wgconv::advanced::{default_sweep, depthwise_rule_applies, stem_is_default};
use wgconv::{reference, Activation, ConfigSource, Conv2d, Conv2dOptions, Layout, Precision, Shape4};
use wgconv::{Conv2dSpec as S, Padding as P};

/// Runs one shape on the default kernel (a tiled config, or the depthwise family for
/// depthwise and narrow grouped convolutions) and the direct one,
/// and on the default f16 kernel where the device has one (cooperative matrices on GPUs that
/// offer them: on NVIDIA the stem kernel for ungrouped inputs of at most 4 channels, else the
/// gathering kernel; the f16 SIMT kernel on lavapipe) at the f16 tolerance.
fn check(name: &str, spec: S, [n, h, w]: [u32; 3]) {
    let gpu = gpu();
    let case = Case::new(name, spec, Shape4::new(n, spec.in_channels, h, w));
    let default = case.conv(&gpu, None);
    let (kind, source) = (&default.kernel().kernel, default.kernel().source);
    // The depthwise rule runs groups of few input channels on the depthwise family; the rest
    // runs a tiled config.
    let depthwise = depthwise_rule_applies(gpu.caps(), &spec, Precision::F32, Layout::Nchw);
    let expected = if depthwise { "depthwise" } else { "tiled" };
    assert_eq!(kind.family(), expected, "{name}: default kernel is {kind}");
    assert_ne!(source, ConfigSource::Explicit, "{name}");
    case.check_encode(&gpu, &default);
    let direct = case.conv(&gpu, Some(direct_kernel()));
    case.check_encode(&gpu, &direct);
    if has_f16(&gpu) {
        let f16 = case.conv_at(&gpu, None, Precision::F16Accum32);
        let kind = &f16.kernel().kernel;
        // The stem kernel for image inputs on NVIDIA's cooperative-matrix devices, else the
        // gathering one.
        let stem = kind.family() == "coop-stem-f16";
        assert_eq!(stem, stem_is_default(gpu.caps(), &spec), "{name}: f16 kernel is {kind}");
        let f16_family = if depthwise { vec!["depthwise-f16"] } else { vec!["coop-nhwc-f16", "coop-f16", "tiled-f16"] };
        assert!(stem || f16_family.contains(&kind.family()), "{name}: f16 kernel is {kind}");
        case.check_encode(&gpu, &f16);
    }
}

macro_rules! shapes {
    ($($name:ident: $spec:expr, $nhw:expr;)+) => {
        $(
            #[test]
            fn $name() {
                check(stringify!($name), $spec, $nhw);
            }
        )+
        /// Every shape of this file, for the coverage checks below.
        fn all_shapes() -> Vec<(&'static str, S, [u32; 3])> {
            vec![$((stringify!($name), $spec, $nhw)),+]
        }
    };
}

// name: spec, [N, H, W] (C_in comes from the spec).
shapes! {
    // Strides 1..5, square and not.
    stride1_pad1_3x3: S::new(3, 8, 3).padding(P::uniform(1)).with_bias(true), [2, 9, 9];
    stride2_3x3: S::new(4, 8, 3).stride((2, 2)).padding(P::uniform(1)), [2, 12, 11];
    stride3_5x5: S::new(3, 6, 5).stride((3, 3)).padding(P::uniform(2)).with_bias(true), [1, 16, 14];
    stride4_4x4: S::new(2, 5, 4).stride((4, 4)), [2, 19, 17];
    stride5_3x3: S::new(2, 7, 3).stride((5, 5)).padding(P::uniform(1)), [1, 23, 21];
    stride_2x3: S::new(3, 4, 3).stride((2, 3)), [1, 13, 16];
    stride_5x1_asym_pad: S::new(2, 3, 2).stride((5, 1)).padding(P::new(0, 1, 3, 0)), [2, 21, 6];
    // Asymmetric padding (ONNX pads: top, left, bottom, right).
    asym_pad_1021: S::new(3, 17, 3).stride((2, 1)).padding(P::new(1, 0, 2, 1)).with_bias(true), [2, 13, 11];
    asym_pad_0310: S::new(2, 6, 4).padding(P::new(0, 3, 1, 0)), [1, 8, 9];
    // Padding wider than the kernel: some outputs see only zeros (bias only).
    asym_pad_wider_than_kernel: S::new(1, 4, 3).padding(P::new(4, 0, 0, 5)).with_bias(true), [1, 5, 6];
    // Dilation 1..3.
    dilation2: S::new(3, 8, 3).dilation((2, 2)).padding(P::uniform(2)), [2, 12, 12];
    dilation3: S::new(2, 5, 3).dilation((3, 3)), [1, 15, 17];
    dilation_3x1_stride2: S::new(3, 6, 3).dilation((3, 1)).stride((2, 2)).padding(P::symmetric(3, 1)).with_bias(true), [2, 14, 10];
    dilation_1x2_kernel_5x3: S::new(2, 4, 5).kernel_hw((5, 3)).dilation((1, 2)), [1, 11, 12];
    // Groups and depthwise.
    groups2: S::new(4, 6, 3).groups(2).padding(P::uniform(1)), [2, 8, 10];
    groups3_stride2_bias: S::new(6, 9, 3).groups(3).stride((2, 2)).with_bias(true), [1, 11, 12];
    groups4_dilation2_asym_pad: S::new(8, 12, 3).groups(4).stride((2, 1)).dilation((2, 2)).padding(P::new(2, 1, 0, 3)), [2, 13, 9];
    depthwise_3x3: S::new(8, 8, 3).groups(8).padding(P::uniform(1)).with_bias(true), [2, 10, 10];
    depthwise_multiplier2_5x5: S::new(4, 8, 5).groups(4).stride((2, 2)).padding(P::uniform(2)), [1, 13, 11];
    depthwise_stride2_dilation2: S::new(6, 6, 3).groups(6).stride((2, 2)).dilation((2, 2)).padding(P::uniform(2)), [1, 12, 12];
    // C_out not a multiple of any tile.
    cout1: S::new(3, 1, 3).padding(P::uniform(1)).with_bias(true), [2, 9, 7];
    cout3: S::new(5, 3, 3), [1, 10, 12];
    cout17: S::new(4, 17, 3).stride((2, 2)).padding(P::uniform(1)), [2, 11, 9];
    cout96: S::new(3, 96, 5).stride((2, 2)).padding(P::uniform(2)).with_bias(true), [1, 15, 13];
    cout96_groups3: S::new(6, 96, 3).groups(3).padding(P::uniform(1)), [1, 7, 9];
    // Kernel sizes: 1×1, 11×11, non-square kernels and inputs.
    k1x1: S::new(16, 24, 1).with_bias(true), [2, 7, 9];
    k1x1_stride2_pad1: S::new(5, 17, 1).stride((2, 2)).padding(P::uniform(1)), [1, 9, 8];
    k11x11_same: S::new(3, 16, 11).padding(P::uniform(5)), [1, 13, 12];
    k11x11_stride4: S::new(3, 17, 11).stride((4, 4)).padding(P::uniform(2)).with_bias(true), [2, 31, 27];
    k1x7: S::new(3, 6, 1).kernel_hw((1, 7)).padding(P::symmetric(0, 3)), [1, 6, 15];
    k5x2_stride_1x2: S::new(2, 5, 5).kernel_hw((5, 2)).stride((1, 2)), [2, 9, 10];
    wide_input_5x23: S::new(3, 7, 3).kernel_hw((3, 5)).padding(P::symmetric(1, 2)), [1, 5, 23];
    tall_input_25x4: S::new(2, 4, 3), [1, 25, 4];
    kernel_equals_input: S::new(3, 10, 7), [2, 7, 7];
    // Input smaller than the kernel, made up by padding.
    h_less_than_kh: S::new(2, 5, 5).padding(P::uniform(1)), [1, 3, 8];
    h_less_than_kh_7x3: S::new(3, 4, 3).kernel_hw((7, 3)).padding(P::new(2, 1, 2, 1)), [2, 4, 6];
    hw_less_than_k: S::new(1, 3, 5).padding(P::uniform(2)).with_bias(true), [1, 2, 3];
    // Batch 1..3, C_in 1, many M and K tiles.
    batch1_cin1: S::new(1, 8, 3), [1, 6, 6];
    batch3_stride2: S::new(3, 10, 3).padding(P::uniform(1)).stride((2, 2)), [3, 10, 11];
    many_m_tiles: S::new(3, 8, 3).padding(P::uniform(1)), [2, 24, 21];
    many_k_tiles: S::new(24, 10, 3).padding(P::uniform(1)).with_bias(true), [1, 6, 5];
    // AlexNet conv1 (3→96, 11×11, stride 4, padding 2, bias), N = 1.
    alexnet_conv1_n1: S::alexnet_conv1(), [1, 224, 224];
}

/// The shape list covers what the suite promises.
#[test]
fn shape_list_covers_the_cases() {
    let shapes = all_shapes();
    assert!(shapes.len() >= 30, "{} shapes", shapes.len());
    let any = |f: &dyn Fn(&S, &[u32; 3]) -> bool| shapes.iter().any(|(_, s, nhw)| f(s, nhw));
    for st in 1..=5 {
        assert!(any(&|s, _| s.stride.contains(&st)), "stride {st}");
    }
    for d in 1..=3 {
        assert!(any(&|s, _| s.dilation.contains(&d)), "dilation {d}");
    }
    for c in [1, 3, 17, 96] {
        assert!(any(&|s, _| s.out_channels == c), "C_out {c}");
    }
    for k in [1, 3, 11] {
        assert!(any(&|s, _| s.kernel == [k, k]), "{k}x{k}");
    }
    for n in 1..=3 {
        assert!(any(&|_, nhw| nhw[0] == n), "N = {n}");
    }
    assert!(any(&|s, _| s.kernel[0] != s.kernel[1]), "non-square kernel");
    assert!(any(&|_, nhw| nhw[1] != nhw[2]), "non-square input");
    assert!(any(&|s, _| s.padding.top != s.padding.bottom || s.padding.left != s.padding.right), "asymmetric padding");
    assert!(any(&|s, _| s.groups > 1 && s.groups < s.in_channels), "groups");
    assert!(any(&|s, _| s.groups > 1 && s.groups == s.in_channels), "depthwise");
    assert!(any(&|s, nhw| nhw[1] < s.kernel[0]), "H < KH");
    assert!(any(&|s, nhw| *s == S::alexnet_conv1() && nhw[0] == 1), "AlexNet conv1, N = 1");
    assert!(any(&|s, _| s.bias) && any(&|s, _| !s.bias), "bias on and off");
}

/// Shapes ragged for every block size of the sweep: M = 286 and 112 (not multiples of
/// 32..256), C_out per group 70 and 19 (not multiples of 32, 64, 96, 128), K = 135 (odd,
/// and over the largest BLOCK_K allowed, 128: several K steps, so the stages wrap around).
fn ragged_cases() -> Vec<Case> {
    let plain = S::new(15, 70, 3).padding(P::uniform(1)).with_bias(true);
    let grouped = S::new(30, 38, 3).groups(2).stride((2, 2)).dilation((2, 2)).padding(P::new(2, 1, 1, 2));
    let cases = vec![
        Case::new("ragged", plain, Shape4::new(2, 15, 11, 13)),
        Case::new("ragged_grouped", grouped, Shape4::new(2, 30, 15, 17)),
    ];
    for c in &cases {
        let p = &c.problem;
        let m = p.output.n * p.output.h * p.output.w;
        for cfg in default_sweep() {
            assert_ne!(m % cfg.block_m, 0, "{}: M = {m} vs {cfg}", c.name);
            assert_ne!(c.spec.out_channels_per_group() % cfg.block_n, 0, "{}: N vs {cfg}", c.name);
            assert_ne!(c.spec.k_total() % cfg.block_k, 0, "{}: K vs {cfg}", c.name);
            assert!(c.spec.k_total() > cfg.block_k, "{}: one K step only for {cfg}", c.name);
        }
    }
    cases
}

/// Every sweep config the adapter accepts computes the ragged shapes correctly; configs
/// over the adapter's limits are printed and skipped.
#[test]
fn every_sweep_config_on_ragged_shapes() {
    let gpu = gpu();
    let limits = gpu.kernel_limits();
    let cases = ragged_cases();
    let (mut ran, mut refused) = (0, Vec::new());
    for cfg in default_sweep() {
        let kernel = tiled_kernel("tiled", cfg);
        if let Err(e) = kernel.check_limits(&limits) {
            eprintln!("skipped (refused by {}): {e}", gpu.info.name);
            refused.push(cfg);
            continue;
        }
        for case in &cases {
            let conv = case.conv(&gpu, Some(kernel.clone()));
            assert_eq!((&conv.kernel().kernel, conv.kernel().source), (&kernel, ConfigSource::Explicit));
            case.check_encode(&gpu, &conv);
        }
        ran += 1;
    }
    eprintln!("{ran} sweep configs ran, {} refused", refused.len());
    assert!(ran > 0, "the adapter accepted no sweep config");
}

/// The `forward` host path (upload, run, read back) on a few shapes, both kernels.
#[test]
fn forward_host_path() {
    let gpu = gpu();
    let cases = [
        Case::new(
            "forward_asym",
            S::new(3, 17, 3).stride((2, 1)).padding(P::new(1, 0, 2, 1)).with_bias(true),
            Shape4::new(2, 3, 13, 11),
        ),
        Case::new(
            "forward_depthwise",
            S::new(6, 12, 3).groups(6).dilation((2, 2)).padding(P::uniform(2)),
            Shape4::new(3, 6, 9, 8),
        ),
        Case::new(
            "forward_11x11",
            S::new(3, 96, 11).stride((4, 4)).padding(P::uniform(2)).with_bias(true),
            Shape4::new(1, 3, 35, 31),
        ),
    ];
    for case in &cases {
        for kind in [None, Some(direct_kernel())] {
            let conv = case.conv(&gpu, kind.clone());
            case.check_forward(&conv);
            // The same op again through encode: the two paths agree.
            case.check_encode(&gpu, &conv);
        }
    }
}

/// The same shape with and without bias: the bias is added exactly once per output.
#[test]
fn bias_on_and_off() {
    let gpu = gpu();
    let shape = Shape4::new(2, 5, 9, 10);
    let seed = test_seed();
    for groups in [1, 5] {
        let base = S::new(5, 15, 3).groups(groups).stride((2, 1)).padding(P::new(1, 2, 0, 1));
        let without = Case::with_seed("bias_off", base.with_bias(false), shape, seed);
        let with = Case::with_seed("bias_on", base.with_bias(true), shape, seed);
        assert_eq!(without.w, with.w);
        // The references differ by the bias, broadcast over N, OH, OW.
        let b = with.b.as_ref().unwrap();
        let hw = (with.problem.output.h * with.problem.output.w) as usize;
        for (i, (a, c)) in without.want.iter().zip(&with.want).enumerate() {
            let oc = i / hw % 15;
            assert!((c - a - b[oc]).abs() <= 1e-4 * (1.0 + c.abs()), "reference bias at {i}");
        }
        for kind in [None, Some(direct_kernel())] {
            for case in [&without, &with] {
                let conv = case.conv(&gpu, kind.clone());
                case.check_encode(&gpu, &conv);
                case.check_forward(&conv);
            }
        }
    }
}

/// The fused ReLU after the bias, on both kernels.
#[test]
fn fused_relu() {
    let gpu = gpu();
    let case = Case::new(
        "relu",
        S::new(4, 19, 3).stride((2, 2)).padding(P::uniform(1)).with_bias(true),
        Shape4::new(2, 4, 11, 10),
    );
    let want: Vec<f32> = case.want.iter().map(|&v| reference::relu(v)).collect();
    assert!(want.contains(&0.0) && want.iter().any(|&v| v > 0.0));
    for kind in [None, Some(direct_kernel())] {
        let opts = Conv2dOptions::default().kernel(kind).activation(Activation::Relu);
        let conv = Conv2d::new(&gpu, case.spec, &case.w, case.b.as_deref(), opts).unwrap();
        assert_eq!(conv.activation(), Activation::Relu);
        let got = run_poisoned(&gpu, &conv, &case.x, case.shape);
        assert_close(&case.label(&format!("relu, {}", conv.kernel().kernel)), &got, &want, TOL_F32);
    }
}

/// One op run on several input sizes and batches (the tiled kernel's gather table is
/// cached per input size), and nothing written past the output.
#[test]
fn one_op_many_input_sizes() {
    let gpu = gpu();
    let spec = S::new(3, 10, 3).stride((2, 1)).dilation((1, 2)).padding(P::new(1, 2, 1, 0)).with_bias(true);
    let seed = test_seed();
    let sizes = [[2, 9, 11], [1, 14, 7], [3, 5, 6], [2, 9, 11]];
    for kind in [None, Some(direct_kernel())] {
        let first = Case::with_seed("sizes", spec, Shape4::new(1, 3, 4, 4), seed);
        let conv = first.conv(&gpu, kind);
        for (i, [n, h, w]) in sizes.into_iter().enumerate() {
            let mut case =
                Case::with_seed(&format!("sizes_{i}"), spec, Shape4::new(n, 3, h, w), seed.wrapping_add(i as u64 * 7))
                    .replayed_by(seed);
            // Same weights as the op was built with.
            case.w = first.w.clone();
            case.b = first.b.clone();
            case.want = reference_out(&case.problem, &case.x, &case.w, case.b.as_deref());
            let (got, tail) = run_poisoned_with(&gpu, &conv, &case.x, case.shape, f32::NAN, 37);
            assert_close(&case.label(&format!("{}", conv.kernel().kernel)), &got, &case.want, TOL_F32);
            assert!(tail.iter().all(|v| v.is_nan()), "{}: wrote past the output", case.label("tail"));
        }
    }
}

/// 1×1 convolutions, which the tiled kernel gathers rows-first up to 128 channels per group
/// and stores as vec4s where the output positions per image are a multiple of 4: every sweep
/// config, and two whose workgroups do not cover a whole number of block rows (the
/// rows-first gather's general mapping), in f32 and (where the device has it) `tiled-f16`.
#[test]
fn every_sweep_config_on_pointwise_shapes() {
    let gpu = gpu();
    let limits = gpu.kernel_limits();
    let cases = [
        // Rows first, vec4 stores, ragged M (120) and N (70), bias.
        Case::new("pointwise", S::new(20, 70, 1).with_bias(true), Shape4::new(2, 20, 6, 10)),
        // Rows first, scalar stores (35 positions per image).
        Case::new("pointwise_odd", S::new(20, 70, 1), Shape4::new(1, 20, 5, 7)),
        // Two groups of 20 channels, 19 outputs each.
        Case::new("pointwise_grouped", S::new(40, 38, 1).groups(2), Shape4::new(3, 40, 6, 6)),
        // Over 128 channels: taps first, vec4 stores.
        Case::new("pointwise_long", S::new(136, 19, 1), Shape4::new(1, 136, 5, 8)),
        // Strided: rows first over every other column.
        Case::new("pointwise_stride2", S::new(24, 33, 1).stride((2, 2)), Shape4::new(1, 24, 12, 8)),
    ];
    let extra = ["m128n32k16-t8x8-w2-s1", "m96n64k8-t12x4-w4-s1"].map(|c| c.parse::<wgconv::TileConfig>().unwrap());
    let configs: Vec<_> = default_sweep().into_iter().chain(extra).collect();
    let mut ran = 0;
    for family in ["tiled", "tiled-f16"] {
        let precision = if family == "tiled" { Precision::F32 } else { Precision::F16Accum32 };
        if family == "tiled-f16" && !gpu.device.features().contains(wgpu::Features::SHADER_F16) {
            continue;
        }
        for &cfg in &configs {
            let kernel = tiled_kernel(family, cfg);
            if kernel.check_limits(&limits).is_err() {
                continue;
            }
            for case in &cases {
                let conv = case.conv_at(&gpu, Some(kernel.clone()), precision);
                // f16 operands against the f32 reference, at the f16 tolerance.
                let got = run_poisoned(&gpu, &conv, &case.x, case.shape);
                assert_close(&case.label(&format!("encode, {kernel}")), &got, &case.want, tolerance(&kernel));
            }
            ran += 1;
        }
    }
    assert!(ran > 0, "the adapter accepted no config");
}
