//! Which kernel a `Conv2d` runs, decided in one place: the caller's kernel, else the stem
//! rule, else the tuner's cached decision, else the precision's default family, else a
//! fallback, each named in [`Selection::reason`]. Every rule asks only the device's
//! capabilities ([`DeviceCaps`]), the spec and the precision; none does device work.

use crate::caps::DeviceCaps;
use crate::error::{Error, Result};
use crate::families::{coop, direct, stem, tiled};
use crate::gpu::Gpu;
use crate::kernel::{Family, Kernel, Precision};
use crate::options::{ConfigSource, Conv2dOptions, Selection};
use crate::spec::Conv2dSpec;

/// Input channels up to which an f16 convolution runs the stem kernel by default
/// (ungrouped convolutions only): image inputs (gray, RGB, RGBA), the first layer it was
/// built for and measured on. It runs deeper convolutions too when named.
pub const STEM_DEFAULT_MAX_CHANNELS: u32 = 4;

/// Decides the kernel for a convolution on a device: [`select`] with the tuning cache's
/// decision where the options name the input shape.
pub(crate) fn select_on(gpu: &Gpu, spec: &Conv2dSpec, options: &Conv2dOptions) -> Result<Selection> {
    select(gpu.caps(), spec, options, |default| cached(gpu, spec, options, default))
}

/// The tuning cache's decision for the spec at the input shape the options name, measured
/// on `default`'s family (a missing or unreadable cache is a miss).
#[cfg(feature = "tune")]
fn cached(gpu: &Gpu, spec: &Conv2dSpec, options: &Conv2dOptions, default: &Kernel) -> Option<Kernel> {
    let problem = spec.problem(options.tuning_key_input?).ok()?;
    crate::tune::cache::cached_decision(gpu, &problem, default)
}

/// Without the `tune` feature there is no tuning cache.
#[cfg(not(feature = "tune"))]
fn cached(_gpu: &Gpu, _spec: &Conv2dSpec, _options: &Conv2dOptions, _default: &Kernel) -> Option<Kernel> {
    None
}

/// Decides the kernel for a convolution; `cached` answers the tuning cache's decision for
/// a precision's default kernel (its family), where the input shape is known.
pub(crate) fn select(
    caps: &DeviceCaps,
    spec: &Conv2dSpec,
    options: &Conv2dOptions,
    cached: impl FnOnce(&Kernel) -> Option<Kernel>,
) -> Result<Selection> {
    if let Some(kernel) = &options.kernel {
        if kernel.precision() != options.precision {
            return Err(Error::Unsupported(format!(
                "kernel {kernel} computes in {}, but {} was asked for",
                kernel.precision(),
                options.precision
            )));
        }
        kernel.check(spec, caps)?;
        return Ok(Selection {
            kernel: kernel.clone(),
            source: ConfigSource::Explicit,
            reason: "named in Conv2dOptions::kernel".into(),
        });
    }
    if let Some(reason) = stem_rule(caps, spec, options.precision) {
        return Ok(Selection { kernel: stem::STEM.reference(), source: ConfigSource::Default, reason });
    }
    let (default, why) = default_kernel(caps, options.precision)?;
    if let Some(kernel) = cached(&default) {
        if kernel.family() == default.family() && kernel.check(spec, caps).is_ok() {
            return Ok(Selection {
                kernel,
                source: ConfigSource::TuningCache,
                reason: "the tuner's decision for this device, shape and precision".into(),
            });
        }
    }
    let refusal = match default.check(spec, caps) {
        Ok(()) => return Ok(Selection { kernel: default, source: ConfigSource::Default, reason: why.into() }),
        Err(e) => e.to_string(),
    };
    if let Some(kernel) = default.family_impl().sweep().into_iter().find(|k| k.check(spec, caps).is_ok()) {
        return Ok(Selection {
            kernel,
            source: ConfigSource::Fallback,
            reason: format!("the default was refused ({refusal}); the first of its family's sweep that fits"),
        });
    }
    match options.precision {
        Precision::F32 => Ok(Selection {
            kernel: direct::DIRECT.reference(),
            source: ConfigSource::Fallback,
            reason: format!("no tiled config fits the device ({refusal}); the direct kernel"),
        }),
        p => Err(Error::Unsupported(format!("no {p} kernel fits {}: {refusal}", caps.name))),
    }
}

/// The stem rule: f16 on an image input (no groups, at most
/// [`STEM_DEFAULT_MAX_CHANNELS`] channels) on NVIDIA's cooperative matrices runs the stem
/// kernel, where its reference config fits the device for every input size. NVIDIA only:
/// its two roles of warps reach the workgroup barrier from two loops (equally often), which
/// SPIR-V does not promise to support and NVIDIA's hardware barrier, which counts arrivals,
/// is known to run. Returns the reason, or `None` where the rule does not apply.
pub(crate) fn stem_rule(caps: &DeviceCaps, spec: &Conv2dSpec, precision: Precision) -> Option<String> {
    let applies = precision == Precision::F16Accum32
        && caps.coop_f16
        && caps.is_nvidia()
        && spec.groups == 1
        && spec.in_channels <= STEM_DEFAULT_MAX_CHANNELS;
    (applies && stem::STEM.reference().check(spec, caps).is_ok()).then(|| {
        format!(
            "f16 on an image input (≤ {STEM_DEFAULT_MAX_CHANNELS} channels, no groups) on NVIDIA's cooperative \
             matrices: the stem kernel"
        )
    })
}

/// The precision's default kernel on a device and why: f32 → the tiled family's reference
/// (the seed's config: portable, not the fastest); f16 → `coop-f16` where cooperative
/// matrices are enabled, else `tiled-f16` where the device has `SHADER_F16`, else a refusal
/// (never the f32 path under an f16 label); f16x3 → `coop-f16x3` where cooperative matrices
/// are enabled, else a refusal (it exists to use the matrix units: elsewhere the f32 kernel
/// is as accurate and faster).
pub(crate) fn default_kernel(caps: &DeviceCaps, precision: Precision) -> Result<(Kernel, &'static str)> {
    let candidates: &[(&'static dyn Family, &'static str)] = match precision {
        Precision::F32 => &[(&tiled::TILED, "f32: the tiled family's reference config (the seed's)")],
        Precision::F16Accum32 => &[
            (&coop::COOP_F16, "f16 on cooperative matrices: the gathering kernel's reference config"),
            (&tiled::TILED_F16, "f16 without cooperative matrices: the SIMT kernel with SHADER_F16"),
        ],
        Precision::F16x3 => &[(&coop::COOP_F16X3, "f16x3 on cooperative matrices: the reference config")],
    };
    let mut refusals = Vec::new();
    for (family, why) in candidates {
        match family.unavailable(caps) {
            None => return Ok((family.reference(), why)),
            Some(r) => refusals.push(format!("{}: {r}", family.name())),
        }
    }
    let what = match precision {
        Precision::F16x3 => {
            "f16x3 precision cannot run here: it runs on cooperative matrices only (use f32: it is as accurate)"
        }
        _ => "f16 precision cannot run here: it needs cooperative matrices or SHADER_F16",
    };
    Err(Error::Unsupported(format!("{what}: {}", refusals.join("; "))))
}
