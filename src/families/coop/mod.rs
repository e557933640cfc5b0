//! The tiled implicit GEMM on cooperative matrices (the GPU's matrix units through wgpu's
//! experimental cooperative-matrix feature): `coop-f16` (f16 operands, f32 accumulation)
//! and `coop-f16x3` (each operand split into two f16 halves, three products per step:
//! f32-accurate results). The tile vocabulary and the operand gather are the tiled
//! family's; here each warp owns 16×16 accumulator fragments instead of a register tile.

pub(crate) mod fragments;

use crate::alloc;
use crate::caps::{DeviceCaps, KernelLimits, COOP_NEEDS};
use crate::error::{Error, Result};
use crate::families::tiled::{
    border_taps, has_padding_mode, pack_weights, packed_weight_len, round_to_f16, tile_header, Gathered, TileConfig,
    GATHER_TABLE_BINDING, GATHER_WGSL,
};
use crate::kernel::{
    compose, Family, Kernel, KernelConfig, Packed, Precision, Shaped, Target, COOPERATIVE_TARGETS, GRID_BINDING,
};
use crate::spec::{Conv2dSpec, ConvProblem};
use fragments::{fragment_layout, fragment_modules, FragmentCode};

const COOP_WGSL: &str = include_str!("coop.wgsl");
const OPERANDS_F16_WGSL: &str = include_str!("operands_f16.wgsl");
const OPERANDS_F16X3_WGSL: &str = include_str!("operands_f16x3.wgsl");

/// Accumulator fragments (16×16 f32) one warp may own: 16 fragments are 128 f32 registers
/// per lane, half of what a lane can hold.
pub const MAX_FRAGMENTS: u32 = 16;

/// The cooperative-matrix gathering family.
#[derive(Debug)]
pub(crate) struct Coop {
    /// Operands split into two f16 halves (`coop-f16x3`).
    split: bool,
}

/// `coop-f16`.
pub(crate) static COOP_F16: Coop = Coop { split: false };
/// `coop-f16x3`.
pub(crate) static COOP_F16X3: Coop = Coop { split: true };

/// An f16 cooperative-matrix family whose kernels are one tile config each, over the
/// channels-last kernel (`coop-winograd-f16`, `coop-grouped-f16`): its name, its sweep (the
/// reference first) and how a tile becomes its kernel.
#[derive(Debug)]
pub(crate) struct TileFamily {
    pub name: &'static str,
    pub sweep: fn() -> Vec<TileConfig>,
    pub kernel: fn(TileConfig) -> Kernel,
}

impl Family for TileFamily {
    fn name(&self) -> &'static str {
        self.name
    }
    fn precision(&self) -> Precision {
        Precision::F16Accum32
    }
    fn unavailable(&self, caps: &DeviceCaps) -> Option<String> {
        coop_missing(caps)
    }
    fn parse(&'static self, config: &str) -> Result<Kernel> {
        Ok((self.kernel)(TileConfig::parse(config)?))
    }
    fn reference(&'static self) -> Kernel {
        (self.kernel)((self.sweep)()[0])
    }
    fn sweep(&'static self) -> Vec<Kernel> {
        (self.sweep)().into_iter().map(self.kernel).collect()
    }
    fn targets(&self) -> &'static [Target] {
        COOPERATIVE_TARGETS
    }
}

/// Why a device cannot run a cooperative-matrix kernel.
pub(crate) fn coop_missing(caps: &DeviceCaps) -> Option<String> {
    if caps.coop_f16 {
        return None;
    }
    Some(match caps.coop_f16_offered {
        Some(false) => format!("needs cooperative matrices {COOP_NEEDS}, which {} does not offer", caps.name),
        Some(true) => format!(
            "needs cooperative matrices {COOP_NEEDS}, which the device on {} was not created with although \
             the adapter offers them: GpuOptions::cooperative_matrix (or WGCONV_COOP=1) opts in; a device of \
             your own needs wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX in required_features",
            caps.name
        ),
        None => format!(
            "needs cooperative matrices {COOP_NEEDS}, which the device on {} was not created with: where \
             the adapter offers them, GpuOptions::cooperative_matrix (or WGCONV_COOP=1) opts in; a device \
             of your own needs wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX in required_features",
            caps.name
        ),
    })
}

impl Family for Coop {
    fn name(&self) -> &'static str {
        if self.split {
            "coop-f16x3"
        } else {
            "coop-f16"
        }
    }
    fn precision(&self) -> Precision {
        if self.split {
            Precision::F16x3
        } else {
            Precision::F16Accum32
        }
    }
    fn unavailable(&self, caps: &DeviceCaps) -> Option<String> {
        coop_missing(caps)
    }
    fn parse(&'static self, config: &str) -> Result<Kernel> {
        Ok(Kernel::new(CoopKernel { family: self, tile: TileConfig::parse(config)? }))
    }
    fn reference(&'static self) -> Kernel {
        Kernel::new(CoopKernel { family: self, tile: reference_tile() })
    }
    fn sweep(&'static self) -> Vec<Kernel> {
        coop_sweep().into_iter().map(|tile| Kernel::new(CoopKernel { family: self, tile })).collect()
    }
    fn targets(&self) -> &'static [Target] {
        COOPERATIVE_TARGETS
    }
    fn padding_modes(&self) -> bool {
        // It gathers A through the tiled kernel's gather.
        true
    }
}

/// The reference config: 4 warps of 2×3 fragments over 64 positions × 96 channels, the
/// fastest of both precisions' sweeps on AlexNet conv1 on the H100.
fn reference_tile() -> TileConfig {
    TileConfig::with_thread_tile(64, 96, 16, 4, 12, 1)
}

/// The declared sweep (with f16x3 the configs with two stages or BK 32 mostly exceed the
/// workgroup memory of its doubled operand tiles), the reference first.
pub fn coop_sweep() -> Vec<TileConfig> {
    use TileConfig as T;
    vec![
        reference_tile(),
        T::with_thread_tile(128, 96, 32, 4, 12, 2),
        T::with_thread_tile(128, 96, 16, 4, 12, 2),
        T::with_thread_tile(128, 96, 32, 4, 12, 1),
        T::with_thread_tile(64, 96, 32, 4, 12, 2),
        T::with_thread_tile(64, 96, 32, 4, 12, 1),
        T::with_thread_tile(128, 96, 16, 4, 12, 1),
        T::with_thread_tile(32, 96, 16, 4, 12, 1),
        T::with_thread_tile(256, 96, 16, 4, 12, 2),
        T::with_thread_tile(128, 64, 32, 4, 8, 2),
        T::with_thread_tile(128, 128, 32, 8, 8, 2),
        T::with_thread_tile(64, 64, 32, 4, 8, 2),
    ]
}

impl TileConfig {
    /// The warp layout of the cooperative-matrix kernels: `(warps_m, warps_n, fm, fn)`, the
    /// warps along M and N and the 16×16 accumulator fragments each warp owns along M and N.
    /// The register tile fields play no part there (a fragment's elements are spread over
    /// the warp's lanes by the driver); the most square per-warp tile is chosen.
    pub fn coop_layout(&self) -> Result<(u32, u32, u32, u32)> {
        self.check_common()?;
        self.check_fragment_blocks("cooperative-matrix")?;
        fragment_layout(self.block_m / 16, self.block_n / 16, self.warps, MAX_FRAGMENTS, &self.name())
    }

    /// Workgroup memory of the cooperative-matrix kernel: f16 A and B stages (rows padded by
    /// 8) once per operand half (`halves`: 1 for f16, 2 for the split f16x3 kernel), the row
    /// gather info, and one 16×16 f32 scratch fragment per warp.
    pub fn coop_workgroup_bytes(&self, halves: u64) -> u64 {
        let (bm, bn, bk) = (self.block_m as u64, self.block_n as u64, self.block_k as u64);
        halves * self.stages as u64 * bk * ((bm + 8) + (bn + 8)) * 2 + bm * 16 + self.warps as u64 * 1024
    }
}

/// A kernel of the cooperative gathering family.
#[derive(Debug)]
pub(crate) struct CoopKernel {
    family: &'static Coop,
    tile: TileConfig,
}

impl CoopKernel {
    fn halves(&self) -> u64 {
        if self.family.split {
            2
        } else {
            1
        }
    }

    /// The kernel's WGSL; `modes`: with the padding modes' border loads.
    fn source(&self, modes: bool) -> Result<String> {
        let (wm, wn, fm, fn_) = self.tile.coop_layout()?;
        let mut header = tile_header(&self.tile);
        header.push_str(&format!(
            "const WARPS_M: u32 = {wm}u;\nconst WARPS_N: u32 = {wn}u;\nconst FM: u32 = {fm}u;\nconst FN: u32 = {fn_}u;\n"
        ));
        let mut generated = fragment_modules(
            fm,
            fn_,
            &FragmentCode {
                a_load: &|i, tile| format!("coopLoad<coop_mat16x16<f16, A>>(&{tile}[a_at + {}u], A_STRIDE)", i * 16),
                b_load: &|j, tile| format!("coopLoadT<coop_mat16x16<f16, B>>(&{tile}[b_at + {}u], B_STRIDE)", j * 16),
                split: self.family.split,
                init_row: &|_| String::new(),
                store: &|i, j| {
                    format!(
                        "coopStore(acc_{i}_{j}, &c_scratch[scratch], FRAG);\nstore_fragment(blk, warp, lane, wm0 + {}u, wn0 + {}u);\n",
                        i * 16,
                        j * 16
                    )
                },
            },
        );
        generated.push(("config", header));
        generated.push(border_taps(modes));
        compose(
            "coop",
            &[
                ("coop", COOP_WGSL),
                ("gather", GATHER_WGSL),
                ("operands_f16", OPERANDS_F16_WGSL),
                ("operands_f16x3", OPERANDS_F16X3_WGSL),
            ],
            generated,
            self.family.precision(),
            true,
        )
    }
}

impl KernelConfig for CoopKernel {
    fn family(&self) -> &'static dyn Family {
        self.family
    }
    fn name(&self) -> String {
        self.tile.name()
    }
    fn check_shape(&self) -> Result<()> {
        self.tile.coop_layout().map(|_| ())
    }
    fn check_limits(&self, limits: &KernelLimits) -> Result<()> {
        self.tile.coop_layout()?;
        self.tile.check_device(limits, self.tile.coop_workgroup_bytes(self.halves()))
    }
    fn check_spec(&self, _spec: &Conv2dSpec, _limits: &KernelLimits) -> Result<()> {
        Ok(())
    }
    fn packed_bytes(&self, spec: &Conv2dSpec) -> u64 {
        packed_weight_len(spec, &self.tile).saturating_mul(2 * self.halves())
    }
    fn pack(&self, spec: &Conv2dSpec, weight: &[f32], _bias: &[f32]) -> Result<Packed> {
        if self.family.split {
            // An infinite weight's low halves meet 0 · inf: f16x3 would give NaN where f32
            // gives ±inf. Refused, as under f16, so that no kernel gives another answer.
            if let Some(v) = weight.iter().find(|v| v.is_infinite()) {
                return Err(Error::F16Range { what: "weight", detail: format!(", e.g. {v}") });
            }
        }
        let packed = pack_weights(spec, weight, &self.tile)?;
        if self.family.split {
            let (bytes, scale) = split_weights(&packed, false)?;
            Ok(Packed { weight: bytes, extra: Vec::new(), out_scale: 1.0 / scale, bias: None })
        } else {
            Ok(Packed::weights(f16_bytes(packed)?))
        }
    }
    fn extra_bindings(&self) -> &'static [u32] {
        &[GATHER_TABLE_BINDING, GRID_BINDING]
    }
    fn shape(&self, problem: &ConvProblem, _limits: &KernelLimits) -> Result<Box<dyn Shaped>> {
        Ok(Box::new(Gathered::new(problem, self.tile, self.source(has_padding_mode(problem)))))
    }
    fn representative_sources(&self) -> Result<Vec<String>> {
        Ok(vec![self.source(false)?, self.source(true)?])
    }
    fn invocations(&self) -> u32 {
        self.tile.invocations()
    }
    fn workgroup_bytes(&self) -> Option<u64> {
        Some(self.tile.coop_workgroup_bytes(self.halves()))
    }
    fn tile(&self) -> Option<TileConfig> {
        Some(self.tile)
    }
    fn with_tile(&self, tile: TileConfig) -> Option<Kernel> {
        Some(Kernel::new(CoopKernel { family: self.family, tile }))
    }
    fn operand_halves(&self) -> Option<u32> {
        Some(self.halves() as u32)
    }
}

/// Packed weights as f16 bytes, refusing values beyond f16's range.
pub(crate) fn f16_bytes(mut packed: Vec<f32>) -> Result<Vec<u8>> {
    round_to_f16(&mut packed, "weight")?;
    let mut bytes = alloc::vec_with_capacity::<u8>(packed.len() * 2, "the packed f16 weights")?;
    bytes.extend(packed.iter().flat_map(|&v| half::f16::from_f32(v).to_bits().to_le_bytes()));
    Ok(bytes)
}

/// Packed weights split for the f16x3 kernel, with the power of two `scale` they were
/// multiplied by first (the kernel's sums are multiplied by `1 / scale`). Per four weights
/// `w` (a `WeightVec` of operands_f16x3.wgsl): four `hi = f16(w·scale)`, then four
/// `lo = f16((w·scale - hi)·2048)`. The scale puts the largest finite magnitude in
/// [2^13, 2^14): far inside f16's range, and small weights stay out of its subnormals
/// (weights all below 2^-113 stay smaller: the scale stops at 2^126). A non-finite weight
/// keeps `hi` (±inf or NaN) and `lo = 0`; an infinite one makes NaN of the outputs it
/// touches, where f32 may give ±inf (its products with the inputs' low halves are 0·inf or
/// opposite infinities).
///
/// `signed`: for the F32 kernel on the matrix units, whose inputs may be infinite (finite
/// weights only): `hi` is rounded toward zero, so the remainder has the weight's sign, and a
/// half that would be zero for a non-zero weight becomes f16's smallest subnormal with the
/// weight's sign (an error of at most 2^-24 of a scaled unit, 2^-37 of the largest weight).
/// Every product of an infinite input with a non-zero weight's halves is then an infinity
/// of the sign f32's product has, and a zero weight gives NaN as 0·inf does in f32. It
/// costs one bit: the halves rebuild each weight within 2^-21 instead of 2^-22.
pub(crate) fn split_weights(packed: &[f32], signed: bool) -> Result<(Vec<u8>, f32)> {
    let max = packed.iter().filter(|v| v.is_finite()).fold(0.0f32, |m, v| m.max(v.abs()));
    // f64: f32's log2 rounds values just under a power of two up to it.
    let exp = if max > 0.0 { 13 - (max as f64).log2().floor() as i32 } else { 0 };
    let scale = 2f64.powi(exp.clamp(-126, 126));
    let halves = |v: f32| {
        let x = v as f64 * scale;
        if !v.is_finite() {
            return (half::f16::from_f64(x).to_bits(), 0);
        }
        let mut hi = half::f16::from_f64(x);
        if signed && hi.to_f64().abs() > x.abs() {
            // One step toward zero: f16 magnitudes order as their bits.
            hi = half::f16::from_bits(hi.to_bits() - 1);
        }
        let mut lo = half::f16::from_f64((x - hi.to_f64()) * 2048.0);
        if signed && x != 0.0 {
            let least = half::f16::from_bits(if x < 0.0 { 0x8001 } else { 0x0001 });
            if hi.to_f64() == 0.0 {
                hi = least;
            }
            if lo.to_f64() == 0.0 || (lo.to_f64() < 0.0) != (x < 0.0) {
                lo = least;
            }
        }
        (hi.to_bits(), lo.to_bits())
    };
    let mut bytes = alloc::vec_with_capacity::<u8>(packed.len() * 4, "the split f16x3 weights")?;
    for quad in packed.chunks(4) {
        let quad: Vec<(u16, u16)> = quad.iter().map(|&v| halves(v)).collect();
        bytes.extend(quad.iter().flat_map(|h| h.0.to_le_bytes()));
        bytes.extend(quad.iter().flat_map(|h| h.1.to_le_bytes()));
    }
    Ok((bytes, scale as f32))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The halves rebuild every weight within 2^-22 relative (two halves of 11 significant
    /// bits; 2^-21 with `signed`, whose high half is rounded toward zero) at any magnitude,
    /// the scale is a power of two putting the largest weight in [2^13, 2^14), and non-finite
    /// weights keep their high half with a zero low half. With `signed`, both halves of a
    /// non-zero weight are non-zero and of its sign.
    #[test]
    fn split_weights_rebuild_f32_weights() {
        let f16 = |bits: &[u8], i: usize| half::f16::from_bits(u16::from_le_bytes([bits[2 * i], bits[2 * i + 1]]));
        for signed in [false, true] {
            let bound = 2f64.powi(if signed { -21 } else { -22 });
            for magnitude in [1e-30f32, 1e-6, 0.05, 1.0, 3e4, 1e9] {
                let mut w: Vec<f32> = (0..24).map(|i| magnitude * ((i * 37 % 23) as f32 - 11.3) / 11.3).collect();
                w[5] = 0.0;
                let (bits, scale) = split_weights(&w, signed).unwrap();
                assert_eq!(bits.len(), w.len() * 4);
                assert_eq!(scale.log2().fract(), 0.0, "scale {scale} is not a power of two");
                let max = w.iter().fold(0.0f32, |m, v| m.max(v.abs())) * scale;
                assert!((8192.0..16384.0).contains(&max), "largest scaled weight {max}");
                for (i, &v) in w.iter().enumerate() {
                    let (quad, lane) = (i / 4, i % 4);
                    let hi = f16(&bits, quad * 8 + lane).to_f64();
                    let lo = f16(&bits, quad * 8 + 4 + lane).to_f64();
                    if v == 0.0 {
                        assert_eq!((hi, lo), (0.0, 0.0));
                        continue;
                    }
                    let rebuilt = (hi + lo / 2048.0) / scale as f64;
                    let rel = ((rebuilt - v as f64) / v as f64).abs();
                    assert!(
                        rel <= bound,
                        "weight {v} (×{magnitude:e}, signed {signed}): rebuilt {rebuilt}, rel {rel:e}"
                    );
                    if signed {
                        let sign = v.signum() as f64;
                        assert!(hi * sign > 0.0 && lo * sign > 0.0, "weight {v}: halves {hi}, {lo}");
                    }
                }
            }
        }
        let (bits, _) = split_weights(&[1.0, f32::INFINITY, f32::NAN, -2.0], false).unwrap();
        assert!(f16(&bits, 1).is_infinite() && f16(&bits, 5).to_f32() == 0.0);
        assert!(f16(&bits, 2).is_nan() && f16(&bits, 6).to_f32() == 0.0);
        // A weight far below the largest: its high half becomes the smallest subnormal of its
        // sign, its low half keeps the weight.
        let (bits, _) = split_weights(&[1.0, -1e-12, 0.0, 0.0], true).unwrap();
        assert_eq!(f16(&bits, 1).to_bits(), 0x8001);
        assert!(f16(&bits, 5).to_f32() < 0.0);
    }
}
