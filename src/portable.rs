//! The naga check: a kernel's WGSL parses, validates and translates to each language its
//! family targets — the proof that a variant is portable, without any device.

use crate::error::{Error, Result};
use crate::kernel::{Kernel, Target};

/// Parses and validates every representative source of a kernel with naga and translates
/// it to the languages its family targets (SPIR-V, MSL, HLSL, GLSL compute).
pub fn check_portable(kernel: &Kernel) -> Result<()> {
    kernel.check_shape()?;
    let targets = kernel.family_impl().targets();
    for src in kernel.config().representative_sources()? {
        // A source that enables f16 runs only on devices with SHADER_F16, which naga's GLSL
        // backend (and wgpu's GL backend) cannot express: the f32 families' variants for
        // f16 tensors.
        let targets: Vec<Target> = match src.starts_with("enable f16;") {
            true => targets.iter().copied().filter(|&t| t != Target::Glsl).collect(),
            false => targets.to_vec(),
        };
        check_source(kernel, &src, &targets)?;
    }
    Ok(())
}

/// Parses, validates and translates one composed source.
fn check_source(kernel: &Kernel, src: &str, targets: &[Target]) -> Result<()> {
    use naga::back;
    let err =
        |stage: &'static str| move |e: &dyn std::fmt::Display| Error::Wgpu { stage, message: format!("{kernel}: {e}") };
    let module = naga::front::wgsl::parse_str(src).map_err(|e| err("naga parse")(&e.emit_to_string(src)))?;
    let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::all())
        .validate(&module)
        .map_err(|e| err("naga validate")(&e.emit_to_string(src)))?;
    for target in targets {
        match target {
            Target::SpirV => {
                back::spv::write_vec(&module, &info, &back::spv::Options::default(), None)
                    .map_err(|e| err("SPIR-V")(&e))?;
            }
            Target::Msl => {
                back::msl::write_string(&module, &info, &back::msl::Options::default(), &Default::default())
                    .map_err(|e| err("MSL")(&e))?;
            }
            Target::Hlsl => {
                let mut hlsl = String::new();
                // Shader model 6.2 is the first with 16-bit types.
                let opts = back::hlsl::Options { shader_model: back::hlsl::ShaderModel::V6_2, ..Default::default() };
                let pipe = back::hlsl::PipelineOptions::default();
                back::hlsl::Writer::new(&mut hlsl, &opts, &pipe)
                    .write(&module, &info, None)
                    .map_err(|e| err("HLSL")(&e))?;
            }
            Target::Glsl => {
                let opts = back::glsl::Options { version: back::glsl::Version::Desktop(430), ..Default::default() };
                let pipe = back::glsl::PipelineOptions {
                    shader_stage: naga::ShaderStage::Compute,
                    entry_point: "main".into(),
                    multiview: None,
                };
                let mut glsl = String::new();
                back::glsl::Writer::new(&mut glsl, &module, &info, &opts, &pipe, Default::default())
                    .and_then(|mut w| w.write().map(|_| ()))
                    .map_err(|e| err("GLSL")(&e))?;
            }
        }
    }
    Ok(())
}
