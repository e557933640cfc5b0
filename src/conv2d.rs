//! The `Conv2d` op: weights uploaded once, then run on host slices (`forward`) or encoded
//! into the caller's command encoder on buffers already on the GPU (`encode` / `plan`).
//! Large batches are split into chunks that fit the device's binding limit; large grids
//! are folded into two dimensions. Which kernel runs is `select`'s decision; how it runs is
//! its family's (through the `KernelConfig` and `Shaped` traits).

use crate::error::{BufferIssue, Error, Result};
use crate::gpu::Gpu;
use crate::kernel::{
    bindings, workgroups_u32, ConvParams, Pipeline, Precision, Shaped, TensorForm, FINISHING_INPUT_BINDING,
    FINISHING_WEIGHT_BINDING, FLAG_RELU, GRID_BINDING, INPUT_MAX_BINDING, INPUT_MAX_WRITE_BINDING, PAD_MODE_SHIFT,
};
use crate::options::{Activation, Conv2dOptions, Layout, Selection, Storage};
use crate::scope::ErrorScope;
use crate::spec::{Conv2dSpec, ConvProblem, Shape4};
use lru::LruCache;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, TryLockError};

/// Input sizes (H, W) whose composed kernel and tables a `Conv2d` keeps (least recently
/// used first out): a service that sees many sizes recomposes the rare ones instead of
/// growing without bound.
pub const PREPARED_CAPACITY: usize = 16;

/// A kernel composed for one input size, with its pipeline and size-dependent buffers.
struct Prepared {
    shaped: Box<dyn Shaped>,
    pipeline: Arc<Pipeline>,
    /// The pipeline of the kernel's staging pass, where it has one.
    staging: Option<Arc<Pipeline>>,
    /// The input-maximum pass before the staging pass, where the kernel scales its input.
    input_max: Option<Arc<Pipeline>>,
    /// The pipeline of the kernel's finishing pass, where it has one.
    finishing: Option<Arc<Pipeline>>,
    /// Where the tensors are not in the kernel's form (channels-last tensors for a kernel
    /// of NCHW, f16 storage): the passes that rewrite the input into it before the kernel
    /// and its output back after it (`src/wgsl/layout.wgsl`).
    layout_passes: Option<(Arc<Pipeline>, Arc<Pipeline>)>,
    /// Whether the input and the output layout pass go by tiles
    /// ([`crate::kernel::layout_pass_tiled`]): such a pass has one workgroup per tile
    /// ([`crate::kernel::layout_transpose_workgroups`]).
    layout_tiled: [bool; 2],
    tables: Vec<(u32, wgpu::Buffer)>,
}

impl Prepared {
    /// Scratch bytes per image of the staging pass (0 without one).
    fn scratch_per_image(&self) -> u64 {
        self.shaped.staging().map_or(0, |s| s.bytes_per_image)
    }
    /// Scratch bytes per image of the finishing pass's input (0 without one).
    fn finishing_per_image(&self) -> u64 {
        self.shaped.finishing().map_or(0, |f| f.bytes_per_image)
    }
}

/// One chunk's dispatches: the layout pass into the kernel's form (channels-last tensors
/// for a kernel of NCHW, f16 storage), the input-maximum and staging passes (where the
/// kernel has them), the kernel, its finishing pass (where it has one), and the layout pass
/// back into the caller's form.
struct ChunkDispatch {
    to_kernel: Option<(wgpu::BindGroup, [u32; 2])>,
    input_max: Option<(wgpu::BindGroup, [u32; 2])>,
    staging: Option<(wgpu::BindGroup, [u32; 2])>,
    main: (wgpu::BindGroup, [u32; 2]),
    finishing: Option<(wgpu::BindGroup, [u32; 2])>,
    from_kernel: Option<(wgpu::BindGroup, [u32; 2])>,
}

/// A 2-D convolution bound to a device, with its weights resident there.
///
/// ```no_run
/// use wgconv::{Conv2d, Conv2dOptions, Conv2dSpec, Gpu, Padding, Shape4};
/// let gpu = Gpu::new()?;
/// let spec = Conv2dSpec::new(3, 8, 3).padding(Padding::same());
/// let conv = Conv2d::new(&gpu, spec, &vec![0.1; spec.weight_len()], Some(&[0.0; 8]), Conv2dOptions::default())?;
/// println!("{}", conv.kernel()); // the kernel, where the choice came from, and why
/// let y = conv.forward(&vec![1.0; 2 * 3 * 16 * 16], Shape4::new(2, 3, 16, 16))?;
/// # Ok::<(), wgconv::Error>(())
/// ```
pub struct Conv2d {
    gpu: Gpu,
    spec: Conv2dSpec,
    activation: Activation,
    layout: Layout,
    storage: Storage,
    /// The kernel selected at construction and its buffers.
    initial: Bound,
    /// The kernel selected again at the first forward (see [`Conv2d::settle`]); once set, it
    /// is the op's for good.
    reselected: OnceLock<Bound>,
    /// What that selection needs, kept from construction until the first forward where the
    /// options named neither a kernel nor the input shape.
    pending: Mutex<Option<Pending>>,
    /// Set by the f16 kernels when an input value is beyond f16's range; `range_snapshot`
    /// receives it so that reading and clearing happen in one submission.
    range_flag: wgpu::Buffer,
    range_snapshot: wgpu::Buffer,
    /// Taken by a forward on f16 kernels and by a read of the range flag: concurrent calls
    /// would share the flag.
    forward_lock: Mutex<()>,
    /// The kernel composed per input (H, W), for the [`PREPARED_CAPACITY`] most recent sizes.
    prepared: Mutex<LruCache<(u32, u32), Arc<Prepared>>>,
    /// The layout of the one-buffer bind group that asks wgpu whether a buffer is this
    /// device's (see `check_device`).
    probe_layout: OnceLock<wgpu::BindGroupLayout>,
}

/// A kernel and the per-op buffers packed for it.
struct Bound {
    selection: Selection,
    weight: wgpu::Buffer,
    bias: wgpu::Buffer,
    /// The kernel's other per-op buffers (binding, buffer).
    extra: Vec<(u32, wgpu::Buffer)>,
    /// `Params.out_scale`: the inverse of the f16x3 kernel's weight scale, 1 for the others.
    out_scale: f32,
}

impl Bound {
    /// Packs the weights and the bias (`None`: zeros) for the selection's kernel and uploads
    /// them, each buffer in its own error scopes (one the device cannot hold is named).
    fn new(gpu: &Gpu, spec: &Conv2dSpec, selection: Selection, weight: &[f32], bias: Option<&[f32]>) -> Result<Self> {
        let kernel = selection.kernel.config();
        gpu.check_buffer("the packed weights", kernel.packed_bytes(spec), true)?;
        let zeros;
        let bias = match bias {
            Some(b) => b,
            None => {
                zeros = crate::alloc::zeroed_vec::<f32>(spec.out_channels as usize, "the zero bias")?;
                &zeros
            }
        };
        let packed = kernel.pack(spec, weight, bias)?;
        for (_, label, bytes) in &packed.extra {
            gpu.check_buffer(label, bytes.len() as u64, true)?;
        }
        let weight = storage_buffer(gpu, "wgconv weight", &packed.weight)?;
        let bias = match &packed.bias {
            Some(bytes) => storage_buffer(gpu, "wgconv bias", bytes)?,
            None => storage_buffer(gpu, "wgconv bias", bytemuck::cast_slice(bias))?,
        };
        let extra = packed
            .extra
            .iter()
            .map(|(b, label, bytes)| Ok((*b, storage_buffer(gpu, label, bytes)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Bound { selection, weight, bias, extra, out_scale: packed.out_scale })
    }

    /// Whether forwards take turns: the f16 precisions' range flag is one per op.
    fn needs_turns(&self) -> bool {
        self.selection.kernel.precision() != Precision::F32
    }

    /// The same buffers under another selection (the same kernel).
    fn with_selection(&self, selection: Selection) -> Bound {
        Bound {
            selection,
            weight: self.weight.clone(),
            bias: self.bias.clone(),
            extra: self.extra.clone(),
            out_scale: self.out_scale,
        }
    }
}

/// What selecting again at the first forward needs: the weights and the bias as given (to
/// pack them for another kernel), whether the weights are finite, and the options.
struct Pending {
    weight: Vec<f32>,
    bias: Option<Vec<f32>>,
    finite_weights: bool,
    options: Conv2dOptions,
}

/// The op's kernel and buffers once the first forward's selection is settled. Only
/// [`Conv2d::settle`] makes one, and composing ([`Conv2d::prepared`]) takes one: nothing is
/// composed, or cached, for a kernel that the first forward's selection replaces.
#[derive(Clone, Copy)]
struct Settled<'a>(&'a Bound);

/// The bind groups and grids of one `(input, output)` buffer pair: build once, encode many
/// times (the benchmark times exactly this).
pub struct ConvPlan {
    prepared: Arc<Prepared>,
    dispatches: Vec<ChunkDispatch>,
    /// The staging pass's output, the kernel's products where a finishing pass reads them,
    /// and, where layout passes run, the kernel's f32 input and output: one chunk's worth
    /// each, reused chunk after chunk (wgpu orders the dispatches that write and read them).
    _scratch: Vec<wgpu::Buffer>,
    /// Per chunk, the input maximum of the scaled-input kernels (one aligned slot each),
    /// cleared before every compute pass.
    input_max: Option<wgpu::Buffer>,
    /// The problem planned.
    pub problem: ConvProblem,
}

#[cfg(feature = "tune")]
impl crate::timing::EncodePass for ConvPlan {
    fn encode_pass(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        timestamps: Option<wgpu::ComputePassTimestampWrites<'_>>,
    ) {
        self.encode(encoder, timestamps);
    }
}

impl ConvPlan {
    /// Records the dispatches in one compute pass; `timestamps` wrap the whole pass.
    pub fn encode(&self, encoder: &mut wgpu::CommandEncoder, timestamps: Option<wgpu::ComputePassTimestampWrites<'_>>) {
        if let Some(input_max) = &self.input_max {
            encoder.clear_buffer(input_max, 0, None);
        }
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("wgconv conv2d"),
            timestamp_writes: timestamps,
        });
        let p = &self.prepared;
        let (to_kernel, from_kernel) = p.layout_passes.as_ref().map_or((None, None), |(a, b)| (Some(a), Some(b)));
        for chunk in &self.dispatches {
            for (dispatch, pipeline) in [
                (chunk.to_kernel.as_ref(), to_kernel),
                (chunk.input_max.as_ref(), p.input_max.as_ref()),
                (chunk.staging.as_ref(), p.staging.as_ref()),
                (Some(&chunk.main), Some(&p.pipeline)),
                (chunk.finishing.as_ref(), p.finishing.as_ref()),
                (chunk.from_kernel.as_ref(), from_kernel),
            ] {
                if let (Some((bind_group, [x, y])), Some(pipeline)) = (dispatch, pipeline) {
                    pass.set_pipeline(&pipeline.pipeline);
                    pass.set_bind_group(0, bind_group, &[]);
                    pass.dispatch_workgroups(*x, *y, 1);
                }
            }
        }
    }
    /// Chunks the batch was split into.
    pub fn chunks(&self) -> usize {
        self.dispatches.len()
    }
    /// Dispatches the plan records: per chunk the kernel, and where they run its staging,
    /// input-maximum and finishing passes and the layout passes that convert the caller's
    /// tensors (channels last for a kernel of NCHW; f16 for a kernel of f32 tensors, or on a
    /// device without `SHADER_F16`).
    pub fn dispatches(&self) -> usize {
        let d = |c: &ChunkDispatch| {
            let passes = [c.to_kernel.is_some(), c.input_max.is_some(), c.staging.is_some()];
            1 + passes.iter().chain(&[c.finishing.is_some(), c.from_kernel.is_some()]).filter(|&&b| b).count()
        };
        self.dispatches.iter().map(d).sum()
    }
}

/// The alignment of a chunk's binding offsets: the device's, and at least 16 bytes, so that a
/// chunk's distance from its window start (`Params.in_offset` / `out_offset`) keeps the
/// alignment of whole images to 16 bytes (the vec4 stores of whole vec4s of positions;
/// Vulkan allows an alignment of 4).
fn window_alignment(limits: &wgpu::Limits) -> u64 {
    (limits.min_storage_buffer_offset_alignment as u64).max(16)
}

/// Images per chunk so that each chunk's input and output windows (plus the alignment
/// slack of their binding offsets) and its staging scratch (`scratch_per_image` bytes, 0
/// for kernels without a staging pass) fit the binding limit and i32 element arithmetic.
pub(crate) fn images_per_chunk(problem: &ConvProblem, limits: &wgpu::Limits, scratch_per_image: u64) -> Result<u32> {
    let slack = window_alignment(limits);
    // Kernels index bound windows with i32 arithmetic: keep every window under 2^31 elements.
    let cap_elems = (limits.max_storage_buffer_binding_size.saturating_sub(slack) / 4).min(i32::MAX as u64 - slack);
    let per_in = problem.input.per_image();
    let per_out = problem.output.per_image();
    let fit = cap_elems / per_in.max(per_out).max(scratch_per_image.div_ceil(4));
    if fit == 0 {
        let scratch = match scratch_per_image {
            0 => String::new(),
            b => format!(" and {b} B of scratch (the kernel's staged input or its products)"),
        };
        return Err(Error::TooLarge(format!(
            "one image needs {} B of input and {} B of output{scratch}, over the device's binding limit of {} B \
             (max_storage_buffer_binding_size)",
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
        return Err(Error::Unsupported {
            needs: "max_compute_workgroups_per_dimension".into(),
            message: "the device allows no workgroups per dimension (max_compute_workgroups_per_dimension = 0)".into(),
        });
    }
    let x = total.clamp(1, max_per_dim);
    let y = total.div_ceil(x);
    if y > max_per_dim {
        return Err(Error::TooLarge(format!(
            "{total} workgroups exceed {max_per_dim}² even when folded (max_compute_workgroups_per_dimension)"
        )));
    }
    Ok([x, y])
}

fn storage_buffer(gpu: &Gpu, label: &'static str, contents: &[u8]) -> Result<wgpu::Buffer> {
    gpu.buffer_init(label, contents, wgpu::BufferUsages::STORAGE)
}

impl Conv2d {
    /// Uploads the weights (`[C_out, C_in/groups, KH, KW]`) and the bias (`[C_out]`, or
    /// `None` for none: its presence sets [`Conv2dSpec::bias`]) and builds the kernel
    /// selection chose (see [`Conv2d::kernel`]). `gpu` is cloned (cheap: see [`Gpu`]). Where
    /// the options name neither a kernel nor the input shape and a rule that needs the shape
    /// could decide (or [`Conv2dOptions::autotune`] is on), a host copy of the weights and the
    /// bias is kept until the first forward, which selects again with its input shape. With
    /// autotune and the input shape given, the candidates are timed here.
    pub fn new(
        gpu: &Gpu,
        mut spec: Conv2dSpec,
        weight: &[f32],
        bias: Option<&[f32]>,
        options: Conv2dOptions,
    ) -> Result<Self> {
        spec.validate()?;
        gpu.check_alive()?;
        if weight.len() != spec.weight_len() {
            return Err(Error::ShapeMismatch {
                what: "the weight",
                unit: "elements",
                expected: spec.weight_len() as u64,
                got: weight.len() as u64,
            });
        }
        match bias {
            // `with_bias(true)` asked for a bias that is not there: a mistake, not a default.
            None if spec.bias => return Err(Error::spec("the spec has bias = true but no bias was given")),
            Some(b) if b.len() != spec.out_channels as usize => {
                return Err(Error::ShapeMismatch {
                    what: "the bias",
                    unit: "elements",
                    expected: spec.out_channels as u64,
                    got: b.len() as u64,
                })
            }
            _ => {}
        }
        // The bias given decides, as PyTorch's module has one or not.
        spec.bias = bias.is_some();
        if options.autotune {
            if let Some(k) = &options.kernel {
                return Err(Error::InvalidOptions(format!(
                    "Conv2dOptions::autotune times candidate kernels to choose one, but Conv2dOptions::kernel names \
                     {k}: set one or the other"
                )));
            }
            if cfg!(not(feature = "tune")) {
                return Err(Error::InvalidOptions(
                    "Conv2dOptions::autotune needs wgconv's `tune` feature (GPU timing and the autotune cache)".into(),
                ));
            }
        }
        let finite_weights = weight.iter().all(|w| w.is_finite());
        let selection = crate::select::select_on(gpu, &spec, &options, finite_weights)?;
        #[cfg(feature = "tune")]
        let selection = match options.tuning_key_input.filter(|_| options.autotune) {
            Some(input) => {
                let problem = spec.problem(input)?;
                Autotune { gpu, problem: &problem, options: &options, finite_weights, weight, bias }
                    .or_selection(selection)?
            }
            None => selection,
        };
        let initial = Bound::new(gpu, &spec, selection, weight, bias).map_err(|e| gpu.lost_or(e))?;
        // Without the input shape the rules that need it did not apply (nor the autotuner):
        // the first forward's shape decides again.
        let later = crate::select::shape_may_matter(gpu.caps(), &spec, &options)
            || (options.autotune && options.tuning_key_input.is_none());
        let pending = match later {
            false => None,
            true => Some(Pending {
                weight: crate::alloc::copy_of(weight, "the weights kept for the first forward")?,
                bias: bias.map(|b| crate::alloc::copy_of(b, "the bias kept for the first forward")).transpose()?,
                finite_weights,
                options: options.clone(),
            }),
        };
        let range_flag = gpu.buffer_init(
            "wgconv f16 range flag",
            bytemuck::bytes_of(&0u32),
            wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
        )?;
        let range_snapshot = gpu.create_buffer(
            "wgconv f16 range flag snapshot",
            4,
            wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
        )?;
        Ok(Conv2d {
            gpu: gpu.clone(),
            spec,
            activation: options.activation,
            layout: options.layout,
            storage: options.storage,
            initial,
            reselected: OnceLock::new(),
            pending: Mutex::new(pending),
            range_flag,
            range_snapshot,
            forward_lock: Mutex::new(()),
            prepared: Mutex::new(LruCache::new(NonZeroUsize::new(PREPARED_CAPACITY).unwrap_or(NonZeroUsize::MIN))),
            probe_layout: OnceLock::new(),
        })
    }

    /// [`Conv2d::new`] with the weights and the bias as f16 (a model stored in f16). They
    /// are widened to f32 (exactly) and uploaded as `new` uploads them: this version keeps
    /// f32 weights on the device (the bytes [`Storage::F16`] saves are the input's and the
    /// output's, which dominate inference). The tensors' storage is `options.storage`'s,
    /// independent of the weights' type.
    pub fn new_f16(
        gpu: &Gpu,
        spec: Conv2dSpec,
        weight: &[half::f16],
        bias: Option<&[half::f16]>,
        options: Conv2dOptions,
    ) -> Result<Self> {
        use half::slice::HalfFloatSliceExt;
        let widen = |values: &[half::f16], what: &str| -> Result<Vec<f32>> {
            let mut wide = crate::alloc::zeroed_vec::<f32>(values.len(), what)?;
            values.convert_to_f32_slice(&mut wide);
            Ok(wide)
        };
        let weight = widen(weight, "the f32 weights")?;
        let bias = bias.map(|b| widen(b, "the f32 bias")).transpose()?;
        Self::new(gpu, spec, &weight, bias.as_deref(), options)
    }

    /// The convolution.
    pub fn spec(&self) -> &Conv2dSpec {
        &self.spec
    }
    /// The kernel this op runs, where that choice came from, and why: the kernel chosen at
    /// construction, or at the first forward where the options did not name the input shape
    /// (see [`Conv2dOptions::tuning_key_input`]).
    pub fn kernel(&self) -> &Selection {
        &self.bound().selection
    }
    /// The fused activation.
    pub fn activation(&self) -> Activation {
        self.activation
    }
    /// The memory layout of the input and output tensors.
    pub fn layout(&self) -> Layout {
        self.layout
    }
    /// The element type of the input and output tensors.
    pub fn storage(&self) -> Storage {
        self.storage
    }
    /// The device it runs on.
    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// How many input sizes (H, W) this op keeps a composed kernel for (at most
    /// [`PREPARED_CAPACITY`]: the least recently used size is recomposed when it returns).
    pub fn prepared_sizes(&self) -> usize {
        self.prepared.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// The kernel and buffers the op runs now (before the first forward of an op that selects
    /// again there, those chosen at construction).
    fn bound(&self) -> &Bound {
        self.reselected.get().unwrap_or(&self.initial)
    }

    /// The kernel and buffers for a forward of `problem`. Where the options named neither a
    /// kernel nor the input shape, the first call selects again with this input shape (the
    /// f32 matrix rule, the tuning cache, the channels-last configs and the f32 shape rule
    /// need it) and binds the kernel chosen, which every later input runs; where that kernel
    /// cannot be built, the construction's stays, its reason saying why. Concurrent first
    /// calls take turns on the pending slot: the first one's shape decides.
    fn settle(&self, problem: &ConvProblem) -> Settled<'_> {
        let mut slot = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let Some(pending) = slot.take() else {
            return Settled(self.bound());
        };
        let i = problem.input;
        let input = format!("[{}, {}, {}, {}]", i.n, i.c, i.h, i.w);
        let initial = &self.initial;
        let kept = |why: String| {
            log::warn!("{why}; keeping {}", initial.selection.kernel);
            let reason = format!("{}; {why}, so the kernel chosen at construction runs", initial.selection.reason);
            initial.with_selection(Selection { reason, ..initial.selection.clone() })
        };
        let options = Conv2dOptions { tuning_key_input: Some(i), ..pending.options };
        let selected = crate::select::select_on(&self.gpu, &self.spec, &options, pending.finite_weights);
        #[cfg(feature = "tune")]
        let selected = match selected {
            Ok(s) if options.autotune => {
                let (weight, bias) = (&pending.weight, pending.bias.as_deref());
                let finite_weights = pending.finite_weights;
                Autotune { gpu: &self.gpu, problem, options: &options, finite_weights, weight, bias }.or_selection(s)
            }
            other => other,
        };
        let bound = match selected {
            Err(e) => kept(format!("selecting again at the first forward (input {input}) failed: {e}")),
            Ok(s) => {
                let reason = format!("{} (selected at the first forward, input {input})", s.reason);
                let selection = Selection { reason, ..s };
                if selection.kernel == initial.selection.kernel {
                    initial.with_selection(selection)
                } else {
                    let kernel = selection.kernel.clone();
                    match Bound::new(&self.gpu, &self.spec, selection, &pending.weight, pending.bias.as_deref()) {
                        Ok(bound) => {
                            // No bind group holds them (every plan settles first, and this
                            // call holds the slot): the device memory goes back now.
                            initial.weight.destroy();
                            initial.bias.destroy();
                            initial.extra.iter().for_each(|(_, b)| b.destroy());
                            bound
                        }
                        Err(e) => kept(format!(
                            "the first forward (input {input}) selected {kernel}, which could not be built: {e}"
                        )),
                    }
                }
            }
        };
        // The slot's lock is held until the kernel is set: no caller sees the pending slot
        // empty and the construction's kernel as settled.
        Settled(self.reselected.get_or_init(|| bound))
    }

    /// The kernel composed for a problem's input size (cached per (H, W)).
    // On wasm32 wgpu's handles are neither Send nor Sync (the browser's WebGPU lives on one
    // thread), so `Prepared` is not either there; the Arc is for native threads.
    #[cfg_attr(target_arch = "wasm32", allow(clippy::arc_with_non_send_sync))]
    fn prepared(&self, settled: Settled<'_>, problem: &ConvProblem) -> Result<Arc<Prepared>> {
        let key = (problem.input.h, problem.input.w);
        let mut map = self.prepared.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = map.get(&key) {
            return Ok(p.clone());
        }
        let kernel = &settled.0.selection.kernel;
        let limits = self.gpu.kernel_limits();
        // The caller's tensors as the kernel reads them itself where its family can (f16
        // ones only with SHADER_F16: the kernels read them as WGSL f16), else the nearest
        // form it reads: the caller's layout in f32, then NCHW f32.
        let wanted = TensorForm {
            channels_last: self.layout == Layout::Nhwc,
            f16: crate::select::f16_tensors_in_kernels(self.gpu.caps(), self.storage),
        };
        let mut forms = vec![wanted, TensorForm { f16: false, ..wanted }];
        forms.dedup();
        let mut native = None;
        for form in forms.into_iter().filter(|&f| f != TensorForm::NCHW_F32) {
            if let Some(shaped) = kernel.config().shape_native(problem, &limits, form).transpose()? {
                native = Some((shaped, form));
                break;
            }
        }
        let (shaped, form) = match native {
            Some(native) => native,
            None => (kernel.config().shape(problem, &limits)?, TensorForm::NCHW_F32),
        };
        // Layout passes rewrite channels-last tensors for a kernel of NCHW and convert f16
        // tensors for a kernel of f32 (keeping the layout of a kernel that reads
        // channels-last itself).
        let transpose = self.layout == Layout::Nhwc && !form.channels_last;
        let f16 = self.storage == Storage::F16 && !form.f16;
        let needs_layout_passes = transpose || f16;
        let tables = shaped.tables()?;
        for (_, label, bytes) in &tables {
            self.gpu.check_buffer(label, bytes.len() as u64, true)?;
        }
        let pipeline = self.gpu.pipelines().get_or_build(
            &self.gpu.device,
            shaped.source()?,
            bindings(kernel),
            self.gpu.runtime_checks(),
        )?;
        let staging = match shaped.staging() {
            None => None,
            Some(s) => {
                let mut b = vec![0, 1, 5];
                if kernel.precision() != Precision::F32 {
                    b.push(6);
                }
                if s.scaled_input {
                    b.push(INPUT_MAX_BINDING);
                }
                Some(self.gpu.pipelines().get_or_build(
                    &self.gpu.device,
                    s.source.clone(),
                    b,
                    self.gpu.runtime_checks(),
                )?)
            }
        };
        let finishing = match shaped.finishing() {
            None => None,
            Some(f) => {
                let mut b = vec![0, 1, 3, 5];
                if kernel.precision() != Precision::F32 {
                    b.push(6);
                }
                if f.direct_fallback {
                    b.extend([FINISHING_INPUT_BINDING, FINISHING_WEIGHT_BINDING]);
                }
                Some(self.gpu.pipelines().get_or_build(
                    &self.gpu.device,
                    f.source.clone(),
                    b,
                    self.gpu.runtime_checks(),
                )?)
            }
        };
        let input_max = match shaped.staging().is_some_and(|s| s.scaled_input) {
            false => None,
            true => Some(self.gpu.pipelines().get_or_build(
                &self.gpu.device,
                crate::kernel::input_max_pass_source(form.f16)?,
                vec![0, 1, INPUT_MAX_WRITE_BINDING],
                self.gpu.runtime_checks(),
            )?),
        };
        let (i, o) = (problem.input, problem.output);
        let tiled = |c| crate::kernel::layout_pass_tiled(transpose, c, self.gpu.tiled_layout_passes());
        let layout_tiled = [tiled(i.c), tiled(o.c)];
        let layout_passes = match needs_layout_passes {
            false => None,
            true => {
                let build = |into_kernel: bool, tiled: bool, [c, h, w]: [u32; 3]| {
                    let src = crate::kernel::layout_pass_source(into_kernel, transpose, tiled, f16, [c, h, w])?;
                    self.gpu.pipelines().get_or_build(&self.gpu.device, src, vec![0, 1, 5], self.gpu.runtime_checks())
                };
                Some((build(true, layout_tiled[0], [i.c, i.h, i.w])?, build(false, layout_tiled[1], [o.c, o.h, o.w])?))
            }
        };
        let tables = tables
            .iter()
            .map(|(b, label, bytes)| Ok((*b, storage_buffer(&self.gpu, label, bytes)?)))
            .collect::<Result<Vec<_>>>()?;
        let prepared =
            Arc::new(Prepared { shaped, pipeline, staging, input_max, finishing, layout_passes, layout_tiled, tables });
        map.put(key, prepared.clone());
        Ok(prepared)
    }

    /// Bind groups for running on `input` (`shape`, in the op's [`Layout`]: NCHW by
    /// default) into `output` (`[N, C_out, OH, OW]`, or `[N, OH, OW, C_out]` under
    /// [`Layout::Nhwc`]), both of the op's [`Storage`] (f32 by default; packed f16 under
    /// [`Storage::F16`], 2 bytes per element, the size rounded up to 4): two different
    /// buffers of this op's device, both with `STORAGE` usage. Anything else is refused
    /// with [`Error::Buffer`] before a bind group is made (a buffer of another device is
    /// recognised where both devices come from [`crate::shared_instance`], as every
    /// [`Gpu::new`] device does). A buffer still mapped cannot be recognised here (wgpu 30
    /// does not say): the submission that uses it is refused. Like every forward, the first
    /// plan of an op whose options named neither a kernel nor the input shape settles its
    /// kernel (see [`Conv2d::kernel`]).
    pub fn plan(&self, shape: Shape4, input: &wgpu::Buffer, output: &wgpu::Buffer) -> Result<ConvPlan> {
        self.gpu.check_alive()?;
        self.build_plan(shape, input, output).map_err(|e| self.gpu.lost_or(e))
    }

    /// [`Conv2d::plan`] on a device not known to be lost.
    fn build_plan(&self, shape: Shape4, input: &wgpu::Buffer, output: &wgpu::Buffer) -> Result<ConvPlan> {
        let problem = self.spec.problem(shape)?;
        // One buffer bound twice, read-only and read-write, is a usage conflict that wgpu
        // reports only when the caller's encoder is finished (a panic there).
        if input == output {
            return Err(Error::Buffer { buffer: "output", issue: BufferIssue::SameAsInput });
        }
        let element_bytes = self.storage.element_bytes();
        for (what, buf, elems) in [("input", input, problem.input.len()), ("output", output, problem.output.len())] {
            if !buf.usage().contains(wgpu::BufferUsages::STORAGE) {
                return Err(Error::Buffer {
                    buffer: what,
                    issue: BufferIssue::missing(wgpu::BufferUsages::STORAGE, buf),
                });
            }
            // Bound as 32-bit words: f16 tensors of an odd length end in half a word.
            let needed = elems.saturating_mul(element_bytes).next_multiple_of(4);
            if buf.size() < needed {
                return Err(Error::Buffer { buffer: what, issue: BufferIssue::TooSmall { needed, size: buf.size() } });
            }
            self.check_device(what, buf)?;
        }
        // After the checks: a call refused for its buffers does not decide the kernel.
        let settled = self.settle(&problem);
        let bound = settled.0;
        let limits = self.gpu.device.limits();
        let prepared = self.prepared(settled, &problem)?;
        let scratch_bytes = prepared.scratch_per_image().max(prepared.finishing_per_image());
        let per_chunk = images_per_chunk(&problem, &limits, scratch_bytes)?;
        let align = window_alignment(&limits);
        let scratch = match prepared.scratch_per_image() {
            0 => None,
            per_image => Some(self.gpu.create_buffer(
                "wgconv staged input",
                per_image * per_chunk as u64,
                wgpu::BufferUsages::STORAGE,
            )?),
        };
        // The kernel's output where a finishing pass writes the output from it.
        let products = match prepared.finishing_per_image() {
            0 => None,
            per_image => Some(self.gpu.create_buffer(
                "wgconv kernel products",
                per_image * per_chunk as u64,
                wgpu::BufferUsages::STORAGE,
            )?),
        };
        // Layout passes: the kernel reads and writes f32 scratch buffers in its own layout.
        let kernel_io = match prepared.layout_passes {
            None => None,
            Some(_) => {
                let bytes = |per_image: u64| per_image * 4 * per_chunk as u64;
                let usage = wgpu::BufferUsages::STORAGE;
                Some((
                    self.gpu.create_buffer("wgconv kernel input", bytes(problem.input.per_image()), usage)?,
                    self.gpu.create_buffer("wgconv kernel output", bytes(problem.output.per_image()), usage)?,
                ))
            }
        };
        // One word per chunk for the input maximum, each at an aligned binding offset.
        let input_max_slot = align.max(4);
        let input_max_buffer = match prepared.input_max {
            None => None,
            Some(_) => Some(self.gpu.create_buffer(
                "wgconv input maximum",
                problem.input.n.div_ceil(per_chunk) as u64 * input_max_slot,
                wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            )?),
        };
        // The problem's spec: its padding is resolved for this input size.
        let s = &problem.spec;
        let scope = ErrorScope::push(&self.gpu.device);
        let mut dispatches = Vec::new();
        // A dispatch of `workgroups` (one chunk's), folded into two dimensions.
        let grid_of =
            |workgroups: u64| fold_grid(workgroups_u32(workgroups)?, limits.max_compute_workgroups_per_dimension);
        let mut first = 0u32;
        while first < problem.input.n {
            let batch = per_chunk.min(problem.input.n - first);
            // The chunk's window: from the aligned offset at or before its start, to its end
            // rounded up to a whole 32-bit word (the rest of an f16 word belongs to the next
            // chunk, or is the buffer's padding); the start's distance in elements.
            let window = |per_image: u64| {
                let start = first as u64 * per_image * element_bytes;
                let aligned = start - start % align;
                let size = ((start - aligned) + batch as u64 * per_image * element_bytes).next_multiple_of(4);
                (aligned, size, ((start - aligned) / element_bytes) as u32)
            };
            let (in_at, in_size, in_offset) = window(problem.input.per_image());
            let (out_at, out_size, out_offset) = window(problem.output.per_image());
            let params = ConvParams {
                c_in: problem.input.c,
                h: problem.input.h,
                w: problem.input.w,
                c_out: problem.output.c,
                oh: problem.output.h,
                ow: problem.output.w,
                batch,
                m_total: batch * problem.output.h * problem.output.w,
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
                flags: (if self.activation == Activation::Relu { FLAG_RELU } else { 0 })
                    | (s.padding_mode.code() << PAD_MODE_SHIFT),
                out_scale: bound.out_scale,
            };
            // The parameters the kernel reads (a family running a derived problem between its
            // passes has its own); the other passes read the convolution's.
            let used = match &kernel_io {
                None => params,
                Some(_) => ConvParams { in_offset: 0, out_offset: 0, ..params },
            };
            let main_params = prepared.shaped.kernel_params(&used);
            let (grid_bytes, workgroups) = prepared.shaped.grid(&main_params)?;
            let grid = grid_of(workgroups)?;
            let io_uniform =
                self.gpu.buffer_init("wgconv params", bytemuck::bytes_of(&params), wgpu::BufferUsages::UNIFORM)?;
            fn bind_range(buffer: &wgpu::Buffer, offset: u64, size: u64) -> wgpu::BindingResource<'_> {
                wgpu::BindingResource::Buffer(wgpu::BufferBinding { buffer, offset, size: wgpu::BufferSize::new(size) })
            }
            // What the kernel (and its staging pass) reads and writes: the caller's windows,
            // or with layout passes the f32 scratch buffers, from their start.
            let (uniform, input_range, output_range, to_kernel, from_kernel) = match &kernel_io {
                None => {
                    (io_uniform, bind_range(input, in_at, in_size), bind_range(output, out_at, out_size), None, None)
                }
                Some((kernel_in, kernel_out)) => {
                    let kernel_params = ConvParams { in_offset: 0, out_offset: 0, ..params };
                    let uniform = self.gpu.buffer_init(
                        "wgconv params",
                        bytemuck::bytes_of(&kernel_params),
                        wgpu::BufferUsages::UNIFORM,
                    )?;
                    let (to_kernel, from_kernel) =
                        prepared.layout_passes.as_ref().map(|(a, b)| (a, b)).ok_or_else(|| Error::Wgpu {
                            stage: "planning",
                            message: "the layout passes were not prepared".into(),
                        })?;
                    let pass =
                        |pipeline: &Pipeline, src, dst, invocations: u64| -> Result<(wgpu::BindGroup, [u32; 2])> {
                            let bind_group = self.gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
                                label: Some("wgconv layout pass"),
                                layout: &pipeline.layout,
                                entries: &[
                                    wgpu::BindGroupEntry { binding: 0, resource: io_uniform.as_entire_binding() },
                                    wgpu::BindGroupEntry { binding: 1, resource: src },
                                    wgpu::BindGroupEntry { binding: 5, resource: dst },
                                ],
                            });
                            Ok((bind_group, grid_of(invocations.div_ceil(crate::kernel::LAYOUT_PASS_WG as u64))?))
                        };
                    let tiled = |on: bool, s: crate::spec::Shape4| {
                        on.then(|| {
                            crate::kernel::layout_transpose_workgroups(batch, [s.c, s.h, s.w])
                                * crate::kernel::LAYOUT_PASS_WG as u64
                        })
                    };
                    let in_invocations = tiled(prepared.layout_tiled[0], problem.input)
                        .unwrap_or(batch as u64 * problem.input.per_image());
                    let before = pass(
                        to_kernel,
                        bind_range(input, in_at, in_size),
                        kernel_in.as_entire_binding(),
                        in_invocations,
                    )?;
                    let out_elems = batch as u64 * problem.output.per_image();
                    let out_invocations = match (tiled(prepared.layout_tiled[1], problem.output), self.storage) {
                        (Some(tiled), _) => tiled,
                        // One per word of the window holding an element of the chunk.
                        (None, Storage::F16) => (out_offset as u64 + out_elems).div_ceil(2) - out_offset as u64 / 2,
                        (None, Storage::F32) => out_elems,
                    };
                    let after = pass(
                        from_kernel,
                        kernel_out.as_entire_binding(),
                        bind_range(output, out_at, out_size),
                        out_invocations,
                    )?;
                    (uniform, kernel_in.as_entire_binding(), kernel_out.as_entire_binding(), Some(before), Some(after))
                }
            };
            let input_max_word =
                input_max_buffer.as_ref().map(|b| bind_range(b, dispatches.len() as u64 * input_max_slot, 4));
            let mut input_max = None;
            if let (Some(word), Some(pipeline)) = (&input_max_word, &prepared.input_max) {
                let bind_group = self.gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: Some("wgconv input maximum"),
                    layout: &pipeline.layout,
                    entries: &[
                        wgpu::BindGroupEntry { binding: 0, resource: uniform.as_entire_binding() },
                        wgpu::BindGroupEntry { binding: 1, resource: input_range.clone() },
                        wgpu::BindGroupEntry { binding: INPUT_MAX_WRITE_BINDING, resource: word.clone() },
                    ],
                });
                let elements = batch as u64 * problem.input.per_image();
                input_max = Some((bind_group, grid_of(crate::kernel::input_max_workgroups(elements))?));
            }
            let mut staging = None;
            if let (Some(scratch), Some(pipeline), Some(s)) = (&scratch, &prepared.staging, prepared.shaped.staging()) {
                let mut entries = vec![
                    wgpu::BindGroupEntry { binding: 0, resource: uniform.as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 1, resource: input_range.clone() },
                    wgpu::BindGroupEntry { binding: 5, resource: scratch.as_entire_binding() },
                ];
                if bound.selection.kernel.precision() != Precision::F32 {
                    entries.push(wgpu::BindGroupEntry { binding: 6, resource: self.range_flag.as_entire_binding() });
                }
                if let Some(word) = &input_max_word {
                    entries.push(wgpu::BindGroupEntry { binding: INPUT_MAX_BINDING, resource: word.clone() });
                }
                let bind_group = self.gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: Some("wgconv staging"),
                    layout: &pipeline.layout,
                    entries: &entries,
                });
                let invocations = s.invocations_per_image * batch as u64;
                staging = Some((bind_group, grid_of(invocations.div_ceil(s.workgroup_size as u64))?));
            }
            let finishing_input = input_range.clone();
            let main_input = match &scratch {
                Some(scratch) => scratch.as_entire_binding(),
                None => input_range,
            };
            let main_uniform = match bytemuck::bytes_of(&main_params) == bytemuck::bytes_of(&used) {
                true => None,
                false => Some(self.gpu.buffer_init(
                    "wgconv kernel params",
                    bytemuck::bytes_of(&main_params),
                    wgpu::BufferUsages::UNIFORM,
                )?),
            };
            let mut finishing = None;
            let main_output = match (&products, &prepared.finishing, prepared.shaped.finishing()) {
                (Some(products), Some(pipeline), Some(f)) => {
                    let mut entries = vec![
                        wgpu::BindGroupEntry { binding: 0, resource: uniform.as_entire_binding() },
                        wgpu::BindGroupEntry { binding: 1, resource: products.as_entire_binding() },
                        wgpu::BindGroupEntry { binding: 3, resource: bound.bias.as_entire_binding() },
                        wgpu::BindGroupEntry { binding: 5, resource: output_range },
                    ];
                    if bound.selection.kernel.precision() != Precision::F32 {
                        entries
                            .push(wgpu::BindGroupEntry { binding: 6, resource: self.range_flag.as_entire_binding() });
                    }
                    if f.direct_fallback {
                        let weight =
                            bound.extra.iter().find(|(b, _)| *b == FINISHING_WEIGHT_BINDING).ok_or_else(|| {
                                Error::Wgpu {
                                    stage: "planning",
                                    message: "the weights as given were not packed".into(),
                                }
                            })?;
                        entries
                            .push(wgpu::BindGroupEntry { binding: FINISHING_INPUT_BINDING, resource: finishing_input });
                        entries.push(wgpu::BindGroupEntry {
                            binding: FINISHING_WEIGHT_BINDING,
                            resource: weight.1.as_entire_binding(),
                        });
                    }
                    let bind_group = self.gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
                        label: Some("wgconv finishing"),
                        layout: &pipeline.layout,
                        entries: &entries,
                    });
                    let invocations = f.invocations_per_image * batch as u64;
                    finishing = Some((bind_group, grid_of(invocations.div_ceil(f.workgroup_size as u64))?));
                    products.as_entire_binding()
                }
                _ => output_range,
            };
            let mut entries = vec![
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: main_uniform.as_ref().unwrap_or(&uniform).as_entire_binding(),
                },
                wgpu::BindGroupEntry { binding: 1, resource: main_input },
                wgpu::BindGroupEntry { binding: 2, resource: bound.weight.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 3, resource: bound.bias.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 5, resource: main_output },
            ];
            for (binding, buf) in bound.extra.iter().chain(&prepared.tables) {
                entries.push(wgpu::BindGroupEntry { binding: *binding, resource: buf.as_entire_binding() });
            }
            let grid_uniform = match grid_bytes.is_empty() {
                true => None,
                false => Some(self.gpu.buffer_init("wgconv grid", &grid_bytes, wgpu::BufferUsages::UNIFORM)?),
            };
            if let Some(g) = &grid_uniform {
                entries.push(wgpu::BindGroupEntry { binding: GRID_BINDING, resource: g.as_entire_binding() });
            }
            if bound.selection.kernel.precision() != Precision::F32 {
                entries.push(wgpu::BindGroupEntry { binding: 6, resource: self.range_flag.as_entire_binding() });
            }
            if let Some(word) = input_max_word {
                entries.push(wgpu::BindGroupEntry { binding: INPUT_MAX_BINDING, resource: word });
            }
            let bind_group = self.gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("wgconv conv2d"),
                layout: &prepared.pipeline.layout,
                entries: &entries,
            });
            dispatches.push(ChunkDispatch {
                to_kernel,
                input_max,
                staging,
                main: (bind_group, grid),
                finishing,
                from_kernel,
            });
            first += batch;
        }
        scope.finish("bind group creation")?;
        let scratch =
            scratch.into_iter().chain(products).chain(kernel_io.into_iter().flat_map(|(a, b)| [a, b])).collect();
        Ok(ConvPlan { prepared, dispatches, _scratch: scratch, input_max: input_max_buffer, problem })
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

    /// Runs on host data: uploads `input` (`shape`, NCHW or as [`Conv2dOptions::layout`]
    /// says), returns `[N, C_out, OH, OW]` (or `[N, OH, OW, C_out]` under [`Layout::Nhwc`]).
    /// Batches larger than the device's binding limit run chunk by chunk. For an op of
    /// f32 [`Storage`] (the default; [`Conv2d::forward_f16`] for f16).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn forward(&self, input: &[f32], shape: Shape4) -> Result<Vec<f32>> {
        let (problem, settled) = self.start(Storage::F32, shape, input.len())?;
        let _turn = self.turn(settled);
        pollster::block_on(self.forward_chunks(settled, input, &problem))
    }

    /// [`Conv2d::forward`] without blocking (the browser's way). With an f16 or f16x3 kernel,
    /// a second call on the same op while one is in flight is refused (the two would share
    /// the op's range flag; waiting for the lock could block the only thread).
    pub async fn forward_async(&self, input: &[f32], shape: Shape4) -> Result<Vec<f32>> {
        let (problem, settled) = self.start(Storage::F32, shape, input.len())?;
        let _turn = self.try_turn(settled)?;
        self.forward_chunks(settled, input, &problem).await
    }

    /// [`Conv2d::forward`] on f16 tensors, for an op of [`Storage::F16`]: the input is
    /// uploaded and the output read back as f16 (half the bytes of f32), read and written
    /// as f16 by the kernels that can, converted on the device for the others (see
    /// [`Storage::F16`]).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn forward_f16(&self, input: &[half::f16], shape: Shape4) -> Result<Vec<half::f16>> {
        let (problem, settled) = self.start(Storage::F16, shape, input.len())?;
        let _turn = self.turn(settled);
        pollster::block_on(self.forward_chunks(settled, input, &problem))
    }

    /// [`Conv2d::forward_f16`] without blocking (as [`Conv2d::forward_async`]).
    pub async fn forward_f16_async(&self, input: &[half::f16], shape: Shape4) -> Result<Vec<half::f16>> {
        let (problem, settled) = self.start(Storage::F16, shape, input.len())?;
        let _turn = self.try_turn(settled)?;
        self.forward_chunks(settled, input, &problem).await
    }

    /// A forward's problem and kernel, after its slices' element type and length are checked
    /// (a refused call does not decide the kernel).
    fn start(&self, slices: Storage, shape: Shape4, input_len: usize) -> Result<(ConvProblem, Settled<'_>)> {
        self.check_storage(slices)?;
        let problem = self.spec.problem(shape)?;
        if input_len as u64 != problem.input.len() {
            return Err(Error::ShapeMismatch {
                what: "the input",
                unit: "elements",
                expected: problem.input.len(),
                got: input_len as u64,
            });
        }
        let settled = self.settle(&problem);
        Ok((problem, settled))
    }

    /// Refuses a forward on host slices of another element type than the op's storage,
    /// naming the method that fits.
    fn check_storage(&self, slices: Storage) -> Result<()> {
        match (self.storage, slices) {
            (op, given) if op == given => Ok(()),
            (Storage::F16, _) => Err(Error::InvalidOptions(
                "this op stores its tensors as f16 (Storage::F16): call forward_f16 or forward_f16_async with \
                 half::f16 slices"
                    .into(),
            )),
            (op, _) => Err(Error::InvalidOptions(format!(
                "this op stores its tensors as {op}: call forward or forward_async with f32 slices, or build the op \
                 with Conv2dOptions::storage(Storage::F16) for forward_f16"
            ))),
        }
    }

    /// A blocking forward's turn: calls from several threads take turns where the op's
    /// kernel has a range flag (one per op, shared by the f16 precisions' forwards).
    #[cfg(not(target_arch = "wasm32"))]
    fn turn(&self, settled: Settled<'_>) -> Option<MutexGuard<'_, ()>> {
        settled.0.needs_turns().then(|| self.forward_lock.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// An async forward's turn, or `Busy` while another holds it.
    fn try_turn(&self, settled: Settled<'_>) -> Result<Option<MutexGuard<'_, ()>>> {
        match settled.0.needs_turns() {
            false => Ok(None),
            true => self.try_take_turn().map(Some),
        }
    }

    /// The op's turn, or `Busy` while a forward or a flag read holds it.
    fn try_take_turn(&self) -> Result<MutexGuard<'_, ()>> {
        match self.forward_lock.try_lock() {
            Ok(guard) => Ok(guard),
            Err(TryLockError::Poisoned(e)) => Ok(e.into_inner()),
            Err(TryLockError::WouldBlock) => Err(Error::Busy(format!(
                "another forward (or range-flag read) of this {} op is in flight: await it first, or use one \
                 Conv2d per task",
                self.bound().selection.kernel.precision()
            ))),
        }
    }

    /// The forward pass of `problem`, chunk by chunk, on slices of the op's storage (`T`: f32
    /// or f16); the caller holds the turn where one is needed.
    async fn forward_chunks<T: bytemuck::Pod>(
        &self,
        settled: Settled<'_>,
        input: &[T],
        problem: &ConvProblem,
    ) -> Result<Vec<T>> {
        self.gpu.check_alive()?;
        self.forward_chunks_on(settled, input, problem).await.map_err(|e| self.gpu.lost_or(e))
    }

    /// [`Conv2d::forward_chunks`] on a device not known to be lost.
    async fn forward_chunks_on<T: bytemuck::Pod>(
        &self,
        settled: Settled<'_>,
        input: &[T],
        problem: &ConvProblem,
    ) -> Result<Vec<T>> {
        let prepared = self.prepared(settled, problem)?;
        let scratch_per_image = prepared.scratch_per_image().max(prepared.finishing_per_image());
        let per_chunk = images_per_chunk(problem, &self.gpu.device.limits(), scratch_per_image)?;
        let (in_img, out_img) = (problem.input.per_image() as usize, problem.output.per_image() as usize);
        let chunk_in = Shape4 { n: per_chunk, ..problem.input };
        let dev = &self.gpu.device;
        // Buffers, copies and read-backs are whole 32-bit words: an f16 chunk of an odd
        // length ends in half a word.
        let element = std::mem::size_of::<T>();
        // The whole output in host memory, whose sizes count in usize (32 bits on wasm32):
        // with its bytes in range, so are every chunk's below.
        let out_bytes = problem.output.len().saturating_mul(element as u64).next_multiple_of(4);
        if usize::try_from(out_bytes).is_err() {
            return Err(Error::TooLarge(format!(
                "the output {} needs {out_bytes} B, more than this {}-bit host addresses",
                problem.output,
                usize::BITS
            )));
        }
        let word_bytes = |elems: usize| (elems * element).next_multiple_of(4);
        // Each buffer in its own error scopes: one the device cannot hold is named.
        let in_buf = self
            .gpu
            .create_buffer_async(
                "wgconv input",
                word_bytes(per_chunk as usize * in_img) as u64,
                wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            )
            .await?;
        let out_buf = self
            .gpu
            .create_buffer_async(
                "wgconv output",
                word_bytes(per_chunk as usize * out_img) as u64,
                wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
            )
            .await?;
        // The whole output, reserved once, and the rest of a last half-filled word; each
        // chunk is read straight into its part, whole words (the rest of its last word is
        // the next chunk's to overwrite, or cut off at the end).
        let total = problem.output.len() as usize;
        let mut out = crate::alloc::zeroed_vec::<T>(word_bytes(total) / element, "the output")?;
        let mut done = 0usize;
        for chunk in input.chunks(per_chunk as usize * in_img) {
            let n = (chunk.len() / in_img) as u32;
            let scope = ErrorScope::push(dev);
            let bytes: &[u8] = bytemuck::cast_slice(chunk);
            let whole = bytes.len() - bytes.len() % 4;
            if whole > 0 {
                self.gpu.queue.write_buffer(&in_buf, 0, &bytes[..whole]);
            }
            if whole < bytes.len() {
                let mut last = [0u8; 4];
                last[..bytes.len() - whole].copy_from_slice(&bytes[whole..]);
                self.gpu.queue.write_buffer(&in_buf, whole as u64, &last);
            }
            let plan = self.plan(Shape4 { n, ..chunk_in }, &in_buf, &out_buf)?;
            let mut enc = dev.create_command_encoder(&Default::default());
            // A flag left by earlier `encode` work is not this call's business.
            enc.clear_buffer(&self.range_flag, 0, None);
            plan.encode(&mut enc, None);
            self.gpu.queue.submit([enc.finish()]);
            scope.finish_async("dispatch").await?;
            let len = n as usize * out_img;
            let read = word_bytes(len) / element;
            self.gpu.read_buffer_into_async::<T>(&out_buf, 0, &mut out[done..done + read]).await?;
            done += len;
            if self.read_range_flag().await? {
                return Err(Error::F16Range { what: "the input", detail: String::new() });
            }
        }
        out.truncate(total);
        Ok(out)
    }

    /// Refuses a buffer of another device. wgpu checks that a bind group's buffers belong to
    /// its device (in one instance; buffer ids of separate instances can collide, which is
    /// why `Gpu::new` opens every device on the shared instance): a bind group of this one
    /// buffer, under an error scope, asks it.
    fn check_device(&self, what: &'static str, buffer: &wgpu::Buffer) -> Result<()> {
        let layout = self.probe_layout.get_or_init(|| {
            self.gpu.device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: Some("wgconv buffer probe"),
                entries: &[wgpu::BindGroupLayoutEntry {
                    binding: 0,
                    visibility: wgpu::ShaderStages::COMPUTE,
                    ty: wgpu::BindingType::Buffer {
                        ty: wgpu::BufferBindingType::Storage { read_only: true },
                        has_dynamic_offset: false,
                        min_binding_size: None,
                    },
                    count: None,
                }],
            })
        });
        let scope = ErrorScope::push(&self.gpu.device);
        // The caller checked that the buffer holds at least one element.
        let size = wgpu::BufferSize::new(4);
        let _probe = self.gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("wgconv buffer probe"),
            layout,
            entries: &[wgpu::BindGroupEntry {
                binding: 0,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding { buffer, offset: 0, size }),
            }],
        });
        match scope.finish("buffer check") {
            Ok(()) => Ok(()),
            Err(Error::Wgpu { message, .. }) if message.contains("doesn't match") => {
                Err(Error::Buffer { buffer: what, issue: BufferIssue::ForeignDevice(self.gpu.info.name.clone()) })
            }
            Err(e) => Err(e),
        }
    }

    /// Whether an f16 or f16x3 kernel met an input value beyond f16's range since the last
    /// call (and clears the flag). `forward` checks it itself; callers of `encode` / `plan`
    /// with [`Precision::F16Accum32`] or [`Precision::F16x3`] check it after their work
    /// completes, and before this op's next `forward`, which clears a flag left by earlier
    /// work: a flagged result must not be used. It waits for a `forward` of this op in
    /// flight on another thread (whose flag is that forward's to report; so never call it
    /// while a future of this op's async calls is held unfinished on the same thread).
    /// Always `false` for f32 kernels.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn take_range_flag(&self) -> Result<bool> {
        if self.bound().selection.kernel.precision() == Precision::F32 {
            return Ok(false);
        }
        self.gpu.check_alive()?;
        let _turn = self.forward_lock.lock().unwrap_or_else(|e| e.into_inner());
        pollster::block_on(self.read_range_flag()).map_err(|e| self.gpu.lost_or(e))
    }

    /// [`Conv2d::take_range_flag`] without blocking: `Busy` while a `forward` of this op (or
    /// another flag read) is in flight.
    // The turn is taken with `try_lock` (a contended call gets `Busy`, never waits), and the
    // future stays on its thread anyway: wgpu's error scopes, which it opens, are per thread.
    #[allow(clippy::await_holding_lock)]
    pub async fn take_range_flag_async(&self) -> Result<bool> {
        if self.bound().selection.kernel.precision() == Precision::F32 {
            return Ok(false);
        }
        self.gpu.check_alive()?;
        let _turn = self.try_take_turn()?;
        self.read_range_flag().await.map_err(|e| self.gpu.lost_or(e))
    }

    /// Reads and clears the range flag; the caller holds the turn.
    async fn read_range_flag(&self) -> Result<bool> {
        if self.bound().selection.kernel.precision() == Precision::F32 {
            return Ok(false);
        }
        // Snapshot and clear in one submission: work queued in between is not lost.
        let mut enc = self.gpu.device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(&self.range_flag, 0, &self.range_snapshot, 0, 4);
        enc.clear_buffer(&self.range_flag, 0, None);
        self.gpu.queue.submit([enc.finish()]);
        let flag = self.gpu.read_buffer_async::<u32>(&self.range_snapshot, 0, 1).await?;
        Ok(flag.first().copied().unwrap_or(0) != 0)
    }
}

/// Timed rounds of the autotuner (one run of each candidate per round), after
/// [`AUTOTUNE_WARMUP`] untimed ones: each candidate's median decides.
#[cfg(feature = "tune")]
const AUTOTUNE_ROUNDS: u32 = 7;
/// Untimed rounds of runs before the timed ones.
#[cfg(feature = "tune")]
const AUTOTUNE_WARMUP: u32 = 2;
/// How much faster than the selection's own kernel another must be timed to replace it (as
/// the seed's micro-tuning stage reverts a gain under 1–2 %): on the H100 the interleaved
/// medians of kernels of about 0.03 ms moved by a few percent between a layer's autotune and
/// its benchmark, and picks 0.3–2 % ahead of the selection ran 4 % slower than it in the
/// benchmark (MobileNetV2's 1×1 layers at N = 32, 2026-11-28).
#[cfg(feature = "tune")]
const AUTOTUNE_MIN_GAIN: f64 = 0.02;
/// How long a GPU (not a CPU adapter) is kept busy before the candidates' timed runs, so that
/// its clock is up (`timing::keep_busy`): building their pipelines leaves it idle for a
/// second or two. The candidates are then timed in interleaved rounds
/// (`timing::time_interleaved`): timed one after the other after such a pause, with 20 ms
/// or 150 ms of spin-up, the first one (the rules' own kernel) measured 2–4× its time on an
/// H100 in some layers and a slower candidate won.
#[cfg(feature = "tune")]
const AUTOTUNE_SPIN_UP: std::time::Duration = std::time::Duration::from_millis(100);

/// The relative L2 distance within which a candidate's output must come to the selection's
/// kernel's on the autotuner's scratch input: twice the precision's bound against the exact
/// result (both kernels are within it).
#[cfg(feature = "tune")]
fn autotune_agreement(precision: Precision) -> f64 {
    match precision {
        Precision::F16Accum32 => 2e-3,
        Precision::F32 | Precision::F16x3 => 2e-5,
    }
}

/// The autotune cache's key of a problem on this device under these options.
#[cfg(feature = "tune")]
fn autotune_key(
    gpu: &Gpu,
    problem: &ConvProblem,
    options: &Conv2dOptions,
    finite_weights: bool,
) -> crate::cache::AutotuneKey {
    let caps = gpu.caps();
    let l = &caps.limits;
    crate::cache::AutotuneKey {
        device: crate::cache::DeviceKey::new(&gpu.info, gpu.runtime_checks()),
        shape: crate::cache::ShapeKey::of(problem),
        precision: options.precision.to_string(),
        layout: options.layout.name().into(),
        storage: options.storage.name().into(),
        activation: options.activation.name().into(),
        bias: problem.spec.bias,
        padding_mode: problem.spec.padding_mode.name().into(),
        finite_weights,
        // What decides which kernels a device opened on this adapter runs.
        capabilities: format!(
            "coop_f16 {}, shader_f16 {}, workgroup memory {}, invocations {}, binding {}, buffer {}",
            caps.coop_f16,
            caps.shader_f16(),
            l.max_compute_workgroup_storage_size,
            l.max_compute_invocations_per_workgroup,
            l.max_storage_buffer_binding_size,
            l.max_buffer_size
        ),
    }
}

/// What [`Conv2dOptions::autotune`] works on: the device, the problem at its input shape,
/// the op's options and its weights as given.
#[cfg(feature = "tune")]
#[derive(Clone, Copy)]
struct Autotune<'a> {
    gpu: &'a Gpu,
    problem: &'a ConvProblem,
    options: &'a Conv2dOptions,
    finite_weights: bool,
    weight: &'a [f32],
    bias: Option<&'a [f32]>,
}

#[cfg(feature = "tune")]
impl Autotune<'_> {
    /// [`Autotune::run`], or where it fails `selected` with a reason that says why (an error
    /// only for a lost device).
    fn or_selection(self, selected: Selection) -> Result<Selection> {
        match self.run(selected.clone()) {
            Ok(tuned) => Ok(tuned),
            Err(e) if self.gpu.check_alive().is_err() => Err(self.gpu.lost_or(e)),
            Err(e) => {
                let input = self.problem.input;
                log::warn!("autotune at input {input} failed ({e}); running the selection's {}", selected.kernel);
                let reason = format!("{}; autotune at input {input} failed: {e}", selected.reason);
                Ok(Selection { reason, ..selected })
            }
        }
    }

    /// [`Conv2dOptions::autotune`]: the autotune cache's decision for this device, problem and
    /// options where its kernel still builds with these weights, else the fastest by median GPU
    /// time of the first [`crate::AUTOTUNE_MAX_CANDIDATES`] candidates that build
    /// (`select::autotune_candidates`, `selected`'s kernel first), each built as its own op with
    /// the caller's weights and run on scratch tensors of the problem's shape (uniform values in
    /// [-1, 1); at a smaller batch where the whole one would exceed a buffer or binding), and
    /// whose output agrees with the selection's kernel's ([`autotune_agreement`]), timed together
    /// in interleaved rounds ([`crate::timing::time_interleaved`]; one after the other where
    /// that fails); then stored in the cache. A candidate that cannot be built, run, agree or
    /// give a time is skipped (logged). Errors: the device lost; the selection's own kernel
    /// not running here.
    fn run(self, selected: Selection) -> Result<Selection> {
        use crate::kernel::Kernel;
        let Autotune { gpu, problem, options, finite_weights, weight, bias } = self;
        let spec = &problem.spec;
        let input = problem.input;
        let shape = format!("[{}, {}, {}, {}]", input.n, input.c, input.h, input.w);
        // One op at a time on a device: another op's runs would disturb this one's times, and an
        // op of the same key waiting here then finds this one's decision in the cache.
        let _turn = gpu.autotune_turn();
        let key = autotune_key(gpu, problem, options, finite_weights);
        let cache = crate::cache::TuningCache::open_default().map(|c| c.autotune());
        if let Some(d) = cache.as_ref().and_then(|c| c.autotune_lookup(&key)) {
            // Whether it still runs this convolution here and takes these weights, on the host
            // (the op built from the decision uploads them once).
            let takes = |k: &Kernel| -> Result<()> {
                k.check(spec, gpu.caps())?;
                let zeros = crate::alloc::zeroed_vec::<f32>(spec.out_channels as usize, "the zero bias")?;
                k.config().pack(spec, weight, bias.unwrap_or(&zeros)).map(|_| ())
            };
            match Kernel::parse(&d.kernel).and_then(|k| takes(&k).map(|()| k)) {
                Ok(kernel) if kernel.precision() == options.precision => {
                    let reason = format!("the autotune cache's decision for input {shape} (timed {})", d.tuned_at);
                    return Ok(Selection { kernel, source: crate::options::ConfigSource::Autotune, reason });
                }
                Ok(kernel) => log::warn!("autotune cache: {kernel} computes in {}; timing again", kernel.precision()),
                Err(e) => log::warn!("autotune cache: {} cannot run here ({e}); timing again", d.kernel),
            }
        }
        // Scratch tensors of the problem's shape, at a batch each buffer and binding can hold.
        let element = options.storage.element_bytes();
        let most = gpu.caps().limits.max_buffer_size.min(gpu.caps().limits.max_storage_buffer_binding_size);
        let per_image = input.per_image().max(problem.output.per_image()).saturating_mul(element).max(1);
        let batch = (most / per_image).clamp(1, input.n as u64) as u32;
        let timed_input = Shape4 { n: batch, ..input };
        let timed_problem = spec.problem(timed_input)?;
        let len = usize::try_from(timed_input.len()).map_err(|_| Error::TooLarge(format!("the input {input}")))?;
        let mut rng = fastrand::Rng::with_seed(0x5eed_a070);
        let mut contents =
            crate::alloc::vec_with_capacity::<u8>(len.saturating_mul(element as usize), "the autotune input")?;
        for _ in 0..len {
            let v = rng.f32() * 2.0 - 1.0;
            match options.storage {
                Storage::F32 => contents.extend_from_slice(&v.to_le_bytes()),
                Storage::F16 => contents.extend_from_slice(&half::f16::from_f32(v).to_le_bytes()),
            }
        }
        let x = gpu.buffer_init("wgconv autotune input", &contents, wgpu::BufferUsages::STORAGE)?;
        drop(contents);
        let out_len = timed_problem.output.len();
        let y = gpu.create_buffer(
            "wgconv autotune output",
            out_len.saturating_mul(element),
            // COPY_DST: the poison is written into it.
            wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
        )?;
        // The outputs compared: the first and the last image (a whole large batch would take
        // longer to read back and compare than to time), each poisoned with NaN before a check
        // run so that a kernel that leaves part of it unwritten cannot agree. Copies and writes
        // move whole 4-byte words: an f16 image of an odd size starts or ends in half a word.
        let per_image = timed_problem.output.per_image();
        let n = usize::try_from(per_image).map_err(|_| Error::TooLarge("the autotune output".into()))?;
        let images: Vec<u64> = if batch == 1 { vec![0] } else { vec![0, batch as u64 - 1] };
        let word = wgpu::COPY_BUFFER_ALIGNMENT;
        // Each image's byte range widened to whole words, and how many elements precede it there.
        let span = |image: u64| {
            let start = image * per_image * element;
            let from = start - start % word;
            let to = (start + per_image * element).next_multiple_of(word);
            (from, to, ((start - from) / element) as usize)
        };
        let poison = || -> Result<()> {
            let nan: &[u8] = match options.storage {
                Storage::F32 => &[0x00, 0x00, 0xc0, 0x7f],
                Storage::F16 => &[0x00, 0x7e, 0x00, 0x7e],
            };
            // In an error scope: a write the buffer refuses is an error here, not a log line
            // (a missing COPY_DST once left every compared image unpoisoned, and the
            // autotuner ran on).
            let scope = ErrorScope::push(&gpu.device);
            for &image in &images {
                let (from, to, _) = span(image);
                let len = (to - from) as usize;
                let mut bytes = crate::alloc::vec_with_capacity::<u8>(len, "the autotune poison")?;
                bytes.extend(nan.iter().copied().cycle().take(len));
                gpu.queue.write_buffer(&y, from, &bytes);
            }
            scope.finish("the autotuner's poisoned output")
        };
        let read_output = || -> Result<Vec<f32>> {
            let mut out = crate::alloc::vec_with_capacity::<f32>(n * images.len(), "the autotune read-back")?;
            for &image in &images {
                let (from, to, skip) = span(image);
                let words = ((to - from) / element) as usize;
                match options.storage {
                    Storage::F32 => out.extend(gpu.read_buffer::<f32>(&y, from, words)?.into_iter().skip(skip).take(n)),
                    Storage::F16 => out.extend(
                        gpu.read_buffer::<half::f16>(&y, from, words)?
                            .into_iter()
                            .skip(skip)
                            .take(n)
                            .map(|v| v.to_f32()),
                    ),
                }
            }
            Ok(out)
        };
        // A candidate's op with its pipelines for the scratch tensors' shape compiled (no
        // scratch memory yet: the plans come after, the selection's kernel's first).
        let compile = |kernel: &Kernel| -> Result<Conv2d> {
            let opts = Conv2dOptions { kernel: Some(kernel.clone()), autotune: false, ..options.clone() };
            let conv = Conv2d::new(gpu, *spec, weight, bias, opts)?;
            conv.prepared(conv.settle(&timed_problem), &timed_problem)?;
            Ok(conv)
        };
        let mut reference: Option<Vec<f32>> = None;
        let mut agreeing: Vec<(Kernel, Conv2d, ConvPlan)> = Vec::new();
        let mut pending =
            crate::select::autotune_candidates(gpu.caps(), spec, &selected.kernel, finite_weights).into_iter();
        let started = std::time::Instant::now();
        while agreeing.len() < crate::select::AUTOTUNE_MAX_CANDIDATES {
            // As many candidates as places are left, compiled at once (most of an autotune's
            // time is the driver compiling their pipelines), then each planned and run once,
            // its output compared with the selection's kernel's.
            let next: Vec<Kernel> =
                pending.by_ref().take(crate::select::AUTOTUNE_MAX_CANDIDATES - agreeing.len()).collect();
            if next.is_empty() {
                break;
            }
            for (kernel, conv) in next.iter().zip(compile_all(&next, &compile)) {
                let first = *kernel == selected.kernel;
                let checked = (|| -> Result<(Conv2d, ConvPlan)> {
                    let conv = conv?;
                    let plan = conv.plan(timed_input, &x, &y)?;
                    poison()?;
                    crate::timing::time_plan(gpu, &plan, 0, 1)?;
                    let output = read_output()?;
                    match &reference {
                        None => reference = Some(output),
                        Some(want) => {
                            let distance = agreement_distance(&output, want);
                            if distance.is_nan() || distance > autotune_agreement(options.precision) {
                                return Err(Error::unsupported(format!(
                                    "its output is {distance:.2e} (relative L2) from the selection's kernel's"
                                )));
                            }
                        }
                    }
                    Ok((conv, plan))
                })();
                match checked {
                    Ok((conv, plan)) => agreeing.push((kernel.clone(), conv, plan)),
                    Err(e) if gpu.check_alive().is_err() => return Err(gpu.lost_or(e)),
                    // The candidates are compared with the selection's own kernel's output.
                    Err(e) if first => return Err(e),
                    Err(e) => log::info!("autotune at input {shape}: {kernel} skipped: {e}"),
                }
            }
        }
        log::debug!(
            "autotune at input {shape}: {} kernels compiled and checked in {:.3} s",
            agreeing.len(),
            started.elapsed().as_secs_f64()
        );
        // Those that agree, timed together: in interleaved rounds, else one after the other.
        let started = std::time::Instant::now();
        let plans: Vec<&ConvPlan> = agreeing.iter().map(|(_, _, plan)| plan).collect();
        if let (false, Some(first)) = (gpu.is_cpu(), plans.first()) {
            crate::timing::keep_busy(gpu, *first, AUTOTUNE_SPIN_UP).map_err(|e| gpu.lost_or(e))?;
        }
        let times = match crate::timing::time_interleaved(gpu, &plans, AUTOTUNE_WARMUP, AUTOTUNE_ROUNDS) {
            Ok((times, _)) => times,
            Err(e) if gpu.check_alive().is_err() => return Err(gpu.lost_or(e)),
            Err(e) => {
                log::info!("autotune at input {shape}: interleaved timing failed ({e}); timing one after the other");
                plans
                    .iter()
                    .map(|plan| {
                        crate::timing::time_plan(gpu, *plan, AUTOTUNE_WARMUP, AUTOTUNE_ROUNDS)
                            .map_or(Vec::new(), |t| t.0)
                    })
                    .collect()
            }
        };
        log::debug!(
            "autotune at input {shape}: {} kernels timed in {:.3} s",
            plans.len(),
            started.elapsed().as_secs_f64()
        );
        let mut timed: Vec<(Kernel, f64)> = Vec::new();
        for ((kernel, _, _), times) in agreeing.iter().zip(times) {
            match crate::timing::Summary::of(&times) {
                Some(s) => timed.push((kernel.clone(), s.median)),
                None => log::info!("autotune at input {shape}: {kernel} skipped: no usable time"),
            }
        }
        let Some((fastest, fastest_ms)) = timed.iter().min_by(|a, b| a.1.total_cmp(&b.1)).cloned() else {
            return Err(Error::unsupported(format!("autotune at input {shape}: no candidate ran")));
        };
        let selected_ms = timed.iter().find(|(k, _)| *k == selected.kernel).map(|(_, t)| *t);
        // The selection's kernel stays unless another is faster by AUTOTUNE_MIN_GAIN.
        let (best, best_ms) = match selected_ms {
            Some(t) if fastest_ms * (1.0 + AUTOTUNE_MIN_GAIN) > t => (selected.kernel.clone(), t),
            _ => (fastest.clone(), fastest_ms),
        };
        let decision = crate::cache::AutotuneDecision {
            kernel: best.to_string(),
            timed: timed.iter().map(|(k, t)| (k.to_string(), *t)).collect(),
            tuned_at: crate::cache::rfc3339_utc(std::time::SystemTime::now()),
        };
        match &cache {
            Some(c) => {
                if let Err(e) = c.autotune_store(&key, &decision) {
                    log::warn!("autotune: the decision was not stored: {e}");
                }
            }
            None => {
                log::warn!("autotune: no cache location (set {}); the decision was not stored", crate::cache::DIR_ENV)
            }
        }
        let against = match selected_ms {
            Some(t) if best != selected.kernel => format!(" against {t:.4} ms for the selection's {}", selected.kernel),
            _ if fastest != best => format!(" (the selection's own kernel; {fastest} took {fastest_ms:.4} ms)"),
            _ => " (the selection's own kernel)".to_string(),
        };
        let at = match batch == input.n {
            true => String::new(),
            false => format!(" (timed at batch {batch}, which one buffer holds)"),
        };
        let reason = format!(
            "the fastest of {} kernels timed at input {shape}{at}, the selection's kept within {:.0} %: {best_ms:.4} ms{against}",
            timed.len(),
            AUTOTUNE_MIN_GAIN * 100.0
        );
        Ok(Selection { kernel: best, source: crate::options::ConfigSource::Autotune, reason })
    }
}

/// Compiles each kernel's op (`compile`) on a thread of its own where one can be had (drivers
/// compile the pipelines of different threads at once), else on this one; in order. A
/// compile that panicked is an error, not a panic.
#[cfg(feature = "tune")]
fn compile_all<F>(kernels: &[crate::kernel::Kernel], compile: &F) -> Vec<Result<Conv2d>>
where
    F: Fn(&crate::kernel::Kernel) -> Result<Conv2d> + Sync,
{
    std::thread::scope(|scope| {
        let handles: Vec<_> = kernels
            .iter()
            .map(|k| {
                // As large a stack as a main thread's: naga parses and validates the shaders here.
                std::thread::Builder::new().stack_size(COMPILE_STACK).spawn_scoped(scope, move || compile(k)).ok()
            })
            .collect();
        handles
            .into_iter()
            .zip(kernels)
            .map(|(handle, k)| match handle {
                Some(h) => h.join().unwrap_or_else(|_| {
                    Err(Error::Wgpu { stage: "autotune", message: format!("compiling {k} panicked") })
                }),
                None => compile(k),
            })
            .collect()
    })
}

/// The stack of the autotuner's compiling threads.
#[cfg(feature = "tune")]
const COMPILE_STACK: usize = 8 << 20;

/// The relative L2 distance of `got` from `want` over their finite elements; infinite where
/// one is finite and the other not, or where they hold different special values.
#[cfg(feature = "tune")]
fn agreement_distance(got: &[f32], want: &[f32]) -> f64 {
    if got.len() != want.len() {
        return f64::INFINITY;
    }
    let (mut diff, mut norm) = (0.0f64, 0.0f64);
    for (&g, &w) in got.iter().zip(want) {
        match (g.is_finite(), w.is_finite()) {
            (true, true) => {
                diff += (g as f64 - w as f64).powi(2);
                norm += (w as f64).powi(2);
            }
            (false, false) if g.is_nan() == w.is_nan() && (g.is_nan() || g == w) => {}
            _ => return f64::INFINITY,
        }
    }
    if norm == 0.0 {
        return if diff == 0.0 { 0.0 } else { f64::INFINITY };
    }
    (diff / norm).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The autotuner's agreement: relative L2 over finite values; special values must match
    /// in place and kind.
    #[cfg(feature = "tune")]
    #[test]
    fn agreement_distance_of_outputs() {
        assert_eq!(agreement_distance(&[1.0, 2.0], &[1.0, 2.0]), 0.0);
        let d = agreement_distance(&[1.0, 2.001], &[1.0, 2.0]);
        assert!((d - 0.001 / 5f64.sqrt()).abs() < 1e-6, "{d}");
        let (inf, nan) = (f32::INFINITY, f32::NAN);
        assert_eq!(agreement_distance(&[nan, inf, 1.0], &[nan, inf, 1.0]), 0.0);
        for (got, want) in [([inf, 1.0], [nan, 1.0]), ([-inf, 1.0], [inf, 1.0]), ([1.0, 1.0], [inf, 1.0])] {
            assert_eq!(agreement_distance(&got, &want), f64::INFINITY, "{got:?} {want:?}");
        }
        assert_eq!(agreement_distance(&[1.0], &[1.0, 2.0]), f64::INFINITY);
        assert_eq!(agreement_distance(&[0.0, 1e-3], &[0.0, 0.0]), f64::INFINITY);
    }

    #[test]
    fn fold_grid_splits_and_refuses() {
        assert!(fold_grid(10, 0).is_err());
        assert_eq!(fold_grid(10, 65535).unwrap(), [10, 1]);
        assert_eq!(fold_grid(70000, 65535).unwrap(), [65535, 2]);
        assert_eq!(fold_grid(16, 4).unwrap(), [4, 4]);
        assert!(fold_grid(17, 4).is_err());
    }

    /// Where the kernel selected at the first forward cannot be built, the construction's
    /// runs, its buffers intact, and its reason says why. No caller can make a selected
    /// kernel unbuildable (selection checks the buffers against the device's limits; a device
    /// out of memory can): here the pending options name an f16 kernel, and the pending
    /// weights are beyond f16's range.
    #[test]
    fn a_kernel_that_cannot_be_built_at_the_first_forward_leaves_the_first_one() {
        let Ok(gpu) = Gpu::new() else {
            eprintln!("skipped: no adapter");
            return;
        };
        let spec = Conv2dSpec::new(2, 3, 1);
        let weight = [0.5, -1.0, 2.0, 0.25, 1.5, -0.5];
        let conv = Conv2d::new(&gpu, spec, &weight, None, Conv2dOptions::default()).unwrap();
        let initial = conv.kernel().clone();
        if let Some(pending) = conv.pending.lock().unwrap().as_mut() {
            pending.weight = vec![1e6; weight.len()];
            let f16 = crate::kernel::Kernel::parse("tiled-f16").unwrap();
            pending.options = pending.options.clone().kernel(f16).precision(Precision::F16Accum32);
        }
        let shape = Shape4::new(1, 2, 2, 2);
        let x = [1.0, 2.0, 3.0, 4.0, -1.0, 0.0, 1.0, 2.0];
        let y = conv.forward(&x, shape).unwrap();
        let s = conv.kernel();
        assert_eq!((&s.kernel, s.source), (&initial.kernel, initial.source), "{s}");
        assert!(s.reason.starts_with(&initial.reason), "{s}");
        assert!(s.reason.contains("input [1, 2, 2, 2]") && s.reason.ends_with("construction runs"), "{s}");
        let want = crate::reference::conv2d(&spec.problem(shape).unwrap(), &x, &weight, None).unwrap();
        assert!(crate::reference::relative_l2(&y, &want) < 1e-5, "{y:?} against {want:?}");
    }
}
