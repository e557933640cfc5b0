//! Bring your own device: every misuse of `Conv2d::encode` / `plan` with the caller's
//! buffers and devices is a typed error before anything is encoded (issue 22's sharp
//! edges: same buffer in and out, usages, sizes, a buffer of another device, a device
//! without a feature its adapter offers). None may panic or give a silently wrong output.

mod common;
use common::*;
use wgconv::{BufferIssue, Conv2d, Conv2dOptions, Conv2dSpec, Error, Gpu, Precision, Shape4};

fn spec() -> Conv2dSpec {
    Conv2dSpec::new(3, 4, 3).padding(1)
}

const SHAPE: Shape4 = Shape4::new(1, 3, 6, 5);

fn op(gpu: &Gpu) -> Conv2d {
    let s = spec();
    Conv2d::new(gpu, s, &vec![0.5; s.weight_len()], None, Conv2dOptions::default()).unwrap()
}

fn buffer(gpu: &Gpu, bytes: u64, usage: wgpu::BufferUsages) -> wgpu::Buffer {
    gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("byod"),
        size: bytes,
        usage,
        mapped_at_creation: false,
    })
}

const IN_BYTES: u64 = 3 * 6 * 5 * 4;
const OUT_BYTES: u64 = 4 * 6 * 5 * 4;
const RW: wgpu::BufferUsages =
    wgpu::BufferUsages::STORAGE.union(wgpu::BufferUsages::COPY_SRC).union(wgpu::BufferUsages::COPY_DST);

#[test]
fn same_buffer_as_input_and_output_is_refused_before_encoding() {
    let gpu = gpu();
    let conv = op(&gpu);
    let both = buffer(&gpu, OUT_BYTES, RW);
    let mut enc = gpu.device.create_command_encoder(&Default::default());
    let e = conv.encode(&mut enc, SHAPE, &both, &both).unwrap_err();
    assert_eq!(e, Error::Buffer { buffer: "output", issue: BufferIssue::SameAsInput });
    assert!(e.to_string().contains("cannot run in place"), "{e}");
    // Nothing was recorded: the encoder finishes (wgpu panicked here before).
    gpu.queue.submit([enc.finish()]);
    gpu.wait().unwrap();
}

#[test]
fn missing_usages_and_sizes_are_typed() {
    let gpu = gpu();
    let conv = op(&gpu);
    let (x, y) = (buffer(&gpu, IN_BYTES, RW), buffer(&gpu, OUT_BYTES, RW));
    let no_storage = buffer(&gpu, OUT_BYTES, wgpu::BufferUsages::COPY_SRC);
    match conv.plan(SHAPE, &x, &no_storage).err().unwrap() {
        Error::Buffer { buffer: "output", issue: BufferIssue::MissingUsage { needed, has } } => {
            assert_eq!((needed.as_str(), has.as_str()), ("STORAGE", "COPY_SRC"));
        }
        e => panic!("expected a missing STORAGE usage, got {e:?}"),
    }
    let short = buffer(&gpu, IN_BYTES - 4, RW);
    let e = conv.plan(SHAPE, &short, &y).err().unwrap();
    assert_eq!(
        e,
        Error::Buffer { buffer: "input", issue: BufferIssue::TooSmall { needed: IN_BYTES, size: IN_BYTES - 4 } }
    );
    // Bytes on both sides of the message, never elements against bytes.
    assert!(e.to_string().contains(&format!("has {} B, expected at least {IN_BYTES} B", IN_BYTES - 4)), "{e}");
    // Read-back needs COPY_SRC.
    let storage_only = buffer(&gpu, OUT_BYTES, wgpu::BufferUsages::STORAGE);
    let e = gpu.read_buffer::<f32>(&storage_only, 0, 4).unwrap_err();
    assert!(matches!(e, Error::Buffer { buffer: "read-back", issue: BufferIssue::MissingUsage { .. } }), "{e:?}");
    let e = gpu.read_buffer::<f32>(&y, 0, OUT_BYTES as usize).unwrap_err();
    assert!(matches!(e, Error::Buffer { buffer: "read-back", issue: BufferIssue::TooSmall { .. } }), "{e:?}");
    // The right buffers still work, and give the reference's result.
    let input: Vec<f32> = (0..SHAPE.len()).map(|i| (i % 7) as f32 - 3.0).collect();
    gpu.queue.write_buffer(&x, 0, bytemuck::cast_slice(&input));
    let mut enc = gpu.device.create_command_encoder(&Default::default());
    conv.encode(&mut enc, SHAPE, &x, &y).unwrap();
    gpu.queue.submit([enc.finish()]);
    let got = gpu.read_buffer::<f32>(&y, 0, (OUT_BYTES / 4) as usize).unwrap();
    let problem = spec().problem(SHAPE).unwrap();
    let want = wgconv::reference::conv2d(&problem, &input, &vec![0.5; spec().weight_len()], None).unwrap();
    assert_close("byod encode", &got, &want, TOL_F32);
}

/// Every `Gpu::new` device comes from the one shared instance, so wgpu knows which device a
/// buffer belongs to: a buffer of another device is refused (it used to run and give a
/// silently wrong output, the two instances' buffer ids colliding).
#[test]
fn buffer_of_another_device_is_refused() {
    let gpu = gpu();
    let conv = op(&gpu);
    let other = Gpu::with_options(wgconv::GpuOptions::default().adapter(gpu.info.name.clone())).unwrap();
    assert!(other.device != gpu.device);
    let (x, y) = (buffer(&gpu, IN_BYTES, RW), buffer(&gpu, OUT_BYTES, RW));
    let (fx, fy) = (buffer(&other, IN_BYTES, RW), buffer(&other, OUT_BYTES, RW));
    let e = conv.plan(SHAPE, &fx, &y).err().unwrap();
    assert!(matches!(e, Error::Buffer { buffer: "input", issue: BufferIssue::ForeignDevice(_) }), "{e:?}");
    let e = conv.plan(SHAPE, &x, &fy).err().unwrap();
    assert!(matches!(e, Error::Buffer { buffer: "output", issue: BufferIssue::ForeignDevice(_) }), "{e:?}");
    assert!(e.to_string().contains("belongs to another device"), "{e}");
    conv.plan(SHAPE, &x, &y).unwrap();
}

/// A device of the caller's own, opened without SHADER_F16: the f16 refusal names the
/// feature, says the adapter offers it (where it does) and how to ask for it.
#[test]
fn f16_on_a_device_without_the_feature_says_how_to_request_it() {
    let adapter =
        pollster::block_on(wgconv::shared_instance().request_adapter(&wgpu::RequestAdapterOptions::default()))
            .expect("an adapter");
    let (device, queue) = pollster::block_on(
        adapter.request_device(&wgpu::DeviceDescriptor { required_limits: adapter.limits(), ..Default::default() }),
    )
    .unwrap();
    let offered = adapter.features().contains(wgpu::Features::SHADER_F16);
    let s = spec();
    let w = vec![0.5; s.weight_len()];
    let opts = || Conv2dOptions::default().precision(Precision::F16Accum32);
    for (gpu, knows_adapter) in [
        (Gpu::from_device_with_adapter(device.clone(), queue.clone(), &adapter), true),
        (Gpu::from_device(device.clone(), queue.clone()), false),
    ] {
        let e = Conv2d::new(&gpu, s, &w, None, opts()).err().expect("f16 without SHADER_F16 nor coop");
        let Error::Unsupported { needs, message } = &e else { panic!("expected Unsupported, got {e:?}") };
        assert_eq!(needs, "SHADER_F16", "{message}");
        assert!(message.contains("required_features"), "{message}");
        if knows_adapter && offered {
            assert!(message.contains("although the adapter offers it"), "{message}");
        }
        if !knows_adapter {
            assert!(message.contains("adapter.features()"), "{message}");
        }
        assert!(!message.contains("has neither"), "{message}");
    }
}

/// `Gpu` is cheap to clone (clones share the device) and `Conv2d::new` takes `&Gpu`.
#[test]
fn gpu_clones_share_the_device() {
    let gpu = gpu();
    let clone = gpu.clone();
    assert!(clone.device == gpu.device);
    let conv = op(&clone);
    assert!(conv.gpu().device == gpu.device);
}

/// Every buffer wgconv makes is a whole number of granules, so that the caller's buffers
/// allocated after it keep their alignment (`BUFFER_GRANULE`'s why); the contents of an
/// initialised one come first, the rest is zero.
#[test]
fn wgconv_buffers_are_whole_granules() {
    let gpu = gpu();
    let usage = RW;
    for bytes in [1, 4, 16, 255, 256, 257, 1000] {
        let b = gpu.create_buffer("granules", bytes, usage).unwrap();
        assert_eq!(b.size(), bytes.next_multiple_of(wgconv::BUFFER_GRANULE), "{bytes} B");
    }
    let b = gpu.buffer_init("granules", &[1, 2, 3, 4, 5, 6, 7, 8], usage).unwrap();
    assert_eq!(b.size(), wgconv::BUFFER_GRANULE);
    let back: Vec<u32> = gpu.read_buffer(&b, 0, 4).unwrap();
    assert_eq!(back, [u32::from_le_bytes([1, 2, 3, 4]), u32::from_le_bytes([5, 6, 7, 8]), 0, 0]);
}
