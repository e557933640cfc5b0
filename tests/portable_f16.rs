//! The f16 kernels are portable where their features exist: the cooperative-matrix
//! variants validate in naga and translate to SPIR-V (the only naga backend with
//! cooperative matrices); the f16 SIMT variants translate to SPIR-V, MSL and HLSL
//! (naga's GLSL backend has no f16). No device needed.
#![cfg(feature = "naga-check")]

use wgconv::advanced::{band_sweep, check_portable, coop_sweep, default_sweep, portable_targets, stem_sweep};
use wgconv::Kernel;

fn kernel(name: &str) -> Kernel {
    Kernel::parse(name).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Every cooperative-matrix kernel's sweep (the row-band and stem ones on the geometries of
/// several real problems: see `band::representative_shapes`, `stem::representative_shapes`).
#[test]
fn coop_sweeps_translate_to_spirv() {
    let gathering =
        coop_sweep().into_iter().flat_map(|c| [kernel(&format!("coop-f16:{c}")), kernel(&format!("coop-f16x3:{c}"))]);
    let shaped = band_sweep()
        .into_iter()
        .map(|c| kernel(&format!("coop-band-f16:{c}")))
        .chain(stem_sweep().into_iter().map(|c| kernel(&format!("coop-stem-f16:{c}"))));
    let channels_last = ["coop-nhwc-f16", "coop-nhwc-f16x3", "coop-winograd-f16", "coop-splitk-f16"]
        .into_iter()
        .flat_map(|f| wgconv::advanced::sweep(f).unwrap());
    let kinds: Vec<Kernel> = gathering.chain(shaped).chain(channels_last).collect();
    // The families' own sweeps are these kernels.
    let families = [
        "coop-f16",
        "coop-f16x3",
        "coop-band-f16",
        "coop-stem-f16",
        "coop-nhwc-f16",
        "coop-nhwc-f16x3",
        "coop-winograd-f16",
        "coop-splitk-f16",
    ];
    for family in families {
        for k in wgconv::advanced::sweep(family).unwrap() {
            assert!(kinds.contains(&k), "{k} of the {family} sweep is not checked here");
        }
    }
    for kind in &kinds {
        assert_eq!(portable_targets(kind), ["SPIR-V"], "{kind}");
        check_portable(kind).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn f16_direct_kernel_translates() {
    let k = kernel("direct-f16");
    assert_eq!(portable_targets(&k), ["SPIR-V", "MSL", "HLSL"]);
    check_portable(&k).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn f16_simt_sweep_translates() {
    for c in default_sweep() {
        let k = kernel(&format!("tiled-f16:{c}"));
        assert_eq!(portable_targets(&k), ["SPIR-V", "MSL", "HLSL"], "{k}");
        check_portable(&k).unwrap_or_else(|e| panic!("{e}"));
    }
}
