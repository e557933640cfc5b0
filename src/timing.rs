//! GPU time of work recorded into one compute pass (a [`crate::ConvPlan`]) from timestamp
//! queries (host wall-clock, marked as such, where a device has none), and the statistics
//! every report quotes; public as `wgconv::tune::timing`. A module of its own below both
//! `Conv2d` (its autotuner) and the tuner.

use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::scope::ErrorScope;

/// Work that records itself into one compute pass, optionally between two timestamps: what
/// the functions here run ([`crate::ConvPlan`] is one).
pub trait EncodePass {
    /// Records the work into `encoder`, its compute pass writing `timestamps` where given.
    fn encode_pass(&self, encoder: &mut wgpu::CommandEncoder, timestamps: Option<wgpu::ComputePassTimestampWrites<'_>>);
}

/// Where a time came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub enum Clock {
    /// Timestamp queries around the compute pass.
    GpuTimestamps,
    /// Host clock around submit + wait: includes submission overhead.
    HostWallClock,
}

/// Most runs one call times: two timestamps each, and a query set holds at most 4096.
pub const MAX_TIMED_RUNS: u32 = 2048;

/// One untimed run of `plan`, submitted (not waited for).
fn submit<P: EncodePass + ?Sized>(gpu: &Gpu, plan: &P) {
    let mut enc = gpu.device.create_command_encoder(&Default::default());
    plan.encode_pass(&mut enc, None);
    gpu.queue.submit([enc.finish()]);
}

/// Times `runs` executions of `plan` (1 to [`MAX_TIMED_RUNS`]) after `warmup` untimed
/// ones (on the timestamp path queued right behind them and behind whatever the caller
/// queued, with no wait in between); milliseconds per run, and where they came from. All
/// timed runs go in one submission, each its own compute pass between two timestamps, so that the host's
/// submission overhead is not timed; a device without timestamp queries is timed by the
/// host clock around each submission and wait ([`Clock::HostWallClock`]).
pub fn time_plan<P: EncodePass + ?Sized>(gpu: &Gpu, plan: &P, warmup: u32, runs: u32) -> Result<(Vec<f64>, Clock)> {
    if runs == 0 || runs > MAX_TIMED_RUNS {
        return Err(Error::InvalidOptions(format!("time_plan times 1 to {MAX_TIMED_RUNS} runs, not {runs}")));
    }
    if gpu.has_timestamps() {
        let (times, clock) = time_interleaved(gpu, &[plan], warmup, runs)?;
        let times = times.into_iter().next().unwrap_or_default();
        if times.len() != runs as usize || times.iter().any(|t| t.is_nan()) {
            return Err(Error::Wgpu { stage: "timestamps", message: format!("implausible GPU times {times:?}") });
        }
        return Ok((times, clock));
    }
    // Every submission inside an error scope: a validation error is this call's, not the
    // device's uncaptured-error handler's (wgpu's default one panics).
    let scope = ErrorScope::push(&gpu.device);
    for _ in 0..warmup {
        submit(gpu, plan);
    }
    scope.finish("warm-up runs")?;
    gpu.wait()?;
    let mut times = Vec::with_capacity(runs as usize);
    for _ in 0..runs {
        let scope = ErrorScope::push(&gpu.device);
        let t0 = std::time::Instant::now();
        submit(gpu, plan);
        gpu.wait()?;
        times.push(t0.elapsed().as_secs_f64() * 1e3);
        scope.finish("timed runs")?;
    }
    Ok((times, Clock::HostWallClock))
}

/// Times several plans in interleaved rounds: `warmup` untimed rounds, then `rounds` timed
/// ones, each round one run of every plan (the plan that starts a round rotating) in one
/// submission, the rounds queued back to back with no wait in between; milliseconds per run,
/// per plan, NaN for a run whose timestamps make no sense. A clock that changes while they
/// run (an idle GPU's clock coming back up) then falls on every plan alike, where plans timed
/// one after the other would each meet it at another point. A device without timestamp
/// queries times each plan after the other by the host clock ([`time_plan`]). At most
/// [`MAX_TIMED_RUNS`] timed runs in all.
pub fn time_interleaved<P: EncodePass + ?Sized>(
    gpu: &Gpu,
    plans: &[&P],
    warmup: u32,
    rounds: u32,
) -> Result<(Vec<Vec<f64>>, Clock)> {
    let runs = (plans.len() as u64).saturating_mul(rounds as u64);
    if plans.is_empty() || rounds == 0 || runs > MAX_TIMED_RUNS as u64 {
        return Err(Error::InvalidOptions(format!(
            "time_interleaved times 1 to {MAX_TIMED_RUNS} runs in all, not {} plans x {rounds} rounds",
            plans.len()
        )));
    }
    if !gpu.has_timestamps() {
        let mut times = Vec::with_capacity(plans.len());
        for plan in plans {
            times.push(time_plan(gpu, *plan, warmup, rounds)?.0);
        }
        return Ok((times, Clock::HostWallClock));
    }
    // Every submission inside an error scope: a validation error is this call's, not the
    // device's uncaptured-error handler's (wgpu's default one panics).
    let scope = ErrorScope::push(&gpu.device);
    for _ in 0..warmup {
        for plan in plans {
            submit(gpu, *plan);
        }
    }
    scope.finish("warm-up runs")?;
    let count = (runs * 2) as u32;
    let scope = ErrorScope::push(&gpu.device);
    let queries = gpu.device.create_query_set(&wgpu::QuerySetDescriptor {
        label: Some("wgconv timestamps"),
        ty: wgpu::QueryType::Timestamp,
        count,
    });
    let resolve = gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("wgconv timestamps resolve"),
        // Whole granules, as every buffer wgconv makes (`BUFFER_GRANULE`).
        size: (count as u64 * 8).next_multiple_of(crate::gpu::BUFFER_GRANULE),
        usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    let n = plans.len();
    let mut slot = 0u32;
    // Which plan each pair of timestamps belongs to.
    let mut owner = Vec::with_capacity(runs as usize);
    for round in 0..rounds as usize {
        let mut enc = gpu.device.create_command_encoder(&Default::default());
        for j in 0..n {
            let i = (round + j) % n;
            plans[i].encode_pass(
                &mut enc,
                Some(wgpu::ComputePassTimestampWrites {
                    query_set: &queries,
                    beginning_of_pass_write_index: Some(slot),
                    end_of_pass_write_index: Some(slot + 1),
                }),
            );
            owner.push(i);
            slot += 2;
        }
        gpu.queue.submit([enc.finish()]);
    }
    let mut enc = gpu.device.create_command_encoder(&Default::default());
    enc.resolve_query_set(&queries, 0..count, &resolve, 0);
    gpu.queue.submit([enc.finish()]);
    scope.finish("timed runs")?;
    let stamps = gpu.read_buffer::<u64>(&resolve, 0, count as usize)?;
    let period = gpu.queue.get_timestamp_period() as f64;
    let mut times = vec![Vec::with_capacity(rounds as usize); n];
    for (pair, &i) in stamps.chunks(2).zip(&owner) {
        let t = pair[1].wrapping_sub(pair[0]) as f64 * period / 1e6;
        times[i].push(if t.is_finite() && t > 0.0 && t <= 1e6 { t } else { f64::NAN });
    }
    Ok((times, Clock::GpuTimestamps))
}

/// Keeps the GPU busy with `plan` for at least `min` of wall time (at least one run), so
/// that its clocks are up when the next submission runs: the runs go in command buffers of
/// growing size (doubling while a round of encoding one and waiting for the one before takes
/// under [`BUSY_CHUNK`], so they end at a few milliseconds each) with the next buffer queued
/// before the host waits for the previous one, and the last buffer is left running, so the
/// caller's next submission follows it without an idle gap. Validation errors are caught
/// (`ErrorScope`) and returned. Why: an H100's SM clock dropped from 1980 MHz to as little
/// as 360–450 MHz while the host did other work (sampled every 20 ms during a model bench;
/// the only clock-event reason reported was "GPU idle"), and a few milliseconds of timed runs after
/// such a pause ran at whatever clock it had left: whole layers measured 2.1–2.4× slow,
/// flat over their runs. One run per submit with a wait after each kept a small kernel's
/// GPU mostly idle, so a spin-up of that kind did not raise the clock.
pub fn keep_busy(gpu: &Gpu, plan: &impl EncodePass, min: std::time::Duration) -> Result<()> {
    let start = std::time::Instant::now();
    let mut chunk = 1u32;
    let mut queued: Option<wgpu::SubmissionIndex> = None;
    loop {
        let round = std::time::Instant::now();
        let scope = ErrorScope::push(&gpu.device);
        let mut enc = gpu.device.create_command_encoder(&Default::default());
        for _ in 0..chunk {
            plan.encode_pass(&mut enc, None);
        }
        let index = gpu.queue.submit([enc.finish()]);
        scope.finish("keeping the GPU busy")?;
        if let Some(previous) = queued.replace(index) {
            gpu.wait_for(previous)?;
        }
        if start.elapsed() >= min {
            return Ok(());
        }
        if round.elapsed() < BUSY_CHUNK && chunk < MAX_BUSY_RUNS {
            chunk *= 2;
        }
    }
}

/// The round time under which [`keep_busy`] doubles its command buffers.
pub const BUSY_CHUNK: std::time::Duration = std::time::Duration::from_millis(2);

/// Most runs in one command buffer of [`keep_busy`].
const MAX_BUSY_RUNS: u32 = 4096;

/// Median, min, max, quartiles of a sample: every report quotes the median (robust to the
/// occasional disturbed run) and the quartiles (the tuner's stability rule compares them).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Summary {
    /// The median (linear interpolation, [`quantile`] 0.5).
    pub median: f64,
    /// The smallest value.
    pub min: f64,
    /// The largest value.
    pub max: f64,
    /// The first quartile ([`quantile`] 0.25).
    pub q1: f64,
    /// The third quartile ([`quantile`] 0.75).
    pub q3: f64,
    /// How many values.
    pub n: usize,
}

impl Summary {
    /// The summary of a sample; `None` for an empty sample or one with a NaN, which has no
    /// order to summarise.
    pub fn of(sample: &[f64]) -> Option<Summary> {
        if sample.is_empty() || sample.iter().any(|v| v.is_nan()) {
            return None;
        }
        let mut v = sample.to_vec();
        v.sort_by(|a, b| a.total_cmp(b));
        Some(Summary {
            median: quantile(&v, 0.5),
            min: v[0],
            max: v[v.len() - 1],
            q1: quantile(&v, 0.25),
            q3: quantile(&v, 0.75),
            n: v.len(),
        })
    }
    /// The inter-quartile range, `q3 − q1`.
    pub fn iqr(&self) -> f64 {
        self.q3 - self.q1
    }
}

/// Linear-interpolated quantile of sorted data (NaN for no data).
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quartiles_interpolate() {
        let s = Summary::of(&[4.0, 1.0, 3.0, 2.0, 5.0]).unwrap();
        assert_eq!((s.min, s.q1, s.median, s.q3, s.max, s.n), (1.0, 2.0, 3.0, 4.0, 5.0, 5));
        assert_eq!(s.iqr(), 2.0);
        assert_eq!(quantile(&[1.0, 2.0], 0.5), 1.5);
        assert!(quantile(&[], 0.5).is_nan());
        assert!(Summary::of(&[]).is_none());
        assert!(Summary::of(&[1.0, f64::NAN]).is_none());
    }
}
