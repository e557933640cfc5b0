//! The CPU reference every GPU result is compared with: a direct convolution with
//! f64 accumulation and exactly the semantics of [`crate::Conv2dSpec`]. Padding is explicit
//! zeros that are multiplied like any input (IEEE: 0 · ±inf and 0 · NaN are NaN), the
//! semantics every kernel follows (README, "Semantics of special values").

use crate::error::{Error, Result};
use crate::spec::{ConvProblem, Shape4};

/// Direct convolution on the CPU, accumulating in f64. `bias` must be present iff the
/// spec says so. Returns the output `[N, C_out, OH, OW]`.
pub fn conv2d(problem: &ConvProblem, input: &[f32], weight: &[f32], bias: Option<&[f32]>) -> Result<Vec<f32>> {
    conv2d_images(problem, input, weight, bias, 0..problem.input.n)
}

/// An `[N, H, W, C]` (channels-last) tensor of `shape` rewritten as `[N, C, H, W]`.
pub fn to_nchw(nhwc: &[f32], shape: Shape4) -> Result<Vec<f32>> {
    let (c, h, w) = layout_dims(nhwc, shape)?;
    let mut out = crate::alloc::zeroed_vec::<f32>(nhwc.len(), "the rewritten tensor")?;
    for (i, v) in out.iter_mut().enumerate() {
        let (n, ch, y, x) = (i / (c * h * w), (i / (h * w)) % c, (i / w) % h, i % w);
        *v = nhwc[((n * h + y) * w + x) * c + ch];
    }
    Ok(out)
}

/// An `[N, C, H, W]` tensor of `shape` rewritten as `[N, H, W, C]` (channels last).
pub fn to_nhwc(nchw: &[f32], shape: Shape4) -> Result<Vec<f32>> {
    let (c, h, w) = layout_dims(nchw, shape)?;
    let mut out = crate::alloc::zeroed_vec::<f32>(nchw.len(), "the rewritten tensor")?;
    for (i, &v) in nchw.iter().enumerate() {
        let (n, ch, y, x) = (i / (c * h * w), (i / (h * w)) % c, (i / w) % h, i % w);
        out[((n * h + y) * w + x) * c + ch] = v;
    }
    Ok(out)
}

/// `(C, H, W)` of a tensor that must hold exactly `shape`'s elements.
fn layout_dims(tensor: &[f32], shape: Shape4) -> Result<(usize, usize, usize)> {
    if tensor.len() as u64 != shape.len() {
        return Err(Error::ShapeMismatch {
            what: "the tensor",
            unit: "elements",
            expected: shape.len(),
            got: tensor.len() as u64,
        });
    }
    Ok((shape.c as usize, shape.h as usize, shape.w as usize))
}

/// The reference for a range of images only (tests and the benchmark check samples).
pub fn conv2d_images(
    problem: &ConvProblem,
    input: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
    images: std::ops::Range<u32>,
) -> Result<Vec<f32>> {
    // `ConvProblem`'s fields are public: re-derive it rather than trust them.
    let problem = &problem.spec.problem(problem.input)?;
    if images.start > images.end || images.end > problem.input.n {
        return Err(Error::spec(format!("images {images:?} outside the batch of {}", problem.input.n)));
    }
    let s = &problem.spec;
    check_len("the input", problem.input.len(), input.len())?;
    check_len("the weight", s.weight_len() as u64, weight.len())?;
    if let Some(b) = bias {
        check_len("the bias", s.out_channels as u64, b.len())?;
    }
    let Shape4 { c: cin, h, w, .. } = problem.input;
    let Shape4 { c: cout, h: oh, w: ow, .. } = problem.output;
    let (cin_g, cout_g) = (s.in_channels_per_group() as usize, s.out_channels_per_group() as usize);
    let (kh, kw) = (s.kernel[0] as usize, s.kernel[1] as usize);
    let (h, w, oh, ow) = (h as usize, w as usize, oh as usize, ow as usize);
    // With the input's length checked, one image's output count fits (problem: at most
    // 2^32 − 1), but a range of them may not in a 32-bit usize.
    let out_len = (images.len() as u64 * problem.output.per_image()).try_into().map_err(|_| {
        Error::TooLarge(format!("the reference output of {} images of {}", images.len(), problem.output))
    })?;
    let mut out = crate::alloc::vec_with_capacity(out_len, "the reference output")?;
    for n in images {
        let x = &input[n as usize * cin as usize * h * w..][..cin as usize * h * w];
        for oc in 0..cout as usize {
            let g = oc / cout_g;
            let wk = &weight[oc * cin_g * kh * kw..][..cin_g * kh * kw];
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut acc = bias.map_or(0.0, |b| b[oc] as f64);
                    for ic in 0..cin_g {
                        let xc = &x[(g * cin_g + ic) * h * w..][..h * w];
                        for ky in 0..kh {
                            let iy =
                                (oy * s.stride[0] as usize + ky * s.dilation[0] as usize) as i64 - s.padding.top as i64;
                            // The padding mode maps a border coordinate to the input's; zeros
                            // mode: a padded tap multiplies an explicit zero.
                            let iy = s.padding_mode.source(iy, h as i64);
                            for kx in 0..kw {
                                let ix = (ox * s.stride[1] as usize + kx * s.dilation[1] as usize) as i64
                                    - s.padding.left as i64;
                                let x = match (iy, s.padding_mode.source(ix, w as i64)) {
                                    (Some(iy), Some(ix)) => xc[iy as usize * w + ix as usize] as f64,
                                    _ => 0.0,
                                };
                                acc += x * wk[(ic * kh + ky) * kw + kx] as f64;
                            }
                        }
                    }
                    out.push(acc as f32);
                }
            }
        }
    }
    Ok(out)
}

/// ReLU as PyTorch applies it: negative values become 0, NaN stays NaN.
pub fn relu(v: f32) -> f32 {
    if v < 0.0 {
        0.0
    } else {
        v
    }
}

/// ‖got − want‖₂ / ‖want‖₂ in f64; NaN anywhere in `got` gives NaN (never a pass).
pub fn relative_l2(got: &[f32], want: &[f32]) -> f64 {
    if got.len() != want.len() {
        return f64::NAN;
    }
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (&g, &w) in got.iter().zip(want) {
        if g.is_nan() {
            return f64::NAN;
        }
        let d = g as f64 - w as f64;
        num += d * d;
        den += w as f64 * w as f64;
    }
    if den == 0.0 {
        num.sqrt()
    } else {
        (num / den).sqrt()
    }
}

fn check_len(what: &'static str, expected: u64, got: usize) -> Result<()> {
    if expected != got as u64 {
        return Err(Error::ShapeMismatch { what, unit: "elements", expected, got: got as u64 });
    }
    Ok(())
}

/// Checks a CPU twin of a kernel's indexing against [`conv2d`]: deterministic data for
/// `problem` (inputs and weights in [-1, 1), a bias where the spec has one) go through `twin`
/// as (input, weight, bias); its output must match within a relative L2 of 1e-6.
#[cfg(test)]
pub(crate) fn check_twin(
    label: &str,
    problem: &ConvProblem,
    twin: impl Fn(&[f32], &[f32], Option<&[f32]>) -> Vec<f32>,
) {
    check_twin_within(label, problem, 1e-6, twin)
}

/// [`check_twin`] within a relative L2 of `tolerance`, for twins whose arithmetic rounds more
/// than a direct f32 sum (Winograd's transforms); an indexing fault still misses by far more.
#[cfg(test)]
pub(crate) fn check_twin_within(
    label: &str,
    problem: &ConvProblem,
    tolerance: f64,
    twin: impl Fn(&[f32], &[f32], Option<&[f32]>) -> Vec<f32>,
) {
    let spec = &problem.spec;
    let x: Vec<f32> = (0..problem.input.len()).map(|i| ((i * 7919) % 113) as f32 / 56.0 - 1.0).collect();
    let w: Vec<f32> = (0..spec.weight_len()).map(|i| ((i * 104729) % 97) as f32 / 48.0 - 1.0).collect();
    let b: Vec<f32> = (0..spec.out_channels).map(|i| i as f32 / 10.0).collect();
    let bias = spec.bias.then_some(b.as_slice());
    let got = twin(&x, &w, bias);
    let want = conv2d(problem, &x, &w, bias).unwrap();
    let err = relative_l2(&got, &want);
    assert!(err < tolerance, "{label}: rel L2 {err}");
}
