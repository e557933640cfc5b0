//! The f16 kernels are portable where their features exist: the cooperative-matrix
//! variants validate in naga and translate to SPIR-V (the only naga backend with
//! cooperative matrices); the f16 SIMT variants translate to SPIR-V, MSL and HLSL
//! (naga's GLSL backend has no f16). No device needed.
use wgconv::config::{band_sweep, coop_sweep, default_sweep, stem_sweep};
use wgconv::kernel::{check_portable, portable_targets};
use wgconv::KernelKind;

/// Every cooperative-matrix kernel's sweep (the row-band and stem ones on the geometries of
/// several real problems: see `band::representative_shapes`, `stem::representative_shapes`).
#[test]
fn coop_sweeps_translate_to_spirv() {
    let gathering = coop_sweep().into_iter().flat_map(|c| [KernelKind::Coop(c), KernelKind::CoopSplit(c)]);
    let shaped =
        band_sweep().into_iter().map(KernelKind::CoopBand).chain(stem_sweep().into_iter().map(KernelKind::CoopStem));
    for kind in gathering.chain(shaped) {
        assert_eq!(portable_targets(&kind), ["SPIR-V"]);
        check_portable(&kind).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn f16_simt_sweep_translates() {
    for c in default_sweep() {
        check_portable(&KernelKind::TiledF16(c)).unwrap_or_else(|e| panic!("{e}"));
    }
}
