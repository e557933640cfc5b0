//! Criterion timing of the kernel selection alone (`wgconv::advanced::select`, what
//! `Conv2d::new` decides before any device work; the tuning cache left out) on every
//! convolution of the networks in `cli/data/models.json` at their batch, with the input
//! shape known, for each precision and both layouts. It runs on two sets of capabilities:
//! this adapter's (lavapipe on a machine without GPU), and the same set named as an NVIDIA
//! H100 with f16, subgroups of 32 and cooperative matrices, which takes the rules that
//! weigh the declared rates (the matrix, Winograd and split-K estimates; this adapter's
//! limits stay, so a family whose check needs more than they give is passed by, as the stem
//! kernel is under lavapipe's). It prints the families each set picks. An iteration selects
//! for every layer once; criterion's time per element is the time per selection.
//!
//! `cargo bench --bench select` finishes in under a minute; `cargo test --all-targets` runs
//! each benchmark once (test mode).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::time::Duration;
use wgconv::advanced::select;
use wgconv::{Conv2dOptions, Conv2dSpec, Gpu, GpuOptions, Layout, Precision, Shape4};

/// Every distinct convolution of the models file at the model's batch.
fn layers() -> Vec<(Conv2dSpec, Shape4)> {
    let models: serde_json::Value =
        serde_json::from_str(include_str!("../cli/data/models.json")).expect("cli/data/models.json parses");
    let mut out = Vec::new();
    for model in models["models"].as_object().expect("a models object").values() {
        let batch = model["batch"].as_u64().expect("a batch") as u32;
        for l in model["layers"].as_array().expect("a layers array") {
            let u = |key: &str| l[key].as_u64().unwrap_or_else(|| panic!("layer field {key}")) as u32;
            let spec = Conv2dSpec::new(u("c_in"), u("c_out"), u("k"))
                .stride(u("stride"))
                .padding(u("pad"))
                .groups(u("groups"));
            out.push((spec, Shape4::new(batch, u("c_in"), u("h"), u("w"))));
        }
    }
    out
}

#[path = "../tests/common/as_h100.rs"]
mod h100;
use h100::as_h100;

fn selection(c: &mut Criterion) {
    let gpu = Gpu::with_options(GpuOptions::default()).expect("a wgpu adapter (lavapipe on a machine without GPU)");
    let layers = layers();
    let adapters = [("this adapter", gpu.caps().clone()), ("as an H100", as_h100(gpu.caps()))];
    eprintln!("select bench: {} layers; this adapter is {}", layers.len(), gpu.info.name);
    let mut group = c.benchmark_group("select");
    group.sample_size(20).warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(2));
    group.throughput(Throughput::Elements(layers.len() as u64));
    for (adapter, caps) in &adapters {
        for precision in [Precision::F32, Precision::F16Accum32, Precision::F16x3] {
            for layout in [Layout::Nchw, Layout::Nhwc] {
                let options: Vec<Conv2dOptions> = layers
                    .iter()
                    .map(|&(_, shape)| {
                        Conv2dOptions::default().precision(precision).layout(layout).tuning_key_input(shape)
                    })
                    .collect();
                // Layers a precision cannot run on these capabilities are refused by name;
                // they are timed too (a refusal is a selection's answer).
                let mut families = std::collections::BTreeMap::<String, usize>::new();
                for ((spec, _), o) in layers.iter().zip(&options) {
                    let family = select(caps, spec, o).map_or("refused".into(), |s| s.kernel.family().to_string());
                    *families.entry(family).or_default() += 1;
                }
                let id = format!("{adapter} {precision} {layout:?}");
                eprintln!("select bench: {id}: {families:?}");
                group.bench_function(BenchmarkId::from_parameter(id), |bench| {
                    bench.iter(|| {
                        for ((spec, _), o) in layers.iter().zip(&options) {
                            let _ = std::hint::black_box(select(caps, spec, o));
                        }
                    })
                });
            }
        }
    }
    group.finish();
}

criterion_group!(benches, selection);
criterion_main!(benches);
