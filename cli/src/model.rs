//! `wgconv bench --model NAME`: every distinct convolution of a network (cli/data/models.json),
//! each layer benchmarked by [`crate::bench_run::run`] — the kernel a default `Conv2d` picks,
//! then the sweep of the precision's default family (or `--configs`), all checked against one
//! CPU reference image and timed with GPU timestamps — against the device's floor
//! (max(FLOPs / peak, bytes / bandwidth), the bandwidth measured at start) and, with
//! `--compare`, against cuDNN's times from scripts/cudnn_layers.py.

use crate::bench_args::{built_selection, parse_entry, write_outputs, Args};
use crate::bench_run::{self, AutoSelection, Bandwidth, BenchOptions, CheckImages, KernelResult, Outcome};
use crate::cli::{CliError, CliResult};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use wgconv::advanced::{default_kernel, sweep, AdapterSummary};
use wgconv::tune::timing::{Clock, Summary, MAX_TIMED_RUNS};
use wgconv::{Activation, Conv2dSpec, ConvProblem, Gpu, Kernel, Padding, Precision, Shape4};

/// The networks: their distinct convolution layers, multiplicities and default batches.
const MODELS_JSON: &str = include_str!("../data/models.json");

/// Bytes per copy of the bandwidth measurement on a GPU and on a CPU adapter.
const BANDWIDTH_BYTES_GPU: u64 = 1 << 30;
const BANDWIDTH_BYTES_CPU: u64 = 64 << 20;
/// Timed copies of the bandwidth measurement (the median is quoted).
const BANDWIDTH_COPIES: u32 = 7;

#[derive(Debug, Clone, Deserialize)]
struct ModelsFile {
    models: BTreeMap<String, Model>,
}

/// One network of cli/data/models.json.
#[derive(Debug, Clone, Deserialize)]
pub struct Model {
    /// The batch it is benchmarked at unless `--batch` says otherwise.
    pub batch: u32,
    /// Its distinct convolutions.
    pub layers: Vec<Layer>,
}

/// A distinct convolution of a network (square kernel, symmetric padding, no bias: the
/// networks' convolutions are followed by batch norm, or the bias is a separate add in
/// cuDNN's timing too), and how often the network runs it.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Layer {
    pub name: String,
    pub c_in: u32,
    pub c_out: u32,
    pub h: u32,
    pub w: u32,
    pub k: u32,
    pub stride: u32,
    pub pad: u32,
    pub groups: u32,
    pub count: u32,
}

impl Layer {
    pub fn spec(&self) -> wgconv::Result<Conv2dSpec> {
        let spec = Conv2dSpec::new(self.c_in, self.c_out, self.k)
            .stride((self.stride, self.stride))
            .padding(Padding::uniform(self.pad))
            .groups(self.groups)
            .with_bias(false);
        spec.validate()?;
        Ok(spec)
    }

    pub fn problem(&self, batch: u32) -> wgconv::Result<ConvProblem> {
        self.spec()?.problem(Shape4::new(batch, self.c_in, self.h, self.w))
    }

    /// `64->256 56x56 k1 s1 p0` (`g32` added for grouped ones).
    pub fn shape_text(&self) -> String {
        let groups = if self.groups > 1 { format!(" g{}", self.groups) } else { String::new() };
        format!(
            "{}->{} {}x{} k{} s{} p{}{groups}",
            self.c_in, self.c_out, self.h, self.w, self.k, self.stride, self.pad
        )
    }
}

/// Every model of the data file, by name.
pub fn models() -> CliResult<BTreeMap<String, Model>> {
    let file: ModelsFile =
        serde_json::from_str(MODELS_JSON).map_err(|e| CliError(format!("cli/data/models.json: {e}")))?;
    Ok(file.models)
}

/// The JSON scripts/cudnn_layers.py writes (`--compare`): cuDNN's median times per layer.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct CudnnFile {
    #[serde(default)]
    pub device: Option<String>,
    #[serde(default)]
    pub torch: Option<String>,
    #[serde(default)]
    pub cudnn: Option<serde_json::Value>,
    #[serde(default)]
    pub date: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub batch: Option<u32>,
    pub layers: BTreeMap<String, CudnnLayer>,
}

/// cuDNN's median times of one layer, ms: strict fp32, TF32 (best layout), fp16 channels-last.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize)]
pub struct CudnnLayer {
    #[serde(default)]
    pub fp32: Option<f64>,
    #[serde(default)]
    pub tf32: Option<f64>,
    #[serde(default)]
    pub fp16: Option<f64>,
}

impl CudnnLayer {
    /// The three columns, by their names in the table and the JSON.
    fn columns(&self) -> [(&'static str, Option<f64>); 3] {
        [("fp32", self.fp32), ("tf32", self.tf32), ("fp16", self.fp16)]
    }
}

/// What `--compare` read, for the report.
#[derive(Debug, Clone, Serialize)]
pub struct CompareInfo {
    pub file: PathBuf,
    pub device: Option<String>,
    pub torch: Option<String>,
    pub cudnn: Option<serde_json::Value>,
    pub date: Option<String>,
    pub model: Option<String>,
    pub batch: Option<u32>,
}

/// Reads and checks a `--compare` file (a time that is not a positive number is dropped).
pub fn read_compare(path: &Path, model: &str) -> CliResult<CudnnFile> {
    let text = std::fs::read_to_string(path).map_err(|e| CliError(format!("--compare {}: {e}", path.display())))?;
    let mut file: CudnnFile =
        serde_json::from_str(&text).map_err(|e| CliError(format!("--compare {}: {e}", path.display())))?;
    if let Some(m) = &file.model {
        if m != model {
            return Err(CliError(format!("--compare {}: its model is {m}, not {model}", path.display())));
        }
    }
    for l in file.layers.values_mut() {
        for v in [&mut l.fp32, &mut l.tf32, &mut l.fp16] {
            *v = v.filter(|t| t.is_finite() && *t > 0.0);
        }
    }
    Ok(file)
}

/// A kernel's figures on one layer.
#[derive(Debug, Clone, Serialize)]
pub struct Perf {
    pub kernel: String,
    pub time_ms: Summary,
    pub tflops: f64,
    /// Input + weights + output (the tensors at `--storage`'s size, the weights f32) over
    /// the median time, GB/s.
    pub gb_per_s: f64,
    /// The peak the compute floor uses: `--peak-tflops`, else the known table for this
    /// adapter and the kernel's family.
    pub peak_tflops: Option<f64>,
    pub compute_floor_ms: Option<f64>,
    pub memory_floor_ms: Option<f64>,
    /// max(compute floor, memory floor); `None` where either is unknown.
    pub floor_ms: Option<f64>,
    pub pct_of_floor: Option<f64>,
    pub rel_l2: f64,
}

/// cuDNN's time over wgconv's (above 1: wgconv is faster).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Ratios {
    pub cudnn_fp32_over_default: Option<f64>,
    pub cudnn_fp32_over_best: Option<f64>,
    pub cudnn_tf32_over_default: Option<f64>,
    pub cudnn_tf32_over_best: Option<f64>,
    pub cudnn_fp16_over_default: Option<f64>,
    pub cudnn_fp16_over_best: Option<f64>,
}

impl Ratios {
    fn of(cudnn: &CudnnLayer, default_ms: Option<f64>, best_ms: Option<f64>) -> Ratios {
        let r = |c: Option<f64>, w: Option<f64>| Some(c? / w?);
        Ratios {
            cudnn_fp32_over_default: r(cudnn.fp32, default_ms),
            cudnn_fp32_over_best: r(cudnn.fp32, best_ms),
            cudnn_tf32_over_default: r(cudnn.tf32, default_ms),
            cudnn_tf32_over_best: r(cudnn.tf32, best_ms),
            cudnn_fp16_over_default: r(cudnn.fp16, default_ms),
            cudnn_fp16_over_best: r(cudnn.fp16, best_ms),
        }
    }
    fn fields(&self) -> [(&'static str, Option<f64>); 6] {
        [
            ("cudnn_fp32_over_default", self.cudnn_fp32_over_default),
            ("cudnn_fp32_over_best", self.cudnn_fp32_over_best),
            ("cudnn_tf32_over_default", self.cudnn_tf32_over_default),
            ("cudnn_tf32_over_best", self.cudnn_tf32_over_best),
            ("cudnn_fp16_over_default", self.cudnn_fp16_over_default),
            ("cudnn_fp16_over_best", self.cudnn_fp16_over_best),
        ]
    }
}

/// One layer's results.
#[derive(Debug, Clone, Serialize)]
pub struct LayerReport {
    pub name: String,
    pub count: u32,
    pub shape: String,
    /// `None` where the layer's convolution is not valid at this batch.
    pub problem: Option<ConvProblem>,
    pub gflop: f64,
    /// Input + weights + output (the tensors at `--storage`'s size, the weights f32), MB.
    pub mbytes: f64,
    /// What a default `Conv2d` picks, where it could be built.
    pub default_selection: Option<AutoSelection>,
    /// With `--autotune`: what a `Conv2d` with autotuning on kept, and how long it took.
    pub autotune: Option<AutotuneReport>,
    /// The default kernel's figures; `None` where it was wrong, refused or failed
    /// (`default_problem` says which).
    pub default: Option<Perf>,
    pub default_problem: Option<String>,
    /// The fastest correct kernel (the default included).
    pub best: Option<Perf>,
    pub default_over_best: Option<f64>,
    pub cudnn: Option<CudnnLayer>,
    pub ratios: Option<Ratios>,
    /// Why the layer could not be benchmarked at all.
    pub error: Option<String>,
    /// Where the layer's times came from.
    pub clock: Option<Clock>,
    /// Every kernel run on the layer, the default first.
    pub results: Vec<KernelResult>,
}

/// A layer's `Conv2d` built with autotuning on (`--autotune`).
#[derive(Debug, Clone, Serialize)]
pub struct AutotuneReport {
    /// The construction's wall-clock seconds: the autotuning, or the read of its cache.
    pub seconds: f64,
    pub selection: Option<AutoSelection>,
    /// Its kernel's median in this bench (ms), where it ran correctly.
    pub time_ms: Option<f64>,
    /// The default's median over the autotuned kernel's.
    pub default_over_autotune: Option<f64>,
    pub error: Option<String>,
}

/// Σ time × count over the layers that have a time; the layers that have none.
#[derive(Debug, Clone, Serialize)]
pub struct Total {
    pub ms: f64,
    pub missing: Vec<String>,
}

impl Total {
    fn of(layers: &[LayerReport], time: impl Fn(&LayerReport) -> Option<f64>) -> Total {
        let mut total = Total { ms: 0.0, missing: Vec::new() };
        for l in layers {
            match time(l) {
                Some(t) => total.ms += t * l.count as f64,
                None => total.missing.push(l.name.clone()),
            }
        }
        total
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Totals {
    pub default: Total,
    pub best: Total,
    pub cudnn_fp32: Option<Total>,
    pub cudnn_tf32: Option<Total>,
    pub cudnn_fp16: Option<Total>,
}

/// A plain geometric mean over the distinct layers that have the ratio.
#[derive(Debug, Clone, Serialize)]
pub struct Geomean {
    pub value: Option<f64>,
    pub layers: usize,
}

fn geomean(values: impl Iterator<Item = f64>) -> Geomean {
    let (mut sum, mut n) = (0.0, 0usize);
    for v in values.filter(|v| v.is_finite() && *v > 0.0) {
        sum += v.ln();
        n += 1;
    }
    Geomean { value: (n > 0).then(|| (sum / n as f64).exp()), layers: n }
}

/// Everything `wgconv bench --model` measured.
#[derive(Debug, Clone, Serialize)]
pub struct ModelReport {
    pub model: String,
    pub adapter: AdapterSummary,
    pub date: String,
    pub wgconv_version: String,
    pub command_line: Vec<String>,
    pub precision: String,
    /// The tensors' element type (`--storage`): `f32` or `f16`.
    pub storage: String,
    pub batch: u32,
    pub warmup: u32,
    pub runs: u32,
    pub relu: bool,
    /// `--peak-tflops` as given (`None`: the known table per kernel family).
    pub peak_tflops_arg: Option<f64>,
    /// The known peak of the precision's default kernel on this adapter (for the header).
    pub default_family_peak_tflops: Option<f64>,
    pub default_family: String,
    /// The kernels each layer ran besides its default (the sweep or `--configs`).
    pub candidates: Vec<String>,
    pub bandwidth: Option<Bandwidth>,
    pub bandwidth_error: Option<String>,
    pub clock: Option<Clock>,
    pub compare: Option<CompareInfo>,
    pub layers: Vec<LayerReport>,
    pub totals: Totals,
    /// Keys `cudnn_fp32_over_default` … `cudnn_fp16_over_best`; with `--compare` only.
    pub geomeans: Option<BTreeMap<String, Geomean>>,
}

pub fn main(args: Args) -> CliResult {
    let name = args.model.clone().unwrap_or_default();
    let all = models()?;
    let model = all.get(&name).cloned().ok_or_else(|| {
        CliError(format!(
            "unknown model {name:?}; known models: {}",
            all.keys().map(String::as_str).collect::<Vec<_>>().join(", ")
        ))
    })?;
    let layers: Vec<Layer> = match &args.layers {
        None => model.layers.clone(),
        Some(names) => {
            let mut chosen = Vec::new();
            for n in names.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
                let layer = model.layers.iter().find(|l| l.name == n).ok_or_else(|| {
                    CliError(format!(
                        "--layers: {name} has no layer {n:?}; its layers: {}",
                        model.layers.iter().map(|l| l.name.as_str()).collect::<Vec<_>>().join(", ")
                    ))
                })?;
                if !chosen.iter().any(|l: &Layer| l.name == layer.name) {
                    chosen.push(layer.clone());
                }
            }
            if chosen.is_empty() {
                return Err(CliError("--layers names no layer".into()));
            }
            chosen
        }
    };
    if args.runs == 0 || args.runs > MAX_TIMED_RUNS {
        return Err(CliError(format!("--runs must be 1 to {MAX_TIMED_RUNS} (got {})", args.runs)));
    }
    if args.runs < 20 {
        eprintln!("wgconv bench: {} runs per kernel (fewer than 20): the medians are rough", args.runs);
    }
    let compare = args.compare.as_deref().map(|p| read_compare(p, &name)).transpose()?;
    let (precision, activation, gpu) = args.open()?;
    let batch = match args.shape.batch {
        Some(b) => b,
        None if gpu.is_cpu() => {
            eprintln!(
                "wgconv bench: {} is a CPU adapter: batch {} instead of {name}'s {} (use --batch to override)",
                gpu.info.name,
                bench_run::CPU_BATCH,
                model.batch
            );
            bench_run::CPU_BATCH
        }
        None => model.batch,
    };
    if let (Some(c), Some(path)) = (&compare, &args.compare) {
        if let Some(b) = c.batch.filter(|&b| b != batch) {
            eprintln!(
                "wgconv bench: warning: --compare {} was measured at batch {b}, this run is at batch {batch}: \
                 the cuDNN columns are another problem",
                path.display()
            );
        }
        let missing: Vec<_> = layers.iter().filter(|l| !c.layers.contains_key(&l.name)).map(|l| &l.name[..]).collect();
        if !missing.is_empty() {
            eprintln!("wgconv bench: warning: --compare {} lacks layers {}", path.display(), missing.join(", "));
        }
    }

    // The candidates every layer runs besides its default.
    let default_family_kernel = default_kernel(gpu.caps(), precision)?;
    let mut candidates: Vec<Kernel> = match &args.configs {
        Some(names) => {
            let mut v = Vec::new();
            for n in names {
                v.extend(parse_entry(n, precision, &gpu)?);
            }
            v
        }
        None => sweep(default_family_kernel.family())?,
    };
    let direct = Kernel::parse("direct")?;
    if args.direct && !candidates.contains(&direct) {
        candidates.push(direct);
    }
    let peak_of = |kernel: &Kernel| args.peak_tflops.or_else(|| bench_run::known_peak(&gpu.info.name, kernel));

    let bytes = if gpu.is_cpu() { BANDWIDTH_BYTES_CPU } else { BANDWIDTH_BYTES_GPU };
    let (bandwidth, bandwidth_error) = match bench_run::measure_bandwidth(&gpu, bytes, BANDWIDTH_COPIES) {
        Ok(b) => (Some(b), None),
        Err(e) => {
            eprintln!("wgconv bench: warning: the bandwidth measurement failed ({e}): no memory floor");
            (None, Some(e.to_string()))
        }
    };

    let bar = ProgressBar::new(layers.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{bar:30}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let say = |line: String| if bar.is_hidden() { eprintln!("{line}") } else { bar.println(line) };
    let mut reports = Vec::new();
    let mut clock = None;
    for (i, layer) in layers.iter().enumerate() {
        bar.set_position(i as u64);
        bar.set_message(layer.name.clone());
        let gbw = bandwidth.as_ref().map(|b| b.gb_per_s);
        let report = bench_layer(&gpu, &args, layer, batch, precision, activation, &candidates, gbw, &peak_of, |msg| {
            bar.set_message(format!("{}: {msg}", layer.name))
        });
        let report = LayerReport {
            ratios: None,
            cudnn: compare.as_ref().and_then(|c| c.layers.get(&layer.name).copied()),
            ..report
        };
        let ratios = report.cudnn.as_ref().map(|c| {
            Ratios::of(
                c,
                report.default.as_ref().map(|p| p.time_ms.median),
                report.best.as_ref().map(|p| p.time_ms.median),
            )
        });
        let report = LayerReport { ratios, ..report };
        clock = clock.or(report.clock);
        say(format!(
            "[{}/{}] {}: default {} {}, best {} {}",
            i + 1,
            layers.len(),
            layer.name,
            report.default_selection.as_ref().map_or("-", |s| &s.kernel[..]),
            report.default.as_ref().map_or("-".into(), |p| format!("{:.4} ms", p.time_ms.median)),
            report.best.as_ref().map_or("-", |p| &p.kernel[..]),
            report.best.as_ref().map_or("-".into(), |p| format!("{:.4} ms", p.time_ms.median)),
        ));
        reports.push(report);
    }
    bar.finish_and_clear();

    let totals = Totals {
        default: Total::of(&reports, |l| l.default.as_ref().map(|p| p.time_ms.median)),
        best: Total::of(&reports, |l| l.best.as_ref().map(|p| p.time_ms.median)),
        cudnn_fp32: compare.as_ref().map(|_| Total::of(&reports, |l| l.cudnn.and_then(|c| c.fp32))),
        cudnn_tf32: compare.as_ref().map(|_| Total::of(&reports, |l| l.cudnn.and_then(|c| c.tf32))),
        cudnn_fp16: compare.as_ref().map(|_| Total::of(&reports, |l| l.cudnn.and_then(|c| c.fp16))),
    };
    let geomeans = compare.as_ref().map(|_| {
        let keys = Ratios::default().fields().map(|(k, _)| k);
        keys.iter()
            .enumerate()
            .map(|(j, k)| {
                let g = geomean(reports.iter().filter_map(|l| l.ratios.as_ref().and_then(|r| r.fields()[j].1)));
                (k.to_string(), g)
            })
            .collect::<BTreeMap<_, _>>()
    });
    let report = ModelReport {
        model: name.clone(),
        adapter: gpu.summary(),
        date: chrono::Utc::now().to_rfc3339(),
        wgconv_version: env!("CARGO_PKG_VERSION").into(),
        command_line: std::env::args().collect(),
        precision: precision.to_string(),
        storage: wgconv::Storage::from(args.storage).to_string(),
        batch,
        warmup: args.warmup,
        runs: args.runs,
        relu: args.relu,
        peak_tflops_arg: args.peak_tflops,
        default_family_peak_tflops: peak_of(&default_family_kernel),
        default_family: default_family_kernel.family().to_string(),
        candidates: candidates.iter().map(|k| k.to_string()).collect(),
        bandwidth,
        bandwidth_error,
        clock,
        compare: compare.as_ref().zip(args.compare.as_ref()).map(|(c, path)| CompareInfo {
            file: path.clone(),
            device: c.device.clone(),
            torch: c.torch.clone(),
            cudnn: c.cudnn.clone(),
            date: c.date.clone(),
            model: c.model.clone(),
            batch: c.batch,
        }),
        layers: reports,
        totals,
        geomeans,
    };
    print!("{}", table(&report));
    write_outputs(&args, &report, |path| chart(&report, path))
}

/// One layer: the default `Conv2d`'s selection, then [`bench_run::run`] on it and the
/// candidates (the default first; a kernel named twice runs once), the reference on image 0.
#[allow(clippy::too_many_arguments)]
fn bench_layer(
    gpu: &Gpu,
    args: &Args,
    layer: &Layer,
    batch: u32,
    precision: Precision,
    activation: Activation,
    candidates: &[Kernel],
    bandwidth_gb_per_s: Option<f64>,
    peak_of: &dyn Fn(&Kernel) -> Option<f64>,
    mut progress: impl FnMut(&str),
) -> LayerReport {
    let mut report = LayerReport {
        name: layer.name.clone(),
        count: layer.count,
        shape: layer.shape_text(),
        problem: None,
        gflop: f64::NAN,
        mbytes: f64::NAN,
        default_selection: None,
        autotune: None,
        default: None,
        default_problem: None,
        best: None,
        default_over_best: None,
        cudnn: None,
        ratios: None,
        error: None,
        clock: None,
        results: Vec::new(),
    };
    let problem = match layer.problem(batch) {
        Ok(p) => p,
        Err(e) => {
            report.error = Some(e.to_string());
            return report;
        }
    };
    let flops = problem.flops();
    let bytes = bench_run::min_bytes(&problem, args.storage.into());
    report.problem = Some(problem);
    report.gflop = flops / 1e9;
    report.mbytes = bytes / 1e6;
    progress("selecting the default");
    let selection =
        match built_selection(gpu, &problem, precision, activation, args.layout.into(), args.storage.into(), false) {
            Ok((s, _)) => Some(s),
            Err(e) => {
                report.default_problem = Some(format!("no default Conv2d: {}", e.0));
                None
            }
        };
    report.default_selection = selection.as_ref().map(AutoSelection::from);
    let mut kernels: Vec<Kernel> = selection.iter().map(|s| s.kernel.clone()).collect();
    let mut autotuned = None;
    if args.autotune {
        progress("autotuning");
        let layout = args.layout.into();
        report.autotune =
            Some(match built_selection(gpu, &problem, precision, activation, layout, args.storage.into(), true) {
                Ok((s, seconds)) => {
                    kernels.push(s.kernel.clone());
                    autotuned = Some(s.kernel.clone());
                    AutotuneReport {
                        seconds,
                        selection: Some(AutoSelection::from(&s)),
                        time_ms: None,
                        default_over_autotune: None,
                        error: None,
                    }
                }
                Err(e) => AutotuneReport {
                    seconds: f64::NAN,
                    selection: None,
                    time_ms: None,
                    default_over_autotune: None,
                    error: Some(e.0),
                },
            });
    }
    kernels.extend(candidates.iter().cloned());
    // Without --configs, the sweep of the family the selection picked too (the depthwise
    // family on depthwise layers), so that "best" compares the default with its neighbours.
    if args.configs.is_none() {
        if let Some(s) = &selection {
            kernels.extend(sweep(s.kernel.family()).unwrap_or_default());
        }
    }
    let mut seen = HashSet::new();
    kernels.retain(|k| seen.insert(k.clone()));
    let opts = BenchOptions {
        problem,
        kernels: kernels.clone(),
        warmup: args.warmup,
        runs: args.runs,
        interleave: args.interleave,
        activation,
        peak_tflops: args.peak_tflops,
        seed: 0x00c0_ffee,
        check: CheckImages::First,
        layout: args.layout.into(),
        storage: args.storage.into(),
    };
    let run = match bench_run::run(gpu, &opts, selection.as_ref(), |_, _, msg| progress(msg)) {
        Ok(r) => r,
        Err(e) => {
            report.error = Some(e.to_string());
            return report;
        }
    };
    let perf = |kernel: &Kernel, r: &KernelResult| -> Option<Perf> {
        let Outcome::Ok { time_ms, rel_l2, .. } = &r.outcome else { return None };
        let t = time_ms.median;
        let peak = peak_of(kernel);
        let compute_floor_ms = peak.map(|p| flops / (p * 1e12) * 1e3);
        let memory_floor_ms = bandwidth_gb_per_s.map(|bw| bytes / (bw * 1e9) * 1e3);
        let floor_ms = compute_floor_ms.zip(memory_floor_ms).map(|(c, m)| c.max(m));
        Some(Perf {
            kernel: r.kernel.clone(),
            time_ms: *time_ms,
            tflops: flops / t / 1e9,
            gb_per_s: bytes / t / 1e6,
            peak_tflops: peak,
            compute_floor_ms,
            memory_floor_ms,
            floor_ms,
            pct_of_floor: floor_ms.map(|f| 100.0 * f / t),
            rel_l2: *rel_l2,
        })
    };
    if selection.is_some() {
        if let Some(r) = run.results.first() {
            report.default = perf(&kernels[0], r);
            report.default_problem = match &r.outcome {
                Outcome::Ok { .. } => None,
                Outcome::Wrong { rel_l2, .. } => Some(format!("WRONG (rel L2 {rel_l2:.2e})")),
                Outcome::Refused { reason } => Some(format!("refused: {reason}")),
                Outcome::Failed { reason } => Some(format!("failed: {reason}")),
            };
        }
    }
    report.best = run.ranked().first().and_then(|best| {
        let i = run.results.iter().position(|r| std::ptr::eq(r, *best))?;
        perf(&kernels[i], best)
    });
    report.default_over_best =
        report.default.as_ref().zip(report.best.as_ref()).map(|(d, b)| d.time_ms.median / b.time_ms.median);
    if let (Some(a), Some(kernel)) = (report.autotune.as_mut(), autotuned) {
        a.time_ms = kernels.iter().position(|k| *k == kernel).and_then(|i| run.results.get(i)?.median_ms());
        a.default_over_autotune = report.default.as_ref().zip(a.time_ms).map(|(d, t)| d.time_ms.median / t);
    }
    report.clock = run.clock;
    report.results = run.results;
    report
}

/// A table whose columns are sized to their widest cell (`true`: right-aligned).
fn render(header: &[(&str, bool)], rows: &[Vec<String>]) -> String {
    let width =
        |j: usize| rows.iter().map(|r| r[j].chars().count()).chain([header[j].0.chars().count()]).max().unwrap_or(0);
    let widths: Vec<usize> = (0..header.len()).map(width).collect();
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (j, c) in cells.iter().enumerate() {
            let pad = widths[j].saturating_sub(c.chars().count());
            if j > 0 {
                s.push_str("  ");
            }
            if header[j].1 {
                s.extend(std::iter::repeat_n(' ', pad));
                s.push_str(c);
            } else {
                s.push_str(c);
                if j + 1 < cells.len() {
                    s.extend(std::iter::repeat_n(' ', pad));
                }
            }
        }
        s.push('\n');
        s
    };
    let mut s = line(header.iter().map(|h| h.0).collect());
    for r in rows {
        s.push_str(&line(r.iter().map(String::as_str).collect()));
    }
    s
}

/// Three significant digits or so, whatever the magnitude (lavapipe's TFLOP/s are 1e-4).
pub(crate) fn sig(v: f64) -> String {
    match v.abs() {
        a if a >= 100.0 => format!("{v:.0}"),
        a if a >= 10.0 => format!("{v:.1}"),
        a if a >= 1.0 => format!("{v:.2}"),
        a if a >= 0.01 || a == 0.0 => format!("{v:.3}"),
        _ => format!("{v:.2e}"),
    }
}

fn ms(t: Option<f64>) -> String {
    t.map_or("-".into(), |t| format!("{t:.4}"))
}

fn ratio(r: Option<f64>) -> String {
    r.map_or("-".into(), |r| format!("{}x", sig(r)))
}

/// The per-layer table, the network totals, the geomeans, the default selections and the
/// kernels that were wrong or failed.
pub fn table(report: &ModelReport) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let a = &report.adapter;
    let _ = writeln!(
        s,
        "wgconv bench --model {} | {} | {} {} | {}{} | batch {} | {} layers | {}, median of {} runs after {} warm-up{}",
        report.model,
        a.name,
        a.backend,
        a.driver_info,
        report.precision,
        if report.storage == "f32" { String::new() } else { format!(" | {} storage", report.storage) },
        report.batch,
        report.layers.len(),
        match report.clock {
            Some(Clock::GpuTimestamps) => "GPU timestamps",
            Some(Clock::HostWallClock) => "host wall clock (no timestamp queries)",
            Some(_) => "another clock",
            None => "no timings",
        },
        report.runs,
        report.warmup,
        if report.relu { " | fused ReLU" } else { "" },
    );
    match &report.bandwidth {
        Some(b) => {
            let _ = writeln!(
                s,
                "memory bandwidth: {:.1} GB/s (copy of {} MiB, 2 x bytes / median {:.4} ms of {}{})",
                b.gb_per_s,
                b.bytes >> 20,
                b.time_ms.median,
                b.time_ms.n,
                if b.clock == Clock::HostWallClock { ", host clock" } else { "" }
            );
        }
        None => {
            let _ =
                writeln!(s, "memory bandwidth: not measured ({})", report.bandwidth_error.as_deref().unwrap_or("?"));
        }
    }
    let _ = writeln!(
        s,
        "peak: {}; floor = max(FLOPs / peak, {} / bandwidth)",
        match (report.peak_tflops_arg, report.default_family_peak_tflops) {
            (Some(p), _) => format!("{} TFLOP/s (--peak-tflops)", sig(p)),
            (None, Some(p)) =>
                format!("{} TFLOP/s for {} (datasheet table, per kernel family)", sig(p), report.default_family),
            (None, None) => "unknown for this adapter (% floor: pass --peak-tflops)".into(),
        },
        match report.storage.as_str() {
            "f32" => "(input + weights + output) x 4 B",
            // The weights stay f32 on the device.
            _ => "(input + output) x 2 B + weights x 4 B",
        }
    );
    if let Some(c) = &report.compare {
        let _ = writeln!(
            s,
            "cuDNN (--compare {}): {} | torch {} | cuDNN {} | batch {} | {}",
            c.file.display(),
            c.device.as_deref().unwrap_or("?"),
            c.torch.as_deref().unwrap_or("?"),
            c.cudnn.as_ref().map_or("?".into(), |v| v.to_string().trim_matches('"').to_string()),
            c.batch.map_or("?".into(), |b| b.to_string()),
            c.date.as_deref().unwrap_or("?"),
        );
    }
    let mut header: Vec<(&str, bool)> = vec![
        ("layer", false),
        ("shape", false),
        ("count", true),
        ("default kernel", false),
        ("default ms (min-max)", true),
        ("best kernel", false),
        ("best ms", true),
        ("def/best", true),
        ("TFLOP/s", true),
        ("GB/s", true),
        ("def %floor", true),
        ("best %floor", true),
    ];
    let compare = report.compare.is_some();
    if compare {
        header.extend([("cuDNN fp32", true), ("tf32", true), ("fp16", true), ("fp32/def", true), ("fp32/best", true)]);
    }
    let pct = |p: Option<&Perf>| p.and_then(|p| p.pct_of_floor).map_or("-".into(), |v| format!("{v:.1}"));
    let rows: Vec<Vec<String>> = report
        .layers
        .iter()
        .map(|l| {
            let default_ms = match (&l.default, &l.default_problem, &l.error) {
                (Some(p), _, _) => {
                    format!("{:.4} ({:.4}-{:.4})", p.time_ms.median, p.time_ms.min, p.time_ms.max)
                }
                (None, _, Some(_)) => "ERROR".into(),
                (None, Some(why), _) => why.split_once(' ').map_or(why.as_str(), |(w, _)| w).to_string(),
                (None, None, None) => "-".into(),
            };
            let mut row = vec![
                l.name.clone(),
                l.shape.clone(),
                l.count.to_string(),
                l.default_selection.as_ref().map_or("-".into(), |d| d.kernel.clone()),
                default_ms,
                l.best.as_ref().map_or("-".into(), |b| b.kernel.clone()),
                ms(l.best.as_ref().map(|b| b.time_ms.median)),
                ratio(l.default_over_best),
                l.best.as_ref().map_or("-".into(), |b| sig(b.tflops)),
                l.best.as_ref().map_or("-".into(), |b| sig(b.gb_per_s)),
                pct(l.default.as_ref()),
                pct(l.best.as_ref()),
            ];
            if compare {
                let c = l.cudnn.unwrap_or_default();
                let r = l.ratios.clone().unwrap_or_default();
                row.extend([
                    ms(c.fp32),
                    ms(c.tf32),
                    ms(c.fp16),
                    ratio(r.cudnn_fp32_over_default),
                    ratio(r.cudnn_fp32_over_best),
                ]);
            }
            row
        })
        .collect();
    s.push_str(&render(&header, &rows));
    let _ = writeln!(s, "(TFLOP/s, GB/s: the best kernel's; %floor: floor / median time)");

    let total = |t: &Total| {
        if t.missing.is_empty() {
            format!("{:.4} ms", t.ms)
        } else {
            format!("{:.4} ms (without {})", t.ms, t.missing.join(", "))
        }
    };
    let t = &report.totals;
    let _ = writeln!(
        s,
        "network total (sum of time x count over {} layers): default {}, best {}, default/best {}",
        report.layers.len(),
        total(&t.default),
        total(&t.best),
        ratio((t.best.ms > 0.0).then(|| t.default.ms / t.best.ms)),
    );
    if let (Some(f32t), Some(tf32t), Some(f16t)) = (&t.cudnn_fp32, &t.cudnn_tf32, &t.cudnn_fp16) {
        let _ = writeln!(s, "  cuDNN: fp32 {}, tf32 {}, fp16 {}", total(f32t), total(tf32t), total(f16t));
        // A ratio of totals only where both sum over every layer.
        let over = |w: &Total| {
            if f32t.missing.is_empty() && w.missing.is_empty() && w.ms > 0.0 {
                ratio(Some(f32t.ms / w.ms))
            } else {
                "- (not every layer has both times)".into()
            }
        };
        let _ = writeln!(s, "  cuDNN fp32 total / wgconv total: default {}, best {}", over(&t.default), over(&t.best));
    }
    if let Some(g) = &report.geomeans {
        let show = |k: &str| g.get(k).map_or("-".into(), |g| format!("{} ({} layers)", ratio(g.value), g.layers));
        let _ = writeln!(s, "geomean over the distinct layers of cuDNN time / wgconv time (above 1: wgconv faster):");
        for c in ["fp32", "tf32", "fp16"] {
            let _ = writeln!(
                s,
                "  cuDNN {c}/default {}   cuDNN {c}/best {}",
                show(&format!("cudnn_{c}_over_default")),
                show(&format!("cudnn_{c}_over_best"))
            );
        }
    }
    let _ = writeln!(s, "default selections (a default Conv2d at {}):", report.precision);
    for l in &report.layers {
        match &l.default_selection {
            Some(d) => {
                let _ = writeln!(s, "  {}: {} ({}: {})", l.name, d.kernel, bench_run::source_name(d.source), d.reason);
            }
            None => {
                let _ =
                    writeln!(s, "  {}: {}", l.name, l.default_problem.as_deref().or(l.error.as_deref()).unwrap_or("-"));
            }
        }
    }
    if report.layers.iter().any(|l| l.autotune.is_some()) {
        let _ =
            writeln!(s, "autotuned (a Conv2d with autotune on: seconds at construction, kernel kept, default / it):");
        for l in &report.layers {
            let Some(a) = &l.autotune else { continue };
            match (&a.selection, &a.error) {
                (Some(sel), _) => {
                    let vs = a.default_over_autotune.map_or("-".into(), |r| format!("{r:.3}"));
                    let _ = writeln!(s, "  {}: {:.2} s, {} ({vs}): {}", l.name, a.seconds, sel.kernel, sel.reason);
                }
                (None, e) => {
                    let _ = writeln!(s, "  {}: failed: {}", l.name, e.as_deref().unwrap_or("-"));
                }
            }
        }
    }
    let mut problems = Vec::new();
    let mut refused = 0;
    for l in &report.layers {
        if let Some(e) = &l.error {
            problems.push(format!("  {}: not benchmarked: {e}", l.name));
        }
        for r in &l.results {
            match &r.outcome {
                Outcome::Wrong { rel_l2, .. } => {
                    problems.push(format!("  {}: {} WRONG rel L2 {rel_l2:.2e} (not ranked)", l.name, r.kernel))
                }
                Outcome::Failed { reason } => problems.push(format!("  {}: {} failed: {reason}", l.name, r.kernel)),
                Outcome::Refused { .. } => refused += 1,
                Outcome::Ok { .. } => {}
            }
        }
    }
    if !problems.is_empty() {
        let _ = writeln!(s, "wrong or failed:");
        for p in problems {
            let _ = writeln!(s, "{p}");
        }
    }
    if refused > 0 {
        let _ = writeln!(s, "{refused} kernel runs refused by the device's or the layer's limits (reasons in --json)");
    }
    s
}

/// Grouped horizontal bars per layer (log time axis): the default, the best and the cuDNN
/// columns `--compare` gives, the network total (Σ time × count) on top.
fn chart(report: &ModelReport, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;
    type Series = (&'static str, RGBColor);
    let mut series: Vec<Series> =
        vec![("wgconv default", RGBColor(66, 110, 180)), ("wgconv best", RGBColor(46, 125, 50))];
    if report.compare.is_some() {
        series.extend([
            ("cuDNN strict fp32", RGBColor(183, 28, 28)),
            ("cuDNN TF32", RGBColor(239, 108, 0)),
            ("cuDNN fp16", RGBColor(123, 31, 162)),
        ]);
    }
    // (label, one (median, Some((min, max))) per series)
    type Bar = Option<(f64, Option<(f64, f64)>)>;
    let mut groups: Vec<(String, Vec<Bar>)> = Vec::new();
    let t = &report.totals;
    let mut total_bars: Vec<Bar> = vec![
        (t.default.missing.is_empty()).then_some((t.default.ms, None)),
        t.best.missing.is_empty().then_some((t.best.ms, None)),
    ];
    if report.compare.is_some() {
        for c in [&t.cudnn_fp32, &t.cudnn_tf32, &t.cudnn_fp16] {
            total_bars.push(c.as_ref().filter(|c| c.missing.is_empty()).map(|c| (c.ms, None)));
        }
    }
    groups.push(("TOTAL (sum x count)".into(), total_bars));
    for l in &report.layers {
        let perf = |p: &Option<Perf>| p.as_ref().map(|p| (p.time_ms.median, Some((p.time_ms.min, p.time_ms.max))));
        let mut bars = vec![perf(&l.default), perf(&l.best)];
        if report.compare.is_some() {
            let c = l.cudnn.unwrap_or_default();
            bars.extend(c.columns().map(|(_, v)| v.map(|v| (v, None))));
        }
        groups.push((format!("{} x{}", l.name, l.count), bars));
    }
    let values: Vec<f64> = groups
        .iter()
        .flat_map(|(_, b)| b.iter().flatten().flat_map(|(m, r)| [Some(*m), r.map(|r| r.1)]).flatten())
        .collect();
    if values.is_empty() {
        return Err("no timed layer to chart".into());
    }
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min) / 2.0;
    let hi = values.iter().copied().fold(0.0, f64::max) * 1.5;
    let k = series.len() as i32;
    let slots = k + 1; // one empty slot between groups
                       // Empty rows on top for the legend (about 22 px an entry; a row is 9 px).
    let legend = (k * 22 + 12) / 9 + 1;
    let n = legend + groups.len() as i32 * slots;
    let height = 100 + 9 * n as u32; // rows of about 9 px below the caption
    let root = SVGBackend::new(path, (1000, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let title = format!(
        "{} — {} batch {} {} ({})",
        report.adapter.name,
        report.model,
        report.batch,
        report.precision,
        report.date.get(..10).unwrap_or("")
    );
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(200)
        .build_cartesian_2d((lo..hi).log_scale(), (0..n).into_segmented())?;
    let labels: Vec<String> = groups.iter().map(|(l, _)| l.clone()).collect();
    let middle = (k - 1) / 2;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .x_labels(8)
        .x_label_formatter(&|v| sig(*v))
        .x_desc("GPU time per layer run, ms (log scale; bar: median, line: min–max)")
        .y_labels(n as usize)
        .y_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
                // Row i (from the bottom): below the legend's rows, group (n - 1 - i - legend) /
                // slots, slot (n - 1 - i - legend) % slots.
                let from_top = n - 1 - *i - legend;
                if from_top >= 0 && from_top % slots == middle {
                    labels.get((from_top / slots) as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            }
            _ => String::new(),
        })
        .draw()?;
    for (j, (name, color)) in series.iter().enumerate() {
        let color = *color;
        let mut rects = Vec::new();
        let mut whiskers = Vec::new();
        for (g, (_, bars)) in groups.iter().enumerate() {
            let Some((median, range)) = bars[j] else { continue };
            let y = n - 1 - (legend + g as i32 * slots + j as i32);
            rects.push(Rectangle::new(
                [(lo, SegmentValue::Exact(y)), (median, SegmentValue::Exact(y + 1))],
                color.mix(0.8).filled(),
            ));
            if let Some((min, max)) = range {
                whiskers.push(PathElement::new(
                    vec![(min, SegmentValue::CenterOf(y)), (max, SegmentValue::CenterOf(y))],
                    BLACK.stroke_width(1),
                ));
            }
        }
        chart
            .draw_series(rects)?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
        chart.draw_series(whiskers)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_model_layer_is_a_valid_convolution() {
        let models = models().unwrap();
        for name in ["resnet50", "mobilenet_v2", "vgg16", "resnext50_32x4d", "alexnet"] {
            let m = models.get(name).unwrap_or_else(|| panic!("{name} missing"));
            let mut names = HashSet::new();
            for l in &m.layers {
                assert!(names.insert(&l.name), "{name}: layer {} twice", l.name);
                assert!(l.count >= 1, "{name}/{}", l.name);
                let p = l.problem(m.batch).unwrap_or_else(|e| panic!("{name}/{}: {e}", l.name));
                assert!(p.flops() > 0.0);
            }
        }
    }

    #[test]
    fn totals_weigh_by_count_and_list_the_missing() {
        let layer = |name: &str, count, t: Option<f64>| LayerReport {
            name: name.into(),
            count,
            shape: String::new(),
            problem: None,
            gflop: 0.0,
            mbytes: 0.0,
            default_selection: None,
            autotune: None,
            default: None,
            default_problem: None,
            best: None,
            default_over_best: None,
            cudnn: Some(CudnnLayer { fp32: t, tf32: None, fp16: None }),
            ratios: None,
            error: None,
            clock: None,
            results: Vec::new(),
        };
        let layers = [layer("a", 3, Some(1.5)), layer("b", 1, None), layer("c", 2, Some(0.25))];
        let t = Total::of(&layers, |l| l.cudnn.and_then(|c| c.fp32));
        assert_eq!(t.ms, 5.0);
        assert_eq!(t.missing, ["b"]);
        let g = geomean([2.0, 8.0].into_iter());
        assert!((g.value.unwrap() - 4.0).abs() < 1e-12 && g.layers == 2);
        assert!(geomean(std::iter::empty()).value.is_none());
    }
}
