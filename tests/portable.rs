//! Portability without a device: every kernel the library can build (each config of the
//! declared sweep, the default config and the direct kernel) parses and validates with
//! naga and translates to SPIR-V, MSL, HLSL and GLSL compute (`kernel::check_portable`).

use wgconv::config::{default_config, default_sweep};
use wgconv::kernel::{check_portable, portable_targets, source};
use wgconv::{KernelKind, TileConfig};

#[test]
fn sweep_configs_are_well_formed() {
    let sweep = default_sweep();
    assert!(!sweep.is_empty());
    assert_eq!(sweep[0], TileConfig::seed(), "the seed's config is the sweep's baseline row");
    for cfg in &sweep {
        cfg.check_shape().unwrap_or_else(|e| panic!("{cfg}: {e}"));
        assert_eq!(TileConfig::parse(&cfg.name()).unwrap(), *cfg);
    }
    let mut names: Vec<_> = sweep.iter().map(|c| c.name()).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), sweep.len(), "duplicate configs in the sweep");
}

#[test]
fn every_sweep_config_is_portable() {
    let mut kinds: Vec<KernelKind> = default_sweep().into_iter().map(KernelKind::Tiled).collect();
    kinds.push(KernelKind::Tiled(default_config()));
    let failures: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> =
            kinds.iter().map(|k| s.spawn(move || check_portable(k).map_err(|e| format!("{k}: {e}")))).collect();
        handles.into_iter().filter_map(|h| h.join().unwrap().err()).collect()
    });
    assert!(failures.is_empty(), "{} kernels not portable:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn direct_kernel_is_portable() {
    check_portable(&KernelKind::Direct).unwrap();
}

/// The f32 kernels are checked against all four targets (none skipped).
#[test]
fn f32_kernels_target_every_backend() {
    let all = ["SPIR-V", "MSL", "HLSL", "GLSL"];
    assert_eq!(portable_targets(&KernelKind::Direct), all);
    for cfg in default_sweep() {
        assert_eq!(portable_targets(&KernelKind::Tiled(cfg)), all, "{cfg}");
    }
}

#[test]
fn sources_carry_their_config() {
    for cfg in default_sweep() {
        let src = source(&KernelKind::Tiled(cfg));
        assert!(src.contains(&cfg.name()), "{cfg}");
        for (name, v) in [("BM", cfg.block_m), ("BN", cfg.block_n), ("BK", cfg.block_k), ("WG", cfg.invocations())] {
            assert!(src.contains(&format!("const {name}: u32 = {v}u;")), "{cfg}: {name}");
        }
    }
    assert!(!source(&KernelKind::Direct).contains("const BM"));
}

/// A malformed kernel is reported as an error, not a panic (the checker itself works).
#[test]
fn check_portable_reports_errors() {
    // A zero register tile: `BM / TM` divides by zero, and arrays have size zero.
    let broken = TileConfig { thread_m: 0, thread_n: 0, ..TileConfig::seed() };
    assert!(check_portable(&KernelKind::Tiled(broken)).is_err());
}
