mod common;
use common::*;
use wgconv::*;

#[test]
fn smoke() {
    let gpu = gpu();
    eprintln!("{:?}", gpu.summary());
    let spec = Conv2dSpec::new(3, 17, 3).padding(Padding::new(1, 0, 2, 1)).stride(2, 1).with_bias(true);
    let shape = Shape4::new(2, 3, 13, 11);
    let p = spec.problem(shape).unwrap();
    let x = randn(shape.len() as usize, 1);
    let (w, b) = params(&spec, 2);
    let want = reference_out(&p, &x, &w, b.as_deref());
    for kind in [KernelKind::Direct, KernelKind::Tiled(TileConfig::seed())] {
        let conv =
            Conv2d::new(&gpu, spec, &w, b.as_deref(), Conv2dOptions { kernel: Some(kind), ..Default::default() })
                .unwrap();
        let got = run_poisoned(&gpu, &conv, &x, shape);
        assert_close(&kind.to_string(), &got, &want, TOL_F32);
        let got = conv.forward(&x, shape).unwrap();
        assert_close(&kind.to_string(), &got, &want, TOL_F32);
    }
}
