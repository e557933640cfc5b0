//! Bring your own device: your device and queue, your buffers, your passes before and after
//! wgconv's, one submission. Misuses (the same buffer in and out, a buffer without STORAGE,
//! one too small, one of another device) come back as `Error::Buffer` before anything is
//! recorded. Run: `cargo run --example byod`.

use wgconv::{reference, BufferIssue, Conv2d, Conv2dOptions, Conv2dSpec, Error, Gpu, Shape4};
use wgpu::util::DeviceExt;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Your device, opened on wgconv's shared instance (buffers of other devices are then
    // recognised), with the features your own passes need and wgconv's f16 if offered.
    let adapter = pollster::block_on(wgconv::shared_instance().request_adapter(&Default::default()))?;
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        required_features: adapter.features() & wgpu::Features::SHADER_F16,
        required_limits: adapter.limits(),
        ..Default::default()
    }))?;
    let gpu = Gpu::from_device_with_adapter(device.clone(), queue.clone(), &adapter);

    // A depthwise 3x3 (nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)).
    let spec = Conv2dSpec::new(8, 8, 3).groups(8).padding(1);
    let shape = Shape4::new(1, 8, 12, 12);
    let weight: Vec<f32> = (0..spec.weight_len()).map(|i| (i % 5) as f32 * 0.1).collect();
    let conv = Conv2d::new(&gpu, spec, &weight, None, Conv2dOptions::default())?;

    let input: Vec<f32> = (0..shape.len()).map(|i| (i % 9) as f32 - 4.0).collect();
    let x = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: Some("x"),
        contents: bytemuck::cast_slice(&input),
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
    });
    let out_bytes = spec.problem(shape)?.output.len() * 4;
    let y = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("y"),
        size: out_bytes,
        // COPY_DST for your clear below; wgconv itself needs STORAGE only.
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let copy = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("copy of y"),
        size: out_bytes,
        usage: wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });

    // A mistake is refused before anything is recorded: the encoder stays usable.
    let mut encoder = device.create_command_encoder(&Default::default());
    match conv.encode(&mut encoder, shape, &x, &x) {
        Err(Error::Buffer { issue: BufferIssue::SameAsInput, .. }) => println!("refused as expected: in place"),
        other => return Err(format!("expected a refusal, got {other:?}").into()),
    }
    // Your pass, wgconv's, your pass; one submission.
    encoder.clear_buffer(&y, 0, None);
    conv.encode(&mut encoder, shape, &x, &y)?;
    encoder.copy_buffer_to_buffer(&y, 0, &copy, 0, out_bytes);
    queue.submit([encoder.finish()]);

    let got = gpu.read_buffer::<f32>(&copy, 0, (out_bytes / 4) as usize)?;
    let want = reference::conv2d(&spec.problem(shape)?, &input, &weight, None)?;
    let err = reference::relative_l2(&got, &want);
    println!("{} on {}: rel. L2 error {err:.1e}", conv.kernel(), adapter.get_info().name);
    if err.is_nan() || err > 1e-5 {
        return Err(format!("relative L2 error {err:e} > 1e-5").into());
    }
    Ok(())
}
