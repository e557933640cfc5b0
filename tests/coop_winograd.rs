//! Winograd's F(2×2, 3×3) on the matrix units (`coop-winograd-f16`: input transform, the
//! channels-last f16 kernel as 16 GEMMs, output transform) against the f64 CPU reference: a
//! seeded random-shape property test over channel counts (whole vectors and quads or not),
//! odd and even sizes, asymmetric padding, batch 1, bias and ReLU, on every config of its
//! sweep in turn, through `encode` into NaN-poisoned output and `forward`; every tensor form
//! (NCHW and channels last, f32 and f16), which the transforms read and write themselves;
//! batch chunks; the range flag; refused weights; how far a NaN input reaches.
//!
//! Cooperative-matrix devices only (the H100 through Vulkan): on others each test says it
//! was skipped. Lavapipe checks the family's SPIR-V (tests/portable_f16.rs) and its CPU twin.

mod common;
use common::*;
use wgconv::{Conv2d, Conv2dSpec, Error, Padding, Precision, Shape4};

const FAMILY: &str = "coop-winograd-f16";

/// 30 random shapes, one config of the sweep on each in turn, within the f16 bound of the
/// reference; ReLU on every third.
#[test]
fn random_shapes_match_the_reference() {
    let Some(gpu) = coop_gpu() else { return };
    let (seed, mut rng) = seeded_rng("coop-winograd random shapes");
    let sweep = wgconv::advanced::sweep(FAMILY).unwrap();
    for i in 0..30 {
        let case = random_3x3_case(&mut rng, i, seed, 40);
        check_f16_kernel(&gpu, &case, &sweep[i % sweep.len()], i % 3 == 0);
    }
}

/// NCHW and channels last, f32 and f16 tensors: the transforms read and write each form.
#[test]
fn every_tensor_form() {
    let Some(gpu) = coop_gpu() else { return };
    let spec = Conv2dSpec::new(24, 36, 3).padding(Padding::uniform(1)).with_bias(true);
    let case = Case::new("wino_forms", spec, Shape4::new(2, 24, 9, 12));
    check_f16_in_every_form(&gpu, &case, &kernel(FAMILY));
}

/// A binding limit that holds two images' transformed inputs: chunks of two, each through
/// its own three passes, within the f16 bound.
#[test]
fn batch_chunks() {
    let _serial = serial();
    // Transformed input per image: 16 components × 16 channels × 10 × 10 tiles × 2 bytes
    // = 51,200 B (the largest scratch); f16 products 16 × 8 × 100 × 2 = 25,600 B.
    let Some(gpu) = coop_gpu_with_limits(|l| l.max_storage_buffer_binding_size = 131_072) else { return };
    let spec = Conv2dSpec::new(16, 8, 3).padding(Padding::uniform(1)).with_bias(true);
    let case = Case::new("wino_chunked", spec, Shape4::new(5, 16, 20, 19));
    // K steps of 32 and 64 columns: 16 × 32 × 64 f16 packed weights, 65,536 B.
    let k = kernel(&format!("{FAMILY}:m128n64k32-t8x8-w4-s2"));
    let opts = options_at(Precision::F16Accum32, Some(k), false);
    let conv = Conv2d::new(&gpu, spec, &case.w, case.b.as_deref(), opts).unwrap();
    check_encode_and_forward(&gpu, &case, &conv, &case.want, TOL_F16);
}

/// An input beyond f16's range is flagged, and so is a transformed component that overflows
/// f16 (inputs of ±30000 whose differences reach 60000 twice over); 16000 is not.
#[test]
fn range_flag() {
    let Some(gpu) = coop_gpu() else { return };
    let spec = Conv2dSpec::new(8, 8, 3).padding(Padding::uniform(1));
    let shape = Shape4::new(1, 8, 6, 6);
    let (w, _) = params(&spec, 3);
    let opts = options_at(Precision::F16Accum32, Some(kernel(FAMILY)), false);
    let conv = Conv2d::new(&gpu, spec, &w, None, opts).unwrap();
    let mut x = randn(shape.len() as usize, 4);
    x[7] = 16000.0;
    let _ = run_poisoned(&gpu, &conv, &x, shape);
    assert!(!conv.take_range_flag().unwrap(), "16000 flagged");
    x[7] = 7.0e4;
    let _ = run_poisoned(&gpu, &conv, &x, shape);
    assert!(conv.take_range_flag().unwrap(), "7e4 not flagged");
    // Rows 0–3 of a patch: d0 − d2 with d0 = 30000 and d2 = −30000, then again across
    // columns: 120000 in V's first component.
    x = vec![0.0; shape.len() as usize];
    for (y, xx, v) in [(1, 1, 30000.0), (3, 1, -30000.0), (1, 3, -30000.0), (3, 3, 30000.0)] {
        x[y * 6 + xx] = v;
    }
    let _ = run_poisoned(&gpu, &conv, &x, shape);
    assert!(conv.take_range_flag().unwrap(), "an overflowing transform not flagged");
}

/// Weights whose transform would overflow f16 are refused when the op is built, naming it.
#[test]
fn weights_beyond_the_transform_s_range_are_refused() {
    let Some(gpu) = coop_gpu() else { return };
    let spec = Conv2dSpec::new(2, 2, 3);
    let mut w = vec![0.5f32; spec.weight_len()];
    w[4] = 40000.0;
    let opts = options_at(Precision::F16Accum32, Some(kernel(FAMILY)), false);
    match Conv2d::new(&gpu, spec, &w, None, opts) {
        Err(Error::F16Range { what, detail }) => {
            assert!(what.contains("Winograd") && detail.contains("40000"), "{what}{detail}")
        }
        other => panic!("expected F16Range, got {:?}", other.map(|c| c.kernel().kernel.to_string())),
    }
}

/// A NaN input makes NaN of every output the reference makes NaN, and of none outside the
/// 4×4 patches of the tiles that read it.
#[test]
fn nan_reaches_at_most_its_tiles() {
    let Some(gpu) = coop_gpu() else { return };
    let spec = Conv2dSpec::new(8, 4, 3).padding(Padding::uniform(1));
    let (h, w) = (12usize, 13usize);
    let mut case = Case::new("wino_nan", spec, Shape4::new(1, 8, h as u32, w as u32));
    let (ny, nx) = (5usize, 8usize);
    case.x[(2 * h + ny) * w + nx] = f32::NAN;
    let want = reference_out(&case.problem, &case.x, &case.w, None);
    let conv =
        Conv2d::new(&gpu, spec, &case.w, None, options_at(Precision::F16Accum32, Some(kernel(FAMILY)), false)).unwrap();
    let (got, _) = run_poisoned_with(&gpu, &conv, &case.x, case.shape, 7.0, 0);
    for (i, (&g, &r)) in got.iter().zip(&want).enumerate() {
        let (oy, ox) = ((i / w) % h, i % w);
        // Tile (ty, tx) reads input rows 2·ty − 1 … 2·ty + 2 (padding 1).
        let reads = |o: usize, n: usize| (2 * (o / 2)) as i64 - 1 <= n as i64 && n as i64 <= (2 * (o / 2)) as i64 + 2;
        if r.is_nan() {
            assert!(g.is_nan(), "output {i}: reference NaN, got {g}");
        } else if !(reads(oy, ny) && reads(ox, nx)) {
            assert!(!g.is_nan(), "output {i} (oy {oy}, ox {ox}): NaN outside the tiles that read the NaN");
        }
    }
}
