//! Channels-last tensors (`Layout::Nhwc`): the same convolution as NCHW, through `encode`
//! (NaN-poisoned output) and `forward`, for the default kernel of each precision the device
//! has and for named kernels of several families; a batch split into chunks; the CPU
//! layout helpers. Runs on any adapter (lavapipe in CI).

mod common;
use common::*;
use wgconv::reference::{to_nchw, to_nhwc};
use wgconv::{Conv2d, Conv2dOptions, Conv2dSpec as S, Kernel, Layout, Padding as P, Precision, Shape4};

/// The case's data and reference, both rewritten channels-last.
fn channels_last(case: &Case, relu: bool) -> (Vec<f32>, Vec<f32>) {
    let mut want = to_nhwc(&case.want, case.problem.output).unwrap();
    if relu {
        want.iter_mut().for_each(|v| *v = wgconv::reference::relu(*v));
    }
    (to_nhwc(&case.x, case.shape).unwrap(), want)
}

fn check(gpu: &wgconv::Gpu, case: &Case, kernel: Option<Kernel>, precision: Precision, relu: bool) {
    let activation = if relu { wgconv::Activation::Relu } else { wgconv::Activation::None };
    let opts = Conv2dOptions::default().kernel(kernel.clone()).precision(precision).activation(activation);
    let conv = match Conv2d::new(gpu, case.spec, &case.w, case.b.as_deref(), opts.layout(Layout::Nhwc)) {
        Ok(conv) => conv,
        // A named kernel this device or spec cannot run (e.g. a cooperative one on lavapipe).
        Err(e) if kernel.is_some() => return eprintln!("{}: {e}", case.label("skipped")),
        Err(e) => panic!("{}: {e}", case.label("default")),
    };
    assert_eq!(conv.layout(), Layout::Nhwc);
    let kind = conv.kernel().kernel.clone();
    let tol = tolerance(&kind);
    let (x, want) = channels_last(case, relu);
    let (got, tail) = run_poisoned_with(gpu, &conv, &x, case.shape, f32::NAN, 7);
    assert_close(&case.label(&format!("NHWC encode, {kind}")), &got, &want, tol);
    assert!(tail.iter().all(|v| v.is_nan()), "{}: wrote past the output", case.label(&kind.to_string()));
    let got = conv.forward(&x, case.shape).unwrap_or_else(|e| panic!("{}: {e}", case.label("forward")));
    assert_close(&case.label(&format!("NHWC forward, {kind}")), &got, &want, tol);
}

#[test]
fn channels_last_matches_nchw() {
    let gpu = gpu();
    let shapes = [
        ("3x3_pad_bias", S::new(5, 7, 3).padding(P::uniform(1)).with_bias(true), [2, 9, 8], false),
        (
            "stride2_asym_relu",
            S::new(16, 12, 3).stride(2).padding(P::new(1, 0, 2, 1)).with_bias(true),
            [1, 11, 10],
            true,
        ),
        ("1x1", S::new(24, 8, 1), [3, 5, 6], false),
        // More than one tile of the transposing layout passes (32 pixels × 32 channels),
        // partial tiles in both directions.
        ("wide_channels", S::new(37, 41, 3).padding(P::uniform(1)).with_bias(true), [2, 7, 9], false),
        ("grouped", S::new(8, 12, 3).groups(4).padding(P::uniform(1)), [2, 7, 7], false),
        ("depthwise", S::new(6, 6, 3).groups(6).padding(P::uniform(1)).with_bias(true), [2, 8, 9], true),
        (
            "depthwise_x2_s2_dil2",
            S::new(8, 16, 3).groups(8).stride(2).dilation(2).padding(P::uniform(2)),
            [1, 11, 13],
            false,
        ),
        ("depthwise_7x7_wide", S::new(4, 4, 7).groups(4).padding(P::uniform(3)), [1, 9, 30], false),
    ];
    let mut precisions = vec![Precision::F32];
    if has_f16(&gpu) {
        precisions.push(Precision::F16Accum32);
    }
    if gpu.has_coop_f16() {
        precisions.push(Precision::F16x3);
    }
    for (name, spec, [n, h, w], relu) in shapes {
        let case = Case::new(name, spec, Shape4::new(n, spec.in_channels, h, w));
        for &precision in &precisions {
            check(&gpu, &case, None, precision, relu);
        }
        check(&gpu, &case, Some(direct_kernel()), Precision::F32, relu);
        check(&gpu, &case, Some(kernel("tiled")), Precision::F32, relu);
        if gpu.has_coop_f16() {
            check(&gpu, &case, Some(kernel("coop-nhwc-f16")), Precision::F16Accum32, relu);
            check(&gpu, &case, Some(kernel("coop-nhwc-f32")), Precision::F32, relu);
            check(&gpu, &case, Some(kernel("coop-f16")), Precision::F16Accum32, relu);
        }
    }
}

/// Chunks of a channels-last batch under a small binding limit: each chunk's NHWC window
/// is rewritten to NCHW scratch and back at its own offset.
#[test]
fn channels_last_in_chunks() {
    let spec = S::new(3, 5, 3).padding(P::uniform(1)).with_bias(true);
    let case = Case::new("nhwc_chunked", spec, Shape4::new(7, 3, 13, 11));
    let _serial = serial();
    // Two images of output (715 elements each) and the seed config's packed weights fit.
    let gpu = gpu_with_limits(|l| l.max_storage_buffer_binding_size = 8224);
    let conv = Conv2d::new(
        &gpu,
        spec,
        &case.w,
        case.b.as_deref(),
        Conv2dOptions::default().kernel(kernel("tiled:m32n64k32-t4x4-w4-s2")).layout(Layout::Nhwc),
    )
    .unwrap();
    let (x, want) = channels_last(&case, false);
    let (got, tail) = run_poisoned_with(&gpu, &conv, &x, case.shape, f32::NAN, 5);
    assert_close(&case.label("NHWC chunked encode"), &got, &want, TOL_F32);
    assert!(tail.iter().all(|v| v.is_nan()));
    let got = conv.forward(&x, case.shape).unwrap();
    assert_close(&case.label("NHWC chunked forward"), &got, &want, TOL_F32);
}

#[test]
fn layout_helpers_round_trip() {
    let shape = Shape4::new(2, 3, 4, 5);
    let x: Vec<f32> = (0..shape.len()).map(|i| i as f32).collect();
    let nhwc = to_nhwc(&x, shape).unwrap();
    // Element (n=1, c=2, y=3, x=4) sits at ((1·4 + 3)·5 + 4)·3 + 2 in NHWC.
    assert_eq!(nhwc[((4 + 3) * 5 + 4) * 3 + 2], x[((3 + 2) * 4 + 3) * 5 + 4]);
    assert_eq!(to_nchw(&nhwc, shape).unwrap(), x);
}
