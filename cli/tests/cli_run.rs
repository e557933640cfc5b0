//! `wgconv run` end to end: .npy files in a temp dir, the real binary, Y compared with the
//! CPU reference; and every kind of invalid input refused with one line, no panic, and
//! no output file written (an existing one untouched).

use npyz::WriterBuilder;
use rand::{Rng, SeedableRng};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use wgconv::{reference, Conv2dSpec, Padding, Shape4};

const TOL_F32: f64 = 1e-5;
/// The f16 bound (the benchmark's `F16_TOLERANCE`).
const TOL_F16: f64 = 1e-3;

fn wgconv() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_wgconv"));
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        cmd.env("XDG_RUNTIME_DIR", std::env::temp_dir());
    }
    cmd
}

fn run(args: &[&str]) -> Output {
    wgconv().args(args).output().expect("the wgconv binary runs")
}

fn rand_vec(len: usize, seed: u64) -> Vec<f32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..len).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

fn numel(shape: &[u64]) -> usize {
    shape.iter().product::<u64>() as usize
}

/// A `.npy` file (format version 1, `<f4`, C order) written by npyz.
fn npy_bytes(shape: &[u64], data: &[f32]) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut w = npyz::WriteOptions::new().default_dtype().shape(shape).writer(&mut buf).begin_nd().unwrap();
    w.extend(data.iter().copied()).unwrap();
    w.finish().unwrap();
    buf
}

fn write_npy(path: &Path, shape: &[u64], data: &[f32]) {
    std::fs::write(path, npy_bytes(shape, data)).unwrap();
}

/// The same array as format version 2 (u32 header length), as NumPy writes for huge headers
/// or `np.lib.format.write_array(f, a, version=(2, 0))`.
fn npy_v2_bytes(shape: &[u64], data: &[f32]) -> Vec<u8> {
    let v1 = npy_bytes(shape, data);
    assert_eq!(&v1[..8], b"\x93NUMPY\x01\x00");
    let hlen = u16::from_le_bytes([v1[8], v1[9]]) as usize;
    let dict = std::str::from_utf8(&v1[10..10 + hlen]).unwrap().trim_end();
    let mut text = dict.to_string();
    while !(12 + text.len() + 1).is_multiple_of(16) {
        text.push(' ');
    }
    text.push('\n');
    let mut out = b"\x93NUMPY\x02\x00".to_vec();
    out.extend((text.len() as u32).to_le_bytes());
    out.extend(text.as_bytes());
    out.extend(&v1[10 + hlen..]);
    out
}

/// Reads Y back, checking it is `<f4`, C order.
fn read_npy(path: &Path) -> (Vec<u64>, Vec<f32>) {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let npy = npyz::NpyFile::new(std::io::BufReader::new(file)).unwrap();
    assert_eq!(npy.dtype().descr(), "'<f4'");
    assert_eq!(npy.order(), npyz::Order::C);
    let shape = npy.shape().to_vec();
    (shape, npy.into_vec().unwrap())
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A convolution case: the spec, the input shape, the CLI flags that express it.
struct Case {
    spec: Conv2dSpec,
    input: Shape4,
    relu: bool,
    flags: Vec<String>,
}

/// Runs a case through the binary, returns (Y's shape, Y, wanted output, stderr).
fn run_case(dir: &Path, case: &Case, seed: u64, version2: bool) -> (Vec<u64>, Vec<f32>, Vec<f32>, String) {
    let spec = &case.spec;
    let x_shape: Vec<u64> = case.input.dims().iter().map(|&d| d as u64).collect();
    let w_shape: Vec<u64> = spec.weight_shape().dims().iter().map(|&d| d as u64).collect();
    let x = rand_vec(numel(&x_shape), seed);
    let w = rand_vec(numel(&w_shape), seed + 1);
    let b = spec.bias.then(|| rand_vec(spec.out_channels as usize, seed + 2));
    let (xp, wp, bp, yp) = (dir.join("x.npy"), dir.join("w.npy"), dir.join("b.npy"), dir.join("y.npy"));
    if version2 {
        std::fs::write(&xp, npy_v2_bytes(&x_shape, &x)).unwrap();
    } else {
        write_npy(&xp, &x_shape, &x);
    }
    write_npy(&wp, &w_shape, &w);
    let mut args: Vec<String> = vec!["run".into(), "--input".into(), s(&xp).into(), "--weight".into(), s(&wp).into()];
    if let Some(b) = &b {
        write_npy(&bp, &[b.len() as u64], b);
        args.extend(["--bias".into(), s(&bp).into()]);
    }
    args.extend(case.flags.iter().cloned());
    if case.relu {
        args.push("--relu".into());
    }
    args.extend(["--output".into(), s(&yp).into()]);
    let out = wgconv().args(&args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "wgconv {args:?} failed:\n{stderr}");
    let problem = spec.problem(case.input).unwrap();
    let mut want = reference::conv2d(&problem, &x, &w, b.as_deref()).unwrap();
    if case.relu {
        want.iter_mut().for_each(|v| *v = reference::relu(*v));
    }
    let (shape, got) = read_npy(&yp);
    let o = problem.output;
    assert_eq!(shape, vec![o.n as u64, o.c as u64, o.h as u64, o.w as u64], "Y's shape");
    (shape, got, want, stderr)
}

fn assert_close(label: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{label}: length");
    let err = reference::relative_l2(got, want);
    assert!(err <= TOL_F32, "{label}: relative L2 {err:.3e} > {TOL_F32:.0e}");
}

fn flags(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn bias_relu_asymmetric_padding_and_stride() {
    let dir = tempfile::tempdir().unwrap();
    let case = Case {
        spec: Conv2dSpec::new(3, 5, 3).stride((2, 1)).padding(Padding::new(1, 0, 2, 1)).with_bias(true),
        input: Shape4::new(2, 3, 9, 7),
        relu: true,
        flags: flags(&["--stride", "2,1", "--padding", "1,0,2,1"]),
    };
    let (_, got, want, _) = run_case(dir.path(), &case, 10, false);
    assert_close("bias+relu", &got, &want);
    assert!(got.iter().all(|&v| v >= 0.0), "ReLU output has negatives");
}

#[test]
fn groups_dilation_rectangular_kernel_verbose() {
    let dir = tempfile::tempdir().unwrap();
    let case = Case {
        spec: Conv2dSpec::new(4, 6, 3).kernel_hw((3, 2)).dilation((2, 1)).groups(2).padding(Padding::symmetric(2, 1)),
        input: Shape4::new(1, 4, 8, 10),
        relu: false,
        flags: flags(&["--dilation", "2,1", "--groups", "2", "--padding", "2,1", "--verbose"]),
    };
    let (_, got, want, stderr) = run_case(dir.path(), &case, 20, false);
    assert_close("groups+dilation", &got, &want);
    let lower = stderr.to_lowercase();
    assert!(lower.contains("adapter:") && lower.contains("llvmpipe"), "verbose names the adapter:\n{stderr}");
    // Two input channels per group: the depthwise rule picks the depthwise family.
    assert!(stderr.contains("kernel: depthwise:"), "verbose names the config:\n{stderr}");
    assert!(
        stderr.contains("library default") || stderr.contains("tuning cache") || stderr.contains("fallback"),
        "verbose says where the config came from:\n{stderr}"
    );
    assert!(stderr.contains("GPU time:"), "verbose reports the GPU time:\n{stderr}");
}

#[test]
fn direct_kernel_forced_by_config() {
    let dir = tempfile::tempdir().unwrap();
    let case = Case {
        spec: Conv2dSpec::new(2, 3, 5).stride((3, 3)).padding(Padding::uniform(2)).with_bias(true),
        input: Shape4::new(3, 2, 11, 13),
        relu: false,
        flags: flags(&["--stride", "3", "--padding", "2", "--config", "direct", "-v"]),
    };
    let (_, got, want, stderr) = run_case(dir.path(), &case, 30, false);
    assert_close("direct", &got, &want);
    assert!(stderr.contains("kernel: direct [explicit"), "{stderr}");
}

#[test]
fn tile_config_forced_by_config() {
    let dir = tempfile::tempdir().unwrap();
    let case = Case {
        spec: Conv2dSpec::new(5, 9, 1),
        input: Shape4::new(2, 5, 6, 5),
        relu: true,
        flags: flags(&["--config", "m32n32k32-t4x4-w2-s2", "--verbose"]),
    };
    let (_, got, want, stderr) = run_case(dir.path(), &case, 40, false);
    assert_close("1x1 with m32n32k32", &got, &want);
    assert!(stderr.contains("kernel: tiled:m32n32k32-t4x4-w2-s2 [explicit"), "{stderr}");
}

#[test]
fn npy_format_version_2_input_and_existing_output_replaced() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("y.npy"), b"old content").unwrap();
    let case = Case {
        spec: Conv2dSpec::new(3, 4, 3).padding(Padding::uniform(1)).with_bias(true),
        input: Shape4::new(1, 3, 6, 6),
        relu: false,
        flags: flags(&["--padding", "1"]),
    };
    let (_, got, want, _) = run_case(dir.path(), &case, 50, true);
    assert_close("v2 input", &got, &want);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
}

// ---------------------------------------------------------------------------------------
// Refusals. Each runs before any GPU is opened: one line on stderr, exit status 1.

/// Good files to break one at a time: x [1, 3, 8, 8], w [4, 3, 3, 3], b [4].
struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Self {
        let f = Fixture { dir: tempfile::tempdir().unwrap() };
        write_npy(&f.path("x.npy"), &[1, 3, 8, 8], &rand_vec(192, 1));
        write_npy(&f.path("w.npy"), &[4, 3, 3, 3], &rand_vec(108, 2));
        write_npy(&f.path("b.npy"), &[4], &rand_vec(4, 3));
        f
    }
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }
    /// `run` on the fixture's files, with `extra` flags; names in `files` replace
    /// (flag, file) pairs: e.g. `[("--input", "bad.npy")]`.
    fn args(&self, files: &[(&str, &str)], extra: &[&str]) -> Vec<String> {
        let mut chosen = vec![("--input", "x.npy"), ("--weight", "w.npy"), ("--bias", "b.npy")];
        for (flag, name) in files {
            match chosen.iter_mut().find(|(f, _)| f == flag) {
                Some(slot) => slot.1 = name,
                None => chosen.push((flag, name)),
            }
        }
        let mut args = vec!["run".to_string()];
        for (flag, name) in chosen {
            if !name.is_empty() {
                args.push(flag.to_string());
                args.push(s(&self.path(name)).to_string());
            }
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        args.push("--output".into());
        args.push(s(&self.path("y.npy")).into());
        args
    }

    /// Runs and checks the refusal: exit 1, exactly one stderr line containing every
    /// `needle`, no panic, and Y neither created nor (if `existing_y`) changed.
    fn refused(&self, files: &[(&str, &str)], extra: &[&str], needles: &[&str], existing_y: bool) -> String {
        let y = self.path("y.npy");
        let sentinel = b"an existing Y that must survive";
        if existing_y {
            std::fs::write(&y, sentinel).unwrap();
        }
        let args = self.args(files, extra);
        let out = wgconv().args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "wgconv {args:?}: expected exit 1, got {:?}\n{stderr}", out.status);
        assert!(!stderr.contains("panicked"), "panic trace:\n{stderr}");
        assert!(!stderr.contains("RUST_BACKTRACE"), "panic trace:\n{stderr}");
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "expected one line on stderr, got:\n{stderr}");
        assert!(lines[0].starts_with("wgconv: error: "), "{stderr}");
        for n in needles {
            assert!(stderr.contains(n), "stderr lacks {n:?}:\n{stderr}");
        }
        if existing_y {
            assert_eq!(std::fs::read(&y).unwrap(), sentinel, "an existing Y was changed");
        } else {
            assert!(!y.exists(), "Y was written on failure");
        }
        let leftovers: Vec<_> = std::fs::read_dir(self.dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".y.npy"))
            .collect();
        assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
        assert!(out.stdout.is_empty(), "stdout: {}", String::from_utf8_lossy(&out.stdout));
        stderr
    }
}

#[test]
fn fixture_itself_runs() {
    // The refusals below break one thing each of a run that succeeds.
    let f = Fixture::new();
    let out = wgconv().args(f.args(&[], &["--padding", "1"])).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (shape, _) = read_npy(&f.path("y.npy"));
    assert_eq!(shape, vec![1, 4, 8, 8]);
}

#[test]
fn refuses_float64_input() {
    let f = Fixture::new();
    let mut buf = Vec::new();
    let mut w =
        npyz::WriteOptions::<f64>::new().default_dtype().shape(&[1, 3, 8, 8]).writer(&mut buf).begin_nd().unwrap();
    w.extend((0..192).map(|i| i as f64)).unwrap();
    w.finish().unwrap();
    f.write("x64.npy", &buf);
    f.refused(&[("--input", "x64.npy")], &[], &["--input", "x64.npy", "'<f8'", "float64", "'<f4'"], false);
}

#[test]
fn refuses_big_endian_float32() {
    let f = Fixture::new();
    let mut buf = Vec::new();
    let dtype = npyz::DType::new_scalar(">f4".parse().unwrap());
    let mut w = npyz::WriteOptions::<f32>::new().dtype(dtype).shape(&[4]).writer(&mut buf).begin_nd().unwrap();
    w.extend([1.0f32, 2.0, 3.0, 4.0]).unwrap();
    w.finish().unwrap();
    f.write("b_be.npy", &buf);
    f.refused(&[("--bias", "b_be.npy")], &[], &["--bias", "b_be.npy", "'>f4'", "big-endian"], true);
}

#[test]
fn refuses_int_weight() {
    let f = Fixture::new();
    let mut buf = Vec::new();
    let mut w =
        npyz::WriteOptions::<i32>::new().default_dtype().shape(&[4, 3, 3, 3]).writer(&mut buf).begin_nd().unwrap();
    w.extend(0..108).unwrap();
    w.finish().unwrap();
    f.write("wi.npy", &buf);
    f.refused(&[("--weight", "wi.npy")], &[], &["--weight", "wi.npy", "'<i4'", "int32"], false);
}

#[test]
fn refuses_fortran_order() {
    let f = Fixture::new();
    let mut buf = Vec::new();
    let mut w = npyz::WriteOptions::<f32>::new()
        .default_dtype()
        .order(npyz::Order::Fortran)
        .shape(&[4, 3, 3, 3])
        .writer(&mut buf)
        .begin_nd()
        .unwrap();
    w.extend(rand_vec(108, 9)).unwrap();
    w.finish().unwrap();
    f.write("wf.npy", &buf);
    f.refused(&[("--weight", "wf.npy")], &[], &["--weight", "wf.npy", "Fortran order"], true);
}

#[test]
fn refuses_truncated_data() {
    let f = Fixture::new();
    let bytes = npy_bytes(&[1, 3, 8, 8], &rand_vec(192, 1));
    f.write("xt.npy", &bytes[..bytes.len() - 10]);
    f.refused(&[("--input", "xt.npy")], &[], &["--input", "xt.npy", "truncated", "[1, 3, 8, 8]", "758 bytes"], false);
}

#[test]
fn refuses_truncated_header() {
    let f = Fixture::new();
    let bytes = npy_bytes(&[1, 3, 8, 8], &rand_vec(192, 1));
    f.write("xh.npy", &bytes[..30]);
    f.refused(
        &[("--input", "xh.npy")],
        &[],
        &["--input", "xh.npy", "not a valid .npy file", "truncated header"],
        false,
    );
}

#[test]
fn refuses_trailing_bytes() {
    let f = Fixture::new();
    let mut bytes = npy_bytes(&[4], &[1.0, 2.0, 3.0, 4.0]);
    bytes.extend([0u8; 8]);
    f.write("bx.npy", &bytes);
    f.refused(&[("--bias", "bx.npy")], &[], &["--bias", "bx.npy", "8 unexpected bytes"], false);
}

#[test]
fn refuses_garbage_file() {
    let f = Fixture::new();
    f.write("garbage.npy", b"this is not an npy file at all, just some text\n");
    f.refused(&[("--input", "garbage.npy")], &[], &["--input", "garbage.npy", "not a valid .npy file"], true);
}

#[test]
fn refuses_garbage_header() {
    let f = Fixture::new();
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    let text = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3, 8, 8 }   \n";
    bytes.extend((text.len() as u16).to_le_bytes());
    bytes.extend(text.as_bytes());
    bytes.extend(vec![0u8; 768]);
    f.write("xg.npy", &bytes);
    f.refused(&[("--input", "xg.npy")], &[], &["--input", "xg.npy", "not a valid .npy file"], false);
}

#[test]
fn refuses_absurd_header_shape() {
    let f = Fixture::new();
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    let mut text =
        "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296, 1), }".to_string();
    while !(10 + text.len() + 1).is_multiple_of(16) {
        text.push(' ');
    }
    text.push('\n');
    bytes.extend((text.len() as u16).to_le_bytes());
    bytes.extend(text.as_bytes());
    f.write("xa.npy", &bytes);
    f.refused(&[("--input", "xa.npy")], &[], &["--input", "xa.npy"], false);
}

#[test]
fn refuses_missing_file() {
    let f = Fixture::new();
    f.refused(&[("--weight", "nope.npy")], &[], &["--weight", "nope.npy", "cannot read"], false);
}

#[test]
fn refuses_input_of_wrong_rank() {
    let f = Fixture::new();
    write_npy(&f.path("x3.npy"), &[3, 8, 8], &rand_vec(192, 1));
    f.refused(&[("--input", "x3.npy")], &[], &["--input", "x3.npy", "[3, 8, 8]", "3 dimensions", "expected 4"], false);
}

#[test]
fn refuses_zero_dimension() {
    let f = Fixture::new();
    write_npy(&f.path("x0.npy"), &[0, 3, 8, 8], &[]);
    f.refused(&[("--input", "x0.npy")], &[], &["--input", "x0.npy", "[0, 3, 8, 8]", "zero dimension"], false);
}

#[test]
fn refuses_weight_channel_mismatch() {
    let f = Fixture::new();
    write_npy(&f.path("w2.npy"), &[4, 2, 3, 3], &rand_vec(72, 2));
    f.refused(&[("--weight", "w2.npy")], &[], &["--weight", "w2.npy", "[4, 2, 3, 3]", "3 channels", "= 3"], true);
}

#[test]
fn refuses_bias_of_wrong_length() {
    let f = Fixture::new();
    write_npy(&f.path("b5.npy"), &[5], &rand_vec(5, 3));
    f.refused(&[("--bias", "b5.npy")], &[], &["--bias", "b5.npy", "[5]", "expected [4]"], false);
}

#[test]
fn refuses_bias_of_wrong_rank() {
    let f = Fixture::new();
    write_npy(&f.path("b2d.npy"), &[1, 4], &rand_vec(4, 3));
    f.refused(&[("--bias", "b2d.npy")], &[], &["--bias", "b2d.npy", "[1, 4]", "2 dimensions"], false);
}

#[test]
fn refuses_zero_stride() {
    let f = Fixture::new();
    f.refused(&[], &["--stride", "0"], &["--stride 0", "stride height must be positive, got 0"], false);
}

#[test]
fn refuses_zero_stride_width() {
    let f = Fixture::new();
    f.refused(&[], &["--stride", "2,0"], &["--stride 2,0", "stride width must be positive, got 0"], true);
}

#[test]
fn refuses_negative_stride() {
    let f = Fixture::new();
    f.refused(&[], &["--stride", "-2"], &["--stride -2", "got -2"], false);
}

#[test]
fn refuses_zero_dilation() {
    let f = Fixture::new();
    f.refused(&[], &["--dilation", "1,0"], &["--dilation 1,0", "dilation width must be positive, got 0"], false);
}

#[test]
fn refuses_negative_padding() {
    let f = Fixture::new();
    f.refused(&[], &["--padding", "-1"], &["--padding -1", "must not be negative, got -1"], true);
}

#[test]
fn refuses_negative_padding_one_side() {
    let f = Fixture::new();
    f.refused(
        &[],
        &["--padding=1,2,-3,0"],
        &["--padding 1,2,-3,0", "padding bottom must not be negative, got -3"],
        false,
    );
}

#[test]
fn refuses_padding_with_three_values() {
    let f = Fixture::new();
    f.refused(&[], &["--padding", "1,1,1"], &["--padding 1,1,1", "3 values"], false);
}

#[test]
fn refuses_non_integer_flag() {
    let f = Fixture::new();
    f.refused(&[], &["--stride", "1.5"], &["--stride 1.5", "\"1.5\" is not an integer"], false);
}

#[test]
fn refuses_groups_not_dividing_input_channels() {
    let f = Fixture::new();
    write_npy(&f.path("wg.npy"), &[4, 1, 3, 3], &rand_vec(36, 2));
    f.refused(&[("--weight", "wg.npy")], &["--groups", "2"], &["--groups 2", "3 input channels", "x.npy"], false);
}

#[test]
fn refuses_groups_not_dividing_output_channels() {
    let f = Fixture::new();
    write_npy(&f.path("x6.npy"), &[1, 6, 5, 5], &rand_vec(150, 1));
    write_npy(&f.path("w4.npy"), &[4, 2, 3, 3], &rand_vec(72, 2));
    f.refused(
        &[("--input", "x6.npy"), ("--weight", "w4.npy")],
        &["--groups", "3"],
        &["--groups 3", "4 output channels", "w4.npy"],
        false,
    );
}

#[test]
fn refuses_zero_groups() {
    let f = Fixture::new();
    f.refused(&[], &["--groups", "0"], &["--groups 0", "groups must be positive, got 0"], false);
}

#[test]
fn refuses_negative_groups() {
    let f = Fixture::new();
    f.refused(&[], &["--groups", "-3"], &["--groups -3", "got -3"], true);
}

#[test]
fn refuses_empty_output() {
    let f = Fixture::new();
    write_npy(&f.path("x4.npy"), &[1, 3, 4, 4], &rand_vec(48, 1));
    write_npy(&f.path("w5.npy"), &[4, 3, 5, 5], &rand_vec(300, 2));
    f.refused(
        &[("--input", "x4.npy"), ("--weight", "w5.npy")],
        &["--dilation", "1"],
        &["--input", "x4.npy", "[1, 3, 4, 4]", "5x5", "w5.npy", "output height = 0"],
        true,
    );
}

#[test]
fn refuses_empty_output_from_dilation() {
    let f = Fixture::new();
    f.refused(&[], &["--dilation", "1,4"], &["--dilation 1,4", "output width = 0"], false);
}

#[test]
fn refuses_unparsable_config() {
    let f = Fixture::new();
    f.refused(&[], &["--config", "fastest"], &["--config fastest", "m32n64k32-t4x4-w4-s2"], false);
}

#[test]
fn refuses_malformed_config() {
    let f = Fixture::new();
    f.refused(&[], &["--config", "m32n64k32-t3x3-w4-s2"], &["--config m32n64k32-t3x3-w4-s2", "multiples of 4"], false);
}

#[test]
fn refuses_output_in_missing_directory() {
    let f = Fixture::new();
    let args = f.args(&[], &[]);
    let mut args: Vec<String> = args[..args.len() - 2].to_vec();
    let y = f.path("no/such/dir/y.npy");
    args.extend(["--output".to_string(), s(&y).to_string()]);
    let out = wgconv().args(&args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("--output") && stderr.contains("no/such/dir") && stderr.contains("cannot create"),
        "{stderr}"
    );
    assert!(!y.exists());
}

#[test]
fn missing_required_flag_is_a_usage_error() {
    let out = run(&["run", "--input", "x.npy", "--output", "y.npy"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--weight"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn run_help_explains_with_examples() {
    let out = run(&["run", "--help"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in
        ["nn.Conv2d", "--input", "--weight", "--bias", "--padding", "PT,PL,PB,PR", "--relu", "--config", "Examples:"]
    {
        assert!(text.contains(needle), "run --help lacks {needle:?}:\n{text}");
    }
}

/// `--precision f16` runs the f16 kernel the device has (lavapipe: the SIMT one) within
/// the f16 bound; `--precision f16x3` runs on cooperative matrices within the f32 bound,
/// or is refused in one line where the device has none; `direct` is f32 only.
#[test]
fn precisions_run_their_own_kernels() {
    let dir = tempfile::tempdir().unwrap();
    let case = |precision: &str| Case {
        spec: Conv2dSpec::new(3, 8, 5).stride((2, 2)).padding(Padding::uniform(2)).with_bias(true),
        input: Shape4::new(2, 3, 17, 15),
        relu: false,
        flags: flags(&["--stride", "2", "--padding", "2", "--precision", precision, "--verbose"]),
    };
    let (_, got, want, stderr) = run_case(dir.path(), &case("f16"), 50, false);
    let err = reference::relative_l2(&got, &want);
    assert!(err <= TOL_F16, "f16: relative L2 {err:.3e}");
    assert!(stderr.contains("kernel: tiled-f16:") || stderr.contains("kernel: coop-f16:"), "{stderr}");

    let f16x3 = case("f16x3");
    let mut args: Vec<String> = vec!["run".into()];
    let x = dir.path().join("x.npy");
    write_npy(&x, &[2, 3, 17, 15], &rand_vec(2 * 3 * 17 * 15, 60));
    let w = dir.path().join("w.npy");
    write_npy(&w, &[8, 3, 5, 5], &rand_vec(8 * 3 * 5 * 5, 61));
    args.extend(["--input", s(&x), "--weight", s(&w), "--output", s(&dir.path().join("y3.npy"))].map(String::from));
    args.extend(f16x3.flags.iter().cloned());
    let out = wgconv().args(&args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        assert!(stderr.contains("kernel: coop-f16x3:"), "{stderr}");
        let (_, got, want, _) = run_case(dir.path(), &f16x3, 62, false);
        assert_close("f16x3", &got, &want);
    } else {
        assert!(
            stderr.contains("f16x3 precision cannot run here") && stderr.contains("needs cooperative matrices"),
            "{stderr}"
        );
        assert_eq!(stderr.lines().filter(|l| l.starts_with("wgconv: error")).count(), 1, "one error line: {stderr}");
    }

    let out = wgconv()
        .args(["run", "--input", s(&x), "--weight", s(&w), "--output", s(&dir.path().join("yd.npy"))])
        .args(["--config", "direct", "--precision", "f16"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--config direct computes in f32"));
}
