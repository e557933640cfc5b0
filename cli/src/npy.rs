//! `.npy` input and output of `wgconv run`: float32 little-endian (`<f4`), C order,
//! format versions 1–3, read and written with npyz. Every refusal is one line naming the
//! flag, the file and the bad value; the output is written to a temporary file next to
//! its destination and renamed over it only once complete.

use crate::cli::{CliError, CliResult};
use std::io::Write;
use std::path::{Path, PathBuf};

/// A float32 array read from a `.npy` file.
pub struct Array {
    pub shape: Vec<u64>,
    pub data: Vec<f32>,
}

/// The one dtype the contract accepts.
const F32_LE: &str = "<f4";

fn err(flag: &str, path: &Path, msg: impl std::fmt::Display) -> CliError {
    CliError(format!("{flag} {}: {msg}", path.display()))
}

/// Runs `f`, turning a panic inside it into `None` without printing a trace (npyz can
/// overflow on absurd header shapes in builds with overflow checks).
fn quietly<T>(f: impl FnOnce() -> T + std::panic::UnwindSafe) -> Option<T> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let result = std::panic::catch_unwind(f);
    std::panic::set_hook(hook);
    result.ok()
}

/// A multi-line parser message (npyz's header errors draw the text with a caret) as one
/// line: the first line, the position and the notes.
fn one_line(msg: &str) -> String {
    let lines: Vec<&str> = msg.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let Some(first) = lines.first() else { return String::new() };
    if lines.len() == 1 {
        return first.to_string();
    }
    let mut out = first.trim_end_matches(':').to_string();
    if let Some(pos) = lines.iter().find_map(|l| l.strip_prefix("-->")) {
        out += &format!(" at {}", pos.trim());
    }
    for note in lines.iter().filter_map(|l| l.strip_prefix("= ")) {
        out += &format!(": {}", note.trim());
    }
    out
}

/// A readable name for common dtypes, for the error message.
fn dtype_name(descr: &str) -> &'static str {
    let t = descr.trim_matches('\'');
    let body = t.trim_start_matches(['<', '>', '|', '=']);
    match body {
        "f2" => "float16",
        "f4" if t.starts_with('>') => "float32, big-endian",
        "f4" => "float32",
        "f8" => "float64",
        "f16" => "float128",
        "i1" => "int8",
        "i2" => "int16",
        "i4" => "int32",
        "i8" => "int64",
        "u1" => "uint8",
        "u2" => "uint16",
        "u4" => "uint32",
        "u8" => "uint64",
        "b1" => "bool",
        "c8" => "complex64",
        "c16" => "complex128",
        _ => "not float32",
    }
}

/// Reads a float32 C-order array of rank `dims.len()` (`dims` names the axes for the
/// message) with no zero dimension. `flag` is the option the path came from.
pub fn read_f32(path: &Path, flag: &str, dims: &[&str]) -> CliResult<Array> {
    let file = std::fs::File::open(path).map_err(|e| err(flag, path, format!("cannot read: {e}")))?;
    let file_len = file.metadata().map_err(|e| err(flag, path, format!("cannot read: {e}")))?.len();
    let mut reader = Counting { inner: std::io::BufReader::new(file), count: 0 };
    // Nothing observes `reader` after a panic but the error path.
    let parsed = quietly(std::panic::AssertUnwindSafe(|| npyz::NpyHeader::from_reader(&mut reader)));
    let header = match parsed {
        None => return Err(err(flag, path, "not a valid .npy file: malformed header")),
        Some(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            return Err(err(flag, path, format!("not a valid .npy file: truncated header ({file_len} bytes)")))
        }
        Some(Err(e)) => return Err(err(flag, path, format!("not a valid .npy file: {}", one_line(&e.to_string())))),
        Some(Ok(h)) => h,
    };
    // BufReader reads ahead, so count what the parser consumed, not what the file gave.
    let data_start = reader.count;

    let descr = header.dtype().descr();
    let is_f32_le = matches!(header.dtype(), npyz::DType::Plain(ref t) if t.to_string() == F32_LE);
    if !is_f32_le {
        return Err(err(
            flag,
            path,
            format!(
                "dtype {descr} ({}) is not supported, expected '{F32_LE}' (float32, little-endian); \
                 convert with a.astype('{F32_LE}')",
                dtype_name(&descr)
            ),
        ));
    }
    if header.order() == npyz::Order::Fortran {
        return Err(err(
            flag,
            path,
            "is stored in Fortran order (fortran_order: True), expected C order; \
             save np.ascontiguousarray(a) instead",
        ));
    }
    let shape = header.shape().to_vec();
    let shape_str = format!("{shape:?}");
    if shape.len() != dims.len() {
        return Err(err(
            flag,
            path,
            format!(
                "shape {shape_str} has {} dimension{}, expected {}: [{}]",
                shape.len(),
                if shape.len() == 1 { "" } else { "s" },
                dims.len(),
                dims.join(", ")
            ),
        ));
    }
    if let Some(i) = shape.iter().position(|&d| d == 0) {
        return Err(err(flag, path, format!("shape {shape_str} has a zero dimension ({} = 0)", dims[i])));
    }
    let elems = shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d));
    let data_bytes = elems.and_then(|n| n.checked_mul(4)).filter(|&b| b <= isize::MAX as u64);
    let Some(data_bytes) = data_bytes else {
        return Err(err(flag, path, format!("shape {shape_str} is too large")));
    };
    let have = file_len.saturating_sub(data_start);
    if have < data_bytes {
        return Err(err(
            flag,
            path,
            format!(
                "truncated: the header declares shape {shape_str} ({} float32 = {data_bytes} bytes of data) \
                 but only {have} bytes follow it",
                data_bytes / 4
            ),
        ));
    }
    if have > data_bytes {
        return Err(err(
            flag,
            path,
            format!(
                "malformed: {} unexpected bytes follow the {data_bytes} bytes of data its header declares \
                 (shape {shape_str})",
                have - data_bytes
            ),
        ));
    }
    let data: Vec<f32> = npyz::NpyFile::with_header(header, reader)
        .into_vec()
        .map_err(|e| err(flag, path, format!("cannot read the data: {e}")))?;
    Ok(Array { shape, data })
}

/// A reader that counts the bytes it has handed out.
struct Counting<R> {
    inner: R,
    count: u64,
}

impl<R: std::io::Read> std::io::Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count += n as u64;
        Ok(n)
    }
}

/// Temporary files of an interrupted write older than this are removed by the next
/// [`PendingOutput::create`] for the same destination (a younger one may be a concurrent
/// run's).
const ORPHAN_AGE: std::time::Duration = std::time::Duration::from_secs(60);

/// The output file, checked before any work so that an unwritable destination fails fast.
/// The temporary file the array is written to exists only while [`PendingOutput::finish`]
/// writes it (a run killed while the GPU works leaves nothing); one left by a run killed
/// during that write is removed by the next run that writes the same destination. An
/// existing destination stays untouched until the new file replaces it whole.
pub struct PendingOutput {
    path: PathBuf,
    flag: &'static str,
    dir: PathBuf,
    prefix: String,
}

impl PendingOutput {
    pub fn create(path: &Path, flag: &'static str) -> CliResult<Self> {
        if path.is_dir() {
            return Err(err(flag, path, "is a directory"));
        }
        let name = path.file_name().ok_or_else(|| err(flag, path, "is not a file name"))?;
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        if !dir.is_dir() {
            return Err(err(
                flag,
                path,
                format!("cannot create a file in {}: the directory does not exist", dir.display()),
            ));
        }
        let out = PendingOutput {
            path: path.to_path_buf(),
            flag,
            dir: dir.to_path_buf(),
            prefix: format!(".{}.", name.to_string_lossy()),
        };
        out.remove_orphans();
        // Writability, now rather than after the GPU work: a probe file, removed at once.
        drop(out.temp()?);
        Ok(out)
    }

    /// A temporary file beside the destination, with the permissions a plain write would
    /// give (NamedTempFile's own are 0600): the existing file's, else 0666 less the umask.
    fn temp(&self) -> CliResult<tempfile::NamedTempFile> {
        let mut builder = tempfile::Builder::new();
        builder.prefix(&self.prefix).suffix(".tmp");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let perms = std::fs::metadata(&self.path)
                .map(|m| m.permissions())
                .unwrap_or_else(|_| std::fs::Permissions::from_mode(0o666));
            builder.permissions(perms);
        }
        builder
            .tempfile_in(&self.dir)
            .map_err(|e| err(self.flag, &self.path, format!("cannot create a file in {}: {e}", self.dir.display())))
    }

    /// Removes `.<name>.*.tmp` files older than [`ORPHAN_AGE`] beside the destination.
    fn remove_orphans(&self) {
        let Ok(listing) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let now = std::time::SystemTime::now();
        for entry in listing.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if !(name.starts_with(&self.prefix) && name.ends_with(".tmp")) {
                continue;
            }
            let age = entry.metadata().and_then(|m| m.modified()).ok().and_then(|t| now.duration_since(t).ok());
            if age.is_some_and(|a| a >= ORPHAN_AGE) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }

    /// Writes the array (`<f4`, C order) and moves it to the destination.
    pub fn finish(self, shape: &[u64], data: &[f32]) -> CliResult<()> {
        use npyz::WriterBuilder;
        let (flag, path) = (self.flag, self.path.clone());
        let mut temp = self.temp()?;
        let write_err = |e: std::io::Error| err(flag, &path, format!("cannot write: {e}"));
        let dtype = npyz::DType::new_scalar(F32_LE.parse().expect("a valid type string"));
        {
            let file = std::io::BufWriter::new(temp.as_file_mut());
            let mut writer = npyz::WriteOptions::<f32>::new()
                .dtype(dtype)
                .shape(shape)
                .writer(file)
                .begin_nd()
                .map_err(write_err)?;
            writer.extend(data.iter().copied()).map_err(write_err)?;
            writer.finish().map_err(write_err)?;
        }
        temp.as_file_mut().flush().map_err(write_err)?;
        temp.as_file().sync_all().map_err(write_err)?;
        temp.persist(&path).map_err(|e| err(flag, &path, format!("cannot replace the file: {}", e.error)))?;
        Ok(())
    }
}
