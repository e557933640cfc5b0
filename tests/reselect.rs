//! Selection at the first forward: an op built without the input shape (and without a named
//! kernel) selects again with the first forward's shape, as an op told that shape selects,
//! and runs that kernel from then on; an op with a named kernel or a given shape keeps its
//! kernel. On lavapipe no shape rule applies (CPU adapter, no cooperative matrices), so the
//! tuning cache is what changes the kernel here: this binary has a cache of its own. (A
//! kernel that cannot be built at the first forward: `src/conv2d.rs`'s unit test, which can
//! make one.)

mod common;
use common::*;
use wgconv::*;

/// Every test of this binary reads one fresh cache directory, set before any GPU work (and
/// so before any thread of wgpu's could read the environment).
fn setup() -> Gpu {
    #[cfg(feature = "tune")]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            let dir = binary_dir("reselect");
            std::env::set_var(tune::cache::DIR_ENV, &dir);
        });
    }
    gpu()
}

const FIRST: &str = "selected at the first forward";

fn input_of(shape: Shape4) -> String {
    format!("input [{}, {}, {}, {}]", shape.n, shape.c, shape.h, shape.w)
}

/// The op's output on the case's input through `forward` (`forward_f16` for f16 storage) or
/// `encode` (which plans; f32 storage), checked against the reference within its kernel's
/// precision (and, for f16 storage, the output's rounding).
fn run_checked(gpu: &Gpu, conv: &Conv2d, case: &Case, encode: bool) {
    let got = match conv.storage() {
        Storage::F32 if encode => run_poisoned(gpu, conv, &case.x, case.shape),
        Storage::F32 => conv.forward(&case.x, case.shape).unwrap(),
        _ => {
            let x: Vec<half::f16> = case.x.iter().map(|&v| half::f16::from_f32(v)).collect();
            conv.forward_f16(&x, case.shape).unwrap().iter().map(|v| v.to_f32()).collect()
        }
    };
    let kernel_tol = tolerance(&conv.kernel().kernel);
    let tol = if conv.storage() == Storage::F16 { kernel_tol.max(TOL_F16) } else { kernel_tol };
    assert_close(&case.label(&conv.kernel().to_string()), &got, &case.want, tol);
}

/// The case with its input rounded to f16 (as f16 storage reads it) and its reference redone.
fn f16_input(mut case: Case) -> Case {
    case.x.iter_mut().for_each(|v| *v = half::f16::from_f32(*v).to_f32());
    case.want = reference_out(&case.problem, &case.x, &case.w, case.b.as_deref());
    case
}

/// Stores `config` in the cache as the tuner's decision for `problem` on this device (the
/// precision's default family), as `wgconv tune` would.
#[cfg(feature = "tune")]
fn store_decision(gpu: &Gpu, problem: &ConvProblem, config: TileConfig) {
    let default = advanced::default_kernel(gpu.caps(), Precision::F32).unwrap();
    let key = tune::cache_key_for(gpu, problem, &default);
    let decision = tune::cache::CachedDecision {
        config,
        original: default.tile().unwrap(),
        threshold_pct: 2.0,
        gain_pct: 5.0,
        tuned_at: "2026-11-22T00:00:00+00:00".into(),
        report: None,
    };
    tune::cache::TuningCache::open_default().unwrap().store(&key, &decision).unwrap();
}

/// A tile config the device accepts that is not the f32 default's.
#[cfg(feature = "tune")]
fn other_tile(gpu: &Gpu) -> TileConfig {
    let default = advanced::default_kernel(gpu.caps(), Precision::F32).unwrap().tile().unwrap();
    // Configs no selection rule picks, so that only the cache can have chosen them.
    ["m64n64k16-t4x8-w4-s2", "m64n32k32-t4x4-w4-s2"]
        .map(|c| TileConfig::parse(c).unwrap())
        .into_iter()
        .find(|t| *t != default && t.validate(&gpu.kernel_limits()).is_ok())
        .expect("a second tile config")
}

/// For each precision the device has and a few shapes, a default op after its first forward
/// (through `forward`, `forward_f16` or `encode`) runs what an op told the shape runs, with
/// that reason plus the first forward's input (where a rule that needs the shape could
/// decide), and is correct; before it, the reason says nothing of a first forward.
#[test]
fn the_first_forward_selects_as_the_shape_given_at_construction() {
    let gpu = setup();
    let mut precisions = vec![Precision::F32];
    if has_f16(&gpu) {
        precisions.push(Precision::F16Accum32);
    }
    if gpu.has_coop_f16() {
        precisions.push(Precision::F16x3);
    }
    let cases = [
        ("dense3x3", Conv2dSpec::new(16, 24, 3).padding(Padding::uniform(1)).with_bias(true), [1, 10, 9]),
        ("pointwise_stride2", Conv2dSpec::new(8, 16, 1).stride(2), [2, 9, 8]),
        ("image_5x5", Conv2dSpec::new(3, 8, 5).padding(Padding::uniform(2)), [1, 11, 12]),
        ("depthwise", Conv2dSpec::new(8, 8, 3).groups(8).padding(Padding::uniform(1)).with_bias(true), [2, 7, 7]),
    ];
    for (i, precision) in precisions.into_iter().enumerate() {
        for (j, (name, spec, [n, h, w])) in cases.iter().enumerate() {
            let case = Case::new(name, *spec, Shape4::new(*n, spec.in_channels, *h, *w));
            let storage = if (i + j) % 3 == 2 { Storage::F16 } else { Storage::F32 };
            let case = if storage == Storage::F16 { f16_input(case) } else { case };
            let options = Conv2dOptions::default().precision(precision).storage(storage);
            let build = |options: Conv2dOptions| Conv2d::new(&gpu, case.spec, &case.w, case.b.as_deref(), options);
            let told = build(options.clone().tuning_key_input(case.shape)).unwrap().kernel().clone();
            let conv = build(options.clone()).unwrap();
            assert!(!conv.kernel().reason.contains(FIRST), "{}", conv.kernel());
            run_checked(&gpu, &conv, &case, j % 2 == 1);
            let s = conv.kernel();
            assert_eq!((&s.kernel, s.source), (&told.kernel, told.source), "{precision} {name}: {s}");
            // Where the shape cannot change the choice (the stem rule, most depthwise layers),
            // the op keeps no weights and says nothing of a first forward.
            let shape_free = !advanced::shape_may_matter(gpu.caps(), &case.spec, &options);
            let want = match shape_free {
                true => told.reason.clone(),
                false => format!("{} ({FIRST}, {})", told.reason, input_of(case.shape)),
            };
            assert_eq!(s.reason, want, "{s}");
        }
    }
}

/// A tuned decision for the first forward's shape replaces the construction's kernel
/// (repacked), and runs every later input: another shape, and the same again.
#[cfg(feature = "tune")]
#[test]
fn a_kernel_chosen_at_the_first_forward_runs_every_later_input() {
    let gpu = setup();
    // Three input channels: no matrix rule on any device, so the cache decides.
    let spec = Conv2dSpec::new(3, 16, 3).padding(Padding::uniform(1)).with_bias(true);
    let first = Case::new("tuned", spec, Shape4::new(2, 3, 12, 12));
    let tuned = other_tile(&gpu);
    store_decision(&gpu, &first.problem, tuned);
    let conv = Conv2d::new(&gpu, spec, &first.w, first.b.as_deref(), Conv2dOptions::default()).unwrap();
    let initial = conv.kernel().clone();
    assert_ne!(initial.source, ConfigSource::TuningCache, "{initial}");
    // A shape the spec refuses decides nothing.
    let bad = Shape4::new(1, 4, 12, 12);
    assert!(conv.forward(&vec![0.0; bad.len() as usize], bad).is_err());
    assert_eq!(conv.kernel(), &initial);

    run_checked(&gpu, &conv, &first, false);
    let s = conv.kernel().clone();
    assert_eq!(s.source, ConfigSource::TuningCache, "{s}");
    assert_eq!(s.kernel.tile(), Some(tuned), "{s}");
    assert_ne!(s.kernel, initial.kernel);
    assert!(s.reason.ends_with(&format!("({FIRST}, {})", input_of(first.shape))), "{s}");

    // Another size, which an op told it would not run the tuned config: the kernel stays.
    let later = Case::new("later", spec, Shape4::new(1, 3, 9, 7));
    let told = Conv2dOptions::default().tuning_key_input(later.shape);
    let fresh = Conv2d::new(&gpu, spec, &later.w, later.b.as_deref(), told).unwrap();
    assert_ne!(fresh.kernel().kernel, s.kernel, "{}", fresh.kernel());
    let later = Case { w: first.w.clone(), b: first.b.clone(), ..later };
    let later = Case { want: reference_out(&later.problem, &later.x, &later.w, later.b.as_deref()), ..later };
    run_checked(&gpu, &conv, &later, true);
    run_checked(&gpu, &conv, &first, false);
    assert_eq!(conv.kernel(), &s);
}

/// A named kernel, or the shape given at construction: nothing is selected again, whatever
/// the forwards' shapes.
#[test]
fn a_named_kernel_or_a_given_shape_is_kept() {
    let gpu = setup();
    let spec = Conv2dSpec::new(6, 10, 3).padding(Padding::uniform(1));
    let case = Case::new("kept", spec, Shape4::new(1, 6, 8, 8));
    let other = Case::new("kept_other", spec, Shape4::new(2, 6, 5, 9));
    for options in [
        Conv2dOptions::default().kernel(direct_kernel()),
        Conv2dOptions::default().tuning_key_input(Shape4::new(4, 6, 16, 16)),
    ] {
        for first in [&case, &other] {
            let conv = Conv2d::new(&gpu, spec, &first.w, first.b.as_deref(), options.clone()).unwrap();
            let before = conv.kernel().clone();
            run_checked(&gpu, &conv, first, false);
            assert_eq!(conv.kernel(), &before);
            assert!(!before.reason.contains(FIRST), "{before}");
        }
    }
}

/// Concurrent first forwards of different shapes: one shape decides, every output is right.
#[test]
fn concurrent_first_forwards_agree_on_one_shape() {
    let gpu = setup();
    let spec = Conv2dSpec::new(4, 8, 3).padding(Padding::uniform(1)).with_bias(true);
    let base = Case::new("concurrent", spec, Shape4::new(1, 4, 6, 6));
    let cases: Vec<Case> = [5, 6, 7, 8]
        .into_iter()
        .map(|h| {
            let c = Case::new("concurrent", spec, Shape4::new(1, 4, h, 6));
            let want = reference_out(&c.problem, &c.x, &base.w, base.b.as_deref());
            Case { w: base.w.clone(), b: base.b.clone(), want, ..c }
        })
        .collect();
    let conv = Conv2d::new(&gpu, spec, &base.w, base.b.as_deref(), Conv2dOptions::default()).unwrap();
    std::thread::scope(|s| {
        for case in &cases {
            let (gpu, conv) = (&gpu, &conv);
            s.spawn(move || run_checked(gpu, conv, case, false));
        }
    });
    let reason = &conv.kernel().reason;
    let named = cases.iter().filter(|c| reason.contains(&input_of(c.shape))).count();
    assert_eq!(named, 1, "{reason}");
}

/// A forward or plan refused for its arguments (a slice of the wrong length, the same buffer
/// as input and output) does not decide the kernel: the first one that runs does.
#[test]
fn a_refused_call_does_not_decide_the_kernel() {
    let gpu = setup();
    let spec = Conv2dSpec::new(16, 24, 3).padding(Padding::uniform(1));
    let conv = Conv2d::new(&gpu, spec, &vec![0.01; spec.weight_len()], None, Conv2dOptions::default()).unwrap();
    let refused = Shape4::new(2, 16, 9, 9);
    assert!(conv.forward(&[0.0; 5], refused).is_err());
    let buffer = gpu.create_buffer("both", refused.len() * 4 * 2, wgpu::BufferUsages::STORAGE).unwrap();
    assert!(conv.plan(refused, &buffer, &buffer).is_err());
    assert!(!conv.kernel().reason.contains(FIRST), "{}", conv.kernel());
    let shape = Shape4::new(1, 16, 8, 8);
    conv.forward(&vec![0.5; shape.len() as usize], shape).unwrap();
    assert!(conv.kernel().reason.ends_with(&format!("({FIRST}, {})", input_of(shape))), "{}", conv.kernel());
}
