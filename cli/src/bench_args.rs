//! The arguments of `wgconv bench` and how its `--configs` entries name kernels: shared by
//! the shape benchmark (`bench.rs`) and the network benchmark (`model.rs`).

use crate::cli::{CliError, CliResult, DeviceArgs, PrecisionArg};
use crate::shape::ShapeArgs;
use wgconv::advanced::{default_kernel, family_names};
use wgconv::{Activation, Conv2d, Conv2dOptions, ConvProblem, Gpu, Kernel, Precision, Selection, TileConfig};

#[derive(clap::Args, Debug)]
#[command(
    about = "Benchmark kernels (tile configs, kernel families) on one convolution (default: a 3x3 same-padded \
64->64 56x56 layer, N=256; --preset alexnet-conv1 for AlexNet conv1)",
    long_about = "Runs every kernel of the declared sweep (or --configs) on one problem: checks each against \
the CPU reference on the first and last image (output poisoned with NaN first; a wrong kernel is marked, never \
ranked), then times it with GPU timestamp queries (median, min, max over --runs after --warmup). The first \
kernel (without --configs: the first of the sweep, the seed's config for f32) is the baseline row. On a CPU adapter (lavapipe) the batch \
defaults to a small one.\n\n\
--configs takes comma-separated kernels, each one of:\n  \
family:config  a kernel by its full name, e.g. tiled:m32n64k32-t4x4-w4-s2, coop-f16:m64n96k16-t4x12-w4-s1, \
coop-band-f16:m128n96d16-w8-s1, coop-stem-f16:m32n96-f2-h6\n  \
family         that family's reference kernel, e.g. direct, coop-f16\n  \
TILE           a tile config, e.g. m64n96k16-t4x12-w4-s1: the --precision's default family on this device \
(tiled for f32; coop-f16 or tiled-f16 for f16; coop-f16x3 for f16x3)\n  \
band:CONFIG    short for coop-band-f16:CONFIG;  stem:CONFIG  short for coop-stem-f16:CONFIG\n  \
auto           the kernel a Conv2d with default options, told the input shape, would run on this problem and device (the \
selection's reason is printed under the table)\n\
Every kernel must compute at --precision (`direct`, the f32 reference kernel, joins any sweep).\n\n\
Families: tiled, tiled-f16, winograd, winograd-f4, winograd-f6, splitk, pointwise, coop-f16, coop-f16x3, coop-nhwc-f16, coop-nhwc-f16x3, coop-nhwc-f32, \
coop-winograd-f16, coop-winograd-f32, coop-splitk-f16, coop-grouped-f16, \
coop-band-f16, coop-stem-f16, depthwise, depthwise-f16, direct, direct-f16.\n\n\
--model NAME benchmarks a network's distinct convolutions (resnet50, mobilenet_v2, vgg16, resnext50_32x4d, alexnet: \
cli/data/models.json; no bias) at the model's batch (a CPU adapter: batch 2; --batch overrides). Per layer: the \
kernel a default Conv2d told the input shape picks (and why) and every kernel of the precision's default family's sweep that the \
device and the layer accept (--configs instead: the default plus those), each checked against ONE CPU reference \
image (image 0, NaN-poisoned output) and timed like the single-problem bench; the best correct one; TFLOP/s, \
GB/s (input + weights + output: the tensors at --storage's size, the weights f32) and the % of the device's floor max(FLOPs / peak, bytes / bandwidth), \
with the bandwidth measured at start by a large compute-shader copy. Network totals are Σ time × multiplicity. \
--compare adds cuDNN's columns from scripts/cudnn_layers.py's JSON. --runs may go below 20 here (rough medians).",
    after_help = "Examples:\n  wgconv bench\n  wgconv bench --preset alexnet-conv1 --batch 64 --json bench.json --svg bench.svg\n  \
wgconv bench --configs auto,tiled:m32n64k32-t4x4-w4-s2,m64n96k16-t4x12-w4-s1,direct\n  \
wgconv bench --precision f16 --configs auto,coop-stem-f16:m32n96-f2-h6,band:m128n96d16-w8-s1\n  \
wgconv bench --in-channels 128 --out-channels 128 --height 28 --width 28 --stride 2 --batch 32 --backend vulkan\n  \
wgconv bench --model resnet50 --json resnet50.json --svg resnet50.svg --compare cudnn_resnet50.json\n  \
wgconv bench --model alexnet --batch 1 --layers conv3.3x3 --configs auto,direct"
)]
pub struct Args {
    #[command(flatten)]
    pub(crate) shape: ShapeArgs,
    /// Benchmark every distinct convolution of a network instead of one problem: resnet50,
    /// mobilenet_v2, vgg16, alexnet (at the model's batch; see `--model` in the long help)
    #[arg(
        long,
        value_name = "NAME",
        conflicts_with_all = [
            "preset", "in_channels", "out_channels", "height", "width", "kernel", "stride", "padding", "dilation", "groups",
            "no_bias"
        ]
    )]
    pub(crate) model: Option<String>,
    /// With --model: only these layers (comma-separated names from the model's list)
    #[arg(long, value_delimiter = ',', value_name = "NAMES", requires = "model")]
    pub(crate) layers: Option<Vec<String>>,
    /// With --model: add the cuDNN columns from this JSON (written by scripts/cudnn_layers.py)
    #[arg(long, value_name = "FILE", requires = "model")]
    pub(crate) compare: Option<std::path::PathBuf>,
    /// Comma-separated kernels: full names family:config (tiled:m32n64k32-t4x4-w4-s2,
    /// coop-stem-f16:m32n96-f2-h6, ...), family names (direct), tile configs
    /// (m64n96k16-t4x12-w4-s1: the precision's default family), band:NAME / stem:NAME, or
    /// auto (what a default Conv2d runs); default: the declared sweep
    #[arg(long, value_delimiter = ',', value_name = "KERNELS")]
    pub(crate) configs: Option<Vec<String>>,
    /// Also run the direct (one output per invocation) kernel
    #[arg(long)]
    pub(crate) direct: bool,
    /// With --model: also build each layer's Conv2d with autotuning on (random weights, the
    /// input shape given), report how long its construction took and which kernel it kept,
    /// and time that kernel beside the default. The decisions go to the autotune cache
    /// (WGCONV_CACHE_DIR): point it at an empty directory to time cold autotuning
    #[arg(long, requires = "model")]
    pub(crate) autotune: bool,
    /// Timed runs per config (at least 20; with --model at least 1)
    #[arg(long, default_value_t = 30)]
    pub(crate) runs: u32,
    /// Untimed warm-up runs per config
    #[arg(long, default_value_t = 5)]
    pub(crate) warmup: u32,
    /// Time the configs in interleaved rounds (one run of each per round, the first one
    /// rotating) instead of each config's runs back to back: slow drifts of a shared or
    /// throttling machine then fall on every config alike (on GPUs without the busy spin-up
    /// before each config's runs)
    #[arg(long)]
    pub(crate) interleave: bool,
    /// Peak in TFLOP/s for the "% peak" column (default: a known datasheet table by adapter name:
    /// FP32 for the f32 and f16-SIMT kernels, f16 tensor for cooperative matrices, a third of
    /// it for f16x3)
    #[arg(long)]
    pub(crate) peak_tflops: Option<f64>,
    /// Fuse a ReLU into the store
    #[arg(long)]
    pub(crate) relu: bool,
    /// f32; f16 operands with f32 accumulation (cooperative matrices where the device has
    /// them, else the f16 SIMT kernel; the table says which ran); or f16x3, f32-accurate
    /// from three f16 products (cooperative matrices only)
    #[arg(long, value_enum, default_value = "f32")]
    pub(crate) precision: PrecisionArg,
    /// The input and output tensors' memory layout (every kernel runs both; NHWC adds layout
    /// passes around the kernels that read NCHW)
    #[arg(long, value_enum, default_value = "nchw")]
    pub(crate) layout: crate::cli::LayoutArg,
    /// The input and output tensors' element type in memory (every kernel runs both; f16
    /// adds conversion passes around the kernels, which compute at --precision whatever the
    /// storage; GB/s counts the tensors at this size, the weights at f32's)
    #[arg(long, value_enum, default_value = "f32")]
    pub(crate) storage: crate::cli::StorageArg,
    /// Write every figure as JSON
    #[arg(long)]
    pub(crate) json: Option<std::path::PathBuf>,
    /// Write a chart of the sweep as SVG
    #[arg(long)]
    pub(crate) svg: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub(crate) device: DeviceArgs,
}

/// The short prefixes of `--configs` for the f16 kernels no tile config names, and the
/// families they stand for.
const SHORT_PREFIXES: [(&str, &str); 2] = [("band:", "coop-band-f16"), ("stem:", "coop-stem-f16")];

/// One `--configs` entry, as the kernel to time (`None`: `auto`, resolved once the device
/// is open).
pub(crate) fn parse_entry(entry: &str, precision: Precision, gpu: &Gpu) -> CliResult<Option<Kernel>> {
    let name = entry.trim();
    if name == "auto" {
        return Ok(None);
    }
    let full = match SHORT_PREFIXES.iter().find_map(|(p, f)| Some((*f, name.strip_prefix(p)?))) {
        Some((family, config)) => format!("{family}:{config}"),
        None => name.to_string(),
    };
    let family = full.split_once(':').map_or(full.as_str(), |(f, _)| f);
    if full.contains(':') || family_names().contains(&family) {
        // The family first: a kernel of another precision is refused before its config is read.
        if let Ok(p) = Kernel::parse(family).map(|k| k.precision()) {
            if p != precision && family != "direct" {
                return Err(CliError(format!("{name}: the {family} kernel computes in {p}; add --precision {p}")));
            }
        }
        let kernel = Kernel::parse(&full).map_err(|e| CliError(format!("--configs {name}: {e}")))?;
        return Ok(Some(kernel));
    }
    let tile = TileConfig::parse(name).map_err(|e| {
        CliError(format!("--configs {name}: {e} (or a kernel family:config, a family name such as direct, or auto)"))
    })?;
    let default = default_kernel(gpu.caps(), precision)?;
    default.with_tile(tile).map(Some).ok_or_else(|| {
        CliError(format!("--configs {name}: the {precision} default kernel {default} takes no tile config"))
    })
}

/// The kernel a `Conv2d` with default options (at this precision, activation, layout and
/// storage, told the input shape as `wgconv run` tells it) runs on this problem and device, and
/// why, and the seconds its construction took: `--configs auto` (zero weights), or with
/// `autotune` what such a `Conv2d` with [`Conv2dOptions::autotune`] on keeps (random weights;
/// the seconds are then the autotuning's, or a cache read's). Built for real, so that it is
/// the library's own selection, not a copy of it.
pub(crate) fn built_selection(
    gpu: &Gpu,
    problem: &ConvProblem,
    precision: Precision,
    activation: Activation,
    layout: wgconv::Layout,
    storage: wgconv::Storage,
    autotune: bool,
) -> CliResult<(Selection, f64)> {
    use rand::{Rng, SeedableRng};
    let spec = problem.spec;
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
    let mut values = |len: usize| match autotune {
        true => (0..len).map(|_| rng.random_range(-1.0f32..1.0)).collect::<Vec<_>>(),
        false => vec![0.0f32; len],
    };
    let weight = values(spec.weight_len());
    let bias = spec.bias.then(|| values(spec.out_channels as usize));
    let options = Conv2dOptions::default()
        .precision(precision)
        .activation(activation)
        .layout(layout)
        .storage(storage)
        .tuning_key_input(problem.input)
        .autotune(autotune);
    let flag = if autotune { "--autotune" } else { "--configs auto" };
    let start = std::time::Instant::now();
    let conv =
        Conv2d::new(gpu, spec, &weight, bias.as_deref(), options).map_err(|e| CliError(format!("{flag}: {e}")))?;
    Ok((conv.kernel().clone(), start.elapsed().as_secs_f64()))
}

/// Writes a benchmark's report as JSON (`--json`) and its chart as SVG (`--svg`), where asked.
pub(crate) fn write_outputs<R: serde::Serialize>(
    args: &Args,
    report: &R,
    chart: impl FnOnce(&std::path::Path) -> Result<(), Box<dyn std::error::Error>>,
) -> CliResult {
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(report)?)
            .map_err(|e| CliError(format!("--json {}: {e}", path.display())))?;
    }
    if let Some(path) = &args.svg {
        chart(path).map_err(|e| CliError(format!("--svg {}: {e}", path.display())))?;
    }
    Ok(())
}

impl Args {
    /// The precision and activation asked for, and the device to run them on (cooperative
    /// matrices opted in for the f16 precisions).
    pub(crate) fn open(&self) -> CliResult<(Precision, Activation, Gpu)> {
        let precision = Precision::from(self.precision);
        let activation = if self.relu { Activation::Relu } else { Activation::None };
        let options = wgconv::GpuOptions::default()
            .adapter(self.device.adapter.clone())
            .backends(self.device.backends())
            .cooperative_matrix(precision != Precision::F32);
        let gpu = Gpu::with_options(options).map_err(|e| self.device.explain(e))?;
        Ok((precision, activation, gpu))
    }
}
