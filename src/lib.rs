//! wgconv: fast, portable 2-D convolution for Rust — PyTorch `nn.Conv2d` / ONNX `Conv`
//! forward (NCHW f32) as WGSL compute shaders on wgpu.
//!
//! The data flows spec → config → kernel → conv2d → tune → bench:
//! - [`spec`]: shapes and attributes, validated ([`Conv2dSpec`], [`Shape4`]).
//! - [`config`]: [`TileConfig`], the tile vocabulary, checked against device limits.
//! - [`kernel`]: WGSL composition from `shaders/` and the pipeline cache.
//! - [`conv2d`]: [`Conv2d`], upload, chunking, grid folding, encode.
//! - [`tune`], [`bench`](mod@bench): the micro-tuner and the tile-size benchmark.
//! - [`reference`](mod@reference): the CPU reference (f64 accumulation) every test compares with.
//!
//! ```no_run
//! use std::sync::Arc;
//! use wgconv::{Conv2d, Conv2dOptions, Conv2dSpec, Gpu, Padding, Shape4};
//! let gpu = Arc::new(Gpu::new()?);
//! let spec = Conv2dSpec::new(3, 8, 3).padding(Padding::uniform(1)).with_bias(true);
//! let weight = vec![0.1f32; spec.weight_len()];
//! let bias = vec![0.0f32; 8];
//! let conv = Conv2d::new(&gpu, spec, &weight, Some(&bias), Conv2dOptions::default())?;
//! let x = vec![1.0f32; 2 * 3 * 16 * 16];
//! let y = conv.forward(&x, Shape4::new(2, 3, 16, 16))?; // [2, 8, 16, 16]
//! # Ok::<(), wgconv::Error>(())
//! ```

pub mod band;
pub mod bench;
pub mod cache;
pub mod config;
pub mod conv2d;
pub mod error;
pub mod gpu;
pub mod kernel;
pub mod reference;
pub mod spec;
pub mod stem;
pub mod timing;
pub mod tune;

pub use config::TileConfig;
pub use conv2d::{Activation, ConfigSource, Conv2d, Conv2dOptions, ConvPlan};
pub use error::{Error, Result};
pub use gpu::{Gpu, GpuOptions};
pub use kernel::{KernelKind, Precision};
pub use spec::{Conv2dSpec, ConvProblem, Padding, Shape4};
