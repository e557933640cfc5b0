//! `wgconv tune`: the micro-tuning stage for one shape (see `wgconv::tune`), with the
//! decision table, the tuning cache, and how long it took.

use crate::cli::{CliError, CliResult, DeviceArgs, PrecisionArg};
use crate::shape::ShapeArgs;
use std::path::PathBuf;
use std::time::Instant;
use wgconv::advanced::{
    adapter_substring, choose_adapter, default_kernel, enumerate_adapters, family_names, runtime_checks_from_env,
    stem_is_default,
};
use wgconv::tune::cache::TuningCache;
use wgconv::tune::{self, TuneOptions, TuneReport};
use wgconv::{DeviceCaps, Gpu, GpuOptions, Kernel, KernelLimits, Precision, Shape4, TileConfig};

#[derive(clap::Args)]
#[command(
    about = "Micro-tune one convolution: try nearby warp/stage counts of a tile config, keep a change only if it is clearly and stably faster",
    long_about = "Micro-tune one convolution (the seed's \"final micro-tuning\" stage).\n\n\
Around the original tile config (default: the one a fresh Conv2d of the --precision uses on this adapter: \
for f32 m64n96k16-t4x12-w4-s1 on GPUs and m64n64k16-t8x4-w4-s3 on CPU adapters; the seed's \
m32n64k32-t4x4-w4-s2 on the f16 SIMT kernel; m64n96k16-t4x12-w4-s1 on cooperative matrices) it builds up to 6 \
configs of the same kernel, the original and its neighbours (fewer than 3 where the rules leave no more: the report \
says so): stages +-1 within 2..=4, and half or double the warps only where an occupancy estimate \
(registers, workgroup memory, invocations per multiprocessor) suggests it; BLOCK sizes and the grid \
never change. Candidates are timed with GPU timestamps in interleaved rounds (A B C, B C A, ...) on \
random normal inputs. A candidate replaces the original only if its median is at least --threshold % \
faster AND stable: its inter-quartile range lies entirely below the original's (q3 < original q1).\n\n\
The decision is stored in the tuning cache (WGCONV_CACHE_DIR/tuning.json, else \
<platform cache dir>/wgconv/tuning.json, e.g. ~/.cache/wgconv/tuning.json on Linux), keyed by adapter, driver, backend, wgconv version, shader hash, shape and kernel (each precision's own); a \
Conv2d built with tuning_key_input (and `wgconv run`) uses it, also at batches within 2x of the tuned one. A later `wgconv tune` of the same shape \
and original answers from the cache without opening a device; --force measures again.\n\n\
Default shape: a generic 3x3 layer (64->64, 56x56, stride 1, padding 1 (same), bias); --preset alexnet-conv1 \
for AlexNet conv1 (3->96, 11x11, stride 4, padding 2, bias, 224x224). N = 256 on a GPU, N = 2 on a CPU \
adapter (lavapipe runs ~1 GFLOP/s).",
    after_help = "Examples:\n  wgconv tune\n  wgconv tune --force --threshold 1.5 --rounds 21 --json tune.json\n  \
wgconv tune --config m64n64k16-t4x8-w4-s3\n  wgconv tune --precision f16x3\n  \
wgconv tune --precision f16 --config coop-f16:m64n96k16-t4x12-w4-s1\n  \
wgconv bench --configs m32n64k32-t4x4-w4-s2,m64n64k16-t8x4-w4-s3 --json b.json; wgconv tune --config-from b.json\n  \
wgconv tune --preset alexnet-conv1\n  wgconv tune --batch 8 --in-channels 128 --height 28 --width 28 --out-channels 128"
)]
pub struct Args {
    #[command(flatten)]
    shape: ShapeArgs,
    /// The original tile config, e.g. m64n64k16-t4x8-w4-s3, run by the precision's default
    /// family on this adapter; or a tiled kernel's full name, e.g. tiled-f16:m64n64k16-t4x8-w4-s3
    /// (default: the precision's default kernel on this adapter, `wgconv info` names it)
    #[arg(long, value_name = "NAME", conflicts_with = "config_from")]
    config: Option<String>,
    /// Start from the fastest correct kernel of a `wgconv bench --json` report (of the
    /// --precision, with a tile config), e.g. the winner of a tile-size sweep on this shape
    #[arg(long, value_name = "FILE")]
    config_from: Option<std::path::PathBuf>,
    /// The precision to tune: f32, f16 (cooperative matrices where the device has them,
    /// else the f16 SIMT kernel) or f16x3 (cooperative matrices only). Each precision's
    /// decision is cached on its own
    #[arg(long, value_enum, default_value = "f32")]
    precision: PrecisionArg,
    /// Minimum median gain to replace the original, percent (1-2)
    #[arg(long, value_name = "PCT", default_value_t = tune::DEFAULT_THRESHOLD_PCT)]
    threshold: f64,
    /// Interleaved timing rounds (each times every candidate once; at least 5)
    #[arg(long, value_name = "R", default_value_t = 15)]
    rounds: u32,
    /// Untimed warm-up runs per candidate
    #[arg(long, value_name = "N", default_value_t = 3)]
    warmup: u32,
    /// Ignore the cached decision and measure again (the new decision is stored)
    #[arg(long)]
    force: bool,
    /// Also write the report as JSON to this file
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    #[command(flatten)]
    device: DeviceArgs,
}

#[derive(serde::Serialize)]
struct JsonOut<'a> {
    from_cache: bool,
    /// Cold: the whole command (adapter, device, buffers, builds, rounds). Cached: the lookup
    /// including adapter enumeration.
    wall_ms: f64,
    /// Of which: wgpu instance creation and adapter enumeration.
    adapter_enumeration_ms: f64,
    cache_file: Option<String>,
    stored: bool,
    store_error: Option<String>,
    report: &'a TuneReport,
}

pub fn main(a: Args) -> CliResult {
    let t0 = Instant::now();
    // 1. Flags.
    if !tune::THRESHOLD_RANGE_PCT.contains(&a.threshold) {
        return Err(CliError(format!("--threshold {}: must be within 1-2 (percent)", a.threshold)));
    }
    if a.rounds < tune::MIN_ROUNDS {
        return Err(CliError(format!("--rounds {}: at least {} are needed for quartiles", a.rounds, tune::MIN_ROUNDS)));
    }
    let spec = a.shape.spec()?;
    let precision = Precision::from(a.precision);
    let from_bench = a.config_from.as_deref().map(|path| bench_winner(path, precision)).transpose()?;
    if let (Some(name), Some(path)) = (&from_bench, &a.config_from) {
        eprintln!(
            "wgconv: --config-from {}: starting from {name}, the report's fastest correct kernel",
            path.display()
        );
    }
    let config = a.config.as_deref().or(from_bench.as_deref()).map(|name| parse_config(name, precision)).transpose()?;
    let (height, width) = a.shape.hw();
    let input = |n: u32| Shape4::new(n, spec.in_channels, height, width);
    if let Some(b) = a.shape.batch {
        spec.problem(input(b))?;
    }

    // 2. The adapter (no device yet: a cached decision needs none).
    let backends = a.device.backends();
    let t_enum = Instant::now();
    let adapters = enumerate_adapters(backends);
    let enum_ms = t_enum.elapsed().as_secs_f64() * 1e3;
    let infos: Vec<_> = adapters.iter().map(|x| x.get_info()).collect();
    let (idx, _) = choose_adapter(&infos, adapter_substring(a.device.adapter.as_deref()).as_deref())
        .map_err(|e| a.device.explain(e))?;
    let info = infos[idx].clone();
    let limits = KernelLimits::from(&adapters[idx].limits());
    // The device opened below, as the adapter says it would be (cooperative matrices opted
    // in for the f16 precisions), and the precision's kernel on it.
    let caps = DeviceCaps::of_adapter(&adapters[idx], precision != Precision::F32);
    let default = default_kernel(&caps, precision)?;
    let original = match config {
        Some(Config::Tile(tile)) => default.with_tile(tile).ok_or_else(|| {
            CliError(format!("--config {tile}: the {precision} default kernel {default} takes no tile config"))
        })?,
        Some(Config::Kernel(kernel)) => {
            // A family named outright may be one this adapter lacks: say so before a device opens.
            kernel
                .check(&spec, &caps)
                .map_err(|e| CliError(format!("--config {}: {e}", a.config.as_deref().unwrap_or_default())))?;
            kernel
        }
        None => default,
    };
    if let (Some(name), Err(e)) = (&a.config, original.check_shape()) {
        return Err(CliError(format!("--config {name}: {e}")));
    }
    tune::check_tunable(&original)?;
    if original.family() == "coop-f16" && stem_is_default(&caps, &spec) {
        eprintln!(
            "wgconv: note: for this convolution an f16 Conv2d runs the stem kernel ({}), which the tuner \
             does not tune; this tunes {}, the f16 kernel of the convolutions the stem kernel does not take",
            Kernel::parse("coop-stem-f16")?,
            original.family()
        );
    }
    let is_cpu = info.device_type == wgpu::DeviceType::Cpu;
    let batch = a.shape.batch.unwrap_or(if is_cpu { 2 } else { 256 });
    let problem = spec.problem(input(batch))?;
    if a.shape.batch.is_none() && is_cpu {
        eprintln!(
            "wgconv: {} is a CPU adapter: tuning a batch of N = 2 instead of 256 (set --batch to change)",
            info.name
        );
    }
    // As Gpu::with_options decides it (runtime checks key the cache).
    let runtime_checks = runtime_checks_from_env();
    let cache = TuningCache::open_default();
    if cache.is_none() {
        eprintln!("wgconv: no cache directory (set WGCONV_CACHE_DIR): the decision will not be kept");
    }

    // 3. The cache.
    if !a.force {
        if let Some(cache) = &cache {
            if let Some((d, report)) = tune::lookup(cache, &info, &limits, runtime_checks, &problem, &original) {
                let wall = t0.elapsed().as_secs_f64() * 1e3;
                match &report {
                    Some(r) => {
                        print!("{}", r.header());
                        println!();
                        print!("{}", r.table());
                        println!();
                        println!("{}", r.decision_line());
                    }
                    None => println!(
                        "decision: {} (original {}, gain {:.2}%, tuned {})",
                        d.config, d.original, d.gain_pct, d.tuned_at
                    ),
                }
                println!(
                    "from the cache {} (tuned {}); lookup took {wall:.1} ms from the start of `wgconv tune`, \
                     of which {enum_ms:.1} ms wgpu instance + adapter enumeration (driver start-up); no device opened \
                     (--force measures again)",
                    cache.path().display(),
                    d.tuned_at
                );
                if let (Some(path), Some(r)) = (&a.json, &report) {
                    write_json(
                        path,
                        &JsonOut {
                            from_cache: true,
                            wall_ms: wall,
                            adapter_enumeration_ms: enum_ms,
                            cache_file: Some(cache.path().display().to_string()),
                            stored: true,
                            store_error: None,
                            report: r,
                        },
                    )?;
                }
                return Ok(());
            }
        }
    }

    // 4. Cold: a device, the stage, the decision.
    // The same choice, restricted to the chosen adapter's backend.
    let options = GpuOptions::default()
        .adapter(a.device.adapter.clone())
        .backends(wgpu::Backends::from(info.backend))
        .cooperative_matrix(precision != Precision::F32);
    let gpu = Gpu::with_options(options)?;
    if gpu.info.name != info.name {
        return Err(CliError(format!("opened {} but chose {}: pass --adapter", gpu.info.name, info.name)));
    }

    let opts = TuneOptions::default()
        .threshold_pct(a.threshold)
        .rounds(a.rounds)
        .warmup(a.warmup)
        .reps(0) // force: the lookup above already missed (or --force)
        .force(true)
        .cache(cache.clone());
    let bar = indicatif::ProgressBar::new(1);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} [{bar:30}] {pos}/{len} {msg} ({elapsed})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let mut progress = |done: u64, total: u64, msg: &str| {
        bar.set_length(total);
        bar.set_position(done);
        bar.set_message(msg.to_string());
    };
    let outcome = tune::tune(&gpu, &problem, &original, &opts, &mut progress);
    bar.finish_and_clear();
    let outcome = outcome?;
    let wall = t0.elapsed().as_secs_f64() * 1e3;
    let r = &outcome.report;
    print!("{}", r.header());
    println!();
    print!("{}", r.table());
    println!();
    println!("{}", r.decision_line());
    let measured = r.rows.iter().filter(|x| x.median_ms.is_some()).count();
    let candidates = r.rows.iter().filter(|x| x.verdict != tune::Verdict::Skipped).count();
    println!(
        "cold tune: {:.2} s in all ({} candidates, {} measured; stage {:.2} s: builds, warm-up, {} rounds x {} run(s))",
        wall / 1e3,
        candidates,
        measured,
        r.elapsed_ms / 1e3,
        r.rounds,
        r.reps
    );
    match (&outcome.store_error, &cache) {
        (None, Some(c)) => println!("stored in {}", c.path().display()),
        (Some(e), _) => eprintln!("wgconv: the decision was not stored: {e}"),
        (None, None) => {}
    }
    if let Some(path) = &a.json {
        write_json(
            path,
            &JsonOut {
                from_cache: false,
                wall_ms: wall,
                adapter_enumeration_ms: enum_ms,
                cache_file: cache.as_ref().map(|c| c.path().display().to_string()),
                stored: outcome.store_error.is_none(),
                store_error: outcome.store_error.clone(),
                report: r,
            },
        )?;
    }
    Ok(())
}

/// The fastest correct kernel of a `wgconv bench --json` report that computes in
/// `precision` and has a tile config (what the tuner can start from), by its full name.
fn bench_winner(path: &std::path::Path, precision: Precision) -> CliResult<String> {
    let what = |e: String| CliError(format!("--config-from {}: {e}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| what(e.to_string()))?;
    let report: serde_json::Value = serde_json::from_str(&text).map_err(|e| what(e.to_string()))?;
    let results = report["results"].as_array().ok_or_else(|| what("no \"results\" list: not a bench report".into()))?;
    results
        .iter()
        .filter(|r| r["outcome"]["status"] == "ok" && !r["config"].is_null())
        .filter_map(|r| Some((r["kernel"].as_str()?, r["outcome"]["time_ms"]["median"].as_f64()?)))
        .filter(|(name, _)| Kernel::parse(name).is_ok_and(|k| k.precision() == precision))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(name, _)| name.to_string())
        .ok_or_else(|| what(format!("no correct {precision} kernel with a tile config in the report")))
}

/// What `--config` names.
enum Config {
    /// A tile config, tuned in the precision's default family on the adapter.
    Tile(TileConfig),
    /// A kernel by its full name (`family:config`).
    Kernel(Kernel),
}

/// Parses `--config`: a tile config, or a kernel's full name at the tuned precision.
fn parse_config(name: &str, precision: Precision) -> CliResult<Config> {
    let family = name.split_once(':').map_or(name, |(f, _)| f);
    if name.contains(':') || family_names().contains(&family) {
        let kernel = Kernel::parse(name).map_err(|e| CliError(format!("--config {name}: {e}")))?;
        let p = kernel.precision();
        if p != precision {
            return Err(CliError(format!("--config {name} computes in {p}, not --precision {precision}")));
        }
        return Ok(Config::Kernel(kernel));
    }
    TileConfig::parse(name).map(Config::Tile).map_err(|e| CliError(format!("--config {name}: {e}")))
}

fn write_json(path: &std::path::Path, out: &JsonOut<'_>) -> CliResult {
    let text = serde_json::to_string_pretty(out)?;
    std::fs::write(path, text + "\n").map_err(|e| CliError(format!("--json {}: {e}", path.display())))
}
