//! wgpu error scopes: validation and out-of-memory errors of a stretch of wgpu calls come
//! back as typed errors instead of reaching wgpu's default handler (which panics); and the
//! future of a buffer mapping.

use crate::error::{Error, Result};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

/// The error scopes of a stretch of wgpu calls.
pub(crate) struct ErrorScope {
    validation: wgpu::ErrorScopeGuard,
    oom: wgpu::ErrorScopeGuard,
}

impl ErrorScope {
    /// Pushes the scopes.
    pub fn push(device: &wgpu::Device) -> Self {
        let oom = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = device.push_error_scope(wgpu::ErrorFilter::Validation);
        ErrorScope { validation, oom }
    }

    /// Pops the scopes; the first error caught, naming `stage`. Out of memory is reported
    /// as such even where it also made later calls invalid (a buffer that could not be
    /// created is then "invalid" too).
    pub async fn finish_async(self, stage: &'static str) -> Result<()> {
        // Both scopes are popped (innermost first) before either is awaited: on the web an
        // await lets other work run, and a scope left on the stack would catch its errors.
        let (validation, oom) = (self.validation.pop(), self.oom.pop());
        let (validation, oom) = (validation.await, oom.await);
        match (oom, validation) {
            (Some(e), _) => {
                Err(Error::OutOfMemory { stage, what: "device resources".into(), bytes: 0, message: e.to_string() })
            }
            (None, Some(e)) => Err(Error::Wgpu { stage, message: e.to_string() }),
            (None, None) => Ok(()),
        }
    }

    /// Pops the scopes pushed around the creation of one buffer: out of memory is reported
    /// as such, naming the buffer and its size (rather than the validation error a later
    /// use of the invalid buffer would give).
    pub async fn finish_buffer_async(self, what: &str, bytes: u64) -> Result<()> {
        let (validation, oom) = (self.validation.pop(), self.oom.pop());
        let (validation, oom) = (validation.await, oom.await);
        match (oom, validation) {
            (Some(e), _) => Err(Error::OutOfMemory {
                stage: "buffer creation",
                what: what.to_string(),
                bytes,
                message: e.to_string(),
            }),
            (None, Some(e)) => {
                Err(Error::Wgpu { stage: "buffer creation", message: format!("{what} ({bytes} B): {e}") })
            }
            (None, None) => Ok(()),
        }
    }

    /// [`ErrorScope::finish_buffer_async`], blocking (on wasm32 see [`ErrorScope::finish`]).
    pub fn finish_buffer(self, what: &str, bytes: u64) -> Result<()> {
        #[cfg(not(target_arch = "wasm32"))]
        {
            pollster::block_on(self.finish_buffer_async(what, bytes))
        }
        #[cfg(target_arch = "wasm32")]
        {
            let _ = (what, bytes);
            drop(self);
            Ok(())
        }
    }

    /// [`ErrorScope::finish_async`], blocking. On wasm32, where nothing may block, errors
    /// of the synchronous calls reach the device's uncaptured-error handler instead (the
    /// asynchronous calls check their scopes).
    pub fn finish(self, stage: &'static str) -> Result<()> {
        #[cfg(not(target_arch = "wasm32"))]
        {
            pollster::block_on(self.finish_async(stage))
        }
        #[cfg(target_arch = "wasm32")]
        {
            let _ = stage;
            drop(self);
            Ok(())
        }
    }
}

/// The outcome of a `map_async`, once its callback ran.
type MapState = Arc<Mutex<(Option<std::result::Result<(), wgpu::BufferAsyncError>>, Option<Waker>)>>;

/// A buffer slice's mapping as a future (its callback completes it; on native the caller
/// polls the device so that the callback runs).
pub(crate) struct MapFuture {
    state: MapState,
}

impl MapFuture {
    /// Starts mapping `slice` for reading.
    pub fn new(slice: &wgpu::BufferSlice<'_>) -> MapFuture {
        let state: MapState = Arc::new(Mutex::new((None, None)));
        let done = state.clone();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let mut s = done.lock().unwrap_or_else(|e| e.into_inner());
            s.0 = Some(r);
            if let Some(w) = s.1.take() {
                w.wake();
            }
        });
        MapFuture { state }
    }
}

impl Future for MapFuture {
    type Output = std::result::Result<(), wgpu::BufferAsyncError>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match s.0.take() {
            Some(r) => Poll::Ready(r),
            None => {
                s.1 = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}
