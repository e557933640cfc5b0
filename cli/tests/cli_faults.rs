//! `wgconv tune` and `wgconv run` killed mid-way: the tuning cache stays valid and keeps
//! its entries, no temporary file is left (or a stale one survives the next run), an output
//! that existed is untouched; an output in a missing directory is refused naming the
//! user's path; an unwritable cache is reported once.

use npyz::WriterBuilder;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

fn wgconv() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_wgconv"));
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        cmd.env("XDG_RUNTIME_DIR", std::env::temp_dir());
    }
    cmd
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn write_npy(path: &Path, shape: &[u64], data: &[f32]) {
    let mut buf = Vec::new();
    let mut w = npyz::WriteOptions::new().default_dtype().shape(shape).writer(&mut buf).begin_nd().unwrap();
    w.extend(data.iter().copied()).unwrap();
    w.finish().unwrap();
    std::fs::write(path, buf).unwrap();
}

/// Files in `dir` whose names end in `.tmp`.
fn temps(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect()
}

/// A `.tmp` file that looks like one a killed process left two minutes ago.
fn plant_stale(path: &Path, bytes: usize) {
    std::fs::write(path, vec![b'x'; bytes]).unwrap();
    let old = SystemTime::now() - Duration::from_secs(120);
    std::fs::File::options().write(true).open(path).unwrap().set_modified(old).unwrap();
}

/// Starts `cmd`, kills it (SIGKILL) after `after`, and returns whether it was still running.
fn kill_after(mut cmd: Command, after: Duration) -> bool {
    let mut child = cmd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
    std::thread::sleep(after);
    let running = child.try_wait().unwrap().is_none();
    let _ = child.kill();
    let _ = child.wait();
    running
}

const TUNE_SHAPE: &[&str] = &[
    "--batch",
    "1",
    "--in-channels",
    "3",
    "--height",
    "16",
    "--width",
    "16",
    "--out-channels",
    "8",
    "--kernel",
    "3",
    "--padding",
    "1",
    "--rounds",
    "5",
    "--warmup",
    "1",
];

fn tune(cache: &Path, extra: &[&str]) -> Command {
    let mut cmd = wgconv();
    cmd.env("WGCONV_CACHE_DIR", cache).arg("tune").args(TUNE_SHAPE).args(extra);
    cmd
}

fn cache_entries(cache: &Path) -> usize {
    let text = std::fs::read_to_string(cache.join("tuning.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("tuning.json: {e}\n{text}"));
    v["entries"].as_array().unwrap().len()
}

/// `wgconv tune --force` killed at several points: tuning.json stays valid with its entry;
/// a stale temporary file of an interrupted store is removed by the next tune; the file is
/// readable by other users.
#[test]
fn tune_killed_mid_way() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path();
    let out = tune(cache, &[]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(cache_entries(cache), 1);
    let mut killed = 0;
    for ms in [50, 200, 400, 700, 1000, 1500] {
        killed += kill_after(tune(cache, &["--force"]), Duration::from_millis(ms)) as u32;
        assert_eq!(cache_entries(cache), 1, "after a kill at {ms} ms");
    }
    assert!(killed > 0, "every tune finished before it could be killed");
    // What a kill between the temporary file's creation and its rename leaves.
    let stale = cache.join(".tuning-AbC123.tmp");
    plant_stale(&stale, 75_000);
    let out = tune(cache, &["--force"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // (A kill above that landed inside a store's few milliseconds may have left a young one.)
    assert!(!stale.exists(), "left: {:?}", temps(cache));
    assert_eq!(cache_entries(cache), 1);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(cache.join("tuning.json")).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & 0o044, 0o044, "tuning.json mode {mode:o}");
    }
}

/// A cache location that cannot be written is reported once (not once by the library and
/// again by the command), and the tune still succeeds.
#[test]
fn unwritable_cache_is_reported_once() {
    let dir = tempfile::tempdir().unwrap();
    // A file where the directory should be: unwritable even for root.
    let blocker = dir.path().join("blocker");
    std::fs::write(&blocker, b"x").unwrap();
    let out: Output = tune(&blocker.join("sub"), &[]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let mentions = stderr.lines().filter(|l| l.contains("not stored")).count();
    assert_eq!(mentions, 1, "{stderr}");
}

/// `wgconv run` on a problem long enough to be killed while the GPU works (≈ 0.3 GFLOP).
fn run_cmd(dir: &Path) -> Command {
    let mut cmd = wgconv();
    // Dilation 2: the tiled kernel (a CPU adapter runs 3×3 stride-1 layers by Winograd, whose
    // shorter GPU time would move the output's writing among the kills below).
    cmd.args(["run", "--input", s(&dir.join("x.npy")), "--weight", s(&dir.join("w.npy")), "--padding", "2"]);
    cmd.args(["--dilation", "2"]);
    cmd.args(["--output", s(&dir.join("y.npy"))]);
    cmd
}

/// `wgconv run` killed at several points leaves no temporary file and the previous output
/// untouched; a stale temporary file of an interrupted write is removed by the next run.
#[test]
fn run_killed_mid_way() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (c, h, w, k) = (16u64, 96u64, 96u64, 64u64);
    write_npy(&d.join("x.npy"), &[1, c, h, w], &(0..c * h * w).map(|i| (i % 17) as f32 * 0.1).collect::<Vec<_>>());
    write_npy(&d.join("w.npy"), &[k, c, 3, 3], &(0..k * c * 9).map(|i| (i % 5) as f32 * 0.01).collect::<Vec<_>>());
    // An uninterrupted run: its duration places the kills, its output is the one to keep.
    let t0 = std::time::Instant::now();
    let out = run_cmd(d).output().unwrap();
    let full = t0.elapsed();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let previous = std::fs::read(d.join("y.npy")).unwrap();
    let mut killed = 0;
    // Kills while the device opens and the GPU works. The output is written in the last few
    // milliseconds, where a later run (faster than the measured one: its pipelines cached)
    // may meet a kill: that leaves a temporary file, young, so no run removes it yet (it could
    // be a live run's). Aged here, the run below must remove it with the planted one.
    for frac in [0.1, 0.25, 0.4, 0.55, 0.7] {
        killed += kill_after(run_cmd(d), full.mul_f64(frac)) as u32;
        for left in temps(d) {
            assert!(left.starts_with(".y.npy."), "a kill at {frac} of the run left {left}");
            let old = SystemTime::now() - Duration::from_secs(120);
            std::fs::File::options().write(true).open(d.join(&left)).unwrap().set_modified(old).unwrap();
        }
        assert!(std::fs::read(d.join("y.npy")).unwrap() == previous, "a kill at {frac} of the run changed y.npy");
    }
    assert!(killed > 0, "every run finished before it could be killed");
    // A temporary file of a run killed while it wrote (and a younger one, maybe a live run's).
    plant_stale(&d.join(".y.npy.XyZ789.tmp"), 0);
    std::fs::write(d.join(".y.npy.live01.tmp"), b"").unwrap();
    let out = run_cmd(d).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(temps(d), vec![".y.npy.live01.tmp".to_string()]);
    assert!(std::fs::read(d.join("y.npy")).unwrap().starts_with(b"\x93NUMPY"));
}

/// An output in a missing directory is refused before any work, naming the user's path
/// (not a temporary file's), with no file created.
#[test]
fn output_in_a_missing_directory_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_npy(&d.join("x.npy"), &[1, 1, 4, 4], &[1.0; 16]);
    write_npy(&d.join("w.npy"), &[1, 1, 1, 1], &[2.0]);
    let y = d.join("missing").join("y.npy");
    let out = wgconv()
        .args(["run", "--input", s(&d.join("x.npy")), "--weight", s(&d.join("w.npy")), "--output", s(&y)])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(s(&y)) && stderr.contains("does not exist"), "{stderr}");
    assert!(!stderr.contains(".y.npy."), "a temporary file is named: {stderr}");
    assert!(!d.join("missing").exists());
}
