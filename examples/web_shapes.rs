//! The example web page's convolutions (examples/web/app.js), natively: the same shapes,
//! timed the same way, to compare a browser's WebGPU adapter (SwiftShader in the browser
//! tests) with a native one (lavapipe in CI). Run:
//! `WGCONV_ADAPTER=llvmpipe cargo run --release --example web_shapes [-- --default-limits]`.
//!
//! The page's numbers are `performance.now()` around `await conv.forward(…)` (upload,
//! kernel, read-back; the first run also compiles the pipeline) and, for the tile-size
//! benchmark, the mean of 3 runs of the kernel alone on data already on the GPU, each
//! ended by a 4-byte read-back; these are the same measurements with `Instant`.

use std::sync::Arc;
use std::time::Instant;
use wgconv::{Activation, Conv2d, Conv2dOptions, Conv2dSpec, Gpu, GpuOptions, Padding, Shape4};

fn random(n: usize, seed: &mut u64, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|_| {
            // xorshift: any deterministic data will do for timing.
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            ((*seed >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let default_limits = std::env::args().any(|a| a == "--default-limits");
    let mut opts = GpuOptions::default();
    if default_limits {
        // WebGPU's defaults (16 KiB workgroup memory, 256 invocations, 128 MiB bindings).
        opts.limits = Some(wgpu::Limits::default());
    }
    let gpu = Arc::new(Gpu::with_options(opts)?);
    println!(
        "adapter: {} ({:?}), limits: {}",
        gpu.info.name,
        gpu.info.backend,
        if default_limits { "WebGPU defaults" } else { "the adapter's" }
    );
    let mut seed = 21u64;
    let (h, w) = (120, 160);
    let picture = random(3 * h * w, &mut seed, 1.0);
    let relu = |mut o: Conv2dOptions| {
        o.activation = Activation::Relu;
        o
    };
    // (title, spec, options, input channels)
    let layers: Vec<(&str, Conv2dSpec, Conv2dOptions, u32)> = vec![
        ("Edge detection (Sobel)", Conv2dSpec::new(3, 2, 3).padding(Padding::uniform(1)), Conv2dOptions::default(), 3),
        (
            "Blur (5x5 Gaussian)",
            Conv2dSpec::new(3, 3, 5).padding(Padding::uniform(2)).groups(3),
            Conv2dOptions::default(),
            3,
        ),
        (
            "Random 3x3, 3->64, bias + ReLU",
            Conv2dSpec::new(3, 64, 3).padding(Padding::uniform(1)).with_bias(true),
            relu(Conv2dOptions::default()),
            3,
        ),
        (
            "Random 3x3, 64->64, bias + ReLU",
            Conv2dSpec::new(64, 64, 3).padding(Padding::uniform(1)).with_bias(true),
            relu(Conv2dOptions::default()),
            64,
        ),
        (
            "Depthwise 3x3, 64 channels",
            Conv2dSpec::new(64, 64, 3).padding(Padding::uniform(1)).groups(64),
            Conv2dOptions::default(),
            64,
        ),
    ];
    println!("| convolution | input | kernel | first run, ms | second run, ms |\n|---|---|---|---:|---:|");
    for (title, spec, options, c) in layers {
        let weight = random(spec.weight_len(), &mut seed, 0.1);
        let bias = spec.bias.then(|| random(spec.out_channels as usize, &mut seed, 0.1));
        let conv = Conv2d::new(&gpu, spec, &weight, bias.as_deref(), options)?;
        let shape = Shape4::new(1, c, h as u32, w as u32);
        let x = if c == 3 { picture.clone() } else { random(shape.len() as usize, &mut seed, 1.0) };
        let t = Instant::now();
        conv.forward(&x, shape)?;
        let first = t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        conv.forward(&x, shape)?;
        let second = t.elapsed().as_secs_f64() * 1e3;
        println!("| {title} | 1x{c}x{h}x{w} | `{}` | {first:.1} | {second:.1} |", conv.kernel().kernel);
    }

    // The tile-size benchmark: the tiled sweep's configs that fit, on 1x64x32x32.
    let spec = Conv2dSpec::new(64, 64, 3).padding(Padding::uniform(1));
    let shape = Shape4::new(1, 64, 32, 32);
    let weight = random(spec.weight_len(), &mut seed, 0.05);
    // What a default op runs on this shape (it selects with the shape at its first forward).
    let told = Conv2dOptions::default().tuning_key_input(shape);
    let selected = Conv2d::new(&gpu, spec, &weight, None, told)?.kernel().kernel.clone();
    println!(
        "\ntile-size benchmark, {spec:?} on {shape:?} (selection: {selected})\n| config | ms per run |\n|---|---:|"
    );
    let buffer = |bytes: u64| {
        gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: bytes,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        })
    };
    for kernel in wgconv::advanced::sweep("tiled")?.into_iter().filter(|k| k.check(&spec, gpu.caps()).is_ok()) {
        let mut options = Conv2dOptions::default();
        options.kernel = Some(kernel.clone());
        let conv = Conv2d::new(&gpu, spec, &weight, None, options)?;
        let problem = spec.problem(shape)?;
        let (input, output) = (buffer(problem.input.len() * 4), buffer(problem.output.len() * 4));
        let plan = conv.plan(shape, &input, &output)?;
        let run = |reps: u32| -> wgconv::Result<()> {
            let mut enc = gpu.device.create_command_encoder(&Default::default());
            for _ in 0..reps {
                plan.encode(&mut enc, None);
            }
            gpu.queue.submit([enc.finish()]);
            gpu.read_buffer::<f32>(&output, 0, 1).map(|_| ())
        };
        run(1)?;
        let t = Instant::now();
        run(3)?;
        println!("| `{}` | {:.2} |", kernel, t.elapsed().as_secs_f64() * 1e3 / 3.0);
    }
    Ok(())
}
