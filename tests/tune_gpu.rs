//! The tuner on a real device (lavapipe in CI), on a small problem: two cold tunes reach
//! the same decision (or, on a machine so loaded that a winner is unstable in one of them,
//! that one keeps the original; or two different winners, each of which passed the rule's
//! bar against the original in both tunes), the decision is cached, and a
//! `Conv2d` built with `tuning_key_input` runs it (and says so); a cached config the device
//! refuses is never used.
#![cfg(feature = "tune")]

mod common;
use common::*;
use std::sync::{Mutex, MutexGuard, Once};
use std::time::Instant;
use wgconv::tune::cache::{CachedDecision, TuningCache};
use wgconv::tune::timing::Summary;
use wgconv::tune::{self, TuneOptions, Verdict};
use wgconv::*;

/// Every test of this binary shares one cache directory, set before any GPU work (and so
/// before any thread of wgpu's could read the environment). The tests also take turns on
/// the device: a pipeline build (LLVM on lavapipe) beside a tune would disturb its timings.
fn setup() -> (TuningCache, MutexGuard<'static, ()>) {
    static ONCE: Once = Once::new();
    static TURN: Mutex<()> = Mutex::new(());
    ONCE.call_once(|| {
        let dir = binary_dir("tune-gpu");
        std::env::set_var(wgconv::tune::cache::DIR_ENV, &dir);
    });
    let turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    (TuningCache::open_default().unwrap(), turn)
}

fn noop(_: u64, _: u64, _: &str) {}

/// 8 → 64 channels, 3×3, padding 1, on 1×8×32×32: ~9 MFLOP, a few ms on lavapipe. 8 input
/// channels: under the Winograd rule's 16, so on a CPU adapter the tuned tiled kernel is the
/// default.
fn small() -> (Conv2dSpec, Shape4) {
    (Conv2dSpec::new(8, 64, 3).padding(Padding::uniform(1)).with_bias(true), Shape4::new(1, 8, 32, 32))
}

/// The anchor's best Triton blocks with 2 stages: candidates s3, w8 (the occupancy
/// estimate suggests it on every profile) and w8 s3 — four, all within lavapipe's 32 KiB.
fn original() -> TileConfig {
    TileConfig::parse("m64n64k16-t4x8-w4-s2").unwrap()
}

/// Whether `cfg` beat the original in `report` by the rule's bar (the tuner's own
/// `gain_pct` ≥ the threshold and `stable`), recomputed from the rows' samples.
fn passes_in(report: &tune::TuneReport, cfg: &TileConfig) -> bool {
    let original = Summary::of(&report.rows[0].samples_ms).expect("the original is measured");
    report
        .rows
        .iter()
        .filter(|r| r.config.as_ref() == Some(cfg))
        .filter_map(|r| Summary::of(&r.samples_ms))
        .any(|s| tune::gain_pct(&s, &original) >= report.threshold_pct && tune::stable(&s, &original))
}

#[test]
fn two_cold_tunes_agree_and_conv2d_runs_the_cached_decision() {
    let (cache, _turn) = setup();
    let gpu = gpu();
    let (spec, shape) = small();
    let problem = spec.problem(shape).unwrap();
    let opts =
        TuneOptions::default().threshold_pct(2.0).rounds(15).warmup(3).reps(0).force(true).cache(Some(cache.clone()));
    let t = Instant::now();
    let start = tiled_kernel("tiled", original());
    let a = tune::tune(&gpu, &problem, &start, &opts, &mut noop).unwrap();
    let b = tune::tune(&gpu, &problem, &start, &opts, &mut noop).unwrap();
    eprintln!("{}\n{}{}", a.report.header(), a.report.table(), a.report.decision_line());
    eprintln!("{}{}", b.report.table(), b.report.decision_line());
    eprintln!("two cold tunes: {:.1} s", t.elapsed().as_secs_f64());
    assert!(!a.from_cache && !b.from_cache);
    if a.report.chosen != b.report.chosen {
        // Two disagreements the rule allows on a noisy CPU (lavapipe shares the 2 cores with
        // everything else): one tune kept the original because the other's winner was not
        // stable there; or two candidates both clearly beat the original and noise ranked
        // them differently (CI, 2026-11-22: w8-s3 by 29 % against w8-s2 by 20 % in one tune,
        // w8-s2 by 26 % against w8-s3 by 24 % in the other). Then each winner must pass the
        // rule's bar (gain ≥ threshold, stable) in the other tune as well.
        match (a.report.chosen == original(), b.report.chosen == original()) {
            (true, false) | (false, true) => {
                let (kept, won) =
                    if a.report.chosen == original() { (&a.report, &b.report) } else { (&b.report, &a.report) };
                let why = &kept.rows[0].reason;
                assert!(why.contains("is unstable"), "kept the original without instability: {why}");
                eprintln!("note: one tune kept the original ({why}) where the other chose {}", won.chosen);
            }
            _ => {
                for (winner, other) in [(&a.report, &b.report), (&b.report, &a.report)] {
                    assert!(
                        passes_in(other, &winner.chosen),
                        "two tunes chose two different winners, and {} did not pass the bar in the other:\n{}",
                        winner.chosen,
                        other.table()
                    );
                }
                eprintln!("note: two winners, each passing in both tunes: {} and {}", a.report.chosen, b.report.chosen);
            }
        }
    }
    assert!(a.store_error.is_none(), "{:?}", a.store_error);

    // The report is complete: the original first, every candidate with a verdict and reason,
    // measured ones with median and quartiles from `rounds` samples.
    let r = &a.report;
    assert_eq!(r.rows[0].config, Some(original()));
    assert!(matches!(r.rows[0].verdict, Verdict::Keep | Verdict::Replaced));
    let candidates: Vec<_> = r.rows.iter().filter(|x| x.verdict != Verdict::Skipped).collect();
    assert!((3..=6).contains(&candidates.len()), "{}", r.table());
    for x in &candidates {
        assert!(!x.reason.is_empty(), "{}", x.label);
        assert!(x.occupancy.is_some());
        if x.verdict != Verdict::Excluded {
            assert_eq!(x.samples_ms.len(), opts.rounds as usize, "{}", x.label);
            assert!(x.q1_ms.unwrap() <= x.median_ms.unwrap() && x.median_ms.unwrap() <= x.q3_ms.unwrap());
        }
    }
    let limits = gpu.kernel_limits();
    for x in candidates.iter().filter(|x| x.verdict == Verdict::Excluded) {
        assert!(x.config.unwrap().validate(&limits).is_err(), "{}: {}", x.label, x.reason);
    }
    assert!(r.chosen.validate(&limits).is_ok());
    assert!(r.clock.contains("timestamps") || r.clock.contains("wall clock"), "{}", r.clock);

    // Cached: the same decision without measuring.
    let t = Instant::now();
    let cached = tune::tune(&gpu, &problem, &start, &opts.clone().force(false), &mut noop).unwrap();
    assert!(cached.from_cache);
    assert_eq!(cached.report.chosen, b.report.chosen);
    eprintln!("cached lookup: {:.2} ms", t.elapsed().as_secs_f64() * 1e3);
    let chosen = tiled_kernel("tiled", b.report.chosen);
    assert_eq!(tune::cached_decision(&gpu, &problem, Precision::F32), Some(chosen.clone()));
    // Each precision's decisions are its own: none for f16 here.
    assert_eq!(tune::cached_decision(&gpu, &problem, Precision::F16Accum32), None);

    // A Conv2d keyed by this input runs the cached decision, says so, and is correct.
    let (w, bias) = params(&spec, 11);
    let conv = Conv2d::new(&gpu, spec, &w, bias.as_deref(), Conv2dOptions::default().tuning_key_input(shape)).unwrap();
    assert_eq!((&conv.kernel().kernel, conv.kernel().source), (&chosen, ConfigSource::TuningCache));
    let x = randn(shape.len() as usize, 12);
    let want = reference_out(&problem, &x, &w, bias.as_deref());
    assert_close("tuned conv", &run_poisoned(&gpu, &conv, &x, shape), &want, TOL_F32);

    // Another input size (height and width) is another key: the library default.
    let other = Shape4::new(1, 8, 24, 24);
    let conv = Conv2d::new(&gpu, spec, &w, bias.as_deref(), Conv2dOptions::default().tuning_key_input(other)).unwrap();
    assert_ne!(conv.kernel().source, ConfigSource::TuningCache);

    // Another batch within 2× of the tuned one: the decision is reused, and the reason says
    // from which batch; 3× away: a new tune is needed, so the library default.
    let doubled = Shape4 { n: shape.n * 2, ..shape };
    let conv =
        Conv2d::new(&gpu, spec, &w, bias.as_deref(), Conv2dOptions::default().tuning_key_input(doubled)).unwrap();
    let s = conv.kernel();
    assert_eq!((&s.kernel, s.source), (&chosen, ConfigSource::TuningCache), "{s}");
    assert!(s.reason.contains(&format!("at batch {}, reused at batch {}", shape.n, doubled.n)), "{s}");
    let tripled = Shape4 { n: shape.n * 3, ..shape };
    let conv =
        Conv2d::new(&gpu, spec, &w, bias.as_deref(), Conv2dOptions::default().tuning_key_input(tripled)).unwrap();
    assert_ne!(conv.kernel().source, ConfigSource::TuningCache);
}

#[test]
fn cached_config_the_device_refuses_is_never_used() {
    let (cache, _turn) = setup();
    let gpu = gpu();
    let spec = Conv2dSpec::new(8, 16, 3).with_bias(false);
    let shape = Shape4::new(1, 8, 12, 12);
    let problem = spec.problem(shape).unwrap();
    // 4 stages of 128×128×32 need > 130 KiB of workgroup memory: refused by every device.
    let huge = TileConfig::parse("m128n128k32-t8x8-w8-s4").unwrap();
    huge.check_shape().unwrap();
    assert!(huge.validate(&gpu.kernel_limits()).is_err());
    let huge_kernel = tiled_kernel("tiled", huge);
    let key = tune::cache_key_for(&gpu, &problem, &huge_kernel);
    let decision = CachedDecision {
        config: huge,
        original: huge,
        threshold_pct: 2.0,
        gain_pct: 0.0,
        tuned_at: "2026-11-22T00:00:00+00:00".into(),
        report: None,
    };
    cache.store(&key, &decision).unwrap();
    assert_eq!(cache.lookup(&key).map(|d| d.config), Some(huge));
    assert_eq!(tune::cached_decision(&gpu, &problem, Precision::F32), None);
    let (w, _) = params(&spec, 5);
    let conv = Conv2d::new(&gpu, spec, &w, None, Conv2dOptions::default().tuning_key_input(shape)).unwrap();
    let (kind, source) = (&conv.kernel().kernel, conv.kernel().source);
    assert_ne!(source, ConfigSource::TuningCache);
    assert_ne!(kind, &huge_kernel);
    // And tune does not answer from it either: it measures (the original is refused, so it fails
    // with the reason instead of returning the refused config).
    let opts = TuneOptions::default().rounds(5).warmup(1).force(false).cache(Some(cache.clone()));
    let e = tune::tune(&gpu, &problem, &huge_kernel, &opts, &mut noop).unwrap_err();
    assert!(e.to_string().contains("refused"), "{e}");
}

/// The f16 precisions tune their own kernel (lavapipe: the f16 SIMT kernel; cooperative-
/// matrix devices: `coop-f16`, and `coop-f16x3` for f16x3), store the decision under their
/// precision, and a `Conv2d` of that precision runs it (one of another precision does not).
fn tune_at(precision: Precision) {
    let (cache, _turn) = setup();
    let gpu = gpu();
    // The kernel a fresh Conv2d of the precision runs; on the SIMT kernels from the f32
    // test's original, whose neighbours fit lavapipe (the seed's s3 does not).
    let original = match wgconv::advanced::default_kernel(gpu.caps(), precision) {
        Ok(kind) if ["tiled", "tiled-f16"].contains(&kind.family()) => kind.with_tile(original()).unwrap(),
        Ok(kind) => kind,
        Err(e) => {
            eprintln!("skipped: {precision} does not run on {}: {e}", gpu.info.name);
            return;
        }
    };
    // Per precision its own problem, so that no other test's decision is in the way; in f16
    // one the small-GEMM rule leaves to the cached decision on cooperative-matrix devices
    // (K = 72 > 64, 64 output channels > 32).
    let (c_in, c_out) = match precision {
        Precision::F32 => (5, 32),
        Precision::F16Accum32 => (8, 64),
        Precision::F16x3 => (7, 32),
        p => panic!("no problem for {p:?}"),
    };
    let spec = Conv2dSpec::new(c_in, c_out, 3).padding(Padding::uniform(1)).with_bias(true);
    let shape = Shape4::new(1, c_in, 24, 24);
    let problem = spec.problem(shape).unwrap();
    let opts =
        TuneOptions::default().threshold_pct(2.0).rounds(5).warmup(1).reps(0).force(true).cache(Some(cache.clone()));
    let out = tune::tune(&gpu, &problem, &original, &opts, &mut noop).unwrap();
    eprintln!("{}\n{}{}", out.report.header(), out.report.table(), out.report.decision_line());
    assert_eq!((out.report.precision, out.report.kernel.as_str()), (precision, original.family()));
    let measured = out.report.rows.iter().filter(|r| r.median_ms.is_some()).count();
    assert!(measured >= 2, "{}", out.report.table());
    let chosen = original.with_tile(out.report.chosen).unwrap();
    assert_eq!(tune::cached_decision(&gpu, &problem, precision), Some(chosen.clone()));
    assert_eq!(tune::cached_decision(&gpu, &problem, Precision::F32), None);

    let (w, bias) = params(&spec, 21);
    let options = |precision| Conv2dOptions::default().tuning_key_input(shape).precision(precision);
    let conv = Conv2d::new(&gpu, spec, &w, bias.as_deref(), options(precision)).unwrap();
    assert_eq!((&conv.kernel().kernel, conv.kernel().source), (&chosen, ConfigSource::TuningCache));
    let x = randn(shape.len() as usize, 22);
    let want = reference_out(&problem, &x, &w, bias.as_deref());
    assert_close("tuned conv", &run_poisoned(&gpu, &conv, &x, shape), &want, tolerance(&chosen));
    let f32_conv = Conv2d::new(&gpu, spec, &w, bias.as_deref(), options(Precision::F32)).unwrap();
    assert_ne!(f32_conv.kernel().source, ConfigSource::TuningCache);
}

#[test]
fn f16_tunes_its_own_kernel() {
    tune_at(Precision::F16Accum32);
}

#[test]
fn f16x3_tunes_its_own_kernel() {
    tune_at(Precision::F16x3);
}

/// `time_interleaved`: one median-able sample per plan, in the order given, every time
/// positive; no plans, no rounds, or more runs than one query set holds are refused.
#[test]
fn interleaved_timing_times_each_plan() {
    use wgconv::tune::timing::{time_interleaved, MAX_TIMED_RUNS};
    let (_cache, _turn) = setup();
    let gpu = gpu();
    let (spec, shape) = small();
    let case = Case::new("interleaved", spec, shape);
    let out_len = spec.problem(shape).unwrap().output.len();
    let x = gpu.buffer_init("x", bytemuck::cast_slice(&case.x), wgpu::BufferUsages::STORAGE).unwrap();
    let y = gpu.create_buffer("y", out_len * 4, wgpu::BufferUsages::STORAGE).unwrap();
    let ops: Vec<Conv2d> = [TileConfig::seed(), original()]
        .into_iter()
        .map(|t| {
            let kernel = Kernel::parse("tiled").unwrap().with_tile(t).unwrap();
            let opts = Conv2dOptions::default().kernel(kernel);
            Conv2d::new(&gpu, spec, &case.w, case.b.as_deref(), opts).unwrap()
        })
        .collect();
    // The second op also on a far larger input (16 times on a CPU adapter, 1024 times on a
    // GPU, where the small problem's time is mostly the dispatch's own): its times must come
    // back in its own place, far above the first's.
    let side = if gpu.caps().is_cpu() { 128 } else { 1024 };
    let big = Shape4::new(1, 8, side, side);
    let x_big = gpu.create_buffer("x big", big.len() * 4, wgpu::BufferUsages::STORAGE).unwrap();
    let y_big = gpu.create_buffer("y big", spec.problem(big).unwrap().output.len() * 4, wgpu::BufferUsages::STORAGE);
    let plans: Vec<ConvPlan> = vec![
        ops[0].plan(shape, &x, &y).unwrap(),
        ops[1].plan(shape, &x, &y).unwrap(),
        ops[1].plan(big, &x_big, &y_big.unwrap()).unwrap(),
    ];
    let refs: Vec<&ConvPlan> = plans.iter().collect();
    let (times, _) = time_interleaved(&gpu, &refs, 1, 3).unwrap();
    assert_eq!(times.len(), 3);
    for t in &times {
        assert_eq!(t.len(), 3);
        assert!(t.iter().all(|v| v.is_finite() && *v > 0.0), "{t:?}");
    }
    let median = |t: &Vec<f64>| Summary::of(t).unwrap().median;
    assert!(median(&times[2]) > 4.0 * median(&times[0]).max(median(&times[1])), "{times:?}");
    assert!(matches!(time_interleaved::<ConvPlan>(&gpu, &[], 1, 3), Err(Error::InvalidOptions(_))));
    assert!(matches!(time_interleaved(&gpu, &refs, 1, 0), Err(Error::InvalidOptions(_))));
    assert!(matches!(time_interleaved(&gpu, &refs, 0, MAX_TIMED_RUNS), Err(Error::InvalidOptions(_))));
}
