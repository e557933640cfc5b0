//! `TileConfig`: the one home of the tile vocabulary, and the declared sweeps.
//!
//! The tiled kernel computes a `block_m × block_n` block of the implicit GEMM
//! (rows: output positions n·OH·OW, columns: output channels of one group) per workgroup,
//! walking K = C_in/g·KH·KW in steps of `block_k`. Each invocation owns a
//! `thread_m × thread_n` register tile; `warps × 32` invocations cover the block, so
//! `block_m·block_n = warps·32·thread_m·thread_n`. `stages` is the number of K-step
//! buffers in workgroup memory; the next step's global loads are always issued into
//! registers before the current step's arithmetic (WGSL has no async copy, so stages ≥ 3
//! only add workgroup memory — measured, not assumed, by the tuner).

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

/// Largest block side (and register-tile side) a config may name.
pub const MAX_BLOCK: u32 = 4096;

/// Invocations of one warp (NVIDIA) — the unit Triton's `num_warps` counts in.
pub const WARP: u32 = 32;
/// The warp counts the vocabulary allows (Triton's `num_warps`).
pub const WARP_CHOICES: [u32; 4] = [2, 4, 8, 16];
/// Stage counts the vocabulary allows; the seed's own configs use 1..=3 and its tuning stage 2..=4.
pub const STAGE_RANGE: std::ops::RangeInclusive<u32> = 1..=4;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TileConfig {
    pub block_m: u32,
    pub block_n: u32,
    pub block_k: u32,
    /// Register tile rows (output positions) per invocation; a multiple of 4 (vec4 reads).
    pub thread_m: u32,
    /// Register tile columns (output channels) per invocation; a multiple of 4.
    pub thread_n: u32,
    pub warps: u32,
    pub stages: u32,
}

/// The limits a config is checked against: the device's, taken from `wgpu::Limits`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelLimits {
    pub workgroup_storage_bytes: u32,
    pub invocations_per_workgroup: u32,
    pub workgroup_size_x: u32,
}

impl KernelLimits {
    /// A device with `workgroup_storage_bytes` of workgroup memory and 1024 invocations per
    /// workgroup: the geometry checks of the problem-shaped kernels (row-band, stem) for
    /// representative problems and in tests.
    pub const fn with_workgroup_bytes(workgroup_storage_bytes: u32) -> Self {
        KernelLimits { workgroup_storage_bytes, invocations_per_workgroup: 1024, workgroup_size_x: 1024 }
    }
}

impl From<&wgpu::Limits> for KernelLimits {
    fn from(l: &wgpu::Limits) -> Self {
        KernelLimits {
            workgroup_storage_bytes: l.max_compute_workgroup_storage_size,
            invocations_per_workgroup: l.max_compute_invocations_per_workgroup,
            workgroup_size_x: l.max_compute_workgroup_size_x,
        }
    }
}

impl TileConfig {
    /// A config whose register tile is derived from the block and the warp count
    /// (the most square split into multiples of 4); see [`TileConfig::validate`].
    pub fn new(block_m: u32, block_n: u32, block_k: u32, warps: u32, stages: u32) -> Result<Self> {
        let mut cfg = TileConfig { block_m, block_n, block_k, thread_m: 0, thread_n: 0, warps, stages };
        cfg.derive_thread_tile()?;
        Ok(cfg)
    }

    /// An explicit register tile: the workgroup size follows from it.
    pub const fn with_thread_tile(
        block_m: u32,
        block_n: u32,
        block_k: u32,
        thread_m: u32,
        thread_n: u32,
        stages: u32,
    ) -> Self {
        let per_warp = WARP.saturating_mul(thread_m).saturating_mul(thread_n);
        let warps = match block_m.saturating_mul(block_n).checked_div(per_warp) {
            Some(w) => w,
            None => 0,
        };
        TileConfig { block_m, block_n, block_k, thread_m, thread_n, warps, stages }
    }

    /// A stem kernel config: multiplying warps of `fm` M fragments each (one per N fragment
    /// and share of the row) and `helpers` more.
    pub const fn new_stem(block_m: u32, block_n: u32, fm: u32, helpers: u32) -> Self {
        let mut cfg = TileConfig::with_thread_tile(block_m, block_n, 16, 2 * fm, 4, 1);
        cfg.warps = cfg.warps.saturating_add(helpers);
        cfg
    }

    /// The seed Triton kernel's current config on the 4090:
    /// BLOCK_M 32, BLOCK_N 64, BLOCK_K 32, 4 warps, 2 stages (a 4×4 register tile).
    pub const fn seed() -> Self {
        TileConfig::with_thread_tile(32, 64, 32, 4, 4, 2)
    }

    /// The same blocks with another warp count: the register tile is re-derived,
    /// BLOCK sizes (and so the grid) stay. Used by the tuner.
    pub fn with_warps(&self, warps: u32) -> Result<Self> {
        TileConfig::new(self.block_m, self.block_n, self.block_k, warps, self.stages)
    }
    /// [`TileConfig::with_warps`] for the cooperative-matrix kernels, whose warps own 16×16
    /// fragments ([`TileConfig::coop_layout`]), not a register tile: the thread tile only
    /// records the workgroup size. It is the SIMT kernels' register tile where one exists
    /// (so names round-trip: `t4x12-w4` → `w8` → `w4` is `t4x12-w4` again), else the most
    /// square split of the cells per invocation into sides dividing the block (m64n96 over 8
    /// warps: `t4x6`, which the SIMT kernels would refuse). The fragment layout is checked
    /// by `coop_layout`, not here.
    pub fn with_fragment_warps(&self, warps: u32) -> Result<Self> {
        if let Ok(cfg) = self.with_warps(warps) {
            return Ok(cfg);
        }
        let cfg = TileConfig { warps, ..*self };
        cfg.check_bounds()?;
        let threads = warps.saturating_mul(WARP);
        let cells = self.block_m * self.block_n;
        if threads == 0 || !cells.is_multiple_of(threads) {
            return Err(cfg.refuse(format!("{cells} block cells do not split over {threads} invocations")));
        }
        let per = cells / threads;
        (1..=per)
            .filter(|tm| per.is_multiple_of(*tm))
            .map(|tm| (tm, per / tm))
            .filter(|(tm, tn)| self.block_m.is_multiple_of(*tm) && self.block_n.is_multiple_of(*tn))
            .min_by_key(|(tm, tn)| (tm.abs_diff(*tn), *tm))
            .map(|(thread_m, thread_n)| TileConfig { thread_m, thread_n, ..cfg })
            .ok_or_else(|| cfg.refuse(format!("{per} outputs per invocation do not tile the block")))
    }
    pub fn with_stages(&self, stages: u32) -> Self {
        TileConfig { stages, ..*self }
    }

    fn derive_thread_tile(&mut self) -> Result<()> {
        self.check_bounds()?;
        let threads = self.warps * WARP;
        let cells = self.block_m * self.block_n;
        if threads == 0 || !cells.is_multiple_of(threads) {
            return Err(self.refuse(format!("{cells} block cells do not split over {threads} invocations")));
        }
        let per = cells / threads;
        // Most square split with both sides multiples of 4 dividing their block side.
        let mut best: Option<(u32, u32)> = None;
        let mut tm = 4;
        while tm <= per {
            if per.is_multiple_of(tm) {
                let tn = per / tm;
                if tn.is_multiple_of(4) && self.block_m.is_multiple_of(tm) && self.block_n.is_multiple_of(tn) {
                    let score = tm.abs_diff(tn);
                    if best.is_none_or(|(bm, bn)| score < bm.abs_diff(bn)) {
                        best = Some((tm, tn));
                    }
                }
            }
            tm += 4;
        }
        match best {
            Some((tm, tn)) => {
                self.thread_m = tm;
                self.thread_n = tn;
                Ok(())
            }
            None => {
                Err(self.refuse(format!("{per} outputs per invocation cannot form a register tile of multiples of 4")))
            }
        }
    }

    pub fn invocations(&self) -> u32 {
        self.warps.saturating_mul(WARP)
    }
    /// Invocations along M and N: `(block_m / thread_m, block_n / thread_n)`.
    pub fn thread_grid(&self) -> (u32, u32) {
        (self.block_m / self.thread_m.max(1), self.block_n / self.thread_n.max(1))
    }
    /// Workgroup memory of the kernel: `stages` buffers of A (BK×(BM+4), rows padded
    /// against bank conflicts) and B (BK×BN) f32, plus the per-row gather info (BM × `vec4<i32>`).
    pub fn workgroup_bytes(&self) -> u64 {
        let tiles = self.stages as u64 * self.block_k as u64 * (self.block_m as u64 + 4 + self.block_n as u64) * 4;
        tiles + self.block_m as u64 * 16
    }
    /// Accumulator registers per invocation (f32).
    pub fn accumulators(&self) -> u32 {
        self.thread_m * self.thread_n
    }

    fn refuse(&self, reason: impl Into<String>) -> Error {
        Error::ConfigRefused { config: self.to_string(), reason: reason.into() }
    }

    /// Sizes beyond any device, refused first so that the products below cannot overflow
    /// (configs also come from the command line and the tuning-cache file).
    fn check_bounds(&self) -> Result<()> {
        let dims = [("block_m", self.block_m), ("block_n", self.block_n), ("block_k", self.block_k)];
        for (name, v) in dims {
            if v == 0 || v > MAX_BLOCK {
                return Err(self.refuse(format!("{name} must be 1..={MAX_BLOCK}, got {v}")));
            }
        }
        for (name, v) in [("thread_m", self.thread_m), ("thread_n", self.thread_n)] {
            if v > MAX_BLOCK {
                return Err(self.refuse(format!("{name} must be at most {MAX_BLOCK}, got {v}")));
            }
        }
        Ok(())
    }

    fn check_warps(&self) -> Result<()> {
        if !WARP_CHOICES.contains(&self.warps) {
            return Err(self.refuse(format!("warps must be one of {WARP_CHOICES:?}, got {}", self.warps)));
        }
        Ok(())
    }

    /// Block sides in whole 16×16 fragments, for the cooperative-matrix kernel named `kernel`.
    fn check_fragment_blocks(&self, kernel: &str) -> Result<()> {
        if !self.block_m.is_multiple_of(16) || !self.block_n.is_multiple_of(16) || !self.block_k.is_multiple_of(16) {
            return Err(self.refuse(format!(
                "the {kernel} kernel needs block sizes in multiples of 16, got {}x{}x{}",
                self.block_m, self.block_n, self.block_k
            )));
        }
        Ok(())
    }

    /// Checks shared by the SIMT and cooperative tiled kernels: warps, stages, block_k and
    /// the A loader's split (the register tile is the SIMT kernels' own, see
    /// [`TileConfig::check_shape`]).
    pub fn check_common(&self) -> Result<()> {
        self.check_bounds()?;
        self.check_warps()?;
        let pow2 = |v: u32| v.is_power_of_two();
        if !STAGE_RANGE.contains(&self.stages) {
            return Err(self.refuse(format!("stages must be in {STAGE_RANGE:?}, got {}", self.stages)));
        }
        if self.block_k == 0 || !pow2(self.block_k) || self.block_k > 128 {
            return Err(self.refuse(format!("block_k must be a power of two ≤ 128, got {}", self.block_k)));
        }
        let inv = self.invocations();
        if !inv.is_multiple_of(self.block_k) || !(self.block_m * self.block_k).is_multiple_of(inv) {
            return Err(self.refuse(format!(
                "the A loader needs block_k | invocations and invocations | block_m·block_k ({} invocations, {}x{})",
                inv, self.block_m, self.block_k
            )));
        }
        Ok(())
    }

    /// Structural checks of the SIMT kernel, independent of any device.
    pub fn check_shape(&self) -> Result<()> {
        self.check_common()?;
        if self.thread_m == 0
            || self.thread_n == 0
            || !self.thread_m.is_multiple_of(4)
            || !self.thread_n.is_multiple_of(4)
        {
            return Err(self.refuse(format!(
                "register tile {}x{} must be multiples of 4 (vec4 reads from workgroup memory)",
                self.thread_m, self.thread_n
            )));
        }
        if self.thread_m > 16 {
            return Err(self.refuse(format!("register tile rows {} exceed 16 (four groups of 4)", self.thread_m)));
        }
        if self.thread_m * self.thread_n > 128 {
            return Err(self.refuse(format!(
                "register tile {}x{} = {} accumulators exceeds 128 per invocation",
                self.thread_m,
                self.thread_n,
                self.thread_m * self.thread_n
            )));
        }
        if !self.block_m.is_multiple_of(self.thread_m) || !self.block_n.is_multiple_of(self.thread_n) {
            return Err(self.refuse(format!(
                "register tile {}x{} does not divide the block {}x{}",
                self.thread_m, self.thread_n, self.block_m, self.block_n
            )));
        }
        let (rm, rn) = self.thread_grid();
        if rm * rn != self.invocations() {
            return Err(self.refuse(format!(
                "block {}x{} with register tile {}x{} needs {} invocations, but {} warps give {}",
                self.block_m,
                self.block_n,
                self.thread_m,
                self.thread_n,
                rm * rn,
                self.warps,
                self.invocations()
            )));
        }
        Ok(())
    }

    /// Checks the config against a device's limits, before any pipeline is built.
    pub fn validate(&self, limits: &KernelLimits) -> Result<()> {
        self.check_shape()?;
        self.check_device(limits, self.workgroup_bytes())
    }

    /// The warp layout of the cooperative-matrix kernel: `(warps_m, warps_n, fm, fn)`, the
    /// warps along M and N and the 16×16 accumulator fragments each warp owns along M and N.
    /// The register tile fields play no part there (a fragment's elements are spread over
    /// the warp's lanes by the driver); the most square per-warp tile is chosen.
    pub fn coop_layout(&self) -> Result<(u32, u32, u32, u32)> {
        self.check_common()?;
        self.check_fragment_blocks("cooperative-matrix")?;
        self.fragment_layout(MAX_FRAGMENTS)
    }

    /// The most square split of the block's 16×16 fragments over the warps, at most
    /// `max_fragments` per warp: `(warps_m, warps_n, fm, fn)`.
    fn fragment_layout(&self, max_fragments: u32) -> Result<(u32, u32, u32, u32)> {
        let (frags_m, frags_n) = (self.block_m / 16, self.block_n / 16);
        let mut best: Option<(u32, u32, u32, u32)> = None;
        for wn in (1..=self.warps).filter(|d| self.warps.is_multiple_of(*d)) {
            let wm = self.warps / wn;
            if frags_n % wn != 0 || frags_m % wm != 0 {
                continue;
            }
            let (fm, fn_) = (frags_m / wm, frags_n / wn);
            if fm * fn_ > max_fragments {
                continue;
            }
            if best.is_none_or(|(_, _, bm, bn)| fm.abs_diff(fn_) < bm.abs_diff(bn)) {
                best = Some((wm, wn, fm, fn_));
            }
        }
        best.ok_or_else(|| {
            self.refuse(format!(
                "{} warps cannot split {}x{} 16x16 fragments into at most {max_fragments} per warp",
                self.warps, frags_m, frags_n
            ))
        })
    }

    /// The warp layout of the row-band cooperative-matrix kernel (`shaders/conv_band.wgsl`),
    /// as [`TileConfig::coop_layout`]. There `block_m` counts the output positions of a
    /// workgroup (whole 16-column fragments of up to `block_m / 16` rows), `block_k` is the
    /// band depth CP (channel × column-phase slots per band column, a multiple of 16), and
    /// `stages` (1 or 2) counts the buffers of kernel-row weights (with 2 the next row's
    /// weights are copied while the current row multiplies).
    pub fn band_layout(&self) -> Result<(u32, u32, u32, u32)> {
        self.check_bounds()?;
        self.check_warps()?;
        if !(1..=2).contains(&self.stages) {
            return Err(self.refuse(format!("the row-band kernel has 1 or 2 weight stages, got {}", self.stages)));
        }
        self.check_fragment_blocks("row-band")?;
        if self.block_k > 128 {
            return Err(self.refuse(format!("band depth block_k must be at most 128, got {}", self.block_k)));
        }
        self.fragment_layout(MAX_BAND_FRAGMENTS)
    }

    /// Workgroup memory of the row-band kernel besides its band and weight stages: one 16×16
    /// f32 scratch fragment per warp. Those two depend on the problem (see `band`).
    pub fn band_scratch_bytes(&self) -> u64 {
        self.warps as u64 * 1024
    }

    /// Checks the config for the row-band kernel against a device's limits (the band itself
    /// is checked against the problem when the op is planned).
    pub fn validate_band(&self, limits: &KernelLimits) -> Result<()> {
        self.band_layout()?;
        self.check_device(limits, self.band_scratch_bytes())
    }

    /// The warp layout of the stem kernel (`shaders/conv_stem.wgsl`, see [`StemLayout`]).
    /// There `block_m` counts the output columns of a workgroup row (whole 16-column
    /// fragments), `block_k` is the fragment depth 16 and `stages` is 1 (rows are streamed
    /// through a ring). The register tile names a multiplying warp's share of the tile:
    /// thread_m·thread_n / 8 M fragments of one N fragment (a 16×16 f32 fragment is 8 values
    /// per invocation); the warps beyond those multiplying stage rows and store outputs.
    /// The warp count so may lie outside [`WARP_CHOICES`] (AlexNet: 96 channels are 6 N
    /// fragments).
    pub fn stem_layout(&self) -> Result<StemLayout> {
        self.check_bounds()?;
        self.check_fragment_blocks("stem")?;
        if self.block_k != 16 || self.stages != 1 {
            return Err(self.refuse(format!(
                "the stem kernel has block_k 16 and 1 stage, got block_k {} and {} stages",
                self.block_k, self.stages
            )));
        }
        let values = self.thread_m * self.thread_n;
        let (frags_m, warps_n) = (self.block_m / 16, self.block_n / 16);
        let fm = values / 8;
        if !values.is_multiple_of(8) || fm == 0 || !frags_m.is_multiple_of(fm) {
            return Err(self.refuse(format!(
                "the stem kernel's register tile holds whole 16×16 fragments (8 values each) that \
                 divide the {frags_m} M fragments, got {}x{}",
                self.thread_m, self.thread_n
            )));
        }
        if fm > MAX_STEM_FRAGMENTS {
            return Err(self.refuse(format!("{fm} M fragments per warp exceed the stem kernel's {MAX_STEM_FRAGMENTS}")));
        }
        let warps_m = frags_m / fm;
        let mma = warps_m * warps_n;
        if self.warps <= mma {
            return Err(self.refuse(format!(
                "the stem kernel's {mma} multiplying warps ({warps_m}×{warps_n}) need at least one more \
                 to stage rows and store outputs; got {} warps",
                self.warps
            )));
        }
        let helpers = self.warps - mma;
        if !(helpers * WARP).is_multiple_of(self.block_m) {
            return Err(self.refuse(format!(
                "the stem kernel's {helpers} helper warps store whole columns: their {} invocations must be \
                 a multiple of block_m {}",
                helpers * WARP,
                self.block_m
            )));
        }
        Ok(StemLayout { fm, warps_m, warps_n, helpers })
    }

    /// Checks the config for the stem kernel against a device's limits (its ring of input
    /// rows is checked against the problem when the op is planned).
    pub fn validate_stem(&self, limits: &KernelLimits) -> Result<()> {
        self.stem_layout()?;
        self.check_device(limits, crate::stem::stem_scratch_bytes(self))
    }

    /// Workgroup memory of the cooperative-matrix kernel: f16 A and B stages (rows padded by
    /// 8) once per operand half (`halves`: 1 for f16, 2 for the split f16x3 kernel), the row
    /// gather info, and one 16×16 f32 scratch fragment per warp.
    pub fn coop_workgroup_bytes(&self, halves: u64) -> u64 {
        let (bm, bn, bk) = (self.block_m as u64, self.block_n as u64, self.block_k as u64);
        halves * self.stages as u64 * bk * ((bm + 8) + (bn + 8)) * 2 + bm * 16 + self.warps as u64 * 1024
    }

    /// Checks the config for the cooperative-matrix kernel with operands in `halves` f16
    /// parts (see [`TileConfig::coop_workgroup_bytes`]) against a device's limits.
    pub fn validate_coop(&self, limits: &KernelLimits, halves: u64) -> Result<()> {
        self.coop_layout()?;
        self.check_device(limits, self.coop_workgroup_bytes(halves))
    }

    fn check_device(&self, limits: &KernelLimits, bytes: u64) -> Result<()> {
        let inv = self.invocations();
        if inv > limits.invocations_per_workgroup || inv > limits.workgroup_size_x {
            return Err(self.refuse(format!(
                "{inv} invocations exceed the device's {} per workgroup",
                limits.invocations_per_workgroup.min(limits.workgroup_size_x)
            )));
        }
        if bytes > limits.workgroup_storage_bytes as u64 {
            return Err(self.refuse(format!(
                "{bytes} B of workgroup memory exceed the device's {} B",
                limits.workgroup_storage_bytes
            )));
        }
        Ok(())
    }

    /// A short name, also the key of the pipeline cache: `m32n64k32-t4x4-w4-s2`.
    pub fn name(&self) -> String {
        format!(
            "m{}n{}k{}-t{}x{}-w{}-s{}",
            self.block_m, self.block_n, self.block_k, self.thread_m, self.thread_n, self.warps, self.stages
        )
    }

    /// Parses [`TileConfig::name`]'s form back (the CLI's `--config`). Syntax only:
    /// [`TileConfig::check_shape`] / [`TileConfig::validate`] say whether it can run, so a
    /// benchmark can list an impossible config as refused, with the reason.
    pub fn parse(s: &str) -> Result<Self> {
        let bad = || Error::Unsupported(format!("cannot parse tile config {s:?}: expected e.g. m32n64k32-t4x4-w4-s2"));
        let parts: Vec<&str> = s.split('-').collect();
        if parts.len() != 4 {
            return Err(bad());
        }
        let num = |t: &str| t.parse::<u32>().map_err(|_| bad());
        let mnk = parts[0].strip_prefix('m').ok_or_else(bad)?;
        let (m, rest) = mnk.split_once('n').ok_or_else(bad)?;
        let (n, k) = rest.split_once('k').ok_or_else(bad)?;
        let (tm, tn) = parts[1].strip_prefix('t').ok_or_else(bad)?.split_once('x').ok_or_else(bad)?;
        let w = num(parts[2].strip_prefix('w').ok_or_else(bad)?)?;
        let st = num(parts[3].strip_prefix('s').ok_or_else(bad)?)?;
        let cfg = TileConfig {
            block_m: num(m)?,
            block_n: num(n)?,
            block_k: num(k)?,
            thread_m: num(tm)?,
            thread_n: num(tn)?,
            warps: w,
            stages: st,
        };
        Ok(cfg)
    }
}

impl std::fmt::Display for TileConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

impl std::str::FromStr for TileConfig {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        TileConfig::parse(s)
    }
}

/// The declared benchmark sweep: the seed's config first (the baseline row), then
/// variations of block, register tile, workgroup size and stages. Configs a device
/// cannot run stay in the list and are reported as refused.
pub fn default_sweep() -> Vec<TileConfig> {
    use TileConfig as T;
    vec![
        T::seed(),
        // The seed's other Triton blocks, with the register tile their warp count implies.
        T::with_thread_tile(32, 32, 32, 4, 4, 2),
        T::with_thread_tile(64, 32, 32, 4, 4, 2),
        T::with_thread_tile(64, 64, 16, 8, 4, 3),
        T::with_thread_tile(32, 64, 32, 4, 8, 2),
        // Square 8×8 register tiles.
        T::with_thread_tile(128, 128, 8, 8, 8, 2),
        T::with_thread_tile(128, 64, 8, 8, 8, 1),
        T::with_thread_tile(64, 64, 16, 8, 8, 2),
        // A whole C_out = 96 in one block column (AlexNet conv1): no padded columns.
        // On the H100 the 4×12 tiles with one stage won (BENCHMARKS.md, runs 4–5): a small
        // workgroup footprint leaves L1 to the input gather, and 8 warps hide its latency.
        T::with_thread_tile(128, 96, 8, 4, 12, 1),
        T::with_thread_tile(128, 96, 8, 4, 12, 2),
        T::with_thread_tile(64, 96, 8, 4, 12, 1),
        T::with_thread_tile(64, 96, 16, 4, 12, 1),
        T::with_thread_tile(256, 96, 8, 4, 12, 1),
        T::with_thread_tile(128, 96, 8, 8, 12, 1),
        T::with_thread_tile(128, 96, 16, 8, 12, 2),
        T::with_thread_tile(64, 96, 8, 8, 12, 1),
    ]
}

/// Accumulator fragments (16×16 f32) one warp may own in the cooperative-matrix kernel:
/// 8 fragments are 64 f32 registers per lane.
pub const MAX_FRAGMENTS: u32 = 8;

/// The declared sweep of the cooperative-matrix kernel (`wgconv bench --precision f16`, and
/// `--precision f16x3`, where the configs with two stages or BK 32 mostly exceed the
/// workgroup memory of its doubled operand tiles).
pub fn coop_sweep() -> Vec<TileConfig> {
    use TileConfig as T;
    vec![
        T::with_thread_tile(128, 96, 32, 4, 12, 2),
        T::with_thread_tile(128, 96, 16, 4, 12, 2),
        T::with_thread_tile(128, 96, 32, 4, 12, 1),
        T::with_thread_tile(64, 96, 32, 4, 12, 2),
        T::with_thread_tile(64, 96, 16, 4, 12, 1),
        T::with_thread_tile(64, 96, 32, 4, 12, 1),
        T::with_thread_tile(128, 96, 16, 4, 12, 1),
        T::with_thread_tile(32, 96, 16, 4, 12, 1),
        T::with_thread_tile(256, 96, 16, 4, 12, 2),
        T::with_thread_tile(128, 64, 32, 4, 8, 2),
        T::with_thread_tile(128, 128, 32, 8, 8, 2),
        T::with_thread_tile(64, 64, 32, 4, 8, 2),
    ]
}

/// Accumulator fragments one warp may own in the row-band kernel: its operands come from
/// workgroup memory without a gather, so registers go to a larger warp tile (fewer operand
/// loads per multiply).
pub const MAX_BAND_FRAGMENTS: u32 = 12;

/// The declared sweep of the row-band cooperative-matrix kernel (`wgconv bench --precision f16`).
pub fn band_sweep() -> Vec<TileConfig> {
    use TileConfig as T;
    vec![
        T::with_thread_tile(128, 96, 16, 8, 12, 1), // 4 warps of 4×3 fragments
        T::with_thread_tile(128, 96, 16, 4, 12, 1), // 8 warps of 2×3
        T::with_thread_tile(64, 96, 16, 4, 12, 1),  // 4 warps of 2×3
        T::with_thread_tile(64, 96, 16, 4, 12, 2),
        T::with_thread_tile(64, 96, 16, 8, 12, 1), // 2 warps of 4×3
        T::with_thread_tile(64, 96, 16, 8, 12, 2),
        T::with_thread_tile(128, 48, 16, 8, 12, 1), // 2 warps of 4×3, half the channels
        T::with_thread_tile(64, 48, 16, 4, 12, 2),  // 2 warps of 2×3
        T::with_thread_tile(128, 96, 32, 8, 12, 1),
        T::with_thread_tile(64, 64, 16, 4, 8, 1),
    ]
}

/// Accumulator fragments one warp of the stem kernel may own (its registers also hold the
/// warp's weights).
pub const MAX_STEM_FRAGMENTS: u32 = 4;

/// How the stem kernel's warps share a workgroup's row of `block_m` output columns ×
/// `block_n` channels ([`TileConfig::stem_layout`]). Warps `0 .. warps_m·warps_n` multiply:
/// warp w owns M fragments (w mod warps_m)·fm .. and N fragment w / warps_m, whose weights
/// it holds in registers. The `helpers` after them stage input rows and store output rows,
/// so that while the multiplying warps work on row i, the helpers store row i − 1 and
/// stage row i + TY: one barrier per row, and the phases overlap instead of adding up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StemLayout {
    /// M (output-column) fragments per multiplying warp.
    pub fm: u32,
    pub warps_m: u32,
    /// N fragments: one per multiplying warp.
    pub warps_n: u32,
    /// Warps that stage and store.
    pub helpers: u32,
}

impl StemLayout {
    /// Multiplying warps.
    pub fn mma_warps(&self) -> u32 {
        self.warps_m * self.warps_n
    }
}

/// The declared sweep of the stem kernel (`wgconv bench --precision f16`), the default first.
pub fn stem_sweep() -> Vec<TileConfig> {
    use TileConfig as T;
    vec![
        default_stem_config(),
        T::new_stem(32, 96, 2, 4), // 6 multiplying warps and 4 helpers
        T::new_stem(32, 96, 2, 2), // 6 + 2: up to 255 registers a warp
        T::new_stem(16, 96, 1, 6), // 16-column rows, 6 + 6 warps
        T::new_stem(16, 96, 1, 2), // 16-column rows, 6 + 2 warps
    ]
}

/// The stem kernel's reference config: 32 output columns × 96 channels; 6 warps multiply
/// (2 M fragments of one N fragment each), 6 stage and store.
pub fn default_stem_config() -> TileConfig {
    TileConfig::new_stem(32, 96, 2, 6)
}

/// The row-band kernel's reference config (its fastest on the H100, BENCHMARKS.md run 31):
/// 8 warps of 2×3 fragments over 128 positions × 96 channels.
pub fn default_band_config() -> TileConfig {
    TileConfig::with_thread_tile(128, 96, 16, 4, 12, 1)
}

/// The cooperative-matrix config a fresh f16 or f16x3 `Conv2d` uses: 4 warps of 2×3
/// fragments, the fastest of both sweeps on the H100 (BENCHMARKS.md runs 50 and 67).
pub fn default_coop_config() -> TileConfig {
    TileConfig::with_thread_tile(64, 96, 16, 4, 12, 1)
}

/// The config a fresh `Conv2d` uses when the tuning cache has nothing for its key.
pub fn default_config() -> TileConfig {
    TileConfig::seed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_is_four_warps_four_by_four() {
        let s = TileConfig::seed();
        assert_eq!((s.block_m, s.block_n, s.block_k, s.warps, s.stages), (32, 64, 32, 4, 2));
        assert_eq!((s.thread_m, s.thread_n), (4, 4));
        s.check_shape().unwrap();
    }

    #[test]
    fn sweep_is_well_formed() {
        for c in default_sweep() {
            c.check_shape().unwrap_or_else(|e| panic!("{c}: {e}"));
            assert_eq!(TileConfig::parse(&c.name()).unwrap(), c);
        }
    }

    #[test]
    fn warps_rederive_register_tile() {
        let s = TileConfig::seed();
        assert_eq!(s.with_warps(2).unwrap().thread_m * s.with_warps(2).unwrap().thread_n, 32);
        assert!(s.with_warps(8).is_err(), "8 outputs per invocation cannot be a 4-multiple tile");
    }

    #[test]
    fn limits_refuse_with_reason() {
        let lim =
            KernelLimits { workgroup_storage_bytes: 16384, invocations_per_workgroup: 256, workgroup_size_x: 256 };
        let many = TileConfig::with_thread_tile(128, 128, 8, 4, 8, 2); // 16 warps = 512 invocations
        let e = many.validate(&lim).unwrap_err().to_string();
        assert!(e.contains("512 invocations exceed the device's 256"), "{e}");
        let big = TileConfig::with_thread_tile(128, 128, 32, 8, 8, 4); // 8 warps, 136 KiB
        let e = big.validate(&lim).unwrap_err().to_string();
        assert!(e.contains("B of workgroup memory exceed the device's 16384 B"), "{e}");
    }
}
