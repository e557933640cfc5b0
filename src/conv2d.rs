//! The `Conv2d` op: weights uploaded once, then run on host slices (`forward`) or encoded
//! into the caller's command encoder on buffers already on the GPU (`encode` / `plan`).
//! Large batches are split into chunks that fit the device's binding limit; large grids
//! are folded into two dimensions.

use crate::band::{band_geometry, band_weight_len, pack_band_weights, BandGeometry};
use crate::config::{
    default_config, default_coop_config, default_stem_config, default_sweep, KernelLimits, TileConfig,
};
use crate::error::{Error, Result};
use crate::gpu::{ErrorScope, Gpu};
use crate::kernel::{ConvParams, Geometry, Kernel, KernelKind, Precision, DIRECT_WORKGROUP, FLAG_RELU};
use crate::spec::{Conv2dSpec, ConvProblem, Shape4};
use crate::stem::{pack_stem_bias, pack_stem_weights, stem_geometry, stem_weight_len, StemGeometry};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use wgpu::util::DeviceExt;

/// The activation fused into the kernel's store, after the bias.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
pub enum Activation {
    #[default]
    None,
    /// max(x, 0) with NaN kept, as PyTorch's.
    Relu,
}

/// Where the kernel of a `Conv2d` came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum ConfigSource {
    /// Named by the caller.
    Explicit,
    /// A decision of the tuner, read from the tuning cache.
    TuningCache,
    /// The library default: the seed's config (f32), the cooperative kernels' default
    /// config, or the stem kernel (f16 on image inputs on NVIDIA, ahead of any tuning
    /// decision).
    Default,
    /// The default did not fit the device; the first sweep config that does.
    Fallback,
}

#[derive(Debug, Clone, Default)]
pub struct Conv2dOptions {
    /// The kernel to run; `None`: the stem kernel for f16 on image inputs on NVIDIA's
    /// cooperative-matrix devices, else the tuning cache's decision for the problem, else the
    /// default.
    pub kernel: Option<KernelKind>,
    pub activation: Activation,
    /// f32 (default), f16 operands with f32 accumulation, or f32-accurate f16x3 on
    /// cooperative matrices; see [`Precision`].
    pub precision: Precision,
    /// Input shape used to look up the tuning cache (its key includes the batch and size).
    pub tuning_key_input: Option<Shape4>,
}

/// The geometry of a problem for the kernels composed per problem.
#[derive(Debug, Clone, Copy)]
enum ProblemGeometry {
    Band(BandGeometry),
    Stem(StemGeometry),
}

/// A row-band or stem pipeline with the geometry it was composed for.
type ShapedKernel = (Arc<Kernel>, ProblemGeometry);

/// A 2-D convolution bound to a device, with its weights resident there.
pub struct Conv2d {
    gpu: Arc<Gpu>,
    spec: Conv2dSpec,
    kind: KernelKind,
    source: ConfigSource,
    activation: Activation,
    /// The pipeline; `None` for the row-band and stem kernels, whose pipelines depend on the
    /// input size (see `shaped_kernels`).
    kernel: Option<Arc<Kernel>>,
    /// Row-band and stem pipelines and geometry, by input (H, W).
    shaped_kernels: Mutex<HashMap<(u32, u32), ShapedKernel>>,
    weight: wgpu::Buffer,
    bias: wgpu::Buffer,
    /// The stem kernel's bias tiles (`stem::pack_stem_bias`), bound where the tiled kernels
    /// bind their gather table.
    bias_tiles: Option<wgpu::Buffer>,
    /// `Params.out_scale`: the inverse of the f16x3 kernel's weight scale, 1 for the others.
    out_scale: f32,
    /// Set by the f16 kernels when an input value is beyond f16's range; `range_snapshot`
    /// receives it so that reading and clearing happen in one submission.
    range_flag: wgpu::Buffer,
    range_snapshot: wgpu::Buffer,
    /// Held by `forward` on f16 kernels: concurrent calls would share the range flag.
    forward_lock: Mutex<()>,
    /// Gather tables of the tiled kernel, by input (H, W).
    gather_tables: Mutex<HashMap<(u32, u32), Arc<wgpu::Buffer>>>,
}

/// The bind groups and grids of one `(input, output)` buffer pair: build once, encode many
/// times (the benchmark times exactly this).
pub struct ConvPlan {
    kernel: Arc<Kernel>,
    dispatches: Vec<(wgpu::BindGroup, [u32; 2])>,
    pub problem: ConvProblem,
}

impl ConvPlan {
    /// Records the dispatches in one compute pass; `timestamps` wrap the whole pass.
    pub fn encode(&self, encoder: &mut wgpu::CommandEncoder, timestamps: Option<wgpu::ComputePassTimestampWrites<'_>>) {
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("wgconv conv2d"),
            timestamp_writes: timestamps,
        });
        pass.set_pipeline(&self.kernel.pipeline);
        for (bind_group, [x, y]) in &self.dispatches {
            pass.set_bind_group(0, bind_group, &[]);
            pass.dispatch_workgroups(*x, *y, 1);
        }
    }
    /// Chunks the batch was split into.
    pub fn chunks(&self) -> usize {
        self.dispatches.len()
    }
}

/// Images per chunk so that each chunk's input and output windows (plus the alignment
/// slack of their binding offsets) fit the binding limit and i32 element arithmetic.
pub(crate) fn images_per_chunk(problem: &ConvProblem, limits: &wgpu::Limits) -> Result<u32> {
    let slack = limits.min_storage_buffer_offset_alignment as u64;
    // Kernels index bound windows with i32 arithmetic: keep every window under 2^31 elements.
    let cap_elems = (limits.max_storage_buffer_binding_size.saturating_sub(slack) / 4).min(i32::MAX as u64 - slack);
    let per_in = problem.input.per_image();
    let per_out = problem.output.per_image();
    let fit = cap_elems / per_in.max(per_out);
    if fit == 0 {
        return Err(Error::TooLarge(format!(
            "one image needs {} B of input and {} B of output, over the device's binding limit of {} B",
            per_in * 4,
            per_out * 4,
            limits.max_storage_buffer_binding_size
        )));
    }
    Ok(fit.min(problem.input.n as u64) as u32)
}

/// Splits `total` workgroups over x and y, each ≤ `max_per_dim`.
pub(crate) fn fold_grid(total: u32, max_per_dim: u32) -> Result<[u32; 2]> {
    if max_per_dim == 0 {
        return Err(Error::Unsupported("the device allows no workgroups per dimension".into()));
    }
    let x = total.clamp(1, max_per_dim);
    let y = total.div_ceil(x);
    if y > max_per_dim {
        return Err(Error::TooLarge(format!("{total} workgroups exceed {max_per_dim}² even when folded")));
    }
    Ok([x, y])
}

impl Conv2d {
    /// Uploads the weights (`[C_out, C_in/groups, KH, KW]`) and bias (`[C_out]`, present iff
    /// `spec.bias`) and builds the kernel.
    pub fn new(
        gpu: &Arc<Gpu>,
        spec: Conv2dSpec,
        weight: &[f32],
        bias: Option<&[f32]>,
        options: Conv2dOptions,
    ) -> Result<Self> {
        spec.validate()?;
        if weight.len() != spec.weight_len() {
            return Err(Error::WrongLength { what: "weight", expected: spec.weight_len(), got: weight.len() });
        }
        match (spec.bias, bias) {
            (true, None) => return Err(Error::spec("the spec has bias = true but no bias was given")),
            (false, Some(_)) => return Err(Error::spec("a bias was given but the spec has bias = false")),
            (_, Some(b)) if b.len() != spec.out_channels as usize => {
                return Err(Error::WrongLength { what: "bias", expected: spec.out_channels as usize, got: b.len() })
            }
            _ => {}
        }
        let (kind, source) = choose_kernel(gpu, &spec, &options)?;
        let packed_bytes = match kind {
            KernelKind::CoopBand(cfg) => band_weight_len(&spec, &cfg).saturating_mul(2),
            KernelKind::CoopStem(cfg) => stem_weight_len(&spec, &cfg).saturating_mul(2),
            KernelKind::Coop(cfg) => packed_weight_len(&spec, &cfg).saturating_mul(2),
            KernelKind::CoopSplit(cfg) => packed_weight_len(&spec, &cfg).saturating_mul(4),
            _ => match kind.config() {
                Some(cfg) => packed_weight_len(&spec, &cfg).saturating_mul(4),
                None => spec.weight_len() as u64 * 4,
            },
        };
        gpu.check_buffer("the packed weights", packed_bytes, true)?;
        let kernel = if kind.is_shaped() {
            None
        } else {
            Some(gpu.pipelines.get_or_build(&gpu.device, kind, gpu.runtime_checks)?)
        };
        let mut out_scale = 1.0;
        let packed: Vec<u8> = match &kind {
            KernelKind::Tiled(cfg) => bytemuck::cast_slice(&pack_weights(&spec, weight, cfg)).to_vec(),
            KernelKind::TiledF16(cfg) => {
                let mut packed = pack_weights(&spec, weight, cfg);
                round_to_f16(&mut packed, "weight")?;
                bytemuck::cast_slice(&packed).to_vec()
            }
            KernelKind::Coop(cfg) => f16_bytes(pack_weights(&spec, weight, cfg))?,
            KernelKind::CoopSplit(cfg) => {
                let (bytes, scale) = split_weights(&pack_weights(&spec, weight, cfg));
                out_scale = 1.0 / scale;
                bytes
            }
            KernelKind::CoopBand(cfg) => f16_bytes(pack_band_weights(&spec, weight, cfg))?,
            KernelKind::CoopStem(cfg) => f16_bytes(pack_stem_weights(&spec, weight, cfg))?,
            KernelKind::Direct => bytemuck::cast_slice(weight).to_vec(),
        };
        let zeros;
        let bias = match bias {
            Some(b) => b,
            None => {
                zeros = vec![0.0f32; spec.out_channels as usize];
                &zeros
            }
        };
        let stem_bias = match kind {
            KernelKind::CoopStem(cfg) => Some(pack_stem_bias(&spec, Some(bias), &cfg)),
            _ => None,
        };
        let scope = ErrorScope::push(&gpu.device);
        let storage = wgpu::BufferUsages::STORAGE;
        let weight = gpu.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("wgconv weight"),
            contents: &packed,
            usage: storage,
        });
        let bias = gpu.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("wgconv bias"),
            contents: bytemuck::cast_slice(bias),
            usage: storage,
        });
        let bias_tiles = stem_bias.as_ref().map(|tiles| {
            gpu.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("wgconv bias tiles"),
                contents: bytemuck::cast_slice(tiles),
                usage: storage,
            })
        });
        let range_flag = gpu.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("wgconv f16 range flag"),
            contents: bytemuck::bytes_of(&0u32),
            usage: storage | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
        });
        let range_snapshot = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("wgconv f16 range flag snapshot"),
            size: 4,
            usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        scope.finish("weight upload")?;
        Ok(Conv2d {
            gpu: gpu.clone(),
            spec,
            kind,
            source,
            activation: options.activation,
            kernel,
            shaped_kernels: Mutex::new(HashMap::new()),
            weight,
            bias,
            bias_tiles,
            out_scale,
            range_flag,
            range_snapshot,
            forward_lock: Mutex::new(()),
            gather_tables: Mutex::new(HashMap::new()),
        })
    }

    pub fn spec(&self) -> &Conv2dSpec {
        &self.spec
    }
    /// The kernel this op runs, and where that choice came from.
    pub fn kernel(&self) -> (KernelKind, ConfigSource) {
        (self.kind, self.source)
    }
    pub fn activation(&self) -> Activation {
        self.activation
    }
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// Bind groups for running on `input` (NCHW f32, `shape`) into `output`
    /// (`[N, C_out, OH, OW]` f32). Both buffers need `STORAGE` usage.
    pub fn plan(&self, shape: Shape4, input: &wgpu::Buffer, output: &wgpu::Buffer) -> Result<ConvPlan> {
        let problem = self.spec.problem(shape)?;
        for (what, buf, elems) in [
            ("input buffer (bytes)", input, problem.input.len()),
            ("output buffer (bytes)", output, problem.output.len()),
        ] {
            if buf.size() < elems * 4 {
                return Err(Error::WrongLength { what, expected: (elems * 4) as usize, got: buf.size() as usize });
            }
            if !buf.usage().contains(wgpu::BufferUsages::STORAGE) {
                return Err(Error::Unsupported(format!("{what} lacks STORAGE usage")));
            }
        }
        let limits = self.gpu.device.limits();
        let per_chunk = images_per_chunk(&problem, &limits)?;
        let align = limits.min_storage_buffer_offset_alignment as u64;
        let ktab = match self.kind {
            KernelKind::Tiled(cfg) | KernelKind::TiledF16(cfg) | KernelKind::Coop(cfg) | KernelKind::CoopSplit(cfg) => {
                Some(self.gather_table(&problem, &cfg)?)
            }
            KernelKind::CoopBand(_) | KernelKind::CoopStem(_) | KernelKind::Direct => None,
        };
        let (kernel, geometry) = self.kernel_for(&problem)?;
        let s = &self.spec;
        let scope = ErrorScope::push(&self.gpu.device);
        let mut dispatches = Vec::new();
        let mut first = 0u32;
        while first < problem.input.n {
            let batch = per_chunk.min(problem.input.n - first);
            let window = |per_image: u64| {
                let start = first as u64 * per_image * 4;
                let aligned = start - start % align;
                let size = (start - aligned) + batch as u64 * per_image * 4;
                (aligned, size, ((start - aligned) / 4) as u32)
            };
            let (in_at, in_size, in_offset) = window(problem.input.per_image());
            let (out_at, out_size, out_offset) = window(problem.output.per_image());
            let m_total = batch * problem.output.h * problem.output.w;
            let mut params = ConvParams {
                c_in: problem.input.c,
                h: problem.input.h,
                w: problem.input.w,
                c_out: problem.output.c,
                oh: problem.output.h,
                ow: problem.output.w,
                batch,
                m_total,
                kh: s.kernel[0],
                kw: s.kernel[1],
                stride_h: s.stride[0],
                stride_w: s.stride[1],
                pad_top: s.padding.top,
                pad_left: s.padding.left,
                dil_h: s.dilation[0],
                dil_w: s.dilation[1],
                c_in_per_group: s.in_channels_per_group(),
                c_out_per_group: s.out_channels_per_group(),
                groups: s.groups,
                k_total: s.k_total(),
                in_offset,
                out_offset,
                flags: if self.activation == Activation::Relu { FLAG_RELU } else { 0 },
                out_scale: self.out_scale,
                ..Default::default()
            };
            let workgroups = match (self.kind.config(), geometry) {
                (Some(cfg), Some(ProblemGeometry::Stem(g))) => {
                    params.n_pad = g.k.n_pad;
                    params.n_tiles = g.k.n_pad / cfg.block_n;
                    params.x_tiles = g.x_tiles;
                    params.x_clamp = g.x_clamp;
                    let others = params.n_tiles as u64 * g.x_tiles as u64 * batch as u64 * s.groups as u64;
                    params.row_tiles = g.row_tiles(problem.output.h, others);
                    let total = others * params.row_tiles as u64;
                    params.total_tiles = u32::try_from(total)
                        .map_err(|_| Error::TooLarge(format!("{total} workgroups in one chunk")))?;
                    params.total_tiles
                }
                (Some(cfg), Some(ProblemGeometry::Band(b))) => {
                    params.n_pad = s.out_channels_per_group().next_multiple_of(cfg.block_n);
                    params.n_tiles = params.n_pad / cfg.block_n;
                    params.row_tiles = b.row_tiles;
                    params.x_tiles = b.x_tiles;
                    params.x_clamp = b.x_clamp;
                    let total =
                        params.n_tiles as u64 * b.x_tiles as u64 * b.row_tiles as u64 * batch as u64 * s.groups as u64;
                    params.total_tiles = u32::try_from(total)
                        .map_err(|_| Error::TooLarge(format!("{total} workgroups in one chunk")))?;
                    params.total_tiles
                }
                (Some(cfg), None) => {
                    params.k_tiles = s.k_total().div_ceil(cfg.block_k);
                    params.n_pad = s.out_channels_per_group().next_multiple_of(cfg.block_n);
                    params.m_tiles = m_total.div_ceil(cfg.block_m);
                    params.n_tiles = params.n_pad / cfg.block_n;
                    let total = params.m_tiles as u64 * params.n_tiles as u64 * s.groups as u64;
                    params.total_tiles = u32::try_from(total)
                        .map_err(|_| Error::TooLarge(format!("{total} workgroups in one chunk")))?;
                    params.total_tiles
                }
                (None, _) => (batch * problem.output.per_image() as u32).div_ceil(DIRECT_WORKGROUP),
            };
            let grid = fold_grid(workgroups, limits.max_compute_workgroups_per_dimension)?;
            let uniform = self.gpu.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("wgconv params"),
                contents: bytemuck::bytes_of(&params),
                usage: wgpu::BufferUsages::UNIFORM,
            });
            fn bind_range(buffer: &wgpu::Buffer, offset: u64, size: u64) -> wgpu::BindingResource<'_> {
                wgpu::BindingResource::Buffer(wgpu::BufferBinding { buffer, offset, size: wgpu::BufferSize::new(size) })
            }
            // The direct and row-band kernels have no gather table: bind the bias in its slot
            // (unused); the stem kernel's bias tiles go there.
            let ktab_res = match (&ktab, &self.bias_tiles) {
                (Some(t), _) => t.as_entire_binding(),
                (None, Some(t)) => t.as_entire_binding(),
                (None, None) => self.bias.as_entire_binding(),
            };
            let bind_group = self.gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("wgconv conv2d"),
                layout: &kernel.layout,
                entries: &[
                    wgpu::BindGroupEntry { binding: 0, resource: uniform.as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 1, resource: bind_range(input, in_at, in_size) },
                    wgpu::BindGroupEntry { binding: 2, resource: self.weight.as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 3, resource: self.bias.as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 4, resource: ktab_res },
                    wgpu::BindGroupEntry { binding: 5, resource: bind_range(output, out_at, out_size) },
                    wgpu::BindGroupEntry { binding: 6, resource: self.range_flag.as_entire_binding() },
                ],
            });
            dispatches.push((bind_group, grid));
            first += batch;
        }
        scope.finish("bind group creation")?;
        Ok(ConvPlan { kernel, dispatches, problem })
    }

    /// Encodes the convolution of `input` (shape `shape`) into `output` on the caller's encoder.
    pub fn encode(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        shape: Shape4,
        input: &wgpu::Buffer,
        output: &wgpu::Buffer,
    ) -> Result<()> {
        self.plan(shape, input, output)?.encode(encoder, None);
        Ok(())
    }

    /// Runs on host data: uploads `input` (NCHW, `shape`), returns `[N, C_out, OH, OW]`.
    /// Batches larger than the device's binding limit run chunk by chunk.
    pub fn forward(&self, input: &[f32], shape: Shape4) -> Result<Vec<f32>> {
        let problem = self.spec.problem(shape)?;
        if input.len() as u64 != problem.input.len() {
            return Err(Error::WrongLength { what: "input", expected: problem.input.len() as usize, got: input.len() });
        }
        let per_chunk = images_per_chunk(&problem, &self.gpu.device.limits())?;
        let (in_img, out_img) = (problem.input.per_image() as usize, problem.output.per_image() as usize);
        let chunk_in = Shape4 { n: per_chunk, ..problem.input };
        let dev = &self.gpu.device;
        let scope = ErrorScope::push(dev);
        let in_buf = dev.create_buffer(&wgpu::BufferDescriptor {
            label: Some("wgconv input"),
            size: (per_chunk as usize * in_img * 4) as u64,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let out_buf = dev.create_buffer(&wgpu::BufferDescriptor {
            label: Some("wgconv output"),
            size: (per_chunk as usize * out_img * 4) as u64,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        scope.finish("buffer creation")?;
        let _turn = match self.kind.precision() {
            Precision::F16Accum32 | Precision::F16x3 => {
                Some(self.forward_lock.lock().unwrap_or_else(|e| e.into_inner()))
            }
            Precision::F32 => None,
        };
        let mut out = Vec::new();
        out.try_reserve_exact(problem.output.len() as usize)
            .map_err(|_| Error::TooLarge(format!("{} output elements on the host", problem.output.len())))?;
        for chunk in input.chunks(per_chunk as usize * in_img) {
            let n = (chunk.len() / in_img) as u32;
            let scope = ErrorScope::push(dev);
            self.gpu.queue.write_buffer(&in_buf, 0, bytemuck::cast_slice(chunk));
            let plan = self.plan(Shape4 { n, ..chunk_in }, &in_buf, &out_buf)?;
            let mut enc = dev.create_command_encoder(&Default::default());
            // A flag left by earlier `encode` work is not this call's business.
            enc.clear_buffer(&self.range_flag, 0, None);
            plan.encode(&mut enc, None);
            self.gpu.queue.submit([enc.finish()]);
            scope.finish("dispatch")?;
            out.extend(self.gpu.read_buffer::<f32>(&out_buf, 0, n as usize * out_img)?);
            if self.take_range_flag()? {
                return Err(Error::F16Range { what: "the input", detail: String::new() });
            }
        }
        Ok(out)
    }

    /// Whether an f16 or f16x3 kernel met an input value beyond f16's range since the last
    /// call (and clears the flag). `forward` checks it itself; callers of `encode` / `plan`
    /// with [`Precision::F16Accum32`] or [`Precision::F16x3`] check it after their work
    /// completes: a flagged result must not be used. Always `false` for f32 kernels.
    pub fn take_range_flag(&self) -> Result<bool> {
        if self.kind.precision() == Precision::F32 {
            return Ok(false);
        }
        // Snapshot and clear in one submission: work queued in between is not lost.
        let mut enc = self.gpu.device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(&self.range_flag, 0, &self.range_snapshot, 0, 4);
        enc.clear_buffer(&self.range_flag, 0, None);
        self.gpu.queue.submit([enc.finish()]);
        let flag = self.gpu.read_buffer::<u32>(&self.range_snapshot, 0, 1)?;
        Ok(flag.first().copied().unwrap_or(0) != 0)
    }

    /// The pipeline for a problem, with the geometry where the row-band or stem kernel runs.
    fn kernel_for(&self, problem: &ConvProblem) -> Result<(Arc<Kernel>, Option<ProblemGeometry>)> {
        if let Some(k) = &self.kernel {
            return Ok((k.clone(), None));
        }
        let key = (problem.input.h, problem.input.w);
        let mut kernels = self.shaped_kernels.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((k, g)) = kernels.get(&key) {
            return Ok((k.clone(), Some(*g)));
        }
        let limits = self.gpu.kernel_limits();
        let (geometry, shape) = match self.kind {
            KernelKind::CoopBand(cfg) => {
                let g = band_geometry(&self.spec, problem.output.h, problem.output.w, &cfg, &limits)?;
                (ProblemGeometry::Band(g), Geometry::Band(g.shape(&self.spec)))
            }
            KernelKind::CoopStem(cfg) => {
                let g = stem_geometry(&self.spec, problem.output.w, &cfg, &limits)?;
                (ProblemGeometry::Stem(g), Geometry::Stem(g.shape()))
            }
            _ => return Err(Error::Unsupported(format!("{} has no pipeline", self.kind))),
        };
        let kernel =
            self.gpu.pipelines.get_or_build_for(&self.gpu.device, self.kind, shape, self.gpu.runtime_checks)?;
        kernels.insert(key, (kernel.clone(), geometry));
        Ok((kernel, Some(geometry)))
    }

    /// The tiled kernel's gather table for an input size (cached per (H, W)).
    fn gather_table(&self, problem: &ConvProblem, cfg: &TileConfig) -> Result<Arc<wgpu::Buffer>> {
        let key = (problem.input.h, problem.input.w);
        let mut tables = self.gather_tables.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = tables.get(&key) {
            return Ok(t.clone());
        }
        let k_pad = self.spec.k_total().next_multiple_of(cfg.block_k) as u64;
        self.gpu.check_buffer("the gather table", k_pad * 16, true)?;
        let rows = gather_rows(&self.spec, problem.input.h, problem.input.w, cfg.block_k)?;
        let buf = Arc::new(self.gpu.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("wgconv gather table"),
            contents: bytemuck::cast_slice(&rows),
            usage: wgpu::BufferUsages::STORAGE,
        }));
        tables.insert(key, buf.clone());
        Ok(buf)
    }
}

/// The kernel for a new op: explicit, else the tuning cache, else the default, else the
/// first sweep config the device can run, else the direct kernel. For f16 precision:
/// cooperative matrices where the device has them (the stem kernel for convolutions on image
/// inputs on NVIDIA, `stem::stem_is_default`, else the gathering kernel), else the f16 SIMT
/// kernel
/// where it has `SHADER_F16`, else a refusal — never the f32 path under an f16 label. For
/// f16x3: cooperative matrices, else a refusal.
fn choose_kernel(gpu: &Gpu, spec: &Conv2dSpec, options: &Conv2dOptions) -> Result<(KernelKind, ConfigSource)> {
    let limits = gpu.kernel_limits();
    if let Some(kind) = options.kernel {
        if kind.precision() != options.precision {
            return Err(Error::Unsupported(format!(
                "kernel {kind} computes in {:?}, but {:?} was asked for",
                kind.precision(),
                options.precision
            )));
        }
        check_kind_supported(gpu, &kind)?;
        kind.validate(&limits)?;
        match kind {
            KernelKind::CoopBand(cfg) => band_runs(spec, &cfg, &limits)?,
            KernelKind::CoopStem(cfg) => stem_runs(spec, &cfg, &limits)?,
            _ => {}
        }
        return Ok((kind, ConfigSource::Explicit));
    }
    // f16 on the matrix units for a network's first layer: the stem kernel, before the
    // tuning cache (whose f16 decisions are the gathering kernel's, which the stem kernel
    // replaces for these convolutions; the tuner does not tune the stem kernel).
    if options.precision == Precision::F16Accum32 && crate::stem::stem_is_default(gpu, spec) {
        return Ok((KernelKind::CoopStem(default_stem_config()), ConfigSource::Default));
    }
    // The tuner's decision for this precision (each precision's decisions are its own).
    if let Some(input) = options.tuning_key_input {
        if let Ok(problem) = spec.problem(input) {
            if let Some(kind) = crate::tune::cached_decision(gpu, &problem, options.precision) {
                return Ok((kind, ConfigSource::TuningCache));
            }
        }
    }
    let default = default_kind(gpu, options.precision)?;
    if default.validate(&limits).is_ok() {
        return Ok((default, ConfigSource::Default));
    }
    let sweep = match default {
        KernelKind::Coop(_) | KernelKind::CoopSplit(_) => crate::config::coop_sweep(),
        _ => default_sweep(),
    };
    for c in sweep {
        let kind = default.with_config(c);
        if kind.validate(&limits).is_ok() {
            return Ok((kind, ConfigSource::Fallback));
        }
    }
    match options.precision {
        Precision::F32 => Ok((KernelKind::Direct, ConfigSource::Fallback)),
        p => Err(Error::Unsupported(format!("no {p} tile config fits {}'s limits", gpu.info.name))),
    }
}

/// The kernel and config a fresh op at `precision` starts from on this device, before any
/// tuning: the seed's config on the SIMT kernels, [`default_coop_config`] on the
/// cooperative ones (also the tuner's default original).
pub fn default_kind(gpu: &Gpu, precision: Precision) -> Result<KernelKind> {
    kind_for(gpu, precision, default_config()).map(with_default_tiles)
}

/// [`default_kind`] for a device not opened yet ([`kind_for_adapter`]): the tuner's cache
/// lookup opens none.
pub fn default_kind_for_adapter(adapter: &wgpu::Adapter, precision: Precision) -> Result<KernelKind> {
    kind_for_adapter(adapter, precision, default_config()).map(with_default_tiles)
}

/// `kind` with its family's default config: [`default_coop_config`] for the cooperative
/// kernels, the config as it is (the seed's) for the others.
fn with_default_tiles(kind: KernelKind) -> KernelKind {
    match kind {
        KernelKind::Coop(_) | KernelKind::CoopSplit(_) => kind.with_config(default_coop_config()),
        k => k,
    }
}

/// The tiled kernel that runs a config at a precision on this device: f32 → `Tiled`;
/// f16 → `Coop` where cooperative matrices are enabled, else `TiledF16` where the device has
/// `SHADER_F16`, else a refusal (never the f32 kernel under an f16 label); f16x3 → `CoopSplit`
/// where cooperative matrices are enabled, else a refusal (it exists to use the matrix units:
/// elsewhere the f32 kernel is as accurate and faster).
pub fn kind_for(gpu: &Gpu, precision: Precision, config: TileConfig) -> Result<KernelKind> {
    let shader_f16 = gpu.device.features().contains(wgpu::Features::SHADER_F16);
    kind_for_features(precision, config, gpu.has_coop_f16(), shader_f16, &gpu.info.name)
}

/// [`kind_for`] for a device not opened yet, as one opened from `adapter` with the
/// cooperative-matrix opt-in would decide it (cooperative matrices counted where usable):
/// for reports (`wgconv info`) and cache lookups (`wgconv tune`) that open no device.
pub fn kind_for_adapter(adapter: &wgpu::Adapter, precision: Precision, config: TileConfig) -> Result<KernelKind> {
    let coop_f16 = crate::gpu::coop_f16_supported(adapter);
    let shader_f16 = adapter.features().contains(wgpu::Features::SHADER_F16);
    kind_for_features(precision, config, coop_f16, shader_f16, &adapter.get_info().name)
}

/// [`kind_for`]'s decision from what a device offers (`coop_f16`: cooperative matrices
/// usable and enabled; `shader_f16`: the `SHADER_F16` feature).
fn kind_for_features(
    precision: Precision,
    config: TileConfig,
    coop_f16: bool,
    shader_f16: bool,
    adapter: &str,
) -> Result<KernelKind> {
    match precision {
        Precision::F32 => Ok(KernelKind::Tiled(config)),
        Precision::F16Accum32 if coop_f16 => Ok(KernelKind::Coop(config)),
        Precision::F16Accum32 if shader_f16 => Ok(KernelKind::TiledF16(config)),
        Precision::F16Accum32 => Err(Error::Unsupported(format!(
            "f16 precision needs cooperative matrices or SHADER_F16; {adapter} has neither"
        ))),
        Precision::F16x3 if coop_f16 => Ok(KernelKind::CoopSplit(config)),
        Precision::F16x3 => Err(Error::Unsupported(format!(
            "f16x3 precision runs on cooperative matrices {COOP_NEEDS}; {adapter} has none enabled \
             (use f32: it is as accurate)"
        ))),
    }
}

/// What the cooperative-matrix kernels need, for refusals.
const COOP_NEEDS: &str = "(f16 A/B, f32 C, 16x16x16, subgroup size 32)";

/// Whether the row-band kernel can run a convolution for any input size: it applies, and
/// its geometry of one fragment per row fits the device. That geometry is the last one
/// `band_geometry` tries for every width, so it is sufficient; a spec refused here might
/// still fit some widths with wider rows.
pub(crate) fn band_runs(spec: &Conv2dSpec, cfg: &TileConfig, limits: &KernelLimits) -> Result<()> {
    band_geometry(spec, 1, 1, cfg, limits).map(|_| ())
}

/// Whether the stem kernel can run a convolution for any input size: it applies, and its
/// geometry for outputs at least one fragment wide (the widest ring) fits the device.
pub(crate) fn stem_runs(spec: &Conv2dSpec, cfg: &TileConfig, limits: &KernelLimits) -> Result<()> {
    stem_geometry(spec, cfg.block_m, cfg, limits).map(|_| ())
}

/// Refuses kinds whose device features are missing.
fn check_kind_supported(gpu: &Gpu, kind: &KernelKind) -> Result<()> {
    match kind {
        k if k.is_cooperative() && !gpu.has_coop_f16() => Err(Error::Unsupported(format!(
            "{kind} needs cooperative matrices {COOP_NEEDS}; {} has none enabled",
            gpu.info.name
        ))),
        KernelKind::TiledF16(_) if !gpu.device.features().contains(wgpu::Features::SHADER_F16) => {
            Err(Error::Unsupported(format!("{kind} needs SHADER_F16, which {} lacks", gpu.info.name)))
        }
        _ => Ok(()),
    }
}

/// Rounds values to the nearest f16 (kept as f32), refusing any beyond f16's range.
pub(crate) fn round_to_f16(values: &mut [f32], what: &'static str) -> Result<()> {
    if let Some(v) = values.iter().find(|v| v.abs() > half::f16::MAX.to_f32()) {
        return Err(Error::F16Range { what, detail: format!(", e.g. {v}") });
    }
    for v in values.iter_mut() {
        *v = half::f16::from_f32(*v).to_f32();
    }
    Ok(())
}

/// Packed weights as f16 bytes (the cooperative-matrix kernels), refusing values beyond
/// f16's range.
fn f16_bytes(mut packed: Vec<f32>) -> Result<Vec<u8>> {
    round_to_f16(&mut packed, "weight")?;
    let bits: Vec<u16> = packed.iter().map(|&v| half::f16::from_f32(v).to_bits()).collect();
    Ok(bytemuck::cast_slice(&bits).to_vec())
}

/// Packed weights split for the f16x3 kernel, with the power of two `scale` they were
/// multiplied by first (the kernel's sums are multiplied by `1 / scale`). Per four weights
/// `w` (a `WeightVec` of coop_operands_f16x3.wgsl): four `hi = f16(w·scale)`, then four
/// `lo = f16((w·scale - hi)·2048)`. The scale puts the largest finite magnitude in
/// [2^13, 2^14): far inside f16's range, and small weights stay out of its subnormals
/// (weights all below 2^-113 stay smaller: the scale stops at 2^126). A non-finite weight
/// keeps `hi` (±inf or NaN) and `lo = 0`; an infinite one makes NaN of the outputs it
/// touches, where f32 may give ±inf (its products with the inputs' low halves are 0·inf or
/// opposite infinities).
pub(crate) fn split_weights(packed: &[f32]) -> (Vec<u8>, f32) {
    let max = packed.iter().filter(|v| v.is_finite()).fold(0.0f32, |m, v| m.max(v.abs()));
    // f64: f32's log2 rounds values just under a power of two up to it.
    let exp = if max > 0.0 { 13 - (max as f64).log2().floor() as i32 } else { 0 };
    let scale = 2f64.powi(exp.clamp(-126, 126));
    let halves = |v: f32| {
        let x = v as f64 * scale;
        let hi = half::f16::from_f64(x);
        let lo = if v.is_finite() { half::f16::from_f64((x - hi.to_f64()) * 2048.0) } else { half::f16::ZERO };
        (hi.to_bits(), lo.to_bits())
    };
    let split: Vec<(u16, u16)> = packed.iter().map(|&v| halves(v)).collect();
    let mut bits = Vec::with_capacity(packed.len() * 2);
    for quad in split.chunks(4) {
        bits.extend(quad.iter().map(|h| h.0));
        bits.extend(quad.iter().map(|h| h.1));
    }
    (bytemuck::cast_slice(&bits).to_vec(), scale as f32)
}

/// Weights as the tiled kernel reads them: `[groups][k_pad][n_pad]`, K padded to whole
/// `block_k` steps and the group's output channels to whole `block_n` blocks, zeros beyond.
/// Elements of [`pack_weights`]' output.
pub(crate) fn packed_weight_len(spec: &Conv2dSpec, cfg: &TileConfig) -> u64 {
    spec.groups as u64
        * spec.k_total().next_multiple_of(cfg.block_k) as u64
        * spec.out_channels_per_group().next_multiple_of(cfg.block_n) as u64
}

pub(crate) fn pack_weights(spec: &Conv2dSpec, weight: &[f32], cfg: &TileConfig) -> Vec<f32> {
    let k = spec.k_total() as usize;
    let k_pad = spec.k_total().next_multiple_of(cfg.block_k) as usize;
    let cout_g = spec.out_channels_per_group() as usize;
    let n_pad = spec.out_channels_per_group().next_multiple_of(cfg.block_n) as usize;
    let mut packed = vec![0.0f32; spec.groups as usize * k_pad * n_pad];
    for g in 0..spec.groups as usize {
        for n in 0..cout_g {
            let src = &weight[(g * cout_g + n) * k..][..k];
            for (kk, &v) in src.iter().enumerate() {
                packed[(g * k_pad + kk) * n_pad + n] = v;
            }
        }
    }
    packed
}

/// One gather-table row per k (padded to whole `block_k` steps): the element offset of
/// tap (ic, ky, kx) from a window origin, and its (dy, dx); rows past K are out of range.
pub(crate) fn gather_rows(spec: &Conv2dSpec, h: u32, w: u32, block_k: u32) -> Result<Vec<[i32; 4]>> {
    const OUT_OF_RANGE: i32 = -(1 << 30);
    let (kh, kw) = (spec.kernel[0], spec.kernel[1]);
    let span_h = spec.dilation[0] as u64 * (kh as u64 - 1);
    let span_w = spec.dilation[1] as u64 * (kw as u64 - 1);
    if span_h >= 1 << 29 || span_w >= 1 << 29 {
        return Err(Error::TooLarge(format!("dilated kernel {}x{}", span_h + 1, span_w + 1)));
    }
    let k_pad = spec.k_total().next_multiple_of(block_k);
    Ok((0..k_pad)
        .map(|k| {
            if k >= spec.k_total() {
                return [0, OUT_OF_RANGE, OUT_OF_RANGE, 0];
            }
            let ic = k / (kh * kw);
            let dy = ((k / kw) % kh * spec.dilation[0]) as i64;
            let dx = ((k % kw) * spec.dilation[1]) as i64;
            let off = ic as i64 * h as i64 * w as i64 + dy * w as i64 + dx;
            [off as i32, dy as i32, dx as i32, 0]
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The halves rebuild every weight within 2^-22 relative (two halves of 11 significant
    /// bits) at any magnitude, the scale is a power of two putting the largest weight in [2^13, 2^14),
    /// and non-finite weights keep their high half with a zero low half.
    #[test]
    fn split_weights_rebuild_f32_weights() {
        let f16 = |bits: &[u8], i: usize| half::f16::from_bits(u16::from_le_bytes([bits[2 * i], bits[2 * i + 1]]));
        for magnitude in [1e-30f32, 1e-6, 0.05, 1.0, 3e4, 1e9] {
            let w: Vec<f32> = (0..24).map(|i| magnitude * ((i * 37 % 23) as f32 - 11.3) / 11.3).collect();
            let (bits, scale) = split_weights(&w);
            assert_eq!(bits.len(), w.len() * 4);
            assert_eq!(scale.log2().fract(), 0.0, "scale {scale} is not a power of two");
            let max = w.iter().fold(0.0f32, |m, v| m.max(v.abs())) * scale;
            assert!((8192.0..16384.0).contains(&max), "largest scaled weight {max}");
            for (i, &v) in w.iter().enumerate() {
                let (quad, lane) = (i / 4, i % 4);
                let hi = f16(&bits, quad * 8 + lane).to_f64();
                let lo = f16(&bits, quad * 8 + 4 + lane).to_f64();
                let rebuilt = (hi + lo / 2048.0) / scale as f64;
                let rel = ((rebuilt - v as f64) / v as f64).abs();
                assert!(rel <= 2f64.powi(-22), "weight {v} (×{magnitude:e}): rebuilt {rebuilt}, rel {rel:e}");
            }
        }
        let (bits, _) = split_weights(&[1.0, f32::INFINITY, f32::NAN, -2.0]);
        assert!(f16(&bits, 1).is_infinite() && f16(&bits, 5).to_f32() == 0.0);
        assert!(f16(&bits, 2).is_nan() && f16(&bits, 6).to_f32() == 0.0);
    }

    #[test]
    fn fold_grid_splits_and_refuses() {
        assert!(fold_grid(10, 0).is_err());
        assert_eq!(fold_grid(10, 65535).unwrap(), [10, 1]);
        assert_eq!(fold_grid(70000, 65535).unwrap(), [65535, 2]);
        assert_eq!(fold_grid(16, 4).unwrap(), [4, 4]);
        assert!(fold_grid(17, 4).is_err());
    }
}
