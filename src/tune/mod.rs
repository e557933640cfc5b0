//! The micro-tuner: the seed's "final micro-tuning" stage, made measurable and repeatable.
//!
//! Given a shape ([`ConvProblem`]) and its current ("original") kernel and [`TileConfig`],
//! the tuner measures a handful of nearby configs of the same kernel, at the same precision,
//! and replaces the original only when a candidate is both clearly and stably faster. It
//! tunes the tiled kernels of every precision ([`check_tunable`]): f32 (`tiled`), f16
//! (`coop-f16` on cooperative matrices, else `tiled-f16`) and f16x3 (`coop-f16x3`): the
//! families whose kernels have a [`TileConfig`] ([`crate::Kernel::tile`]). Decisions
//! persist in the tuning cache ([`cache`]) and a `Conv2d` built with
//! `Conv2dOptions::tuning_key_input` picks them up ([`cached_decision`]).
//!
//! # Candidates ([`candidates`])
//! BLOCK_M/N/K (and so the grid) never change. Around the original (warps `w`, stages `s`):
//! 1. the original itself, always first;
//! 2. stages `s − 1` and `s + 1`, where they lie in {2, 3, 4};
//! 3. warps `w / 2` and `2w` (within {2, 4, 8, 16}: the register tile re-derived for the
//!    SIMT kernels ([`TileConfig::with_warps`]), the fragments re-split over the warps for
//!    the cooperative ones ([`TileConfig::with_fragment_warps`])) **only where the occupancy estimate suggests it** (below), at
//!    stages `s`, then the same with stages `s ± 1`;
//!
//! in that order, at most [`MAX_CANDIDATES`] (6). Neighbours that are not candidates (a warp
//! count the occupancy estimate does not suggest, one whose block the kernel cannot split
//! that way — no register tile of multiples of 4, or no fragment layout — or one past the
//! cap) are listed in the report as `skipped` with the reason. An original at 1 stage (the
//! cooperative kernels' default) has one stage neighbour, 2: the stage's range is the
//! seed's {2, 3, 4}. Candidates the device refuses ([`crate::Kernel::check_limits`]) or
//! that fail to build or to run are `excluded`, with the error.
//!
//! # Occupancy estimate ([`estimate_occupancy`])
//! Resident workgroups per multiprocessor are the minimum of four limits taken from a
//! per-adapter [`OccupancyProfile`]:
//! - registers: `regs_per_sm / (round_up(regs, alloc_unit) · invocations)`, where the
//!   per-invocation register estimate ([`estimate_registers`]) is
//!   `TM·TN accumulators + (TM + TN) operands + ⌈BM·BK/WG⌉ + 4·⌈BK·BN/4/WG⌉ prefetch
//!   registers + 24` (24: addresses, indices, loop counters) for the SIMT kernels, and
//!   `8·FM·FN accumulators + 4·(FM + FN)·h operand fragments + ⌈BM·BK/WG⌉ + 2h·⌈BK·BN/4/WG⌉
//!   prefetch registers + 8·(h − 1) + 40` for the cooperative ones (FM×FN fragments per
//!   warp, h f16 halves per operand: 1 for f16, 2 for f16x3 with its per-step partial; the
//!   40 is calibrated on the SASS, see [`COOP_REGISTER_OVERHEAD`]), capped at the
//!   profile's per-invocation maximum, past which the compiler would spill;
//! - workgroup storage: `smem_per_sm / (workgroup_bytes + reserved_per_workgroup)`, with
//!   each kernel's own workgroup memory ([`crate::Kernel::workgroup_bytes`]);
//! - invocations: `max_invocations_per_sm / invocations`;
//! - workgroups: `max_workgroups_per_sm`.
//!
//! Occupancy is `resident · invocations / max_invocations_per_sm` (NVIDIA's "theoretical
//! occupancy", resident warps over the maximum). Profiles: NVIDIA (vendor 0x10DE): 65 536
//! registers, allocated 8 per invocation (256 per warp), at most 255 per invocation,
//! 51 KiB of workgroup memory per SM with 1 KiB reserved per block (the SM has 228 KiB, but
//! NVIDIA's Vulkan driver 580 left about 51 KiB of it to resident workgroups on an H100 and
//! an H200; a Vulkan workgroup may use 48 KiB: the device limit, checked by
//! [`crate::Kernel::check_limits`]), 2048 invocations, 32 blocks per SM. Generic (every other adapter, CPU
//! adapters such as lavapipe included): 65 536 registers in units of 4, at most 255 per
//! invocation, 64 KiB of workgroup storage, 2048 invocations and 16 workgroups per compute
//! unit — a conservative common denominator of desktop GPUs; on a CPU it is only a
//! tie-breaker for which neighbours to try.
//!
//! A warp neighbour `w'` is suggested iff, with `occ` the original's estimate and `occ'`
//! the neighbour's (compared exactly, as resident invocations per multiprocessor):
//! - `occ' > occ` — the change raises the estimated occupancy (more warps to hide latency,
//!   or fewer registers per invocation letting more workgroups in); or
//! - `w' < w` and both `occ` and `occ'` are ≥ [`OCCUPANCY_TARGET`] (50 %) — occupancy is
//!   already ample and stays so while each invocation gets a larger register tile (more
//!   instruction-level parallelism).
//!
//! Example (NVIDIA profile): the seed m32n64k32-t4x4-w4-s2 needs ≈72 registers (room for 7
//! workgroups), but its 25.5 KiB of workgroup memory (+1 KiB reserved) leave room for one
//! resident workgroup in 51 KiB → 6.2 %; w2 (t4x8, ≈116 registers) is one
//! workgroup of half the invocations → 3.1 %: not suggested; w8 has no register tile (8
//! outputs per invocation). So the seed's stage has two candidates (s2, s3) and reports the
//! two warp neighbours as skipped, while the anchor's m64n64k16-t4x8-w4-s3 (6.2 % → w8
//! 12.5 %: one workgroup either way, of twice the invocations) has six.
//!
//! For f16x3's `m64n96k16-t4x12-w4-s1` (156 registers, 3 workgroups per SM) this suggests
//! 8 warps (116 registers, 2 workgroups of 256 invocations); for f16's (122, 4 workgroups)
//! it does not (88 registers, still 2 workgroups of 256 by the estimate).
//!
//! # Cache
//! [`tune`] stores one decision per device, shape and kernel family (see [`cache`] for the
//! key);
//! a later tune of the same shape from the same original answers from it (unless forced),
//! a tune from another original measures and replaces it. [`cached_decision`] is what
//! `Conv2d` consults; it returns a kernel only if the device accepts it.
//!
//! # Measurement ([`run_stage`], [`Measure`])
//! Each candidate is prepared (built and warmed up) once, then timed in interleaved rounds:
//! round `r` times every candidate once, starting at candidate `r mod k` (A B C, B C A,
//! C A B, …), so drift (clocks, temperature, other load) and position effects hit every
//! candidate alike. On a device ([`GpuMeasure`]) one sample is the fastest GPU-timestamp
//! time of `reps` back-to-back runs in one submission (interference only ever slows a run
//! down, so the minimum of a few is the least disturbed; `reps` is chosen once, from the
//! original's pilot run, so that a sample covers [`SAMPLE_MS_GPU`] = 2 ms of device time on
//! a GPU, [`SAMPLE_MS_CPU`] = 15 ms on a CPU adapter, where OS scheduling noise is bursty;
//! 1 to 10 runs), on inputs and weights drawn from a standard normal distribution (never
//! zeros). The timing source is the
//! [`Measure`] trait, so the rule is tested deterministically on the CPU.
//!
//! # Decision ([`decide`])
//! With `gain = (median(original) − median(candidate)) / median(original)`, a candidate
//! *passes* iff
//! - `gain ≥ threshold` (default 2 %, settable within 1–2 %), and
//! - it is **stable: its inter-quartile range lies entirely below the original's**
//!   (`q3(candidate) < q1(original)`, quartiles of the per-round samples, linear
//!   interpolation).
//!
//! Which candidate: the candidates whose median gain is ≥ the threshold are walked in order
//! of distance from the original (stage changes, warp changes, both); the nearest is the
//! current choice, and a farther one displaces it only by beating it the way any candidate
//! must beat the original — median ≥ threshold faster *and* IQR entirely below the current
//! choice's. So two farther candidates that are near-ties (on lavapipe, stages 2 and 3 of
//! the same warps differ by noise) never flip the decision between runs: the nearer stays.
//! The choice replaces the original if it is stable against it; if it is not, the original
//! is kept (no other candidate is promoted in its place). Noise can still change a decision
//! in two ways: into "keep", or, where a farther candidate's lead over the nearer one is
//! near the threshold, into the other of two candidates that both beat the original clearly
//! (lavapipe in CI, 2026-11-22: warps 8 with stages 3 by 29 % against stages 2 by 20 % in
//! one tune, 24 % against 26 % in the next). Every row of the report says median, IQR,
//! gain, verdict and why.

/// The tuning cache: where decisions are kept and how they are keyed (selection reads it
/// too).
pub mod cache {
    pub use crate::cache::*;
}
/// GPU time of a [`crate::ConvPlan`] from timestamp queries, and the statistics every report
/// quotes.
pub mod timing {
    pub use crate::timing::*;
}

use self::timing::{Clock, Summary};
use crate::cache::{CacheKey, CachedDecision, DeviceKey, TuningCache};
use crate::caps::KernelLimits;
use crate::conv2d::{Conv2d, ConvPlan};
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::kernel::{Kernel, Precision};
use crate::options::Conv2dOptions;
use crate::scope::ErrorScope;
use crate::spec::ConvProblem;
use crate::tile::TileConfig;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Instant;

/// The most candidates one stage measures (the original included).
pub const MAX_CANDIDATES: usize = 6;
/// Warp counts the stage may move to (Triton's `num_warps` of the seed's stage).
pub const TUNE_WARPS: [u32; 4] = [2, 4, 8, 16];
/// Stage counts the stage may move to.
pub const TUNE_STAGES: std::ops::RangeInclusive<u32> = 2..=4;
/// Occupancy above which fewer, fatter invocations may be tried.
pub const OCCUPANCY_TARGET: f64 = 0.5;
/// Registers per invocation assumed for addresses, indices and loop counters.
pub const REGISTER_OVERHEAD: u32 = 24;
/// The same for the cooperative-matrix kernels, whose gather, range check and epilogue
/// indices sit beside the fragments: calibrated on NVIDIA's compiled code (SASS) of
/// `m64n96k16-t4x12-w4-s1` on an H100, 119 registers for f16 and 161 for f16x3, where the
/// estimate gives 122 and 156: the same resident workgroups.
pub const COOP_REGISTER_OVERHEAD: u32 = 40;
/// The default decision threshold, percent.
pub const DEFAULT_THRESHOLD_PCT: f64 = 2.0;
/// The allowed thresholds, percent.
pub const THRESHOLD_RANGE_PCT: std::ops::RangeInclusive<f64> = 1.0..=2.0;
/// Fewest rounds: quartiles of fewer samples say little.
pub const MIN_ROUNDS: u32 = 5;
/// The stability rule, as the report states it.
pub const STABILITY_RULE: &str = "a candidate replaces the original only if its median gain is >= the threshold \
AND its inter-quartile range lies entirely below the original's (q3(candidate) < q1(original)); \
of the candidates with gain >= threshold the nearest is meant, displaced by a farther one only if that one is \
>= threshold faster than it with its IQR entirely below, and if the meant one is not stable the original is kept";

// ---------------------------------------------------------------------------------------
// Occupancy
// ---------------------------------------------------------------------------------------

/// Which occupancy profile an adapter gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum ProfileName {
    /// [`OccupancyProfile::NVIDIA`].
    Nvidia,
    /// [`OccupancyProfile::GENERIC`].
    Generic,
}

impl std::fmt::Display for ProfileName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ProfileName::Nvidia => "nvidia",
            ProfileName::Generic => "generic",
        })
    }
}

/// What one multiprocessor (SM, CU) holds, for the occupancy estimate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct OccupancyProfile {
    /// Which profile this is.
    pub name: ProfileName,
    /// 32-bit registers per multiprocessor.
    pub regs_per_sm: u32,
    /// Registers per invocation are allocated in multiples of this.
    pub reg_alloc_unit: u32,
    /// Most registers one invocation can hold (beyond: spills).
    pub max_regs_per_invocation: u32,
    /// Workgroup (shared) memory per multiprocessor, bytes.
    pub smem_per_sm: u32,
    /// Workgroup memory the system reserves per resident workgroup, bytes.
    pub smem_reserved_per_workgroup: u32,
    /// Most resident invocations per multiprocessor (occupancy's denominator).
    pub max_invocations_per_sm: u32,
    /// Most resident workgroups per multiprocessor.
    pub max_workgroups_per_sm: u32,
}

impl OccupancyProfile {
    /// NVIDIA Ampere/Ada/Hopper-class SM as NVIDIA's Vulkan driver runs compute on it. The
    /// SM has up to 228 KiB of shared memory, but with driver 580 only about 51 KiB of it
    /// held resident workgroups: an unused workgroup array of 1-16 KiB added to the kernels
    /// cut their resident workgroups as a 50-53 KiB budget predicts on an H100; on an H200
    /// three workgroups fit at 16.0 KiB each and not at 16.25 (steps of 256 bytes), two at
    /// 24.0 KiB and not at 25.0 (BENCHMARKS, "Workgroup memory: 16-byte granules and a budget
    /// per multiprocessor"): 51 to 51.75 KiB with the 1 KiB each reserves.
    pub const NVIDIA: OccupancyProfile = OccupancyProfile {
        name: ProfileName::Nvidia,
        regs_per_sm: 65536,
        reg_alloc_unit: 8,
        max_regs_per_invocation: 255,
        smem_per_sm: 51 * 1024,
        smem_reserved_per_workgroup: 1024,
        max_invocations_per_sm: 2048,
        max_workgroups_per_sm: 32,
    };
    /// Unknown and CPU adapters: a conservative desktop-GPU compute unit.
    pub const GENERIC: OccupancyProfile = OccupancyProfile {
        name: ProfileName::Generic,
        regs_per_sm: 65536,
        reg_alloc_unit: 4,
        max_regs_per_invocation: 255,
        smem_per_sm: 64 * 1024,
        smem_reserved_per_workgroup: 0,
        max_invocations_per_sm: 2048,
        max_workgroups_per_sm: 16,
    };

    /// The profile of an adapter: NVIDIA GPUs by PCI vendor id (or name), else generic.
    pub fn for_adapter(info: &wgpu::AdapterInfo) -> Self {
        OccupancyProfile::for_device(info.vendor, &info.name, info.device_type)
    }
    /// [`OccupancyProfile::for_adapter`] from the adapter's vendor id, name and type.
    pub fn for_device(vendor: u32, name: &str, device_type: wgpu::DeviceType) -> Self {
        let nvidia = vendor == 0x10de || name.to_lowercase().contains("nvidia");
        if nvidia && device_type != wgpu::DeviceType::Cpu {
            OccupancyProfile::NVIDIA
        } else {
            OccupancyProfile::GENERIC
        }
    }
}

/// The occupancy estimate of one config (see the module docs for the formulae).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Occupancy {
    /// Estimated registers per invocation (before allocation rounding and the cap).
    pub registers: u32,
    /// The kernel's workgroup memory, bytes.
    pub workgroup_bytes: u64,
    /// Invocations per workgroup.
    pub invocations: u32,
    /// Resident workgroups the register file allows.
    pub by_registers: u32,
    /// Resident workgroups the workgroup memory allows.
    pub by_storage: u32,
    /// Resident workgroups the invocation limit allows.
    pub by_invocations: u32,
    /// Resident workgroups the workgroup limit allows.
    pub by_workgroups: u32,
    /// Resident workgroups per multiprocessor: the minimum of the four.
    pub resident: u32,
    /// Which limit binds ("registers", "storage", "invocations", "workgroups"),
    /// with " (spills)" when the register estimate exceeds the per-invocation maximum.
    pub limiter: String,
    /// `resident · invocations / max_invocations_per_sm`, in [0, 1].
    pub occupancy: f64,
}

impl Occupancy {
    /// Resident invocations per multiprocessor (the exact quantity the rule compares).
    pub fn resident_invocations(&self) -> u64 {
        self.resident as u64 * self.invocations as u64
    }
    /// e.g. "43.8% (7 wg, registers)".
    pub fn brief(&self) -> String {
        format!("{:.1}% ({} wg, {})", self.occupancy * 100.0, self.resident, self.limiter)
    }
}

/// Estimated registers per invocation of a kernel (see the module docs): for the SIMT
/// kernels accumulators + operands + the prefetch registers of the next K step +
/// [`REGISTER_OVERHEAD`]; for the cooperative-matrix kernels per lane 8 per accumulator
/// fragment, 4 per operand fragment and f16 half, the prefetch (A in f32, B as `vec4<f16>`,
/// 2 registers per half), 8 for the f16x3 kernel's per-step partial, and
/// [`COOP_REGISTER_OVERHEAD`].
pub fn estimate_registers(kernel: &Kernel) -> u32 {
    let Some(cfg) = kernel.tile() else {
        return REGISTER_OVERHEAD;
    };
    let inv = cfg.invocations().max(1);
    let a_loads = (cfg.block_m * cfg.block_k).div_ceil(inv);
    let b_loads = (cfg.block_k * cfg.block_n / 4).div_ceil(inv);
    let Some(halves) = kernel.operand_halves() else {
        return cfg.accumulators() + cfg.thread_m + cfg.thread_n + a_loads + 4 * b_loads + REGISTER_OVERHEAD;
    };
    // 1 (f16) or 2 (f16x3); clamped so that a family's mistake cannot underflow below.
    let halves = halves.clamp(1, 2);
    // A layout the device refuses anyway: count it as one fragment per warp.
    let (_, _, fm, fn_) = cfg.coop_layout().unwrap_or((1, 1, 1, 1));
    8 * fm * fn_ + 4 * (fm + fn_) * halves + a_loads + 2 * halves * b_loads + 8 * (halves - 1) + COOP_REGISTER_OVERHEAD
}

/// Resident workgroups and occupancy of `kernel` on a multiprocessor described by `profile`.
pub fn estimate_occupancy(kernel: &Kernel, profile: &OccupancyProfile) -> Occupancy {
    let registers = estimate_registers(kernel);
    let spills = registers > profile.max_regs_per_invocation;
    let unit = profile.reg_alloc_unit.max(1);
    let allocated = registers.min(profile.max_regs_per_invocation).div_ceil(unit) * unit;
    let inv = kernel.invocations().max(1);
    let by_registers = (profile.regs_per_sm as u64 / (allocated as u64 * inv as u64)) as u32;
    let bytes = kernel.workgroup_bytes().unwrap_or(0);
    let by_storage = (profile.smem_per_sm as u64 / (bytes + profile.smem_reserved_per_workgroup as u64).max(1))
        .min(u32::MAX as u64) as u32;
    let by_invocations = profile.max_invocations_per_sm / inv;
    let by_workgroups = profile.max_workgroups_per_sm;
    let limits = [
        (by_registers, "registers"),
        (by_storage, "storage"),
        (by_invocations, "invocations"),
        (by_workgroups, "workgroups"),
    ];
    let (resident, limiter) = limits.iter().copied().min_by_key(|(v, _)| *v).unwrap_or((0, "registers"));
    let occupancy = (resident as f64 * inv as f64 / profile.max_invocations_per_sm as f64).min(1.0);
    Occupancy {
        registers,
        workgroup_bytes: bytes,
        invocations: inv,
        by_registers,
        by_storage,
        by_invocations,
        by_workgroups,
        resident,
        limiter: if spills { format!("{limiter} (spills)") } else { limiter.to_string() },
        occupancy,
    }
}

// ---------------------------------------------------------------------------------------
// Candidates
// ---------------------------------------------------------------------------------------

/// One config the stage measures.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// The tile to measure (in the original's family).
    pub config: TileConfig,
    /// What differs from the original, e.g. "original", "stages 2→3", "warps 4→8".
    pub change: String,
    /// Its occupancy estimate.
    pub occupancy: Occupancy,
}

/// A neighbour that is not measured, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Skipped {
    /// The neighbour's tile, where the block splits over its warps at all.
    pub config: Option<TileConfig>,
    /// Its name (blocks, warps and stages where it has no tile).
    pub label: String,
    /// Its warps.
    pub warps: u32,
    /// Its stages.
    pub stages: u32,
    /// Its occupancy estimate, where it has a tile.
    pub occupancy: Option<Occupancy>,
    /// Why it is not measured, starting with the change (`warps 4→8: …`).
    pub reason: String,
}

/// The candidates of one stage and the neighbours left out.
#[derive(Debug, Clone, PartialEq)]
pub struct CandidateSet {
    /// The original: the kernel (and so the precision) every candidate runs in.
    pub original: Kernel,
    /// The occupancy profile the warp neighbours were judged by.
    pub profile: OccupancyProfile,
    /// What the stage measures, the original first.
    pub candidates: Vec<Candidate>,
    /// The neighbours left out, with the reasons.
    pub skipped: Vec<Skipped>,
    /// Why each warp neighbour was included (the occupancy numbers).
    pub notes: Vec<String>,
}

fn stage_neighbours(s: u32) -> Vec<u32> {
    [s.checked_sub(1), s.checked_add(1)].into_iter().flatten().filter(|v| TUNE_STAGES.contains(v)).collect()
}

/// Whether the tuner can tune a kernel: the tiled kernels, SIMT and cooperative, at any
/// precision. The row-band and stem kernels' workgroup memory depends on the problem (and
/// the stem kernel's warps on its roles: multiplying warps and helpers); the direct kernel
/// has no config.
pub fn check_tunable(kernel: &Kernel) -> Result<()> {
    match kernel.tile() {
        Some(_) => Ok(()),
        None => Err(Error::Tune(format!("the tuner tunes the tiled kernels, not {}", kernel.family()))),
    }
}

/// `kernel` with another tile. Every tunable kernel ([`check_tunable`]) takes one; for the
/// others this is the kernel unchanged, which the checks then refuse.
fn retile(kernel: &Kernel, tile: TileConfig) -> Kernel {
    kernel.with_tile(tile).unwrap_or_else(|| kernel.clone())
}

/// `kernel` with `warps` warps, BLOCK sizes (and so the grid) kept: the SIMT kernels'
/// register tile is re-derived ([`TileConfig::with_warps`]); the cooperative kernels'
/// warps own 16×16 fragments, which are re-split over the warps
/// ([`TileConfig::with_fragment_warps`]). Refused where the kernel cannot split the block
/// that way.
fn with_warps(kernel: &Kernel, warps: u32) -> Result<Kernel> {
    let Some(tile) = kernel.tile() else {
        return Err(Error::Tune(format!("{kernel} has no warp count to change")));
    };
    let tile =
        if kernel.operand_halves().is_some() { tile.with_fragment_warps(warps)? } else { tile.with_warps(warps)? };
    let retiled = kernel.with_tile(tile).ok_or_else(|| Error::Tune(format!("{kernel} has no warp count to change")))?;
    retiled.check_shape()?;
    Ok(retiled)
}

/// The nearby configs of `original` (see the module docs), original first. A kernel the
/// tuner cannot tune ([`check_tunable`]) gets no candidates.
pub fn candidates(original: &Kernel, profile: &OccupancyProfile) -> CandidateSet {
    let kernel = original.clone();
    let (Ok(()), Some(original)) = (check_tunable(&kernel), kernel.tile()) else {
        return CandidateSet {
            original: kernel.clone(),
            profile: *profile,
            candidates: Vec::new(),
            skipped: Vec::new(),
            notes: vec![format!("{} is not tunable", kernel.family())],
        };
    };
    let original = &original;
    let estimate = |c: &TileConfig| estimate_occupancy(&retile(&kernel, *c), profile);
    let occ0 = estimate(original);
    let mut list = vec![Candidate { config: *original, change: "original".into(), occupancy: occ0.clone() }];
    let mut skipped = Vec::new();
    let mut notes = Vec::new();
    let (w, s) = (original.warps, original.stages);
    // `base` with stages ±1, labelled after `prefix` (empty for the original itself).
    let stage_changes = |base: &TileConfig, prefix: &str| -> Vec<Candidate> {
        stage_neighbours(s)
            .into_iter()
            .map(|s2| {
                let c = base.with_stages(s2);
                Candidate { config: c, change: format!("{prefix}stages {s}→{s2}"), occupancy: estimate(&c) }
            })
            .collect()
    };
    list.extend(stage_changes(original, ""));
    let mut suggested = Vec::new();
    let neighbours = [w / 2, w.saturating_mul(2)];
    for w2 in neighbours.into_iter().filter(|v| TUNE_WARPS.contains(v) && *v != w) {
        let label = format!("warps {w}→{w2}");
        match with_warps(&kernel, w2).and_then(|k| k.tile().ok_or_else(|| Error::Tune("no config".into()))) {
            Err(e) => skipped.push(Skipped {
                config: None,
                label: format!("m{}n{}k{}-w{w2}-s{s}", original.block_m, original.block_n, original.block_k),
                warps: w2,
                stages: s,
                occupancy: None,
                reason: format!("{label}: {} ({})", tile_word(&kernel), refusal_reason(&e)),
            }),
            Ok(c) => {
                let occ = estimate(&c);
                let (r0, r1) = (occ0.resident_invocations(), occ.resident_invocations());
                let ample = occ0.occupancy >= OCCUPANCY_TARGET && occ.occupancy >= OCCUPANCY_TARGET;
                let why = if r1 > r0 {
                    Some(format!(
                        "{label}: est. occupancy {:.1}% > original's {:.1}%",
                        occ.occupancy * 100.0,
                        occ0.occupancy * 100.0
                    ))
                } else if w2 < w && ample {
                    Some(format!(
                        "{label}: occupancy stays ≥ {:.0}% ({:.1}% → {:.1}%) with a larger register tile",
                        OCCUPANCY_TARGET * 100.0,
                        occ0.occupancy * 100.0,
                        occ.occupancy * 100.0
                    ))
                } else {
                    None
                };
                match why {
                    Some(why) => suggested.push((c, label, why, occ)),
                    None => skipped.push(Skipped {
                        config: Some(c),
                        label: c.name(),
                        warps: w2,
                        stages: s,
                        occupancy: Some(occ.clone()),
                        reason: format!(
                            "{label}: est. occupancy {:.1}% vs original's {:.1}%: occupancy does not suggest it",
                            occ.occupancy * 100.0,
                            occ0.occupancy * 100.0
                        ),
                    }),
                }
            }
        }
    }
    for (c, label, why, occ) in &suggested {
        list.push(Candidate { config: *c, change: label.clone(), occupancy: occ.clone() });
        notes.push(format!("{why}: included"));
    }
    for (c, label, _, _) in &suggested {
        list.extend(stage_changes(c, &format!("{label}, ")));
    }
    if list.len() > MAX_CANDIDATES {
        for c in list.split_off(MAX_CANDIDATES) {
            skipped.push(Skipped {
                config: Some(c.config),
                label: c.config.name(),
                warps: c.config.warps,
                stages: c.config.stages,
                occupancy: Some(c.occupancy),
                reason: format!("{}: over the {MAX_CANDIDATES}-candidate cap", c.change),
            });
        }
    }
    CandidateSet { original: kernel, profile: *profile, candidates: list, skipped, notes }
}

/// What a warp count must split the block into, for the skipped-neighbour reasons.
fn tile_word(kernel: &Kernel) -> &'static str {
    if kernel.operand_halves().is_some() {
        "no fragment layout"
    } else {
        "no register tile"
    }
}

fn refusal_reason(e: &Error) -> String {
    match e {
        Error::KernelRefused { reason, .. } => reason.clone(),
        other => other.to_string(),
    }
}

// ---------------------------------------------------------------------------------------
// Measurement and decision
// ---------------------------------------------------------------------------------------

/// A timing source. The tuner calls `prepare` once per candidate (an error excludes it:
/// "fails to build"), then `measure` once per candidate per round.
pub trait Measure {
    /// Builds and warms up what timing `cfg` needs.
    fn prepare(&mut self, cfg: &TileConfig) -> Result<()> {
        let _ = cfg;
        Ok(())
    }
    /// One sample: milliseconds per run of `cfg`.
    fn measure(&mut self, cfg: &TileConfig) -> Result<f64>;
    /// Where the times come from, for the report.
    fn clock(&self) -> String {
        "injected".into()
    }
    /// Runs per sample, for the report.
    fn reps(&self) -> u32 {
        1
    }
}

/// How a stage runs.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TuneOptions {
    /// Percent, within [`THRESHOLD_RANGE_PCT`].
    pub threshold_pct: f64,
    /// Interleaved rounds (≥ [`MIN_ROUNDS`]).
    pub rounds: u32,
    /// Untimed runs per candidate before the rounds ([`GpuMeasure`]).
    pub warmup: u32,
    /// Runs per sample; 0: chosen from a pilot run ([`GpuMeasure`]).
    pub reps: u32,
    /// Ignore the cache's decision (a new decision is still stored).
    pub force: bool,
    /// Where decisions are read and stored; `None`: no cache.
    pub cache: Option<TuningCache>,
}

impl Default for TuneOptions {
    fn default() -> Self {
        TuneOptions {
            threshold_pct: DEFAULT_THRESHOLD_PCT,
            rounds: 15,
            warmup: 3,
            reps: 0,
            force: false,
            cache: TuningCache::open_default(),
        }
    }
}

impl TuneOptions {
    /// The decision threshold in percent.
    pub fn threshold_pct(mut self, pct: f64) -> Self {
        self.threshold_pct = pct;
        self
    }
    /// Interleaved rounds.
    pub fn rounds(mut self, rounds: u32) -> Self {
        self.rounds = rounds;
        self
    }
    /// Untimed runs per candidate.
    pub fn warmup(mut self, warmup: u32) -> Self {
        self.warmup = warmup;
        self
    }
    /// Runs per sample (0: from a pilot run).
    pub fn reps(mut self, reps: u32) -> Self {
        self.reps = reps;
        self
    }
    /// Ignores the cache's decision.
    pub fn force(mut self, force: bool) -> Self {
        self.force = force;
        self
    }
    /// Where decisions are read and stored (`None`: no cache).
    pub fn cache(mut self, cache: Option<TuningCache>) -> Self {
        self.cache = cache;
        self
    }

    /// Refuses a threshold outside [`THRESHOLD_RANGE_PCT`] and fewer than [`MIN_ROUNDS`]
    /// rounds.
    pub fn check(&self) -> Result<()> {
        if !THRESHOLD_RANGE_PCT.contains(&self.threshold_pct) {
            return Err(Error::InvalidOptions(format!(
                "threshold must be within {}–{} %, got {}",
                THRESHOLD_RANGE_PCT.start(),
                THRESHOLD_RANGE_PCT.end(),
                self.threshold_pct
            )));
        }
        if self.rounds < MIN_ROUNDS {
            return Err(Error::InvalidOptions(format!("at least {MIN_ROUNDS} rounds are needed, got {}", self.rounds)));
        }
        Ok(())
    }
}

/// The verdict on one row of the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Verdict {
    /// The original, and it stays.
    Keep,
    /// The original, replaced by the adopted candidate.
    Replaced,
    /// The winner.
    Adopt,
    /// Measured, not good enough (or not the best).
    #[default]
    Reject,
    /// Refused by the device, failed to build or to run.
    Excluded,
    /// A neighbour the stage's rules leave out (not measured).
    Skipped,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Verdict::Keep => "keep",
            Verdict::Replaced => "replaced",
            Verdict::Adopt => "ADOPT",
            Verdict::Reject => "reject",
            Verdict::Excluded => "excluded",
            Verdict::Skipped => "skipped",
        })
    }
}

/// One row of the report.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CandidateReport {
    /// The config (absent for a warp count with no register tile).
    pub config: Option<TileConfig>,
    /// The config's name.
    pub label: String,
    /// What differs from the original (`original`, `stages 2→3`, `warps 4→8`, …).
    pub change: String,
    /// Its warps.
    pub warps: u32,
    /// Its stages.
    pub stages: u32,
    /// Its occupancy estimate.
    pub occupancy: Option<Occupancy>,
    /// Median of the samples, ms (none when excluded or skipped).
    pub median_ms: Option<f64>,
    /// First quartile of the samples, ms.
    pub q1_ms: Option<f64>,
    /// Third quartile of the samples, ms.
    pub q3_ms: Option<f64>,
    /// Fastest sample, ms.
    pub min_ms: Option<f64>,
    /// Slowest sample, ms.
    pub max_ms: Option<f64>,
    /// Median gain over the original, percent (positive: faster).
    pub gain_pct: Option<f64>,
    /// The per-round samples, in round order.
    pub samples_ms: Vec<f64>,
    /// What the rule made of it.
    pub verdict: Verdict,
    /// Why, with the numbers.
    pub reason: String,
}

impl CandidateReport {
    fn summary(&self) -> Option<Summary> {
        Summary::of(&self.samples_ms)
    }
    /// The inter-quartile range of the samples, ms.
    pub fn iqr_ms(&self) -> Option<f64> {
        Some(self.q3_ms? - self.q1_ms?)
    }
}

/// The outcome of one stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TuneReport {
    /// The convolution and input shape tuned.
    pub problem: ConvProblem,
    /// The precision tuned.
    pub precision: Precision,
    /// The kernel family every candidate ran in, e.g. `coop-f16x3`.
    pub kernel: String,
    /// The adapter's name.
    pub adapter: String,
    /// The wgpu backend.
    pub backend: String,
    /// The occupancy profile the warp neighbours were judged by.
    pub profile: OccupancyProfile,
    /// The tile the stage started from.
    pub original: TileConfig,
    /// The tile to run: the winner, or the original.
    pub chosen: TileConfig,
    /// The chosen config's median gain over the original, percent (0 when kept).
    pub gain_pct: f64,
    /// The decision threshold, percent.
    pub threshold_pct: f64,
    /// Interleaved rounds (0 for a cached decision without its report).
    pub rounds: u32,
    /// Runs per sample.
    pub reps: u32,
    /// Untimed runs per candidate before the rounds.
    pub warmup: u32,
    /// Where the times came from (GPU timestamps, or the host clock).
    pub clock: String,
    /// The decision rule, in words ([`STABILITY_RULE`]).
    pub rule: String,
    /// Candidates in measurement order (original first), then the skipped neighbours.
    pub rows: Vec<CandidateReport>,
    /// How the candidates were chosen and anything unusual about the stage.
    pub notes: Vec<String>,
    /// Wall time of the stage (building, warm-up and rounds), milliseconds.
    pub elapsed_ms: f64,
    /// When the decision was made (RFC 3339, local time).
    pub tuned_at: String,
}

/// Whether `candidate` is stably faster than `original`: `q3(candidate) < q1(original)`.
pub fn stable(candidate: &Summary, original: &Summary) -> bool {
    candidate.q3 < original.q1
}

/// Median gain of `candidate` over `original`, percent.
pub fn gain_pct(candidate: &Summary, original: &Summary) -> f64 {
    100.0 * (original.median - candidate.median) / original.median
}

/// Applies the decision rule to measured rows (`rows[0]` is the original; rows already
/// `Excluded` or `Skipped` are left alone). Returns the index of the chosen row.
///
/// 1. Eligible: candidates whose median gain is ≥ the threshold.
/// 2. The intended winner: walking the eligible ones in order (nearer the original first:
///    stages, warps, warps + stages), a farther candidate displaces the current choice only
///    if its median is ≥ the threshold faster than the current's and its IQR lies entirely
///    below the current's (`q3 < current q1`).
/// 3. It replaces the original only if it is stable (`q3 < original q1`); if it is not, the
///    original is kept — a faster-looking but farther candidate is not promoted in its place.
///    (Step 2 can still go either way between two clear winners whose difference is near the
///    threshold: see the module docs.)
pub fn decide(rows: &mut [CandidateReport], threshold_pct: f64) -> Result<usize> {
    let Some(orig) = rows.first().and_then(|r| r.summary()) else {
        return Err(Error::Tune("the original config has no measurements".into()));
    };
    let mut eligible: Vec<(usize, f64, Summary)> = Vec::new();
    for (i, row) in rows.iter_mut().enumerate().skip(1) {
        if matches!(row.verdict, Verdict::Excluded | Verdict::Skipped) {
            continue;
        }
        let Some(s) = row.summary() else {
            row.verdict = Verdict::Excluded;
            row.reason = "no measurements".into();
            continue;
        };
        let gain = gain_pct(&s, &orig);
        row.gain_pct = Some(gain);
        row.verdict = Verdict::Reject;
        if gain < threshold_pct {
            row.reason = if gain <= 0.0 {
                format!("not faster: median {:.4} ms vs original {:.4} ms", s.median, orig.median)
            } else {
                format!("gain {gain:.2}% < threshold {threshold_pct}%")
            };
        } else {
            eligible.push((i, gain, s));
        }
    }
    let unstable_reason = |gain: f64, s: &Summary| {
        format!(
            "unstable: gain {gain:.2}% >= {threshold_pct}% but the IQRs overlap (q3 {:.4} ms >= original q1 {:.4} ms)",
            s.q3, orig.q1
        )
    };
    let keep_reason = format!("no candidate passed (gain >= {threshold_pct}% and q3 < original q1)");
    let Some(&(fi, _, fs)) = eligible.iter().min_by(|a, b| a.2.median.total_cmp(&b.2.median)) else {
        rows[0].verdict = Verdict::Keep;
        rows[0].reason = if rows[1..].iter().any(|r| r.verdict == Verdict::Reject) {
            keep_reason
        } else {
            "no other candidate could be measured".into()
        };
        return Ok(0);
    };
    // Nearest first; a farther candidate displaces the current choice only by beating it as
    // a candidate must beat the original.
    let mut w = 0;
    for k in 1..eligible.len() {
        let (cs, cur) = (eligible[k].2, eligible[w].2);
        if gain_pct(&cs, &cur) >= threshold_pct && stable(&cs, &cur) {
            w = k;
        }
    }
    let &(wi, wgain, ws) = &eligible[w];
    let over_winner = |s: &Summary| gain_pct(s, &ws);
    let winner = rows[wi].label.clone();
    let fastest = rows[fi].label.clone();
    let win_stable = stable(&ws, &orig);
    for &(i, gain, s) in &eligible {
        let own = if stable(&s, &orig) { format!("gain {gain:.2}%, stable") } else { unstable_reason(gain, &s) };
        let reason = if i == wi {
            if !win_stable {
                unstable_reason(gain, &s)
            } else {
                let mut r = format!(
                    "gain {gain:.2}% >= {threshold_pct}% and stable (q3 {:.4} ms < original q1 {:.4} ms)",
                    s.q3, orig.q1
                );
                if fi != wi {
                    let g = over_winner(&fs);
                    if g < threshold_pct {
                        let _ = write!(
                            r,
                            "; {fastest} is only {g:.2}% faster (< {threshold_pct}%) and further from the original"
                        );
                    } else {
                        let _ = write!(
                            r,
                            "; {fastest} is {g:.2}% faster but not stably (q3 {:.4} ms >= q1 {:.4} ms) and further from the original",
                            fs.q3, ws.q1
                        );
                    }
                }
                r
            }
        } else if !win_stable {
            format!(
                "{own}; but {winner}, nearer the original and not clearly beaten by it, is unstable: no clear winner"
            )
        } else if s.median < ws.median && i > wi && over_winner(&s) < threshold_pct {
            format!(
                "{own}; only {:.2}% faster than {winner} (< {threshold_pct}%), which is nearer the original",
                over_winner(&s)
            )
        } else if s.median < ws.median {
            format!(
                "{own}; not clearly faster than {winner} ({:.2}%: needs >= {threshold_pct}% with its q3 below {winner}'s q1)",
                over_winner(&s)
            )
        } else {
            format!("{own}; {winner} is chosen ({wgain:.2}%)")
        };
        rows[i].verdict = if i == wi && win_stable { Verdict::Adopt } else { Verdict::Reject };
        rows[i].reason = reason;
    }
    if win_stable {
        rows[0].verdict = Verdict::Replaced;
        rows[0].reason = format!("replaced by {winner} ({wgain:.2}% faster)");
        Ok(wi)
    } else {
        rows[0].verdict = Verdict::Keep;
        rows[0].reason = format!("{keep_reason}: {winner} is unstable");
        Ok(0)
    }
}

/// Progress of a stage: `done` of `total` steps, and what is being done.
pub type ProgressFn<'a> = dyn FnMut(u64, u64, &str) + 'a;

fn blank_row(c: &Candidate) -> CandidateReport {
    CandidateReport {
        config: Some(c.config),
        label: c.config.name(),
        change: c.change.clone(),
        warps: c.config.warps,
        stages: c.config.stages,
        occupancy: Some(c.occupancy.clone()),
        ..Default::default()
    }
}

/// The result of [`run_stage`], before it is wrapped in a [`TuneReport`].
#[derive(Debug, Clone)]
pub struct StageResult {
    /// The tile to run: the winner, or the original.
    pub chosen: TileConfig,
    /// Its median gain over the original, percent (0 when kept).
    pub gain_pct: f64,
    /// The report's rows: candidates in measurement order, then the skipped neighbours.
    pub rows: Vec<CandidateReport>,
    /// The candidate set's notes and the stage's own.
    pub notes: Vec<String>,
}

/// Measures a candidate set in interleaved rounds and applies [`decide`].
///
/// `limits`: the device's, to exclude candidates it refuses before any build (`None`:
/// shape checks only). Fails only when the original cannot be measured.
pub fn run_stage(
    set: &CandidateSet,
    limits: Option<&KernelLimits>,
    measure: &mut dyn Measure,
    opts: &TuneOptions,
    progress: &mut ProgressFn<'_>,
) -> Result<StageResult> {
    opts.check()?;
    let Some(original) = set.candidates.first().map(|c| c.config) else {
        return Err(Error::Tune("no candidates".into()));
    };
    let mut rows: Vec<CandidateReport> = set.candidates.iter().map(blank_row).collect();
    let k = rows.len() as u64;
    let total = k + k * opts.rounds as u64;
    let mut done = 0u64;
    let mut live: Vec<usize> = Vec::new();
    for (i, c) in set.candidates.iter().enumerate() {
        progress(done, total, &format!("building {}", c.config));
        let kernel = set
            .original
            .with_tile(c.config)
            .ok_or_else(|| Error::Tune(format!("the tuner tunes the tiled kernels, not {}", set.original.family())));
        let check = kernel.and_then(|k| match limits {
            Some(l) => k.check_limits(l),
            None => k.check_shape(),
        });
        let result = check
            .map_err(|e| format!("refused by the device: {}", refusal_reason(&e)))
            .and_then(|_| measure.prepare(&c.config).map_err(|e| format!("failed to build: {e}")));
        match result {
            Ok(()) => live.push(i),
            Err(reason) => {
                if i == 0 {
                    return Err(Error::Tune(format!("the original config {}: {reason}", c.config)));
                }
                rows[i].verdict = Verdict::Excluded;
                rows[i].reason = reason;
            }
        }
        done += 1;
    }
    // Excluded candidates take no rounds: skip their share so the bar ends at 100 %.
    done += (k - live.len() as u64) * opts.rounds as u64;
    for r in 0..opts.rounds as usize {
        let order: Vec<usize> = if live.is_empty() {
            Vec::new()
        } else {
            let start = r % live.len();
            live[start..].iter().chain(&live[..start]).copied().collect()
        };
        for i in order {
            if rows[i].verdict == Verdict::Excluded {
                continue;
            }
            let cfg = set.candidates[i].config;
            progress(done, total, &format!("round {}/{}: {cfg}", r + 1, opts.rounds));
            match measure.measure(&cfg) {
                Ok(ms) if ms.is_finite() && ms > 0.0 => rows[i].samples_ms.push(ms),
                Ok(ms) => {
                    if i == 0 {
                        return Err(Error::Tune(format!("the original config {cfg} measured {ms} ms")));
                    }
                    rows[i].verdict = Verdict::Excluded;
                    rows[i].reason = format!("implausible time {ms} ms");
                }
                Err(e) => {
                    if i == 0 {
                        return Err(Error::Tune(format!("the original config {cfg} failed to run: {e}")));
                    }
                    rows[i].verdict = Verdict::Excluded;
                    rows[i].reason = format!("failed while measuring: {e}");
                }
            }
            done += 1;
        }
    }
    progress(total, total, "deciding");
    for row in rows.iter_mut() {
        if row.verdict == Verdict::Excluded {
            row.samples_ms.clear();
            continue;
        }
        if let Some(s) = row.summary() {
            row.median_ms = Some(s.median);
            row.q1_ms = Some(s.q1);
            row.q3_ms = Some(s.q3);
            row.min_ms = Some(s.min);
            row.max_ms = Some(s.max);
        }
    }
    let chosen_idx = decide(&mut rows, opts.threshold_pct)?;
    rows[0].gain_pct = Some(0.0);
    let chosen = rows[chosen_idx].config.unwrap_or(original);
    let gain = if chosen_idx == 0 { 0.0 } else { rows[chosen_idx].gain_pct.unwrap_or(0.0) };
    let mut notes = set.notes.clone();
    if set.candidates.len() < 3 {
        notes.push(format!(
            "only {} candidate(s) satisfy the stage's rules for {original} (BLOCK sizes fixed, stages ±1 within 2..=4, \
             warps only where the occupancy estimate suggests it)",
            set.candidates.len()
        ));
    }
    let measured = rows.iter().filter(|r| r.median_ms.is_some()).count();
    if measured < 2 {
        notes.push("no candidate besides the original could be measured: the original is kept".into());
    }
    for s in &set.skipped {
        rows.push(CandidateReport {
            config: s.config,
            label: s.label.clone(),
            change: s.reason.split(':').next().unwrap_or("").to_string(),
            warps: s.warps,
            stages: s.stages,
            occupancy: s.occupancy.clone(),
            verdict: Verdict::Skipped,
            reason: s.reason.clone(),
            ..Default::default()
        });
    }
    Ok(StageResult { chosen, gain_pct: gain, rows, notes })
}

// ---------------------------------------------------------------------------------------
// The GPU timing source
// ---------------------------------------------------------------------------------------

/// Device time one sample should cover on a GPU, ms (see [`GpuMeasure`]).
pub const SAMPLE_MS_GPU: f64 = 2.0;
/// Device time one sample should cover on a CPU adapter, ms: OS scheduling noise is bursty
/// there, and the fastest of a few runs filters it.
pub const SAMPLE_MS_CPU: f64 = 15.0;

/// How long [`GpuMeasure`] keeps a GPU busy with a candidate before timing it. The
/// benchmark's 50 ms brought an H100's clock back in every row measured; the tuner samples
/// each candidate several times, each after the one before kept the GPU busy, so it takes
/// less per sample (20 ms has not been measured on its own).
pub const BUSY_BEFORE_SAMPLE: std::time::Duration = std::time::Duration::from_millis(20);

/// Times candidates of one problem on a GPU: one `Conv2d` per config (explicit kernel of
/// the original's family, at its precision), shared random-normal input and an output
/// buffer, GPU timestamps (host clock where the device has none, marked in the report).
pub struct GpuMeasure {
    gpu: Gpu,
    problem: ConvProblem,
    family: Kernel,
    weight: Vec<f32>,
    bias: Option<Vec<f32>>,
    input: wgpu::Buffer,
    output: wgpu::Buffer,
    prepared: HashMap<TileConfig, (Conv2d, ConvPlan)>,
    warmup: u32,
    reps: u32,
    clock: Option<Clock>,
}

/// Standard-normal values from a fixed seed (never zeros; deterministic), or
/// `OutOfMemory` naming `what`.
pub fn randn(len: usize, seed: u64, what: &str) -> Result<Vec<f32>> {
    // Box–Muller on fastrand (already in the tree through tempfile) keeps rand and
    // rand_distr out of a library user's build; timing data needs no better generator.
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut out = crate::alloc::vec_with_capacity(len, what)?;
    while out.len() < len {
        let u1 = 1.0 - rng.f64(); // (0, 1]: ln stays finite
        let r = (-2.0 * u1.ln()).sqrt();
        let theta = std::f64::consts::TAU * rng.f64();
        for v in [r * theta.cos(), r * theta.sin()] {
            // Never zero (see above): a zero would be an all-zero product's blind spot.
            if out.len() < len && v != 0.0 {
                out.push(v as f32);
            }
        }
    }
    Ok(out)
}

impl GpuMeasure {
    /// Allocates the input (standard normal; a block of 2^20 + 7 values repeated, so that
    /// large batches need not draw 10^8 numbers), the output and the weights. `family`:
    /// the kernel every config runs in (its own config is not used).
    pub fn new(gpu: &Gpu, problem: &ConvProblem, family: &Kernel, warmup: u32, reps: u32) -> Result<Self> {
        // `ConvProblem`'s fields are public: re-derive it rather than trust them.
        let problem = &problem.spec.problem(problem.input)?;
        let spec = &problem.spec;
        let weight = randn(spec.weight_len(), 0x5eed_0001, "the tuner's weights")?;
        let bias = spec.bias.then(|| randn(spec.out_channels as usize, 0x5eed_0002, "the tuner's bias")).transpose()?;
        let len = usize::try_from(problem.input.len())
            .map_err(|_| Error::TooLarge(format!("the input {} for this host", problem.input)))?;
        let block = randn(len.min((1 << 20) + 7), 0x5eed_0003, "the tuner's input")?;
        let mut x = crate::alloc::vec_with_capacity(len, "the tuner's input")?;
        while x.len() < len {
            let take = (len - x.len()).min(block.len());
            x.extend_from_slice(&block[..take]);
        }
        let input = gpu.buffer_init("wgconv tune input", bytemuck::cast_slice(&x), wgpu::BufferUsages::STORAGE)?;
        drop(x);
        let output = gpu.create_buffer("wgconv tune output", problem.output.len() * 4, wgpu::BufferUsages::STORAGE)?;
        Ok(GpuMeasure {
            gpu: gpu.clone(),
            problem: *problem,
            family: family.clone(),
            weight,
            bias,
            input,
            output,
            prepared: HashMap::new(),
            warmup,
            reps,
            clock: None,
        })
    }

    fn sample(&mut self, cfg: &TileConfig, runs: u32) -> Result<Vec<f64>> {
        let (_, plan) = self.prepared.get(cfg).ok_or_else(|| Error::Tune(format!("{cfg} was not prepared")))?;
        // A GPU left idle while the host prepared the candidate may have dropped its clock;
        // the timed runs follow a busy stretch that brings it back (see `timing::keep_busy`).
        // A CPU adapter has no such clock to raise.
        if !self.gpu.is_cpu() {
            timing::keep_busy(&self.gpu, plan, BUSY_BEFORE_SAMPLE)?;
        }
        let (times, clock) = timing::time_plan(&self.gpu, plan, 0, runs)?;
        self.clock = Some(clock);
        Ok(times)
    }
}

impl Measure for GpuMeasure {
    fn prepare(&mut self, cfg: &TileConfig) -> Result<()> {
        let kernel =
            self.family.with_tile(*cfg).ok_or_else(|| Error::Tune(format!("{} has no tile config", self.family)))?;
        let precision = kernel.precision();
        let opts = Conv2dOptions { kernel: Some(kernel), precision, ..Default::default() };
        let conv = Conv2d::new(&self.gpu, self.problem.spec, &self.weight, self.bias.as_deref(), opts)?;
        let plan = conv.plan(self.problem.input, &self.input, &self.output)?;
        let scope = ErrorScope::push(&self.gpu.device);
        for _ in 0..self.warmup.max(1) {
            let mut enc = self.gpu.device.create_command_encoder(&Default::default());
            plan.encode(&mut enc, None);
            self.gpu.queue.submit([enc.finish()]);
        }
        self.gpu.wait()?;
        scope.finish("warm-up")?;
        self.prepared.insert(*cfg, (conv, plan));
        if self.reps == 0 {
            // Pilot: one timed run of the first prepared config (the original).
            let t = self.sample(cfg, 1)?.first().copied().unwrap_or(1.0);
            let target_ms = if self.gpu.is_cpu() { SAMPLE_MS_CPU } else { SAMPLE_MS_GPU };
            self.reps = ((target_ms / t.max(1e-6)).ceil() as u32).clamp(1, 10);
        }
        Ok(())
    }
    fn measure(&mut self, cfg: &TileConfig) -> Result<f64> {
        let reps = self.reps.max(1);
        let times = self.sample(cfg, reps)?;
        Summary::of(&times).map(|s| s.min).ok_or_else(|| Error::Tune(format!("{cfg}: no usable time")))
    }
    fn clock(&self) -> String {
        match self.clock {
            Some(Clock::GpuTimestamps) => "gpu timestamps".into(),
            Some(Clock::HostWallClock) => "host wall clock (no timestamp queries)".into(),
            None => "none".into(),
        }
    }
    fn reps(&self) -> u32 {
        self.reps
    }
}

// ---------------------------------------------------------------------------------------
// The whole tune, with the cache
// ---------------------------------------------------------------------------------------

/// A tune's outcome: the report, and whether it came from the cache.
#[derive(Debug, Clone)]
pub struct TuneOutcome {
    /// The decision and how it was reached.
    pub report: TuneReport,
    /// Whether it came from the cache (nothing was measured).
    pub from_cache: bool,
    /// Why the decision was not stored, if it was not (no cache location, I/O error). The
    /// caller reports it (the library only logs it at debug level, so that it is said once).
    pub store_error: Option<String>,
}

/// The cache key of a problem tuned on `kernel`'s family on a device (`info`: the
/// adapter; `runtime_checks`: whether wgpu's bounds checks are on, [`Gpu::runtime_checks`]).
/// Needs no device, so a cached decision can be shown without opening one.
pub fn cache_key(info: &wgpu::AdapterInfo, runtime_checks: bool, problem: &ConvProblem, kernel: &Kernel) -> CacheKey {
    CacheKey::new(DeviceKey::new(info, runtime_checks), problem, kernel)
}

/// The cache key of a problem tuned on `kernel`'s family on this device (adapter, driver,
/// backend, runtime checks).
pub fn cache_key_for(gpu: &Gpu, problem: &ConvProblem, kernel: &Kernel) -> CacheKey {
    cache_key(&gpu.info, gpu.runtime_checks(), problem, kernel)
}

/// A cached decision for this adapter, problem and original (its family, hence its
/// precision, and its tile), if there is one whose config the adapter accepts (`limits`),
/// with the report of the tune that made it where the cache kept one that agrees with it.
/// Needs no device: `wgconv tune` answers from here without opening one.
pub fn lookup(
    cache: &TuningCache,
    info: &wgpu::AdapterInfo,
    limits: &KernelLimits,
    runtime_checks: bool,
    problem: &ConvProblem,
    original: &Kernel,
) -> Option<(CachedDecision, Option<TuneReport>)> {
    let key = cache_key(info, runtime_checks, problem, original);
    let d = cache.lookup(&key)?;
    if Some(d.original) != original.tile() {
        log::info!("tuning cache: the decision for this shape started from {}, not {original}", d.original);
        return None;
    }
    let chosen = original.with_tile(d.config)?;
    if let Err(e) = chosen.check_limits(limits) {
        log::warn!("tuning cache {}: cached config refused by the device, ignoring it: {e}", cache.path().display());
        return None;
    }
    let report = d.report.clone().and_then(|v| serde_json::from_value::<TuneReport>(v).ok());
    // A report that contradicts its decision is not shown.
    let report = report.filter(|r| r.chosen == d.config && r.original == d.original && r.kernel == original.family());
    Some((d, report))
}

/// Runs the stage for `problem` around `original` on `gpu` — or returns the cached
/// decision (unless `opts.force`) — and stores a new decision in `opts.cache`.
///
/// `original`: the kernel to start from, one with a tile ([`check_tunable`]); every
/// candidate runs in its family at its precision, and the decision is stored under that
/// family. The precision's default kernel on a device
/// (`wgconv::advanced::default_kernel(gpu.caps(), precision)`, with
/// [`crate::Kernel::with_tile`] for another start) is the family a `Conv2d` later looks
/// the decision up under.
pub fn tune(
    gpu: &Gpu,
    problem: &ConvProblem,
    original: &Kernel,
    opts: &TuneOptions,
    progress: &mut ProgressFn<'_>,
) -> Result<TuneOutcome> {
    opts.check()?;
    check_tunable(original)?;
    original.check_shape()?;
    let Some(original_cfg) = original.tile() else {
        return Err(Error::Tune(format!("{original} has no tile config")));
    };
    let limits = gpu.kernel_limits();
    if !opts.force {
        if let Some(cache) = &opts.cache {
            if let Some((d, report)) = lookup(cache, &gpu.info, &limits, gpu.runtime_checks(), problem, original) {
                let report = report.unwrap_or_else(|| minimal_report(gpu, problem, original, &d));
                return Ok(TuneOutcome { report, from_cache: true, store_error: None });
            }
        }
    }
    let t0 = Instant::now();
    let profile = OccupancyProfile::for_adapter(&gpu.info);
    let set = candidates(original, &profile);
    let mut measure = GpuMeasure::new(gpu, problem, original, opts.warmup, opts.reps)?;
    let stage = run_stage(&set, Some(&limits), &mut measure, opts, progress)?;
    let report = TuneReport {
        problem: *problem,
        precision: original.precision(),
        kernel: original.family().to_string(),
        adapter: gpu.info.name.clone(),
        backend: format!("{:?}", gpu.info.backend),
        profile,
        original: original_cfg,
        chosen: stage.chosen,
        gain_pct: stage.gain_pct,
        threshold_pct: opts.threshold_pct,
        rounds: opts.rounds,
        reps: measure.reps(),
        warmup: opts.warmup,
        clock: measure.clock(),
        rule: STABILITY_RULE.into(),
        rows: stage.rows,
        notes: stage.notes,
        elapsed_ms: t0.elapsed().as_secs_f64() * 1e3,
        tuned_at: rfc3339_utc(std::time::SystemTime::now()),
    };
    let store_error = match &opts.cache {
        None => Some(format!("no cache location (set {})", cache::DIR_ENV)),
        Some(cache) => {
            let key = cache_key_for(gpu, problem, original);
            let decision = CachedDecision {
                config: report.chosen,
                original: original_cfg,
                threshold_pct: opts.threshold_pct,
                gain_pct: report.gain_pct,
                tuned_at: report.tuned_at.clone(),
                report: serde_json::to_value(&report).ok(),
            };
            cache.store(&key, &decision).err().map(|e| e.to_string())
        }
    };
    if let Some(e) = &store_error {
        // The outcome carries it and the caller reports it (the CLI prints it once).
        log::debug!("the tuning decision was not stored: {e}");
    }
    Ok(TuneOutcome { report, from_cache: false, store_error })
}

fn minimal_report(gpu: &Gpu, problem: &ConvProblem, original: &Kernel, d: &CachedDecision) -> TuneReport {
    TuneReport {
        problem: *problem,
        precision: original.precision(),
        kernel: original.family().to_string(),
        adapter: gpu.info.name.clone(),
        backend: format!("{:?}", gpu.info.backend),
        profile: OccupancyProfile::for_adapter(&gpu.info),
        original: d.original,
        chosen: d.config,
        gain_pct: d.gain_pct,
        threshold_pct: d.threshold_pct,
        rounds: 0,
        reps: 0,
        warmup: 0,
        clock: "cached".into(),
        rule: STABILITY_RULE.into(),
        rows: Vec::new(),
        notes: vec!["the cache entry holds no report".into()],
        elapsed_ms: 0.0,
        tuned_at: d.tuned_at.clone(),
    }
}

/// The tuner's cached decision for this device, problem and precision, if any: the one
/// measured on the family of the precision's default kernel here
/// (`wgconv::advanced::default_kernel`: f16 is `coop-f16` or `tiled-f16` depending on
/// whether cooperative matrices are enabled), and only if the device accepts it
/// ([`crate::Kernel::check_limits`]); where this batch was not tuned, the nearest tuned batch
/// within [`cache::BATCH_REUSE_FACTOR`]× ([`cache::TuningCache::lookup_near`]). What a
/// `Conv2d` with `Conv2dOptions::tuning_key_input`
/// consults (unless the stem rule picks its kernel first). Reads the cache at its default
/// location ([`cache::default_dir`]); a missing or unreadable cache is a miss.
pub fn cached_decision(gpu: &Gpu, problem: &ConvProblem, precision: Precision) -> Option<Kernel> {
    let (default, _) = crate::select::default_kernel(gpu.caps(), precision).ok()?;
    cache::cached_decision(gpu, problem, &default).map(|(kernel, _)| kernel)
}

// ---------------------------------------------------------------------------------------
// The table
// ---------------------------------------------------------------------------------------

impl TuneReport {
    /// The decision as a text table: per row config, change, warps, stages, estimated
    /// registers / workgroup memory / occupancy, median, IQR, gain, verdict, reason.
    pub fn table(&self) -> String {
        let mut rows: Vec<[String; 11]> = vec![[
            "config".into(),
            "warps".into(),
            "stages".into(),
            "regs".into(),
            "wg mem".into(),
            "est. occupancy".into(),
            "median ms".into(),
            "IQR ms".into(),
            "gain %".into(),
            "verdict".into(),
            "reason".into(),
        ]];
        let f = |v: Option<f64>, p: usize| v.map(|v| format!("{v:.p$}")).unwrap_or_else(|| "-".into());
        for r in &self.rows {
            let occ = r.occupancy.as_ref();
            rows.push([
                r.label.clone(),
                r.warps.to_string(),
                r.stages.to_string(),
                occ.map(|o| o.registers.to_string()).unwrap_or_else(|| "-".into()),
                occ.map(|o| format!("{} B", o.workgroup_bytes)).unwrap_or_else(|| "-".into()),
                occ.map(|o| o.brief()).unwrap_or_else(|| "-".into()),
                f(r.median_ms, 4),
                f(r.iqr_ms(), 4),
                r.gain_pct.map(|g| format!("{g:+.2}")).unwrap_or_else(|| "-".into()),
                r.verdict.to_string(),
                r.reason.clone(),
            ]);
        }
        let widths: Vec<usize> =
            (0..11).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
        let mut out = String::new();
        for (i, r) in rows.iter().enumerate() {
            let mut line = String::new();
            for (c, cell) in r.iter().enumerate() {
                let pad = widths[c] - cell.chars().count();
                if c == 10 {
                    line.push_str(cell);
                } else if (3..=8).contains(&c) && i > 0 {
                    let _ = write!(line, "{}{cell}  ", " ".repeat(pad));
                } else {
                    let _ = write!(line, "{cell}{}  ", " ".repeat(pad));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
            if i == 0 {
                out.push_str(&"-".repeat(widths.iter().sum::<usize>() + 2 * 10));
                out.push('\n');
            }
        }
        out
    }

    /// A few lines on how the stage ran and what it decided.
    pub fn header(&self) -> String {
        let p = &self.profile;
        let mut s = format!(
            "problem   {}\nadapter   {} ({})\noriginal  {}:{} (precision {})\nrule      {}\nthreshold {}%   rounds {} (interleaved, rotating start)   \
             runs/sample {}   warm-up {}   clock {}\noccupancy profile {}: {} regs/SM (unit {}, max {}/invocation), \
             {} B workgroup memory/SM ({} B reserved per workgroup), {} invocations/SM, {} workgroups/SM\n",
            self.problem,
            self.adapter,
            self.backend,
            self.kernel,
            self.original,
            self.precision,
            self.rule,
            self.threshold_pct,
            self.rounds,
            self.reps,
            self.warmup,
            self.clock,
            p.name,
            p.regs_per_sm,
            p.reg_alloc_unit,
            p.max_regs_per_invocation,
            p.smem_per_sm,
            p.smem_reserved_per_workgroup,
            p.max_invocations_per_sm,
            p.max_workgroups_per_sm,
        );
        for n in &self.notes {
            let _ = writeln!(s, "note      {n}");
        }
        s
    }

    /// The one-line decision.
    pub fn decision_line(&self) -> String {
        if self.chosen == self.original {
            format!("decision: keep the original {}", self.original)
        } else {
            format!("decision: {} replaces {} ({:.2}% faster)", self.chosen, self.original, self.gain_pct)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(name: &str) -> Kernel {
        Kernel::parse(name).unwrap()
    }

    #[test]
    fn tunable_iff_the_kernel_has_a_tile() {
        for name in ["tiled", "tiled-f16", "coop-f16", "coop-f16x3"] {
            assert!(check_tunable(&kernel(name)).is_ok(), "{name}");
        }
        for name in ["coop-band-f16", "coop-stem-f16", "direct"] {
            let e = check_tunable(&kernel(name)).unwrap_err().to_string();
            assert_eq!(e, format!("the tuner tunes the tiled kernels, not {name}"));
            let set = candidates(&kernel(name), &OccupancyProfile::NVIDIA);
            assert!(set.candidates.is_empty(), "{name}");
        }
    }

    #[test]
    fn seed_has_two_candidates_on_nvidia() {
        let seed = kernel("tiled:m32n64k32-t4x4-w4-s2");
        assert_eq!(estimate_registers(&seed), 72);
        let occ = estimate_occupancy(&seed, &OccupancyProfile::NVIDIA);
        // 25.5 KiB of workgroup memory (+1 KiB reserved) in 51 KiB: one workgroup.
        assert_eq!((occ.by_registers, occ.resident, occ.limiter.as_str()), (7, 1, "storage"));
        let set = candidates(&seed, &OccupancyProfile::NVIDIA);
        let changes: Vec<&str> = set.candidates.iter().map(|c| c.change.as_str()).collect();
        assert_eq!(changes, ["original", "stages 2→3"]);
        assert_eq!(set.skipped.len(), 2, "{:?}", set.skipped);
        assert!(set
            .skipped
            .iter()
            .any(|s| s.warps == 8 && s.config.is_none() && s.reason.contains("no register tile")));
        assert!(set.skipped.iter().any(|s| s.warps == 2 && s.reason.contains("does not suggest")));
        assert_eq!(set.original, seed);
    }

    #[test]
    fn anchor_has_six_candidates() {
        let set = candidates(&kernel("tiled:m64n64k16-t4x8-w4-s3"), &OccupancyProfile::NVIDIA);
        assert_eq!(set.candidates.len(), MAX_CANDIDATES);
        assert_eq!(set.candidates[0].config.name(), "m64n64k16-t4x8-w4-s3");
        assert!(set.candidates.iter().any(|c| c.config.warps == 8));
    }

    #[test]
    fn cooperative_estimates_use_operand_halves() {
        let f16 = kernel("coop-f16:m64n96k16-t4x12-w4-s1");
        let f16x3 = kernel("coop-f16x3:m64n96k16-t4x12-w4-s1");
        assert_eq!(estimate_registers(&f16), 122);
        assert_eq!(estimate_registers(&f16x3), 156);
        // Fragments re-split over 8 warps: a thread tile the SIMT kernels would refuse.
        let w8 = with_warps(&f16x3, 8).unwrap();
        assert_eq!(w8.to_string(), "coop-f16x3:m64n96k16-t4x6-w8-s1");
        assert_eq!(estimate_registers(&w8), 116);
        assert!(with_warps(&kernel("tiled:m64n96k16-t4x12-w4-s1"), 8).is_err());
        let warps = |k: &Kernel| -> Vec<u32> {
            candidates(k, &OccupancyProfile::NVIDIA).candidates.iter().map(|c| c.config.warps).collect()
        };
        assert!(warps(&f16x3).contains(&8));
        assert!(!warps(&f16).contains(&8));
    }

    /// Times from a table: the rule, without a device.
    struct Table(HashMap<TileConfig, f64>, u64);

    impl Measure for Table {
        fn measure(&mut self, cfg: &TileConfig) -> Result<f64> {
            self.1 += 1;
            let jitter = (self.1 % 3) as f64 * 1e-4;
            self.0.get(cfg).map(|t| t + jitter).ok_or_else(|| Error::Tune(format!("{cfg}")))
        }
    }

    #[test]
    fn stage_adopts_a_clearly_faster_candidate_and_keeps_otherwise() {
        let set = candidates(&kernel("tiled:m64n64k16-t4x8-w4-s3"), &OccupancyProfile::NVIDIA);
        let opts = TuneOptions { cache: None, ..Default::default() };
        let times = |fast: Option<usize>| {
            let map = set
                .candidates
                .iter()
                .enumerate()
                .map(|(i, c)| (c.config, if Some(i) == fast { 0.5 } else { 1.0 }))
                .collect();
            Table(map, 0)
        };
        let limits = KernelLimits::with_workgroup_bytes(48 * 1024);
        let r = run_stage(&set, Some(&limits), &mut times(Some(2)), &opts, &mut |_, _, _| {}).unwrap();
        assert_eq!(r.chosen, set.candidates[2].config);
        assert!(r.gain_pct > 40.0);
        let r = run_stage(&set, Some(&limits), &mut times(None), &opts, &mut |_, _, _| {}).unwrap();
        assert_eq!(r.chosen, set.candidates[0].config);
        assert_eq!(r.rows[0].verdict, Verdict::Keep);
    }
}

pub use crate::cache::rfc3339_utc;

#[cfg(test)]
mod time_tests {
    #[test]
    fn rfc3339_of_known_instants() {
        let at = |s| super::rfc3339_utc(std::time::UNIX_EPOCH + std::time::Duration::from_secs(s));
        assert_eq!(at(0), "1970-01-01T00:00:00Z");
        assert_eq!(at(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(at(1_795_690_164), "2026-11-26T10:49:24Z");
    }
}
