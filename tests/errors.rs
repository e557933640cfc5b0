//! Every bad input comes back as its typed error, never a panic, and the message names
//! the bad value.

mod common;
use common::*;
use wgconv::reference;
use wgconv::{BufferIssue, Conv2d, Conv2dOptions, Error, Gpu, GpuOptions, Shape4, TileConfig};
use wgconv::{Conv2dSpec as S, Padding as P};

/// Builds an op with constant weights (and bias iff the spec says so), on both kernels.
fn ops(spec: S) -> Vec<Conv2d> {
    let gpu = gpu();
    let w = vec![0.5; spec.weight_len()];
    let b = spec.bias.then(|| vec![0.25; spec.out_channels as usize]);
    [None, Some(direct_kernel())]
        .into_iter()
        .map(|kernel| Conv2d::new(&gpu, spec, &w, b.as_deref(), Conv2dOptions::default().kernel(kernel)).unwrap())
        .collect()
}

/// `Conv2d::new` with constant weights of the right length (none for an invalid spec:
/// the spec is checked first).
fn new_op(spec: S) -> wgconv::Result<Conv2d> {
    let w = if spec.validate().is_ok() { vec![0.5; spec.weight_len()] } else { Vec::new() };
    let b = spec.bias.then(|| vec![0.25; spec.out_channels as usize]);
    Conv2d::new(&gpu(), spec, &w, b.as_deref(), Conv2dOptions::default())
}

#[track_caller]
fn assert_names(e: &Error, parts: &[&str]) {
    let msg = e.to_string();
    for p in parts {
        assert!(msg.contains(p), "error {msg:?} does not name {p:?}");
    }
}

#[track_caller]
fn invalid_spec(r: wgconv::Result<impl Sized>, parts: &[&str]) {
    match r {
        Err(e @ Error::InvalidSpec(_)) => assert_names(&e, parts),
        Err(e) => panic!("expected InvalidSpec naming {parts:?}, got {e:?}"),
        Ok(_) => panic!("expected InvalidSpec naming {parts:?}, got Ok"),
    }
}

#[test]
fn channel_mismatch() {
    let spec = S::new(3, 4, 3);
    for op in ops(spec) {
        let shape = Shape4::new(1, 5, 8, 8);
        let e = op.forward(&vec![0.0; shape.len() as usize], shape).unwrap_err();
        assert_eq!(e, Error::ShapeMismatch { what: "the input", unit: "channels", expected: 3, got: 5 });
        assert_names(&e, &["the input has 5 channels, expected 3"]);
        // Through plan/encode too.
        let (x, y) = buffers(1 << 12, 1 << 12);
        let e = op.plan(shape, &x, &y).err().unwrap();
        assert_eq!(e, Error::ShapeMismatch { what: "the input", unit: "channels", expected: 3, got: 5 });
    }
    let e = spec.problem(Shape4::new(1, 2, 8, 8));
    assert!(matches!(e, Err(Error::ShapeMismatch { unit: "channels", expected: 3, got: 2, .. })), "{e:?}");
}

#[test]
fn groups_not_dividing_channels() {
    invalid_spec(new_op(S::new(5, 6, 3).groups(2)), &["groups = 2", "in_channels = 5"]);
    invalid_spec(new_op(S::new(4, 6, 3).groups(4)), &["groups = 4", "out_channels = 6"]);
    invalid_spec(new_op(S::new(4, 4, 3).groups(0)), &["groups", "0"]);
    invalid_spec(S::from_signed(6, 9, [3, 3], [1, 1], [0; 4], [1, 1], 2, false), &["groups = 2", "out_channels = 9"]);
    invalid_spec(S::from_signed(6, 9, [3, 3], [1, 1], [0; 4], [1, 1], -3, false), &["groups", "-3"]);
}

/// The spec's size helpers on a spec that `validate` refuses (groups = 0): they are public
/// and callers size their weight slices with them before `Conv2d::new` can refuse the spec.
/// (Regression: `in_channels_per_group` used to divide by zero.)
#[test]
fn spec_helpers_do_not_panic_on_zero_groups() {
    let spec = S::new(4, 4, 3).groups(0);
    assert!(spec.validate().is_err());
    let r = std::panic::catch_unwind(|| (spec.weight_len(), spec.k_total(), spec.weight_shape()));
    assert!(r.is_ok(), "Conv2dSpec::weight_len() panics on groups = 0 (division by zero in in_channels_per_group)");
}

/// A kernel whose K = C_in/g·KH·KW overflows u32 (70000² taps) must come back as an error.
/// (Regression: `Conv2dSpec::k_total` used to multiply in u32 and panic on overflow.)
#[test]
fn huge_kernel_is_an_error_not_a_panic() {
    let spec = S::new(1, 1, 70000);
    let r = std::panic::catch_unwind(|| Conv2d::new(&gpu(), spec, &[], None, Conv2dOptions::default()).err());
    match r {
        Ok(Some(e)) => {
            assert!(matches!(e, Error::TooLarge(_)), "{e:?}");
            assert_names(&e, &["70000"]);
        }
        Ok(None) => panic!("a 70000x70000 kernel with no weights was accepted"),
        Err(_) => panic!("Conv2d::new panicked on a 70000x70000 kernel (u32 overflow in Conv2dSpec::k_total)"),
    }
}

#[test]
fn zero_stride_or_dilation() {
    invalid_spec(new_op(S::new(3, 4, 3).stride((0, 1))), &["stride height", "0"]);
    invalid_spec(new_op(S::new(3, 4, 3).stride((1, 0))), &["stride width", "0"]);
    invalid_spec(new_op(S::new(3, 4, 3).dilation((0, 1))), &["dilation height", "0"]);
    invalid_spec(new_op(S::new(3, 4, 3).dilation((2, 0))), &["dilation width", "0"]);
    invalid_spec(new_op(S::new(3, 4, 0)), &["kernel height", "0"]);
    invalid_spec(new_op(S::new(0, 4, 3)), &["in_channels", "0"]);
    invalid_spec(new_op(S::new(3, 0, 3)), &["out_channels", "0"]);
    invalid_spec(S::from_signed(3, 4, [3, 3], [0, 1], [0; 4], [1, 1], 1, false), &["stride height", "0"]);
    invalid_spec(S::from_signed(3, 4, [3, 3], [1, 1], [0; 4], [1, 0], 1, false), &["dilation width", "0"]);
    // A valid spec with a zero-sized input dimension.
    for op in ops(S::new(3, 4, 3)) {
        let e = op.forward(&[], Shape4::new(0, 3, 8, 8)).unwrap_err();
        assert!(matches!(e, Error::InvalidSpec(_)), "{e:?}");
        assert_names(&e, &["0x3x8x8"]);
    }
}

#[test]
fn negative_attributes_from_signed() {
    let bad = |stride: [i64; 2], pads: [i64; 4], dilation: [i64; 2]| {
        S::from_signed(3, 4, [3, 3], stride, pads, dilation, 1, true)
    };
    invalid_spec(bad([-2, 1], [0; 4], [1, 1]), &["stride height", "-2"]);
    invalid_spec(bad([1, -7], [0; 4], [1, 1]), &["stride width", "-7"]);
    invalid_spec(bad([1, 1], [0; 4], [-3, 1]), &["dilation height", "-3"]);
    invalid_spec(bad([1, 1], [0; 4], [1, -1]), &["dilation width", "-1"]);
    invalid_spec(bad([1, 1], [-1, 0, 0, 0], [1, 1]), &["padding top", "-1"]);
    invalid_spec(bad([1, 1], [0, -4, 0, 0], [1, 1]), &["padding left", "-4"]);
    invalid_spec(bad([1, 1], [0, 0, -5, 0], [1, 1]), &["padding bottom", "-5"]);
    invalid_spec(bad([1, 1], [0, 0, 0, -6], [1, 1]), &["padding right", "-6"]);
    invalid_spec(S::from_signed(3, 4, [3, -3], [1, 1], [0; 4], [1, 1], 1, false), &["kernel width", "-3"]);
    invalid_spec(S::from_signed(-3, 4, [3, 3], [1, 1], [0; 4], [1, 1], 1, false), &["in_channels", "-3"]);
    invalid_spec(
        S::from_signed(3, 4, [3, 3], [1 << 33, 1], [0; 4], [1, 1], 1, false),
        &["stride height", "8589934592"],
    );
    // The same attributes, valid, give the spec the builder gives.
    let ok = S::from_signed(3, 4, [3, 5], [2, 1], [1, 0, 2, 1], [1, 2], 1, true).unwrap();
    assert_eq!(
        ok,
        S::new(3, 4, 3).kernel_hw((3, 5)).stride((2, 1)).padding(P::new(1, 0, 2, 1)).dilation((1, 2)).with_bias(true)
    );
}

#[test]
fn kernel_larger_than_padded_input() {
    // 5×5 kernel, input 3 high + padding 1: 5 > 3 + 1.
    let spec = S::new(2, 4, 5).padding(P::new(1, 0, 0, 0));
    for op in ops(spec) {
        let shape = Shape4::new(1, 2, 3, 9);
        let e = op.forward(&vec![0.0; shape.len() as usize], shape).unwrap_err();
        match &e {
            Error::EmptyOutput { axis, input, pad, kernel, .. } => {
                assert_eq!((*axis, *input, *pad, *kernel), ("output height", 3, 1, 5));
            }
            other => panic!("expected EmptyOutput, got {other:?}"),
        }
        assert_names(&e, &["output height", "input 3", "padding 1", "kernel 5"]);
    }
    // Dilation makes a 3×3 kernel span 7 columns.
    let spec = S::new(1, 1, 3).dilation((1, 3));
    let e = spec.problem(Shape4::new(1, 1, 8, 6)).unwrap_err();
    assert!(matches!(e, Error::EmptyOutput { axis: "output width", input: 6, kernel: 7, .. }), "{e:?}");
}

#[test]
fn wrong_slice_lengths() {
    let gpu = gpu();
    let spec = S::new(3, 4, 3).with_bias(true);
    let w = vec![0.5; spec.weight_len()];
    let b = vec![0.5; 4];
    for kernel in [None, Some(direct_kernel())] {
        let opts = || Conv2dOptions::default().kernel(kernel.clone());
        let e = Conv2d::new(&gpu, spec, &w[1..], Some(&b), opts()).err().unwrap();
        assert_eq!(e, Error::ShapeMismatch { what: "the weight", unit: "elements", expected: 108, got: 107 });
        assert_names(&e, &["the weight has 107 elements, expected 108"]);
        let e = Conv2d::new(&gpu, spec, &w, Some(&b[..3]), opts()).err().unwrap();
        assert_eq!(e, Error::ShapeMismatch { what: "the bias", unit: "elements", expected: 4, got: 3 });
        assert_names(&e, &["bias", "3", "4"]);
        let op = Conv2d::new(&gpu, spec, &w, Some(&b), opts()).unwrap();
        let shape = Shape4::new(2, 3, 6, 5);
        let e = op.forward(&vec![0.0; 179], shape).unwrap_err();
        assert_eq!(e, Error::ShapeMismatch { what: "the input", unit: "elements", expected: 180, got: 179 });
        assert_names(&e, &["input", "179", "180"]);
        let e = op.forward(&vec![0.0; 181], shape).unwrap_err();
        assert_eq!(e, Error::ShapeMismatch { what: "the input", unit: "elements", expected: 180, got: 181 });
    }
    // The reference checks its slices too.
    let p = spec.problem(Shape4::new(1, 3, 4, 4)).unwrap();
    let e = reference::conv2d(&p, &[0.0; 47], &w, Some(&b)).unwrap_err();
    assert_eq!(e, Error::ShapeMismatch { what: "the input", unit: "elements", expected: 48, got: 47 });
}

/// The bias given decides whether there is one (PyTorch's habit: no flag to repeat); only
/// a spec that asks for a bias outright and gets none is refused.
#[test]
fn bias_is_decided_by_the_slice_given() {
    let gpu = gpu();
    let with = S::new(3, 4, 3).with_bias(true);
    let without = S::new(3, 4, 3);
    let w = vec![0.5; with.weight_len()];
    let b = vec![0.5; 4];
    let shape = Shape4::new(1, 3, 5, 5);
    let x = vec![1.0; shape.len() as usize];
    for kernel in [None, Some(direct_kernel())] {
        let opts = || Conv2dOptions::default().kernel(kernel.clone());
        invalid_spec(Conv2d::new(&gpu, with, &w, None, opts()), &["bias = true", "no bias"]);
        let op = Conv2d::new(&gpu, without, &w, Some(&b), opts()).unwrap();
        assert!(op.spec().bias);
        let problem = without.with_bias(true).problem(shape).unwrap();
        let want = reference::conv2d(&problem, &x, &w, Some(&b)).unwrap();
        assert_close("bias without the flag", &op.forward(&x, shape).unwrap(), &want, TOL_F32);
        assert!(!Conv2d::new(&gpu, without, &w, None, opts()).unwrap().spec().bias);
    }
}

#[test]
fn config_over_adapter_limits() {
    let gpu = gpu();
    // Well formed, but 4 stages of 128×(128+128) f32: 514 KiB of workgroup memory, over any adapter's.
    let cfg = TileConfig::with_thread_tile(128, 128, 128, 8, 8, 4);
    cfg.check_shape().unwrap();
    let bytes = cfg.workgroup_bytes();
    assert!(bytes > gpu.limits().max_compute_workgroup_storage_size as u64);
    let spec = S::new(3, 4, 3);
    let opts = Conv2dOptions::default().kernel(tiled_kernel("tiled", cfg));
    let e = Conv2d::new(&gpu, spec, &vec![0.5; spec.weight_len()], None, opts).err().unwrap();
    assert!(matches!(e, Error::KernelRefused { .. }), "{e:?}");
    assert_names(&e, &[&cfg.name(), &bytes.to_string(), &gpu.limits().max_compute_workgroup_storage_size.to_string()]);
    // Malformed configs: refused before any limit is looked at.
    let bad = TileConfig { warps: 3, ..TileConfig::seed() };
    let opts = Conv2dOptions::default().kernel(tiled_kernel("tiled", bad));
    let e = Conv2d::new(&gpu, spec, &vec![0.5; spec.weight_len()], None, opts).err().unwrap();
    assert!(matches!(e, Error::KernelRefused { .. }), "{e:?}");
    assert_names(&e, &["warps", "3"]);
    let e = TileConfig::new(32, 64, 32, 8, 2).unwrap_err();
    assert!(matches!(e, Error::KernelRefused { .. }), "{e:?}");
    let e = TileConfig::parse("m32n64-t4x4").unwrap_err();
    assert!(matches!(e, Error::ConfigParse(_)), "{e:?}");
    assert_names(&e, &["m32n64-t4x4"]);
}

#[test]
fn no_adapter_found() {
    let r = Gpu::with_options(GpuOptions::default().adapter("no-such-adapter-xyz"));
    match r {
        Err(e @ Error::NoAdapter(_)) => assert_names(&e, &["no-such-adapter-xyz"]),
        Err(e) => panic!("expected NoAdapter, got {e:?}"),
        Ok(g) => panic!("expected NoAdapter, got adapter {}", g.info.name),
    }
}

/// Input and output buffers of the given sizes in bytes (STORAGE).
fn buffers(in_bytes: u64, out_bytes: u64) -> (wgpu::Buffer, wgpu::Buffer) {
    buffers_with(in_bytes, out_bytes, wgpu::BufferUsages::STORAGE)
}

fn buffers_with(in_bytes: u64, out_bytes: u64, usage: wgpu::BufferUsages) -> (wgpu::Buffer, wgpu::Buffer) {
    let gpu = gpu();
    let mk = |size| {
        gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("test"),
            size,
            usage,
            mapped_at_creation: false,
        })
    };
    (mk(in_bytes), mk(out_bytes))
}

#[test]
fn buffer_too_small_for_encode() {
    let gpu = gpu();
    let spec = S::new(3, 4, 3).padding(P::uniform(1));
    let shape = Shape4::new(2, 3, 6, 5); // input 180 floats, output 240
    for op in ops(spec) {
        let mut enc = gpu.device.create_command_encoder(&Default::default());
        let (x, y) = buffers(179 * 4, 240 * 4);
        let e = op.encode(&mut enc, shape, &x, &y).unwrap_err();
        let issue = BufferIssue::TooSmall { needed: 720, size: 716 };
        assert_eq!(e, Error::Buffer { buffer: "input", issue });
        assert_names(&e, &["the input buffer has 716 B, expected at least 720 B"]);
        let (x, y) = buffers(180 * 4, 239 * 4);
        let e = op.encode(&mut enc, shape, &x, &y).unwrap_err();
        assert_eq!(e, Error::Buffer { buffer: "output", issue: BufferIssue::TooSmall { needed: 960, size: 956 } });
        assert_names(&e, &["output buffer", "956 B", "960 B"]);
        // Right sizes, but not storage buffers.
        let (x, y) = buffers_with(180 * 4, 240 * 4, wgpu::BufferUsages::COPY_DST);
        let e = op.encode(&mut enc, shape, &x, &y).unwrap_err();
        assert!(matches!(e, Error::Buffer { buffer: "input", issue: BufferIssue::MissingUsage { .. } }), "{e:?}");
        assert_names(&e, &["input buffer", "STORAGE"]);
        // Nothing was recorded by the failed calls: the encoder still finishes cleanly.
        let (x, y) = buffers(180 * 4, 240 * 4);
        op.encode(&mut enc, shape, &x, &y).unwrap();
        gpu.queue.submit([enc.finish()]);
        gpu.wait().unwrap();
    }
}

/// Padding so large that tap coordinates would leave i32's safe range (and the gather
/// table's out-of-range sentinel could land back in range: an out-of-bounds read with the
/// runtime checks off) is refused up front.
#[test]
fn padding_beyond_the_coordinate_range_is_refused() {
    let big = (1u32 << 30) + 1;
    let spec = S::new(1, 1, 1).stride((1 << 30, 1 << 30)).padding(P::new(0, 0, big, big));
    let e = spec.problem(Shape4::new(1, 1, 1, 1)).unwrap_err();
    assert!(matches!(e, Error::TooLarge(_)), "{e:?}");
    assert_names(&e, &["output height", &(big as u64 + 1).to_string()]);
}

/// Tile configs come from the command line and the cache file: absurd sizes are refused
/// with a reason, never an arithmetic overflow.
#[test]
fn absurd_tile_configs_are_refused_not_overflowed() {
    for name in ["m4294967295n4294967295k32-t4x4-w4-s2", "m64n64k16-t4294967295x4294967295-w4-s2"] {
        let c = wgconv::TileConfig::parse(name).unwrap();
        let r = std::panic::catch_unwind(|| c.check_shape());
        assert!(matches!(r, Ok(Err(Error::KernelRefused { .. }))), "{name}: {r:?}");
        let r = std::panic::catch_unwind(|| c.coop_layout());
        assert!(matches!(r, Ok(Err(Error::KernelRefused { .. }))), "{name}: {r:?}");
    }
    let r = std::panic::catch_unwind(|| wgconv::TileConfig::new(u32::MAX, u32::MAX, 16, u32::MAX, 2));
    assert!(matches!(r, Ok(Err(Error::KernelRefused { .. }))), "{r:?}");
}

/// The reference and the benchmark re-check hand-built problems (their fields are public).
#[test]
fn hand_built_problems_are_rechecked() {
    let spec = S::new(3, 4, 3);
    let p = spec.problem(Shape4::new(2, 3, 8, 8)).unwrap();
    let x = vec![1.0; p.input.len() as usize];
    let w = vec![1.0; spec.weight_len()];
    let e = wgconv::reference::conv2d_images(&p, &x, &w, None, 1..3).unwrap_err();
    assert_names(&e, &["1..3", "2"]);
    let mut zero_groups = p;
    zero_groups.spec.groups = 0;
    assert!(wgconv::reference::conv2d(&zero_groups, &x, &w, None).is_err());
    // The benchmark's re-check of a hand-built problem (batch 0) moved with the benchmark to
    // the CLI crate (cli/src/bench_run.rs), which this library test cannot reach.
}

/// Shapes whose element counts leave u32 per image or u64 bytes in all are refused by
/// `problem` with `TooLarge`, and every entry point with such an input returns that error
/// (before, 256·2^28·2^28 elements overflowed u64: a panic, or a count of 0 that let an
/// empty slice through).
#[test]
fn element_counts_beyond_the_kernels_addressing_are_refused() {
    let spec = S::new(256, 256, 1);
    for (shape, what) in [
        (Shape4::new(1, 256, 1 << 28, 1 << 28), "one input image"),
        (Shape4::new(1, 256, 1 << 13, 1 << 13), "one input image"),
        (Shape4::new(u32::MAX, 256, 1 << 11, 1 << 11), "the input"),
    ] {
        let e = spec.problem(shape).unwrap_err();
        assert!(matches!(e, Error::TooLarge(_)), "{shape}: {e:?}");
        assert_names(&e, &[what, &shape.to_string()]);
    }
    // The output's count too: 1 channel in, 256 out.
    let widening = S::new(1, 256, 1);
    let e = widening.problem(Shape4::new(1, 1, 1 << 13, 1 << 13)).unwrap_err();
    assert_names(&e, &["one output image"]);
    // Through the op: forward with an empty slice, plan with small buffers.
    let gpu = gpu();
    let conv = Conv2d::new(&gpu, spec, &vec![0.5; spec.weight_len()], None, Conv2dOptions::default()).unwrap();
    let huge = Shape4::new(1, 256, 1 << 28, 1 << 28);
    assert!(matches!(conv.forward(&[], huge), Err(Error::TooLarge(_))));
    let (x, y) = buffers(1024, 1024);
    assert!(matches!(conv.plan(huge, &x, &y), Err(Error::TooLarge(_))));
    // Shape4's own counts saturate instead of overflowing.
    assert_eq!(huge.len(), u64::MAX);
}

/// An input shape in the options that the spec cannot take is refused by `Conv2d::new`
/// (before, it was dropped silently and the first forward's selection with it).
#[test]
fn tuning_key_input_the_spec_cannot_take_is_refused() {
    let gpu = gpu();
    let spec = S::new(8, 16, 3);
    let w = vec![0.5; spec.weight_len()];
    for (input, part) in [
        (Shape4::new(1, 4, 16, 16), "channels"),
        (Shape4::new(1, 8, 0, 16), "zero"),
        (Shape4::new(1, 8, 2, 2), "output"),
    ] {
        let opts = Conv2dOptions::default().tuning_key_input(input);
        match Conv2d::new(&gpu, spec, &w, None, opts) {
            Err(e @ Error::InvalidOptions(_)) => assert_names(&e, &["tuning_key_input", &input.to_string(), part]),
            other => panic!("{input}: expected InvalidOptions, got {:?}", other.map(|c| c.kernel().to_string())),
        }
    }
}

/// The layout helpers refuse a slice that is not the shape's, instead of indexing out of
/// bounds or dividing by a zero size.
#[test]
fn layout_helpers_check_the_slice_against_the_shape() {
    for shape in [Shape4::new(1, 2, 2, 2), Shape4::new(1, 0, 1, 1)] {
        let e = reference::to_nhwc(&[0.0; 5], shape).unwrap_err();
        assert!(matches!(e, Error::ShapeMismatch { .. }), "{e:?}");
        assert!(reference::to_nchw(&[0.0; 5], shape).is_err());
    }
    let shape = Shape4::new(2, 3, 2, 1);
    let x: Vec<f32> = (0..12).map(|v| v as f32).collect();
    assert_eq!(reference::to_nchw(&reference::to_nhwc(&x, shape).unwrap(), shape).unwrap(), x);
}
