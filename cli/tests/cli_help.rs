//! Every subcommand's help, rendered by the real binary: the shared device flags are on
//! each, the defaults and paths it states are the ones in force, and nothing promises what
//! the code does not do.

use std::process::{Command, Output};

fn wgconv(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wgconv")).args(args).output().expect("the wgconv binary runs")
}

/// The long help (`--help`) of a subcommand, which must exit 0.
fn help(sub: &str) -> String {
    let out = wgconv(&[sub, "--help"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{sub} --help: {:?}\n{text}", out.status);
    text
}

#[test]
fn every_subcommand_takes_the_device_flags() {
    for sub in ["bench", "tune", "run", "info", "peak"] {
        let text = help(sub);
        for flag in ["--adapter <SUBSTRING>", "--backend <BACKEND>"] {
            assert!(text.contains(flag), "{sub} --help lacks {flag}:\n{text}");
        }
        assert!(text.contains("WGCONV_ADAPTER") && text.contains("WGPU_BACKEND"), "{sub}:\n{text}");
    }
}

#[test]
fn bench_backend_is_accepted() {
    // Parsing only: an unknown layer list fails after the flags were accepted.
    let out = wgconv(&["bench", "--backend", "vulkan", "--layers", "x"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("unexpected argument '--backend'"), "{stderr}");
}

#[test]
fn shape_defaults_are_a_generic_layer_with_an_alexnet_preset() {
    for sub in ["bench", "tune"] {
        let text = help(sub);
        assert!(text.contains("--preset <PRESET>"), "{sub}:\n{text}");
        assert!(text.contains("alexnet-conv1") && text.contains("generic3x3"), "{sub}:\n{text}");
        assert!(text.contains("[default: generic3x3]"), "{sub}:\n{text}");
    }
    assert!(help("tune").contains("Default shape: a generic 3x3 layer"));
}

#[test]
fn tune_help_names_real_cache_paths() {
    let text = help("tune");
    assert!(text.contains("WGCONV_CACHE_DIR/tuning.json"), "{text}");
    assert!(text.contains("<platform cache dir>/wgconv/tuning.json"), "{text}");
    // The old text rendered as if the platform directory were empty.
    assert!(!text.contains("dir /wgconv"), "{text}");
}

#[test]
fn run_help_and_readme_agree_on_npy_versions() {
    let text = help("run");
    assert!(text.contains("format version 1, 2 or 3"), "{text}");
    let readme = include_str!("../../README.md");
    assert!(readme.contains("`.npy` format 1, 2 or 3"), "README's .npy versions differ from run --help");
}
