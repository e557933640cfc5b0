//! PyTorch's padding modes (zeros, reflect, replicate, circular) read from the input inside
//! the kernels' gather (direct and tiled families, and selection's default), checked against
//! the CPU reference; families without them refuse with KernelRefused; PyTorch's limits on
//! the padding are typed InvalidSpec errors.

mod common;
use common::*;
use wgconv::{reference, Conv2d, Conv2dOptions, Conv2dSpec, Error, PaddingMode, Shape4};

const MODES: [PaddingMode; 4] =
    [PaddingMode::Zeros, PaddingMode::Reflect, PaddingMode::Replicate, PaddingMode::Circular];

#[test]
fn reference_pads_as_pytorch() {
    // 1-D along the width: input [0, 1, 2], padding 2 on both sides, a 1x1 kernel of 1 with
    // stride 1 reads the padded row itself.
    let spec = |m| Conv2dSpec::new(1, 1, 1).padding([0, 2, 0, 2]).padding_mode(m);
    let row = |m| {
        let p = spec(m).problem(Shape4::new(1, 1, 1, 3)).unwrap();
        reference::conv2d(&p, &[0.0, 1.0, 2.0], &[1.0], None).unwrap()
    };
    assert_eq!(row(PaddingMode::Zeros), [0.0, 0.0, 0.0, 1.0, 2.0, 0.0, 0.0]);
    assert_eq!(row(PaddingMode::Reflect), [2.0, 1.0, 0.0, 1.0, 2.0, 1.0, 0.0]);
    assert_eq!(row(PaddingMode::Replicate), [0.0, 0.0, 0.0, 1.0, 2.0, 2.0, 2.0]);
    assert_eq!(row(PaddingMode::Circular), [1.0, 2.0, 0.0, 1.0, 2.0, 0.0, 1.0]);
}

#[test]
fn direct_tiled_and_default_kernels_match_the_reference() {
    let gpu = gpu();
    let cases = [
        (Conv2dSpec::new(3, 5, 3).padding(1), Shape4::new(2, 3, 7, 6)),
        (
            Conv2dSpec::new(4, 6, 3).padding([2, 1, 1, 2]).stride((2, 1)).dilation((1, 2)).groups(2),
            Shape4::new(1, 4, 9, 8),
        ),
        (Conv2dSpec::new(2, 3, 5).kernel_hw((5, 3)).padding((2, 1)), Shape4::new(1, 2, 5, 4)),
    ];
    for (base, shape) in cases {
        for mode in MODES {
            let spec = base.padding_mode(mode);
            let problem = spec.problem(shape).unwrap();
            let (x, w, b) =
                (randn(shape.len() as usize, 1), randn(spec.weight_len(), 2), randn(spec.out_channels as usize, 3));
            let want = reference::conv2d(&problem, &x, &w, Some(&b)).unwrap();
            for kernel in [None, Some(direct_kernel()), Some(kernel("tiled"))] {
                let conv = Conv2d::new(&gpu, spec, &w, Some(&b), Conv2dOptions::default().kernel(kernel)).unwrap();
                let what = format!("{problem} {}", conv.kernel().kernel);
                assert_close(&what, &conv.forward(&x, shape).unwrap(), &want, TOL_F32);
            }
        }
    }
}

#[test]
fn families_without_modes_refuse_and_selection_passes_them_by() {
    let gpu = gpu();
    // Depthwise: selection's depthwise rule would pick the depthwise family, which has no
    // modes: the direct kernel runs instead.
    let spec = Conv2dSpec::new(4, 4, 3).groups(4).padding(1).padding_mode(PaddingMode::Reflect);
    let w = randn(spec.weight_len(), 4);
    let conv = Conv2d::new(&gpu, spec, &w, None, Conv2dOptions::default()).unwrap();
    assert_ne!(conv.kernel().kernel.family(), "depthwise", "{}", conv.kernel());
    let shape = Shape4::new(1, 4, 6, 6);
    let x = randn(shape.len() as usize, 5);
    let want = reference::conv2d(&spec.problem(shape).unwrap(), &x, &w, None).unwrap();
    assert_close("depthwise reflect", &conv.forward(&x, shape).unwrap(), &want, TOL_F32);
    let e = Conv2d::new(&gpu, spec, &w, None, Conv2dOptions::default().kernel(kernel("depthwise"))).err().unwrap();
    assert!(matches!(e, Error::KernelRefused { .. }), "{e:?}");
    assert_eq!(e.family(), Some("depthwise"));
    assert!(e.to_string().contains("padding_mode reflect"), "{e}");
}

#[test]
fn pytorch_limits_on_the_padding_are_typed() {
    let shape = Shape4::new(1, 1, 3, 5);
    let e = Conv2dSpec::new(1, 1, 3).padding(3).padding_mode(PaddingMode::Reflect).problem(shape).unwrap_err();
    assert!(matches!(e, Error::InvalidSpec(_)), "{e:?}");
    assert!(e.to_string().contains("top padding 3 must be smaller than the input height 3"), "{e}");
    Conv2dSpec::new(1, 1, 3).padding(3).padding_mode(PaddingMode::Circular).problem(shape).unwrap();
    let e = Conv2dSpec::new(1, 1, 3).padding(4).padding_mode(PaddingMode::Circular).problem(shape).unwrap_err();
    assert!(e.to_string().contains("must be at most the input height 3"), "{e}");
    Conv2dSpec::new(1, 1, 3).padding(9).padding_mode(PaddingMode::Replicate).problem(shape).unwrap();
}
