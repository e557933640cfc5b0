//! Portability without a device: every kernel the library can build (each config of the
//! declared sweep, the default config and the direct kernel) parses and validates with
//! naga and translates to SPIR-V, MSL, HLSL and GLSL compute
//! (`wgconv::advanced::check_portable`).
#![cfg(feature = "naga-check")]

use wgconv::advanced::{check_portable, default_sweep, portable_targets, sweep, wgsl};
use wgconv::{Kernel, TileConfig};

fn tiled(cfg: TileConfig) -> Kernel {
    Kernel::parse(&format!("tiled:{cfg}")).unwrap_or_else(|e| panic!("{cfg}: {e}"))
}

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
    // The family's sweep as kernels is the same list, named `tiled:<config>`.
    let kernels = wgconv::advanced::sweep("tiled").unwrap();
    assert_eq!(kernels, sweep.iter().map(|c| tiled(*c)).collect::<Vec<_>>());
}

#[test]
fn every_sweep_config_is_portable() {
    let mut kinds: Vec<Kernel> = default_sweep().into_iter().map(tiled).collect();
    kinds.push(tiled(TileConfig::seed()));
    kinds.push(Kernel::parse("tiled").unwrap());
    let failures: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> =
            kinds.iter().map(|k| s.spawn(move || check_portable(k).map_err(|e| format!("{k}: {e}")))).collect();
        handles.into_iter().filter_map(|h| h.join().unwrap().err()).collect()
    });
    assert!(failures.is_empty(), "{} kernels not portable:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn direct_kernel_is_portable() {
    let direct = Kernel::parse("direct").unwrap();
    assert_eq!(sweep("direct").unwrap(), std::slice::from_ref(&direct));
    check_portable(&direct).unwrap();
}

/// The f32 kernels are checked against all four targets, none skipped.
#[test]
fn f32_kernels_target_every_backend() {
    let all = ["SPIR-V", "MSL", "HLSL", "GLSL"];
    assert_eq!(portable_targets(&Kernel::parse("direct").unwrap()), all);
    for cfg in default_sweep() {
        assert_eq!(portable_targets(&tiled(cfg)), all, "{cfg}");
    }
}

/// A tiled kernel's WGSL holds its config's constants; the direct kernel's none.
#[test]
fn sources_carry_their_config() {
    for cfg in default_sweep() {
        let src = wgsl(&tiled(cfg)).unwrap().concat();
        assert!(src.contains(&format!("const BM: u32 = {}u;", cfg.block_m)), "{cfg}");
        assert!(src.contains(&format!("const TN: u32 = {}u;", cfg.thread_n)), "{cfg}");
        assert!(src.contains(&format!("const STAGES: u32 = {}u;", cfg.stages)), "{cfg}");
    }
    assert!(!wgsl(&Kernel::parse("direct").unwrap()).unwrap().concat().contains("const BM"));
}

/// A malformed kernel is reported as an error, not a panic (the checker itself works).
#[test]
fn check_portable_reports_errors() {
    // A zero register tile: `BM / TM` divides by zero, and arrays have size zero.
    let broken = TileConfig { thread_m: 0, thread_n: 0, ..TileConfig::seed() };
    assert!(check_portable(&tiled(broken)).is_err());
}

/// Every family's whole sweep passes naga on the targets the family declares (the
/// cooperative-matrix families SPIR-V only), so a shader error shows here, not on a GPU.
#[test]
fn every_family_sweep_passes_naga() {
    let failures: Vec<String> = wgconv::advanced::family_names()
        .into_iter()
        .flat_map(|f| sweep(f).unwrap())
        .filter_map(|k| check_portable(&k).err().map(|e| format!("{k}: {e}")))
        .collect();
    assert!(failures.is_empty(), "{} kernels fail naga:\n{}", failures.len(), failures.join("\n"));
}
