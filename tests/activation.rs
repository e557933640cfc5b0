//! The fused epilogue (bias + ReLU in the kernels' store) against the CPU reference:
//! bias on/off × ReLU on/off on ragged shapes, for the default kernel (tiled or depthwise) and the direct
//! kernel; and NaN propagation (a NaN in the input or the bias stays NaN through ReLU).

mod common;
use common::{direct_kernel, gpu, run_poisoned_with, TOL_F32};
use rand::{Rng, SeedableRng};
use wgconv::advanced::depthwise_rule_applies;
use wgconv::{
    reference, Activation, ConfigSource, Conv2d, Conv2dOptions, Conv2dSpec, Gpu, Kernel, Layout, Padding, Precision,
    Shape4,
};

fn rand_vec(len: usize, seed: u64) -> Vec<f32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..len).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

/// Runs `conv` through `encode` into an output buffer poisoned with a sentinel first
/// (not NaN: NaN outputs are expected in the NaN tests), and returns what the GPU wrote.
fn run_poisoned(gpu: &Gpu, conv: &Conv2d, input: &[f32], shape: Shape4) -> (Vec<f32>, f32) {
    const POISON: f32 = -1.2345e30;
    (run_poisoned_with(gpu, conv, input, shape, POISON, 0).0, POISON)
}

/// The ragged shapes: block edges cut in M (N·OH·OW), in N (C_out per group) and in K.
fn cases() -> Vec<(&'static str, Conv2dSpec, Shape4)> {
    vec![
        (
            "3->5 k3 s2,1 p1,0,2,1",
            Conv2dSpec::new(3, 5, 3).stride((2, 1)).padding(Padding::new(1, 0, 2, 1)),
            Shape4::new(2, 3, 9, 7),
        ),
        (
            "4->70 k2x3 s2 p1 g2",
            Conv2dSpec::new(4, 70, 2).kernel_hw((2, 3)).stride((2, 2)).padding(Padding::uniform(1)).groups(2),
            Shape4::new(1, 4, 6, 11),
        ),
        (
            "6->6 k3 d2 g3 p2,1,0,3",
            Conv2dSpec::new(6, 6, 3).dilation((2, 2)).groups(3).padding(Padding::new(2, 1, 0, 3)),
            Shape4::new(3, 6, 7, 5),
        ),
        ("8->33 k1", Conv2dSpec::new(8, 33, 1), Shape4::new(2, 8, 5, 3)),
    ]
}

fn kernels() -> [Option<Kernel>; 2] {
    [None, Some(direct_kernel())]
}

#[test]
fn bias_and_relu_on_and_off_match_reference() {
    let gpu = gpu();
    for (ci, (label, base, shape)) in cases().into_iter().enumerate() {
        let x = rand_vec(shape.len() as usize, 100 + ci as u64);
        let w = rand_vec(base.weight_len(), 200 + ci as u64);
        let b = rand_vec(base.out_channels as usize, 300 + ci as u64);
        for bias in [false, true] {
            let spec = base.with_bias(bias);
            let problem = spec.problem(shape).unwrap();
            let plain = reference::conv2d(&problem, &x, &w, bias.then_some(&b[..])).unwrap();
            for relu in [false, true] {
                let want: Vec<f32> =
                    if relu { plain.iter().map(|&v| reference::relu(v)).collect() } else { plain.clone() };
                for kernel in kernels() {
                    let activation = if relu { Activation::Relu } else { Activation::None };
                    let named = kernel.is_some();
                    let opts = Conv2dOptions::default().kernel(kernel).activation(activation).tuning_key_input(None);
                    let conv = Conv2d::new(&gpu, spec, &w, bias.then_some(&b[..]), opts).unwrap();
                    let (kind, source) = (&conv.kernel().kernel, conv.kernel().source);
                    if !named {
                        // Groups of few channels run the depthwise family; the rest a tiled config.
                        let narrow = depthwise_rule_applies(gpu.caps(), &spec, Precision::F32, Layout::Nchw);
                        let family = if narrow { "depthwise" } else { "tiled" };
                        assert_eq!(kind.family(), family, "{label}: default kernel is {kind}");
                        assert_ne!(source, ConfigSource::Explicit);
                    }
                    assert_eq!(conv.activation(), activation);
                    let what = format!("{label} bias={bias} relu={relu} {kind}");
                    let (got, poison) = run_poisoned(&gpu, &conv, &x, shape);
                    let unwritten = got.iter().filter(|&&v| v == poison).count();
                    assert_eq!(unwritten, 0, "{what}: {unwritten} outputs not written");
                    let err = reference::relative_l2(&got, &want);
                    assert!(err <= TOL_F32, "{what}: relative L2 {err:.3e} > {TOL_F32:.0e}");
                    if relu {
                        assert!(got.iter().all(|&v| v >= 0.0), "{what}: negative output after ReLU");
                        let zeros = got.iter().filter(|&&v| v == 0.0).count();
                        assert!(zeros > 0 && zeros < got.len(), "{what}: {zeros} of {} zeros", got.len());
                    } else {
                        assert!(got.iter().any(|&v| v < 0.0), "{what}: no negative output without ReLU");
                    }
                }
            }
        }
    }
}

#[test]
fn forward_applies_relu_too() {
    // `forward` (host slices) and `encode` share the store; check the host path once.
    let gpu = gpu();
    let (_, spec, shape) = cases().remove(1);
    let spec = spec.with_bias(true);
    let x = rand_vec(shape.len() as usize, 7);
    let w = rand_vec(spec.weight_len(), 8);
    let b = rand_vec(spec.out_channels as usize, 9);
    let opts = Conv2dOptions::default().activation(Activation::Relu);
    let conv = Conv2d::new(&gpu, spec, &w, Some(&b), opts).unwrap();
    let got = conv.forward(&x, shape).unwrap();
    let problem = spec.problem(shape).unwrap();
    let want: Vec<f32> =
        reference::conv2d(&problem, &x, &w, Some(&b)).unwrap().into_iter().map(reference::relu).collect();
    let err = reference::relative_l2(&got, &want);
    assert!(err <= TOL_F32, "forward relu: relative L2 {err:.3e}");
}

/// Compares NaN positions exactly and the other values by relative L2.
fn assert_nan_positions(what: &str, got: &[f32], want: &[f32]) -> usize {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let mismatched: Vec<usize> = (0..got.len()).filter(|&i| got[i].is_nan() != want[i].is_nan()).collect();
    assert!(
        mismatched.is_empty(),
        "{what}: NaN positions differ at {} outputs, first {:?} (got {:?}, want {:?})",
        mismatched.len(),
        &mismatched[..mismatched.len().min(8)],
        got[mismatched[0]],
        want[mismatched[0]]
    );
    let (g, w): (Vec<f32>, Vec<f32>) = got.iter().zip(want).filter(|(_, w)| !w.is_nan()).map(|(&g, &w)| (g, w)).unzip();
    let err = reference::relative_l2(&g, &w);
    assert!(err <= TOL_F32, "{what}: relative L2 of the finite outputs {err:.3e}");
    want.iter().filter(|v| v.is_nan()).count()
}

#[test]
fn nan_input_stays_nan_through_relu() {
    let gpu = gpu();
    for (ci, (label, base, shape)) in cases().into_iter().enumerate() {
        let mut x = rand_vec(shape.len() as usize, 400 + ci as u64);
        // NaN in the first image's first channel (inside the receptive field of some
        // outputs) and in the last element of the last image.
        let (h, w_) = (shape.h as usize, shape.w as usize);
        x[(h / 2) * w_ + w_ / 2] = f32::NAN;
        let last = x.len() - 1;
        x[last] = f32::NAN;
        let w = rand_vec(base.weight_len(), 500 + ci as u64);
        let b = rand_vec(base.out_channels as usize, 600 + ci as u64);
        for (bias, relu) in [(false, true), (true, true), (true, false)] {
            let spec = base.with_bias(bias);
            let problem = spec.problem(shape).unwrap();
            let mut want = reference::conv2d(&problem, &x, &w, bias.then_some(&b[..])).unwrap();
            if relu {
                want.iter_mut().for_each(|v| *v = reference::relu(*v));
            }
            for kernel in kernels() {
                let activation = if relu { Activation::Relu } else { Activation::None };
                let opts = Conv2dOptions::default().kernel(kernel).activation(activation).tuning_key_input(None);
                let conv = Conv2d::new(&gpu, spec, &w, bias.then_some(&b[..]), opts).unwrap();
                let what = format!("{label} NaN input bias={bias} relu={relu} {}", conv.kernel().kernel);
                let (got, poison) = run_poisoned(&gpu, &conv, &x, shape);
                assert!(!got.contains(&poison), "{what}: outputs not written");
                let nans = assert_nan_positions(&what, &got, &want);
                assert!(nans > 0 && nans < got.len(), "{what}: the reference has {nans} NaN of {}", got.len());
            }
        }
    }
}

#[test]
fn nan_bias_makes_its_channel_nan_through_relu() {
    let gpu = gpu();
    let (label, base, shape) = cases().remove(0);
    let spec = base.with_bias(true);
    let x = rand_vec(shape.len() as usize, 700);
    let w = rand_vec(spec.weight_len(), 701);
    let mut b = rand_vec(spec.out_channels as usize, 702);
    b[2] = f32::NAN;
    let problem = spec.problem(shape).unwrap();
    let want: Vec<f32> =
        reference::conv2d(&problem, &x, &w, Some(&b)).unwrap().into_iter().map(reference::relu).collect();
    for kernel in kernels() {
        let opts = Conv2dOptions::default().kernel(kernel).activation(Activation::Relu).tuning_key_input(None);
        let conv = Conv2d::new(&gpu, spec, &w, Some(&b), opts).unwrap();
        let what = format!("{label} NaN bias {}", conv.kernel().kernel);
        let (got, _) = run_poisoned(&gpu, &conv, &x, shape);
        let nans = assert_nan_positions(&what, &got, &want);
        let per_channel = (problem.output.h * problem.output.w) as usize;
        assert_eq!(nans, problem.output.n as usize * per_channel, "{what}: channel 2 of every image is NaN");
    }
}
