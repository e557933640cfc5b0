//! `wgconv bench`: compare tile configs on one problem.

use super::shape::ShapeArgs;
use super::CliResult;
use super::PrecisionArg;
use indicatif::{ProgressBar, ProgressStyle};
use std::sync::Arc;
use wgconv::bench::{self, BenchOptions, BenchReport, Outcome};
use wgconv::config::{band_sweep, coop_sweep, default_sweep, stem_sweep};
use wgconv::conv2d::kind_for;
use wgconv::{Activation, Gpu, GpuOptions, KernelKind, Precision, TileConfig};

#[derive(clap::Args, Debug)]
#[command(
    about = "Benchmark tile configs on one convolution (default: AlexNet conv1, N=256)",
    long_about = "Runs every config of the declared sweep (or --configs) on one problem: checks each against \
the CPU reference on the first and last image (output poisoned with NaN first; a wrong config is marked, never \
ranked), then times it with GPU timestamp queries (median, min, max over --runs after --warmup). The seed's \
config is the baseline row. On a CPU adapter (lavapipe) the batch defaults to a small one.",
    after_help = "Examples:\n  wgconv bench\n  wgconv bench --batch 64 --json bench.json --svg bench.svg\n  \
wgconv bench --in-channels 64 --out-channels 64 --height 56 --width 56 --kernel 3 --stride 1 --padding 1 --batch 32"
)]
pub struct Args {
    #[command(flatten)]
    shape: ShapeArgs,
    /// Comma-separated configs (e.g. m32n64k32-t4x4-w4-s2,direct; band:NAME and stem:NAME
    /// for the f16 row-band and stem kernels); default: the declared sweep
    #[arg(long, value_delimiter = ',')]
    configs: Option<Vec<String>>,
    /// Also run the direct (one output per invocation) kernel
    #[arg(long)]
    direct: bool,
    /// Timed runs per config (at least 20)
    #[arg(long, default_value_t = 30)]
    runs: u32,
    /// Untimed warm-up runs per config
    #[arg(long, default_value_t = 5)]
    warmup: u32,
    /// Peak in TFLOP/s for the "% peak" column (default: a known datasheet table by adapter name:
    /// FP32 for the f32 and f16-SIMT kernels, f16 tensor for cooperative matrices, a third of
    /// it for f16x3)
    #[arg(long)]
    peak_tflops: Option<f64>,
    /// Fuse a ReLU into the store
    #[arg(long)]
    relu: bool,
    /// f32; f16 operands with f32 accumulation (cooperative matrices where the device has
    /// them, else the f16 SIMT kernel; the table says which ran); or f16x3, f32-accurate
    /// from three f16 products (cooperative matrices only)
    #[arg(long, value_enum, default_value = "f32")]
    precision: PrecisionArg,
    /// Write every figure as JSON
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Write a chart of the sweep as SVG
    #[arg(long)]
    svg: Option<std::path::PathBuf>,
    /// Adapter name substring (default: WGCONV_ADAPTER, else the best adapter)
    #[arg(long)]
    adapter: Option<String>,
}

/// A kernel family's constructor from a config.
type KindOf = fn(TileConfig) -> KernelKind;

/// The `--configs` prefixes of the f16-only kernels that no precision picks by name:
/// prefix, the kernel's name in messages, its kind.
const PREFIXED_KERNELS: [(&str, &str, KindOf); 2] =
    [("band:", "row-band", KernelKind::CoopBand), ("stem:", "stem", KernelKind::CoopStem)];

pub fn main(args: Args) -> CliResult {
    if args.runs < 20 {
        return Err(super::CliError(format!("--runs must be at least 20 (got {})", args.runs)));
    }
    let precision = Precision::from(args.precision);
    let gpu = Arc::new(Gpu::with_options(GpuOptions {
        adapter: args.adapter.clone(),
        cooperative_matrix: precision != Precision::F32,
        ..Default::default()
    })?);
    let default_batch = if gpu.is_cpu() { bench::CPU_BATCH } else { 256 };
    if gpu.is_cpu() && args.shape.batch.is_none() {
        eprintln!("wgconv bench: {} is a CPU adapter: batch {default_batch} (use --batch to override)", gpu.info.name);
    }
    let problem = args.shape.problem(default_batch)?;
    let mut kernels: Vec<KernelKind> = match &args.configs {
        Some(names) => names
            .iter()
            .map(|n| {
                if n == "direct" {
                    Ok(KernelKind::Direct)
                } else if let Some((name, cfg, kind)) =
                    PREFIXED_KERNELS.iter().find_map(|(p, name, kind)| Some((name, n.strip_prefix(p)?, kind)))
                {
                    if precision != Precision::F16Accum32 {
                        return Err(super::CliError(format!(
                            "{n}: the {name} kernel computes in f16; add --precision f16"
                        )));
                    }
                    Ok(kind(TileConfig::parse(cfg)?))
                } else {
                    Ok(kind_for(&gpu, precision, TileConfig::parse(n)?)?)
                }
            })
            .collect::<CliResult<_>>()?,
        None => {
            if precision == Precision::F16Accum32 && gpu.has_coop_f16() {
                // Every cooperative-matrix kernel: the stem one (where the convolution suits
                // it; refused with the reason otherwise), the opt-in row-band one, then the
                // gathering one.
                let stem = stem_sweep().into_iter().map(KernelKind::CoopStem);
                let band = band_sweep().into_iter().map(KernelKind::CoopBand);
                stem.chain(band).chain(coop_sweep().into_iter().map(KernelKind::Coop)).collect()
            } else {
                let sweep = if precision == Precision::F16x3 { coop_sweep() } else { default_sweep() };
                sweep.into_iter().map(|c| kind_for(&gpu, precision, c)).collect::<Result<_, _>>()?
            }
        }
    };
    if args.direct && !kernels.contains(&KernelKind::Direct) {
        kernels.push(KernelKind::Direct);
    }
    let opts = BenchOptions {
        problem,
        kernels,
        warmup: args.warmup,
        runs: args.runs,
        activation: if args.relu { Activation::Relu } else { Activation::None },
        peak_tflops: args.peak_tflops,
        seed: 0x00c0_ffee,
    };
    let bar = ProgressBar::new(opts.kernels.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{bar:30}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let report = bench::run(&gpu, &opts, |i, total, name| {
        bar.set_length(total as u64);
        bar.set_position(i as u64);
        bar.set_message(name.to_string());
    })?;
    bar.finish_and_clear();
    print!("{}", bench::table(&report));
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .map_err(|e| super::CliError(format!("--json {}: {e}", path.display())))?;
    }
    if let Some(path) = &args.svg {
        chart(&report, path).map_err(|e| super::CliError(format!("--svg {}: {e}", path.display())))?;
    }
    Ok(())
}

/// A horizontal bar chart of median time per config (whiskers: min–max), fastest on top.
fn chart(report: &BenchReport, path: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;
    let rows: Vec<_> = report
        .ranked()
        .into_iter()
        .filter_map(|r| match &r.outcome {
            Outcome::Ok { time_ms, .. } => Some((r.kernel.clone(), *time_ms)),
            _ => None,
        })
        .collect();
    if rows.is_empty() {
        return Err("no correct config to chart".into());
    }
    let height = 120 + 28 * rows.len() as u32;
    let root = SVGBackend::new(path, (900, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let x_max = rows.iter().map(|(_, t)| t.max).fold(0.0f64, f64::max) * 1.1;
    let n = rows.len() as i32;
    let title = format!("{} — {} ({})", report.adapter.name, report.problem_text, report.date.get(..10).unwrap_or(""));
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(240)
        .build_cartesian_2d(0.0..x_max, (0..n).into_segmented())?;
    let labels: Vec<String> = rows.iter().map(|(k, _)| k.clone()).collect();
    chart
        .configure_mesh()
        .x_desc("GPU time per run, ms (bar: median, line: min–max)")
        .y_labels(rows.len())
        .y_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
                labels.get((n - 1 - *i) as usize).cloned().unwrap_or_default()
            }
            _ => String::new(),
        })
        .draw()?;
    for (i, (_, t)) in rows.iter().enumerate() {
        let y = n - 1 - i as i32;
        let color = if i == 0 { RGBColor(46, 125, 50) } else { RGBColor(66, 110, 180) };
        chart.draw_series(std::iter::once(Rectangle::new(
            [(0.0, SegmentValue::Exact(y)), (t.median, SegmentValue::Exact(y + 1))],
            color.mix(0.75).filled(),
        )))?;
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(t.min, SegmentValue::CenterOf(y)), (t.max, SegmentValue::CenterOf(y))],
            BLACK.stroke_width(2),
        )))?;
    }
    root.present()?;
    Ok(())
}
