//! f16 storage (`Storage::F16`): f16 input, weights, bias and output through `encode` (packed
//! f16 buffers, NaN-poisoned output with a poisoned tail that must stay untouched) and
//! `forward_f16`, for both layouts and the kernels the device runs (the default of each
//! precision it has, `direct`, `tiled`); odd per-image sizes and a batch split into chunks
//! that start and end mid-word; outputs beyond f16's range; misuse. Runs on any adapter
//! (lavapipe in CI). The reference is the f64 CPU convolution of the f16-rounded data: what
//! remains is the output's rounding to f16 (and the f16 kernels' own error).

mod common;
use common::*;
use wgconv::half::f16;
use wgconv::reference::{relu, to_nhwc};
use wgconv::{
    BufferIssue, Conv2d, Conv2dOptions, Conv2dSpec as S, Error, Gpu, Kernel, Layout, Padding as P, PaddingMode,
    Precision, Shape4, Storage,
};

/// Bits that no conversion writes: an f16 NaN with a payload.
const POISON: u16 = 0x7e5a;

fn direct() -> Conv2dOptions {
    Conv2dOptions::default().kernel(direct_kernel())
}

fn to_f16(values: &[f32]) -> Vec<f16> {
    values.iter().map(|&v| f16::from_f32(v)).collect()
}

fn to_f32(values: &[f16]) -> Vec<f32> {
    values.iter().map(|v| v.to_f32()).collect()
}

/// A case whose input, weights and bias are f16 values, with their reference.
struct F16Case {
    case: Case,
    x: Vec<f16>,
    w: Vec<f16>,
    b: Option<Vec<f16>>,
}

fn f16_case(name: &str, spec: S, [n, h, w]: [u32; 3]) -> F16Case {
    let mut case = Case::new(name, spec, Shape4::new(n, spec.in_channels, h, w));
    let (x, w, b) = (to_f16(&case.x), to_f16(&case.w), case.b.as_deref().map(to_f16));
    case.x = to_f32(&x);
    case.w = to_f32(&w);
    case.b = b.as_deref().map(to_f32);
    case.want = reference_out(&case.problem, &case.x, &case.w, case.b.as_deref());
    F16Case { case, x, w, b }
}

impl F16Case {
    /// Input and reference in `layout`, the reference with ReLU applied where asked.
    fn tensors(&self, layout: Layout, relu_on: bool) -> (Vec<f16>, Vec<f32>) {
        let c = &self.case;
        let mut want = c.want.clone();
        if relu_on {
            want.iter_mut().for_each(|v| *v = relu(*v));
        }
        match layout {
            Layout::Nhwc => (to_f16(&to_nhwc(&c.x, c.shape).unwrap()), to_nhwc(&want, c.problem.output).unwrap()),
            _ => (self.x.clone(), want),
        }
    }
}

/// A storage buffer holding `values` as packed f16, then `extra` poisoned elements, the size
/// rounded up to whole words (the rest of the last word poisoned too).
fn f16_buffer(gpu: &Gpu, label: &str, values: &[f16], extra: usize, usage: wgpu::BufferUsages) -> wgpu::Buffer {
    use wgpu::util::DeviceExt;
    let mut bits: Vec<u16> = values.iter().map(|v| v.to_bits()).collect();
    bits.resize((values.len() + extra).next_multiple_of(2), POISON);
    gpu.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: Some(label),
        contents: bytemuck::cast_slice(&bits),
        usage: wgpu::BufferUsages::STORAGE | usage,
    })
}

/// Runs `conv` through `encode` on packed f16 buffers, the output poisoned with `extra`
/// more poisoned elements after it: returns the output and the tail's bits.
fn run_f16_poisoned(gpu: &Gpu, conv: &Conv2d, input: &[f16], shape: Shape4, extra: usize) -> (Vec<f32>, Vec<u16>) {
    let out_len = conv.spec().problem(shape).unwrap().output.len() as usize;
    let x = f16_buffer(gpu, "test f16 input", input, 0, wgpu::BufferUsages::empty());
    let y = f16_buffer(gpu, "test f16 output", &[], out_len + extra, wgpu::BufferUsages::COPY_SRC);
    let mut enc = gpu.device.create_command_encoder(&Default::default());
    conv.encode(&mut enc, shape, &x, &y).unwrap();
    gpu.queue.submit([enc.finish()]);
    let mut bits = gpu.read_buffer::<u16>(&y, 0, (out_len + extra).next_multiple_of(2)).unwrap();
    bits.truncate(out_len + extra);
    let tail = bits.split_off(out_len);
    (bits.into_iter().map(|b| f16::from_bits(b).to_f32()).collect(), tail)
}

/// The depthwise family (both layouts), the tiled one (NCHW) and the channels-last
/// cooperative ones (both layouts) read and write f16 tensors themselves where the device
/// has SHADER_F16: no conversion passes (the cooperative kernels' staging and input-maximum
/// passes are one and two more dispatches per chunk).
fn assert_native_f16(gpu: &Gpu, conv: &Conv2d, shape: Shape4, what: &str) {
    let out_len = conv.spec().problem(shape).unwrap().output.len() as usize;
    let x = f16_buffer(gpu, "x", &[], shape.len() as usize, wgpu::BufferUsages::empty());
    let y = f16_buffer(gpu, "y", &[], out_len, wgpu::BufferUsages::empty());
    // Planned first: an op not told the input shape selects again with it (`Conv2d::kernel`
    // names the kernel the plan runs only from then on).
    let plan = conv.plan(shape, &x, &y).unwrap();
    let family = conv.kernel().kernel.family();
    let f16 = gpu.device.features().contains(wgpu::Features::SHADER_F16);
    let s = conv.spec();
    let p = s.padding;
    // coop-nhwc-f16 reads a channels-last input of whole 8-channel vectors per group in place,
    // unpadded or zero-padded around windows of at most 31 taps.
    let unpadded = [p.top, p.bottom, p.left, p.right] == [0; 4];
    let bordered = s.padding_mode == PaddingMode::Zeros && s.kernel[0] * s.kernel[1] <= 31;
    let in_place =
        conv.layout() == Layout::Nhwc && (unpadded || bordered) && s.in_channels_per_group().is_multiple_of(8);
    let passes = match family {
        "coop-nhwc-f16" if in_place => Some(0),
        "coop-nhwc-f16" | "coop-nhwc-f16x3" => Some(1),
        "coop-nhwc-f32" => Some(2),
        f if f.starts_with("depthwise") || (f.starts_with("tiled") && conv.layout() == Layout::Nchw) => Some(0),
        _ => None,
    };
    if let (true, Some(passes)) = (f16, passes) {
        assert_eq!(
            plan.dispatches(),
            plan.chunks() * (1 + passes),
            "{what}: conversion passes around a kernel of f16 tensors"
        );
    }
}

/// The op with f16 storage in `layout` through `encode` and `forward_f16`, against the
/// reference (skipped, saying so, where a named kernel cannot run here).
fn check(gpu: &Gpu, c: &F16Case, kernel: Option<Kernel>, precision: Precision, layout: Layout, relu_on: bool) {
    let case = &c.case;
    let opts = options_at(precision, kernel.clone(), relu_on).layout(layout).storage(Storage::F16);
    let conv = match Conv2d::new_f16(gpu, case.spec, &c.w, c.b.as_deref(), opts) {
        Ok(conv) => conv,
        Err(e) if kernel.is_some() => return eprintln!("{}: {e}", case.label("skipped")),
        Err(e) => panic!("{}: {e}", case.label("default")),
    };
    assert_eq!((conv.storage(), conv.layout()), (Storage::F16, layout));
    let kind = conv.kernel().kernel.clone();
    let tol = TOL_STORAGE.max(tolerance(&kind));
    let (x, want) = c.tensors(layout, relu_on);
    let what = format!("{layout:?} f16 storage, {kind}");
    assert_native_f16(gpu, &conv, case.shape, &what);
    let (got, tail) = run_f16_poisoned(gpu, &conv, &x, case.shape, 5);
    assert_close(&case.label(&format!("encode, {what}")), &got, &want, tol);
    assert!(tail.iter().all(|&b| b == POISON), "{}: wrote past the output: {tail:x?}", case.label(&what));
    assert!(!conv.take_range_flag().unwrap(), "{}: range flag on normal data", case.label(&what));
    let got = conv.forward_f16(&x, case.shape).unwrap_or_else(|e| panic!("{}: {e}", case.label(&what)));
    assert_close(&case.label(&format!("forward_f16, {what}")), &to_f32(&got), &want, tol);
}

#[test]
fn f16_storage_matches_reference() {
    let gpu = gpu();
    let shapes = [
        // 5·7·9 = 315 output elements: an odd image, and an odd tensor.
        ("3x3_pad_bias_odd", S::new(3, 5, 3).padding(P::uniform(1)).with_bias(true), [1, 7, 9], false),
        ("stride2_asym_relu", S::new(6, 4, 3).stride(2).padding(P::new(1, 0, 2, 1)).with_bias(true), [2, 9, 8], true),
        ("grouped", S::new(8, 12, 3).groups(4).padding(P::uniform(1)), [2, 7, 7], false),
        ("depthwise_bias_relu", S::new(6, 6, 3).groups(6).padding(P::uniform(1)).with_bias(true), [1, 9, 11], true),
        // 3·5·3 = 45 per image, three images: the second starts mid-word.
        ("1x1_odd_n3", S::new(5, 3, 1), [3, 5, 3], false),
        // More than one tile of the transposing layout passes (32 pixels × 32 channels) in
        // both directions, partial tiles, and 41·63 outputs per image: images start mid-word.
        ("wide_odd_channels", S::new(37, 41, 3).stride(2).padding(P::uniform(1)).with_bias(true), [3, 13, 17], false),
        // The same at stride 1, where a CPU adapter's default is Winograd between passes.
        ("wide_odd_channels_s1", S::new(37, 41, 3).padding(P::uniform(1)).with_bias(true), [3, 7, 9], false),
        // Unpadded, whole vectors of 8 channels per group: coop-nhwc-f16 reads channels-last
        // input in place (several images per dispatch; chunked in
        // `cooperative_f16_storage_in_chunks`).
        ("1x1_c16_in_place", S::new(16, 12, 1).with_bias(true), [3, 5, 7], true),
        ("3x3_s2_groups_in_place", S::new(16, 10, 3).stride(2).groups(2).dilation(2), [2, 13, 11], false),
        // Zero-padded, read in place with each row's taps inside the image as a mask: windows
        // past every edge, asymmetric padding with stride and dilation, two groups, 5×5.
        ("3x3_pad_in_place", S::new(16, 12, 3).padding(P::uniform(1)).with_bias(true), [2, 7, 9], true),
        (
            "3x3_s2_groups_dil_pad_in_place",
            S::new(16, 10, 3).stride(2).groups(2).dilation(2).padding(P::new(2, 1, 0, 3)),
            [2, 13, 11],
            false,
        ),
        ("5x5_pad_in_place", S::new(24, 8, 5).padding(P::uniform(2)).with_bias(true), [1, 9, 6], false),
    ];
    let mut precisions = vec![Precision::F32];
    if has_f16(&gpu) {
        precisions.push(Precision::F16Accum32);
    }
    for (name, spec, nhw, relu_on) in shapes {
        let c = f16_case(name, spec, nhw);
        for layout in [Layout::Nchw, Layout::Nhwc] {
            for &precision in &precisions {
                check(&gpu, &c, None, precision, layout, relu_on);
            }
            check(&gpu, &c, Some(direct_kernel()), Precision::F32, layout, relu_on);
            check(&gpu, &c, Some(kernel("tiled")), Precision::F32, layout, relu_on);
            // The channels-last cooperative kernels, where the device has them (skipped
            // elsewhere): they read and write f16 tensors of either layout themselves.
            for (name, precision) in COOPERATIVE {
                check(&gpu, &c, Some(kernel(name)), precision, layout, relu_on);
            }
        }
    }
}

/// The channels-last cooperative kernels and their precisions.
const COOPERATIVE: [(&str, Precision); 3] = [
    ("coop-nhwc-f16", Precision::F16Accum32),
    ("coop-nhwc-f16x3", Precision::F16x3),
    ("coop-nhwc-f32", Precision::F32),
];

/// `new_f16` is `new` on the widened weights: the same output, bit for bit.
#[test]
fn new_f16_matches_new_on_widened_weights() {
    let gpu = gpu();
    let c = f16_case("new_f16", S::new(4, 6, 3).padding(P::uniform(1)).with_bias(true), [2, 6, 5]);
    let opts = || Conv2dOptions::default().storage(Storage::F16);
    let from_f16 = Conv2d::new_f16(&gpu, c.case.spec, &c.w, c.b.as_deref(), opts()).unwrap();
    let from_f32 = Conv2d::new(&gpu, c.case.spec, &c.case.w, c.case.b.as_deref(), opts()).unwrap();
    let a = from_f16.forward_f16(&c.x, c.case.shape).unwrap();
    let b = from_f32.forward_f16(&c.x, c.case.shape).unwrap();
    assert_eq!(a, b, "{}", c.case.label("new_f16 vs new"));
    assert_close(&c.case.label("new_f16"), &to_f32(&a), &c.case.want, TOL_STORAGE);
    // f16 weights with f32 tensors: storage is the tensors' type, not the weights'.
    let f32_tensors = Conv2d::new_f16(&gpu, c.case.spec, &c.w, c.b.as_deref(), Conv2dOptions::default()).unwrap();
    assert_eq!(f32_tensors.storage(), Storage::F32);
    let got = f32_tensors.forward(&c.case.x, c.case.shape).unwrap();
    assert_close(&c.case.label("new_f16, f32 storage"), &got, &c.case.want, TOL_F32);
}

/// Chunks under a small binding limit, three images each: with 429 input and 715 output
/// elements per image (odd), chunks start and end mid-word in both tensors (elements 1287,
/// 2145, …), so the input pass reads half words and the output pass writes the chunk's
/// half of a word whose other half is the neighbouring chunk's (or the poisoned tail's).
/// The depthwise family's chunks (it writes f16 itself where the device has SHADER_F16)
/// start and end mid-word too: 715 elements per image on both sides.
#[test]
fn f16_storage_in_chunks() {
    let c = f16_case("f16_chunked", S::new(3, 5, 3).padding(P::uniform(1)).with_bias(true), [7, 13, 11]);
    let dw = f16_case("f16_chunked_dw", S::new(5, 5, 3).groups(5).padding(P::uniform(1)).with_bias(true), [7, 13, 11]);
    let (per_in, per_out) = (c.case.problem.input.per_image(), c.case.problem.output.per_image());
    assert_eq!((per_in, per_out), (429, 715));
    assert_eq!((dw.case.problem.input.per_image(), dw.case.problem.output.per_image()), (715, 715));
    let _serial = serial();
    // Three images of f32 output scratch (the kernel's) and the slack of an offset alignment
    // fit; four do not. Also holds the seed tile config's packed weights (8192 B).
    let binding = 3 * per_out * 4 + 256;
    let gpu = gpu_with_limits(|l| l.max_storage_buffer_binding_size = binding);
    assert_eq!(gpu.limits().max_storage_buffer_binding_size, binding, "the device did not take the lowered limit");
    let cases = [
        (&c, kernel("tiled:m32n64k32-t4x4-w4-s2")),
        (&c, direct_kernel()),
        (&dw, kernel("depthwise:x1y4c1-w128")),
        (&dw, kernel("depthwise:x2y4c1-w128")),
    ];
    for (c, kernel) in cases {
        for layout in [Layout::Nchw, Layout::Nhwc] {
            let opts = Conv2dOptions::default().kernel(kernel.clone()).layout(layout).storage(Storage::F16);
            let conv = Conv2d::new_f16(&gpu, c.case.spec, &c.w, c.b.as_deref(), opts).unwrap();
            let what = format!("{layout:?} f16 storage in chunks, {kernel}");
            check_chunked(&gpu, c, &conv, 3, TOL_STORAGE, &what);
        }
    }
}

/// An op of f16 storage whose plan runs `chunks` chunks, through `encode` (into a poisoned
/// output with a poisoned tail) and `forward_f16`, against the reference within `tol`.
fn check_chunked(gpu: &Gpu, c: &F16Case, conv: &Conv2d, chunks: usize, tol: f64, what: &str) {
    let (x, want) = c.tensors(conv.layout(), false);
    let xb = f16_buffer(gpu, "x", &x, 0, wgpu::BufferUsages::empty());
    let yb = f16_buffer(gpu, "y", &[], want.len(), wgpu::BufferUsages::empty());
    assert_eq!(conv.plan(c.case.shape, &xb, &yb).unwrap().chunks(), chunks, "{what}");
    assert_native_f16(gpu, conv, c.case.shape, what);
    let (got, tail) = run_f16_poisoned(gpu, conv, &x, c.case.shape, 3);
    assert_close(&c.case.label(&format!("encode, {what}")), &got, &want, tol);
    assert!(tail.iter().all(|&b| b == POISON), "{}: wrote past the output", c.case.label(what));
    let got = conv.forward_f16(&x, c.case.shape).unwrap();
    assert_close(&c.case.label(&format!("forward_f16, {what}")), &to_f32(&got), &want, tol);
}

/// The channels-last cooperative kernels on f16 tensors split into chunks (where the device
/// has them): the input-maximum, staging and GEMM passes of each chunk address the caller's
/// windows, which start and end mid-word (11907 and 19845 elements per image).
#[test]
fn cooperative_f16_storage_in_chunks() {
    if !gpu().has_coop_f16() {
        return eprintln!("skipped: the device has no f16 cooperative matrices");
    }
    let c = f16_case("f16_chunked_coop", S::new(3, 5, 3).padding(P::uniform(1)).with_bias(true), [7, 63, 63]);
    assert_eq!((c.case.problem.input.per_image(), c.case.problem.output.per_image()), (11907, 19845));
    // The split kernels' staged input, two f16 halves of 65·65 pixels of one 8-channel
    // vector, is the largest per image: three images fit, four do not (coop-nhwc-f16's one
    // half: five or six, as its output counts).
    let staged = 65 * 65 * 16 * 2;
    let _serial = serial();
    let Some(gpu) = coop_gpu_with_limits(|l| l.max_storage_buffer_binding_size = 3 * staged + 256) else {
        return;
    };
    for (name, precision) in COOPERATIVE {
        for layout in [Layout::Nchw, Layout::Nhwc] {
            let opts = options_at(precision, Some(kernel(name)), false).layout(layout).storage(Storage::F16);
            let conv = Conv2d::new_f16(&gpu, c.case.spec, &c.w, c.b.as_deref(), opts).unwrap();
            let what = format!("{layout:?} f16 storage in chunks, {name}");
            let chunks = if name == "coop-nhwc-f16" { 2 } else { 3 };
            check_chunked(&gpu, &c, &conv, chunks, TOL_STORAGE.max(precision_tolerance(precision)), &what);
        }
    }
    // Read in place (16 channels, unpadded, channels last): six images of 16368 elements per
    // chunk, so the second chunk starts inside its aligned window and the kernel's origins
    // count its element offset.
    let c = f16_case("f16_chunked_in_place", S::new(16, 5, 1).with_bias(true), [7, 31, 33]);
    let opts = options_at(Precision::F16Accum32, Some(kernel("coop-nhwc-f16")), false)
        .layout(Layout::Nhwc)
        .storage(Storage::F16);
    let conv = Conv2d::new_f16(&gpu, c.case.spec, &c.w, c.b.as_deref(), opts.clone()).unwrap();
    let tol = TOL_STORAGE.max(precision_tolerance(Precision::F16Accum32));
    check_chunked(&gpu, &c, &conv, 2, tol, "Nhwc f16 storage in chunks, coop-nhwc-f16 in place");
    // The same with 8 output channels, written in quads: the second chunk's output starts
    // inside its aligned window, whole quads past its start.
    let c = f16_case("f16_chunked_in_place_quads", S::new(16, 8, 1).with_bias(true), [7, 31, 33]);
    let conv = Conv2d::new_f16(&gpu, c.case.spec, &c.w, c.b.as_deref(), opts.clone()).unwrap();
    check_chunked(&gpu, &c, &conv, 2, tol, "Nhwc f16 storage in chunks, coop-nhwc-f16 in place, quads");
    // Zero-padded and read in place: the second chunk's windows start before its images.
    let c =
        f16_case("f16_chunked_in_place_padded", S::new(16, 8, 3).padding(P::uniform(1)).with_bias(true), [7, 31, 33]);
    let conv = Conv2d::new_f16(&gpu, c.case.spec, &c.w, c.b.as_deref(), opts.clone()).unwrap();
    check_chunked(&gpu, &c, &conv, 2, tol, "Nhwc f16 storage in chunks, coop-nhwc-f16 in place, padded");
    // The same with K = 288, where the kernel finds infinities from its sums: the second
    // chunk's rows are read again from its windows' origins, offset in the bound window.
    let c =
        f16_case("f16_chunked_in_place_watch", S::new(32, 8, 3).padding(P::uniform(1)).with_bias(true), [7, 31, 33]);
    let conv = Conv2d::new_f16(&gpu, c.case.spec, &c.w, c.b.as_deref(), opts).unwrap();
    let shape = c.case.shape;
    let (x, _) = c.tensors(Layout::Nhwc, false);
    let (xb, yb) = (
        f16_buffer(&gpu, "x", &x, 0, wgpu::BufferUsages::empty()),
        f16_buffer(&gpu, "y", &[], c.case.want.len(), wgpu::BufferUsages::empty()),
    );
    let chunks = conv.plan(shape, &xb, &yb).unwrap().chunks();
    assert!(chunks >= 2, "{chunks} chunk(s)");
    check_chunked(&gpu, &c, &conv, chunks, tol, "Nhwc f16 storage in chunks, coop-nhwc-f16 in place, sums watched");
    // An infinity in the last image (the last chunk's) is found.
    let mut bad = x.clone();
    let last = bad.len() - 5 * 32 + 7;
    bad[last] = f16::INFINITY;
    assert!(matches!(conv.forward_f16(&bad, shape), Err(Error::F16Range { .. })), "inf in the last chunk");
}

/// `coop-nhwc-f16` reading an f16 channels-last input in place (no staging pass to clamp
/// and flag it) refuses ±inf inputs (`forward_f16` returns `Error::F16Range`, the encoded run
/// raises the range flag) and lets NaN through to the outputs it reaches, as the staged
/// path does. Where the device has the kernel.
#[test]
fn cooperative_in_place_input_flags_infinities() {
    let gpu = gpu();
    if !gpu.has_coop_f16() {
        return eprintln!("skipped: the device has no f16 cooperative matrices");
    }
    let c = f16_case("in_place_specials", S::new(16, 8, 1), [2, 6, 5]);
    let opts = options_at(Precision::F16Accum32, Some(kernel("coop-nhwc-f16")), false)
        .layout(Layout::Nhwc)
        .storage(Storage::F16);
    let conv = Conv2d::new_f16(&gpu, c.case.spec, &c.w, None, opts.clone()).unwrap();
    let (x, want) = c.tensors(Layout::Nhwc, false);
    assert_native_f16(&gpu, &conv, c.case.shape, "in place");
    // Pixel 37 of 60 (the second image), channel 3; then channel 5 of pixel 4.
    for (at, value) in [(37 * 16 + 3, f16::INFINITY), (4 * 16 + 5, f16::NEG_INFINITY)] {
        let mut bad = x.clone();
        bad[at] = value;
        let got = conv.forward_f16(&bad, c.case.shape);
        assert!(matches!(got, Err(Error::F16Range { .. })), "input {value} at {at}: {got:?}");
        assert!(!conv.take_range_flag().unwrap(), "forward_f16 leaves the flag cleared");
    }
    // Where the output is written in quads and K ≥ 256 the kernel finds infinities from
    // non-finite sums of the first 16 channels (rows noted by the warps that store them,
    // their windows read again); elsewhere it tests every loaded vector. Zero-padded (border
    // masks): an infinity in a corner pixel, which some windows hold and others do not;
    // several row blocks and two blocks of output channels (200 > 128); two groups (the
    // infinity in the second group's channels); K = 144 (tested at each load); 6 output
    // channels (no quads). Each on the default tile and on two with other warp layouts
    // (4 warps of 4×4 fragments; 64×64 blocks).
    let cases = [
        (S::new(32, 8, 3).padding(P::uniform(1)), [2, 6, 5], 29, 2),
        (S::new(32, 200, 3).padding(P::uniform(1)), [2, 17, 19], 17 * 19 + 16 * 19 + 18, 2),
        (S::new(256, 200, 1), [2, 17, 19], 17 * 19 + 300, 2),
        (S::new(64, 16, 3).groups(2).padding(P::uniform(1)), [2, 9, 7], 9 * 7 + 40, 40),
        (S::new(16, 8, 3).padding(P::uniform(1)), [2, 6, 5], 29, 2),
        (S::new(16, 6, 1), [2, 6, 5], 37, 2),
    ];
    let tiles = ["coop-nhwc-f16", "coop-nhwc-f16:m128n128k32-t16x8-w4-s1", "coop-nhwc-f16:m64n64k32-t4x8-w4-s2"];
    for ((spec, nhw, pixel, channel), tile) in cases.into_iter().flat_map(|c| tiles.map(|t| (c, t))) {
        let case = f16_case("in_place_specials_more", spec, nhw);
        let opts = opts.clone().kernel(kernel(tile));
        let conv = Conv2d::new_f16(&gpu, spec, &case.w, None, opts).unwrap();
        assert_native_f16(&gpu, &conv, case.case.shape, "in place");
        let (mut bad, want) = case.tensors(Layout::Nhwc, false);
        let got = to_f32(&conv.forward_f16(&bad, case.case.shape).unwrap());
        assert_close(
            &case.case.label("in place, finite"),
            &got,
            &want,
            TOL_STORAGE.max(precision_tolerance(Precision::F16Accum32)),
        );
        let at = pixel * spec.in_channels as usize + channel;
        // NaN is in range: its rows' sums are non-finite, their windows are read again, and
        // nothing is flagged.
        bad[at] = f16::NAN;
        let got = to_f32(&conv.forward_f16(&bad, case.case.shape).unwrap());
        assert!(got.iter().any(|v| v.is_nan()), "{tile} {spec:?}: a NaN input reached no output");
        bad[at] = f16::NEG_INFINITY;
        let got = conv.forward_f16(&bad, case.case.shape);
        assert!(matches!(got, Err(Error::F16Range { .. })), "{tile} {spec:?}: input -inf at {at}: {got:?}");
    }
    let mut nan = x.clone();
    nan[37 * 16 + 3] = f16::NAN;
    let got = to_f32(&conv.forward_f16(&nan, c.case.shape).unwrap());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        match i / 8 == 37 {
            true => assert!(g.is_nan(), "output {i}: {g}"),
            false => assert!((g - w).abs() <= 1e-2 * w.abs().max(1.0), "output {i}: {g} against {w}"),
        }
    }
}

/// Outputs beyond f16's range become ±inf (WGSL leaves pack2x16float of them
/// indeterminate), NaN stays NaN, and the largest finite values round as in f16: through the
/// output pass (`direct`) and where the kernel writes f16 itself (`depthwise`, and `tiled`
/// with scalar and vec4 stores; on devices with SHADER_F16).
#[test]
fn f16_storage_out_of_range_outputs() {
    let gpu = gpu();
    for kernel in [direct_kernel(), kernel("depthwise"), kernel("tiled")] {
        out_of_range_outputs(&gpu, kernel, Layout::Nchw, 1);
    }
    // The F32 kernel on the matrix units writes f16 tensors itself too: channels last with
    // whole quads of output channels, 4 at a time.
    if gpu.has_coop_f16() {
        out_of_range_outputs(&gpu, kernel("coop-nhwc-f32"), Layout::Nchw, 1);
        out_of_range_outputs(&gpu, kernel("coop-nhwc-f32"), Layout::Nhwc, 4);
        out_of_range_outputs(&gpu, kernel("coop-nhwc-f32"), Layout::Nhwc, 12);
    }
}

/// Each of `c_out` output channels sums the two input channels.
fn out_of_range_outputs(gpu: &Gpu, kernel: Kernel, layout: Layout, c_out: u32) {
    let spec = S::new(2, c_out, 1);
    let opts = Conv2dOptions::default().kernel(kernel.clone()).layout(layout).storage(Storage::F16);
    let conv = Conv2d::new(gpu, spec, &vec![1.0; 2 * c_out as usize], None, opts).unwrap();
    // Pairs of input channels summed: 120000, -120000, 65504 + 8 (rounds to 65504),
    // 65504 + 16 (rounds to inf), NaN, 1.5, 2, 4. Six outputs, and eight (a tiled kernel
    // stores whole vec4s of positions where the image holds a multiple of 4).
    let pairs = [
        (60000.0, 60000.0),
        (-60000.0, -60000.0),
        (65504.0, 8.0),
        (65504.0, 16.0),
        (f32::NAN, 1.0),
        (1.0, 0.5),
        (1.0, 1.0),
        (2.0, 2.0),
    ];
    for width in [6, 8] {
        let pairs = &pairs[..width];
        let shape = Shape4::new(1, 2, 1, width as u32);
        let channels_last = layout == Layout::Nhwc;
        let x: Vec<f16> = match channels_last {
            false => pairs.iter().map(|p| p.0).chain(pairs.iter().map(|p| p.1)).map(f16::from_f32).collect(),
            true => pairs.iter().flat_map(|p| [p.0, p.1]).map(f16::from_f32).collect(),
        };
        let all = to_f32(&conv.forward_f16(&x, shape).unwrap());
        for c in 0..c_out as usize {
            let got: Vec<f32> = match channels_last {
                false => all[c * width..(c + 1) * width].to_vec(),
                true => all.iter().skip(c).step_by(c_out as usize).copied().collect(),
            };
            let what = format!("{kernel} {layout:?} channel {c}: {got:?}");
            assert_eq!(got[..4], [f32::INFINITY, f32::NEG_INFINITY, 65504.0, f32::INFINITY], "{what}");
            assert!(got[4].is_nan(), "{what}");
            assert_eq!(got[5..], [1.5, 2.0, 4.0][..width - 5], "{what}");
        }
    }
}

#[test]
fn storage_misuse_is_refused() {
    let gpu = gpu();
    let spec = S::new(3, 4, 3).padding(P::uniform(1));
    let shape = Shape4::new(1, 3, 5, 5);
    let (in_len, out_len) = (shape.len() as usize, spec.problem(shape).unwrap().output.len() as usize);
    assert_eq!((in_len % 2, out_len % 2), (1, 0));
    let w = vec![f16::from_f32(0.5); spec.weight_len()];
    let f16_op = Conv2d::new_f16(&gpu, spec, &w, None, direct().storage(Storage::F16)).unwrap();
    let f32_op = Conv2d::new_f16(&gpu, spec, &w, None, direct()).unwrap();

    // The host method of the other element type names the right one.
    let e = f16_op.forward(&vec![1.0; in_len], shape).unwrap_err();
    assert!(matches!(&e, Error::InvalidOptions(m) if m.contains("forward_f16")), "{e:?}");
    let e = pollster::block_on(f16_op.forward_async(&vec![1.0; in_len], shape)).unwrap_err();
    assert!(matches!(&e, Error::InvalidOptions(m) if m.contains("forward_f16")), "{e:?}");
    let x16 = vec![f16::ONE; in_len];
    let e = f32_op.forward_f16(&x16, shape).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidOptions(m) if m.contains("call forward") && m.contains("Storage::F16")),
        "{e:?}"
    );
    let e = pollster::block_on(f32_op.forward_f16_async(&x16, shape)).unwrap_err();
    assert!(matches!(&e, Error::InvalidOptions(_)), "{e:?}");
    // The input's length is checked in elements, as for f32.
    let e = f16_op.forward_f16(&x16[1..], shape).unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { expected, got, .. } if expected == in_len as u64 && got == in_len as u64 - 1)
    );

    // Buffers: 2 bytes per element, rounded up to a whole word (75 elements: 152 B).
    // Exactly these sizes: `Gpu::create_buffer` would round them up to whole granules.
    let buffer = |bytes: u64| {
        gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("test"),
            size: bytes,
            usage: wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        })
    };
    let needed_in = (in_len as u64 * 2).next_multiple_of(4);
    assert_eq!(needed_in, 152);
    let y = buffer(out_len as u64 * 2);
    assert!(f16_op.plan(shape, &buffer(needed_in), &y).is_ok());
    for (what, x, y) in [
        ("input", buffer(needed_in - 4), buffer(out_len as u64 * 2)),
        ("output", buffer(needed_in), buffer(out_len as u64 * 2 - 4)),
    ] {
        let e = f16_op.plan(shape, &x, &y).err().unwrap();
        let needed = if what == "input" { needed_in } else { out_len as u64 * 2 };
        assert!(
            matches!(&e, Error::Buffer { buffer, issue: BufferIssue::TooSmall { needed: n, .. } } if *buffer == what && *n == needed),
            "{what}: {e:?}"
        );
    }
    // The same buffers are too small for f32 elements.
    let e = f32_op.plan(shape, &buffer(needed_in), &buffer(out_len as u64 * 4)).err().unwrap();
    assert!(
        matches!(&e, Error::Buffer { buffer: "input", issue: BufferIssue::TooSmall { needed, .. } } if *needed == in_len as u64 * 4),
        "{e:?}"
    );
}

#[test]
fn storage_option_and_names() {
    assert_eq!(Conv2dOptions::default().storage, Storage::F32);
    assert_eq!(Conv2dOptions::default().storage(Storage::F16).storage, Storage::F16);
    assert_eq!((Storage::F32.element_bytes(), Storage::F16.element_bytes()), (4, 2));
    assert_eq!((Storage::F32.to_string(), Storage::F16.to_string()), ("f32".to_string(), "f16".to_string()));
}
