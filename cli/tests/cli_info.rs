//! `wgconv info` (text and JSON) on lavapipe, and the top-level help.

use std::process::{Command, Output};

fn wgconv(args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_wgconv"));
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        cmd.env("XDG_RUNTIME_DIR", std::env::temp_dir());
    }
    cmd.args(args).output().expect("the wgconv binary runs")
}

fn stdout_of(args: &[&str]) -> String {
    let out = wgconv(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "wgconv {args:?} failed:\n{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn info_lists_lavapipe_and_the_choice() {
    let text = stdout_of(&["info"]);
    assert!(text.contains("llvmpipe"), "no lavapipe adapter listed:\n{text}");
    assert!(text.contains("wgconv would use [") && text.contains("<- wgconv would use this"), "{text}");
    for needle in [
        "max_storage_buffer_binding_size",
        "max_buffer_size",
        "max_compute_workgroup_storage_size",
        "max_compute_invocations_per_workgroup",
        "max_compute_workgroups_per_dimension",
        "subgroup size",
        "SHADER_F16",
        "TIMESTAMP_QUERY",
        "SUBGROUP",
        "EXPERIMENTAL_COOPERATIVE_MATRIX",
        "cooperative matrix",
        "default sweep:",
        "driver:",
        "precisions (",
    ] {
        assert!(text.contains(needle), "info lacks {needle:?}:\n{text}");
    }
    // Each precision's default kernel: f32 on the tiled family.
    assert!(
        text.lines().any(|l| l.trim_start().starts_with("f32") && l.contains("-> tiled:")),
        "info does not name f32's default kernel (tiled):\n{text}"
    );
}

#[test]
fn info_json_has_the_same_facts() {
    let json = stdout_of(&["info", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}:\n{json}"));
    let adapters = v["adapters"].as_array().expect("adapters array");
    assert!(!adapters.is_empty());
    let chosen = v["chosen"].as_u64().expect("an adapter is chosen") as usize;
    assert!(!v["reason"].as_str().unwrap().is_empty());
    assert_eq!(adapters[chosen]["chosen"], true);
    assert_eq!(adapters.iter().filter(|a| a["chosen"] == true).count(), 1);
    let lavapipe = adapters
        .iter()
        .find(|a| a["name"].as_str().unwrap().contains("llvmpipe"))
        .unwrap_or_else(|| panic!("no llvmpipe adapter in {json}"));
    for key in ["backend", "device_type", "driver", "driver_info"] {
        assert!(lavapipe[key].is_string(), "{key} missing");
    }
    assert_eq!(lavapipe["device_type"], "Cpu");
    let limits = &lavapipe["limits"];
    for key in [
        "max_storage_buffer_binding_size",
        "max_buffer_size",
        "max_compute_workgroup_storage_size",
        "max_compute_invocations_per_workgroup",
        "max_compute_workgroups_per_dimension",
        "min_subgroup_size",
        "max_subgroup_size",
    ] {
        assert!(limits[key].as_u64().is_some_and(|n| n > 0), "limits.{key} = {}", limits[key]);
    }
    for key in ["shader_f16", "timestamp_query", "subgroup", "experimental_cooperative_matrix"] {
        assert!(lavapipe["features"][key].is_boolean(), "features.{key}");
    }
    assert!(lavapipe["cooperative_matrix_properties"].is_array());
    // Lavapipe has SHADER_F16 and no cooperative matrices.
    let paths = &lavapipe["precision_paths"];
    assert_eq!(paths["f32"], "tiled", "{paths}");
    assert_eq!(paths["f16"], "tiled-f16", "{paths}");
    assert_eq!(paths["f16x3"], "refused", "{paths}");
    let sweep = lavapipe["sweep_size"].as_u64().unwrap() as usize;
    assert_eq!(sweep, wgconv::advanced::default_sweep().len());
    for r in lavapipe["refused_configs"].as_array().unwrap() {
        let name = r["config"].as_str().unwrap();
        assert!(wgconv::TileConfig::parse(name).is_ok(), "{name}");
        assert!(!r["reason"].as_str().unwrap().is_empty());
    }
}

#[test]
fn info_json_refusals_match_the_library() {
    // What info reports as refused is exactly what TileConfig::validate refuses.
    let json = stdout_of(&["info", "--json", "--adapter", "llvmpipe"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let chosen = &v["adapters"][v["chosen"].as_u64().unwrap() as usize];
    assert!(chosen["name"].as_str().unwrap().contains("llvmpipe"));
    let l = &chosen["limits"];
    let limits = wgconv::KernelLimits {
        workgroup_storage_bytes: l["max_compute_workgroup_storage_size"].as_u64().unwrap() as u32,
        invocations_per_workgroup: l["max_compute_invocations_per_workgroup"].as_u64().unwrap() as u32,
        workgroup_size_x: l["max_compute_workgroup_size_x"].as_u64().unwrap() as u32,
    };
    let want: Vec<String> =
        wgconv::advanced::default_sweep().iter().filter(|c| c.validate(&limits).is_err()).map(|c| c.name()).collect();
    let got: Vec<String> =
        chosen["refused_configs"].as_array().unwrap().iter().map(|r| r["config"].as_str().unwrap().into()).collect();
    assert_eq!(got, want);
}

#[test]
fn info_with_unknown_adapter_says_why_none() {
    let text = stdout_of(&["info", "--adapter", "no-such-gpu-xyz"]);
    assert!(text.contains("wgconv would use none") && text.contains("no-such-gpu-xyz"), "{text}");
}

#[test]
fn help_describes_every_subcommand_with_examples() {
    let top = stdout_of(&["--help"]);
    for needle in ["run", "info", "Examples:", "wgconv run --input"] {
        assert!(top.contains(needle), "--help lacks {needle:?}:\n{top}");
    }
    let info = stdout_of(&["info", "--help"]);
    for needle in ["--json", "adapter", "Examples:", "wgconv info --json"] {
        assert!(info.contains(needle), "info --help lacks {needle:?}:\n{info}");
    }
}

/// `wgconv peak` on lavapipe: the FMA and copy rows measure, the matrix rows say why they
/// cannot run there, the JSON holds the same rows; bad arguments are refused before any work.
#[test]
fn peak_measures_what_the_adapter_has_and_names_what_it_lacks() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("peak.json");
    let text = stdout_of(&["peak", "--runs", "3", "--target-ms", "1", "--json", json.to_str().unwrap()]);
    assert!(text.contains("fp32 FMA") && text.contains("memory copy"), "{text}");
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let rows = report["rows"].as_array().unwrap();
    let fma = rows.iter().find(|r| r["what"] == "fp32 FMA").unwrap();
    assert!(fma["rate"].as_f64().is_some_and(|r| r > 0.0), "{fma}");
    assert_eq!(fma["time_ms"]["n"], 3, "{fma}");
    let matrix: Vec<_> = rows.iter().filter(|r| r["what"].as_str().unwrap().starts_with("f16 matrix")).collect();
    assert!(!matrix.is_empty());
    for r in matrix {
        assert!(r["rate"].is_null() && r["error"].as_str().unwrap().contains("cooperative matri"), "{r}");
    }
    let only = stdout_of(&["peak", "--runs", "3", "--target-ms", "1", "--only", "FP32"]);
    assert!(only.contains("fp32 FMA") && !only.contains("memory copy"), "{only}");
    for bad in [&["peak", "--only", "no such row"][..], &["peak", "--target-ms", "0"], &["peak", "--runs", "2"]] {
        let out = wgconv(bad);
        assert!(!out.status.success(), "{bad:?} was accepted");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked") && stderr.contains("error"), "{bad:?}: {stderr}");
    }
}
