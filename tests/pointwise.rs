//! The pointwise family (1×1 convolutions streamed over their positions) against the f64
//! CPU reference: a seeded random-shape property test over channel counts that fill no
//! step or block and spill over them, planes of whole vectors of 4 positions and not, batch
//! 1–3, bias and ReLU, on every config of its sweep in turn, through `encode` into
//! NaN-poisoned output; an infinite input; channels-last and f16 tensors (layout passes
//! around it); batch chunks at nonzero offsets; refusals; what the selection picks on an
//! adapter named as an H100.
//!
//! Shapes stay small: CI runs this on lavapipe (Vulkan on the CPU, about 1 GFLOP/s).

mod common;
use common::*;
use rand::Rng;
use wgconv::{Conv2d, Conv2dOptions, Conv2dSpec, Padding, Shape4};

/// A random 1×1 convolution and input: odd and even planes, channels up to 40.
fn random_case(rng: &mut rand::rngs::StdRng, i: usize, seed: u64) -> Case {
    let spec =
        Conv2dSpec::new(rng.random_range(1..=40u32), rng.random_range(1..=40u32), 1).with_bias(rng.random_bool(0.5));
    let n = rng.random_range(1..=3u32);
    let (h, w) = match i % 3 {
        // A plane of whole vectors (vector loads), and one that is not.
        0 => (4 * rng.random_range(1..=4u32), rng.random_range(1..=9u32)),
        _ => (rng.random_range(1..=11u32), rng.random_range(1..=13u32)),
    };
    let shape = Shape4::new(n, spec.in_channels, h, w);
    Case::with_seed(&format!("random_{i}"), spec, shape, seed.wrapping_add(i as u64)).replayed_by(seed)
}

/// Four random shapes per config of the sweep, f32 within 1e-5; ReLU on a third of them.
#[test]
fn random_shapes_match_the_reference() {
    let gpu = gpu();
    let (seed, mut rng) = seeded_rng("pointwise random shapes");
    let sweep = wgconv::advanced::pointwise_sweep();
    for i in 0..4 * sweep.len() {
        let cfg = sweep[i % sweep.len()];
        let case = random_case(&mut rng, i, seed);
        let k = kernel(&format!("pointwise:{}", cfg.name()));
        if i % 3 == 2 {
            case.check_relu(&gpu, k);
        } else {
            case.check_encode(&gpu, &case.conv(&gpu, Some(k)));
        }
    }
}

/// A plane large enough for several workgroups of positions, in both forms of the loads.
#[test]
fn several_position_blocks() {
    let gpu = gpu();
    for (h, w) in [(24, 24), (23, 25)] {
        let spec = Conv2dSpec::new(20, 12, 1).with_bias(true);
        let case = Case::new("pointwise_blocks", spec, Shape4::new(2, 20, h, w));
        case.check_encode(&gpu, &case.conv(&gpu, Some(kernel("pointwise:c8-w64"))));
    }
}

/// An infinite input makes inf or NaN where the reference does, and only there: the padded
/// input channels (past the last step's channels) do not multiply it into other outputs.
#[test]
fn infinite_input_stays_in_its_outputs() {
    let gpu = gpu();
    let spec = Conv2dSpec::new(5, 6, 1);
    let mut case = Case::new("pointwise_inf", spec, Shape4::new(1, 5, 4, 4));
    // The last input channel, position 3: padded channels 5..16 read it in the kernel.
    case.x[4 * 16 + 3] = f32::INFINITY;
    case.want = reference_out(&case.problem, &case.x, &case.w, None);
    let conv = case.conv(&gpu, Some(kernel("pointwise:c8-w32")));
    let got = run_poisoned(&gpu, &conv, &case.x, case.shape);
    for (i, (g, w)) in got.iter().zip(&case.want).enumerate() {
        let same = match w.is_finite() {
            true => (g - w).abs() <= 1e-4 * w.abs().max(1.0),
            false => g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
        };
        assert!(same, "{}: element {i}: {g} against {w}", case.label("inf"));
    }
    assert!(case.want.iter().any(|w| !w.is_finite()));
}

/// Channels-last and f16 tensors: layout passes around the kernel.
#[test]
fn channels_last_and_f16_tensors() {
    let gpu = gpu();
    let spec = Conv2dSpec::new(24, 10, 1).with_bias(true);
    let case = Case::new("pointwise_forms", spec, Shape4::new(2, 24, 6, 7));
    check_in_every_layout(&gpu, &case, &kernel("pointwise:c8-w64"));
}

/// A binding limit that holds a few images: chunks at nonzero offsets, in both forms of the
/// loads (a plane of whole vectors starts each chunk on one); outputs past the last one
/// untouched.
#[test]
fn batch_chunks() {
    let _serial = serial();
    let gpu = gpu_with_limits(|l| l.max_storage_buffer_binding_size = 5_000);
    for (h, w) in [(8, 8), (7, 9)] {
        let spec = Conv2dSpec::new(9, 6, 1).with_bias(true);
        let case = Case::new("pointwise_chunked", spec, Shape4::new(7, 9, h, w));
        let opts = Conv2dOptions::default().kernel(Some(kernel("pointwise:c8-w64")));
        let conv = Conv2d::new(&gpu, spec, &case.w, case.b.as_deref(), opts).unwrap();
        check_chunked(&gpu, &case, &conv, Some(1));
    }
}

/// Kernels other than unpadded ungrouped 1×1 at stride 1 are refused by name, never run.
#[test]
fn refusals() {
    let gpu = gpu();
    let k = kernel("pointwise:c8-w64");
    for spec in [
        Conv2dSpec::new(8, 8, 3),
        Conv2dSpec::new(8, 8, 1).stride(2),
        Conv2dSpec::new(8, 8, 1).groups(2),
        Conv2dSpec::new(8, 8, 1).padding(Padding::uniform(1)),
    ] {
        let e = k.check(&spec, gpu.caps()).unwrap_err().to_string();
        assert!(e.contains("pointwise") && e.contains("1x1 convolutions at stride 1"), "{e}");
        let (w, _) = params(&spec, 1);
        let opts = Conv2dOptions::default().kernel(Some(k.clone()));
        assert!(Conv2d::new(&gpu, spec, &w, None, opts).is_err());
    }
}
