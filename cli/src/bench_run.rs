//! The tile-size benchmark behind `wgconv bench`: one problem, a declared list of kernels,
//! each checked against the CPU reference on sampled images (NaN-poisoned output) and timed
//! with GPU timestamps. `wgconv bench` prints, saves and charts what this returns.

use rand::{Rng, SeedableRng};
use serde::Serialize;
use wgconv::advanced::AdapterSummary;
use wgconv::half::f16;
use wgconv::tune::timing::{keep_busy, time_plan, Clock, Summary};
use wgconv::{
    reference, Activation, ConfigSource, Conv2d, Conv2dOptions, ConvPlan, ConvProblem, Error, Gpu, Kernel, Precision,
    Result, Selection, Storage, TileConfig,
};

/// Relative L2 error above which a config is marked wrong (fp32 accumulation lands near 1e-7).
pub const F32_TOLERANCE: f64 = 1e-5;
/// The same for f16 operands with f32 accumulation (they land near 3e-4 on normal data).
pub const F16_TOLERANCE: f64 = 1e-3;
/// The same for the f16x3 kernel: the f32 class (it lands at 1.3e-7 on AlexNet conv1, where
/// the f32 FMA kernel gives 3.4e-7).
pub const F16X3_TOLERANCE: f64 = 1e-6;

/// The larger of two relative errors, NaN if either is: `f64::max` drops a NaN, and a NaN
/// error is an output the kernel never wrote (it stays NaN-poisoned) or a NaN it made up.
/// (A kernel with its stores removed once passed a check that used `f64::max`.)
fn worst_error(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// The tolerance of a kernel's precision.
pub fn tolerance(p: Precision) -> f64 {
    match p {
        Precision::F32 => F32_TOLERANCE,
        Precision::F16Accum32 => F16_TOLERANCE,
        Precision::F16x3 => F16X3_TOLERANCE,
        // A precision newer than this tool: the f16 bound, the loosest it knows.
        _ => F16_TOLERANCE,
    }
}

/// The tolerance of a kernel's precision on tensors stored as `storage`: f16 storage rounds
/// the output to f16 (about 3e-4 relative), whatever the arithmetic.
pub fn check_tolerance(p: Precision, storage: Storage) -> f64 {
    match storage {
        Storage::F32 => tolerance(p),
        _ => tolerance(p).max(F16_TOLERANCE),
    }
}

/// The fewest bytes a kernel must move: input and output at the storage's element size,
/// weights and bias (f32 on the device) read once.
pub fn min_bytes(problem: &ConvProblem, storage: Storage) -> f64 {
    let bias = if problem.spec.bias { problem.spec.out_channels as u64 } else { 0 };
    let tensors = (problem.input.len() + problem.output.len()) as f64 * storage.element_bytes() as f64;
    tensors + 4.0 * (problem.spec.weight_len() as u64 + bias) as f64
}

/// Bytes of `elems` elements of `storage` in a buffer: whole 32-bit words (`Gpu`'s buffers
/// round them up to whole granules, [`wgconv::BUFFER_GRANULE`]).
fn buffer_bytes(elems: u64, storage: Storage) -> u64 {
    (elems * storage.element_bytes()).next_multiple_of(4)
}

/// Batch used on CPU adapters (lavapipe) when the caller gives none.
pub const CPU_BATCH: u32 = 2;

/// How long the GPU runs the first kernel before the first timing (not on CPU adapters).
pub const SPIN_UP: std::time::Duration = std::time::Duration::from_millis(300);

/// How long the GPU runs each kernel right before its timed runs (not on CPU adapters): the
/// host's checks and read-backs between configs leave the GPU idle long enough for its
/// clock to drop (see `keep_busy`).
pub const WARM_BUSY: std::time::Duration = std::time::Duration::from_millis(50);

#[derive(Debug, Clone)]
pub struct BenchOptions {
    pub problem: ConvProblem,
    /// The kernels, the baseline first; each runs at its own precision.
    pub kernels: Vec<Kernel>,
    pub warmup: u32,
    pub runs: u32,
    /// Time in interleaved rounds (one run of each kernel per round) rather than each
    /// kernel's runs back to back.
    pub interleave: bool,
    pub activation: Activation,
    /// Peak of the units the kernels run on, for the "% of peak" column (TFLOP/s); `None`:
    /// [`known_peak`] per kernel, where the adapter is in its table.
    pub peak_tflops: Option<f64>,
    pub seed: u64,
    /// Which images the CPU reference checks (it is the slow part on large layers).
    pub check: CheckImages,
    /// The tensors' memory layout.
    pub layout: wgconv::Layout,
    /// The tensors' element type.
    pub storage: Storage,
}

/// The images of the batch whose output is checked against the CPU reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckImages {
    /// The first and the last (`wgconv bench` on one problem: a kernel that mishandles the
    /// batch offset shows on the last).
    FirstAndLast,
    /// The first only (`wgconv bench --model`: one reference per layer).
    First,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome {
    /// Correct and timed. `samples_ms`: every timed run, in run order (a bimodal row shows
    /// its pattern there).
    Ok {
        time_ms: Summary,
        tflops: f64,
        pct_of_peak: Option<f64>,
        speedup_vs_baseline: Option<f64>,
        rel_l2: f64,
        samples_ms: Vec<f64>,
    },
    /// The device or the convolution cannot run it (reason from `Kernel::check`).
    Refused { reason: String },
    /// Ran but disagreed with the reference: never ranked.
    Wrong { rel_l2: f64, time_ms: Option<Summary> },
    /// A wgpu error (pipeline, dispatch).
    Failed { reason: String },
}

#[derive(Debug, Clone, Serialize)]
pub struct KernelResult {
    /// The kernel's name, `family:config`.
    pub kernel: String,
    /// Its family (`tiled`, `tiled-f16`, `coop-f16`, `coop-f16x3`, `coop-band-f16`,
    /// `coop-stem-f16`, `direct`).
    pub family: &'static str,
    /// The tile config of the families with the tile vocabulary (`tiled`, `tiled-f16`,
    /// `coop-f16`, `coop-f16x3`); `None` for the others (their config is in `kernel`).
    pub config: Option<TileConfig>,
    pub outcome: Outcome,
}

impl KernelResult {
    pub fn median_ms(&self) -> Option<f64> {
        match &self.outcome {
            Outcome::Ok { time_ms, .. } => Some(time_ms.median),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub adapter: AdapterSummary,
    pub date: String,
    pub wgconv_version: String,
    pub problem: ConvProblem,
    pub problem_text: String,
    pub gflop: f64,
    pub min_mbytes: f64,
    pub clock: Option<Clock>,
    pub warmup: u32,
    pub runs: u32,
    pub sampled_images: Vec<u32>,
    pub baseline: String,
    pub peak_tflops: Option<f64>,
    /// What `--configs auto` stood for: the kernel a `Conv2d` with default options (at the
    /// benchmark's precision and activation) selects here, and why; `None` without `auto`.
    pub auto: Option<AutoSelection>,
    pub results: Vec<KernelResult>,
}

/// The selection of a default `Conv2d` (`--configs auto`).
#[derive(Debug, Clone, Serialize)]
pub struct AutoSelection {
    pub kernel: String,
    pub source: ConfigSource,
    pub reason: String,
}

impl From<&Selection> for AutoSelection {
    fn from(s: &Selection) -> Self {
        AutoSelection { kernel: s.kernel.to_string(), source: s.source, reason: s.reason.clone() }
    }
}

impl BenchReport {
    /// Correct results, fastest first.
    pub fn ranked(&self) -> Vec<&KernelResult> {
        let mut v: Vec<_> = self.results.iter().filter(|r| r.median_ms().is_some()).collect();
        v.sort_by(|a, b| a.median_ms().unwrap().total_cmp(&b.median_ms().unwrap()));
        v
    }
}

/// The checked kernels' timings in interleaved rounds: each one's warm-up runs first, then
/// `runs` rounds of one timed run of each, the first kernel of a round rotating. One entry
/// per kernel (an error for one that was not checked or failed to time).
fn interleaved_times(
    gpu: &Gpu,
    checked: &[std::result::Result<(Conv2d, ConvPlan, f64), Outcome>],
    opts: &BenchOptions,
    mut round_started: impl FnMut(u32),
) -> Vec<Result<(Vec<f64>, Clock)>> {
    let mut times: Vec<Result<(Vec<f64>, Clock)>> = checked
        .iter()
        .map(|c| match c {
            Ok((_, plan, _)) => time_plan(gpu, plan, opts.warmup, 1).map(|(_, clock)| (Vec::new(), clock)),
            Err(_) => Err(Error::Tune("not checked".into())),
        })
        .collect();
    let n = checked.len().max(1);
    for round in 0..opts.runs {
        round_started(round);
        for j in 0..n {
            let i = (j + round as usize) % n;
            let (Some(Ok((_, plan, _))), Some(Ok((samples, clock)))) = (checked.get(i), times.get_mut(i)) else {
                continue;
            };
            match time_plan(gpu, plan, 0, 1) {
                Ok((t, c)) => {
                    samples.extend(t);
                    *clock = c;
                }
                Err(e) => times[i] = Err(e),
            }
        }
    }
    times
}

/// A known datasheet peak (TFLOP/s, dense) for the units a kernel runs on: the FP32 SIMT
/// rate for the f32 and f16-SIMT kernels (the latter rounds operands but multiplies in f32),
/// the f16 tensor rate with f32 accumulation for the cooperative-matrix kernels, a third of
/// it for f16x3 (three f16 products per useful multiply-add).
pub fn known_peak(adapter_name: &str, kernel: &Kernel) -> Option<f64> {
    let rates = wgconv::declared_rates(adapter_name)?;
    if !kernel.family().starts_with("coop") {
        return Some(rates.fp32_tflops);
    }
    // Three f16 products per useful multiply-add: f16x3, and F32 on the matrix units.
    let products = if kernel.precision() == Precision::F16Accum32 { 1.0 } else { 3.0 };
    Some(rates.f16_matrix_tflops / products)
}

/// Refuses a buffer the device cannot create (`create_buffer_init` would panic instead).
fn check_buffer(gpu: &Gpu, what: &str, bytes: u64) -> Result<()> {
    let cap = gpu.limits().max_buffer_size;
    if bytes > cap {
        return Err(Error::TooLarge(format!("{what} needs {bytes} B, over the device's {cap} B")));
    }
    Ok(())
}

/// A compute pipeline of WGSL `source`'s `main`, its bind-group layout derived from the shader
/// (call inside [`scoped`], which catches what wgpu reports).
pub(crate) fn wgsl_pipeline(dev: &wgpu::Device, label: &str, source: &str) -> wgpu::ComputePipeline {
    let module = dev.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some(label),
        source: wgpu::ShaderSource::Wgsl(source.into()),
    });
    dev.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(label),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    })
}

/// The first validation or out-of-memory error of the wgpu calls in `f`, naming `stage`.
pub(crate) fn scoped<T>(device: &wgpu::Device, stage: &'static str, f: impl FnOnce() -> T) -> Result<T> {
    let oom = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
    let validation = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let value = f();
    let validation = pollster::block_on(validation.pop());
    let oom = pollster::block_on(oom.pop());
    match (oom, validation) {
        (Some(e), _) => {
            Err(Error::OutOfMemory { stage, what: "device resources".into(), bytes: 0, message: e.to_string() })
        }
        (None, Some(e)) => Err(Error::Wgpu { stage, message: e.to_string() }),
        (None, None) => Ok(value),
    }
}

fn randn(len: usize, rng: &mut rand::rngs::StdRng) -> Vec<f32> {
    (0..len).map(|_| rng.sample::<f32, _>(rand_distr::StandardNormal)).collect()
}

/// Runs the sweep; `progress(i, n, kernel)` is called before each kernel. `auto`: the
/// selection `--configs auto` stood for, reported beside the results.
pub fn run(
    gpu: &Gpu,
    opts: &BenchOptions,
    auto: Option<&Selection>,
    mut progress: impl FnMut(usize, usize, &str),
) -> Result<BenchReport> {
    // Re-derive the problem: `ConvProblem`'s fields are public and `with_batch` does not check.
    let problem = opts.problem.spec.problem(opts.problem.input)?;
    let spec = problem.spec;
    let storage = opts.storage;
    let element = storage.element_bytes();
    check_buffer(gpu, "the benchmark input", problem.input.len().saturating_mul(element))?;
    check_buffer(gpu, "the benchmark output", problem.output.len().saturating_mul(element))?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(opts.seed);
    let mut x = randn(problem.input.len() as usize, &mut rng);
    if storage == Storage::F16 {
        // The reference sees the input the kernels see: f16 values.
        x.iter_mut().for_each(|v| *v = f16::from_f32(*v).to_f32());
    }
    let w = randn(spec.weight_len(), &mut rng);
    let b = spec.bias.then(|| randn(spec.out_channels as usize, &mut rng));

    // The reference on the first and last image.
    let last = problem.input.n - 1;
    let sampled: Vec<u32> = if last == 0 || opts.check == CheckImages::First { vec![0] } else { vec![0, last] };
    let per_in = problem.input.per_image() as usize;
    let per_out = problem.output.per_image() as usize;
    let want: Vec<Vec<f32>> = sampled
        .iter()
        .map(|&i| {
            let one = problem.with_batch(1);
            let mut r = reference::conv2d(&one, &x[i as usize * per_in..][..per_in], &w, b.as_deref())?;
            if opts.activation == Activation::Relu {
                r.iter_mut().for_each(|v| *v = reference::relu(*v));
            }
            if opts.layout == wgconv::Layout::Nhwc {
                r = reference::to_nhwc(&r, one.output)?;
            }
            Ok(r)
        })
        .collect::<Result<_>>()?;

    let x = match opts.layout {
        wgconv::Layout::Nhwc => reference::to_nhwc(&x, problem.input)?,
        _ => x,
    };
    let x_bytes: Vec<u8> = match storage {
        Storage::F32 => bytemuck::cast_slice(&x).to_vec(),
        _ => {
            let bits: Vec<u16> = x.iter().map(|&v| f16::from_f32(v).to_bits()).collect();
            bytemuck::cast_slice(&bits).to_vec()
        }
    };
    drop(x);
    let dev = &gpu.device;
    // Through `Gpu`, whose buffers are whole granules: the timed tensors then start at the
    // alignment the ones before them left (BENCHMARKS.md, "Buffer placement").
    let in_buf = gpu.buffer_init("bench input", &x_bytes, wgpu::BufferUsages::STORAGE)?;
    let out_buf = gpu.create_buffer(
        "bench output",
        buffer_bytes(problem.output.len(), storage),
        wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
    )?;
    drop(x_bytes);
    // A sampled image's output as whole words (with f16 storage an image may start or end
    // mid-word; the neighbour's half is rewritten by the run anyway): the byte range, and
    // where the image starts in it.
    let image_words = |img: u32| {
        let start = img as u64 * per_out as u64 * element;
        let at = start - start % 4;
        let end = (start + per_out as u64 * element).next_multiple_of(4);
        (at, end - at, start - at)
    };
    // NaN in both halves of a word for f16.
    let poison_word: u32 = match storage {
        Storage::F32 => f32::NAN.to_bits(),
        _ => 0x7e00_7e00,
    };

    let baseline = opts.kernels.first().map(|k| k.to_string()).unwrap_or_default();
    let mut results = Vec::new();
    let mut clock = None;
    // Two passes: every kernel is built, run once and checked before any is timed, so that
    // the driver's compilation of one pipeline (possibly finishing in the background) cannot
    // fall into another's timed runs (it shifted the timings of the kernels after it).
    let n = opts.kernels.len();
    let checked: Vec<std::result::Result<(Conv2d, ConvPlan, f64), Outcome>> = opts
        .kernels
        .iter()
        .enumerate()
        .map(|(i, kernel)| {
            progress(i, 2 * n, &format!("checking {kernel}"));
            if let Err(e) = kernel.check(&spec, gpu.caps()) {
                return Err(Outcome::Refused {
                    reason: match e {
                        Error::KernelRefused { reason, .. } => reason,
                        e => e.to_string(),
                    },
                });
            }
            let check = || -> Result<(Conv2d, ConvPlan, f64)> {
                let options = Conv2dOptions::default()
                    .kernel(kernel.clone())
                    .activation(opts.activation)
                    .precision(kernel.precision())
                    .layout(opts.layout)
                    .storage(storage);
                let conv = Conv2d::new(gpu, spec, &w, b.as_deref(), options)?;
                let plan = conv.plan(problem.input, &in_buf, &out_buf)?;
                for &img in &sampled {
                    let (at, len, _) = image_words(img);
                    let poison = vec![poison_word; (len / 4) as usize];
                    gpu.queue.write_buffer(&out_buf, at, bytemuck::cast_slice(&poison));
                }
                let mut enc = dev.create_command_encoder(&Default::default());
                plan.encode(&mut enc, None);
                gpu.queue.submit([enc.finish()]);
                let mut err: f64 = 0.0;
                for (&img, want) in sampled.iter().zip(&want) {
                    let (at, len, skip) = image_words(img);
                    let words = gpu.read_buffer::<u8>(&out_buf, at, len as usize)?;
                    let image = &words[skip as usize..][..per_out * element as usize];
                    let got: Vec<f32> = match storage {
                        Storage::F32 => {
                            image.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
                        }
                        _ => image
                            .chunks_exact(2)
                            .map(|b| f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32())
                            .collect(),
                    };
                    err = worst_error(err, reference::relative_l2(&got, want));
                }
                Ok((conv, plan, err))
            };
            check().map_err(|e| Outcome::Failed { reason: e.to_string() })
        })
        .collect();
    // The GPU idled through most of the checks: bring its clocks up before the first timing,
    // then time that plan once and drop the result.
    if let Some(Ok((_, plan, _))) = checked.iter().find(|c| c.is_ok()).filter(|_| !gpu.is_cpu()) {
        // Failures here show again, as that config's, when it is timed for real.
        let _ = keep_busy(gpu, plan, SPIN_UP);
        let _ = time_plan(gpu, plan, opts.warmup, opts.runs);
    }
    let mut rounds = match opts.interleave {
        true => Some(interleaved_times(gpu, &checked, opts, |r| progress(n, 2 * n, &format!("round {r}")))),
        false => None,
    };
    for (i, (kernel, checked)) in opts.kernels.iter().zip(checked).enumerate() {
        progress(n + i, 2 * n, &format!("timing {kernel}"));
        let outcome = match checked {
            Err(outcome) => outcome,
            Ok((conv, plan, err)) => (|| -> Result<Outcome> {
                let (times, c) = match rounds.as_mut() {
                    Some(rounds) => std::mem::replace(&mut rounds[i], Err(Error::Tune("timed once".into())))?,
                    None => {
                        if !gpu.is_cpu() {
                            keep_busy(gpu, &plan, WARM_BUSY)?;
                        }
                        time_plan(gpu, &plan, opts.warmup, opts.runs)?
                    }
                };
                clock = Some(c);
                let time = Summary::of(&times).ok_or_else(|| Error::Tune("no timings".into()))?;
                if conv.take_range_flag()? {
                    return Ok(Outcome::Failed { reason: "input beyond f16's range".into() });
                }
                if err.is_nan() || err > check_tolerance(kernel.precision(), storage) {
                    return Ok(Outcome::Wrong { rel_l2: err, time_ms: Some(time) });
                }
                let tflops = problem.flops() / (time.median * 1e-3) / 1e12;
                let peak = opts.peak_tflops.or_else(|| known_peak(&gpu.info.name, kernel));
                Ok(Outcome::Ok {
                    time_ms: time,
                    tflops,
                    pct_of_peak: peak.map(|p| 100.0 * tflops / p),
                    speedup_vs_baseline: None,
                    rel_l2: err,
                    samples_ms: times,
                })
            })()
            .unwrap_or_else(|e| Outcome::Failed { reason: e.to_string() }),
        };
        results.push(KernelResult {
            kernel: kernel.to_string(),
            family: kernel.family(),
            config: kernel.tile(),
            outcome,
        });
    }
    let base_ms = results.first().and_then(|r| r.median_ms());
    for r in &mut results {
        if let Outcome::Ok { time_ms, speedup_vs_baseline, .. } = &mut r.outcome {
            *speedup_vs_baseline = base_ms.map(|b| b / time_ms.median);
        }
    }
    Ok(BenchReport {
        adapter: gpu.summary(),
        date: chrono::Utc::now().to_rfc3339(),
        wgconv_version: env!("CARGO_PKG_VERSION").into(),
        problem,
        problem_text: format!(
            "{problem}{}{}",
            match opts.layout {
                wgconv::Layout::Nhwc => " NHWC",
                _ => "",
            },
            match storage {
                Storage::F16 => " f16 storage",
                _ => "",
            }
        ),
        gflop: problem.flops() / 1e9,
        min_mbytes: min_bytes(&problem, storage) / 1e6,
        clock,
        warmup: opts.warmup,
        runs: opts.runs,
        sampled_images: sampled,
        baseline,
        peak_tflops: opts.peak_tflops,
        auto: auto.map(AutoSelection::from),
        results,
    })
}

/// A plain-text table, fastest first, then the wrong, refused and failed rows.
pub fn table(report: &BenchReport) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} | {} {} | {} | {:.3} GFLOP | {}",
        report.adapter.name,
        report.adapter.backend,
        report.adapter.driver_info,
        report.problem_text,
        report.gflop,
        match report.clock {
            Some(Clock::GpuTimestamps) => "GPU timestamps",
            Some(Clock::HostWallClock) => "host wall clock (no timestamp queries)",
            Some(_) => "another clock",
            None => "no timings",
        }
    );
    let _ = writeln!(
        s,
        "{:<34} {:>9} {:>9} {:>9} {:>8} {:>7} {:>8} {:>9}",
        "kernel", "median ms", "min ms", "max ms", "TFLOP/s", "% peak", "vs base", "rel L2"
    );
    for r in report.ranked() {
        if let Outcome::Ok { time_ms, tflops, pct_of_peak, speedup_vs_baseline, rel_l2, .. } = &r.outcome {
            let _ = writeln!(
                s,
                "{:<34} {:>9.3} {:>9.3} {:>9.3} {:>8.3} {:>7} {:>8} {:>9.1e}",
                r.kernel,
                time_ms.median,
                time_ms.min,
                time_ms.max,
                tflops,
                pct_of_peak.map_or("-".into(), |p| format!("{p:.1}")),
                speedup_vs_baseline.map_or("-".into(), |x| format!("{x:.2}x")),
                rel_l2
            );
        }
    }
    for r in &report.results {
        match &r.outcome {
            Outcome::Ok { .. } => {}
            Outcome::Wrong { rel_l2, time_ms } => {
                let _ = writeln!(
                    s,
                    "{:<34} WRONG rel L2 {rel_l2:.2e} (median {:.3} ms, not ranked)",
                    r.kernel,
                    time_ms.map_or(f64::NAN, |t| t.median)
                );
            }
            Outcome::Refused { reason } => {
                let _ = writeln!(s, "{:<34} refused: {reason}", r.kernel);
            }
            Outcome::Failed { reason } => {
                let _ = writeln!(s, "{:<34} failed: {reason}", r.kernel);
            }
        }
    }
    if let Some(a) = &report.auto {
        let _ = writeln!(s, "auto = {} ({}: {})", a.kernel, source_name(a.source), a.reason);
    }
    s
}

/// Where a selection came from, in the words the tables use.
pub fn source_name(source: ConfigSource) -> &'static str {
    match source {
        ConfigSource::Explicit => "explicit",
        ConfigSource::TuningCache => "tuning cache",
        ConfigSource::Default => "default",
        ConfigSource::Fallback => "fallback",
        ConfigSource::Autotune => "autotune",
        _ => "other",
    }
}

/// The device's memory bandwidth as a large copy by a compute shader measures it.
#[derive(Debug, Clone, Serialize)]
pub struct Bandwidth {
    /// Bytes per copy (each is read once and written once).
    pub bytes: u64,
    /// Time per copy over the timed copies.
    pub time_ms: Summary,
    /// `2 × bytes / median time`, GB/s (10⁹ B/s).
    pub gb_per_s: f64,
    pub clock: Clock,
}

/// The bandwidth kernel: a grid-stride copy in 16-byte words, the widest loads and stores
/// WGSL has, as the convolution kernels' vector loads would see the memory. A
/// `copy_buffer_to_buffer` is not what a kernel sees: on the H100 through Vulkan it ran at
/// about 850 GB/s where CUDA's copy reaches about 3000, which made every memory-bound
/// layer look closer to its floor than it was.
const COPY_WGSL: &str = "
@group(0) @binding(0) var<storage, read> src: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<u32>>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let n = arrayLength(&src);
    let stride = nwg.x * 256u;
    for (var i = gid.x; i < n; i += stride) {
        dst[i] = src[i];
    }
}
";

/// Workgroups of the bandwidth kernel: enough to keep every unit of a large GPU loading
/// (each invocation then copies several words).
const COPY_WORKGROUPS: u32 = 8192;

/// Measures the memory bandwidth with `copies` timed compute-shader copies of `bytes`
/// (clamped to the device's largest storage binding) after as many untimed ones, all in one
/// submission, each in its own compute pass with timestamps at its beginning and end; the
/// copies alternate direction (A→B, B→A). Bandwidth = 2 × bytes / median.
pub fn measure_bandwidth(gpu: &Gpu, bytes: u64, copies: u32) -> Result<Bandwidth> {
    let copies = copies.clamp(1, wgconv::tune::timing::MAX_TIMED_RUNS);
    let limits = gpu.limits();
    let bytes = bytes.min(limits.max_buffer_size).min(limits.max_storage_buffer_binding_size) / 16 * 16;
    if bytes == 0 {
        return Err(Error::Tune("no buffer to measure the bandwidth with".into()));
    }
    let dev = &gpu.device;
    let (a, b, pipeline) = scoped(dev, "bandwidth buffers", || {
        let make = |label| {
            dev.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: bytes,
                usage: wgpu::BufferUsages::STORAGE,
                mapped_at_creation: false,
            })
        };
        (make("bandwidth a"), make("bandwidth b"), wgsl_pipeline(dev, "bandwidth copy", COPY_WGSL))
    })?;
    let result = (|| -> Result<Bandwidth> {
        let bind = |src: &wgpu::Buffer, dst: &wgpu::Buffer| {
            dev.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("bandwidth copy"),
                layout: &pipeline.get_bind_group_layout(0),
                entries: &[
                    wgpu::BindGroupEntry { binding: 0, resource: src.as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 1, resource: dst.as_entire_binding() },
                ],
            })
        };
        let groups = scoped(dev, "bandwidth bind groups", || [bind(&a, &b), bind(&b, &a)])?;
        let workgroups = COPY_WORKGROUPS.min(limits.max_compute_workgroups_per_dimension);
        // The untimed copies also clear the buffers, which wgpu does lazily.
        let (times, clock) = time_dispatches(gpu, "bandwidth copies", &pipeline, &groups, workgroups, copies, copies)?;
        let time_ms = Summary::of(&times).ok_or_else(|| Error::Tune("no bandwidth timings".into()))?;
        Ok(Bandwidth { bytes, time_ms, gb_per_s: 2.0 * bytes as f64 / (time_ms.median * 1e-3) / 1e9, clock })
    })();
    a.destroy();
    b.destroy();
    result
}

/// Times `runs` dispatches of `pipeline` over `workgroups` workgroups (bind group `i %
/// groups.len()` for the i-th) after `warmup` untimed ones: GPU timestamps at the beginning
/// and end of each dispatch's compute pass, all in one submission, where the device has
/// them; else the host clock around one submission per run. Times in milliseconds.
pub fn time_dispatches(
    gpu: &Gpu,
    stage: &'static str,
    pipeline: &wgpu::ComputePipeline,
    groups: &[wgpu::BindGroup],
    workgroups: u32,
    warmup: u32,
    runs: u32,
) -> Result<(Vec<f64>, Clock)> {
    let dev = &gpu.device;
    let runs = runs.clamp(1, wgconv::tune::timing::MAX_TIMED_RUNS);
    if groups.is_empty() {
        return Err(Error::Tune(format!("{stage}: no bind group")));
    }
    let dispatch = |enc: &mut wgpu::CommandEncoder, i: u32, stamps: Option<wgpu::ComputePassTimestampWrites>| {
        let mut pass =
            enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some(stage), timestamp_writes: stamps });
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, &groups[i as usize % groups.len()], &[]);
        pass.dispatch_workgroups(workgroups, 1, 1);
    };
    if warmup > 0 {
        let mut enc = dev.create_command_encoder(&Default::default());
        for i in 0..warmup {
            dispatch(&mut enc, i, None);
        }
        scoped(dev, stage, || gpu.queue.submit([enc.finish()]))?;
        gpu.wait()?;
    }
    if !gpu.has_timestamps() {
        let mut times = Vec::new();
        for i in 0..runs {
            let mut enc = dev.create_command_encoder(&Default::default());
            dispatch(&mut enc, i, None);
            // Not in an error scope: popping it would be timed too (the warm-up submitted
            // the same commands in one).
            let t0 = std::time::Instant::now();
            gpu.queue.submit([enc.finish()]);
            gpu.wait()?;
            times.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        return Ok((times, Clock::HostWallClock));
    }
    let count = 2 * runs;
    let (queries, resolve) = scoped(dev, stage, || {
        let queries = dev.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some(stage),
            ty: wgpu::QueryType::Timestamp,
            count,
        });
        let resolve = dev.create_buffer(&wgpu::BufferDescriptor {
            label: Some(stage),
            size: count as u64 * 8,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        (queries, resolve)
    })?;
    let mut enc = dev.create_command_encoder(&Default::default());
    for i in 0..runs {
        let stamps = wgpu::ComputePassTimestampWrites {
            query_set: &queries,
            beginning_of_pass_write_index: Some(2 * i),
            end_of_pass_write_index: Some(2 * i + 1),
        };
        dispatch(&mut enc, i, Some(stamps));
    }
    enc.resolve_query_set(&queries, 0..count, &resolve, 0);
    scoped(dev, stage, || gpu.queue.submit([enc.finish()]))?;
    let stamps = gpu.read_buffer::<u64>(&resolve, 0, count as usize)?;
    let period = gpu.queue.get_timestamp_period() as f64;
    let times: Vec<f64> = stamps.chunks(2).map(|p| p[1].wrapping_sub(p[0]) as f64 * period / 1e6).collect();
    if times.iter().any(|t| !t.is_finite() || *t <= 0.0 || *t > 1e6) {
        return Err(Error::Wgpu { stage, message: format!("implausible times {times:?}") });
    }
    Ok((times, Clock::GpuTimestamps))
}

#[cfg(test)]
mod tests {
    use super::worst_error;

    #[test]
    fn a_nan_error_is_never_dropped() {
        assert_eq!(worst_error(0.0, 1e-7), 1e-7);
        assert!(worst_error(0.0, f64::NAN).is_nan(), "an unwritten (NaN-poisoned) image must fail the check");
        assert!(worst_error(f64::NAN, 1e-7).is_nan());
    }
}
