//! Faults and soak: memory pressure (a child process under `ulimit -v`), concurrent forwards
//! on one shared op, create/drop and cache-filling loops with an RSS bound, and special
//! values (NaN, ±inf, 1e38, subnormals, f16's range) through every family the device runs.
//! Shapes are small or cheap (a 1×1 kernel), so the whole target runs in CI on lavapipe.

mod common;

use common::*;
use std::process::Command;
use std::sync::Arc;
use wgconv::{advanced, Conv2d, Conv2dOptions, Conv2dSpec, Error, Gpu, Kernel, Padding, Precision, Shape4};

/// Set in the environment of the child processes this target starts (re-running its own
/// binary on one test), which run the test's work instead of starting children.
const CHILD_ENV: &str = "WGCONV_FAULTS_CHILD";

fn is_child() -> bool {
    std::env::var_os(CHILD_ENV).is_some()
}

/// Runs this test binary's `test` alone in a child process, under `ulimit -v` of
/// `limit_mib` where given. Returns (exit code, stdout, stderr).
fn run_child(test: &str, limit_mib: Option<u64>) -> (Option<i32>, String, String) {
    let exe = std::env::current_exe().unwrap();
    let ulimit = limit_mib.map(|m| format!("ulimit -v {}; ", m * 1024)).unwrap_or_default();
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("{ulimit}exec \"$0\" {test} --exact --nocapture --test-threads=1"))
        .arg(exe)
        .env(CHILD_ENV, "1")
        .output()
        .unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

/// The line a child reports its outcome on.
const OUTCOME: &str = "FAULTS-OUTCOME ";

/// The child's reports (libtest may print the test's name on the same line first).
fn outcome_lines(stdout: &str) -> impl Iterator<Item = &str> {
    stdout.lines().filter_map(|l| l.find(OUTCOME).map(|i| &l[i + OUTCOME.len()..]))
}

fn outcome_line(stdout: &str) -> Option<&str> {
    outcome_lines(stdout).next()
}

// ---- memory pressure ------------------------------------------------------------------------

/// The problem of the memory-pressure test: a 512 MB output (4 images × 8 channels × 2000²
/// f32, 128 MB per image: the read-back runs in chunks at lavapipe's binding limit), cheap
/// to compute (a 1×1 kernel over 2 channels).
fn pressure_problem() -> (Conv2dSpec, Shape4) {
    (Conv2dSpec::new(2, 8, 1), Shape4::new(4, 2, 2000, 2000))
}

/// The child's work: one forward of the pressure problem, some outputs checked. Reports
/// `ok …`, `error <Debug> :: <Display>` (the library's typed error), or `skipped …` when the
/// test's own input cannot be allocated (not the library's concern).
#[test]
fn memory_pressure_child() {
    if !is_child() {
        return;
    }
    let report = match pressure_forward() {
        Ok(Some(summary)) => format!("ok {summary}"),
        Ok(None) => "skipped: the test's own input does not fit".to_string(),
        Err(e) => format!("error {e:?} :: {e}"),
    };
    println!("{OUTCOME}{report}");
}

fn pressure_forward() -> wgconv::Result<Option<String>> {
    let gpu = Arc::new(Gpu::new()?);
    let (spec, shape) = pressure_problem();
    let w: Vec<f32> = (0..spec.weight_len()).map(|i| (i % 7) as f32 * 0.25 - 0.5).collect();
    // The direct kernel: a tiled kernel would pad K = 2 and N = 8 to whole tiles (64× the work).
    let opts = Conv2dOptions::default().kernel(Kernel::parse("direct")?);
    let conv = Conv2d::new(&gpu, spec, &w, None, opts)?;
    let len = (shape.n * shape.c * shape.h * shape.w) as usize;
    let mut x: Vec<f32> = Vec::new();
    if x.try_reserve_exact(len).is_err() {
        return Ok(None);
    }
    x.extend((0..len).map(|i| (i % 13) as f32 * 0.125));
    let y = conv.forward(&x, shape)?;
    let hw = (shape.h * shape.w) as usize;
    assert_eq!(y.len(), shape.n as usize * 8 * hw);
    for i in (0..y.len()).step_by(999_983) {
        let (n, oc, p) = (i / (8 * hw), (i / hw) % 8, i % hw);
        let want: f32 = (0..2).map(|ic| w[oc * 2 + ic] * x[(n * 2 + ic) * hw + p]).sum();
        assert!((y[i] - want).abs() <= 1e-5 * want.abs().max(1.0), "y[{i}] = {} != {want}", y[i]);
    }
    Ok(Some(format!("{} outputs", y.len())))
}

/// Under `ulimit -v` from 1 GiB to 3 GiB the 512 MB problem either succeeds or returns a
/// typed error naming the resource: never an abort (exit 134) or a panic (exit 101).
#[test]
fn memory_pressure_never_aborts() {
    if is_child() {
        return;
    }
    let mut outcomes = Vec::new();
    for mib in [1024, 1200, 1536, 1800, 1900, 1950, 2048, 3072] {
        let (code, stdout, stderr) = run_child("memory_pressure_child", Some(mib));
        let tail: String = stderr.lines().rev().take(8).collect::<Vec<_>>().join("\n");
        assert_eq!(code, Some(0), "ulimit -v {mib} MiB: the child died (exit {code:?}):\n{stdout}\n{tail}");
        let line = outcome_line(&stdout)
            .unwrap_or_else(|| panic!("ulimit -v {mib} MiB: no outcome reported:\n{stdout}\n{tail}"))
            .to_string();
        if let Some(err) = line.strip_prefix("error ") {
            // Typed and named: out of memory names what it allocated and its size; a device
            // or adapter that cannot even be opened in so little memory says so.
            let named = (err.starts_with("OutOfMemory") && err.contains("what: \"") && err.contains("bytes: "))
                || err.starts_with("NoAdapter")
                || err.starts_with("Device {")
                || err.starts_with("TooLarge");
            assert!(named, "ulimit -v {mib} MiB: an error that does not name the resource: {err}");
        }
        eprintln!("ulimit -v {mib} MiB: {line}");
        outcomes.push((mib, line));
    }
    // The largest limit leaves room for the problem: the test must reach success somewhere.
    assert!(outcomes.iter().any(|(_, l)| l.starts_with("ok")), "no limit succeeded: {outcomes:?}");
}

// ---- concurrency ----------------------------------------------------------------------------

/// 8 threads run forwards on one shared op, each on its own input; every result matches
/// the reference (no crossed outputs, no deadlock).
#[test]
fn concurrent_forwards_on_a_shared_op() {
    if is_child() {
        return;
    }
    let gpu = gpu();
    let spec = Conv2dSpec::new(3, 8, 3).padding(Padding::uniform(1)).with_bias(true);
    let shape = Shape4::new(1, 3, 12, 12);
    let (w, b) = params(&spec, 7);
    let conv = Arc::new(Conv2d::new(&gpu, spec, &w, b.as_deref(), Conv2dOptions::default()).unwrap());
    let problem = spec.problem(shape).unwrap();
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let (conv, w, b) = (conv.clone(), w.clone(), b.clone());
            std::thread::spawn(move || {
                let x = randn(problem.input.len() as usize, 100 + t);
                let want = reference_out(&problem, &x, &w, b.as_deref());
                for i in 0..25 {
                    let got = conv.forward(&x, shape).unwrap();
                    assert_close(&format!("thread {t} forward {i}"), &got, &want, TOL_F32);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

// ---- bounded memory -------------------------------------------------------------------------

/// The resident set in MB (Linux), from /proc/self/statm.
fn rss_mb() -> Option<f64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: f64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096.0 / 1e6)
}

/// Growth allowed through the create/drop and input-size loops once warm (MB).
const RSS_GROWTH_MB: f64 = 48.0;

/// The child's work: create/drop cycles and many input sizes on one op (RSS within
/// [`RSS_GROWTH_MB`] of its warm level), many configs on one device (configs past the
/// pipeline cache's capacity cost less than half what each cost while it filled: unbounded,
/// each would keep its pipeline). Prints the numbers.
#[test]
fn bounded_memory_child() {
    if !is_child() || rss_mb().is_none() {
        return;
    }
    let gpu = Arc::new(Gpu::new().unwrap());
    let spec = Conv2dSpec::new(3, 8, 3).padding(Padding::uniform(1)).with_bias(true);
    let (w, b) = params(&spec, 3);
    let x = randn(3 * 10 * 10, 4);
    let shape = Shape4::new(1, 3, 10, 10);

    // 1. Create, run, drop.
    let mut at = Vec::new();
    for i in 0..300 {
        let conv = Conv2d::new(&gpu, spec, &w, b.as_deref(), Conv2dOptions::default()).unwrap();
        conv.forward(&x, shape).unwrap();
        if i == 50 || i == 299 {
            at.push(rss_mb().unwrap());
        }
    }
    println!("{OUTCOME}create/drop: RSS {:.1} MB after 50 cycles, {:.1} MB after 300", at[0], at[1]);
    assert!(at[1] - at[0] < RSS_GROWTH_MB, "create/drop grew RSS by {:.1} MB", at[1] - at[0]);

    // 2. Many input sizes through one op.
    let conv = Conv2d::new(&gpu, spec, &w, b.as_deref(), Conv2dOptions::default()).unwrap();
    let mut at = Vec::new();
    for i in 0..1000u32 {
        let (h, wd) = (4 + i % 40, 4 + i / 40);
        let x = randn((3 * h * wd) as usize, i as u64);
        conv.forward(&x, Shape4::new(1, 3, h, wd)).unwrap();
        assert!(conv.prepared_sizes() <= advanced::PREPARED_CAPACITY);
        if i == 100 || i == 999 {
            at.push(rss_mb().unwrap());
        }
    }
    println!(
        "{OUTCOME}input sizes: RSS {:.1} MB after 100 sizes, {:.1} MB after 1000 ({} kept)",
        at[0],
        at[1],
        conv.prepared_sizes()
    );
    assert_eq!(conv.prepared_sizes(), advanced::PREPARED_CAPACITY);
    assert!(at[1] - at[0] < RSS_GROWTH_MB, "input sizes grew RSS by {:.1} MB", at[1] - at[0]);
    drop(conv);

    // 3. Many configs on one device (each a pipeline of its own): the tiled families'
    // sweeps, each config at 1 to 4 stages.
    let mut configs: Vec<Kernel> = Vec::new();
    for family in ["tiled", "tiled-f16"] {
        for k in advanced::sweep(family).unwrap() {
            let tile = k.tile().unwrap();
            for k in (1..=4).filter_map(|s| k.with_tile(tile.with_stages(s))) {
                if !configs.contains(&k) {
                    configs.push(k);
                }
            }
        }
    }
    let cap = advanced::PIPELINE_CACHE_CAPACITY;
    let total = configs.len().min(2 * cap + 8);
    let start = rss_mb().unwrap();
    // Past the capacity, the first configs still see the driver's and the allocator's own
    // pools grow, by amounts that shift between the two stretches with unrelated changes
    // (the total alike): the growth past the capacity is measured after SETTLE more.
    const SETTLE: usize = 8;
    let (mut full, mut settled) = (0.0, 0.0);
    let mut ran = 0;
    for k in configs.into_iter().take(total) {
        let opts = Conv2dOptions::default().kernel(k.clone()).precision(k.precision());
        let Ok(conv) = Conv2d::new(&gpu, spec, &w, b.as_deref(), opts) else { continue };
        conv.forward(&x, shape).unwrap();
        ran += 1;
        assert!(gpu.cached_pipelines() <= cap);
        if ran == cap {
            full = rss_mb().unwrap();
        }
        if ran == cap + SETTLE {
            settled = rss_mb().unwrap();
        }
    }
    let end = rss_mb().unwrap();
    assert!(ran >= cap + SETTLE + 8, "only {ran} tiled configs run on this device");
    // Unbounded, each config past the capacity would cost what each cost while it filled.
    let per_config = (full - start) / cap as f64;
    let per_extra = (end - settled) / (ran - cap - SETTLE) as f64;
    println!(
        "{OUTCOME}configs: RSS {start:.1} MB before, {full:.1} MB with the cache full ({cap} configs, \
         {per_config:.2} MB each), {settled:.1} MB {SETTLE} configs later, {end:.1} MB after {ran} \
         ({per_extra:.2} MB per config past those; {} pipelines kept)",
        gpu.cached_pipelines()
    );
    assert!(
        per_extra < 0.5 * per_config,
        "configs past the cache's capacity cost {per_extra:.2} MB each, {per_config:.2} MB while it filled"
    );
    println!("{OUTCOME}done");
}

/// [`bounded_memory_child`] in a process of its own (other tests' allocations would blur
/// its RSS).
#[test]
fn bounded_memory() {
    if is_child() || rss_mb().is_none() {
        return;
    }
    let (code, stdout, stderr) = run_child("bounded_memory_child", None);
    for l in outcome_lines(&stdout) {
        eprintln!("{l}");
    }
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(outcome_lines(&stdout).any(|l| l == "done"), "{stdout}\n{stderr}");
}

// ---- special values -------------------------------------------------------------------------

/// The specs a family is tried on: a dense convolution of 3×3 and one of 5×5 (Winograd's
/// 5×5 algorithms) and a depthwise one (each family takes at least one), each padded so that
/// taps fall on the padding.
fn special_specs() -> [(&'static str, Conv2dSpec); 3] {
    [
        ("dense", Conv2dSpec::new(3, 8, 3).padding(Padding::uniform(1)).with_bias(true)),
        ("dense 5x5", Conv2dSpec::new(3, 8, 5).padding(Padding::uniform(2)).with_bias(true)),
        ("depthwise", Conv2dSpec::new(8, 8, 3).groups(8).padding(Padding::uniform(1)).with_bias(true)),
    ]
}

/// A special-value case: what it changes in the input and weights.
struct Special {
    name: &'static str,
    /// Whether an f16 precision must refuse it (a value beyond f16's range).
    beyond_f16: bool,
    edit: fn(&Conv2dSpec, Shape4, &mut [f32], &mut [f32]),
}

fn specials() -> Vec<Special> {
    // Weight index of (oc, ic, ky, kx) and input index of (c, y, x) in image 0.
    fn wi(s: &Conv2dSpec, oc: u32, ic: u32, ky: u32, kx: u32) -> usize {
        (((oc * s.in_channels_per_group() + ic) * s.kernel[0] + ky) * s.kernel[1] + kx) as usize
    }
    fn xi(sh: Shape4, c: u32, y: u32, x: u32) -> usize {
        ((c * sh.h + y) * sh.w + x) as usize
    }
    vec![
        Special {
            // The top-left tap falls on the padding for the first row and column: 0 · inf.
            name: "inf weight on a padded tap",
            beyond_f16: true,
            edit: |s, _, _, w| w[wi(s, 0, 0, 0, 0)] = f32::INFINITY,
        },
        Special {
            name: "-inf weight on a padded tap",
            beyond_f16: true,
            edit: |s, _, _, w| w[wi(s, 1, 0, 2, 2)] = f32::NEG_INFINITY,
        },
        Special { name: "NaN weight", beyond_f16: false, edit: |s, _, _, w| w[wi(s, 2, 0, 0, 1)] = f32::NAN },
        Special {
            name: "inf and -inf inputs on the border",
            beyond_f16: true,
            edit: |_, sh, x, _| {
                x[xi(sh, 0, 0, 0)] = f32::INFINITY;
                x[xi(sh, sh.c - 1, sh.h - 1, sh.w - 1)] = f32::NEG_INFINITY;
            },
        },
        Special {
            name: "NaN inputs on the border",
            beyond_f16: false,
            edit: |_, sh, x, _| {
                x[xi(sh, 0, 0, sh.w - 1)] = f32::NAN;
                x[xi(sh, sh.c - 1, sh.h - 1, 0)] = f32::NAN;
            },
        },
        Special {
            // Every product 1e38 and of one sign: sums overflow f32 to +inf (in the kernels'
            // f32 accumulation and in the reference's rounding of its f64 sum alike).
            name: "1e38 overflows to inf",
            beyond_f16: true,
            edit: |_, _, x, w| {
                x.iter_mut().for_each(|v| *v = 1e38);
                w.iter_mut().for_each(|v| *v = 1.0);
            },
        },
        Special {
            // One large product per output: finite, and exact enough.
            name: "1e38 on one input stays finite",
            beyond_f16: true,
            edit: |_, sh, x, w| {
                x.iter_mut().for_each(|v| *v = 0.0);
                x[xi(sh, 0, sh.h / 2, sh.w / 2)] = 1e38;
                w.iter_mut().for_each(|v| *v = v.abs().min(1.0));
            },
        },
        Special {
            // A device may flush subnormals to zero: within the absolute tolerance either way.
            name: "subnormals",
            beyond_f16: false,
            edit: |_, _, x, w| {
                x.iter_mut().step_by(3).for_each(|v| *v = 1e-40);
                w.iter_mut().step_by(5).for_each(|v| *v = -3e-39);
            },
        },
        Special { name: "beyond f16's range (7e4)", beyond_f16: true, edit: |_, sh, x, _| x[xi(sh, 0, 1, 1)] = 7e4 },
    ]
}

/// Non-finite positions and signs of a result: `N` NaN, `+`/`-` infinities, `.` finite.
fn pattern(v: &[f32]) -> String {
    v.iter()
        .map(|x| match x {
            x if x.is_nan() => 'N',
            x if *x == f32::INFINITY => '+',
            x if *x == f32::NEG_INFINITY => '-',
            _ => '.',
        })
        .collect()
}

/// Same NaN and ±inf positions; finite values within `tol` of the largest finite |want|.
fn assert_special_close(label: &str, got: &[f32], want: &[f32], tol: f64) {
    assert_eq!(got.len(), want.len(), "{label}: length");
    assert_eq!(pattern(got), pattern(want), "{label}: NaN/inf pattern (N NaN, +/- inf)");
    let scale = want.iter().filter(|v| v.is_finite()).fold(1.0f64, |m, &v| m.max((v as f64).abs()));
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if w.is_finite() {
            let err = (g as f64 - w as f64).abs() / scale;
            assert!(err <= tol, "{label}: [{i}] {g} vs {w} (error {err:e} of {scale:e})");
        }
    }
}

/// Every family of the registry that the device runs gives the reference's NaN/inf pattern
/// and finite values on each special case (padding is explicit zeros that are multiplied);
/// under an f16 precision a value beyond f16's range is a typed `F16Range` error and NaN
/// propagates. Families the device cannot run are listed, not silently passed.
#[test]
fn special_values_in_every_family() {
    if is_child() {
        return;
    }
    let gpu = gpu();
    let shape_of = |s: &Conv2dSpec| Shape4::new(1, s.in_channels, 7, 6);
    let mut ran = Vec::new();
    let mut skipped = Vec::new();
    // Per (spec, case): the pattern each family gave, to compare kernels with each other too.
    let mut patterns: std::collections::BTreeMap<(String, String), Vec<(String, String)>> = Default::default();
    for family in advanced::family_names() {
        let kernel = Kernel::parse(family).unwrap();
        let precision = kernel.precision();
        let f16 = precision != Precision::F32;
        let mut runs_somewhere = false;
        for (spec_name, spec) in special_specs() {
            let shape = shape_of(&spec);
            let problem = spec.problem(shape).unwrap();
            let (w0, b) = params(&spec, 11);
            let x0 = randn(problem.input.len() as usize, 12);
            let opts = Conv2dOptions::default().kernel(kernel.clone()).precision(precision);
            // Can this family run this spec on this device at all (finite data)?
            if let Err(e) = Conv2d::new(&gpu, spec, &w0, b.as_deref(), opts.clone()) {
                skipped.push(format!("{family} ({spec_name}): {e}"));
                continue;
            }
            runs_somewhere = true;
            for case in specials() {
                let label = format!("{family}, {spec_name}, {}", case.name);
                let (mut x, mut w) = (x0.clone(), w0.clone());
                (case.edit)(&spec, shape, &mut x, &mut w);
                let result = Conv2d::new(&gpu, spec, &w, b.as_deref(), opts.clone()).and_then(|c| c.forward(&x, shape));
                // F32 on the matrix units and Winograd's transforms take finite weights only
                // (selection never gives them others); named, they refuse them.
                if ["coop-nhwc-f32", "coop-winograd-f32", "winograd", "winograd-f4", "winograd-f6"].contains(&family)
                    && w.iter().any(|v| !v.is_finite())
                {
                    let e = result.expect_err(&label);
                    assert!(matches!(e, Error::KernelRefused { .. }), "{label}: {e:?}");
                    continue;
                }
                if f16 && case.beyond_f16 {
                    let e = result.expect_err(&label);
                    assert!(matches!(e, Error::F16Range { .. }), "{label}: {e:?}");
                    continue;
                }
                let got = result.unwrap_or_else(|e| panic!("{label}: {e}"));
                let want = reference_out(&problem, &x, &w, b.as_deref());
                let tol = if f16 { 1e-2 } else { TOL_F32 };
                assert_special_close(&label, &got, &want, tol);
                patterns
                    .entry((spec_name.to_string(), case.name.to_string()))
                    .or_default()
                    .push((family.to_string(), pattern(&got)));
            }
        }
        if runs_somewhere {
            ran.push(family);
        }
    }
    eprintln!("special values: ran {ran:?}");
    for s in &skipped {
        eprintln!("special values: not run: {s}");
    }
    // Two kernels, one problem: one pattern.
    for ((spec, case), by_family) in &patterns {
        for (family, p) in by_family {
            assert_eq!(p, &by_family[0].1, "{spec}, {case}: {family} and {} differ", by_family[0].0);
        }
    }
    for f in ["direct", "tiled", "depthwise"] {
        assert!(ran.contains(&f), "{f} did not run: {skipped:?}");
    }
}

/// A wgpu error outside wgconv's error scopes (here a buffer the caller made invalid on a
/// device wgconv opened) is logged by the device's handler, not raised as wgpu's default
/// panic; reading that buffer back is a typed error.
#[test]
fn errors_outside_scopes_do_not_panic() {
    let gpu = gpu();
    let too_big = gpu.limits().max_buffer_size.saturating_add(4);
    let buffer = gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("invalid on purpose"),
        size: too_big,
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    assert!(gpu.read_buffer::<f32>(&buffer, 0, 4).is_err());
}

/// The child's work for `a_lost_device_is_reported`: a device of its own, destroyed after
/// one forward; then the forward, a new op and a plan each report `DeviceLost`.
#[test]
fn lost_device_child() {
    if !is_child() {
        return;
    }
    let report = match lost_device_calls() {
        Ok(errors) => format!("ok {errors}"),
        Err(e) => format!("error {e:?} :: {e}"),
    };
    println!("{OUTCOME}{report}");
}

fn lost_device_calls() -> wgconv::Result<String> {
    let gpu = Gpu::new()?;
    let spec = Conv2dSpec::new(3, 8, 3);
    let w = vec![0.5; spec.weight_len()];
    let shape = Shape4::new(1, 3, 8, 8);
    let x = vec![1.0; shape.len() as usize];
    let conv = Conv2d::new(&gpu, spec, &w, None, Conv2dOptions::default())?;
    conv.forward(&x, shape)?;
    gpu.device.destroy();
    // wgpu reports the loss once its queue is empty, at the next poll.
    let _ = gpu.device.poll(wgpu::PollType::wait_indefinitely());
    let buffer = |size| {
        gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size,
            usage: wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        })
    };
    let results = [
        conv.forward(&x, shape).map(|_| ()),
        Conv2d::new(&gpu, spec, &w, None, Conv2dOptions::default()).map(|_| ()),
        conv.plan(shape, &buffer(4 * shape.len()), &buffer(4 * 8 * 36)).map(|_| ()),
    ];
    let errors: Vec<String> = results
        .into_iter()
        .map(|r| match r {
            Err(e @ Error::DeviceLost { .. }) => Ok(e.to_string()),
            other => Err(other),
        })
        .collect::<Result<_, _>>()
        .map_err(|other| Error::Tune(format!("expected DeviceLost, got {other:?}")))?;
    Ok(errors.join(" | "))
}

/// A device lost after an op was built (here destroyed) is reported as `DeviceLost` by the
/// op's next forward, a new `Conv2d` and a plan: never a panic, an `Ok` that did nothing,
/// or an error that names another cause. In a child process: the device is its own.
#[test]
fn a_lost_device_is_reported() {
    let (code, stdout, stderr) = run_child("lost_device_child", None);
    let outcome = outcome_line(&stdout).unwrap_or_default();
    assert!(code == Some(0) && outcome.starts_with("ok "), "exit {code:?}: {outcome}\n{stdout}\n{stderr}");
    assert_eq!(outcome.matches("the device was lost (Destroyed)").count(), 3, "{outcome}");
}
