//! `TileConfig`: the tile vocabulary of the gathering implicit-GEMM families (`tiled`,
//! `tiled-f16`, `coop-f16`, `coop-f16x3`) and of the tuner that varies it, and the SIMT
//! kernels' declared sweep.
//!
//! The tiled kernel computes a `block_m × block_n` block of the implicit GEMM
//! (rows: output positions n·OH·OW, columns: output channels of one group) per workgroup,
//! walking K = C_in/g·KH·KW in steps of `block_k`. Each invocation owns a
//! `thread_m × thread_n` register tile; `warps × 32` invocations cover the block, so
//! `block_m·block_n = warps·32·thread_m·thread_n`. `stages` is the number of K-step
//! buffers in workgroup memory; the next step's global loads are always issued into
//! registers before the current step's arithmetic (WGSL has no async copy, so stages ≥ 3
//! only add workgroup memory — measured, not assumed, by the tuner).

use crate::caps::KernelLimits;
use crate::error::{Error, Result};

/// Largest block side (and register-tile side) a config may name.
pub const MAX_BLOCK: u32 = 4096;

/// Invocations of one warp (NVIDIA) — the unit Triton's `num_warps` counts in.
pub const WARP: u32 = 32;
/// The warp counts the vocabulary allows (Triton's `num_warps`).
pub const WARP_CHOICES: [u32; 4] = [2, 4, 8, 16];
/// Stage counts the vocabulary allows; the seed's own configs use 1..=3 and its tuning stage 2..=4.
pub const STAGE_RANGE: std::ops::RangeInclusive<u32> = 1..=4;

/// The tile vocabulary of the tiled implicit-GEMM families (`tiled`, `tiled-f16`, `coop-f16`,
/// `coop-f16x3`), named like `m64n96k16-t4x12-w4-s1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "tune", derive(serde::Serialize, serde::Deserialize))]
pub struct TileConfig {
    /// Output positions (GEMM rows) per workgroup.
    pub block_m: u32,
    /// Output channels (GEMM columns) per workgroup.
    pub block_n: u32,
    /// K per step.
    pub block_k: u32,
    /// Register tile rows (output positions) per invocation; a multiple of 4 (vec4 reads).
    pub thread_m: u32,
    /// Register tile columns (output channels) per invocation; a multiple of 4.
    pub thread_n: u32,
    /// Warps (32 invocations each; Triton's `num_warps`).
    pub warps: u32,
    /// K-step buffers in workgroup memory (Triton's `num_stages`).
    pub stages: u32,
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
    /// The same config with another stage count.
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

    /// Invocations per workgroup: warps × 32.
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

    pub(crate) fn refuse(&self, reason: impl Into<String>) -> Error {
        Error::KernelRefused { kernel: self.to_string(), reason: reason.into() }
    }

    /// Sizes beyond any device, refused first so that the products below cannot overflow
    /// (configs also come from the command line and the tuning-cache file).
    pub(crate) fn check_bounds(&self) -> Result<()> {
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

    pub(crate) fn check_warps(&self) -> Result<()> {
        if !WARP_CHOICES.contains(&self.warps) {
            return Err(self.refuse(format!("warps must be one of {WARP_CHOICES:?}, got {}", self.warps)));
        }
        Ok(())
    }

    /// Block sides in whole 16×16 fragments, for the cooperative-matrix kernel named `kernel`.
    pub(crate) fn check_fragment_blocks(&self, kernel: &str) -> Result<()> {
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

    pub(crate) fn check_device(&self, limits: &KernelLimits, bytes: u64) -> Result<()> {
        let inv = self.invocations();
        if inv > limits.invocations_per_workgroup || inv > limits.workgroup_size_x {
            return Err(self.refuse(format!(
                "{inv} invocations exceed the device's {} per workgroup ({})",
                limits.invocations_per_workgroup.min(limits.workgroup_size_x),
                limits.invocations_limit_name()
            )));
        }
        if bytes > limits.workgroup_storage_bytes as u64 {
            return Err(self.refuse(format!(
                "{bytes} B of workgroup memory exceed the device's {} B (max_compute_workgroup_storage_size)",
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
        let bad = || Error::ConfigParse(format!("cannot parse tile config {s:?}: expected e.g. m32n64k32-t4x4-w4-s2"));
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
        // Few output channels per group (the f32 shape rule's narrow block).
        T::with_thread_tile(64, 32, 16, 4, 4, 1),
        // 128 output channels per block column on 8 warps of 4×8 register tiles (the f32
        // shape rule's block for 1×1 layers; K steps of 16 where K is short).
        T::with_thread_tile(64, 128, 8, 4, 8, 1),
        T::with_thread_tile(64, 128, 16, 4, 8, 1),
        // A whole C_out = 96 in one block column (AlexNet conv1): no padded columns.
        // On the H100 the 4×12 tiles with one stage won: a small
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
