//! Shader composition and the pipeline cache.
//!
//! Every kernel is one WGSL source under `shaders/` plus `shaders/params.wgsl`; the tiled
//! family is specialised by a header of `const`s written from a [`TileConfig`] (WGSL
//! `override`s cannot size the function-scope register arrays the kernel needs).

use crate::config::TileConfig;
use crate::error::{Error, Result};
use bytemuck::{Pod, Zeroable};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

const PARAMS_WGSL: &str = include_str!("../shaders/params.wgsl");
const TILED_WGSL: &str = include_str!("../shaders/conv_tiled.wgsl");
const DIRECT_WGSL: &str = include_str!("../shaders/conv_direct.wgsl");

/// Which kernel runs a convolution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum KernelKind {
    /// The tiled implicit GEMM with this config.
    Tiled(TileConfig),
    /// One output per invocation: the oracle and the fallback.
    Direct,
}

impl std::fmt::Display for KernelKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KernelKind::Tiled(c) => write!(f, "tiled {c}"),
            KernelKind::Direct => f.write_str("direct"),
        }
    }
}

/// Workgroup size of the direct kernel (`DIRECT_WG` in its source).
pub(crate) const DIRECT_WORKGROUP: u32 = 64;

/// The WGSL of a kernel, ready for naga or wgpu.
pub fn source(kind: &KernelKind) -> String {
    match kind {
        KernelKind::Tiled(c) => format!(
            "// generated from TileConfig {name}\n\
             const BM: u32 = {bm}u;\nconst BN: u32 = {bn}u;\nconst BK: u32 = {bk}u;\n\
             const TM: u32 = {tm}u;\nconst TN: u32 = {tn}u;\nconst WG: u32 = {wg}u;\n\
             const STAGES: u32 = {st}u;\n{PARAMS_WGSL}\n{TILED_WGSL}",
            name = c.name(),
            bm = c.block_m,
            bn = c.block_n,
            bk = c.block_k,
            tm = c.thread_m,
            tn = c.thread_n,
            wg = c.invocations(),
            st = c.stages,
        ),
        KernelKind::Direct => format!("{PARAMS_WGSL}\n{DIRECT_WGSL}"),
    }
}

/// A hash of every shader source: part of the tuning cache's key, so a cached decision
/// goes stale when a kernel changes.
pub fn shader_hash() -> String {
    let mut h = Sha256::new();
    for s in [PARAMS_WGSL, TILED_WGSL, DIRECT_WGSL] {
        h.update(s.as_bytes());
    }
    h.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// Parses and validates a kernel with naga and translates it to SPIR-V, MSL, HLSL and
/// GLSL (compute): the proof that a variant is portable, without any device.
pub fn check_portable(kind: &KernelKind) -> Result<()> {
    use naga::back;
    let err =
        |stage: &'static str| move |e: &dyn std::fmt::Display| Error::Wgpu { stage, message: format!("{kind}: {e}") };
    let src = source(kind);
    let module = naga::front::wgsl::parse_str(&src).map_err(|e| err("naga parse")(&e.emit_to_string(&src)))?;
    let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::all())
        .validate(&module)
        .map_err(|e| err("naga validate")(&e.emit_to_string(&src)))?;
    back::spv::write_vec(&module, &info, &back::spv::Options::default(), None).map_err(|e| err("SPIR-V")(&e))?;
    back::msl::write_string(&module, &info, &back::msl::Options::default(), &back::msl::PipelineOptions::default())
        .map_err(|e| err("MSL")(&e))?;
    let mut hlsl = String::new();
    let hlsl_opts = back::hlsl::Options::default();
    let hlsl_pipe = back::hlsl::PipelineOptions::default();
    back::hlsl::Writer::new(&mut hlsl, &hlsl_opts, &hlsl_pipe)
        .write(&module, &info, None)
        .map_err(|e| err("HLSL")(&e))?;
    let glsl_opts = back::glsl::Options { version: back::glsl::Version::Desktop(430), ..Default::default() };
    let glsl_pipe = back::glsl::PipelineOptions {
        shader_stage: naga::ShaderStage::Compute,
        entry_point: "main".into(),
        multiview: None,
    };
    let mut glsl = String::new();
    back::glsl::Writer::new(&mut glsl, &module, &info, &glsl_opts, &glsl_pipe, Default::default())
        .and_then(|mut w| w.write().map(|_| ()))
        .map_err(|e| err("GLSL")(&e))?;
    Ok(())
}

/// The per-dispatch parameters, in the field order of `shaders/params.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, Pod, Zeroable)]
pub(crate) struct ConvParams {
    pub c_in: u32,
    pub h: u32,
    pub w: u32,
    pub c_out: u32,
    pub oh: u32,
    pub ow: u32,
    pub batch: u32,
    pub m_total: u32,
    pub kh: u32,
    pub kw: u32,
    pub stride_h: u32,
    pub stride_w: u32,
    pub pad_top: u32,
    pub pad_left: u32,
    pub dil_h: u32,
    pub dil_w: u32,
    pub c_in_per_group: u32,
    pub c_out_per_group: u32,
    pub groups: u32,
    pub k_total: u32,
    pub k_tiles: u32,
    pub n_pad: u32,
    pub m_tiles: u32,
    pub n_tiles: u32,
    pub total_tiles: u32,
    pub in_offset: u32,
    pub out_offset: u32,
    pub flags: u32,
}

pub(crate) const FLAG_RELU: u32 = 1;

/// A compiled kernel: its pipeline and the bind group layout every conv kernel shares.
pub(crate) struct Kernel {
    pub pipeline: wgpu::ComputePipeline,
    pub layout: wgpu::BindGroupLayout,
}

/// Pipelines by kernel, built once per device.
#[derive(Default)]
pub(crate) struct PipelineCache {
    map: Mutex<HashMap<KernelKind, Arc<Kernel>>>,
}

impl PipelineCache {
    pub fn get_or_build(&self, device: &wgpu::Device, kind: KernelKind, runtime_checks: bool) -> Result<Arc<Kernel>> {
        if let Some(k) = self.map.lock().unwrap_or_else(|e| e.into_inner()).get(&kind) {
            return Ok(k.clone());
        }
        let kernel = Arc::new(build(device, &kind, runtime_checks)?);
        self.map.lock().unwrap_or_else(|e| e.into_inner()).insert(kind, kernel.clone());
        Ok(kernel)
    }
}

fn layout_entry(binding: u32, ty: wgpu::BufferBindingType) -> wgpu::BindGroupLayoutEntry {
    wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer { ty, has_dynamic_offset: false, min_binding_size: None },
        count: None,
    }
}

fn build(device: &wgpu::Device, kind: &KernelKind, runtime_checks: bool) -> Result<Kernel> {
    let src = source(kind);
    let ro = wgpu::BufferBindingType::Storage { read_only: true };
    let scope = crate::gpu::ErrorScope::push(device);
    let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some("wgconv conv"),
        entries: &[
            layout_entry(0, wgpu::BufferBindingType::Uniform),
            layout_entry(1, ro),
            layout_entry(2, ro),
            layout_entry(3, ro),
            layout_entry(4, ro),
            layout_entry(5, wgpu::BufferBindingType::Storage { read_only: false }),
        ],
    });
    let desc = wgpu::ShaderModuleDescriptor {
        label: Some("wgconv conv kernel"),
        source: wgpu::ShaderSource::Wgsl(src.into()),
    };
    let module = if runtime_checks {
        device.create_shader_module(desc)
    } else {
        // SAFETY: wgpu's runtime checks guard out-of-bounds indexing. Every global access
        // of our kernels is guarded by its own range test (A by the padding test, B and the
        // gather table by host-side zero padding to whole tiles, outputs by m/n tests), and
        // workgroup arrays are indexed by compile-time-bounded loops; the GPU-vs-CPU test
        // suite runs with the checks off. Measured gain on the H100: see BENCHMARKS.md.
        unsafe { device.create_shader_module_trusted(desc, wgpu::ShaderRuntimeChecks::unchecked()) }
    };
    let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some("wgconv conv"),
        bind_group_layouts: &[Some(&layout)],
        immediate_size: 0,
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("wgconv conv"),
        layout: Some(&pipeline_layout),
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    scope.finish("pipeline creation")?;
    Ok(Kernel { pipeline, layout })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_match_wgsl_struct() {
        // 28 u32 fields, in the order of shaders/params.wgsl.
        assert_eq!(std::mem::size_of::<ConvParams>(), 28 * 4);
        let fields = PARAMS_WGSL.split("struct Params {").nth(1).unwrap().split('}').next().unwrap();
        assert_eq!(fields.matches(": u32").count(), 28);
    }
}
