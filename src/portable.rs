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
    check_workgroup_granules(&module).map_err(|e| err("workgroup memory")(&e))?;
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

/// Bytes every workgroup variable of a cooperative-matrix kernel must be a whole number of.
const WORKGROUP_GRANULE: u32 = 16;

/// A kernel with cooperative matrices must declare workgroup variables of whole 16-byte
/// granules. SPIR-V gives workgroup variables no layout, and NVIDIA's driver appears to place
/// them one after another at their types' own alignment: a variable of 4 or 8 bytes moves
/// every variable after it off the 16-byte alignment that the cooperative loads and stores
/// (and the vector accesses) of the kernels assume. With one such variable added, the
/// channels-last kernel wrote wrong results on an H200 (relative L2 about 1.3) and no error
/// came from naga, wgpu or the driver; with 16 bytes or any whole number of granules added
/// it was right (BENCHMARKS, "Workgroup memory: 16-byte granules and a budget per
/// multiprocessor").
fn check_workgroup_granules(module: &naga::Module) -> std::result::Result<(), String> {
    let cooperative = module.types.iter().any(|(_, t)| matches!(t.inner, naga::TypeInner::CooperativeMatrix { .. }));
    if !cooperative {
        return Ok(());
    }
    for (_, var) in module.global_variables.iter() {
        if var.space != naga::AddressSpace::WorkGroup {
            continue;
        }
        let size = module.types[var.ty].inner.size(module.to_ctx());
        if !size.is_multiple_of(WORKGROUP_GRANULE) {
            let name = var.name.as_deref().unwrap_or("(unnamed)");
            return Err(format!(
                "workgroup variable `{name}` is {size} bytes, not a multiple of {WORKGROUP_GRANULE}: \
                 it would move the variables after it off the alignment cooperative loads need"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_workgroup_granules;

    /// A cooperative kernel whose workgroup variables are `flag_type` and a tile.
    fn module(flag_type: &str) -> naga::Module {
        let src = format!(
            "enable f16;\nenable wgpu_cooperative_matrix;\n\
             var<workgroup> flag: {flag_type};\n\
             var<workgroup> tile: array<f16, 256>;\n\
             @group(0) @binding(0) var<storage, read_write> out: array<f32>;\n\
             @compute @workgroup_size(32)\n\
             fn main() {{\n\
                 let a = coopLoad<coop_mat16x16<f16, A>>(&tile[0], 16u);\n\
                 let b = coopLoad<coop_mat16x16<f16, B>>(&tile[0], 16u);\n\
                 let c = coopMultiplyAdd(a, b, coop_mat16x16<f32, C>());\n\
                 coopStore(c, &out[0], 16u);\n\
             }}\n"
        );
        naga::front::wgsl::parse_str(&src).unwrap_or_else(|e| panic!("{}", e.emit_to_string(&src)))
    }

    #[test]
    fn cooperative_kernels_keep_workgroup_variables_in_granules() {
        let err = check_workgroup_granules(&module("u32")).unwrap_err();
        assert!(err.contains("`flag` is 4 bytes"), "{err}");
        let err = check_workgroup_granules(&module("vec2<u32>")).unwrap_err();
        assert!(err.contains("`flag` is 8 bytes"), "{err}");
        assert!(check_workgroup_granules(&module("vec4<u32>")).is_ok());
        assert!(check_workgroup_granules(&module("array<vec2<u32>, 6>")).is_ok());
    }

    /// Kernels without cooperative matrices place their workgroup variables as they like.
    #[test]
    fn other_kernels_are_not_held_to_granules() {
        let src = "var<workgroup> flag: u32;
var<workgroup> tile: array<f32, 64>;
                   @compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) t: u32) {
                   flag = t;
tile[t] = f32(flag);
}
";
        let module = naga::front::wgsl::parse_str(src).unwrap();
        assert!(check_workgroup_granules(&module).is_ok());
    }
}
