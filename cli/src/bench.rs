//! `wgconv bench`: compare kernels on one problem (the benchmark itself is
//! [`crate::bench_run`]).

use crate::bench_args::{built_selection, parse_entry, write_outputs, Args};
use crate::bench_run::{self, BenchOptions, BenchReport, CheckImages, Outcome};
use crate::cli::{CliError, CliResult};
use indicatif::{ProgressBar, ProgressStyle};
use wgconv::advanced::{benchmark_families, default_kernel, sweep};
use wgconv::{Gpu, Kernel, Precision};

/// The declared sweep of a precision on this device: the sweeps of every family of that
/// precision the device runs (`wgconv::advanced::benchmark_families`: on cooperative
/// matrices in f16 the stem, gathering, channels-last, Winograd, split-K, row-band, SIMT
/// and depthwise kernels, each refused with its reason where the convolution does not suit
/// it).
fn declared_sweep(gpu: &Gpu, precision: Precision) -> CliResult<Vec<Kernel>> {
    let families = benchmark_families(gpu.caps(), precision);
    if families.is_empty() {
        // No family of this precision runs here: the default kernel's refusal says why.
        default_kernel(gpu.caps(), precision)?;
    }
    let mut kernels = Vec::new();
    for f in families {
        kernels.extend(sweep(f)?);
    }
    Ok(kernels)
}

pub fn main(args: Args) -> CliResult {
    if args.model.is_some() {
        return crate::model::main(args);
    }
    if args.runs < 20 {
        return Err(CliError(format!("--runs must be at least 20 (got {})", args.runs)));
    }
    let (precision, activation, gpu) = args.open()?;
    let default_batch = if gpu.is_cpu() { bench_run::CPU_BATCH } else { 256 };
    if gpu.is_cpu() && args.shape.batch.is_none() {
        eprintln!("wgconv bench: {} is a CPU adapter: batch {default_batch} (use --batch to override)", gpu.info.name);
    }
    let problem = args.shape.problem(default_batch)?;
    let mut auto = None;
    let mut kernels: Vec<Kernel> = match &args.configs {
        Some(names) => {
            let mut kernels = Vec::new();
            for name in names {
                match parse_entry(name, precision, &gpu)? {
                    Some(k) => kernels.push(k),
                    None => {
                        if auto.is_none() {
                            let layout = args.layout.into();
                            let storage = args.storage.into();
                            let (s, _) =
                                built_selection(&gpu, &problem, precision, activation, layout, storage, false)?;
                            auto = Some(s);
                        }
                        kernels.extend(auto.as_ref().map(|s| s.kernel.clone()));
                    }
                }
            }
            kernels
        }
        None => declared_sweep(&gpu, precision)?,
    };
    let direct = Kernel::parse("direct")?;
    if args.direct && !kernels.contains(&direct) {
        kernels.push(direct);
    }
    // A kernel named twice (e.g. `auto` and the kernel it stands for) is timed once.
    let mut seen = std::collections::HashSet::new();
    kernels.retain(|k| seen.insert(k.clone()));
    let opts = BenchOptions {
        problem,
        kernels,
        warmup: args.warmup,
        runs: args.runs,
        interleave: args.interleave,
        activation,
        peak_tflops: args.peak_tflops,
        seed: 0x00c0_ffee,
        check: CheckImages::FirstAndLast,
        layout: args.layout.into(),
        storage: args.storage.into(),
    };
    let bar = ProgressBar::new(opts.kernels.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{bar:30}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let report = bench_run::run(&gpu, &opts, auto.as_ref(), |i, total, name| {
        bar.set_length(total as u64);
        bar.set_position(i as u64);
        bar.set_message(name.to_string());
    })?;
    bar.finish_and_clear();
    print!("{}", bench_run::table(&report));
    write_outputs(&args, &report, |path| chart(&report, path))
}

/// A horizontal bar chart of median time per kernel (whiskers: min–max), fastest on top.
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
