//! The micro-tuner (issue 4). Placeholder: no cached decisions yet.
use crate::config::TileConfig;
use crate::gpu::Gpu;
use crate::spec::ConvProblem;

/// The tuner's cached decision for this device and problem, if any.
pub fn cached_decision(_gpu: &Gpu, _problem: &ConvProblem) -> Option<TileConfig> {
    None
}
