//! Problem-shape flags shared by `bench` and `tune` (default: AlexNet conv1).

use crate::cli::CliResult;
use wgconv::{Conv2dSpec, ConvProblem, Shape4};

#[derive(clap::Args, Debug, Clone)]
pub struct ShapeArgs {
    /// Batch size N (default: 256 on a GPU, a small batch on a CPU adapter)
    #[arg(long)]
    pub batch: Option<u32>,
    /// Input channels C_in
    #[arg(long, default_value_t = 3)]
    pub in_channels: i64,
    /// Input height H
    #[arg(long, default_value_t = 224)]
    pub height: u32,
    /// Input width W
    #[arg(long, default_value_t = 224)]
    pub width: u32,
    /// Output channels C_out
    #[arg(long, default_value_t = 96)]
    pub out_channels: i64,
    /// Kernel size: K or KH,KW
    #[arg(long, default_value = "11", value_parser = parse_pair)]
    pub kernel: [i64; 2],
    /// Stride: S or SH,SW
    #[arg(long, default_value = "4", value_parser = parse_pair)]
    pub stride: [i64; 2],
    /// Padding: P, PH,PW or top,left,bottom,right
    #[arg(long, default_value = "2", value_parser = parse_pads, allow_hyphen_values = true)]
    pub padding: [i64; 4],
    /// Dilation: D or DH,DW
    #[arg(long, default_value = "1", value_parser = parse_pair)]
    pub dilation: [i64; 2],
    /// Groups
    #[arg(long, default_value_t = 1)]
    pub groups: i64,
    /// No bias (AlexNet conv1 has one)
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
    /// The convolution the flags describe (signed values checked with their names).
    pub fn spec(&self) -> CliResult<Conv2dSpec> {
        Ok(Conv2dSpec::from_signed(
            self.in_channels,
            self.out_channels,
            self.kernel,
            self.stride,
            self.padding,
            self.dilation,
            self.groups,
            !self.no_bias,
        )?)
    }

    /// The problem, with the batch defaulting to `default_batch`.
    pub fn problem(&self, default_batch: u32) -> CliResult<ConvProblem> {
        let spec = self.spec()?;
        let n = self.batch.unwrap_or(default_batch);
        Ok(spec.problem(Shape4::new(n, spec.in_channels, self.height, self.width))?)
    }
}
