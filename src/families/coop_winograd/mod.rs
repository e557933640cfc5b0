//! Winograd's F(2×2, 3×3) on the matrix units (`coop-winograd-f16`): 3×3 convolutions of
//! stride 1, no dilation and no groups, with f16 operands and f32 sums, in three passes of
//! one compute pass. The input transform (`input.wgsl`, the staging pass) rewrites each 4×4
//! input patch `d` as `V = Bᵀ d B` in f16, laid out as the channels-last kernel's input
//! (`[n][TH][TW][16][C8]` vectors of 8 channels); the channels-last f16 kernel
//! (`crate::families::nhwc`, the config's tile) reads it in place as a 1×1 convolution of 16
//! groups — one GEMM per component against the transformed weights `U = G g Gᵀ` (packed in
//! f16 at `Conv2d::new`) — and writes f16 products `[n][TH][TW][16][K4]`; the output
//! transform (`output.wgsl`, the finishing pass) turns each tile's 16 products into its 2×2
//! outputs `Y = Aᵀ M A` in f32, adds the bias and the activation, and writes the caller's
//! tensor (NCHW or channels last, f32 or f16) itself.
//!
//! Against the channels-last kernel on the convolution itself: 16 multiply-adds per 2×2
//! outputs instead of 36 (2.25× fewer), for transformed inputs and products of 4× the
//! input's and the output's elements, each written once and read once between the passes.
//! Those bytes cost about what the multiply-adds save: on the H100 (f16 channels-last
//! tensors) it ran ResNet-50's 7×7 512-channel layer at N = 32 in 0.052 ms against the
//! channels-last kernel's 0.079 (whose grid fills the device poorly there) and VGG-16's
//! 28×28 512-channel one in 0.288 against 0.293, and lost on every other 3×3 layer of
//! ResNet-50, VGG-16 and AlexNet (up to 4× on 64-channel layers, where the transforms'
//! bytes dominate). So no selection rule picks it: it runs where named (or tuned). Products
//! in f32 instead of f16 were slower on every layer (0.078 ms on the 7×7 one).
//!
//! Accuracy: V, U and the products are rounded to f16 (each component of V adds or
//! subtracts four inputs; U's entries are halves and quarters of sums of up to nine
//! weights), the sums are f32, the output transform f32. On random inputs the relative L2
//! error is about 6e-4 against the f64 reference (the direct f16 kernels: about 3e-4),
//! inside the f16 precision's 1e-3.
//!
//! Range: an input beyond f16's range, a component of V that overflows it (inputs above
//! 16384 in magnitude may) and a product that overflows it are flagged, as the f16 kernels
//! flag operands (the run's output is then not specified); weights whose transform would
//! overflow f16 (above [`MAX_WEIGHT`] in magnitude) are refused at packing with
//! [`crate::Error::F16Range`]. NaN: a NaN input reaches every output of the tiles whose 4×4
//! patch holds it, up to 4×4 outputs around it, where a direct convolution makes 3×3 of
//! them NaN.

use crate::alloc;
use crate::caps::KernelLimits;
use crate::error::{Error, Result};
use crate::families::coop::TileFamily;
use crate::families::nhwc;
use crate::families::tiled::{pass_workgroup_refusal, sources_in_every_form, DerivedRun, TileConfig};
use crate::families::winograd::{self, minimal::F2X2_3X3};
use crate::kernel::{
    compose_operands, Family, Finishing, Kernel, KernelConfig, Operands, Packed, Shaped, Staging, TensorForm,
};
use crate::spec::{Conv2dSpec, ConvProblem, Shape4};

const INPUT_WGSL: &str = include_str!("input.wgsl");
const OUTPUT_WGSL: &str = include_str!("output.wgsl");

/// Invocations per workgroup of the transforms.
const TRANSFORM_WG: u32 = 256;
/// Components of a transformed tile (4×4): F(2×2, 3×3)'s.
const COMPONENTS: u32 = F2X2_3X3.components();
/// Channels per staged vector.
const VEC: u32 = 8;
/// Output channels per invocation of the output transform (and the products' padding).
const QUAD: u32 = 4;

/// `coop-winograd-f16`.
pub(crate) static COOP_WINOGRAD_F16: TileFamily = TileFamily {
    name: "coop-winograd-f16",
    sweep: coop_winograd_sweep,
    kernel: |tile| Kernel::new(CoopWinogradKernel { tile }),
};

/// The GEMM tiles the family's sweep tries: the channels-last f16 kernel's 128×128 blocks
/// (K steps of 64 on 8 warps, of 32 on 4), 128×64 and 64×64 blocks.
pub fn coop_winograd_sweep() -> Vec<TileConfig> {
    use TileConfig as T;
    vec![
        T::with_thread_tile(128, 128, 64, 8, 8, 1),
        T::with_thread_tile(128, 128, 32, 16, 8, 1),
        T::with_thread_tile(128, 64, 32, 8, 8, 2),
        T::with_thread_tile(64, 64, 64, 4, 8, 1),
        T::with_thread_tile(128, 128, 16, 8, 8, 1),
    ]
}

/// A kernel of the family: the GEMM's tile.
#[derive(Debug)]
pub(crate) struct CoopWinogradKernel {
    tile: TileConfig,
}

/// Input channels padded to whole vectors of 8 (the GEMM's channels per group).
fn channels(spec: &Conv2dSpec) -> u32 {
    spec.in_channels.saturating_add(VEC - 1) / VEC * VEC
}

/// Output channels padded to whole quads (the products' channels per component).
fn quads(spec: &Conv2dSpec) -> u32 {
    spec.out_channels.saturating_add(QUAD - 1) / QUAD * QUAD
}

/// The GEMM of a spec: a 1×1 convolution of 16 groups from 16·C8 to 16·K4 channels.
fn gemm_spec(spec: &Conv2dSpec) -> Conv2dSpec {
    let (c, k) = (COMPONENTS.saturating_mul(channels(spec)), COMPONENTS.saturating_mul(quads(spec)));
    Conv2dSpec::new(c, k, 1).groups(COMPONENTS)
}

/// The GEMM's problem: the transformed input as `[N, 16·C8, TH, TW]` (channels last).
fn gemm_problem(problem: &ConvProblem) -> Result<ConvProblem> {
    let [th, tw] = winograd::tiles(problem, &F2X2_3X3);
    let spec = gemm_spec(&problem.spec);
    spec.problem(Shape4::new(problem.input.n, spec.in_channels, th, tw))
}

/// The largest weight magnitude whose transform stays within f16's range: U's largest
/// entry is a quarter of a sum of nine weights.
pub(crate) const MAX_WEIGHT: f32 = 65504.0 / 2.25;

impl CoopWinogradKernel {
    /// The channels-last f16 kernel that runs the GEMM.
    fn gemm(&self) -> Result<Kernel> {
        nhwc::COOP_NHWC_F16.parse(&self.tile.name())
    }

    fn refuse(&self, reason: String) -> Error {
        Error::KernelRefused { kernel: format!("{}:{}", COOP_WINOGRAD_F16.name(), self.tile.name()), reason }
    }

    /// The transforms' WGSL for a problem and the caller's tensors in `form`.
    fn transform_source(&self, problem: &ConvProblem, form: TensorForm, output: bool) -> Result<String> {
        let s = &problem.spec;
        let config = format!(
            "{}const C8: u32 = {c8}u;\nconst K4Q: u32 = {k4q}u;\nconst PT: u32 = {pt}u;\nconst PL: u32 = {pl}u;\n",
            winograd::transform_geometry(problem, TRANSFORM_WG, F2X2_3X3.out),
            c8 = channels(s) / VEC,
            k4q = quads(s) / QUAD,
            pt = s.padding.top,
            pl = s.padding.left,
        );
        let layout = nhwc::layout_config(form.channels_last);
        let generated = vec![("wino_config", config), layout];
        // The range flag: the f16 operands' checks, and a product that overflowed f16.
        let (entry, wgsl) = match output {
            false => ("input", INPUT_WGSL),
            true => ("output", OUTPUT_WGSL),
        };
        compose_operands(entry, &[(entry, wgsl)], generated, Operands::F16, false, nhwc::tensor_defines(form))
    }

    /// The three passes for the caller's tensors in `form`.
    fn shaped(&self, problem: &ConvProblem, limits: &KernelLimits, form: TensorForm) -> Result<Box<dyn Shaped>> {
        self.check_spec(&problem.spec, limits)?;
        let gemm_problem = gemm_problem(problem)?;
        // The input transform writes the f16 channels-last layout the kernel reads in place.
        let staged = TensorForm { channels_last: true, f16: true };
        let gemm = nhwc::f16_gemm(self.tile, &gemm_problem, staged, true)?;
        if gemm.staging().is_some() {
            return Err(Error::unsupported(format!(
                "the GEMM of {}:{} would stage its input: the transformed input has padded channels",
                COOP_WINOGRAD_F16.name(),
                self.tile.name()
            )));
        }
        let [th, tw] = winograd::tiles(problem, &F2X2_3X3);
        let tiles = th as u64 * tw as u64;
        let (c8, k4) = (channels(&problem.spec) as u64 / VEC as u64, quads(&problem.spec) as u64);
        Ok(Box::new(DerivedRun {
            gemm,
            params: Box::new(move |p| winograd::gemm_params(&gemm_problem, p)),
            staging: Some(Staging {
                source: self.transform_source(problem, form, false)?,
                bytes_per_image: COMPONENTS as u64 * c8 * VEC as u64 * 2 * tiles,
                invocations_per_image: c8 * tiles,
                workgroup_size: TRANSFORM_WG,
                scaled_input: false,
            }),
            finishing: Some(Finishing {
                source: self.transform_source(problem, form, true)?,
                bytes_per_image: 2 * COMPONENTS as u64 * k4 * tiles,
                invocations_per_image: k4 / QUAD as u64 * tiles,
                workgroup_size: TRANSFORM_WG,
                direct_fallback: false,
            }),
        }))
    }
}

impl KernelConfig for CoopWinogradKernel {
    fn family(&self) -> &'static dyn Family {
        &COOP_WINOGRAD_F16
    }
    fn name(&self) -> String {
        self.tile.name()
    }
    fn check_shape(&self) -> Result<()> {
        self.gemm()?.config().check_shape()
    }
    fn check_limits(&self, limits: &KernelLimits) -> Result<()> {
        self.gemm()?.config().check_limits(limits)?;
        match pass_workgroup_refusal(limits, TRANSFORM_WG, "the transforms'") {
            Some(reason) => Err(self.refuse(reason)),
            None => Ok(()),
        }
    }
    fn check_spec(&self, spec: &Conv2dSpec, limits: &KernelLimits) -> Result<()> {
        if let Some(reason) = winograd::shape_refusal(spec) {
            return Err(self.refuse(reason));
        }
        self.gemm()?.config().check_spec(&gemm_spec(spec), limits)
    }
    fn packed_bytes(&self, spec: &Conv2dSpec) -> u64 {
        self.gemm().map_or(u64::MAX, |g| g.config().packed_bytes(&gemm_spec(spec)))
    }
    fn pack(&self, spec: &Conv2dSpec, weight: &[f32], bias: &[f32]) -> Result<Packed> {
        if let Some(v) = weight.iter().find(|v| v.abs() > MAX_WEIGHT) {
            return Err(Error::F16Range {
                what: "the weights' Winograd transform",
                detail: format!(
                    ", from a weight of {v}: coop-winograd-f16 takes weights up to {MAX_WEIGHT} in magnitude"
                ),
            });
        }
        let gemm = gemm_spec(spec);
        let u = winograd::transform_weights_padded(spec, weight, quads(spec), channels(spec), &F2X2_3X3)?;
        let zeros = alloc::zeroed_vec::<f32>(gemm.out_channels as usize, "the GEMM's zero bias")?;
        let mut packed = self.gemm()?.config().pack(&gemm, &u, &zeros)?;
        // The GEMM adds the first 16·K4 (zeros); the output transform reads the K4 after.
        let mut b = zeros;
        b.extend_from_slice(bias);
        b.resize(gemm.out_channels as usize + quads(spec) as usize, 0.0);
        packed.bias = Some(alloc::bytes_of(&b, "the bias")?);
        Ok(packed)
    }
    fn extra_bindings(&self) -> &'static [u32] {
        nhwc::COOP_NHWC_F16.reference().config().extra_bindings()
    }
    fn shape(&self, problem: &ConvProblem, limits: &KernelLimits) -> Result<Box<dyn Shaped>> {
        self.shaped(problem, limits, TensorForm::NCHW_F32)
    }
    fn shape_native(
        &self,
        problem: &ConvProblem,
        limits: &KernelLimits,
        form: TensorForm,
    ) -> Option<Result<Box<dyn Shaped>>> {
        // Every form: the transforms read and write either layout and element type.
        Some(self.shaped(problem, limits, form))
    }
    fn representative_sources(&self) -> Result<Vec<String>> {
        let spec = Conv2dSpec::new(20, 24, 3).padding(crate::spec::Padding::uniform(1));
        let limits = KernelLimits::with_workgroup_bytes(49152);
        let problem = spec.problem(Shape4::new(2, 20, 7, 8))?;
        sources_in_every_form(|form| self.shaped(&problem, &limits, form))
    }
    fn invocations(&self) -> u32 {
        self.tile.invocations()
    }
    fn workgroup_bytes(&self) -> Option<u64> {
        self.gemm().ok().and_then(|g| g.config().workgroup_bytes())
    }
    fn tile(&self) -> Option<TileConfig> {
        Some(self.tile)
    }
    fn with_tile(&self, tile: TileConfig) -> Option<Kernel> {
        Some(Kernel::new(CoopWinogradKernel { tile }))
    }
    fn operand_halves(&self) -> Option<u32> {
        Some(1)
    }
}

/// The CPU twin of the three passes on an NCHW problem: the f32 family's, with V, U and the
/// products rounded to f16.
#[cfg(test)]
fn coop_winograd_twin(problem: &ConvProblem, input: &[f32], weight: &[f32], bias: Option<&[f32]>) -> Vec<f32> {
    let f16 = |v: f32| half::f16::from_f32(v).to_f32();
    winograd::winograd_twin_rounded(problem, &F2X2_3X3, input, weight, bias, f16, f16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Padding;

    /// The twin against the f64 reference (`check_twin_within`'s data): within the f16
    /// precision's 1e-3 (odd and even sizes, asymmetric and no padding, channels not whole
    /// vectors or quads).
    #[test]
    fn twin_within_f16_accuracy() {
        let cases = [
            (Conv2dSpec::new(64, 24, 3).padding(Padding::uniform(1)).with_bias(true), [2, 9, 11]),
            (Conv2dSpec::new(5, 7, 3), [1, 8, 7]),
            (Conv2dSpec::new(19, 6, 3).padding(Padding::new(2, 0, 1, 3)).with_bias(true), [2, 6, 5]),
        ];
        for (spec, [n, h, w]) in cases {
            let problem = spec.problem(Shape4::new(n, spec.in_channels, h, w)).unwrap();
            let twin = |x: &[f32], w: &[f32], b: Option<&[f32]>| coop_winograd_twin(&problem, x, w, b);
            crate::reference::check_twin_within(&format!("{spec:?}"), &problem, 1e-3, twin);
        }
    }

    #[test]
    fn refusals_name_the_limit() {
        let k = COOP_WINOGRAD_F16.reference();
        let limits = KernelLimits::with_workgroup_bytes(49152);
        // The shapes F(2×2, 3×3) refuses (`winograd::shape_refusal`, tested there).
        let e = k.config().check_spec(&Conv2dSpec::new(4, 4, 3).stride((2, 2)), &limits).unwrap_err().to_string();
        assert!(e.contains("stride 2x2") && e.contains("F(2×2, 3×3)") && e.contains("coop-winograd-f16"), "{e}");
        assert!(k.config().check_spec(&Conv2dSpec::new(4, 4, 3), &limits).is_ok());
        let spec = Conv2dSpec::new(1, 1, 3);
        let mut w = vec![1.0f32; 9];
        w[4] = 40000.0;
        let e = k.config().pack(&spec, &w, &[0.0]).err().unwrap().to_string();
        assert!(e.contains("Winograd transform") && e.contains("40000"), "{e}");
    }
}
