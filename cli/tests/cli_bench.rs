//! `wgconv bench` end to end on a small problem: the real binary in a temp dir, its table,
//! JSON and SVG; a config the device cannot run listed as refused (with the reason) and
//! never ranked; `--runs` below 20 refused; `--precision f16`; and the small default
//! batch on a CPU adapter. Shapes stay small: CI runs this on lavapipe.

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

/// The small problem every run here uses (N=2, 3→17 channels, 24×20, 3×3 stride 2 pad 1).
const SMALL: &[&str] = &[
    "--batch",
    "2",
    "--in-channels",
    "3",
    "--height",
    "24",
    "--width",
    "20",
    "--out-channels",
    "17",
    "--kernel",
    "3",
    "--stride",
    "2",
    "--padding",
    "1",
];

fn wgconv(dir: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_wgconv"));
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        cmd.env("XDG_RUNTIME_DIR", std::env::temp_dir());
    }
    cmd.current_dir(dir).args(args).output().expect("the wgconv binary runs")
}

fn bench(dir: &Path, extra: &[&str]) -> (Output, String, String) {
    let mut args = vec!["bench"];
    args.extend_from_slice(SMALL);
    args.extend_from_slice(extra);
    let out = wgconv(dir, &args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stdout, stderr)
}

/// The table row of a kernel (its first line starting with the kernel's name).
fn row<'a>(table: &'a str, kernel: &str) -> Option<&'a str> {
    table.lines().find(|l| l.starts_with(kernel) && l[kernel.len()..].starts_with(' '))
}

#[test]
fn bench_small_problem_table_json_svg_and_refusal() {
    let dir = tempfile::tempdir().unwrap();
    let configs = "m32n64k32-t4x4-w4-s2,m64n32k32-t4x4-w4-s2,m64n64k16-t8x4-w4-s3,direct,m128n128k32-t8x8-w8-s4";
    let (out, stdout, stderr) = bench(
        dir.path(),
        &["--runs", "20", "--warmup", "1", "--configs", configs, "--json", "b.json", "--svg", "b.svg"],
    );
    assert!(out.status.success(), "exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}", out.status);

    // The table: header, one row per kernel, fastest first, the refused config last.
    let title = stdout.lines().next().unwrap_or_default();
    assert!(title.contains(" k3x3 s2,2 p1,1,1,1 "), "title line lacks the problem: {title}");
    let header = stdout.lines().find(|l| l.starts_with("kernel")).unwrap_or_else(|| panic!("no header:\n{stdout}"));
    for col in ["median ms", "min ms", "max ms", "TFLOP/s", "% peak", "vs base", "rel L2"] {
        assert!(header.contains(col), "header lacks {col:?}: {header}");
    }
    let ok = ["tiled:m32n64k32-t4x4-w4-s2", "tiled:m64n32k32-t4x4-w4-s2", "tiled:m64n64k16-t8x4-w4-s3", "direct"];
    let mut medians = Vec::new();
    for k in ok {
        let r = row(&stdout, k).unwrap_or_else(|| panic!("no row for {k}:\n{stdout}"));
        assert!(!r.contains("WRONG") && !r.contains("refused") && !r.contains("failed"), "{r}");
        let median: f64 = r[k.len()..].split_whitespace().next().unwrap().parse().unwrap_or_else(|_| panic!("{r}"));
        assert!(median > 0.0, "{r}");
        medians.push((stdout.find(r).unwrap(), median));
    }
    medians.sort_by_key(|(at, _)| *at);
    assert!(medians.windows(2).all(|p| p[0].1 <= p[1].1), "ranked rows are not fastest first:\n{stdout}");
    let refused_kernel = "tiled:m128n128k32-t8x8-w8-s4";
    let refused = row(&stdout, refused_kernel).unwrap_or_else(|| panic!("refused config not listed:\n{stdout}"));
    assert!(refused.contains("refused:") && refused.contains("workgroup memory"), "{refused}");
    let last_ranked = medians.last().unwrap().0;
    assert!(stdout.find(refused).unwrap() > last_ranked, "refused row ranked among the timed ones:\n{stdout}");

    // The JSON: every figure, a status per result, medians for the ok rows only.
    let json: Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("b.json")).unwrap()).unwrap();
    assert!(json["adapter"]["name"].as_str().is_some_and(|s| !s.is_empty()), "{json}");
    assert!(json["date"].as_str().is_some_and(|s| s.len() >= 10), "{json}");
    assert_eq!(json["runs"], 20);
    assert_eq!(json["warmup"], 1);
    assert_eq!(json["problem"]["input"]["n"], 2);
    assert_eq!(json["baseline"], "tiled:m32n64k32-t4x4-w4-s2");
    let results = json["results"].as_array().expect("results");
    assert_eq!(results.len(), 5, "{json}");
    for r in results {
        let kernel = r["kernel"].as_str().unwrap();
        let o = &r["outcome"];
        let status = o["status"].as_str().unwrap_or_else(|| panic!("no status: {r}"));
        if kernel == refused_kernel {
            assert_eq!(status, "refused", "{r}");
            let reason = o["reason"].as_str().unwrap_or_default();
            assert!(reason.contains("workgroup memory exceed the device's"), "{r}");
            assert!(o.get("time_ms").is_none(), "a refused config has a time: {r}");
        } else {
            assert_eq!(status, "ok", "{r}");
            let t = &o["time_ms"];
            let median = t["median"].as_f64().unwrap_or_else(|| panic!("no median: {r}"));
            assert!(median > 0.0 && t["min"].as_f64().unwrap() <= median && median <= t["max"].as_f64().unwrap());
            assert_eq!(t["n"], 20);
            assert!(o["rel_l2"].as_f64().unwrap() <= 1e-5, "{r}");
        }
    }
    let base = &results[0];
    assert!((base["outcome"]["speedup_vs_baseline"].as_f64().unwrap() - 1.0).abs() < 1e-9, "{base}");

    // The SVG: a chart of the ranked rows only.
    let svg = std::fs::read_to_string(dir.path().join("b.svg")).expect("the SVG is written");
    assert!(svg.trim_start().starts_with("<svg") || svg.contains("<svg"), "{}", &svg[..svg.len().min(200)]);
    assert!(svg.contains("m64n32k32-t4x4-w4-s2") && svg.contains("direct"), "SVG lacks the ranked rows");
    assert!(!svg.contains("m128n128k32"), "the refused config is charted");
}

#[test]
fn bench_refuses_too_few_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (out, stdout, stderr) = bench(dir.path(), &["--runs", "5", "--configs", "direct", "--json", "b.json"]);
    assert_eq!(out.status.code(), Some(1), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stderr.contains("--runs must be at least 20 (got 5)"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(!dir.path().join("b.json").exists(), "a refused run wrote its JSON");
}

#[test]
fn bench_f16_precision_runs_the_f16_kernel() {
    let dir = tempfile::tempdir().unwrap();
    let (out, stdout, stderr) = bench(
        dir.path(),
        &[
            "--precision",
            "f16",
            "--runs",
            "20",
            "--warmup",
            "1",
            "--configs",
            "m32n64k32-t4x4-w4-s2,m64n32k32-t4x4-w4-s2",
            "--json",
            "f.json",
        ],
    );
    assert!(out.status.success(), "exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}", out.status);
    let json: Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("f.json")).unwrap()).unwrap();
    let cpu = json["adapter"]["device_type"] == "Cpu";
    // Lavapipe has SHADER_F16 and no cooperative matrices: the f16 SIMT kernel, never f32.
    let label = if cpu || stdout.contains("tiled-f16") { "tiled-f16" } else { "coop-f16" };
    for c in ["m32n64k32-t4x4-w4-s2", "m64n32k32-t4x4-w4-s2"] {
        let k = format!("{label}:{c}");
        let r = row(&stdout, &k).unwrap_or_else(|| panic!("no row for {k}:\n{stdout}"));
        assert!(!r.contains("WRONG") && !r.contains("failed"), "{r}");
    }
    assert!(!stdout.lines().any(|l| l.starts_with("tiled:")), "an f32 row in an f16 run:\n{stdout}");
    for r in json["results"].as_array().unwrap() {
        assert_eq!(r["outcome"]["status"], "ok", "{r}");
        let err = r["outcome"]["rel_l2"].as_f64().unwrap();
        // f16 operands: above f32's error, within the f16 bound.
        assert!(err > 1e-6 && err <= 1e-3, "{r}");
    }
}

/// `--storage f16` on images of an odd output size (17 × 11 × 11 = 2057 elements: the second
/// image starts mid-word) in both layouts: every kernel correct within the f16 output's
/// rounding (above f32's error), the problem text says so, and the bytes count 2 per element
/// of the tensors (the weights stay f32).
#[test]
fn bench_f16_storage_on_odd_images() {
    let dir = tempfile::tempdir().unwrap();
    for layout in ["nchw", "nhwc"] {
        let mut args = vec!["bench", "--batch", "2", "--in-channels", "3", "--height", "21", "--width", "21"];
        args.extend(["--out-channels", "17", "--kernel", "3", "--stride", "2", "--padding", "1", "--runs", "20"]);
        args.extend(["--warmup", "1", "--configs", "auto,m32n64k32-t4x4-w4-s2,direct", "--storage", "f16"]);
        args.extend(["--layout", layout, "--json", "s.json"]);
        let out = wgconv(dir.path(), &args);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}", out.status);
        let json: Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("s.json")).unwrap()).unwrap();
        assert!(json["problem_text"].as_str().unwrap().ends_with(" f16 storage"), "{}", json["problem_text"]);
        assert_eq!(json["sampled_images"], serde_json::json!([0, 1]));
        // Input 2·3·21·21 and output 2·17·11·11 at 2 B, weights 17·27 and bias 17 at 4 B.
        let bytes = (2 * 3 * 21 * 21 + 2 * 17 * 11 * 11) as f64 * 2.0 + (17 * 27 + 17) as f64 * 4.0;
        assert!((json["min_mbytes"].as_f64().unwrap() - bytes / 1e6).abs() < 1e-12, "{}", json["min_mbytes"]);
        for r in json["results"].as_array().unwrap() {
            assert_eq!(r["outcome"]["status"], "ok", "{layout}: {r}");
            let err = r["outcome"]["rel_l2"].as_f64().unwrap();
            assert!(err > 1e-5 && err <= 1e-3, "{layout}: {r}");
        }
    }
}

/// `--precision f16x3` runs only on cooperative matrices: on lavapipe a one-line refusal
/// that names them, and no JSON; the row-band kernel is refused outside `--precision f16`.
#[test]
fn bench_refuses_f16x3_without_cooperative_matrices_and_band_outside_f16() {
    let dir = tempfile::tempdir().unwrap();
    let (out, stdout, stderr) = bench(dir.path(), &["--precision", "f16x3", "--runs", "20", "--json", "x.json"]);
    if out.status.success() {
        assert!(stdout.contains("coop-f16x3"), "f16x3 ran, but not on cooperative matrices:\n{stdout}");
    } else {
        assert_eq!(out.status.code(), Some(1), "stdout:\n{stdout}\nstderr:\n{stderr}");
        assert!(
            stderr.contains("f16x3 precision cannot run here") && stderr.contains("needs cooperative matrices"),
            "{stderr}"
        );
        assert!(!dir.path().join("x.json").exists(), "a refused run wrote its JSON");
    }
    let (out, _, stderr) = bench(dir.path(), &["--configs", "band:m128n96d16-w8-s1"]);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--precision f16"), "{stderr}");
}

/// The default batch (no --batch) on a CPU adapter is a small one, and says so. The
/// default AlexNet sweep is slow on lavapipe: one config, 20 runs, no warm-up.
#[test]
fn bench_default_batch_on_cpu_adapter_is_small() {
    let dir = tempfile::tempdir().unwrap();
    let out = wgconv(
        dir.path(),
        &["bench", "--configs", "m32n64k32-t4x4-w4-s2", "--runs", "20", "--warmup", "0", "--json", "d.json"],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}", out.status);
    let json: Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("d.json")).unwrap()).unwrap();
    let n = json["problem"]["input"]["n"].as_u64().unwrap();
    if json["adapter"]["device_type"] != "Cpu" {
        assert_eq!(n, 256, "GPU default batch");
        return;
    }
    // The benchmark's `CPU_BATCH` (cli/src/bench_run.rs, private to the binary).
    let batch = 2;
    assert_eq!(n, batch as u64);
    assert!(stderr.contains(&format!("is a CPU adapter: batch {batch} (use --batch to override)")), "{stderr}");
    assert!(stdout.contains("tiled:m32n64k32-t4x4-w4-s2"), "{stdout}");
}

/// `wgconv tune --config-from` starts from the fastest correct tiled kernel of a bench
/// report (the direct kernel, which has no tile config, is passed over), and a file that is
/// not a bench report is refused with its path.
#[test]
fn tune_starts_from_a_bench_reports_winner() {
    let dir = tempfile::tempdir().unwrap();
    let configs = "m32n64k32-t4x4-w4-s2,m64n32k32-t4x4-w4-s2,direct";
    let (out, stdout, stderr) =
        bench(dir.path(), &["--runs", "20", "--warmup", "1", "--configs", configs, "--json", "b.json"]);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("b.json")).unwrap()).unwrap();
    let winner = report["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["outcome"]["status"] == "ok" && !r["config"].is_null())
        .min_by(|a, b| {
            let t = |r: &Value| r["outcome"]["time_ms"]["median"].as_f64().unwrap();
            t(a).total_cmp(&t(b))
        })
        .map(|r| r["kernel"].as_str().unwrap().to_string())
        .unwrap();
    let mut args = vec!["tune"];
    args.extend_from_slice(SMALL);
    args.extend_from_slice(&["--rounds", "5", "--config-from", "b.json"]);
    let cache = dir.path().join("cache");
    let out = Command::new(env!("CARGO_BIN_EXE_wgconv"))
        .current_dir(dir.path())
        .env("WGCONV_CACHE_DIR", &cache)
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .args(&args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains(&format!("starting from {winner}")), "{stderr}");
    std::fs::write(dir.path().join("not.json"), "{}").unwrap();
    let bad = args.iter().map(|a| if *a == "b.json" { "not.json" } else { a }).collect::<Vec<_>>();
    let out = Command::new(env!("CARGO_BIN_EXE_wgconv"))
        .current_dir(dir.path())
        .env("WGCONV_CACHE_DIR", &cache)
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .args(&bad)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("--config-from not.json") && stderr.contains("not a bench report"),
        "{stderr}"
    );
}

/// `--interleave`: the configs are timed in rounds, each config with all its runs, and a
/// config the device refuses is still listed as refused.
#[test]
fn bench_interleaved_rounds_time_every_config() {
    let dir = tempfile::tempdir().unwrap();
    let configs = "m32n64k32-t4x4-w4-s2,m64n32k32-t4x4-w4-s2,m128n128k32-t8x8-w8-s4";
    let (out, stdout, stderr) =
        bench(dir.path(), &["--runs", "20", "--warmup", "1", "--interleave", "--configs", configs, "--json", "i.json"]);
    assert!(out.status.success(), "exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}", out.status);
    let json: Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("i.json")).unwrap()).unwrap();
    let results = json["results"].as_array().unwrap();
    assert_eq!(results.len(), 3, "{json}");
    for r in &results[..2] {
        let samples = r["outcome"]["samples_ms"].as_array().unwrap_or_else(|| panic!("{r}"));
        assert_eq!(samples.len(), 20, "{r}");
        assert!(samples.iter().all(|t| t.as_f64().unwrap() > 0.0), "{r}");
    }
    assert_eq!(results[2]["outcome"]["status"], "refused", "{}", results[2]);
}
