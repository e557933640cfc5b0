//! Padding as PyTorch and ONNX write it: a number, a (height, width) pair, four sides, or a
//! rule resolved against the input size (`Padding::same()` = PyTorch's `padding="same"` =
//! ONNX `SAME_UPPER`; `same_lower()`, `valid()`); and what the border holds, as PyTorch's
//! `padding_mode` (zeros, reflect, replicate, circular: read from the input by the kernel).
//! Run: `cargo run --example padding`.

use wgconv::{reference, Conv2d, Conv2dOptions, Conv2dSpec, Gpu, Padding, PaddingMode, Shape4};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let gpu = Gpu::new()?;
    let shape = Shape4::new(1, 2, 9, 10);
    let input: Vec<f32> = (0..shape.len()).map(|i| ((i * 3 % 7) as f32 - 3.0) / 7.0).collect();
    let paddings: [(&str, Padding); 6] = [
        ("1", 1.into()),
        ("(1, 2)", (1, 2).into()),
        ("[0, 1, 2, 3]", [0, 1, 2, 3].into()),
        ("same", Padding::same()),
        ("same_lower", Padding::same_lower()),
        ("valid", Padding::valid()),
    ];
    for (name, padding) in paddings {
        // A 4x4 kernel: "same" needs 3 rows in all, so upper and lower differ.
        let spec = Conv2dSpec::new(2, 3, 4).dilation((1, 2)).padding(padding);
        let problem = spec.problem(shape)?; // the padding resolved for this input
        let weight: Vec<f32> = (0..spec.weight_len()).map(|i| (i % 5) as f32 * 0.2 - 0.4).collect();
        let conv = Conv2d::new(&gpu, spec, &weight, None, Conv2dOptions::default())?;
        let got = conv.forward(&input, shape)?;
        let err = reference::relative_l2(&got, &reference::conv2d(&problem, &input, &weight, None)?);
        let p = problem.spec.padding;
        println!(
            "padding {name:<12} -> top {} left {} bottom {} right {}: output {} (rel. L2 {err:.1e})",
            p.top, p.left, p.bottom, p.right, problem.output
        );
        if err.is_nan() || err > 1e-5 {
            return Err(format!("{name}: relative L2 error {err:e}").into());
        }
    }
    // nn.Conv2d(2, 3, 3, padding=1, padding_mode=...)
    for mode in [PaddingMode::Zeros, PaddingMode::Reflect, PaddingMode::Replicate, PaddingMode::Circular] {
        let spec = Conv2dSpec::new(2, 3, 3).padding(1).padding_mode(mode);
        let problem = spec.problem(shape)?;
        let weight: Vec<f32> = (0..spec.weight_len()).map(|i| (i % 7) as f32 * 0.1 - 0.3).collect();
        let conv = Conv2d::new(&gpu, spec, &weight, None, Conv2dOptions::default())?;
        let got = conv.forward(&input, shape)?;
        let err = reference::relative_l2(&got, &reference::conv2d(&problem, &input, &weight, None)?);
        println!("padding_mode {:<9} -> {} (rel. L2 {err:.1e})", mode.to_string(), conv.kernel().kernel);
        if err.is_nan() || err > 1e-5 {
            return Err(format!("{mode}: relative L2 error {err:e}").into());
        }
    }
    Ok(())
}
