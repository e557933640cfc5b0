//! wgconv as a library: a convolution on host slices, then the same convolution encoded
//! into a command encoder of a device the caller created (bring your own device).
//! Both results are checked against the CPU reference. Run: `cargo run --example basic`.

use wgconv::{reference, Activation, Conv2d, Conv2dOptions, Conv2dSpec, Gpu, Padding, Shape4};
use wgpu::util::DeviceExt;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // PyTorch: nn.Conv2d(3, 16, kernel_size=3, stride=2, padding=1, bias=True); the bias is
    // there because one is given to Conv2d::new below.
    let spec = Conv2dSpec::new(3, 16, 3).stride(2).padding(1);
    let shape = Shape4::new(2, 3, 32, 32); // N, C, H, W
    let weight: Vec<f32> = (0..spec.weight_len()).map(|i| ((i * 7 % 13) as f32 - 6.0) / 13.0).collect();
    let bias: Vec<f32> = (0..16).map(|i| i as f32 / 16.0).collect();
    let input: Vec<f32> = (0..shape.len() as usize).map(|i| ((i * 5 % 11) as f32 - 5.0) / 11.0).collect();
    let problem = spec.problem(shape)?; // output shape, validated: [2, 16, 16, 16]
    let want = reference::conv2d(&problem, &input, &weight, Some(&bias))?;
    let _ = Padding::same(); // other paddings: see examples/padding.rs

    // 1. Host slices in, host vector out: wgconv opens the best adapter it finds.
    let gpu = Gpu::new()?;
    let conv = Conv2d::new(&gpu, spec, &weight, Some(&bias), Conv2dOptions::default())?;
    let y = conv.forward(&input, shape)?;
    let err = reference::relative_l2(&y, &want);
    // The kernel selection chose, where the choice came from, and why.
    println!(
        "forward on {}: output {}, kernel {}, rel. L2 error {err:.1e}",
        gpu.info.name,
        problem.output,
        conv.kernel()
    );
    if err.is_nan() || err > 1e-5 {
        return Err(format!("forward: relative L2 error {err:e} > 1e-5").into());
    }

    // 2. Bring your own device: wgconv records into your encoder, on your buffers. Opened on
    // wgconv's shared instance, so that a buffer of another device is refused, not misread.
    let instance = wgconv::shared_instance();
    let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions::default()))?;
    let (device, queue) = pollster::block_on(
        adapter.request_device(&wgpu::DeviceDescriptor { required_limits: adapter.limits(), ..Default::default() }),
    )?;
    let my_gpu = Gpu::from_device(device.clone(), queue.clone());
    let relu = Conv2dOptions::default().activation(Activation::Relu);
    let conv = Conv2d::new(&my_gpu, spec, &weight, Some(&bias), relu)?;
    let x = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: Some("x"),
        contents: bytemuck::cast_slice(&input),
        usage: wgpu::BufferUsages::STORAGE,
    });
    let out = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("y"),
        size: problem.output.len() * 4,
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    let mut encoder = device.create_command_encoder(&Default::default());
    // ... your own passes before ...
    conv.encode(&mut encoder, shape, &x, &out)?;
    // ... and after; then submit when you like.
    queue.submit([encoder.finish()]);
    let y = my_gpu.read_buffer::<f32>(&out, 0, problem.output.len() as usize)?;
    let want_relu: Vec<f32> = want.iter().map(|&v| reference::relu(v)).collect();
    let err = reference::relative_l2(&y, &want_relu);
    println!("encode on your device ({}), fused ReLU: rel. L2 error {err:.1e}", adapter.get_info().name);
    if err.is_nan() || err > 1e-5 {
        return Err(format!("encode: relative L2 error {err:e} > 1e-5").into());
    }
    Ok(())
}
