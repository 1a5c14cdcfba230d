//! Responses produced by blocking scans (`_all_docs`, …): the scan runs on
//! the blocking pool and writes into a [`Sink`]; small answers become one
//! plain response (with Content-Length), large ones stream in chunks.
//!
//! Invariants:
//! - Memory per response is bounded by [`CHUNK_BYTES`] plus one row: the
//!   sink hands chunks to a bounded channel and the scan waits for the
//!   client (backpressure).
//! - An error before the first chunk becomes a proper JSON error response;
//!   an error after it aborts the connection (the status line is gone), so
//!   a client never mistakes a truncated answer for a complete one.
//! - A client that disconnects stops the scan at the next chunk.
//! - [`quick_first_response`] runs a scan on the connection's own thread
//!   only when the scan says it is quick (no index to build, no
//!   unbounded skipping or looking up; see its callers) and its answer
//!   fits in one chunk; otherwise the scan runs again from the start on
//!   the blocking pool, so the work wasted is at most one chunk's worth.
//!   A lone client's query then costs no thread hand-off (a wake-up of
//!   another thread is tens of microseconds on a VM).

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::Response;
use bytes::Bytes;
use tokio::sync::mpsc;

use crate::error::{ApiError, ApiResult};
use crate::render::json_response;

/// Bytes buffered before a chunk is sent.
pub const CHUNK_BYTES: usize = 64 * 1024;

enum Msg {
    Chunk(Bytes),
    Done(Bytes),
    Fail(ApiError),
}

/// Where a scan writes its output.
pub struct Sink {
    pub buf: String,
    tx: Option<mpsc::Sender<Msg>>,
    gone: bool,
    /// A quick attempt's sink: filling a chunk stops the scan.
    quick: bool,
}

impl Sink {
    /// A sink that only collects (for answers assembled in memory).
    pub fn collect() -> Sink {
        Sink {
            buf: String::new(),
            tx: None,
            gone: false,
            quick: false,
        }
    }

    /// Sends the buffer if it is large; false when the client is gone and
    /// the scan should stop.
    pub fn flush_if_full(&mut self) -> bool {
        if self.buf.len() >= CHUNK_BYTES {
            if self.quick {
                self.gone = true;
            } else if let Some(tx) = &self.tx {
                let chunk = Bytes::from(std::mem::take(&mut self.buf));
                if tx.blocking_send(Msg::Chunk(chunk)).is_err() {
                    self.gone = true;
                }
            }
        }
        !self.gone
    }
}

/// Runs `scan` on the blocking pool and answers with what it writes.
pub async fn blocking_response<F>(scan: F) -> ApiResult<Response>
where
    F: FnOnce(&mut Sink) -> ApiResult<()> + Send + 'static,
{
    let (tx, mut rx) = mpsc::channel::<Msg>(4);
    let producer = tx.clone();
    tokio::task::spawn_blocking(move || {
        let mut sink = Sink {
            buf: String::with_capacity(4096),
            tx: Some(producer.clone()),
            gone: false,
            quick: false,
        };
        let msg = match scan(&mut sink) {
            Ok(()) => Msg::Done(Bytes::from(sink.buf)),
            Err(e) => Msg::Fail(e),
        };
        // The receiver is gone only if the client went away.
        let _ = producer.blocking_send(msg);
    });
    drop(tx);
    let first = rx.recv().await.ok_or_else(|| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "unknown_error",
            "scan failed",
        )
    })?;
    let first = match first {
        Msg::Done(b) => {
            let mut resp = json_response(StatusCode::OK, String::new());
            *resp.body_mut() = Body::from(b);
            return Ok(resp);
        }
        Msg::Fail(e) => return Err(e),
        Msg::Chunk(b) => b,
    };
    let stream = futures_util::stream::unfold((Some(first), rx), |(first, mut rx)| async move {
        if let Some(b) = first {
            return Some((Ok::<Bytes, std::io::Error>(b), (None, rx)));
        }
        match rx.recv().await? {
            Msg::Chunk(b) | Msg::Done(b) => Some((Ok(b), (None, rx))),
            Msg::Fail(e) => Some((Err(std::io::Error::other(e.reason.to_string())), (None, rx))),
        }
    });
    let mut resp = json_response(StatusCode::OK, String::new());
    // Fused: the gzip layer polls the body again after its end, and an
    // `Unfold` polled after `None` panics (the connection then breaks
    // mid-answer for every gzip client on responses over one chunk).
    *resp.body_mut() = Body::from_stream(futures_util::StreamExt::fuse(stream));
    Ok(resp)
}

/// How a scan given to [`quick_first_response`] is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// On the connection's thread: answer only if quick.
    Quick,
    /// On the blocking pool: answer in full.
    Full,
}

/// Runs `scan` at once on this thread as an [`Attempt::Quick`], which
/// answers `false` (having written nothing) when it would not be quick;
/// then, or when its answer outgrows one chunk, runs it as an
/// [`Attempt::Full`] on the blocking pool, as [`blocking_response`].
pub async fn quick_first_response<F>(scan: F) -> ApiResult<Response>
where
    F: Fn(&mut Sink, Attempt) -> ApiResult<bool> + Send + 'static,
{
    let mut sink = Sink {
        quick: true,
        ..Sink::collect()
    };
    if scan(&mut sink, Attempt::Quick)? && !sink.gone {
        return Ok(json_response(StatusCode::OK, sink.buf));
    }
    drop(sink);
    blocking_response(move |sink| scan(sink, Attempt::Full).map(drop)).await
}
