//! `wgconv info`: every adapter wgpu finds, the one wgconv would pick and why, and per
//! adapter the limits, features and tile configs that matter to wgconv.

use crate::cli::{CliResult, DeviceArgs};
use serde::Serialize;
use wgconv::advanced::{
    adapter_substring, choose_adapter, default_kernel, default_sweep, enumerate_adapters, AdapterSummary,
};
use wgconv::{DeviceCaps, KernelLimits, Precision};

#[derive(clap::Args)]
#[command(
    about = "List the GPU adapters, the one wgconv would use and why, and their limits and features",
    long_about = "List every adapter wgpu finds (name, backend, device type, driver), the one wgconv would \
pick and why, and per adapter the limits and features wgconv cares about: binding and buffer sizes, \
workgroup memory and invocations, subgroup sizes, SHADER_F16, TIMESTAMP_QUERY, SUBGROUP, cooperative \
matrices, each precision's (f32, f16, f16x3) default kernel on it (cooperative matrices opted in, as \
`wgconv bench --precision` does; a convolution may still select another, see `wgconv bench --configs auto`), \
and which configs of the default tile sweep the adapter would refuse, with the reason.\n\n\
The choice follows `wgconv run`: --adapter (or WGCONV_ADAPTER) picks by name substring, else the best \
device type (discrete > integrated > virtual > other > CPU); --backend (or WGPU_BACKEND) limits the search.",
    after_help = "Examples:\n  wgconv info\n  wgconv info --json > adapters.json\n  wgconv info --backend vulkan --adapter llvmpipe"
)]
pub struct Args {
    /// Print the same information as JSON (stdout)
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    device: DeviceArgs,
}

#[derive(Serialize)]
struct Report {
    /// Index into `adapters` of the one wgconv would use, if any.
    chosen: Option<usize>,
    /// Why that one, or why none.
    reason: String,
    adapters: Vec<AdapterReport>,
}

#[derive(Serialize)]
struct AdapterReport {
    index: usize,
    #[serde(flatten)]
    summary: AdapterSummary,
    vendor: u32,
    device: u32,
    chosen: bool,
    limits: LimitsReport,
    features: FeaturesReport,
    cooperative_matrix_properties: Vec<CoopMatrix>,
    /// The family of each precision's default kernel on this adapter, or "refused".
    precision_paths: PrecisionPaths,
    /// Each precision's default kernel on this adapter (`wgconv bench --precision`,
    /// `Conv2dOptions::precision`), or why the precision cannot run here.
    default_kernels: DefaultKernels,
    /// The adapter's datasheet rates where `wgconv::DECLARED_RATES` lists it: what decides
    /// whether f32 may run on the matrix units (README, "Which kernel runs", rule 5).
    declared_rates: Option<RatesReport>,
    /// Configs of the default sweep this adapter refuses, with the reason.
    refused_configs: Vec<Refusal>,
    /// How many configs the default sweep has.
    sweep_size: usize,
}

#[derive(Serialize)]
struct PrecisionPaths {
    f32: String,
    f16: String,
    f16x3: String,
}

impl PrecisionPaths {
    /// The families of [`DefaultKernels`] (`tiled`, `tiled-f16`, `coop-f16`, `coop-f16x3`)
    /// or "refused".
    fn of(k: &DefaultKernels) -> Self {
        let path = |d: &DefaultKernel| d.family.clone().unwrap_or_else(|| "refused".to_string());
        PrecisionPaths { f32: path(&k.f32), f16: path(&k.f16), f16x3: path(&k.f16x3) }
    }
}

#[derive(Serialize)]
struct DefaultKernels {
    f32: DefaultKernel,
    f16: DefaultKernel,
    f16x3: DefaultKernel,
}

#[derive(Serialize)]
struct DefaultKernel {
    /// The kernel's name, `family:config`; `None` where the precision is refused.
    kernel: Option<String>,
    family: Option<String>,
    /// Why the precision cannot run on this adapter.
    refused: Option<String>,
}

impl DefaultKernels {
    /// `wgconv::advanced::default_kernel` for each precision, on the capabilities a device
    /// opened from `adapter` with the cooperative-matrix opt-in would have (`wgconv bench
    /// --precision` opts in).
    fn of(adapter: &wgpu::Adapter) -> Self {
        let caps = DeviceCaps::of_adapter(adapter, true);
        let of = |p: Precision| match default_kernel(&caps, p) {
            Ok(k) => DefaultKernel { kernel: Some(k.to_string()), family: Some(k.family().to_string()), refused: None },
            Err(e) => DefaultKernel { kernel: None, family: None, refused: Some(e.to_string()) },
        };
        DefaultKernels { f32: of(Precision::F32), f16: of(Precision::F16Accum32), f16x3: of(Precision::F16x3) }
    }
}

#[derive(Serialize)]
struct LimitsReport {
    max_storage_buffer_binding_size: u64,
    max_buffer_size: u64,
    max_compute_workgroup_storage_size: u32,
    max_compute_invocations_per_workgroup: u32,
    max_compute_workgroup_size_x: u32,
    max_compute_workgroups_per_dimension: u32,
    min_storage_buffer_offset_alignment: u32,
    /// From the adapter info (wgpu 30 reports subgroup sizes there, not in the limits).
    min_subgroup_size: u32,
    max_subgroup_size: u32,
}

#[derive(Serialize)]
struct FeaturesReport {
    shader_f16: bool,
    timestamp_query: bool,
    subgroup: bool,
    experimental_cooperative_matrix: bool,
}

#[derive(Serialize)]
struct CoopMatrix {
    m: u32,
    n: u32,
    k: u32,
    ab_type: String,
    cr_type: String,
    saturating_accumulation: bool,
}

#[derive(Serialize)]
struct RatesReport {
    fp32_tflops: f64,
    f16_matrix_tflops: f64,
    bandwidth_gbs: f64,
    multiprocessors: u32,
    l2_mib: u32,
}

#[derive(Serialize)]
struct Refusal {
    config: String,
    reason: String,
}

fn describe(index: usize, adapter: &wgpu::Adapter, chosen: bool) -> AdapterReport {
    let info = adapter.get_info();
    let l = adapter.limits();
    let f = adapter.features();
    let kl = KernelLimits::from(&l);
    let sweep = default_sweep();
    let default_kernels = DefaultKernels::of(adapter);
    let refused_configs = sweep
        .iter()
        .filter_map(|c| {
            c.validate(&kl).err().map(|e| Refusal {
                config: c.name(),
                reason: match e {
                    wgconv::Error::KernelRefused { reason, .. } => reason,
                    e => e.to_string(),
                },
            })
        })
        .collect();
    AdapterReport {
        index,
        summary: AdapterSummary::of(&info),
        vendor: info.vendor,
        device: info.device,
        chosen,
        limits: LimitsReport {
            max_storage_buffer_binding_size: l.max_storage_buffer_binding_size,
            max_buffer_size: l.max_buffer_size,
            max_compute_workgroup_storage_size: l.max_compute_workgroup_storage_size,
            max_compute_invocations_per_workgroup: l.max_compute_invocations_per_workgroup,
            max_compute_workgroup_size_x: l.max_compute_workgroup_size_x,
            max_compute_workgroups_per_dimension: l.max_compute_workgroups_per_dimension,
            min_storage_buffer_offset_alignment: l.min_storage_buffer_offset_alignment,
            min_subgroup_size: info.subgroup_min_size,
            max_subgroup_size: info.subgroup_max_size,
        },
        features: FeaturesReport {
            shader_f16: f.contains(wgpu::Features::SHADER_F16),
            timestamp_query: f.contains(wgpu::Features::TIMESTAMP_QUERY),
            subgroup: f.contains(wgpu::Features::SUBGROUP),
            experimental_cooperative_matrix: f.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX),
        },
        cooperative_matrix_properties: adapter
            .cooperative_matrix_properties()
            .iter()
            .map(|p| CoopMatrix {
                m: p.m_size,
                n: p.n_size,
                k: p.k_size,
                ab_type: format!("{:?}", p.ab_type),
                cr_type: format!("{:?}", p.cr_type),
                saturating_accumulation: p.saturating_accumulation,
            })
            .collect(),
        precision_paths: PrecisionPaths::of(&default_kernels),
        default_kernels,
        declared_rates: wgconv::declared_rates(&info.name).map(|r| RatesReport {
            fp32_tflops: r.fp32_tflops,
            f16_matrix_tflops: r.f16_matrix_tflops,
            bandwidth_gbs: r.bandwidth_gbs,
            multiprocessors: r.multiprocessors,
            l2_mib: r.l2_mib,
        }),
        refused_configs,
        sweep_size: sweep.len(),
    }
}

fn bytes(v: u64) -> String {
    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;
    const KIB: u64 = 1 << 10;
    if v >= GIB {
        format!("{v} B ({:.1} GiB)", v as f64 / GIB as f64)
    } else if v >= MIB && v.is_multiple_of(MIB) {
        format!("{v} B ({} MiB)", v / MIB)
    } else if v >= MIB {
        format!("{v} B ({:.1} MiB)", v as f64 / MIB as f64)
    } else if v >= KIB && v.is_multiple_of(KIB) {
        format!("{v} B ({} KiB)", v / KIB)
    } else {
        format!("{v} B")
    }
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

fn print_text(r: &Report) {
    let n = r.adapters.len();
    println!("wgconv {}: {n} adapter{} found", env!("CARGO_PKG_VERSION"), if n == 1 { "" } else { "s" });
    match r.chosen {
        Some(i) => println!("wgconv would use [{i}] {}: {}", r.adapters[i].summary.name, r.reason),
        None => println!("wgconv would use none: {}", r.reason),
    }
    for a in &r.adapters {
        let s = &a.summary;
        println!();
        println!("[{}] {}{}", a.index, s.name, if a.chosen { "  <- wgconv would use this" } else { "" });
        println!(
            "    backend {}, device type {}, vendor 0x{:04x}, device 0x{:04x}",
            s.backend, s.device_type, a.vendor, a.device
        );
        println!("    driver: {}", [s.driver.trim(), s.driver_info.trim()].join(" ").trim());
        let l = &a.limits;
        println!("    limits:");
        println!("      max_storage_buffer_binding_size       {}", bytes(l.max_storage_buffer_binding_size));
        println!("      max_buffer_size                       {}", bytes(l.max_buffer_size));
        println!("      max_compute_workgroup_storage_size    {}", bytes(l.max_compute_workgroup_storage_size as u64));
        println!("      max_compute_invocations_per_workgroup {}", l.max_compute_invocations_per_workgroup);
        println!("      max_compute_workgroup_size_x          {}", l.max_compute_workgroup_size_x);
        println!("      max_compute_workgroups_per_dimension  {}", l.max_compute_workgroups_per_dimension);
        println!("      min_storage_buffer_offset_alignment   {}", l.min_storage_buffer_offset_alignment);
        println!("      subgroup size (min..max)              {}..{}", l.min_subgroup_size, l.max_subgroup_size);
        let f = &a.features;
        println!(
            "    features: SHADER_F16 {}, TIMESTAMP_QUERY {}, SUBGROUP {}, EXPERIMENTAL_COOPERATIVE_MATRIX {}",
            yes(f.shader_f16),
            yes(f.timestamp_query),
            yes(f.subgroup),
            yes(f.experimental_cooperative_matrix)
        );
        if a.cooperative_matrix_properties.is_empty() {
            println!("    cooperative matrix configurations: none");
        } else {
            println!("    cooperative matrix configurations (M x N x K, A/B type -> C/R type):");
            for c in &a.cooperative_matrix_properties {
                println!(
                    "      {}x{}x{} {} -> {}{}",
                    c.m,
                    c.n,
                    c.k,
                    c.ab_type,
                    c.cr_type,
                    if c.saturating_accumulation { " (saturating)" } else { "" }
                );
            }
        }
        println!("    precisions (each one's default kernel, cooperative matrices opted in as `wgconv bench` does):");
        let k = &a.default_kernels;
        for (name, d) in [("f32", &k.f32), ("f16", &k.f16), ("f16x3", &k.f16x3)] {
            match (&d.kernel, &d.refused) {
                (Some(kernel), _) => println!("      {name:<5} -> {kernel}"),
                (None, reason) => println!("      {name:<5} -> refused: {}", reason.as_deref().unwrap_or("")),
            }
        }
        match &a.declared_rates {
            Some(r) => {
                let ratio = r.f16_matrix_tflops / r.fp32_tflops;
                let f32_path = if ratio >= wgconv::advanced::F32_MATRIX_MIN_RATE_RATIO {
                    "f32 runs dense layers of known shape on the matrix units where estimated faster"
                } else {
                    "f32 stays on the FMA units"
                };
                println!(
                    "    declared rates: fp32 {} TFLOP/s, f16 matrix {} TFLOP/s ({ratio:.1}x), {} GB/s, {} \
                     multiprocessors, {} MiB L2: {f32_path}",
                    r.fp32_tflops, r.f16_matrix_tflops, r.bandwidth_gbs, r.multiprocessors, r.l2_mib
                );
            }
            None => println!("    declared rates: none (not in wgconv::DECLARED_RATES): f32 stays on the FMA units"),
        }
        if a.refused_configs.is_empty() {
            println!("    default sweep: all {} configs fit", a.sweep_size);
        } else {
            println!(
                "    default sweep: {} of {} configs fit; refused:",
                a.sweep_size - a.refused_configs.len(),
                a.sweep_size
            );
            for r in &a.refused_configs {
                println!("      {}: {}", r.config, r.reason);
            }
        }
    }
}

pub fn main(args: Args) -> CliResult {
    let adapters = enumerate_adapters(args.device.backends());
    let infos: Vec<_> = adapters.iter().map(|a| a.get_info()).collect();
    let substring = adapter_substring(args.device.adapter.as_deref());
    let (chosen, reason) = match choose_adapter(&infos, substring.as_deref()) {
        Ok((i, why)) => (Some(i), why),
        Err(e) => (None, e.to_string()),
    };
    let report = Report {
        chosen,
        reason,
        adapters: adapters.iter().enumerate().map(|(i, a)| describe(i, a, chosen == Some(i))).collect(),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_text(&report);
    }
    Ok(())
}
