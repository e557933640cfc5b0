//! f16 operands with f32 accumulation (`Precision::F16Accum32`): tensors stay f32 in memory,
//! the kernel rounds its operands. Where the device cannot (no SHADER_F16, no cooperative
//! matrices), the refusal names the feature and how to ask for it.
//! Run: `cargo run --example f16`.

use wgconv::{reference, Conv2d, Conv2dOptions, Conv2dSpec, Error, Gpu, GpuOptions, Precision, Shape4};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Cooperative matrices are opt-in (wgpu marks them experimental); SHADER_F16 is requested
    // by Gpu::new wherever the adapter offers it.
    let gpu = Gpu::with_options(GpuOptions::default().cooperative_matrix(true))?;
    let spec = Conv2dSpec::new(16, 32, 3).padding(1);
    let shape = Shape4::new(2, 16, 20, 20);
    let weight: Vec<f32> = (0..spec.weight_len()).map(|i| ((i * 13 % 17) as f32 - 8.0) / 17.0).collect();
    let bias: Vec<f32> = (0..32).map(|i| i as f32 * 0.01).collect();
    let input: Vec<f32> = (0..shape.len()).map(|i| ((i * 7 % 11) as f32 - 5.0) / 11.0).collect();

    let options = Conv2dOptions::default().precision(Precision::F16Accum32);
    let conv = match Conv2d::new(&gpu, spec, &weight, Some(&bias), options) {
        Ok(conv) => conv,
        Err(Error::Unsupported { needs, message }) => {
            println!("f16 is not available on {} (needs {needs}): {message}", gpu.info.name);
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    let got = conv.forward(&input, shape)?;
    let want = reference::conv2d(&spec.problem(shape)?, &input, &weight, Some(&bias))?;
    let err = reference::relative_l2(&got, &want);
    println!("{}: rel. L2 error {err:.1e} (the f16 contract: below 1e-3)", conv.kernel());
    if err.is_nan() || err > 1e-3 {
        return Err(format!("relative L2 error {err:e} > 1e-3").into());
    }
    Ok(())
}
