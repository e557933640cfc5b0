//! `wgconv run`: one convolution on `.npy` files, PyTorch `nn.Conv2d` semantics.
//!
//! Everything about the inputs and flags is checked before a GPU is opened, so a refusal
//! is exactly one line on stderr; the output is written atomically (see [`crate::npy`]).

use crate::cli::{CliError, CliResult, DeviceArgs, PrecisionArg};
use crate::npy::{self, PendingOutput};
use std::path::PathBuf;
use wgconv::advanced::{default_kernel, family_names};
use wgconv::tune::timing;
use wgconv::{
    Activation, ConfigSource, Conv2d, Conv2dOptions, Conv2dSpec, Error, Gpu, GpuOptions, Kernel, Precision, Shape4,
    TileConfig,
};

#[derive(clap::Args)]
#[command(
    about = "Run one convolution on .npy files: Y = conv2d(X, W, B), optionally followed by ReLU",
    long_about = "Run one convolution on .npy files, with the semantics of PyTorch's nn.Conv2d forward \
(ONNX Conv): Y = conv2d(X, W, B) with zero padding, optionally followed by ReLU.\n\n\
X is float32 NCHW [N, C, H, W]; W is float32 [C_out, C/groups, KH, KW]; B is float32 [C_out]. \
Every file is a .npy array of dtype '<f4' (little-endian float32) in C order, format version 1, 2 or 3. \
Y is written as float32 [N, C_out, OH, OW], C order, replacing the file only once it is complete.\n\n\
Invalid input (a shape mismatch, another dtype, Fortran order, a damaged file, a zero stride or dilation, \
negative padding, groups that do not divide the channels, an empty output) exits with status 1 and one \
line on stderr naming the file or flag and the bad value; no output file is written then.",
    after_help = "Examples:\n  \
wgconv run --input x.npy --weight w.npy --output y.npy\n  \
wgconv run --input x.npy --weight w.npy --bias b.npy --stride 4 --padding 2 --relu --output y.npy\n  \
wgconv run --input x.npy --weight w.npy --padding 1,0,2,1 --dilation 2 --groups 4 --output y.npy --verbose\n  \
wgconv run --input x.npy --weight w.npy --output y.npy --config m64n64k16-t8x8-w2-s2 --backend vulkan\n  \
wgconv run --input x.npy --weight w.npy --output y.npy --config tiled:m64n96k16-t4x12-w4-s1 -v\n  \
wgconv run --input x.npy --weight w.npy --bias b.npy --stride 4 --padding 2 --precision f16x3 --output y.npy -v\n\n\
Make the inputs with NumPy (np.save(\"x.npy\", x.astype(np.float32))) and read Y with np.load(\"y.npy\")."
)]
pub struct Args {
    /// Input X: float32 [N, C, H, W] .npy
    #[arg(long, value_name = "X.npy")]
    input: PathBuf,
    /// Weight W: float32 [C_out, C/groups, KH, KW] .npy
    #[arg(long, value_name = "W.npy")]
    weight: PathBuf,
    /// Bias B: float32 [C_out] .npy (default: no bias)
    #[arg(long, value_name = "B.npy")]
    bias: Option<PathBuf>,
    /// Stride: S, or SH,SW
    #[arg(long, value_name = "S|SH,SW", default_value = "1", allow_hyphen_values = true)]
    stride: String,
    /// Zero padding: P, PH,PW (both sides of each axis), or PT,PL,PB,PR (top, left, bottom, right)
    #[arg(long, value_name = "P|PH,PW|PT,PL,PB,PR", default_value = "0", allow_hyphen_values = true)]
    padding: String,
    /// Dilation: D, or DH,DW
    #[arg(long, value_name = "D|DH,DW", default_value = "1", allow_hyphen_values = true)]
    dilation: String,
    /// Groups: must divide C and C_out
    #[arg(long, value_name = "G", default_value = "1", allow_hyphen_values = true)]
    groups: String,
    /// Apply ReLU after the bias (fused into the kernel; NaN stays NaN)
    #[arg(long)]
    relu: bool,
    /// Output Y: float32 [N, C_out, OH, OW] .npy (replaced atomically)
    #[arg(long, value_name = "Y.npy")]
    output: PathBuf,
    #[command(flatten)]
    device: DeviceArgs,
    /// Force the kernel: a tile config such as m32n64k32-t4x4-w4-s2 (run by the
    /// --precision's default family on this device), `direct`, or a kernel's full name
    /// family:config such as coop-f16:m64n96k16-t4x12-w4-s1 (it must compute at --precision)
    /// (default: the tuning cache's decision for this problem at --precision, else the
    /// library's selection)
    #[arg(long, value_name = "NAME")]
    config: Option<String>,
    /// f32 (default); f16 operands with f32 accumulation (cooperative matrices where the
    /// device has them, else the f16 SIMT kernel; refused where it has neither); or f16x3,
    /// f32-accurate from three f16 products (cooperative matrices only). `--verbose` names
    /// the kernel that ran
    #[arg(long, value_enum, default_value = "f32")]
    precision: PrecisionArg,
    /// Print the adapter, the kernel config and where it came from, and the GPU time (stderr)
    #[arg(long, short)]
    verbose: bool,
}

/// The message of a spec error without the library's "invalid convolution: " prefix.
fn spec_msg(e: &Error) -> String {
    match e {
        Error::InvalidSpec(m) => m.clone(),
        other => other.to_string(),
    }
}

/// Parses a comma-separated list of 1..=max signed integers.
fn parse_ints(flag: &str, raw: &str, forms: &str, counts: &[usize]) -> CliResult<Vec<i64>> {
    let values: Vec<i64> = raw
        .split(',')
        .map(|t| {
            let t = t.trim();
            t.parse::<i64>().map_err(|_| CliError(format!("{flag} {raw}: {t:?} is not an integer (expected {forms})")))
        })
        .collect::<CliResult<_>>()?;
    if !counts.contains(&values.len()) {
        return Err(CliError(format!("{flag} {raw}: {} values given, expected {forms}", values.len())));
    }
    Ok(values)
}

fn parse_pair(flag: &str, raw: &str, forms: &str) -> CliResult<[i64; 2]> {
    let v = parse_ints(flag, raw, forms, &[1, 2])?;
    Ok(if v.len() == 1 { [v[0], v[0]] } else { [v[0], v[1]] })
}

fn parse_padding(raw: &str) -> CliResult<[i64; 4]> {
    let v = parse_ints("--padding", raw, "P, PH,PW or PT,PL,PB,PR", &[1, 2, 4])?;
    Ok(match v.len() {
        1 => [v[0]; 4],
        2 => [v[0], v[1], v[0], v[1]],
        _ => [v[0], v[1], v[2], v[3]],
    })
}

/// What `--config` names.
enum ConfigArg {
    /// A kernel by its full name `family:config`, or a family's name (`direct`).
    Kernel(Kernel),
    /// A tile config, run by the precision's default family on the device (known once the
    /// device is open).
    Tile(TileConfig),
}

/// Parses `--config` and checks what needs no device: the kernel's precision and its tiles.
fn parse_config(raw: &str, precision: Precision) -> CliResult<ConfigArg> {
    let name = if raw.eq_ignore_ascii_case("direct") { "direct" } else { raw };
    let family = name.split_once(':').map_or(name, |(f, _)| f);
    if name.contains(':') || family_names().contains(&family) {
        // The family first: a kernel of another precision is refused before its config is read.
        if let Ok(p) = Kernel::parse(family).map(|k| k.precision()) {
            if p != precision {
                return Err(CliError(format!("--config {raw} computes in {p}, not --precision {precision}")));
            }
        }
        let kernel = Kernel::parse(name).map_err(|e| CliError(format!("--config {raw}: {e}")))?;
        kernel.check_shape().map_err(|e| CliError(format!("--config {raw}: {e}")))?;
        return Ok(ConfigArg::Kernel(kernel));
    }
    let cfg = TileConfig::parse(raw).map_err(|e| {
        CliError(format!("--config {raw}: {e} (or `direct` for the direct kernel, or a kernel's name family:config)"))
    })?;
    // Structural checks now, before a GPU is opened; the device's limits come later (and the
    // f16 precisions' own tiles once their kernel is known).
    let check = if precision == Precision::F32 { cfg.check_shape() } else { cfg.check_common() };
    check.map_err(|e| CliError(format!("--config {raw}: {e}")))?;
    Ok(ConfigArg::Tile(cfg))
}

fn describe_source(source: ConfigSource) -> &'static str {
    match source {
        ConfigSource::Explicit => "explicit: --config",
        ConfigSource::TuningCache => "from the tuning cache",
        ConfigSource::Default => "library default: no tuning-cache decision for this problem",
        ConfigSource::Fallback => "fallback: the default does not fit this device; no tuning-cache decision",
        ConfigSource::Autotune => "autotune: the fastest candidate timed at this shape",
        _ => "another source (see --verbose's reason)",
    }
}

fn dim(flag: &str, path: &std::path::Path, what: &str, v: u64) -> CliResult<u32> {
    u32::try_from(v).map_err(|_| CliError(format!("{flag} {}: {what} = {v} is too large", path.display())))
}

pub fn main(a: Args) -> CliResult {
    // 1. Flags, each checked on its own so that the message names it.
    let stride = parse_pair("--stride", &a.stride, "S or SH,SW")?;
    let pads = parse_padding(&a.padding)?;
    let dilation = parse_pair("--dilation", &a.dilation, "D or DH,DW")?;
    let groups = parse_ints("--groups", &a.groups, "one integer G", &[1])?[0];
    let flag_check = |flag: &str, raw: &str, r: wgconv::Result<Conv2dSpec>| {
        r.map(|_| ()).map_err(|e| CliError(format!("{flag} {raw}: {}", spec_msg(&e))))
    };
    flag_check("--stride", &a.stride, Conv2dSpec::from_signed(1, 1, [1, 1], stride, [0; 4], [1, 1], 1, false))?;
    flag_check("--padding", &a.padding, Conv2dSpec::from_signed(1, 1, [1, 1], [1, 1], pads, [1, 1], 1, false))?;
    flag_check("--dilation", &a.dilation, Conv2dSpec::from_signed(1, 1, [1, 1], [1, 1], [0; 4], dilation, 1, false))?;
    flag_check("--groups", &a.groups, {
        // Channels that any positive `groups` divides: only the sign and zero are checked here.
        let c = groups.saturating_abs().max(1);
        Conv2dSpec::from_signed(c, c, [1, 1], [1, 1], [0; 4], [1, 1], groups, false)
    })?;
    let precision = Precision::from(a.precision);
    let config = a.config.as_deref().map(|raw| parse_config(raw, precision)).transpose()?;

    // 2. The files, and their shapes against each other and the flags.
    let x = npy::read_f32(&a.input, "--input", &["N", "C", "H", "W"])?;
    let w = npy::read_f32(&a.weight, "--weight", &["C_out", "C/groups", "KH", "KW"])?;
    let b = a.bias.as_deref().map(|p| npy::read_f32(p, "--bias", &["C_out"])).transpose()?;
    let (xi, wi) = (a.input.display(), a.weight.display());
    let (c_in, c_out) = (x.shape[1], w.shape[0]);
    let g = groups as u64;
    if c_in % g != 0 {
        return Err(CliError(format!(
            "--groups {groups} does not divide the {c_in} input channels of {xi} (shape {:?})",
            x.shape
        )));
    }
    if c_out % g != 0 {
        return Err(CliError(format!(
            "--groups {groups} does not divide the {c_out} output channels of {wi} (shape {:?})",
            w.shape
        )));
    }
    if w.shape[1] != c_in / g {
        return Err(CliError(format!(
            "--weight {wi}: shape {:?} does not match the input: {xi} has {c_in} channels, so with --groups {groups} \
             the weight's second dimension must be C/groups = {}",
            w.shape,
            c_in / g
        )));
    }
    if let (Some(b), Some(bp)) = (&b, &a.bias) {
        if b.shape[0] != c_out {
            return Err(CliError(format!(
                "--bias {}: shape {:?} does not match the weight: expected [{c_out}] (C_out of {wi})",
                bp.display(),
                b.shape
            )));
        }
    }
    let shape = Shape4::new(
        dim("--input", &a.input, "N", x.shape[0])?,
        dim("--input", &a.input, "C", x.shape[1])?,
        dim("--input", &a.input, "H", x.shape[2])?,
        dim("--input", &a.input, "W", x.shape[3])?,
    );
    let signed = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let spec = Conv2dSpec::from_signed(
        signed(c_in),
        signed(c_out),
        [signed(w.shape[2]), signed(w.shape[3])],
        stride,
        pads,
        dilation,
        groups,
        b.is_some(),
    )
    .map_err(|e| CliError(format!("{xi}, {wi}: {}", spec_msg(&e))))?;
    let problem = spec.problem(shape).map_err(|e| {
        CliError(format!(
            "--input {xi} (shape {:?}) with the {}x{} kernel of {wi}, --stride {} --padding {} --dilation {}: {}",
            x.shape,
            w.shape[2],
            w.shape[3],
            a.stride,
            a.padding,
            a.dilation,
            spec_msg(&e)
        ))
    })?;

    // 3. The output file, before any GPU work.
    let output = PendingOutput::create(&a.output, "--output")?;

    // 4. The GPU.
    let gpu_options = GpuOptions::default()
        .adapter(a.device.adapter.clone())
        .backends(a.device.backends())
        .cooperative_matrix(precision != Precision::F32);
    let gpu = Gpu::with_options(gpu_options).map_err(|e| a.device.explain(e))?;
    if a.verbose {
        let s = gpu.summary();
        let driver = [s.driver.trim(), s.driver_info.trim()].join(" ");
        eprintln!("wgconv: adapter: {} ({}, {}; driver {})", s.name, s.backend, s.device_type, driver.trim());
        eprintln!("wgconv: problem: {problem}{}", if a.relu { " relu" } else { "" });
    }
    let activation = if a.relu { Activation::Relu } else { Activation::None };
    // A bare tile config: the precision's default family on this device runs it.
    let kernel = match config {
        Some(ConfigArg::Tile(cfg)) => {
            let default =
                default_kernel(gpu.caps(), precision).map_err(|e| CliError(format!("--precision {precision}: {e}")))?;
            let kernel = default.with_tile(cfg).ok_or_else(|| {
                CliError(format!("--config {cfg}: the {precision} default kernel {default} takes no tile config"))
            })?;
            kernel.check_shape().map_err(|e| CliError(format!("--config {cfg}: {e}")))?;
            Some(kernel)
        }
        Some(ConfigArg::Kernel(k)) => Some(k),
        None => None,
    };
    let options =
        Conv2dOptions::default().kernel(kernel).activation(activation).precision(precision).tuning_key_input(shape);
    let conv = Conv2d::new(&gpu, spec, &w.data, b.as_ref().map(|b| &b.data[..]), options).map_err(|e| match e {
        // The named kernel does not fit the device or the convolution.
        Error::KernelRefused { .. } | Error::Unsupported { .. } if a.config.is_some() => {
            CliError(format!("--config {}: {e}", a.config.as_deref().unwrap_or_default()))
        }
        e => CliError(e.to_string()),
    })?;
    let selection = conv.kernel();
    if a.verbose {
        let why = match selection.source {
            ConfigSource::Explicit => String::new(),
            _ => format!("; {}", selection.reason),
        };
        eprintln!("wgconv: kernel: {} [{}{why}]", selection.kernel, describe_source(selection.source));
    }
    let y = conv.forward(&x.data, shape)?;
    if y.len() as u64 != problem.output.len() {
        return Err(CliError(format!(
            "internal error: the GPU returned {} values, expected {}",
            y.len(),
            problem.output.len()
        )));
    }
    if a.verbose {
        eprintln!("wgconv: {}", gpu_time(&gpu, &conv, shape, &x.data));
    }

    // 5. Y, atomically.
    let o = problem.output;
    output.finish(&[o.n as u64, o.c as u64, o.h as u64, o.w as u64], &y)
}

/// One more run of the convolution on buffers of our own, timed with timestamp queries.
fn gpu_time(gpu: &Gpu, conv: &Conv2d, shape: Shape4, x: &[f32]) -> String {
    let Ok(problem) = conv.spec().problem(shape) else { return "GPU time: not measured".into() };
    let (in_bytes, out_bytes) = (problem.input.len() * 4, problem.output.len() * 4);
    let max = gpu.limits().max_buffer_size;
    if in_bytes.max(out_bytes) > max {
        return format!(
            "GPU time: not measured (a {} B tensor exceeds the device's max_buffer_size of {max} B; \
             the result was computed in chunks)",
            in_bytes.max(out_bytes)
        );
    }
    let buffers =
        gpu.buffer_init("wgconv run timing input", bytemuck::cast_slice(x), wgpu::BufferUsages::STORAGE).and_then(
            |input| Ok((input, gpu.create_buffer("wgconv run timing output", out_bytes, wgpu::BufferUsages::STORAGE)?)),
        );
    let (input, output) = match buffers {
        Ok(b) => b,
        Err(e) => return format!("GPU time: not measured ({e})"),
    };
    let plan = match conv.plan(shape, &input, &output) {
        Ok(p) => p,
        Err(e) => return format!("GPU time: not measured ({e})"),
    };
    match timing::time_plan(gpu, &plan, 0, 1) {
        Ok((times, timing::Clock::GpuTimestamps)) => {
            let n = plan.chunks();
            format!(
                "GPU time: {:.3} ms (timestamp queries, 1 run, {n} dispatch{})",
                times[0],
                if n == 1 { "" } else { "es" }
            )
        }
        Ok((times, timing::Clock::HostWallClock)) => format!(
            "GPU time: not available (the device has no TIMESTAMP_QUERY); host wall-clock {:.3} ms for 1 run \
             including submission",
            times[0]
        ),
        Ok((times, clock)) => format!("GPU time: {:.3} ms ({clock:?}, 1 run)", times[0]),
        Err(e) => format!("GPU time: not measured ({e})"),
    }
}
