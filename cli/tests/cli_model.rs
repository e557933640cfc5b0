//! `wgconv bench --model` end to end on lavapipe (about 1 GFLOP/s, so on a few layers at
//! batch 1 only): the table, the JSON (every figure; totals = Σ time × count), the SVG, the
//! cuDNN columns of `--compare` from a hand-written file, and the errors (an unknown model
//! lists the known ones; an unknown layer lists the model's).

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

fn wgconv(dir: &Path, args: &[&str]) -> (Output, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_wgconv"));
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        cmd.env("XDG_RUNTIME_DIR", std::env::temp_dir());
    }
    let out = cmd.current_dir(dir).args(args).output().expect("the wgconv binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{stderr}");
    (out, stdout, stderr)
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1e-12)
}

/// The table row of a layer.
fn row<'a>(table: &'a str, layer: &str) -> &'a str {
    table
        .lines()
        .find(|l| l.starts_with(layer) && l[layer.len()..].starts_with(' '))
        .unwrap_or_else(|| panic!("no row for {layer}:\n{table}"))
}

/// A timed kernel's figures in the JSON: a positive median within min..max, `n` runs.
fn check_perf(p: &Value, runs: u64) -> f64 {
    let t = &p["time_ms"];
    let median = f(&t["median"]);
    assert!(median > 0.0 && f(&t["min"]) <= median && median <= f(&t["max"]), "{p}");
    assert_eq!(t["n"], runs, "{p}");
    assert!(f(&p["tflops"]) > 0.0 && f(&p["gb_per_s"]) > 0.0, "{p}");
    assert!(f(&p["rel_l2"]) <= 1e-5, "{p}");
    median
}

#[test]
fn alexnet_conv3_default_and_direct_table_json_svg() {
    let dir = tempfile::tempdir().unwrap();
    let (out, stdout, stderr) = wgconv(
        dir.path(),
        &[
            "bench",
            "--model",
            "alexnet",
            "--batch",
            "1",
            "--layers",
            "conv3.3x3",
            "--configs",
            "auto,direct",
            "--runs",
            "3",
            "--warmup",
            "1",
            "--peak-tflops",
            "0.001",
            "--json",
            "m.json",
            "--svg",
            "m.svg",
        ],
    );
    assert!(out.status.success(), "exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}", out.status);

    // The table: the header names the model and batch, the bandwidth is measured, one row.
    assert!(stdout.starts_with("wgconv bench --model alexnet |"), "{stdout}");
    assert!(stdout.contains("| f32 | batch 1 | 1 layers |"), "{stdout}");
    assert!(stdout.contains("memory bandwidth: ") && stdout.contains(" GB/s (copy of 64 MiB"), "{stdout}");
    let header = stdout.lines().find(|l| l.starts_with("layer ")).unwrap_or_else(|| panic!("no header:\n{stdout}"));
    for col in [
        "shape",
        "count",
        "default kernel",
        "default ms (min-max)",
        "best kernel",
        "best ms",
        "def/best",
        "TFLOP/s",
        "GB/s",
        "def %floor",
        "best %floor",
    ] {
        assert!(header.contains(col), "header lacks {col:?}: {header}");
    }
    assert!(!header.contains("cuDNN"), "cuDNN columns without --compare: {header}");
    let r = row(&stdout, "conv3.3x3");
    // On a CPU adapter a 3×3 stride-1 layer of 256 channels runs the Winograd family.
    assert!(r.contains("256->384 13x13 k3 s1 p1") && r.contains("winograd:"), "{r}");
    assert!(stdout.contains("network total (sum of time x count over 1 layers): default "), "{stdout}");
    assert!(stdout.contains("default selections (a default Conv2d at f32):\n  conv3.3x3: winograd:"), "{stdout}");

    // The JSON.
    let j = json(&dir.path().join("m.json"));
    assert_eq!(j["model"], "alexnet");
    assert_eq!(j["batch"], 1);
    assert_eq!(j["runs"], 3);
    assert_eq!(j["warmup"], 1);
    assert_eq!(j["precision"], "f32");
    assert!(j["adapter"]["name"].as_str().is_some_and(|s| s.contains("llvmpipe")), "{}", j["adapter"]);
    assert!(j["adapter"]["driver"].is_string() && j["adapter"]["driver_info"].is_string());
    assert!(j["date"].as_str().is_some_and(|s| s.len() >= 10));
    let cmd: Vec<&str> = j["command_line"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert!(cmd.windows(2).any(|w| w == ["--model", "alexnet"]), "{cmd:?}");
    assert_eq!(j["clock"], "GpuTimestamps");
    let bw = &j["bandwidth"];
    assert_eq!(bw["bytes"], 64u64 << 20);
    let gbps = f(&bw["gb_per_s"]);
    assert!(close(gbps, 2.0 * f(&bw["bytes"]) / (f(&bw["time_ms"]["median"]) * 1e-3) / 1e9), "{bw}");
    assert!(j["compare"].is_null() && j["geomeans"].is_null() && j["totals"]["cudnn_fp32"].is_null());

    let layers = j["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1);
    let l = &layers[0];
    assert_eq!(l["name"], "conv3.3x3");
    assert_eq!(l["count"], 1);
    assert_eq!(l["problem"]["output"]["c"], 384);
    let default_kernel = l["default_selection"]["kernel"].as_str().unwrap();
    assert!(default_kernel.starts_with("winograd:"), "{l}");
    assert!(l["default_selection"]["reason"].as_str().is_some_and(|r| !r.is_empty()), "{l}");
    assert_eq!(l["default"]["kernel"], default_kernel);
    let d = check_perf(&l["default"], 3);
    let b = check_perf(&l["best"], 3);
    assert!(b <= d && close(f(&l["default_over_best"]), d / b), "{l}");
    // The default, then direct: both ran, both correct.
    let results = l["results"].as_array().unwrap();
    let kernels: Vec<&str> = results.iter().map(|r| r["kernel"].as_str().unwrap()).collect();
    assert_eq!(kernels, [default_kernel, "direct"]);
    assert!(results.iter().all(|r| r["outcome"]["status"] == "ok"), "{l}");
    let best_ms = results.iter().map(|r| f(&r["outcome"]["time_ms"]["median"])).fold(f64::INFINITY, f64::min);
    assert!(close(b, best_ms), "the best is not the fastest: {l}");
    // The floor: max(FLOPs / peak, bytes / bandwidth), bytes = input + weights + output, f32.
    let gflop = 2.0 * 384.0 * 13.0 * 13.0 * 256.0 * 9.0 / 1e9;
    assert!(close(f(&l["gflop"]), gflop), "{l}");
    let mbytes = 4.0 * (256.0 * 169.0 + 384.0 * 256.0 * 9.0 + 384.0 * 169.0) / 1e6;
    assert!(close(f(&l["mbytes"]), mbytes), "{l}");
    let p = &l["default"];
    assert_eq!(f(&p["peak_tflops"]), 0.001);
    let floor = (gflop * 1e9 / 1e9 * 1e3).max(mbytes * 1e6 / (gbps * 1e9) * 1e3);
    assert!(close(f(&p["floor_ms"]), floor), "{p}");
    assert!(close(f(&p["pct_of_floor"]), 100.0 * floor / d), "{p}");
    // Totals: Σ time × count.
    assert!(close(f(&j["totals"]["default"]["ms"]), d) && close(f(&j["totals"]["best"]["ms"]), b), "{}", j["totals"]);
    assert_eq!(j["totals"]["default"]["missing"].as_array().unwrap().len(), 0);

    let svg = std::fs::read_to_string(dir.path().join("m.svg")).expect("the SVG is written");
    assert!(svg.contains("<svg") && svg.contains("conv3.3x3 x1") && svg.contains("wgconv best"), "{svg}");
    assert!(!svg.contains("cuDNN"), "cuDNN series without --compare");
}

#[test]
fn mobilenet_two_layers_sweep_and_compare() {
    let dir = tempfile::tempdir().unwrap();
    // Hand-written cuDNN times: one layer has no fp16 time.
    std::fs::write(
        dir.path().join("cudnn.json"),
        r#"{"device": "NVIDIA H100 80GB HBM3", "torch": "2.11.0+cu128", "cudnn": 91002, "date": "2026-01-01T00:00:00Z",
            "model": "mobilenet_v2", "batch": 1,
            "layers": {"b4.ex.64-384": {"fp32": 2.0, "tf32": 1.0, "fp16": 0.5},
                       "b3.pj.192-32": {"fp32": 4.0, "tf32": 3.0, "fp16": null},
                       "stem.3x3.s2": {"fp32": 9.0, "tf32": 9.0, "fp16": 9.0}}}"#,
    )
    .unwrap();
    let (out, stdout, stderr) = wgconv(
        dir.path(),
        &[
            "bench",
            "--model",
            "mobilenet_v2",
            "--batch",
            "1",
            "--layers",
            "b4.ex.64-384,b3.pj.192-32",
            "--runs",
            "3",
            "--warmup",
            "1",
            "--compare",
            "cudnn.json",
            "--json",
            "m.json",
            "--svg",
            "m.svg",
        ],
    );
    assert!(out.status.success(), "exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}", out.status);
    assert!(stderr.contains("medians are rough"), "{stderr}");
    let header = stdout.lines().find(|l| l.starts_with("layer ")).unwrap_or_else(|| panic!("no header:\n{stdout}"));
    for col in ["cuDNN fp32", "tf32", "fp16", "fp32/def", "fp32/best"] {
        assert!(header.contains(col), "header lacks {col:?}: {header}");
    }
    assert!(stdout.contains("cuDNN (--compare cudnn.json): NVIDIA H100 80GB HBM3 | torch 2.11.0+cu128 | cuDNN 91002"));
    let r = row(&stdout, "b4.ex.64-384");
    assert!(r.contains(" 4 ") && r.contains("2.0000") && r.contains("0.5000"), "{r}");
    assert!(stdout.contains("geomean over the distinct layers of cuDNN time / wgconv time"), "{stdout}");
    assert!(stdout.contains("fp16 2.0000 ms (without b3.pj.192-32)"), "{stdout}");

    let j = json(&dir.path().join("m.json"));
    assert_eq!(j["compare"]["batch"], 1);
    assert_eq!(j["compare"]["device"], "NVIDIA H100 80GB HBM3");
    // Without --configs: the default plus the sweep of the default family (tiled for f32).
    assert_eq!(j["default_family"], "tiled");
    let candidates = j["candidates"].as_array().unwrap();
    assert!(candidates.len() > 2 && candidates.iter().all(|k| k.as_str().unwrap().starts_with("tiled:")));
    let layers = j["layers"].as_array().unwrap();
    let names: Vec<&str> = layers.iter().map(|l| l["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["b4.ex.64-384", "b3.pj.192-32"]);
    let (mut def_total, mut best_total, mut fp32_total) = (0.0, 0.0, 0.0);
    let mut log_ratios = Vec::new();
    for l in layers {
        let count = l["count"].as_u64().unwrap() as f64;
        let d = check_perf(&l["default"], 3);
        let b = check_perf(&l["best"], 3);
        assert!(b <= d, "{l}");
        // Every kernel of the sweep ran on the layer (or was refused with a reason); a wrong
        // one would never be the best.
        assert!(l["results"].as_array().unwrap().len() > 2, "{l}");
        for r in l["results"].as_array().unwrap() {
            let status = r["outcome"]["status"].as_str().unwrap();
            assert!(status == "ok" || status == "refused", "{r}");
        }
        def_total += d * count;
        best_total += b * count;
        let fp32 = f(&l["cudnn"]["fp32"]);
        fp32_total += fp32 * count;
        assert!(close(f(&l["ratios"]["cudnn_fp32_over_default"]), fp32 / d), "{l}");
        assert!(close(f(&l["ratios"]["cudnn_fp32_over_best"]), fp32 / b), "{l}");
        log_ratios.push((fp32 / d).ln());
    }
    assert_eq!(layers[0]["count"], 4);
    assert_eq!(layers[1]["count"], 2);
    assert!(layers[1]["cudnn"]["fp16"].is_null() && layers[1]["ratios"]["cudnn_fp16_over_best"].is_null());
    let t = &j["totals"];
    assert!(close(f(&t["default"]["ms"]), def_total), "{t}");
    assert!(close(f(&t["best"]["ms"]), best_total), "{t}");
    assert!(close(f(&t["cudnn_fp32"]["ms"]), fp32_total) && close(fp32_total, 2.0 * 4.0 + 4.0 * 2.0), "{t}");
    assert!(close(f(&t["cudnn_tf32"]["ms"]), 1.0 * 4.0 + 3.0 * 2.0), "{t}");
    assert!(close(f(&t["cudnn_fp16"]["ms"]), 0.5 * 4.0), "{t}");
    assert_eq!(t["cudnn_fp16"]["missing"][0], "b3.pj.192-32");
    let g = &j["geomeans"];
    let want = (log_ratios.iter().sum::<f64>() / log_ratios.len() as f64).exp();
    assert!(close(f(&g["cudnn_fp32_over_default"]["value"]), want), "{g}");
    assert_eq!(g["cudnn_fp32_over_default"]["layers"], 2);
    assert_eq!(g["cudnn_fp16_over_best"]["layers"], 1);

    let svg = std::fs::read_to_string(dir.path().join("m.svg")).expect("the SVG is written");
    for s in ["cuDNN strict fp32", "cuDNN TF32", "cuDNN fp16", "b4.ex.64-384 x4", "TOTAL"] {
        assert!(svg.contains(s), "the SVG lacks {s:?}");
    }
}

/// `--storage f16` on a model layer: the header says so, the layer is correct within the
/// f16 output's rounding, and its bytes count the tensors at 2 B (the weights at 4).
#[test]
fn model_f16_storage_counts_two_bytes_per_tensor_element() {
    let dir = tempfile::tempdir().unwrap();
    let (out, stdout, stderr) = wgconv(
        dir.path(),
        &[
            "bench",
            "--model",
            "mobilenet_v2",
            "--batch",
            "1",
            "--layers",
            "b3.pj.192-32",
            "--configs",
            "auto",
            "--runs",
            "1",
            "--warmup",
            "0",
            "--storage",
            "f16",
            "--json",
            "m.json",
        ],
    );
    assert!(out.status.success(), "exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}", out.status);
    assert!(stdout.contains("| f32 | f16 storage | batch 1 |"), "{stdout}");
    assert!(stdout.contains("(input + output) x 2 B + weights x 4 B"), "{stdout}");
    let j = json(&dir.path().join("m.json"));
    assert_eq!(j["storage"], "f16");
    let layer = &j["layers"][0];
    // 192→32 1×1 on 28×28: input 192·784 and output 32·784 at 2 B, weights 32·192 at 4 B.
    let bytes = (192 * 784 + 32 * 784) as f64 * 2.0 + (32 * 192) as f64 * 4.0;
    assert!(close(f(&layer["mbytes"]), bytes / 1e6), "{}", layer["mbytes"]);
    let best = &layer["best"];
    assert!(f(&best["rel_l2"]) > 1e-5 && f(&best["rel_l2"]) <= 1e-3, "{best}");
    assert!(close(f(&best["gb_per_s"]), bytes / f(&best["time_ms"]["median"]) / 1e6), "{best}");
}

#[test]
fn unknown_models_and_layers_are_refused_with_the_known_ones() {
    let dir = tempfile::tempdir().unwrap();
    let (out, _, stderr) = wgconv(dir.path(), &["bench", "--model", "unknown"]);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("unknown model \"unknown\""), "{stderr}");
    for m in ["resnet50", "mobilenet_v2", "vgg16", "alexnet"] {
        assert!(stderr.contains(m), "{m} not listed: {stderr}");
    }

    let (out, _, stderr) = wgconv(dir.path(), &["bench", "--model", "alexnet", "--layers", "conv9"]);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("alexnet has no layer \"conv9\"") && stderr.contains("conv1.11x11.s4, conv2.5x5"),
        "{stderr}"
    );

    // A --compare file of another model.
    std::fs::write(dir.path().join("c.json"), r#"{"model": "vgg16", "layers": {}}"#).unwrap();
    let (out, _, stderr) = wgconv(dir.path(), &["bench", "--model", "alexnet", "--compare", "c.json"]);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("its model is vgg16, not alexnet"), "{stderr}");

    // --layers and --compare need --model; --model excludes the shape flags (clap: exit 2).
    let (out, _, stderr) = wgconv(dir.path(), &["bench", "--layers", "conv1"]);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let (out, _, stderr) = wgconv(dir.path(), &["bench", "--model", "alexnet", "--kernel", "3"]);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("cannot be used with"), "{stderr}");
}
