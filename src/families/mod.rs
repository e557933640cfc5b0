//! The kernel families, one folder each, and the registry: adding a family is its folder
//! and one line in [`FAMILIES`].

pub(crate) mod band;
pub(crate) mod coop;
pub(crate) mod coop_grouped;
pub(crate) mod coop_splitk;
pub(crate) mod coop_winograd;
pub(crate) mod coop_winograd_f32;
pub(crate) mod depthwise;
pub(crate) mod direct;
pub(crate) mod nhwc;
pub(crate) mod pointwise;
pub(crate) mod splitk;
pub(crate) mod stem;
pub mod tiled;
pub(crate) mod winograd;

use crate::error::{Error, Result};
use crate::kernel::{Family, Kernel};

/// Every family, in the order listings show them: one line each.
#[rustfmt::skip]
pub(crate) static FAMILIES: &[&dyn Family] = &[
    &stem::STEM,
    &coop::COOP_F16,
    &coop::COOP_F16X3,
    &nhwc::COOP_NHWC_F16,
    &nhwc::COOP_NHWC_F16X3,
    &nhwc::COOP_NHWC_F32,
    &coop_winograd::COOP_WINOGRAD_F16,
    &coop_winograd_f32::COOP_WINOGRAD_F32,
    &coop_splitk::COOP_SPLITK_F16,
    &coop_grouped::COOP_GROUPED_F16,
    &band::BAND,
    &tiled::TILED,
    &tiled::TILED_F16,
    &winograd::WINOGRAD,
    &winograd::WINOGRAD_F4,
    &winograd::WINOGRAD_F6,
    &splitk::SPLITK,
    &pointwise::POINTWISE,
    &depthwise::DEPTHWISE,
    &depthwise::DEPTHWISE_F16,
    &direct::DIRECT,
    &direct::DIRECT_F16,
];

/// The family of a name.
pub(crate) fn family(name: &str) -> Option<&'static dyn Family> {
    FAMILIES.iter().copied().find(|f| f.name() == name)
}

/// The names of every family, for messages.
pub(crate) fn names() -> Vec<&'static str> {
    FAMILIES.iter().map(|f| f.name()).collect()
}

impl Kernel {
    /// Parses `family:config` (or a family name alone, which means its reference kernel).
    /// Syntax only: whether it can run on a device is decided when a `Conv2d` is built.
    pub fn parse(name: &str) -> Result<Kernel> {
        parse(name)
    }
}

impl std::str::FromStr for Kernel {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        parse(s)
    }
}

#[cfg(feature = "tune")]
impl<'de> serde::Deserialize<'de> for Kernel {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let name = <String as serde::Deserialize>::deserialize(d)?;
        parse(&name).map_err(serde::de::Error::custom)
    }
}

/// Parses `family:config`, or a family name alone (its reference kernel).
pub(crate) fn parse(name: &str) -> Result<Kernel> {
    let (fam, config) = match name.split_once(':') {
        Some((f, c)) => (f, Some(c)),
        None => (name, None),
    };
    let family = family(fam).ok_or_else(|| {
        Error::ConfigParse(format!("unknown kernel family {fam:?} in {name:?}: expected one of {}", names().join(", ")))
    })?;
    match config {
        Some(c) => family.parse(c),
        None => Ok(family.reference()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The families that read non-zero padding modes: the direct kernels and those gathering
    /// through the tiled kernel's gather (tests/padding_mode.rs runs each against the
    /// reference).
    #[test]
    fn padding_modes_by_family() {
        let modes: Vec<&str> = FAMILIES.iter().filter(|f| f.padding_modes()).map(|f| f.name()).collect();
        assert_eq!(modes, ["coop-f16", "coop-f16x3", "tiled", "tiled-f16", "splitk", "direct", "direct-f16"]);
    }

    /// Every family's sweep is well formed and every kernel's name parses back to it.
    #[test]
    fn names_round_trip() {
        for f in FAMILIES {
            for k in f.sweep() {
                k.check_shape().unwrap_or_else(|e| panic!("{k}: {e}"));
                assert_eq!(parse(&k.to_string()).unwrap(), k);
                assert_eq!(k.family(), f.name());
            }
            assert_eq!(parse(f.name()).unwrap(), f.reference());
        }
    }

    /// Every family composes valid-looking WGSL for its sweep (no directive left behind).
    #[test]
    fn sources_compose() {
        for f in FAMILIES {
            for k in f.sweep() {
                for src in k.config().representative_sources().unwrap_or_else(|e| panic!("{k}: {e}")) {
                    assert!(!src.lines().any(|l| l.trim_start().starts_with('#')), "{k}: a directive was left");
                }
            }
        }
    }

    #[test]
    fn unknown_family_is_named() {
        let e = parse("nope:m1").unwrap_err().to_string();
        assert!(e.contains("unknown kernel family \"nope\"") && e.contains("tiled"), "{e}");
    }
}
