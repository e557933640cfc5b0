//! The f16 kernels are portable where their features exist: the cooperative-matrix
//! variants validate in naga and translate to SPIR-V (the only naga backend with
//! cooperative matrices); the f16 SIMT variants translate to SPIR-V, MSL and HLSL
//! (naga's GLSL backend has no f16). No device needed.
use wgconv::config::{band_sweep, coop_sweep, default_sweep};
use wgconv::kernel::{check_portable, portable_targets};
use wgconv::KernelKind;

#[test]
fn coop_sweep_translates_to_spirv() {
    for c in coop_sweep() {
        let kind = KernelKind::Coop(c);
        c.coop_layout().unwrap_or_else(|e| panic!("{kind}: {e}"));
        assert_eq!(portable_targets(&kind), ["SPIR-V"]);
        check_portable(&kind).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn band_sweep_translates_to_spirv() {
    for c in band_sweep() {
        let kind = KernelKind::CoopBand(c);
        c.band_layout().unwrap_or_else(|e| panic!("{kind}: {e}"));
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
