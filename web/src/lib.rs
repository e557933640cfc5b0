//! wgconv in the browser: a small JavaScript API over wgconv's asynchronous API on the
//! browser's WebGPU, built with wasm-bindgen (`bash scripts/web.sh` builds it into
//! `examples/web/pkg/` and serves the example page).
//!
//! ```js
//! import init, { Device, Conv, reference } from "./pkg/wgconv_web.js";
//! await init();
//! const device = await Device.open("adapter");           // or "default": WebGPU's default limits
//! const conv = new Conv(device, { inChannels: 3, outChannels: 8, kernel: 3, padding: 1, bias: true, relu: true },
//!                       weight, bias);                     // Float32Arrays
//! const y = await conv.forward(x, [1, 3, 64, 64]);        // Float32Array, NCHW
//! console.log(conv.kernel, conv.reason);                   // the kernel selection chose, and why
//! ```
//!
//! The surface of wgconv used here is kept small on purpose: `Gpu::new_async`,
//! `GpuOptions::limits`, `Gpu::caps`, `Conv2dSpec` and its builders, `Conv2d::new`,
//! `Conv2d::forward_async`, `Conv2d::plan`, `Gpu::read_buffer_async`, `Kernel::check`,
//! `advanced::sweep` and `reference::conv2d`.

use std::rc::Rc;
use std::sync::Arc;
use wasm_bindgen::prelude::*;
use wgconv::wgpu;
use wgconv::{Conv2d, Gpu, GpuOptions, Kernel, Shape4};

mod spec;
pub use spec::SpecArgs;

/// A wgconv error as a JavaScript `Error` (its message names the cause, e.g. the limit a
/// kernel config exceeds).
fn js(e: impl std::fmt::Display) -> JsError {
    JsError::new(&e.to_string())
}

/// A WebGPU device wgconv runs on.
#[wasm_bindgen]
pub struct Device {
    gpu: Arc<Gpu>,
    limits_asked: String,
}

#[wasm_bindgen]
impl Device {
    /// Opens the browser's WebGPU adapter. `limits`: `"adapter"` (default) asks for
    /// everything the adapter grants (often 32 KiB of workgroup memory and 1024 invocations
    /// where WebGPU's defaults are 16 KiB and 256); `"default"` asks for WebGPU's default
    /// limits, what every WebGPU device has. Rejects with a message where the browser has
    /// no WebGPU or no adapter.
    // Fields assigned one by one: options wgconv adds later keep their defaults. The Arc is
    // what `Conv2d::new` takes (natively it crosses threads; here there is one).
    #[allow(clippy::field_reassign_with_default, clippy::arc_with_non_send_sync)]
    pub async fn open(limits: Option<String>) -> Result<Device, JsError> {
        let asked = limits.unwrap_or_else(|| "adapter".into());
        let limits = match asked.as_str() {
            "adapter" => None,
            // wgpu's defaults are WebGPU's: 16 KiB workgroup storage, 256 invocations,
            // 128 MiB storage bindings, 8 storage buffers per stage, 65,535 workgroups.
            "default" => Some(wgpu::Limits::default()),
            other => return Err(JsError::new(&format!("limits must be \"adapter\" or \"default\", not {other:?}"))),
        };
        let mut opts = GpuOptions::default();
        opts.backends = Some(wgpu::Backends::BROWSER_WEBGPU);
        opts.limits = limits;
        let gpu = Gpu::new_async(opts).await.map_err(js)?;
        Ok(Device { gpu: Arc::new(gpu), limits_asked: asked })
    }

    /// The adapter, its features and the limits the kernels are checked against, as JSON.
    pub fn info(&self) -> String {
        let caps = self.gpu.caps();
        let l = &caps.limits;
        let has = |f: wgpu::Features| caps.features.contains(f);
        serde_json::json!({
            "name": caps.name,
            "backend": format!("{:?}", caps.backend),
            "deviceType": format!("{:?}", caps.device_type),
            "driver": caps.driver,
            "limitsAsked": self.limits_asked,
            "features": {
                "shader-f16": has(wgpu::Features::SHADER_F16),
                "subgroups": has(wgpu::Features::SUBGROUP),
                "timestamp-query": has(wgpu::Features::TIMESTAMP_QUERY),
                "cooperative-matrix": caps.coop_f16,
            },
            "limits": {
                "maxComputeWorkgroupStorageSize": l.max_compute_workgroup_storage_size,
                "maxComputeInvocationsPerWorkgroup": l.max_compute_invocations_per_workgroup,
                "maxComputeWorkgroupSizeX": l.max_compute_workgroup_size_x,
                "maxStorageBuffersPerShaderStage": l.max_storage_buffers_per_shader_stage,
                "maxStorageBufferBindingSize": l.max_storage_buffer_binding_size,
                "maxBufferSize": l.max_buffer_size,
                "maxComputeWorkgroupsPerDimension": l.max_compute_workgroups_per_dimension,
            },
        })
        .to_string()
    }

    /// Why a kernel (e.g. `"tiled:m128n128k8-t8x8-w2-s2"`) cannot run a convolution on this
    /// device, or `undefined` where it can. Every refusal names the limit.
    #[wasm_bindgen(js_name = checkKernel)]
    pub fn check_kernel(&self, kernel: &str, spec: JsValue) -> Result<Option<String>, JsError> {
        let kernel: Kernel = kernel.parse().map_err(js)?;
        let spec = SpecArgs::from_js(&spec)?.spec;
        Ok(kernel.check(&spec, self.gpu.caps()).err().map(|e| e.to_string()))
    }

    /// The tiled family's sweep (the tile sizes the benchmark compares) for a convolution:
    /// JSON `[{kernel, fits, reason}]`, where `reason` says why a config is refused.
    #[wasm_bindgen(js_name = tileSweep)]
    pub fn tile_sweep(&self, spec: JsValue) -> Result<String, JsError> {
        let spec = SpecArgs::from_js(&spec)?.spec;
        let rows: Vec<_> = wgconv::advanced::sweep("tiled")
            .map_err(js)?
            .into_iter()
            .map(|k| {
                let refusal = k.check(&spec, self.gpu.caps()).err().map(|e| e.to_string());
                serde_json::json!({ "kernel": k.to_string(), "fits": refusal.is_none(), "reason": refusal })
            })
            .collect();
        Ok(serde_json::Value::Array(rows).to_string())
    }
}

/// A 2-D convolution on a [`Device`], its weights uploaded once.
#[wasm_bindgen]
pub struct Conv {
    // Rc: the futures `forward` returns own a handle, so that JavaScript may drop its
    // `Conv` while a forward is still in flight.
    conv: Rc<Conv2d>,
}

#[wasm_bindgen]
impl Conv {
    /// `spec`: `{inChannels, outChannels, kernel, stride, padding, dilation, groups, bias,
    /// relu, kernelName, precision}` (see `SpecArgs`); `weight`: `[C_out, C_in/groups, KH,
    /// KW]`; `bias`: `[C_out]` where `spec.bias`.
    #[wasm_bindgen(constructor)]
    pub fn new(device: &Device, spec: JsValue, weight: &[f32], bias: Option<Vec<f32>>) -> Result<Conv, JsError> {
        let args = SpecArgs::from_js(&spec)?;
        let conv = Conv2d::new(&device.gpu, args.spec, weight, bias.as_deref(), args.options()?).map_err(js)?;
        Ok(Conv { conv: Rc::new(conv) })
    }

    /// The kernel selection chose (`family:config`): at construction, then again with the
    /// first forward's input shape (see `Conv2d::kernel`).
    #[wasm_bindgen(getter)]
    pub fn kernel(&self) -> String {
        self.conv.kernel().kernel.to_string()
    }
    /// Where the choice came from: `explicit`, `default`, `fallback` (the rule's kernel did
    /// not fit the device's limits) or `tuningcache`.
    #[wasm_bindgen(getter)]
    pub fn source(&self) -> String {
        format!("{:?}", self.conv.kernel().source).to_lowercase()
    }
    /// Why selection chose it.
    #[wasm_bindgen(getter)]
    pub fn reason(&self) -> String {
        self.conv.kernel().reason.clone()
    }
    /// The output shape `[N, C_out, OH, OW]` for an input shape `[N, C, H, W]`.
    #[wasm_bindgen(js_name = outputShape)]
    pub fn output_shape(&self, shape: &[u32]) -> Result<Vec<u32>, JsError> {
        let p = self.conv.spec().problem(shape4(shape)?).map_err(js)?;
        Ok(vec![p.output.n, p.output.c, p.output.h, p.output.w])
    }

    /// Runs on an NCHW input of `shape` `[N, C, H, W]`; resolves to the output
    /// (`Float32Array`, `[N, C_out, OH, OW]`). Batches over the device's binding limit run
    /// in chunks.
    pub fn forward(&self, input: Vec<f32>, shape: Vec<u32>) -> js_sys::Promise {
        let conv = self.conv.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let y = conv.forward_async(&input, shape4(&shape)?).await.map_err(js)?;
            Ok(js_sys::Float32Array::from(y.as_slice()).into())
        })
    }

    /// [`Conv::forward`] for an op with `storage: "f16"`: the input as f16 bits
    /// (`Uint16Array`, see [`to_f16`]), resolving to the output as f16 bits.
    #[wasm_bindgen(js_name = forwardF16)]
    pub fn forward_f16(&self, input: Vec<u16>, shape: Vec<u32>) -> js_sys::Promise {
        let conv = self.conv.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let x: Vec<wgconv::half::f16> = input.into_iter().map(wgconv::half::f16::from_bits).collect();
            let y = conv.forward_f16_async(&x, shape4(&shape)?).await.map_err(js)?;
            let bits: Vec<u16> = y.iter().map(|v| v.to_bits()).collect();
            Ok(js_sys::Uint16Array::from(bits.as_slice()).into())
        })
    }

    /// The tensors' element type: `f32` or `f16`.
    #[wasm_bindgen(getter)]
    pub fn storage(&self) -> String {
        self.conv.storage().to_string()
    }

    /// How many dispatches (batch chunks) a run on `shape` takes on this device: 1 unless
    /// the input or output exceeds the storage binding limit.
    pub fn chunks(&self, shape: Vec<u32>) -> Result<u32, JsError> {
        let problem = self.conv.spec().problem(shape4(&shape)?).map_err(js)?;
        let gpu = self.conv.gpu();
        let (input, output) = (
            storage(gpu, "wgconv-web chunks input", problem.input.len() * 4)?,
            storage(gpu, "wgconv-web chunks output", problem.output.len() * 4)?,
        );
        let plan = self.conv.plan(problem.input, &input, &output).map_err(js)?;
        Ok(plan.chunks() as u32)
    }

    /// Times the kernel alone on buffers already on the GPU: resolves to milliseconds per
    /// run, the mean of `reps` runs after one warm-up (which also compiles the pipeline).
    /// Timed with `performance.now()` around submissions that end in a 4-byte read-back, so
    /// it works whether or not the adapter offers `timestamp-query`.
    pub fn bench(&self, shape: Vec<u32>, reps: u32) -> js_sys::Promise {
        let conv = self.conv.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let problem = conv.spec().problem(shape4(&shape)?).map_err(js)?;
            let gpu = conv.gpu().clone();
            let input = storage(&gpu, "wgconv-web bench input", problem.input.len() * 4)?;
            let output = storage(&gpu, "wgconv-web bench output", problem.output.len() * 4)?;
            let plan = conv.plan(problem.input, &input, &output).map_err(js)?;
            let run = |times: u32| {
                let mut enc = gpu.device.create_command_encoder(&Default::default());
                for _ in 0..times {
                    plan.encode(&mut enc, None);
                }
                gpu.queue.submit([enc.finish()]);
                // Reading one value back waits for the work.
                gpu.read_buffer_async::<f32>(&output, 0, 1)
            };
            run(1).await.map_err(js)?;
            let start = now_ms();
            run(reps.max(1)).await.map_err(js)?;
            Ok(JsValue::from_f64((now_ms() - start) / reps.max(1) as f64))
        })
    }
}

/// A zeroed storage buffer the plan can bind (and read back from).
fn storage(gpu: &Gpu, label: &'static str, bytes: u64) -> Result<wgpu::Buffer, JsError> {
    gpu.check_buffer(label, bytes, false).map_err(js)?;
    Ok(gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some(label),
        // Whole granules, as wgconv's own buffers (`wgconv::BUFFER_GRANULE`).
        size: bytes.max(4).next_multiple_of(wgconv::BUFFER_GRANULE),
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    }))
}

/// `performance.now()` of the window or worker (0 where neither has one).
fn now_ms() -> f64 {
    let global = js_sys::global();
    if let Some(w) = global.dyn_ref::<web_sys::Window>() {
        return w.performance().map(|p| p.now()).unwrap_or(0.0);
    }
    if let Some(w) = global.dyn_ref::<web_sys::WorkerGlobalScope>() {
        return w.performance().map(|p| p.now()).unwrap_or(0.0);
    }
    0.0
}

fn shape4(s: &[u32]) -> Result<Shape4, JsError> {
    match s {
        [n, c, h, w] => Ok(Shape4::new(*n, *c, *h, *w)),
        _ => Err(JsError::new(&format!("a shape is [N, C, H, W], not {s:?}"))),
    }
}

/// The CPU reference (wgconv's direct loop nest, in f64) of a convolution, bias and ReLU
/// included: what the browser tests compare the GPU's output against.
#[wasm_bindgen]
pub fn reference(
    spec: JsValue,
    weight: &[f32],
    bias: Option<Vec<f32>>,
    input: &[f32],
    shape: Vec<u32>,
) -> Result<Vec<f32>, JsError> {
    let args = SpecArgs::from_js(&spec)?;
    let problem = args.spec.problem(shape4(&shape)?).map_err(js)?;
    let mut y = wgconv::reference::conv2d(&problem, input, weight, bias.as_deref()).map_err(js)?;
    if args.relu {
        y.iter_mut().for_each(|v| *v = wgconv::reference::relu(*v));
    }
    Ok(y)
}

/// Values rounded to the nearest f16, as their bits (what [`Conv::forward_f16`] reads).
#[wasm_bindgen(js_name = toF16)]
pub fn to_f16(values: &[f32]) -> Vec<u16> {
    values.iter().map(|&v| wgconv::half::f16::from_f32(v).to_bits()).collect()
}

/// f16 bits as f32 values (exact).
#[wasm_bindgen(js_name = fromF16)]
pub fn from_f16(bits: &[u16]) -> Vec<f32> {
    bits.iter().map(|&b| wgconv::half::f16::from_bits(b).to_f32()).collect()
}

/// The version of wgconv this package was built from.
#[wasm_bindgen]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}
