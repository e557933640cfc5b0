//! The tuning cache: the micro-tuner's decisions (see [`crate::tune`]), persisted in one
//! JSON file so that a later `Conv2d` (or a later `wgconv tune`) reuses them.
//!
//! # Location
//! `$WGCONV_CACHE_DIR/tuning.json` when `WGCONV_CACHE_DIR` is set (and not empty), else
//! `dirs::cache_dir()/wgconv/tuning.json` (`~/.cache/wgconv/tuning.json` on Linux,
//! `~/Library/Caches/wgconv/tuning.json` on macOS, `%LOCALAPPDATA%\wgconv\tuning.json` on
//! Windows). No location, no cache: lookups miss and stores are refused with a reason.
//!
//! # Key
//! A decision is only valid for the exact device, software and shape it was measured on,
//! so the key ([`CacheKey`]) is the seed's Triton autotune key (N, C_in, H, W, C_out, and
//! through kernel/stride/padding/dilation OH, OW) widened to everything that decides the
//! output size (KH, KW, stride, padding, dilation, groups), plus what makes a measurement
//! stale: adapter name, vendor and device id, driver and driver info, backend, whether
//! wgpu's runtime bounds checks are on, the wgconv version (`CARGO_PKG_VERSION`) and a
//! hash of every family's WGSL ([`DeviceKey::shader_hash`]), and the kernel family tuned
//! (`tiled`, `tiled-f16`, `coop-f16`, `coop-f16x3`: the families with a
//! [`TileConfig`]). A lookup matches the whole key exactly; an upgrade or a changed shader
//! simply misses (the stale entry stays, harmless, for a downgrade).
//!
//! # File format (schema [`SCHEMA_VERSION`])
//! ```json
//! { "schema": 3, "written_by": "wgconv 0.1.0",
//!   "entries": [ { "key": { ... }, "decision": { "config": ..., "original": ..., ... } } ] }
//! ```
//!
//! # Robustness
//! - Writes are atomic: the new file is written to a temporary file in the same directory,
//!   synced, and renamed over the old one, so a reader sees the old or the new file, never
//!   a mix, and a crash mid-write leaves the old file.
//! - Read-modify-write is serialised across threads and processes by an exclusive
//!   `File::lock` on `tuning.json.lock` beside the file (never deleted: deleting a lock file
//!   re-opens the race it closes). Readers take no lock (the rename is atomic).
//! - A truncated, corrupt, foreign-schema or wrongly shaped file is ignored with a
//!   `log::warn!` (lookups miss) and replaced by the next store. An entry that does not
//!   parse, or whose config is malformed, is skipped with a warning; entries the store does
//!   not replace are written back exactly as they were read (other adapters untouched).
//! - A writer killed between creating its temporary file (`.tuning-*.tmp`) and the rename
//!   leaves that file behind: the next store, or read, removes such orphans once they are
//!   older than [`ORPHAN_AGE`] (a concurrent writer's temporary file is younger).
//! - The file is written with mode 0644 (less the umask) on Unix, so that a cache
//!   directory shared between users is readable by all of them (writing needs the
//!   directory's permission).
//! - Nothing here panics on file contents; a cached config is further checked against
//!   the device's limits before use ([`crate::tune::cached_decision`], [`crate::tune::lookup`]).
//!
//! This module depends on the kernels, the spec and the device only (not on the tuner or
//! on `Conv2d`, which consults it while it is built).

use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::kernel::Kernel;
use crate::spec::ConvProblem;
use crate::tile::TileConfig;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The version of the file layout this build writes. 3: keys name the kernel families of
/// the `Kernel` vocabulary (`family:config` names), where 1 and 2 named the variants of an
/// enum that no longer exists; a build that reads only older schemas ignores (and rewrites)
/// a schema 3 file instead of taking another kernel's decision for its own.
pub const SCHEMA_VERSION: u32 = 3;
/// The versions this build reads. Files with any other value (older ones included) are
/// ignored with a warning and rewritten by the next store.
pub const READABLE_SCHEMAS: [u32; 1] = [3];
/// The cache file's name inside the cache directory.
pub const FILE_NAME: &str = "tuning.json";
/// The environment variable that overrides the cache directory.
pub const DIR_ENV: &str = "WGCONV_CACHE_DIR";
/// How old a temporary file of an interrupted store must be before [`remove_orphans`]
/// deletes it: a store takes milliseconds, so a younger one may be a live writer's.
pub const ORPHAN_AGE: std::time::Duration = std::time::Duration::from_secs(60);
/// The prefix and suffix of a store's temporary file.
const TMP_PREFIX: &str = ".tuning-";
const TMP_SUFFIX: &str = ".tmp";

/// Removes the temporary files (`.tuning-*.tmp`) that stores killed mid-write left in
/// `dir`, those older than `older_than`; returns how many it removed. Errors (an
/// unreadable directory, a file another process removed first) are skipped: the orphans
/// are litter, not state.
pub fn remove_orphans(dir: &Path, older_than: std::time::Duration) -> usize {
    let Ok(listing) = fs::read_dir(dir) else {
        return 0;
    };
    let now = std::time::SystemTime::now();
    let mut removed = 0;
    for entry in listing.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !(name.starts_with(TMP_PREFIX) && name.ends_with(TMP_SUFFIX)) {
            continue;
        }
        let age = entry.metadata().and_then(|m| m.modified()).ok().and_then(|t| now.duration_since(t).ok());
        if age.is_some_and(|a| a >= older_than) && fs::remove_file(entry.path()).is_ok() {
            log::info!("tuning cache: removed {}, left by an interrupted store", entry.path().display());
            removed += 1;
        }
    }
    removed
}

/// The device and software a decision was measured with: a measurement goes stale when
/// any of them changes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DeviceKey {
    /// The adapter's name.
    pub adapter: String,
    /// Its PCI vendor id.
    pub vendor: u32,
    /// Its PCI device id.
    pub device: u32,
    /// The driver's name.
    pub driver: String,
    /// The driver's version information.
    pub driver_info: String,
    /// The wgpu backend (`Vulkan`, `Metal`, …).
    pub backend: String,
    /// wgpu's runtime bounds checks in the kernels (they cost time, so they key the cache).
    pub runtime_checks: bool,
    /// The wgconv version that measured it.
    pub wgconv_version: String,
    /// [`shader_hash`] of the build that measured it: a changed kernel is a changed time.
    pub shader_hash: String,
}

impl DeviceKey {
    /// The key of an adapter with this build of wgconv.
    pub fn new(info: &wgpu::AdapterInfo, runtime_checks: bool) -> Self {
        DeviceKey {
            adapter: info.name.clone(),
            vendor: info.vendor,
            device: info.device,
            driver: info.driver.clone(),
            driver_info: info.driver_info.clone(),
            backend: format!("{:?}", info.backend),
            runtime_checks,
            wgconv_version: env!("CARGO_PKG_VERSION").to_string(),
            shader_hash: shader_hash(),
        }
    }
}

/// A hash of the WGSL of every family's sweep kernels (each composed for its
/// representative problems), 16 hex digits: part of the key, so that a cached decision
/// goes stale when a kernel, a shared module or a family's composition changes. Kernels
/// that fail to compose are left out. Computed once per process.
pub fn shader_hash() -> String {
    static HASH: OnceLock<String> = OnceLock::new();
    HASH.get_or_init(|| {
        // FNV-1a, 64 bits: a change detector, not a defence (no sha2 in the library's tree).
        struct Fnv(u64);
        impl Fnv {
            fn update(&mut self, bytes: impl AsRef<[u8]>) {
                for &b in bytes.as_ref() {
                    self.0 = (self.0 ^ b as u64).wrapping_mul(0x0100_0000_01b3);
                }
            }
        }
        let mut h = Fnv(0xcbf2_9ce4_8422_2325);
        for family in crate::families::FAMILIES {
            for kernel in family.sweep() {
                let Ok(sources) = kernel.config().representative_sources() else {
                    continue;
                };
                h.update(kernel.to_string().as_bytes());
                h.update([0]);
                for source in sources {
                    h.update(source.as_bytes());
                    h.update([0]);
                }
            }
        }
        format!("{:016x}", h.0)
    })
    .clone()
}

/// The shape part of the key: the seed's autotune key (N, C_in, H, W, C_out, OH, OW) with
/// the attributes that determine OH and OW spelled out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ShapeKey {
    /// Batch.
    pub n: u32,
    /// Input channels.
    pub c_in: u32,
    /// Input height.
    pub h: u32,
    /// Input width.
    pub w: u32,
    /// Output channels.
    pub c_out: u32,
    /// Kernel height.
    pub kh: u32,
    /// Kernel width.
    pub kw: u32,
    /// Stride (height, width).
    pub stride: [u32; 2],
    /// top, left, bottom, right
    pub padding: [u32; 4],
    /// Dilation (height, width).
    pub dilation: [u32; 2],
    /// Groups.
    pub groups: u32,
}

impl ShapeKey {
    /// The shape key of a problem.
    pub fn of(problem: &ConvProblem) -> Self {
        let s = &problem.spec;
        ShapeKey {
            n: problem.input.n,
            c_in: problem.input.c,
            h: problem.input.h,
            w: problem.input.w,
            c_out: s.out_channels,
            kh: s.kernel[0],
            kw: s.kernel[1],
            stride: s.stride,
            padding: [s.padding.top, s.padding.left, s.padding.bottom, s.padding.right],
            dilation: s.dilation,
            groups: s.groups,
        }
    }
}

/// The full key of one cached decision.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CacheKey {
    /// The device and software.
    pub device: DeviceKey,
    /// The convolution and input shape.
    pub shape: ShapeKey,
    /// The kernel family the decision was measured on ([`Kernel::family`]: `tiled`,
    /// `tiled-f16`, `coop-f16`, `coop-f16x3`). Not the precision alone: f16 runs `coop-f16`
    /// or `tiled-f16` on one device, depending on whether cooperative matrices were enabled.
    pub kernel: String,
}

impl CacheKey {
    /// The key of `problem` tuned on `kernel` (its family; the config plays no part).
    pub fn new(device: DeviceKey, problem: &ConvProblem, kernel: &Kernel) -> Self {
        CacheKey { device, shape: ShapeKey::of(problem), kernel: kernel.family().to_string() }
    }
}

/// A decision tuned at batch m is reused for batch n (same everything else) when
/// max(m, n) ≤ `BATCH_REUSE_FACTOR` × min(m, n) ([`TuningCache::lookup_near`]).
pub const BATCH_REUSE_FACTOR: u32 = 2;

/// What the tuner decided for one key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CachedDecision {
    /// The config to run (the original when no candidate won).
    pub config: TileConfig,
    /// The config the tune started from.
    pub original: TileConfig,
    /// The decision threshold in percent.
    pub threshold_pct: f64,
    /// The winner's median gain over the original in percent (0 when the original was kept).
    pub gain_pct: f64,
    /// When the decision was made (RFC 3339, local time).
    pub tuned_at: String,
    /// The whole report of the tune (the table `wgconv tune` prints); `null` if not kept.
    #[serde(default)]
    pub report: Option<Value>,
}

/// The file of the autotuner's decisions (`Conv2dOptions::autotune`) in the cache
/// directory, beside [`FILE_NAME`].
pub const AUTOTUNE_FILE_NAME: &str = "autotune.json";

/// The key of one autotune decision: the device and software and the convolution and input
/// shape (as [`CacheKey`]'s), and what else decides which kernels run and how fast: the
/// precision, the tensors' layout and storage, the activation and whether there is a bias.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AutotuneKey {
    /// The device and software.
    pub device: DeviceKey,
    /// The convolution and input shape.
    pub shape: ShapeKey,
    /// `f32`, `f16`, `f16x3`.
    pub precision: String,
    /// `nchw`, `nhwc`.
    pub layout: String,
    /// `f32`, `f16`.
    pub storage: String,
    /// `none`, `relu`.
    pub activation: String,
    /// Whether the convolution adds a bias.
    pub bias: bool,
    /// `zeros`, `reflect`, `replicate`, `circular`: which families can run it.
    pub padding_mode: String,
    /// Whether every weight is finite: which families can run it.
    pub finite_weights: bool,
    /// What the device was opened with that decides which kernels run: cooperative matrices,
    /// `SHADER_F16`, the limits the kernels check.
    pub capabilities: String,
}

/// What the autotuner decided for one key: the fastest kernel of those it timed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AutotuneDecision {
    /// The kernel to run (`family:config`).
    pub kernel: String,
    /// Every kernel timed and its median time in milliseconds, in the order they were timed
    /// (the selection's own kernel first).
    pub timed: Vec<(String, f64)>,
    /// When the decision was made (RFC 3339, UTC).
    pub tuned_at: String,
}

/// Where the cache lives by default: `$WGCONV_CACHE_DIR`, else `dirs::cache_dir()/wgconv`.
pub fn default_dir() -> Option<PathBuf> {
    match std::env::var_os(DIR_ENV) {
        Some(d) if !d.is_empty() => Some(PathBuf::from(d)),
        _ => dirs::cache_dir().map(|d| d.join("wgconv")),
    }
}

/// The tuning cache file (see the module docs).
#[derive(Debug, Clone)]
pub struct TuningCache {
    path: PathBuf,
}

/// The parsed file: its entries kept as raw JSON so that entries this store does not
/// replace are written back as they were.
struct Document {
    entries: Vec<Value>,
}

impl TuningCache {
    /// The cache at its default location, if the platform has one.
    pub fn open_default() -> Option<Self> {
        default_dir().map(|d| TuningCache::in_dir(&d))
    }
    /// The cache file `dir/tuning.json`.
    pub fn in_dir(dir: &Path) -> Self {
        TuningCache { path: dir.join(FILE_NAME) }
    }
    /// A cache at an explicit file path.
    pub fn at(path: impl Into<PathBuf>) -> Self {
        TuningCache { path: path.into() }
    }
    /// The cache file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
    fn dir(&self) -> PathBuf {
        match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        }
    }
    fn lock_path(&self) -> PathBuf {
        let mut name = self.path.file_name().map(|n| n.to_os_string()).unwrap_or_else(|| FILE_NAME.into());
        name.push(".lock");
        self.path.with_file_name(name)
    }

    /// The decision stored under exactly this key, if any (and well formed).
    pub fn lookup(&self, key: &CacheKey) -> Option<CachedDecision> {
        let doc = self.read()?;
        // The last matching entry wins (a store replaces in place, so there is at most one).
        doc.entries.iter().rev().find_map(|raw| match parse_entry(raw) {
            Some((k, d)) if &k == key => Some(d),
            _ => None,
        })
    }

    /// The decision for `key`, else the one for the nearest batch within
    /// [`BATCH_REUSE_FACTOR`]× of `key`'s with everything else equal (device, software,
    /// kernel family, channels, input size, kernel, stride, padding, dilation, groups), with
    /// the batch it was measured at. Tile choice depends on the output's size mostly through
    /// the number of workgroups, which a factor of 2 in batch changes less than the configs'
    /// differences; beyond it a new tune is needed.
    pub fn lookup_near(&self, key: &CacheKey) -> Option<(CachedDecision, u32)> {
        let doc = self.read()?;
        let n = key.shape.n;
        let mut nearest: Option<(u32, u32, CachedDecision)> = None;
        for (k, d) in doc.entries.iter().rev().filter_map(parse_entry) {
            let m = k.shape.n;
            let same_but_batch =
                k.device == key.device && k.kernel == key.kernel && ShapeKey { n, ..k.shape } == key.shape;
            let (lo, hi) = (m.min(n), m.max(n));
            if !same_but_batch || hi > lo.saturating_mul(BATCH_REUSE_FACTOR) {
                continue;
            }
            if nearest.as_ref().is_none_or(|(distance, _, _)| hi - lo < *distance) {
                nearest = Some((hi - lo, m, d));
            }
        }
        nearest.map(|(_, m, d)| (d, m))
    }

    /// Every well-formed entry (for tests and diagnostics).
    pub fn entries(&self) -> Vec<(CacheKey, CachedDecision)> {
        self.read().map(|d| d.entries.iter().filter_map(parse_entry).collect()).unwrap_or_default()
    }

    /// Stores (inserts or replaces) the decision for `key`, atomically and under the lock.
    pub fn store(&self, key: &CacheKey, decision: &CachedDecision) -> Result<()> {
        self.store_entry(key, decision)
    }

    /// The autotuner's cache: `autotune.json` beside this file ([`AUTOTUNE_FILE_NAME`]),
    /// written and read with the same guarantees.
    pub fn autotune(&self) -> TuningCache {
        TuningCache { path: self.path.with_file_name(AUTOTUNE_FILE_NAME) }
    }

    /// The autotuner's decision stored under exactly this key, if any and well formed (its
    /// kernel's name parses).
    pub fn autotune_lookup(&self, key: &AutotuneKey) -> Option<AutotuneDecision> {
        let doc = self.read()?;
        doc.entries.iter().rev().find_map(|raw| {
            let k: AutotuneKey = serde_json::from_value(raw.get("key")?.clone()).ok()?;
            if &k != key {
                return None;
            }
            match raw.get("decision").cloned().map(serde_json::from_value::<AutotuneDecision>) {
                Some(Ok(d)) if Kernel::parse(&d.kernel).is_ok() => Some(d),
                _ => {
                    log::warn!("autotune cache {}: skipping a malformed entry", self.path.display());
                    None
                }
            }
        })
    }

    /// Stores the autotuner's decision for `key` (as [`TuningCache::store`]).
    pub fn autotune_store(&self, key: &AutotuneKey, decision: &AutotuneDecision) -> Result<()> {
        self.store_entry(key, decision)
    }

    /// Inserts or replaces the entry of `key` (any key type of this file), atomically and
    /// under the lock.
    fn store_entry<K: Serialize + serde::de::DeserializeOwned + PartialEq>(
        &self,
        key: &K,
        decision: &impl Serialize,
    ) -> Result<()> {
        let io =
            |what: &str, e: std::io::Error| Error::Cache(format!("tuning cache {}: {what}: {e}", self.path.display()));
        let dir = self.dir();
        fs::create_dir_all(&dir).map_err(|e| io("cannot create the directory", e))?;
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(self.lock_path())
            .map_err(|e| io("cannot open the lock file", e))?;
        lock.lock().map_err(|e| io("cannot lock", e))?;
        let result = (|| {
            remove_orphans(&dir, ORPHAN_AGE);
            let mut entries = self.read().map(|d| d.entries).unwrap_or_default();
            let new_entry = serde_json::json!({ "key": key, "decision": decision });
            let mut replaced = false;
            entries.retain_mut(|raw| match raw.get("key").and_then(|k| serde_json::from_value::<K>(k.clone()).ok()) {
                Some(k) if &k == key => {
                    if replaced {
                        false
                    } else {
                        *raw = new_entry.clone();
                        replaced = true;
                        true
                    }
                }
                _ => true,
            });
            if !replaced {
                entries.push(new_entry);
            }
            let doc = serde_json::json!({
                "schema": SCHEMA_VERSION,
                "written_by": concat!("wgconv ", env!("CARGO_PKG_VERSION")),
                "entries": entries,
            });
            let text = serde_json::to_string_pretty(&doc)
                .map_err(|e| Error::Cache(format!("tuning cache: cannot serialise: {e}")))?;
            let mut builder = tempfile::Builder::new();
            builder.prefix(TMP_PREFIX).suffix(TMP_SUFFIX);
            // tempfile's files are private (0600); the cache is meant to be shared.
            #[cfg(unix)]
            builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644));
            let mut tmp = builder.tempfile_in(&dir).map_err(|e| io("cannot create a temporary file", e))?;
            tmp.write_all(text.as_bytes()).map_err(|e| io("cannot write", e))?;
            tmp.write_all(b"\n").map_err(|e| io("cannot write", e))?;
            tmp.as_file().sync_all().map_err(|e| io("cannot sync", e))?;
            tmp.persist(&self.path).map_err(|e| io("cannot rename into place", e.error))?;
            Ok(())
        })();
        let _ = lock.unlock();
        result
    }

    /// Reads and checks the file. `None` (after a warning) when it is missing, unreadable,
    /// truncated, corrupt, of another schema, or not shaped like a cache.
    fn read(&self) -> Option<Document> {
        remove_orphans(&self.dir(), ORPHAN_AGE);
        let bytes = match fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => {
                log::warn!("tuning cache {}: cannot read ({e}); ignoring it", self.path.display());
                return None;
            }
        };
        let ignore = |why: String| {
            log::warn!("tuning cache {}: {why}; ignoring it (the next tune rewrites it)", self.path.display());
            None
        };
        let value: Value = match serde_json::from_slice(&bytes) {
            Ok(v) => v,
            Err(e) => return ignore(format!("not valid JSON (truncated or corrupt: {e})")),
        };
        let Some(obj) = value.as_object() else {
            return ignore("not a JSON object".into());
        };
        match obj.get("schema").and_then(Value::as_u64) {
            Some(v) if READABLE_SCHEMAS.iter().any(|r| *r as u64 == v) => {}
            Some(v) => return ignore(format!("schema version {v}, this wgconv reads {READABLE_SCHEMAS:?}")),
            None => return ignore("no schema version".into()),
        }
        let Some(entries) = obj.get("entries").and_then(Value::as_array) else {
            return ignore("no \"entries\" array".into());
        };
        Some(Document { entries: entries.clone() })
    }
}

/// One entry, if its key and decision parse and its configs are well formed.
fn parse_entry(raw: &Value) -> Option<(CacheKey, CachedDecision)> {
    let key: CacheKey = serde_json::from_value(raw.get("key")?.clone()).ok()?;
    let decision: CachedDecision = match raw.get("decision").cloned().map(serde_json::from_value) {
        Some(Ok(d)) => d,
        Some(Err(e)) => {
            log::warn!("tuning cache: skipping an entry for {} whose decision does not parse: {e}", key.device.adapter);
            return None;
        }
        None => return None,
    };
    // Each config must form the tiles of the kernel it was measured on (a register tile for
    // the SIMT kernels, a fragment layout for the cooperative ones).
    let check = |c: &TileConfig| -> Result<()> {
        let family = crate::families::family(&key.kernel)
            .ok_or_else(|| Error::ConfigParse(format!("unknown kernel family {:?}", key.kernel)))?;
        let kernel = family
            .reference()
            .with_tile(*c)
            .ok_or_else(|| Error::Cache(format!("kernel family {} has no tile config", key.kernel)))?;
        kernel.check_shape()
    };
    for cfg in [&decision.config, &decision.original] {
        if let Err(e) = check(cfg) {
            log::warn!("tuning cache: skipping an entry for {} with a malformed config: {e}", key.device.adapter);
            return None;
        }
    }
    Some((key, decision))
}

/// The tuner's decision for `problem` on this device, measured on `default`'s family (the
/// precision's default kernel here: its family is what the decision is keyed on): `default`
/// with the decided tile, if the device accepts it (a config refused by the device is
/// ignored with a warning). Reads the cache at its default location ([`default_dir`]); a
/// missing or unreadable cache, or a family without tiles, is a miss. What `Conv2d`
/// consults while it selects its kernel.
pub(crate) fn cached_decision(gpu: &Gpu, problem: &ConvProblem, default: &Kernel) -> Option<(Kernel, u32)> {
    default.tile()?;
    let cache = TuningCache::open_default()?;
    let key = CacheKey::new(DeviceKey::new(&gpu.info, gpu.runtime_checks()), problem, default);
    let (d, batch) = cache.lookup_near(&key)?;
    let kernel = default.with_tile(d.config)?;
    match kernel.check_limits(&gpu.kernel_limits()) {
        Ok(()) => Some((kernel, batch)),
        Err(e) => {
            log::warn!(
                "tuning cache {}: cached config refused by the device, ignoring it: {e}",
                cache.path().display()
            );
            None
        }
    }
}

/// A time as RFC 3339 in UTC, to the second (`2026-11-26T10:49:24Z`): the tuning report's
/// stamp, without a calendar crate in the library's dependencies.
pub fn rfc3339_utc(t: std::time::SystemTime) -> String {
    let secs = t.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem / 60 % 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Conv2dSpec, Shape4};

    fn device(adapter: &str) -> DeviceKey {
        DeviceKey {
            adapter: adapter.into(),
            vendor: 1,
            device: 2,
            driver: "d".into(),
            driver_info: "1.0".into(),
            backend: "Vulkan".into(),
            runtime_checks: false,
            wgconv_version: env!("CARGO_PKG_VERSION").into(),
            shader_hash: shader_hash(),
        }
    }

    fn problem() -> ConvProblem {
        Conv2dSpec::new(3, 8, 3).problem(Shape4::new(1, 3, 16, 16)).unwrap()
    }

    fn decision(tile: TileConfig) -> CachedDecision {
        CachedDecision {
            config: tile.with_stages(3),
            original: tile,
            threshold_pct: 2.0,
            gain_pct: 5.0,
            tuned_at: "now".into(),
            report: None,
        }
    }

    #[test]
    fn shader_hash_is_stable_hex() {
        let h = shader_hash();
        assert_eq!(h.len(), 16);
        assert!(h.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(h, shader_hash());
    }

    #[test]
    fn keys_name_the_family_only() {
        let a = CacheKey::new(device("A"), &problem(), &Kernel::parse("coop-f16:m64n96k16-t4x12-w4-s1").unwrap());
        let b = CacheKey::new(device("A"), &problem(), &Kernel::parse("coop-f16").unwrap());
        assert_eq!(a.kernel, "coop-f16");
        assert_eq!(a, b);
        let c = CacheKey::new(device("A"), &problem(), &Kernel::parse("tiled-f16").unwrap());
        assert_ne!(a, c);
    }

    #[test]
    fn store_and_lookup_round_trip_and_skip_malformed_entries() {
        let dir = tempfile::tempdir().unwrap();
        let cache = TuningCache::in_dir(dir.path());
        let tiled = Kernel::parse("tiled").unwrap();
        let key = CacheKey::new(device("A"), &problem(), &tiled);
        assert!(cache.lookup(&key).is_none());
        let d = decision(tiled.tile().unwrap());
        cache.store(&key, &d).unwrap();
        assert_eq!(cache.lookup(&key), Some(d.clone()));
        let text: Value = serde_json::from_slice(&fs::read(cache.path()).unwrap()).unwrap();
        assert_eq!(text["schema"], SCHEMA_VERSION);

        // A family without tiles, an unknown family, and a tile that is no register tile.
        let mut v = text.clone();
        let entries = v["entries"].as_array_mut().unwrap();
        for family in ["direct", "nope"] {
            let mut e = entries[0].clone();
            e["key"]["kernel"] = family.into();
            entries.push(e);
        }
        let mut bad = entries[0].clone();
        bad["key"]["device"]["adapter"] = "B".into();
        bad["decision"]["config"]["thread_m"] = 3.into();
        entries.push(bad);
        fs::write(cache.path(), serde_json::to_vec(&v).unwrap()).unwrap();
        assert_eq!(cache.entries().len(), 1);
        let mut key_b = key.clone();
        key_b.device.adapter = "B".into();
        assert!(cache.lookup(&key_b).is_none());

        // Older schemas are ignored, and the next store rewrites the file.
        v["schema"] = 2.into();
        fs::write(cache.path(), serde_json::to_vec(&v).unwrap()).unwrap();
        assert!(cache.lookup(&key).is_none());
        cache.store(&key, &d).unwrap();
        assert_eq!(cache.entries().len(), 1);
        assert_eq!(cache.lookup(&key), Some(d));
    }
}
