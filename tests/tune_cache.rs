//! The tuning cache file: damaged and foreign files, concurrent writers (threads and
//! processes), entries of other adapters left untouched. No GPU needed.
#![cfg(feature = "tune")]

use std::path::Path;
use std::process::Command;
use std::sync::{Mutex, Once};
use wgconv::tune::cache::{
    shader_hash, CacheKey, CachedDecision, DeviceKey, ShapeKey, TuningCache, FILE_NAME, SCHEMA_VERSION,
};
use wgconv::TileConfig;

// ---- a logger that keeps warnings, to check that damage is reported ------------------------

static WARNINGS: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Capture;
impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= log::Level::Warn
    }
    fn log(&self, r: &log::Record) {
        if self.enabled(r.metadata()) {
            WARNINGS.lock().unwrap().push(r.args().to_string());
        }
    }
    fn flush(&self) {}
}

fn init_log() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        log::set_logger(&Capture).unwrap();
        log::set_max_level(log::LevelFilter::Warn);
    });
}

/// Warnings that mention `needle` (a test's own directory or adapter name).
fn warnings_about(needle: &str) -> Vec<String> {
    WARNINGS.lock().unwrap().iter().filter(|w| w.contains(needle)).cloned().collect()
}

// ---- fixtures -----------------------------------------------------------------------------

fn device(adapter: &str) -> DeviceKey {
    DeviceKey {
        adapter: adapter.into(),
        vendor: 0x10de,
        device: 0x2330,
        driver: "NVIDIA".into(),
        driver_info: "580.159.04".into(),
        backend: "Vulkan".into(),
        runtime_checks: false,
        wgconv_version: env!("CARGO_PKG_VERSION").into(),
        shader_hash: shader_hash(),
    }
}

fn shape(n: u32) -> ShapeKey {
    ShapeKey {
        n,
        c_in: 3,
        h: 224,
        w: 224,
        c_out: 96,
        kh: 11,
        kw: 11,
        stride: [4, 4],
        padding: [2, 2, 2, 2],
        dilation: [1, 1],
        groups: 1,
    }
}

fn key(adapter: &str, n: u32) -> CacheKey {
    CacheKey { device: device(adapter), shape: shape(n), kernel: "tiled".into() }
}

fn decision(stages: u32) -> CachedDecision {
    let original = TileConfig::parse("m64n64k16-t4x8-w4-s3").unwrap();
    CachedDecision {
        config: original.with_stages(stages),
        original,
        threshold_pct: 2.0,
        gain_pct: if stages == 3 { 0.0 } else { 2.5 },
        tuned_at: "2026-11-22T00:00:00+00:00".into(),
        report: None,
    }
}

fn tempdir() -> tempfile::TempDir {
    init_log();
    tempfile::tempdir().unwrap()
}

fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// Checks the file is a well-formed cache of our schema with `n` entries.
fn assert_valid(cache: &TuningCache, n: usize) {
    let v = read_json(cache.path());
    assert_eq!(v["schema"], SCHEMA_VERSION);
    assert_eq!(v["entries"].as_array().unwrap().len(), n, "{v:#}");
    assert_eq!(cache.entries().len(), n);
}

// ---- tests --------------------------------------------------------------------------------

#[test]
fn store_and_lookup_match_the_whole_key() {
    let dir = tempdir();
    let cache = TuningCache::in_dir(dir.path());
    assert_eq!(cache.path(), dir.path().join(FILE_NAME));
    assert!(cache.lookup(&key("A", 256)).is_none(), "no file: a miss, no error");
    cache.store(&key("A", 256), &decision(2)).unwrap();
    assert_eq!(cache.lookup(&key("A", 256)), Some(decision(2)));
    // Anything that makes a measurement stale misses.
    let mut stale = Vec::new();
    for f in [
        |k: &mut CacheKey| k.device.wgconv_version = "0.0.9".into(),
        |k: &mut CacheKey| k.device.shader_hash = "0000000000000000".into(),
        |k: &mut CacheKey| k.device.driver_info = "570.00".into(),
        |k: &mut CacheKey| k.device.driver = "nouveau".into(),
        |k: &mut CacheKey| k.device.backend = "Gl".into(),
        |k: &mut CacheKey| k.device.runtime_checks = true,
        |k: &mut CacheKey| k.shape.n = 128,
        |k: &mut CacheKey| k.shape.stride = [2, 2],
        |k: &mut CacheKey| k.shape.padding = [2, 2, 3, 3],
        |k: &mut CacheKey| k.shape.dilation = [2, 2],
        |k: &mut CacheKey| k.shape.groups = 3,
        |k: &mut CacheKey| k.shape.kh = 7,
    ] {
        let mut k = key("A", 256);
        f(&mut k);
        stale.push(k);
    }
    for k in &stale {
        assert!(cache.lookup(k).is_none(), "{k:?}");
    }
    // Replacing keeps one entry per key.
    cache.store(&key("A", 256), &decision(4)).unwrap();
    assert_eq!(cache.lookup(&key("A", 256)), Some(decision(4)));
    assert_valid(&cache, 1);
    // No temporary files are left behind.
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 2, "{names:?}"); // tuning.json and tuning.json.lock
}

#[test]
fn key_of_a_problem() {
    let p = wgconv::Conv2dSpec::alexnet_conv1().problem(wgconv::Shape4::new(256, 3, 224, 224)).unwrap();
    assert_eq!(ShapeKey::of(&p), shape(256));
}

#[test]
fn truncated_file_is_ignored_and_rewritten() {
    let dir = tempdir();
    let cache = TuningCache::in_dir(dir.path());
    for n in 1..=3 {
        cache.store(&key("A", n), &decision(2)).unwrap();
    }
    let full = std::fs::read(cache.path()).unwrap();
    for cut in [full.len() / 2, full.len() - 3, 1, 0] {
        std::fs::write(cache.path(), &full[..cut]).unwrap();
        assert!(cache.lookup(&key("A", 1)).is_none(), "cut at {cut}");
    }
    assert!(!warnings_about(&dir.path().display().to_string()).is_empty());
    cache.store(&key("A", 9), &decision(4)).unwrap();
    assert_valid(&cache, 1);
    assert_eq!(cache.lookup(&key("A", 9)), Some(decision(4)));
}

#[test]
fn garbage_is_ignored_and_rewritten() {
    let dir = tempdir();
    let cache = TuningCache::in_dir(dir.path());
    let junk: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    for bytes in [&junk[..], b"not json at all", b"\xff\xfe{\"schema\":1}", b"{\"schema\":1,\"entries\":[}"] {
        std::fs::write(cache.path(), bytes).unwrap();
        assert!(cache.lookup(&key("A", 1)).is_none());
        assert!(cache.entries().is_empty());
    }
    let w = warnings_about(&dir.path().display().to_string());
    assert!(w.iter().any(|w| w.contains("not valid JSON")), "{w:?}");
    cache.store(&key("A", 1), &decision(2)).unwrap();
    assert_valid(&cache, 1);
}

#[test]
fn foreign_schema_is_ignored_and_rewritten() {
    let dir = tempdir();
    let cache = TuningCache::in_dir(dir.path());
    cache.store(&key("A", 1), &decision(2)).unwrap();
    let mut v = read_json(cache.path());
    // A newer schema, none, ours as a string, null; and (schema 3) the older ones, whose keys
    // named the kernel enum's variants.
    let newer = SCHEMA_VERSION + 1;
    let schemas = [
        serde_json::json!(newer),
        serde_json::json!(0),
        serde_json::json!(SCHEMA_VERSION.to_string()),
        serde_json::Value::Null,
        serde_json::json!(1),
        serde_json::json!(2),
    ];
    for schema in schemas {
        v["schema"] = schema.clone();
        std::fs::write(cache.path(), serde_json::to_vec(&v).unwrap()).unwrap();
        assert!(cache.lookup(&key("A", 1)).is_none(), "schema {schema}");
    }
    let w = warnings_about(&dir.path().display().to_string());
    assert!(w.iter().any(|w| w.contains(&format!("schema version {newer}"))), "{w:?}");
    cache.store(&key("A", 2), &decision(4)).unwrap();
    assert_valid(&cache, 1);
    assert!(cache.lookup(&key("A", 1)).is_none());
}

#[test]
fn valid_json_of_another_shape_is_ignored() {
    let dir = tempdir();
    let cache = TuningCache::in_dir(dir.path());
    let ours = SCHEMA_VERSION;
    for text in [
        "[1, 2, 3]".to_string(),
        "\"tuning\"".to_string(),
        "null".to_string(),
        "{}".to_string(),
        format!("{{\"schema\": {ours}}}"),
        format!("{{\"schema\": {ours}, \"entries\": {{\"a\": 1}}}}"),
        "{\"version\": 1, \"entries\": []}".to_string(),
    ] {
        std::fs::write(cache.path(), &text).unwrap();
        assert!(cache.lookup(&key("A", 1)).is_none(), "{text}");
        assert!(cache.entries().is_empty(), "{text}");
    }
    assert!(warnings_about(&dir.path().display().to_string()).len() >= 7);
    cache.store(&key("A", 1), &decision(2)).unwrap();
    assert_valid(&cache, 1);
}

#[test]
fn malformed_entries_are_skipped_never_used() {
    let dir = tempdir();
    let cache = TuningCache::in_dir(dir.path());
    let adapter = "Malformed Adapter 3000";
    let good = serde_json::json!({ "key": key(adapter, 2), "decision": decision(2) });
    // Same key as the lookup below, but a config no kernel can be: 3x8 register tile.
    let mut bad_cfg = serde_json::json!({ "key": key(adapter, 1), "decision": decision(2) });
    bad_cfg["decision"]["config"]["thread_m"] = 3.into();
    let mut bad_stages = bad_cfg.clone();
    bad_stages["decision"]["config"]["thread_m"] = 4.into();
    bad_stages["decision"]["config"]["stages"] = 9.into();
    let doc = serde_json::json!({
        "schema": SCHEMA_VERSION,
        "entries": [
            1,
            { "key": "nope" },
            { "key": key(adapter, 1), "decision": { "config": "m64n64k16-t4x8-w4-s2" } },
            bad_cfg,
            bad_stages,
            good,
        ],
    });
    std::fs::write(cache.path(), serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    assert!(cache.lookup(&key(adapter, 1)).is_none(), "a malformed config must never be returned");
    assert_eq!(cache.lookup(&key(adapter, 2)), Some(decision(2)));
    assert_eq!(cache.entries().len(), 1);
    let w = warnings_about(adapter);
    assert!(w.iter().any(|w| w.contains("malformed config")), "{w:?}");
    assert!(w.iter().any(|w| w.contains("does not parse")), "{w:?}");
    // A store for the damaged key replaces its entries; the rest stays as it was.
    cache.store(&key(adapter, 1), &decision(4)).unwrap();
    assert_eq!(cache.lookup(&key(adapter, 1)), Some(decision(4)));
    let v = read_json(cache.path());
    let entries = v["entries"].as_array().unwrap();
    assert_eq!(entries[0], 1);
    assert_eq!(entries[1], serde_json::json!({ "key": "nope" }));
    assert_eq!(entries.last().unwrap(), &doc["entries"][5]);
}

#[test]
fn entries_for_other_adapters_are_untouched() {
    let dir = tempdir();
    let cache = TuningCache::in_dir(dir.path());
    cache.store(&key("NVIDIA H100 80GB HBM3", 256), &decision(2)).unwrap();
    cache.store(&key("llvmpipe (LLVM 15.0.6, 256 bits)", 2), &decision(4)).unwrap();
    // A foreign field in the other adapter's entry must survive our rewrite too.
    let mut v = read_json(cache.path());
    v["entries"][1]["decision"]["note"] = "written by a newer wgconv".into();
    std::fs::write(cache.path(), serde_json::to_vec(&v).unwrap()).unwrap();
    let other_before = read_json(cache.path())["entries"][1].clone();

    cache.store(&key("NVIDIA H100 80GB HBM3", 256), &decision(3)).unwrap();
    cache.store(&key("NVIDIA H100 80GB HBM3", 128), &decision(4)).unwrap();
    let after = read_json(cache.path());
    assert_eq!(after["entries"][1], other_before);
    assert_eq!(after["entries"].as_array().unwrap().len(), 3);
    assert_eq!(cache.lookup(&key("NVIDIA H100 80GB HBM3", 256)), Some(decision(3)));
    assert_eq!(cache.lookup(&key("llvmpipe (LLVM 15.0.6, 256 bits)", 2)), Some(decision(4)));
}

#[test]
fn concurrent_writers_in_threads() {
    let dir = tempdir();
    let path = dir.path().to_path_buf();
    let (threads, per) = (8u32, 20u32);
    // A reader hammering the file meanwhile must never see a damaged file.
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let cache = TuningCache::in_dir(&path);
            let mut reads = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = cache.lookup(&key("thread 0", 0));
                reads += 1;
            }
            reads
        });
        let writers: Vec<_> = (0..threads)
            .map(|t| {
                let path = &path;
                s.spawn(move || {
                    // Each thread its own handle, as separate programs would.
                    let cache = TuningCache::in_dir(path);
                    for i in 0..per {
                        cache.store(&key(&format!("thread {t}"), i), &decision(2 + (i % 3))).unwrap();
                        // Everyone also rewrites one shared key.
                        cache.store(&key("shared", 0), &decision(2 + (t % 3))).unwrap();
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(reader.join().unwrap() > 0);
    });
    let cache = TuningCache::in_dir(&path);
    assert_valid(&cache, (threads * per + 1) as usize);
    for t in 0..threads {
        for i in 0..per {
            assert_eq!(cache.lookup(&key(&format!("thread {t}"), i)), Some(decision(2 + (i % 3))), "{t}/{i}");
        }
    }
    assert!(cache.lookup(&key("shared", 0)).is_some());
    assert!(warnings_about(&path.display().to_string()).is_empty(), "a reader saw a damaged file");
}

/// The body of the child processes of `concurrent_writers_in_processes` (a no-op otherwise).
#[test]
fn child_writer() {
    let Ok(id) = std::env::var("WGCONV_TEST_CHILD") else { return };
    // The child finds the cache through WGCONV_CACHE_DIR, as the library does by default.
    let cache = TuningCache::open_default().expect("WGCONV_CACHE_DIR");
    assert_eq!(cache.path(), Path::new(&std::env::var("WGCONV_CACHE_DIR").unwrap()).join(FILE_NAME));
    for i in 0..25 {
        cache.store(&key(&format!("process {id}"), i), &decision(2 + (i % 3))).unwrap();
        cache.store(&key("shared", 0), &decision(2)).unwrap();
    }
}

#[test]
fn concurrent_writers_in_processes() {
    let dir = tempdir();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..4)
        .map(|id| {
            Command::new(&exe)
                .args(["--exact", "child_writer", "--test-threads=1", "--quiet"])
                .env("WGCONV_TEST_CHILD", id.to_string())
                .env("WGCONV_CACHE_DIR", dir.path())
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let cache = TuningCache::in_dir(dir.path());
    assert_valid(&cache, 4 * 25 + 1);
    for id in 0..4 {
        for i in 0..25 {
            assert_eq!(cache.lookup(&key(&format!("process {id}"), i)), Some(decision(2 + (i % 3))));
        }
    }
}

#[test]
fn unwritable_location_is_an_error_not_a_panic() {
    let dir = tempdir();
    // The cache "directory" is a file: creating it fails.
    let blocker = dir.path().join("blocker");
    std::fs::write(&blocker, b"x").unwrap();
    let cache = TuningCache::in_dir(&blocker.join("sub"));
    assert!(cache.lookup(&key("A", 1)).is_none());
    let e = cache.store(&key("A", 1), &decision(2)).unwrap_err();
    assert!(e.to_string().contains("tuning cache"), "{e}");
}

/// Each kernel family keeps its own decision for one device and shape (f16's `coop-f16` and
/// `tiled-f16` too: which one runs depends on how the device was opened); a file of an
/// older schema (1: no `kernel` in its keys; 2: the kernel enum's names) is ignored, not
/// read as decisions of today's families. A cooperative config whose
/// thread tile only names the workgroup size (`t4x6`, 8 warps) is well formed for the
/// cooperative kernels, not for the SIMT ones, and a family the build does not know is
/// skipped.
#[test]
fn kernel_families_have_their_own_entries() {
    let dir = tempdir();
    let cache = TuningCache::in_dir(dir.path());
    let at = |family: &str| CacheKey { kernel: family.into(), ..key("families", 256) };
    cache.store(&at("tiled"), &decision(3)).unwrap();
    let coop = TileConfig::parse("m64n96k16-t4x12-w4-s1").unwrap();
    let coop_w8 = TileConfig::parse("m64n96k16-t4x6-w8-s1").unwrap();
    let split = CachedDecision { config: coop_w8, original: coop, ..decision(3) };
    cache.store(&at("coop-f16x3"), &split).unwrap();
    assert_valid(&cache, 2);
    assert_eq!(cache.lookup(&at("tiled")), Some(decision(3)));
    assert_eq!(cache.lookup(&at("coop-f16x3")), Some(split.clone()));
    assert_eq!(cache.lookup(&at("coop-f16")), None);
    assert_eq!(cache.lookup(&at("tiled-f16")), None);
    // The same t4x6 config for the SIMT kernels is malformed (no register tile): skipped.
    cache.store(&at("tiled-f16"), &split).unwrap();
    assert_eq!(cache.lookup(&at("tiled-f16")), None);
    cache.store(&at("no-such-kernel"), &decision(3)).unwrap();
    assert_eq!(cache.lookup(&at("no-such-kernel")), None);

    // A schema 1 file: keys without a kernel family. Schema 3 reads none of it (it used to
    // read such an entry as a `tiled` decision).
    let current = read_json(cache.path());
    let mut v = current.clone();
    v["schema"] = serde_json::json!(1);
    let old =
        serde_json::json!({ "key": { "device": device("families"), "shape": shape(8) }, "decision": decision(2) });
    v["entries"].as_array_mut().unwrap().push(old);
    std::fs::write(cache.path(), serde_json::to_vec(&v).unwrap()).unwrap();
    assert_eq!(cache.lookup(&key("families", 8)), None);
    assert_eq!(cache.lookup(&at("coop-f16x3")), None);
    assert!(cache.entries().is_empty());
    // The same entries under today's schema are read again.
    std::fs::write(cache.path(), serde_json::to_vec(&current).unwrap()).unwrap();
    assert_eq!(cache.lookup(&at("coop-f16x3")), Some(split));
}

/// A store killed between creating its temporary file and the rename leaves a
/// `.tuning-*.tmp` behind: the next read or store removes it once it is older than
/// `ORPHAN_AGE`, and leaves a younger one (a concurrent writer's) alone.
#[test]
fn orphaned_temporary_files_are_removed() {
    use wgconv::tune::cache::{remove_orphans, ORPHAN_AGE};
    let dir = tempdir();
    let stale = dir.path().join(".tuning-killed.tmp");
    let fresh = dir.path().join(".tuning-live.tmp");
    let other = dir.path().join("notes.tmp");
    for p in [&stale, &fresh, &other] {
        std::fs::write(p, vec![b'{'; 70_000]).unwrap();
    }
    let old = std::time::SystemTime::now() - ORPHAN_AGE - std::time::Duration::from_secs(5);
    for p in [&stale, &other] {
        std::fs::File::options().write(true).open(p).unwrap().set_modified(old).unwrap();
    }
    // A read alone cleans up (a process that only looks decisions up still tidies).
    let cache = TuningCache::in_dir(dir.path());
    assert!(cache.lookup(&key("A", 1)).is_none());
    assert!(!stale.exists(), "the stale temporary file survived a read");
    assert!(fresh.exists() && other.exists(), "a live writer's file or a foreign file was removed");
    // And a store: the live file ages, the next store removes it.
    std::fs::File::options().write(true).open(&fresh).unwrap().set_modified(old).unwrap();
    cache.store(&key("A", 1), &decision(2)).unwrap();
    assert!(!fresh.exists());
    assert_valid(&cache, 1);
    assert_eq!(remove_orphans(dir.path(), ORPHAN_AGE), 0);
    assert!(other.exists());
}

/// The file is readable by other users (a shared cache directory), not tempfile's 0600.
#[cfg(unix)]
#[test]
fn the_cache_file_is_world_readable() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempdir();
    let cache = TuningCache::in_dir(dir.path());
    cache.store(&key("A", 1), &decision(2)).unwrap();
    let mode = std::fs::metadata(cache.path()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode & 0o044, 0o044, "mode {mode:o}");
}
