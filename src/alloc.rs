//! Fallible host allocation: every buffer whose size comes from the caller's shapes (packed
//! weights, gather tables, read-back, reference outputs) is reserved with `try_reserve`, so
//! that a size the host cannot hold is an [`Error::OutOfMemory`] naming it, not an abort of
//! the whole process (Rust's infallible allocations abort when the allocator refuses).

use crate::error::{Error, Result};

/// The error of a refused host allocation of `len` elements of `T`.
pub(crate) fn refused<T>(what: &str, len: usize) -> Error {
    Error::OutOfMemory {
        stage: "host allocation",
        what: what.to_string(),
        bytes: (len as u64).saturating_mul(std::mem::size_of::<T>() as u64),
        message: "the allocator refused it".into(),
    }
}

/// An empty vector with room for `len` elements, or `OutOfMemory` naming `what`.
pub(crate) fn vec_with_capacity<T>(len: usize, what: &str) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| refused::<T>(what, len))?;
    Ok(v)
}

/// `len` zeros, or `OutOfMemory` naming `what`.
pub(crate) fn zeroed_vec<T: bytemuck::Zeroable + Clone>(len: usize, what: &str) -> Result<Vec<T>> {
    let mut v = vec_with_capacity(len, what)?;
    v.resize(len, T::zeroed());
    Ok(v)
}

/// A copy of a slice, or `OutOfMemory` naming `what`.
pub(crate) fn copy_of<T: Clone>(values: &[T], what: &str) -> Result<Vec<T>> {
    let mut v = vec_with_capacity(values.len(), what)?;
    v.extend_from_slice(values);
    Ok(v)
}

/// The bytes of a slice of plain values, or `OutOfMemory` naming `what`.
pub(crate) fn bytes_of<T: bytemuck::Pod>(values: &[T], what: &str) -> Result<Vec<u8>> {
    copy_of(bytemuck::cast_slice::<T, u8>(values), what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_is_typed_and_named() {
        let e = zeroed_vec::<f32>(usize::MAX / 8, "the test's buffer").unwrap_err();
        match &e {
            Error::OutOfMemory { stage, what, bytes, .. } => {
                assert_eq!(*stage, "host allocation");
                assert_eq!(what, "the test's buffer");
                assert_eq!(*bytes, (usize::MAX / 8) as u64 * 4);
            }
            other => panic!("{other:?}"),
        }
        assert!(e.to_string().contains("the test's buffer"), "{e}");
        assert_eq!(zeroed_vec::<u16>(3, "x").unwrap(), vec![0, 0, 0]);
        assert_eq!(bytes_of(&[1u16], "x").unwrap(), vec![1, 0]);
    }
}
