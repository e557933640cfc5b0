//! The probe of run 61, kept as its record (copy it into examples/ to run it): is an
//! f32-accurate conv from three f16 products on the
//! matrix units feasible? Measures the accumulation error of the cooperative kernel on
//! f16-exact data and the error of a hi/lo split summed from three f16 convs.
use half::f16;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Normal};
use std::sync::Arc;
use wgconv::{reference, Conv2d, Conv2dOptions, Conv2dSpec, Gpu, KernelKind, Padding, Precision, Shape4};

fn r16(v: f32) -> f32 {
    f16::from_f32(v).to_f32()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: u32 = std::env::args().nth(1).map(|s| s.parse().unwrap()).unwrap_or(4);
    let spec = Conv2dSpec::new(3, 96, 11).stride(4, 4).padding(Padding::uniform(2));
    let shape = Shape4::new(n, 3, 224, 224);
    let problem = spec.problem(shape)?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let bound = 1.0 / (363f32).sqrt();
    let w: Vec<f32> = (0..spec.weight_len()).map(|_| rng.random_range(-bound..bound)).collect();
    let normal = Normal::new(0.0f32, 1.0).unwrap();
    let x: Vec<f32> = (0..shape.len() as usize).map(|_| normal.sample(&mut rng)).collect();
    let gpu = Arc::new(Gpu::new()?);
    println!("adapter {} coop {}", gpu.info.name, gpu.has_coop_f16());
    let want = reference::conv2d(&problem, &x, &w, None)?;
    let f32opts =
        Conv2dOptions { kernel: Some(KernelKind::Tiled("m64n96k16-t4x12-w4-s1".parse()?)), ..Default::default() };
    let y32 = Conv2d::new(&gpu, spec, &w, None, f32opts)?.forward(&x, shape)?;
    println!("fp32 FMA kernel            rel L2 {:.3e}", reference::relative_l2(&y32, &want));
    let f16opts = Conv2dOptions { precision: Precision::F16Accum32, ..Default::default() };
    let conv16 = |w: &[f32], x: &[f32]| -> Result<Vec<f32>, wgconv::Error> {
        Conv2d::new(&gpu, spec, w, None, f16opts.clone())?.forward(x, shape)
    };
    // 1. accumulation error alone: f16-exact operands
    let x1: Vec<f32> = x.iter().map(|&v| r16(v)).collect();
    let w1: Vec<f32> = w.iter().map(|&v| r16(v)).collect();
    let want1 = reference::conv2d(&problem, &x1, &w1, None)?;
    let y1 = conv16(&w1, &x1)?;
    println!("f16 exact data, accum only  rel L2 {:.3e}", reference::relative_l2(&y1, &want1));
    println!("f16 plain                   rel L2 {:.3e}", reference::relative_l2(&y1, &want));
    // 2. split: a = a1 + a2s/S, b = b1 + b2s/S; sum a1*(b1*S) + a1*b2s + a2s*b1, over S
    let s = 2048.0f32;
    let x2: Vec<f32> = x.iter().zip(&x1).map(|(&v, &h)| r16((v - h) * s)).collect();
    let w2: Vec<f32> = w.iter().zip(&w1).map(|(&v, &h)| r16((v - h) * s)).collect();
    let w1s: Vec<f32> = w1.iter().map(|&v| v * s).collect();
    let p1 = conv16(&w1s, &x1)?;
    let p2 = conv16(&w2, &x1)?;
    let p3 = conv16(&w1, &x2)?;
    let ysplit: Vec<f32> =
        (0..p1.len()).map(|i| ((p1[i] as f64 + p2[i] as f64 + p3[i] as f64) / s as f64) as f32).collect();
    println!("split 3xf16 (3 convs)       rel L2 {:.3e}", reference::relative_l2(&ysplit, &want));
    // host-exact split (f64 sums of the split operands): the split's own error
    let r1 = reference::conv2d(&problem, &x1, &w1s, None)?;
    let r2 = reference::conv2d(&problem, &x1, &w2, None)?;
    let r3 = reference::conv2d(&problem, &x2, &w1, None)?;
    let yhost: Vec<f32> =
        (0..r1.len()).map(|i| ((r1[i] as f64 + r2[i] as f64 + r3[i] as f64) / s as f64) as f32).collect();
    println!("split 3xf16 exact sums      rel L2 {:.3e}", reference::relative_l2(&yhost, &want));
    // f32 result rounding alone
    Ok(())
}
