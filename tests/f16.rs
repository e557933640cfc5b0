//! `Precision::F16Accum32` against the f64 CPU reference on the UNROUNDED data (the error
//! users see): relative L2 ≤ `bench::F16_TOLERANCE` (1e-3), no NaN in NaN-poisoned outputs.
//!
//! On a device without cooperative matrices (lavapipe in CI) the f16 path is the SIMT
//! kernel with operands rounded to f16 (the `tiled-f16` family): the default kernel chosen
//! by the precision, a few explicit sweep configs that validate on the device, `encode`
//! and `forward`. Then the f16 range refusals (weights on upload, inputs in-kernel through
//! the range flag), mismatched kind/precision refusals, proof that the operands really
//! are rounded, and the cooperative-matrix kernel where the device has it (else skipped,
//! saying so on stderr).
//!
//! Shapes stay small: lavapipe runs about 1 GFLOP/s.

mod common;
use common::*;
use wgconv::advanced::{
    band_sweep, coop_sweep, default_sweep, depthwise_rule_applies, f16_small_gemm_applies, stem_is_default, stem_sweep,
    BandConfig, StemConfig,
};
use wgconv::{reference, ConfigSource, Conv2d, Conv2dOptions, Error, Gpu};
use wgconv::{Conv2dSpec as S, Kernel, Layout, Padding as P, Precision, Shape4, TileConfig};

/// The f16 bound (the benchmark's `F16_TOLERANCE`).
const F16_TOLERANCE: f64 = TOL_F16;

/// A case of [`ragged_shapes`] with its reference (ReLU applied where the case has it).
fn case(name: &str, spec: S, [n, h, w]: [u32; 3], relu: bool) -> Case {
    let mut case = Case::new(name, spec, Shape4::new(n, spec.in_channels, h, w));
    if relu {
        case.want.iter_mut().for_each(|v| *v = reference::relu(*v));
    }
    case
}

fn f16_options(kernel: Option<Kernel>, relu: bool) -> Conv2dOptions {
    options_at(Precision::F16Accum32, kernel, relu)
}

fn f16_conv(gpu: &Gpu, case: &Case, kernel: Option<Kernel>, relu: bool) -> Conv2d {
    let what = format!("f16 {kernel:?}");
    Conv2d::new(gpu, case.spec, &case.w, case.b.as_deref(), f16_options(kernel, relu))
        .unwrap_or_else(|e| panic!("{}: {e}", case.label(&what)))
}

/// `encode` into NaN-poisoned output and `forward`, both within the f16 tolerance of the
/// reference on unrounded data, and no range flag raised on normal data. Returns the
/// larger of the two errors.
fn check_f16(gpu: &Gpu, case: &Case, conv: &Conv2d) -> f64 {
    let kind = &conv.kernel().kernel;
    assert_eq!(kind.precision(), Precision::F16Accum32, "{}", case.label(&kind.to_string()));
    check_encode_and_forward(gpu, case, conv, &case.want, F16_TOLERANCE)
}

/// Explicit f16 SIMT configs of the declared sweep that validate on the device: the seed,
/// a 3-stage 8×4 tile and a 96-wide one-stage tile (different loaders and K steps).
fn explicit_tiled_f16(gpu: &Gpu) -> Vec<Kernel> {
    let limits = gpu.kernel_limits();
    let wanted = ["m32n64k32-t4x4-w4-s2", "m64n64k16-t8x4-w4-s3", "m64n96k8-t4x12-w4-s1"];
    let sweep = default_sweep();
    for name in wanted {
        assert!(sweep.iter().any(|c| c.name() == name), "{name} left the declared sweep: update this test");
    }
    let kinds: Vec<Kernel> = sweep
        .into_iter()
        .filter(|c| wanted.contains(&c.name().as_str()))
        .map(|c| tiled_kernel("tiled-f16", c))
        .filter(|k| k.check_limits(&limits).is_ok())
        .collect();
    assert!(!kinds.is_empty(), "none of {wanted:?} is in the sweep or fits {}", gpu.info.name);
    kinds
}

#[test]
fn default_f16_kernel_is_tiled_f16_without_coop() {
    let gpu = gpu();
    let case_of = |name: &str, spec, nhw| case(name, spec, nhw, false);
    let case = case_of("default_kind", S::new(3, 8, 3).padding(P::uniform(1)), [1, 8, 8]);
    let conv = f16_conv(&gpu, &case, None, false);
    let (kind, source) = (&conv.kernel().kernel, conv.kernel().source);
    if gpu.has_coop_f16() {
        // A 3-channel 3×3 input (K = 27): the SIMT kernel, a small GEMM; 16 channels into 64:
        // the channels-last kernel; into 8: the SIMT kernel again.
        assert!(f16_small_gemm_applies(gpu.caps(), &case.spec));
        assert_eq!(kind.family(), "tiled-f16", "coop device chose {kind} for 3 channels");
        for (c_out, want) in [(64, "coop-nhwc-f16"), (8, "tiled-f16")] {
            let deep = case_of("default_kind_deep", S::new(16, c_out, 3).padding(P::uniform(1)), [1, 8, 8]);
            let deep_conv = f16_conv(&gpu, &deep, None, false);
            let deep_kind = &deep_conv.kernel().kernel;
            assert_eq!(deep_kind.family(), want, "coop device chose {deep_kind} for 16 -> {c_out} channels");
        }
    } else {
        // Never the f32 kernel under an f16 label.
        assert_eq!(kind.family(), "tiled-f16", "{}: f16 default is {kind}", gpu.info.name);
    }
    assert_eq!(kind.precision(), Precision::F16Accum32);
    assert_ne!(source, ConfigSource::Explicit);
}

#[test]
fn f16_default_and_explicit_configs_on_ragged_shapes() {
    let gpu = gpu();
    let explicit = explicit_tiled_f16(&gpu);
    let mut worst = 0.0f64;
    for (name, spec, nhw, relu) in ragged_shapes() {
        let case = case(name, spec, nhw, relu);
        let conv = f16_conv(&gpu, &case, None, relu);
        let kind = &conv.kernel().kernel;
        // Depthwise and narrow grouped layers run the depthwise family (select's depthwise
        // rule), on every device; the rest the SIMT tiled kernel where there are no
        // cooperative matrices.
        if depthwise_rule_applies(gpu.caps(), &spec, Precision::F16Accum32, Layout::Nchw) {
            assert_eq!(kind.family(), "depthwise-f16", "{name}: default f16 kernel is {kind}");
        } else if !gpu.has_coop_f16() {
            assert_eq!(kind.family(), "tiled-f16", "{name}: default f16 kernel is {kind}");
        }
        worst = worst.max(check_f16(&gpu, &case, &conv));
        for kind in &explicit {
            let conv = f16_conv(&gpu, &case, Some(kind.clone()), relu);
            assert_eq!((&conv.kernel().kernel, conv.kernel().source), (kind, ConfigSource::Explicit));
            worst = worst.max(check_f16(&gpu, &case, &conv));
        }
    }
    eprintln!("f16 on {}: worst relative L2 {worst:.2e} (bound {F16_TOLERANCE:.0e})", gpu.info.name);
}

/// The f16 result differs from the f32 one (the operands really are rounded) by more than
/// 1e-6 relative, but less than 1e-3; and it matches the f64 reference on f16-ROUNDED data
/// at f32 accuracy (f16 operands, f32 accumulation, nothing else lost).
#[test]
fn f16_operands_are_rounded_and_accumulated_in_f32() {
    let gpu = gpu();
    let spec = S::new(16, 17, 3).padding(P::uniform(1)).with_bias(true);
    let case = case("rounded", spec, [2, 10, 9], false);
    let f32_conv = Conv2d::new(&gpu, spec, &case.w, case.b.as_deref(), Conv2dOptions::default()).unwrap();
    assert_eq!(f32_conv.kernel().kernel.precision(), Precision::F32);
    let y32 = run_poisoned(&gpu, &f32_conv, &case.x, case.shape);
    assert_close(&case.label("f32"), &y32, &case.want, TOL_F32);
    let conv = f16_conv(&gpu, &case, None, false);
    let y16 = run_poisoned(&gpu, &conv, &case.x, case.shape);
    assert_close(&case.label("f16"), &y16, &case.want, F16_TOLERANCE);
    let diff = reference::relative_l2(&y16, &y32);
    assert!(diff > 1e-6, "{}: f16 and f32 results differ by only {diff:.2e}: operands not rounded?", case.label("f16"));
    assert!(diff < 1e-3, "{}: f16 differs from f32 by {diff:.2e}", case.label("f16"));
    eprintln!(
        "f16 vs f32: relative L2 {diff:.2e}; f16 vs f64 reference {:.2e}",
        reference::relative_l2(&y16, &case.want)
    );
    if conv.kernel().kernel.family() == "tiled-f16" {
        // Weights rounded at upload; inputs rounded in the kernel, or left as they are where
        // the driver folds the round trip away (f16_operands_are_the_nearest_f16_or_exact).
        let round = |v: &[f32]| -> Vec<f32> { v.iter().map(|&v| half::f16::from_f32(v).to_f32()).collect() };
        let rounded = reference_out(&case.problem, &round(&case.x), &round(&case.w), case.b.as_deref());
        let exact_input = reference_out(&case.problem, &case.x, &round(&case.w), case.b.as_deref());
        let (a, b) = (reference::relative_l2(&y16, &rounded), reference::relative_l2(&y16, &exact_input));
        assert!(
            a.min(b) <= TOL_F32,
            "{}: {a:.2e} from rounded operands, {b:.2e} from rounded weights",
            case.label("f16")
        );
    }
}

/// The SIMT kernels' input operands are the nearest f16, ties to even, subnormals included,
/// or, where the driver folds the kernel's f32 → f16 → f32 round trip away (NVIDIA's does),
/// the input itself: never another value. A 1×1 convolution of weight 1 returns them.
#[test]
fn f16_operands_are_the_nearest_f16_or_exact() {
    let gpu = gpu();
    if !has_f16(&gpu) {
        return eprintln!("{}: no f16", gpu.info.name);
    }
    let ulp = 2f32.powi(-10);
    let sub = 2f32.powi(-24);
    let x = [
        1.0 + ulp / 2.0,         // a tie: to 1 (even)
        1.0 + 1.5 * ulp,         // a tie: to 1 + 2 ulp (even)
        1.0 + 0.75 * ulp,        // to 1 + ulp
        -(1.0 + ulp / 2.0),      // a negative tie
        3.0 * sub / 2.0,         // a subnormal tie: to 2 · 2^-24
        sub / 2.0,               // a tie at zero: to 0
        5.3 * sub,               // a subnormal: to 5 · 2^-24
        2f32.powi(-14) * 1.0004, // the smallest normals
        65500.0,                 // to 65504
        1.0 / 3.0,
    ];
    let nearest: Vec<f32> = x.iter().map(|&v| half::f16::from_f32(v).to_f32()).collect();
    assert_eq!(nearest[..2], [1.0, 1.0 + 2.0 * ulp]);
    let spec = S::new(1, 1, 1);
    let shape = wgconv::Shape4::new(1, 1, 1, x.len() as u32);
    for name in ["tiled-f16", "direct-f16", "depthwise-f16"] {
        let conv = Conv2d::new(&gpu, spec, &[1.0], None, f16_options(Some(kernel(name)), false)).unwrap();
        let got = conv.forward(&x, shape).unwrap();
        let rounded = got == nearest;
        assert!(rounded || got == x, "{name}: {got:?}, neither the nearest f16 {nearest:?} nor the input {x:?}");
        eprintln!("{name} on {}: inputs {}", gpu.info.name, if rounded { "rounded" } else { "not rounded" });
    }
}

#[test]
fn weight_beyond_f16_range_is_refused_naming_the_weight() {
    let gpu = gpu();
    let spec = S::new(3, 4, 3).padding(P::uniform(1));
    let mut w = randn(spec.weight_len(), 7);
    // Exactly f16::MAX is representable: accepted.
    w[5] = 65504.0;
    Conv2d::new(&gpu, spec, &w, None, f16_options(None, false)).expect("65504 is f16's largest finite value");
    for bad in [65520.0f32, -1.0e5, f32::INFINITY] {
        w[5] = bad;
        let err = Conv2d::new(&gpu, spec, &w, None, f16_options(None, false)).err().expect("refused");
        match &err {
            Error::F16Range { what, .. } => assert_eq!(*what, "weight", "{err}"),
            e => panic!("weight {bad}: expected F16Range, got {e:?}"),
        }
        let msg = err.to_string();
        assert!(msg.contains("weight") && msg.contains("65504"), "{msg}");
        // The same weights are fine in f32.
        Conv2d::new(&gpu, spec, &w, None, Conv2dOptions::default()).expect("f32 takes any finite weight");
    }
    // Also for an explicit f16 SIMT kernel.
    w[5] = 7.0e4;
    let kind = tiled_kernel("tiled-f16", TileConfig::seed());
    let err = Conv2d::new(&gpu, spec, &w, None, f16_options(Some(kind), false)).err().expect("refused");
    assert!(matches!(err, Error::F16Range { what: "weight", .. }), "{err:?}");
}

#[test]
fn input_beyond_f16_range_is_flagged() {
    let gpu = gpu();
    let spec = S::new(3, 5, 3).padding(P::uniform(1)).with_bias(true);
    let shape = Shape4::new(2, 3, 7, 6);
    let (w, b) = params(&spec, 11);
    let conv = Conv2d::new(&gpu, spec, &w, b.as_deref(), f16_options(None, false)).unwrap();
    let mut x = randn(shape.len() as usize, 12);

    // Largest finite f16: no flag.
    x[3] = -65504.0;
    conv.forward(&x, shape).expect("65504 is within f16's range");
    assert!(!conv.take_range_flag().unwrap());

    // Beyond: `forward` refuses, in the last image too.
    let last = x.len() - 4;
    x[last] = 7.0e4;
    match conv.forward(&x, shape) {
        Err(Error::F16Range { what, .. }) => assert!(what.contains("input"), "{what}"),
        other => panic!("expected F16Range, got {other:?}"),
    }
    // `forward` consumed the flag.
    assert!(!conv.take_range_flag().unwrap(), "forward leaves the flag set");

    // `encode` users read it: true once, then false; a clean run after leaves it false.
    let _ = run_poisoned(&gpu, &conv, &x, shape);
    assert!(conv.take_range_flag().unwrap(), "encode with 7e4 in the input: flag not set");
    assert!(!conv.take_range_flag().unwrap(), "take_range_flag did not clear the flag");
    x[last] = 1.0;
    let got = run_poisoned(&gpu, &conv, &x, shape);
    assert!(!conv.take_range_flag().unwrap(), "flag set on in-range data");
    assert!(got.iter().all(|v| v.is_finite()));

    // Infinity is beyond the range too, and never reaches the sums as an infinity.
    x[0] = f32::INFINITY;
    let got = run_poisoned(&gpu, &conv, &x, shape);
    assert!(conv.take_range_flag().unwrap(), "an infinite input is not flagged");
    assert!(got.iter().all(|v| !v.is_infinite()), "an infinity reached the output");

    // The f32 path has no flag and takes the same input.
    let f32_conv = Conv2d::new(&gpu, spec, &w, b.as_deref(), Conv2dOptions::default()).unwrap();
    x[0] = 7.0e4;
    f32_conv.forward(&x, shape).expect("f32 takes 7e4");
    assert!(!f32_conv.take_range_flag().unwrap());
}

#[test]
fn mismatched_kind_and_precision_are_refused() {
    let gpu = gpu();
    let spec = S::new(3, 4, 3);
    let (w, _) = params(&spec, 3);
    for kind in [tiled_kernel("tiled", TileConfig::seed()), direct_kernel()] {
        let err = Conv2d::new(&gpu, spec, &w, None, f16_options(Some(kind.clone()), false)).err();
        assert!(matches!(err, Some(Error::InvalidOptions(_))), "{kind} with F16Accum32: {err:?}");
    }
    let opts = Conv2dOptions::default().kernel(tiled_kernel("tiled-f16", TileConfig::seed()));
    let err = Conv2d::new(&gpu, spec, &w, None, opts).err();
    assert!(matches!(err, Some(Error::InvalidOptions(_))), "tiled-f16 with F32: {err:?}");
    if !gpu.has_coop_f16() {
        let kind = tiled_kernel("coop-f16", coop_sweep()[0]);
        let err = Conv2d::new(&gpu, spec, &w, None, f16_options(Some(kind.clone()), false)).err();
        let needs = "EXPERIMENTAL_COOPERATIVE_MATRIX";
        assert!(
            matches!(&err, Some(Error::Unsupported { needs: n, .. }) if n == needs),
            "{kind} without coop: {err:?}"
        );
    }
}

#[test]
fn coop_kernel_on_ragged_shapes() {
    let Some(gpu) = coop_gpu() else { return };
    let limits = gpu.kernel_limits();
    let gather = coop_sweep()
        .into_iter()
        .map(|c| tiled_kernel("coop-f16", c))
        .filter(|k| k.check_limits(&limits).is_ok())
        .take(3);
    let band = band_sweep()
        .into_iter()
        .map(|c| kernel(&format!("coop-band-f16:{c}")))
        .filter(|k| k.check_limits(&limits).is_ok());
    let stem = stem_sweep()
        .into_iter()
        .map(|c| kernel(&format!("coop-stem-f16:{c}")))
        .filter(|k| k.check_limits(&limits).is_ok());
    let nhwc =
        wgconv::advanced::sweep("coop-nhwc-f16").unwrap().into_iter().filter(|k| k.check_limits(&limits).is_ok());
    let explicit: Vec<Kernel> = gather.chain(nhwc).chain(band).chain(stem).collect();
    let is_band = |k: &Kernel| k.family() == "coop-band-f16";
    let is_stem = |k: &Kernel| k.family() == "coop-stem-f16";
    let stem_kinds = explicit.iter().filter(|k| is_stem(k)).count();
    let (mut band_runs, mut stem_runs) = (0, 0);
    for (name, spec, nhw, relu) in ragged_shapes() {
        let case = case(name, spec, nhw, relu);
        let conv = f16_conv(&gpu, &case, None, relu);
        let kind = &conv.kernel().kernel;
        // On NVIDIA the stem kernel for image inputs (no groups, at most 4 channels, no
        // dilation); the depthwise family for depthwise and narrow grouped layers; else the
        // gathering kernel (faster than the row-band one on the H100).
        let stem = stem_is_default(gpu.caps(), &spec);
        let want = if stem {
            "coop-stem-f16"
        } else if depthwise_rule_applies(gpu.caps(), &spec, Precision::F16Accum32, Layout::Nchw) {
            "depthwise-f16"
        } else if f16_small_gemm_applies(gpu.caps(), &spec) {
            "tiled-f16"
        } else if wgconv::advanced::channels_last_rule_applies(gpu.caps(), &spec, Precision::F16Accum32) {
            "coop-nhwc-f16"
        } else {
            "coop-f16"
        };
        assert_eq!(kind.family(), want, "{name}: default f16 kernel on a coop device is {kind}");
        check_f16(&gpu, &case, &conv);
        for kind in &explicit {
            let opts = f16_options(Some(kind.clone()), relu);
            let conv = match Conv2d::new(&gpu, case.spec, &case.w, case.b.as_deref(), opts) {
                Ok(conv) => conv,
                // Column dilation, a stride past the band depth, or a band beyond the device;
                // dilation or too deep a K for the stem kernel.
                Err(Error::KernelRefused { reason, .. }) if is_band(kind) || is_stem(kind) => {
                    eprintln!("{name}: {kind} refused: {reason}");
                    continue;
                }
                Err(e) => panic!("{}: {e}", case.label(&kind.to_string())),
            };
            assert_eq!((&conv.kernel().kernel, conv.kernel().source), (kind, ConfigSource::Explicit));
            check_f16(&gpu, &case, &conv);
            band_runs += is_band(kind) as usize;
            stem_runs += is_stem(kind) as usize;
        }
    }
    // The stem kernel refuses only the two dilated shapes (every other K fits 32 fragments).
    assert!(stem_runs >= (ragged_shapes().len() - 2) * stem_kinds, "only {stem_runs} stem runs");
    // 8 of the 10 shapes have no column dilation: at least half the band runs must happen.
    assert!(band_runs >= 8 * band_sweep().len() / 2, "only {band_runs} row-band runs");
}

/// NaN in the input stays NaN through the f16 operands, the sums and the ReLU: exactly the
/// outputs whose receptive field holds the NaN are NaN (the f16 conversion must not clamp
/// it away, the ReLU must not turn it into 0; both are tested on the bits in the kernels).
/// The gathering kernel on cooperative-matrix devices (the default for this 3-channel input
/// on NVIDIA is the stem kernel, whose NaN bound is tested below), the default elsewhere.
#[test]
fn nan_input_stays_nan_through_f16_and_relu() {
    let gpu = gpu();
    let spec = S::new(3, 17, 3).stride((2, 1)).padding(P::new(1, 0, 2, 1)).with_bias(true);
    let mut case = case("nan_f16", spec, [2, 13, 11], true);
    case.x[5 * 11 + 6] = f32::NAN;
    let last = case.x.len() - 1;
    case.x[last] = f32::NAN;
    let want: Vec<f32> = reference::conv2d(&case.problem, &case.x, &case.w, case.b.as_deref())
        .unwrap()
        .into_iter()
        .map(reference::relu)
        .collect();
    // The gathering kernel's reference config (m64n96k16-t4x12-w4-s1).
    let gathering = gpu.has_coop_f16().then(|| kernel("coop-f16"));
    let conv = f16_conv(&gpu, &case, gathering, true);
    let got = run_poisoned(&gpu, &conv, &case.x, case.shape);
    assert_same_nans(&conv.kernel().kernel.to_string(), &got, &want);
    assert!(!conv.take_range_flag().unwrap(), "NaN is not a range error");
}

/// The row-band and stem kernels where KW (and, for the stem kernel, KH) is not a multiple of
/// the stride: their surplus taps read real inputs against zero weights, so a NaN input also
/// reaches the outputs whose window, widened to ⌈KW/S⌉·S columns (and ⌈KH/S⌉·S rows), holds
/// it (documented on the `coop-band-f16` and `coop-stem-f16` families). Every output the
/// reference makes NaN is NaN, and no output outside the widened window is.
#[test]
fn band_and_stem_kernels_spread_nan_at_most_to_the_widened_window() {
    let gpu = gpu();
    if !gpu.has_coop_f16() {
        eprintln!("skipped: {} has no cooperative matrices (f16 16x16x16, subgroup 32)", gpu.info.name);
        return;
    }
    let (k, s, pad) = (11usize, 4usize, 2usize);
    let spec = S::new(3, 17, k as u32).stride((s as u32, s as u32)).padding(P::uniform(pad as u32)).with_bias(true);
    let mut case = case("nan_band", spec, [1, 31, 27], false);
    let (nan_c, nan_y, nan_x) = (1usize, 9usize, 12usize);
    case.x[(nan_c * 31 + nan_y) * 27 + nan_x] = f32::NAN;
    let want = reference::conv2d(&case.problem, &case.x, &case.w, case.b.as_deref()).unwrap();
    let (oh, ow) = (case.problem.output.h as usize, case.problem.output.w as usize);
    let widened = k.div_ceil(s) * s;
    let stem = kernel(&format!("coop-stem-f16:{}", StemConfig::REFERENCE));
    let band = kernel(&format!("coop-band-f16:{}", BandConfig::REFERENCE));
    for (kind, rows_widened) in [(band, false), (stem, true)] {
        let conv = f16_conv(&gpu, &case, Some(kind.clone()), false);
        let got = run_poisoned(&gpu, &conv, &case.x, case.shape);
        let mut spread = 0;
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let (oy, ox) = ((i / ow) % oh, i % ow);
            let kh = if rows_widened { widened } else { k };
            let rows = (oy * s) as i64 - pad as i64..(oy * s + kh) as i64 - pad as i64;
            let cols = (ox * s) as i64 - pad as i64..(ox * s + widened) as i64 - pad as i64;
            let reachable = rows.contains(&(nan_y as i64)) && cols.contains(&(nan_x as i64));
            if w.is_nan() {
                assert!(g.is_nan(), "{kind}: output {i}: reference NaN, got {g}");
            } else if !reachable {
                assert!(!g.is_nan(), "{kind}: output {i} (oy {oy}, ox {ox}): NaN outside the widened window");
            }
            spread += (g.is_nan() && !w.is_nan()) as usize;
        }
        eprintln!("{kind}: {spread} outputs NaN beyond the receptive field (within the widened window)");
    }
}

/// The channels-last families' two epilogues, both precisions: layers whose blocks lie
/// inside the problem with OH·OW a multiple of 16 store their fragments straight into the
/// output (bias as a broadcast fragment); ReLU, a last partial block, or OH·OW not a
/// multiple of 16 go through the scratch fragment. Every config of both sweeps.
#[test]
fn channels_last_epilogues() {
    let Some(gpu) = coop_gpu() else { return };
    let limits = gpu.kernel_limits();
    let shapes = [
        ("direct_3x3", S::new(32, 128, 3).padding(1).with_bias(true), [2, 16, 16], false),
        ("direct_relu", S::new(32, 128, 3).padding(1).with_bias(true), [2, 16, 16], true),
        ("direct_1x1_partial", S::new(16, 80, 1).with_bias(true), [3, 8, 8], false),
        ("ohw_not_16", S::new(24, 64, 3).stride(2).padding(1).with_bias(true), [2, 14, 14], false),
    ];
    for (name, spec, nhw, relu) in shapes {
        let case = case(name, spec, nhw, relu);
        for (family, precision, tol) in
            [("coop-nhwc-f16", Precision::F16Accum32, F16_TOLERANCE), ("coop-nhwc-f16x3", Precision::F16x3, TOL_F16X3)]
        {
            for kind in wgconv::advanced::sweep(family).unwrap() {
                if kind.check_limits(&limits).is_err() {
                    continue;
                }
                let conv = Conv2d::new(&gpu, spec, &case.w, case.b.as_deref(), options_at(precision, Some(kind), relu))
                    .unwrap_or_else(|e| panic!("{}: {e}", case.label(family)));
                check_encode_and_forward(&gpu, &case, &conv, &case.want, tol);
            }
        }
    }
}

/// On channels-last f16 tensors, an 11×11 image stem (K = 363, at least
/// `STEM_CHANNELS_LAST_MIN_K`) runs the stem kernel between layout passes by default and
/// matches the reference of its f16 operands; a 7×7 one (K = 147) stays on the channels-last
/// kernel. Cooperative-matrix devices only (NVIDIA's, where the stem rule applies).
#[test]
fn long_stems_on_channels_last_tensors_take_the_stem_kernel() {
    use wgconv::half::f16;
    use wgconv::{Layout, Storage};
    let Some(gpu) = coop_gpu() else { return };
    let alexnet = S::new(3, 16, 11).stride((4, 4)).padding(P::uniform(2)).with_bias(true);
    if !stem_is_default(gpu.caps(), &alexnet) {
        eprintln!("skipped: the stem rule does not apply on {}", gpu.info.name);
        return;
    }
    let resnet = S::new(3, 16, 7).stride((2, 2)).padding(P::uniform(3));
    for (spec, want) in [(alexnet, "coop-stem-f16"), (resnet, "coop-nhwc-f16")] {
        let case = Case::new("image stem, channels last", spec, Shape4::new(2, 3, 35, 37));
        let opts = Conv2dOptions::default().precision(Precision::F16Accum32).layout(Layout::Nhwc).storage(Storage::F16);
        let conv = Conv2d::new(&gpu, case.spec, &case.w, case.b.as_deref(), opts).unwrap();
        assert_eq!(conv.kernel().kernel.family(), want, "{}", conv.kernel());
        let round = |v: &[f32]| -> Vec<f32> { v.iter().map(|&v| f16::from_f32(v).to_f32()).collect() };
        let (x, w) = (round(&case.x), round(&case.w));
        let want =
            reference::to_nhwc(&reference_out(&case.problem, &x, &w, case.b.as_deref()), case.problem.output).unwrap();
        let input: Vec<f16> = reference::to_nhwc(&x, case.shape).unwrap().iter().map(|&v| f16::from_f32(v)).collect();
        let got = conv.forward_f16(&input, case.shape).unwrap();
        let got: Vec<f32> = got.iter().map(|v| v.to_f32()).collect();
        assert_close(&case.label(&conv.kernel().kernel.to_string()), &got, &want, TOL_STORAGE);
    }
}
