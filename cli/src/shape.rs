//! Problem-shape flags shared by `bench` and `tune`: default a generic 3x3 same-padded
//! layer (64->64, 56x56, bias); `--preset alexnet-conv1` for the main job's shape. Flags
//! given explicitly override the preset's values.

use crate::cli::CliResult;
use wgconv::{Conv2dSpec, ConvProblem, Shape4};

/// A named convolution whose values the shape flags start from.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preset {
    /// 64->64, 3x3, stride 1, padding 1, 56x56, bias (a ResNet stage-1 layer)
    Generic3x3,
    /// AlexNet conv1: 3->96, 11x11, stride 4, padding 2, 224x224, bias
    AlexnetConv1,
}

/// The preset's values: in, out, H, W, kernel, stride, padding.
struct PresetValues {
    in_channels: i64,
    out_channels: i64,
    hw: u32,
    kernel: i64,
    stride: i64,
    padding: i64,
}

impl Preset {
    fn values(self) -> PresetValues {
        match self {
            Preset::Generic3x3 => {
                PresetValues { in_channels: 64, out_channels: 64, hw: 56, kernel: 3, stride: 1, padding: 1 }
            }
            Preset::AlexnetConv1 => {
                PresetValues { in_channels: 3, out_channels: 96, hw: 224, kernel: 11, stride: 4, padding: 2 }
            }
        }
    }
}

#[derive(clap::Args, Debug, Clone)]
pub struct ShapeArgs {
    /// Start from this convolution; the other shape flags override its values
    #[arg(long, value_enum, default_value = "generic3x3")]
    pub preset: Preset,
    /// Batch size N (default: 256 on a GPU, a small batch on a CPU adapter)
    #[arg(long)]
    pub batch: Option<u32>,
    /// Input channels C_in [default: 64; the preset's]
    #[arg(long)]
    pub in_channels: Option<i64>,
    /// Input height H [default: 56; the preset's]
    #[arg(long)]
    pub height: Option<u32>,
    /// Input width W [default: 56; the preset's]
    #[arg(long)]
    pub width: Option<u32>,
    /// Output channels C_out [default: 64; the preset's]
    #[arg(long)]
    pub out_channels: Option<i64>,
    /// Kernel size: K or KH,KW [default: 3; the preset's]
    #[arg(long, value_parser = parse_pair)]
    pub kernel: Option<[i64; 2]>,
    /// Stride: S or SH,SW [default: 1; the preset's]
    #[arg(long, value_parser = parse_pair)]
    pub stride: Option<[i64; 2]>,
    /// Padding: P, PH,PW or top,left,bottom,right [default: 1; the preset's]
    #[arg(long, value_parser = parse_pads, allow_hyphen_values = true)]
    pub padding: Option<[i64; 4]>,
    /// Dilation: D or DH,DW
    #[arg(long, default_value = "1", value_parser = parse_pair)]
    pub dilation: [i64; 2],
    /// Groups
    #[arg(long, default_value_t = 1)]
    pub groups: i64,
    /// No bias (both presets have one)
    #[arg(long)]
    pub no_bias: bool,
}

fn parse_ints(s: &str) -> Result<Vec<i64>, String> {
    s.split(',').map(|t| t.trim().parse::<i64>().map_err(|_| format!("{t:?} is not an integer"))).collect()
}

/// `S` or `SH,SW`.
pub fn parse_pair(s: &str) -> Result<[i64; 2], String> {
    match parse_ints(s)?[..] {
        [a] => Ok([a, a]),
        [a, b] => Ok([a, b]),
        _ => Err(format!("expected 1 or 2 comma-separated values, got {s:?}")),
    }
}

/// `P`, `PH,PW` or `PT,PL,PB,PR`.
pub fn parse_pads(s: &str) -> Result<[i64; 4], String> {
    match parse_ints(s)?[..] {
        [p] => Ok([p; 4]),
        [h, w] => Ok([h, w, h, w]),
        [t, l, b, r] => Ok([t, l, b, r]),
        _ => Err(format!("expected 1, 2 or 4 comma-separated values, got {s:?}")),
    }
}

impl ShapeArgs {
    /// The input's height and width (the flags, else the preset's).
    pub fn hw(&self) -> (u32, u32) {
        let p = self.preset.values();
        (self.height.unwrap_or(p.hw), self.width.unwrap_or(p.hw))
    }

    /// The convolution the flags describe (signed values checked with their names).
    pub fn spec(&self) -> CliResult<Conv2dSpec> {
        let p = self.preset.values();
        Ok(Conv2dSpec::from_signed(
            self.in_channels.unwrap_or(p.in_channels),
            self.out_channels.unwrap_or(p.out_channels),
            self.kernel.unwrap_or([p.kernel; 2]),
            self.stride.unwrap_or([p.stride; 2]),
            self.padding.unwrap_or([p.padding; 4]),
            self.dilation,
            self.groups,
            !self.no_bias,
        )?)
    }

    /// The problem, with the batch defaulting to `default_batch`.
    pub fn problem(&self, default_batch: u32) -> CliResult<ConvProblem> {
        let spec = self.spec()?;
        let n = self.batch.unwrap_or(default_batch);
        let (h, w) = self.hw();
        Ok(spec.problem(Shape4::new(n, spec.in_channels, h, w))?)
    }
}
