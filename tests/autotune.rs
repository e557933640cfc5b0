//! `Conv2dOptions::autotune`: the op times the selection's kernel and other candidates at the
//! input shape and keeps the fastest, stored in the autotune cache (`autotune.json` in
//! `WGCONV_CACHE_DIR`) and reused by later ops of the same key; at the first forward where the
//! shape was not given; a corrupt cache is ignored and rewritten; two ops autotuning at once
//! take turns; a named kernel is refused. Runs on any adapter (lavapipe in CI). One test,
//! its steps in order: they share the cache file.
#![cfg(feature = "tune")]

mod common;
use common::*;
use wgconv::{ConfigSource, Conv2d, Conv2dOptions, Conv2dSpec, Error, Padding, PaddingMode, Shape4, Storage};

/// Every test of this binary reads one fresh cache directory, set before any GPU work (and
/// so before any thread of wgpu's could read the environment).
fn setup() -> (wgconv::Gpu, std::path::PathBuf) {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let dir = binary_dir("autotune");
        std::env::set_var(wgconv::tune::cache::DIR_ENV, &dir);
        dir
    });
    (gpu(), dir.clone())
}

/// How many kernels the reason says were timed.
fn timed(reason: &str) -> usize {
    let rest = reason.split("the fastest of ").nth(1).unwrap_or_else(|| panic!("not timed: {reason}"));
    rest.split(' ').next().unwrap().parse().unwrap()
}

#[test]
fn autotune_times_candidates_and_reuses_the_cache() {
    let (gpu, dir) = setup();
    let spec = Conv2dSpec::new(8, 16, 3).padding(Padding::uniform(1)).with_bias(true);
    let shape = Shape4::new(1, 8, 10, 10);
    let case = Case::new("autotune", spec, shape);
    let opts = Conv2dOptions::default().autotune(true);

    // The shape given: timed at construction, the fastest kept and stored.
    let conv = Conv2d::new(&gpu, spec, &case.w, case.b.as_deref(), opts.clone().tuning_key_input(shape)).unwrap();
    let s = conv.kernel();
    assert_eq!(s.source, ConfigSource::Autotune, "{s}");
    assert!(s.reason.contains("timed at input [1, 8, 10, 10]") && timed(&s.reason) >= 2, "{s}");
    assert_close("autotuned", &conv.forward(&case.x, shape).unwrap(), &case.want, 1e-5);
    let file = dir.join("autotune.json");
    let text = std::fs::read_to_string(&file).expect("the decision is stored");
    assert!(text.contains(&s.kernel.to_string()), "{text}");

    // A second op of the same key reads the decision instead of timing.
    let again = Conv2d::new(&gpu, spec, &case.w, case.b.as_deref(), opts.clone().tuning_key_input(shape)).unwrap();
    assert_eq!(again.kernel().kernel, s.kernel);
    assert!(again.kernel().reason.contains("the autotune cache's decision"), "{}", again.kernel());

    // The shape not given: the first forward decides (from the cache for this shape).
    let later = Conv2d::new(&gpu, spec, &case.w, case.b.as_deref(), opts.clone()).unwrap();
    assert_ne!(later.kernel().source, ConfigSource::Autotune, "{}", later.kernel());
    assert_close("first forward", &later.forward(&case.x, shape).unwrap(), &case.want, 1e-5);
    assert_eq!(later.kernel().source, ConfigSource::Autotune, "{}", later.kernel());
    assert!(later.kernel().reason.contains("the autotune cache's decision"), "{}", later.kernel());

    // Another shape at the first forward is timed afresh.
    let other = Shape4::new(2, 8, 7, 9);
    let fresh = Case::new("autotune other shape", spec, other);
    let conv = Conv2d::new(&gpu, spec, &fresh.w, fresh.b.as_deref(), opts.clone()).unwrap();
    assert_close("other shape", &conv.forward(&fresh.x, other).unwrap(), &fresh.want, 1e-5);
    assert!(conv.kernel().reason.contains("timed at input [2, 8, 7, 9]"), "{}", conv.kernel());

    // A corrupt cache is ignored (a warning), timed again and rewritten.
    std::fs::write(&file, b"{ not json").unwrap();
    let conv = Conv2d::new(&gpu, spec, &case.w, case.b.as_deref(), opts.clone().tuning_key_input(shape)).unwrap();
    assert!(conv.kernel().reason.contains("the fastest of"), "{}", conv.kernel());
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.trim_start().starts_with('{') && text.contains("\"entries\""), "{text}");

    // Weights with an infinity and another padding mode are other keys: timed afresh (the
    // cached kernel may refuse them), never the other key's kernel.
    let mut w = case.w.clone();
    w[5] = f32::INFINITY;
    let inf = Conv2d::new(&gpu, spec, &w, case.b.as_deref(), opts.clone().tuning_key_input(shape)).unwrap();
    assert!(inf.kernel().reason.contains("the fastest of"), "{}", inf.kernel());
    inf.forward(&case.x, shape).unwrap();
    let reflect = spec.padding_mode(PaddingMode::Reflect);
    let want = Case::new("autotune reflect", reflect, shape);
    let r = Conv2d::new(&gpu, reflect, &want.w, want.b.as_deref(), opts.clone().tuning_key_input(shape)).unwrap();
    assert!(r.kernel().reason.contains("the fastest of"), "{}", r.kernel());
    assert_close("reflect", &r.forward(&want.x, shape).unwrap(), &want.want, 1e-5);

    // f16 tensors whose images hold an odd number of outputs (3 channels of 5×5): the images
    // compared start and end in half a 32-bit word, which copies cannot move alone.
    if gpu.caps().shader_f16() {
        let odd = Conv2dSpec::new(2, 3, 3).padding(Padding::uniform(1));
        for n in 1..=3 {
            let shape = Shape4::new(n, 2, 5, 5);
            let case = Case::new("autotune odd f16", odd, shape);
            let opts = opts.clone().storage(Storage::F16).tuning_key_input(shape);
            let conv = Conv2d::new(&gpu, odd, &case.w, case.b.as_deref(), opts).unwrap();
            let s = conv.kernel();
            assert!(s.reason.contains("the fastest of") && !s.reason.contains("failed"), "batch {n}: {s}");
        }
    }

    // Two ops of one key autotuning at once on one device take turns: one times, the
    // other finds its decision in the cache.
    let spec = Conv2dSpec::new(4, 8, 3).padding(Padding::uniform(1));
    let shape = Shape4::new(1, 4, 9, 11);
    let case = Case::new("autotune turns", spec, shape);
    let opts = Conv2dOptions::default().autotune(true).tuning_key_input(shape);
    let reasons: Vec<String> = std::thread::scope(|s| {
        let ops: Vec<_> = (0..2)
            .map(|_| s.spawn(|| Conv2d::new(&gpu, spec, &case.w, None, opts.clone()).unwrap().kernel().reason.clone()))
            .collect();
        ops.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let timed_ops = reasons.iter().filter(|r| r.contains("the fastest of")).count();
    let cached = reasons.iter().filter(|r| r.contains("the autotune cache's decision")).count();
    assert_eq!((timed_ops, cached), (1, 1), "{reasons:?}");

    // A named kernel leaves nothing to choose.
    let named = opts.kernel("direct".parse::<wgconv::Kernel>().unwrap());
    let e = Conv2d::new(&gpu, spec, &case.w, case.b.as_deref(), named).err().expect("refused");
    assert!(matches!(e, Error::InvalidOptions(_)) && e.to_string().contains("set one or the other"), "{e}");
}
