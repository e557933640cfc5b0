//! No spec, input shape or kernel name a user can write makes the library panic (the test
//! profile keeps overflow checks): random specs and shapes, their sizes drawn log-uniformly
//! over u32's whole range so that small, large and absurd ones all come up, go through
//! `Conv2dSpec::problem`, the kernel selection for every precision, layout and storage (on
//! this adapter's capabilities and on the same named as an NVIDIA H100 with cooperative
//! matrices, which take the rules that weigh estimates), and every family's
//! `Kernel::check`; random kernel names go through the parser and the same checks. Each
//! call answers or returns a typed error. No device work, so thousands of cases run in
//! seconds on lavapipe. A second test runs random configs of the SIMT families on small
//! problems: each is refused by name or computes the convolution. The seeds are printed;
//! replay with `WGCONV_TEST_SEED`.

mod common;
use common::as_h100::as_h100;
use common::*;
use rand::Rng;
use std::panic::{catch_unwind, AssertUnwindSafe};
use wgconv::advanced::{family_names, select, sweep};
use wgconv::{Conv2d, Conv2dOptions, Conv2dSpec, Kernel, Layout, Padding, PaddingMode, Precision, Shape4, Storage};

/// A size drawn log-uniformly from `[lo, 2^bits)`.
fn size(rng: &mut rand::rngs::StdRng, lo: u32, bits: u32) -> u32 {
    let b = rng.random_range(0..=bits);
    let hi = if b >= 32 { u32::MAX } else { (1u32 << b).max(lo + 1) };
    rng.random_range(lo..hi.max(lo + 1))
}

/// A field's size: usually of a plausible magnitude (`bits`), one time in ten anything.
fn field(rng: &mut rand::rngs::StdRng, lo: u32, bits: u32) -> u32 {
    let bits = if rng.random_bool(0.1) { 32 } else { bits };
    size(rng, lo, bits)
}

/// A random spec: fields of plausible sizes, each one absurd now and then.
fn random_spec(rng: &mut rand::rngs::StdRng) -> Conv2dSpec {
    let groups = if rng.random_bool(0.6) { 1 } else { field(rng, 1, 10) };
    let (cin_g, cout_g) = (field(rng, 1, 11), field(rng, 1, 11));
    let kernel = (field(rng, 1, 3), field(rng, 1, 3));
    let mode = [PaddingMode::Zeros, PaddingMode::Reflect, PaddingMode::Replicate, PaddingMode::Circular]
        [rng.random_range(0..4usize)];
    let padding = match rng.random_range(0..4) {
        0 => Padding::same(),
        1 => Padding::valid(),
        _ => Padding::new(field(rng, 0, 3), field(rng, 0, 3), field(rng, 0, 3), field(rng, 0, 3)),
    };
    Conv2dSpec::new(groups.wrapping_mul(cin_g), groups.wrapping_mul(cout_g), 1)
        .kernel_hw(kernel)
        .groups(groups)
        .stride((field(rng, 1, 2), field(rng, 1, 2)))
        .dilation((field(rng, 1, 2), field(rng, 1, 2)))
        .padding(padding)
        .padding_mode(mode)
        .with_bias(rng.random_bool(0.5))
}

/// A random kernel name: a family and a config of random, often absurd, numbers.
fn random_kernel_name(rng: &mut rand::rngs::StdRng, families: &[&str]) -> String {
    let family = families[rng.random_range(0..families.len())];
    if rng.random_bool(0.1) {
        // Anything at all, from the characters names are made of.
        let chars = b"0123456789mnktxwsdfhcyz:-_ ";
        let len = rng.random_range(0..40);
        let tail: String = (0..len).map(|_| chars[rng.random_range(0..chars.len())] as char).collect();
        return if rng.random_bool(0.5) { format!("{family}{tail}") } else { tail };
    }
    let mut n = |bits| size(rng, 0, bits);
    match n(3) {
        0 => family.to_string(),
        1 => format!("{family}:m{}n{}k{}-t{}x{}-w{}-s{}", n(32), n(32), n(32), n(32), n(32), n(32), n(32)),
        2 => format!("{family}:m{}n{}k{}-t{}x{}-w{}-s{}", n(8), n(8), n(6), n(4), n(4), n(5), n(3)),
        3 => format!("{family}:x{}y{}c{}-w{}", n(32), n(32), n(32), n(32)),
        4 => format!("{family}:m{}n{}d{}-w{}-s{}", n(32), n(32), n(32), n(32), n(32)),
        5 => format!("{family}:m{}n{}-f{}-h{}", n(32), n(32), n(32), n(32)),
        6 => format!("{family}:staged-x{}-w{}", n(32), n(32)),
        _ => format!("{family}:m{}n{}k{}-t{}x{}-w{}-s{}-k{}", n(8), n(8), n(6), n(4), n(4), n(5), n(3), n(32)),
    }
}

#[test]
fn no_spec_shape_or_kernel_name_panics() {
    let gpu = gpu();
    let adapters = [gpu.caps().clone(), as_h100(gpu.caps())];
    let (seed, mut rng) = seeded_rng("no panic");
    let families = family_names();
    let references: Vec<Kernel> = families.iter().filter_map(|f| sweep(f).ok()?.into_iter().next()).collect();
    let (mut problems, mut selections) = (0, 0);
    for i in 0..8000 {
        let spec = random_spec(&mut rng);
        let shape =
            Shape4::new(field(&mut rng, 1, 7), spec.in_channels, field(&mut rng, 1, 10), field(&mut rng, 1, 10));
        let name = random_kernel_name(&mut rng, &families);
        let what = format!("case {i} (seed {seed}): {spec:?} on {shape}, kernel {name:?}");
        let run = catch_unwind(AssertUnwindSafe(|| {
            let valid = spec.validate().is_ok();
            if valid {
                let _ = spec.weight_len();
            }
            let problem = spec.problem(shape);
            if let Ok(p) = &problem {
                let _ = (p.flops(), p.min_bytes(), p.to_string());
                problems += 1;
            }
            let parsed = name.parse::<Kernel>();
            for caps in &adapters {
                for precision in [Precision::F32, Precision::F16Accum32, Precision::F16x3] {
                    for layout in [Layout::Nchw, Layout::Nhwc] {
                        for storage in [Storage::F32, Storage::F16] {
                            let options = Conv2dOptions::default().precision(precision).layout(layout).storage(storage);
                            for input in [None, Some(shape)] {
                                let o = options.clone().tuning_key_input(input);
                                if select(caps, &spec, &o).is_ok() {
                                    selections += 1;
                                }
                            }
                        }
                    }
                }
                for kernel in references.iter().chain(parsed.as_ref().ok()) {
                    let _ = kernel.check(&spec, caps);
                    let _ = kernel.check_shape();
                }
            }
        }));
        assert!(run.is_ok(), "{what}: panicked");
    }
    eprintln!("{problems} valid problems, {selections} selections made");
    assert!(problems > 1500 && selections > 25000, "{problems} problems, {selections} selections");
}

/// A random config of a family that runs on SIMT units: tile configs (the tiled, Winograd
/// and split-K families), strip and staged depthwise configs, or the family's reference.
fn random_simt_kernel_name(rng: &mut rand::rngs::StdRng) -> String {
    let pick = |rng: &mut rand::rngs::StdRng, v: &[u32]| v[rng.random_range(0..v.len())];
    let tile = |rng: &mut rand::rngs::StdRng| {
        let block = [16, 32, 48, 64, 96, 128];
        format!(
            "m{}n{}k{}-t{}x{}-w{}-s{}",
            pick(rng, &block),
            pick(rng, &block),
            pick(rng, &[4, 8, 16, 32]),
            pick(rng, &[1, 2, 4, 8, 12]),
            pick(rng, &[1, 2, 4, 8, 12]),
            pick(rng, &[1, 2, 4, 8]),
            pick(rng, &[1, 2, 3])
        )
    };
    match rng.random_range(0..8) {
        0 => format!("tiled:{}", tile(rng)),
        1 => format!("tiled-f16:{}", tile(rng)),
        2 => format!("{}:{}", ["winograd", "winograd-f4", "winograd-f6"][rng.random_range(0..3usize)], tile(rng)),
        3 => format!("splitk:{}-k{}", tile(rng), pick(rng, &[2, 3, 4, 8])),
        4 | 5 => format!(
            "{}:x{}y{}c{}-w{}",
            ["depthwise", "depthwise-f16"][rng.random_range(0..2usize)],
            pick(rng, &[1, 2, 3, 4]),
            pick(rng, &[1, 2, 4, 8]),
            pick(rng, &[1, 2, 4]),
            pick(rng, &[32, 64, 128, 256])
        ),
        6 => format!("depthwise:staged-x{}-w{}", pick(rng, &[1, 2, 4]), pick(rng, &[64, 128, 256])),
        _ => [
            "tiled",
            "tiled-f16",
            "winograd",
            "winograd-f4",
            "winograd-f6",
            "splitk",
            "depthwise",
            "direct",
            "direct-f16",
        ][rng.random_range(0..9usize)]
        .to_string(),
    }
}

/// A config that passes its checks computes the convolution: random configs of the SIMT
/// families (many refused by name, which is fine) on random small problems, each either
/// refused with a typed error by `Conv2d::new` or `forward`, or within its precision's
/// bound of the f64 reference. What `check` lets through must never compute wrong.
#[test]
fn random_configs_that_pass_their_checks_run_correctly() {
    let gpu = gpu();
    let (seed, mut rng) = seeded_rng("random configs");
    let (mut ran, mut refused) = (0, 0);
    for i in 0..150 {
        let groups = [1, 1, 1, 2, 4, 8][rng.random_range(0..6usize)];
        let k = rng.random_range(1..=5u32);
        let spec = Conv2dSpec::new(groups * rng.random_range(1..=8u32), groups * rng.random_range(1..=8u32), k)
            .groups(groups)
            .stride(rng.random_range(1..=2u32))
            .padding(rng.random_range(0..=2u32))
            .with_bias(rng.random_bool(0.5));
        let shape =
            Shape4::new(rng.random_range(1..=3), spec.in_channels, rng.random_range(4..=14), rng.random_range(4..=14));
        let name = random_simt_kernel_name(&mut rng);
        if spec.problem(shape).is_err() {
            continue;
        }
        let Ok(kernel) = name.parse::<Kernel>() else {
            refused += 1;
            continue;
        };
        let case = Case::with_seed(&format!("config_{i}"), spec, shape, seed.wrapping_add(i)).replayed_by(seed);
        let options = options_at(kernel.precision(), Some(kernel.clone()), false);
        let conv = match Conv2d::new(&gpu, spec, &case.w, case.b.as_deref(), options) {
            Ok(conv) => conv,
            Err(_) => {
                refused += 1;
                continue;
            }
        };
        let got = match conv.forward(&case.x, shape) {
            Ok(got) => got,
            Err(_) => {
                refused += 1;
                continue;
            }
        };
        let what = case.label(&name);
        match kernel.precision() {
            Precision::F16Accum32 => assert_f16_operands_close(&what, &got, &case.want, &case, |r| r),
            _ => assert_close(&what, &got, &case.want, tolerance(&kernel)),
        }
        ran += 1;
    }
    eprintln!("{ran} configs ran and matched, {refused} refused");
    assert!(ran >= 25, "{ran} ran, {refused} refused");
}
