//! The micro-tuner (feature `tune`, on by default): times a kernel's nearby configs on this
//! device, keeps one only if it is clearly and stably faster, and stores the decision in the
//! tuning cache, where a `Conv2d` built with `tuning_key_input` finds it.
//! Run: `cargo run --release --example autotune` (slow on CPU adapters: a small layer here).

use wgconv::tune::{self, TuneOptions};
use wgconv::{Conv2d, Conv2dOptions, Conv2dSpec, Gpu, Shape4};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let gpu = Gpu::new()?;
    let spec = Conv2dSpec::new(16, 16, 3).padding(1);
    let shape = Shape4::new(1, 16, 16, 16);
    let problem = spec.problem(shape)?;
    let weight = vec![0.01f32; spec.weight_len()];

    // The kernel a default Conv2d runs on this shape is the tuner's starting point.
    let options = Conv2dOptions::default().tuning_key_input(shape);
    let start = Conv2d::new(&gpu, spec, &weight, None, options)?.kernel().kernel.clone();
    if tune::check_tunable(&start).is_err() {
        println!("{start} is not a tunable kernel family here; nothing to tune");
        return Ok(());
    }
    // The decision goes to the tuning cache Conv2d reads (WGCONV_CACHE_DIR, else the
    // platform's cache directory); a second run answers from it without measuring.
    let opts = TuneOptions::default().rounds(5).warmup(1);
    let outcome = tune::tune(&gpu, &problem, &start, &opts, &mut |_, _, _| {})?;
    println!("{}{}", outcome.report.decision_line(), if outcome.from_cache { " (from the cache)" } else { "" });

    // A Conv2d that states its input shape finds the decision.
    let conv = Conv2d::new(&gpu, spec, &weight, None, Conv2dOptions::default().tuning_key_input(shape))?;
    println!("a new Conv2d runs {}", conv.kernel());
    Ok(())
}
