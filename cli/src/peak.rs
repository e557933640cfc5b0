//! `wgconv peak`: what this adapter delivers through wgpu — the fp32 FMA rate, the f16 × f16
//! → f32 cooperative-matrix rate from registers and from workgroup memory (the inner loop of
//! the channels-last kernels, with and without a barrier per K step), and the memory
//! bandwidth of a compute-shader copy — beside the datasheet rates selection uses where the
//! adapter is in `wgconv::DECLARED_RATES`. A kernel's "% of floor" means little without the
//! ceiling of the path it runs on; these are those ceilings.
//!
//! Each rate kernel is calibrated to a dispatch of about `--target-ms` (its workgroup count
//! doubled until then), run as often untimed to bring the clock up, then timed `--runs`
//! times with GPU timestamps (median, min, max).

use crate::bench_run::{measure_bandwidth, time_dispatches};
use crate::cli::{CliResult, DeviceArgs};
use serde::Serialize;
use wgconv::advanced::AdapterSummary;
use wgconv::half::f16;
use wgconv::tune::timing::{Clock, Summary};
use wgconv::{Error, Gpu, Result};
use wgpu::util::DeviceExt;

#[derive(clap::Args)]
#[command(
    about = "Measure the adapter's fp32 FMA rate, cooperative-matrix rates and memory bandwidth",
    long_about = "Measure what the adapter delivers through wgpu: the fp32 FMA rate (independent multiply-add \
chains), the f16 x f16 -> f32 cooperative-matrix rate from registers (no memory traffic: the ceiling of \
any matrix kernel) and from workgroup memory (each warp loading its 16x16 fragments from staged tiles as \
the channels-last kernels do, with and without a barrier per K step), and the bandwidth of a compute-shader \
copy. Each kernel is calibrated to about --target-ms per dispatch, warmed up, then timed --runs times with \
GPU timestamps. Where the adapter's datasheet rates are known (wgconv::DECLARED_RATES) each row shows its \
percentage of them. The matrix rows need cooperative matrices (opted in here); where the adapter has none \
they say why.",
    after_help = "Examples:\n  wgconv peak\n  wgconv peak --json peak.json --runs 50"
)]
pub struct Args {
    /// Timed runs per kernel (median, min and max are reported)
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(3..=2048))]
    runs: u32,
    /// Calibrate each rate kernel to about this many milliseconds per dispatch
    #[arg(long, default_value_t = 2.0)]
    target_ms: f64,
    /// Measure only the rows whose description contains this (case-insensitive), e.g. "fp32" or "registers"
    #[arg(long, value_name = "SUBSTRING")]
    only: Option<String>,
    /// Also write the report as JSON to this file
    #[arg(long, value_name = "FILE")]
    json: Option<std::path::PathBuf>,
    #[command(flatten)]
    device: DeviceArgs,
}

/// Steps of each rate kernel's loop (the dispatch size is what calibration changes).
const ITERS: u32 = 512;
/// Invocations per workgroup of the FMA kernel.
const FMA_WG: u32 = 256;
/// Multiply-adds per step of the FMA kernel's invocations (fma.wgsl: 4 × 8 chains).
const FMA_PER_STEP: u64 = 32;
/// Invocations per warp of the cooperative-matrix kernels (they need subgroups of 32).
const WARP: u32 = 32;
/// Most workgroups calibration tries (one dimension of the dispatch).
const MAX_WORKGROUPS: u32 = 65535;
/// Bytes per copy of the bandwidth row on a GPU and on a CPU adapter.
const GPU_COPY_BYTES: u64 = 1 << 30;
const CPU_COPY_BYTES: u64 = 16 << 20;

/// The shape of one cooperative-matrix kernel: `warps_m × warps_n` warps of `fm × fn`
/// 16×16 accumulators each, operands from registers or from workgroup tiles `bk` deep.
#[derive(Debug, Clone, Copy, Serialize)]
struct MatrixShape {
    warps_m: u32,
    warps_n: u32,
    fm: u32,
    #[serde(rename = "fn")]
    fn_: u32,
    /// Operands from workgroup memory (`Some(bk)`, the tile's depth) or registers (`None`).
    bk: Option<u32>,
    /// A workgroup barrier after every `bk`-deep step.
    barrier: bool,
}

impl MatrixShape {
    fn warps(&self) -> u32 {
        self.warps_m * self.warps_n
    }
    fn name(&self) -> String {
        let where_ = match self.bk {
            None => "registers".to_string(),
            Some(bk) => format!(
                "workgroup tiles {}x{}x{bk}{}",
                self.warps_m * self.fm * 16,
                self.warps_n * self.fn_ * 16,
                if self.barrier { ", barrier per K step" } else { "" }
            ),
        };
        format!("f16 matrix, {where_}, {} warps of {}x{} fragments", self.warps(), self.fm, self.fn_)
    }
    /// FLOPs of one workgroup: its warps' multiply-adds of 16×16×16 over the loop.
    fn flops_per_workgroup(&self) -> f64 {
        2.0 * 4096.0 * (self.warps() * self.fm * self.fn_) as f64 * ITERS as f64
    }
    /// Workgroup memory of the tiles (f16 pairs, rows padded by 8 f16), in bytes.
    fn tile_bytes(&self) -> u32 {
        self.bk.map_or(0, |bk| {
            let (bm, bn) = (self.warps_m * self.fm * 16, self.warps_n * self.fn_ * 16);
            2 * (bm * (bk + 8) + bk * (bn + 8))
        })
    }
}

/// The matrix rows: registers at several accumulator and warp counts (the rate, and how much
/// independent work it needs), then the channels-last kernels' warp tile (4×2 fragments in a
/// 128×128 block) with K steps of 64 and of 32 (half the workgroup memory: two workgroups
/// fit where one of 64 does), and a wider one (4×4 in 128×256), with and without the barrier.
const MATRIX_SHAPES: &[MatrixShape] = &[
    MatrixShape { warps_m: 2, warps_n: 4, fm: 2, fn_: 2, bk: None, barrier: false },
    MatrixShape { warps_m: 2, warps_n: 4, fm: 4, fn_: 2, bk: None, barrier: false },
    MatrixShape { warps_m: 2, warps_n: 4, fm: 4, fn_: 4, bk: None, barrier: false },
    MatrixShape { warps_m: 2, warps_n: 2, fm: 4, fn_: 2, bk: None, barrier: false },
    MatrixShape { warps_m: 2, warps_n: 4, fm: 4, fn_: 2, bk: Some(64), barrier: false },
    MatrixShape { warps_m: 2, warps_n: 4, fm: 4, fn_: 2, bk: Some(64), barrier: true },
    MatrixShape { warps_m: 2, warps_n: 4, fm: 4, fn_: 2, bk: Some(32), barrier: true },
    MatrixShape { warps_m: 2, warps_n: 4, fm: 4, fn_: 4, bk: Some(32), barrier: false },
    MatrixShape { warps_m: 2, warps_n: 4, fm: 4, fn_: 4, bk: Some(32), barrier: true },
];

#[derive(Serialize)]
struct Report {
    adapter: AdapterSummary,
    /// The datasheet rates selection uses for this adapter, where it knows them.
    declared: Option<Declared>,
    rows: Vec<Row>,
}

#[derive(Serialize)]
struct Declared {
    fp32_tflops: f64,
    f16_matrix_tflops: f64,
    bandwidth_gbs: f64,
}

#[derive(Serialize)]
struct Row {
    what: String,
    /// TFLOP/s (or GB/s for the bandwidth row) at the median time; `None` where it failed.
    rate: Option<f64>,
    unit: &'static str,
    /// Per dispatch.
    time_ms: Option<Summary>,
    /// The rate as a percentage of the datasheet's, where known.
    pct_of_declared: Option<f64>,
    /// The matrix rows' shape.
    #[serde(skip_serializing_if = "Option::is_none")]
    shape: Option<MatrixShape>,
    /// Workgroups per dispatch after calibration.
    #[serde(skip_serializing_if = "Option::is_none")]
    workgroups: Option<u32>,
    clock: Option<Clock>,
    /// Why the row has no rate.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

impl Row {
    fn failed(what: String, unit: &'static str, error: String) -> Self {
        Row {
            what,
            rate: None,
            unit,
            time_ms: None,
            pct_of_declared: None,
            shape: None,
            workgroups: None,
            clock: None,
            error: Some(error),
        }
    }
}

pub fn main(a: Args) -> CliResult {
    if !(a.target_ms.is_finite() && a.target_ms > 0.0 && a.target_ms <= 1000.0) {
        return Err(format!("--target-ms must be in (0, 1000], got {}", a.target_ms).into());
    }
    let options = wgconv::GpuOptions::default()
        .adapter(a.device.adapter.clone())
        .backends(a.device.backends())
        .cooperative_matrix(true);
    let gpu = Gpu::with_options(options).map_err(|e| a.device.explain(e))?;
    let caps = gpu.caps();
    let declared = caps.declared_rates().map(|r| Declared {
        fp32_tflops: r.fp32_tflops,
        f16_matrix_tflops: r.f16_matrix_tflops,
        bandwidth_gbs: r.bandwidth_gbs,
    });
    let cpu = caps.is_cpu();
    let pct = |rate: f64, of: Option<f64>| of.map(|d| 100.0 * rate / d);
    let only = a.only.as_deref().map(str::to_lowercase);
    let wanted = |what: &str| only.as_deref().is_none_or(|o| what.to_lowercase().contains(o));
    let mut rows = Vec::new();

    let what = "fp32 FMA".to_string();
    if wanted(&what) {
        rows.push(match rate_row(&gpu, &a, &fma_kernel(), fma_flops) {
            Ok((rate, time, wg, clock)) => Row {
                pct_of_declared: pct(rate, declared.as_ref().map(|d| d.fp32_tflops)),
                ..rate_ok(what, rate, time, wg, clock)
            },
            Err(e) => Row::failed(what, "TFLOP/s", e.to_string()),
        });
    }
    for shape in MATRIX_SHAPES {
        let what = shape.name();
        if !wanted(&what) {
            continue;
        }
        let row = match matrix_refusal(&gpu, shape) {
            Some(why) => Row::failed(what, "TFLOP/s", why),
            None => {
                let kernel = matrix_kernel(shape);
                match rate_row(&gpu, &a, &kernel, |wg| wg as f64 * shape.flops_per_workgroup()) {
                    Ok((rate, time, wg, clock)) => Row {
                        pct_of_declared: pct(rate, declared.as_ref().map(|d| d.f16_matrix_tflops)),
                        shape: Some(*shape),
                        ..rate_ok(what, rate, time, wg, clock)
                    },
                    Err(e) => Row::failed(what, "TFLOP/s", e.to_string()),
                }
            }
        };
        rows.push(row);
    }
    let what = "memory copy (compute shader, 16-byte words)".to_string();
    let bytes = if cpu { CPU_COPY_BYTES } else { GPU_COPY_BYTES };
    if wanted(&what) {
        rows.push(match measure_bandwidth(&gpu, bytes, a.runs) {
            Ok(bw) => Row {
                what,
                rate: Some(bw.gb_per_s),
                unit: "GB/s",
                pct_of_declared: pct(bw.gb_per_s, declared.as_ref().map(|d| d.bandwidth_gbs)),
                time_ms: Some(bw.time_ms),
                shape: None,
                workgroups: None,
                clock: Some(bw.clock),
                error: None,
            },
            Err(e) => Row::failed(what, "GB/s", e.to_string()),
        });
    }
    if rows.is_empty() {
        return Err(format!("--only {}: no row matches", a.only.unwrap_or_default()).into());
    }

    let report = Report { adapter: gpu.summary(), declared, rows };
    print_report(&report);
    if let Some(path) = &a.json {
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    Ok(())
}

fn rate_ok(what: String, rate: f64, time: Summary, workgroups: u32, clock: Clock) -> Row {
    Row {
        what,
        rate: Some(rate),
        unit: "TFLOP/s",
        time_ms: Some(time),
        pct_of_declared: None,
        shape: None,
        workgroups: Some(workgroups),
        clock: Some(clock),
        error: None,
    }
}

fn fma_flops(workgroups: u32) -> f64 {
    2.0 * (workgroups as u64 * FMA_WG as u64 * ITERS as u64 * FMA_PER_STEP) as f64
}

/// Why a matrix shape cannot run on this device, if it cannot.
fn matrix_refusal(gpu: &Gpu, shape: &MatrixShape) -> Option<String> {
    let caps = gpu.caps();
    if !caps.coop_f16 {
        return Some(match caps.coop_f16_offered {
            Some(false) => {
                "the adapter offers no f16 x f16 -> f32 16x16x16 cooperative matrices with subgroups of 32".to_string()
            }
            _ => "cooperative matrices are not enabled on this device".to_string(),
        });
    }
    let limits = gpu.limits();
    if shape.warps() * WARP > limits.max_compute_invocations_per_workgroup {
        return Some(format!(
            "{} invocations per workgroup, over the device's {}",
            shape.warps() * WARP,
            limits.max_compute_invocations_per_workgroup
        ));
    }
    if shape.tile_bytes() > limits.max_compute_workgroup_storage_size {
        return Some(format!(
            "{} B of workgroup memory, over the device's {}",
            shape.tile_bytes(),
            limits.max_compute_workgroup_storage_size
        ));
    }
    None
}

fn fma_kernel() -> String {
    format!("const ITERS: u32 = {ITERS}u;\nconst WG: u32 = {FMA_WG}u;\n{}", include_str!("peak/fma.wgsl"))
}

/// A matrix kernel's source: its constants and the per-fragment statements (WGSL cannot
/// index an array of cooperative matrices, so each one is written out).
fn matrix_kernel(s: &MatrixShape) -> String {
    let frags: Vec<(u32, u32)> = (0..s.fm).flat_map(|i| (0..s.fn_).map(move |j| (i, j))).collect();
    let decls: String =
        frags.iter().map(|(i, j)| format!("var<private> acc_{i}_{j}: coop_mat16x16<f32, C>;\n")).collect();
    let init: String = frags.iter().map(|(i, j)| format!("acc_{i}_{j} = coop_mat16x16<f32, C>();\n")).collect();
    let mma: String =
        frags.iter().map(|(i, j)| format!("acc_{i}_{j} = coopMultiplyAdd(a_{i}, b_{j}, acc_{i}_{j});\n")).collect();
    // Every warp of every workgroup stores to the same place: the values are never read.
    let store: String = frags
        .iter()
        .enumerate()
        .map(|(k, (i, j))| format!("coopStore(acc_{i}_{j}, &sink[{}u], 16u);\n", k * 256))
        .collect();
    let (body, mut text) = match s.bk {
        None => {
            let loads: String = (0..s.fm)
                .map(|i| format!("let a_{i} = coopLoadT<coop_mat16x16<f16, A>>(&seeds[{}u], 16u);\n", i * 256))
                .chain((0..s.fn_).map(|j| {
                    format!("let b_{j} = coopLoadT<coop_mat16x16<f16, B>>(&seeds[{}u], 16u);\n", (s.fm + j) * 256)
                }))
                .collect();
            let head = format!("const ITERS: u32 = {ITERS}u;\nconst WG: u32 = {}u;\n", s.warps() * WARP);
            (include_str!("peak/matrix_registers.wgsl").replace("//{fragment_loads}", &loads), head)
        }
        Some(bk) => {
            let loads: String = (0..s.fm)
                .map(|i| {
                    format!(
                        "let a_{i} = coopLoadT<coop_mat16x16<f16, A>>(&a_tile[a_at + {}u * A_PSTRIDE], A_PSTRIDE);\n",
                        i * 16
                    )
                })
                .chain((0..s.fn_).map(|j| {
                    format!("let b_{j} = coopLoadT<coop_mat16x16<f16, B>>(&b_tile[b_at + {}u], B_PSTRIDE);\n", j * 8)
                }))
                .collect();
            let head = format!(
                "const ITERS: u32 = {ITERS}u;\nconst WG: u32 = {}u;\nconst WARPS_M: u32 = {}u;\nconst FM: u32 = {}u;\n\
                 const FN: u32 = {}u;\nconst BM: u32 = {}u;\nconst BN: u32 = {}u;\nconst BK: u32 = {bk}u;\n\
                 const BARRIER_EVERY_K_STEP: bool = {};\n",
                s.warps() * WARP,
                s.warps_m,
                s.fm,
                s.fn_,
                s.warps_m * s.fm * 16,
                s.warps_n * s.fn_ * 16,
                s.barrier
            );
            (include_str!("peak/matrix_tiles.wgsl").replace("//{fragment_tile_loads}", &loads), head)
        }
    };
    let body = body
        .replace("//{fragment_decls}", &decls)
        .replace("//{fragment_init}", &init)
        .replace("//{fragment_mma}", &mma)
        .replace("//{fragment_store}", &store);
    text.insert_str(0, "enable f16;\nenable wgpu_cooperative_matrix;\n");
    text.push_str(&body);
    text
}

/// Calibrates `source`'s dispatch to about `--target-ms`, then times `--runs` dispatches:
/// (rate in TFLOP/s at the median, the times, workgroups per dispatch, the clock).
fn rate_row(gpu: &Gpu, a: &Args, source: &str, flops: impl Fn(u32) -> f64) -> Result<(f64, Summary, u32, Clock)> {
    let dev = &gpu.device;
    let seeds_f32: [f32; 4] = [0.999, 1e-3, 1e-7, -12345.0];
    let seeds_f16: Vec<f16> = (0..4096).map(|i| f16::from_f32(((i * 37) % 101) as f32 / 101.0 - 0.5)).collect();
    let f16_kernel = source.starts_with("enable f16;");
    let (pipeline, group) = crate::bench_run::scoped(dev, "rate kernel", || {
        let seeds = dev.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("peak seeds"),
            contents: if f16_kernel { bytemuck::cast_slice(&seeds_f16) } else { bytemuck::cast_slice(&seeds_f32) },
            usage: wgpu::BufferUsages::STORAGE,
        });
        let sink = dev.create_buffer(&wgpu::BufferDescriptor {
            label: Some("peak sink"),
            size: 64 * 1024,
            usage: wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        });
        let pipeline = crate::bench_run::wgsl_pipeline(dev, "peak rate", source);
        let group = dev.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("peak rate"),
            layout: &pipeline.get_bind_group_layout(0),
            entries: &[
                wgpu::BindGroupEntry { binding: 0, resource: seeds.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 1, resource: sink.as_entire_binding() },
            ],
        });
        (pipeline, group)
    })?;
    let groups = [group];
    let max_wg = MAX_WORKGROUPS.min(gpu.limits().max_compute_workgroups_per_dimension);
    // Calibration: double the workgroups until one dispatch takes the target time.
    let mut workgroups = 1u32;
    loop {
        let (times, _) = time_dispatches(gpu, "rate calibration", &pipeline, &groups, workgroups, 1, 1)?;
        let t = times.first().copied().unwrap_or(0.0);
        if t >= a.target_ms || workgroups >= max_wg {
            break;
        }
        // Jump close to the target once the time is measurable, else double.
        let factor = if t > a.target_ms / 64.0 { (a.target_ms / t).ceil().max(2.0) } else { 2.0 };
        workgroups = ((workgroups as f64 * factor).min(max_wg as f64)) as u32;
    }
    let (times, clock) = time_dispatches(gpu, "rate kernel", &pipeline, &groups, workgroups, a.runs, a.runs)?;
    let time = Summary::of(&times).ok_or_else(|| Error::Tune("no timings".into()))?;
    Ok((flops(workgroups) / (time.median * 1e-3) / 1e12, time, workgroups, clock))
}

fn print_report(r: &Report) {
    let ad = &r.adapter;
    println!("{} ({}, {} {})", ad.name, ad.backend, ad.driver, ad.driver_info);
    if let Some(d) = &r.declared {
        println!(
            "datasheet: fp32 {} TFLOP/s, f16 matrix {} TFLOP/s, {} GB/s",
            d.fp32_tflops, d.f16_matrix_tflops, d.bandwidth_gbs
        );
    } else {
        println!("datasheet: this adapter is not in wgconv::DECLARED_RATES");
    }
    println!("{:<82} {:>12} {:>22} {:>10}", "what", "rate", "median (min-max) ms", "% sheet");
    for row in &r.rows {
        match (row.rate, &row.time_ms) {
            (Some(rate), Some(t)) => println!(
                "{:<82} {:>12} {:>22} {:>10}",
                row.what,
                format!("{} {}", crate::model::sig(rate), row.unit),
                format!("{:.3} ({:.3}-{:.3})", t.median, t.min, t.max),
                row.pct_of_declared.map_or("-".to_string(), |p| format!("{p:.0}")),
            ),
            _ => println!("{:<82} {}", row.what, row.error.as_deref().unwrap_or("failed")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every rate kernel parses, validates and translates to SPIR-V (the cooperative-matrix
    /// ones cannot run on the CPU adapter the tests have).
    #[test]
    fn every_rate_kernel_translates_to_spirv() {
        let sources = std::iter::once(fma_kernel()).chain(MATRIX_SHAPES.iter().map(matrix_kernel));
        for src in sources {
            let module =
                naga::front::wgsl::parse_str(&src).unwrap_or_else(|e| panic!("{}\n{src}", e.emit_to_string(&src)));
            let info =
                naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::all())
                    .validate(&module)
                    .unwrap_or_else(|e| panic!("{}\n{src}", e.emit_to_string(&src)));
            naga::back::spv::write_vec(&module, &info, &Default::default(), None).expect("SPIR-V");
        }
    }

    #[test]
    fn matrix_shapes_fit_the_kernels_limits() {
        for s in MATRIX_SHAPES {
            assert!(s.warps() * WARP <= 256, "{}", s.name());
            assert!(s.tile_bytes() <= 48 * 1024, "{}: {} B", s.name(), s.tile_bytes());
            assert!(s.bk.is_none_or(|bk| bk % 16 == 0), "{}", s.name());
        }
    }
}
