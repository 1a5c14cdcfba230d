//! Attachment bytes stored off the connection's thread.
//!
//! Storing an attachment is blocking work (hashing, compressing, and
//! storage writes that may wait behind another request's fsync in the
//! storage engine's write queue). A connection's thread runs many
//! connections, so an [`Upload`] hands the bytes to a task on the
//! blocking pool through a small bounded channel and the connection's
//! thread only reads the network.
//!
//! Invariants:
//! - Memory is bounded by the channel: at most [`QUEUED`] frames wait,
//!   and the reader waits for the writer (backpressure).
//! - Only an upload whose end was announced ([`Upload::finish`]) stores a
//!   blob; one dropped before (the client went away, a limit was hit)
//!   drops its writer unfinished, which deletes what it wrote.

use bytes::Bytes;
use settee_core::att::{AttStub, BlobWrites};
use settee_db::atts::AttWriter;
use tokio::sync::{mpsc, oneshot};

use crate::error::{ApiError, ApiResult};

/// Frames queued between the connection and the writer.
const QUEUED: usize = 4;

enum Msg {
    Data(Bytes),
    End(String),
}

/// An attachment being stored by a blocking task (see the module doc).
pub struct Upload {
    tx: mpsc::Sender<Msg>,
    done: oneshot::Receiver<settee_db::Result<(AttStub, BlobWrites)>>,
    length: u64,
}

impl Upload {
    /// Starts the task that feeds `writer`.
    pub fn start(writer: AttWriter) -> Upload {
        let (tx, mut rx) = mpsc::channel::<Msg>(QUEUED);
        let (done_tx, done) = oneshot::channel();
        tokio::task::spawn_blocking(move || {
            let mut writer = writer;
            let result = loop {
                match rx.blocking_recv() {
                    Some(Msg::Data(bytes)) => {
                        if let Err(e) = writer.write_bytes(&bytes) {
                            break Err(e);
                        }
                    }
                    Some(Msg::End(content_type)) => break writer.finish(content_type),
                    // Abandoned: the writer is dropped unfinished.
                    None => return,
                }
            };
            let _ = done_tx.send(result);
        });
        Upload {
            tx,
            done,
            length: 0,
        }
    }

    /// Queues `bytes`, waiting while the writer is behind.
    pub async fn write(&mut self, bytes: Bytes) -> ApiResult<()> {
        self.length += bytes.len() as u64;
        if self.tx.send(Msg::Data(bytes)).await.is_err() {
            // The writer stopped on an error: that error is the answer.
            return Err(self.failure().await);
        }
        Ok(())
    }

    /// Bytes queued so far.
    pub fn length(&self) -> u64 {
        self.length
    }

    /// Ends the upload: the stored attachment's stub, and the writes the
    /// document write naming it must carry (a small attachment's bytes).
    pub async fn finish(mut self, content_type: String) -> ApiResult<(AttStub, BlobWrites)> {
        if self.tx.send(Msg::End(content_type)).await.is_err() {
            return Err(self.failure().await);
        }
        match (&mut self.done).await {
            Ok(result) => Ok(result?),
            Err(_) => Err(stopped()),
        }
    }

    async fn failure(&mut self) -> ApiError {
        match (&mut self.done).await {
            Ok(Err(e)) => e.into(),
            _ => stopped(),
        }
    }
}

fn stopped() -> ApiError {
    ApiError::new(
        axum::http::StatusCode::INTERNAL_SERVER_ERROR,
        "unknown_error",
        "the attachment writer stopped",
    )
}
