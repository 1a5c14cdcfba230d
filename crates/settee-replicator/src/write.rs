//! The writing half of replication, shared by the replicator, `post-docs`
//! and `copy`: documents go to `_bulk_docs` in batches sized by a [`Sizer`];
//! revisions with large attachments are streamed from the source one by
//! one ([`Sink::stream`]), never held in memory whole.
//!
//! Invariants:
//! - every document handed to [`Sink::write`] is either acknowledged by the
//!   server, reported to the sink's [`Report`] (`id`, `error`, `reason`,
//!   and the input `line` when known), or the call returns a fatal error
//!   naming how many documents were not written — never dropped silently;
//! - a 413 or a stalled request (timeout) halves the batch and sends the
//!   same documents again; transient failures (connection, 5xx) are retried
//!   with backoff by the client first. With `new_edits=false` resending is
//!   idempotent; with `new_edits=true` a resent batch that the server had
//!   applied shows up as conflicts, which are reported.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::value::RawValue;
use settee_client::adapt::Sizer;
use settee_client::{Db, RetryPolicy};

use crate::read::Streamed;

/// A write that cannot go on: the message says how many documents were
/// not written and why.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct WriteError(pub String);

/// Where a sink tells what it could not write and when it slowed down.
pub trait Report: Send + Sync {
    /// The target refused one document (`line`: its input line, if known).
    fn refused(&self, id: Option<&str>, line: Option<u64>, error: &str, reason: &str);
    /// A stalled request answered with smaller batches.
    fn stalled(&self, message: &str);
}

/// A [`Report`] to the log (the replicator's).
#[derive(Debug, Default)]
pub struct LogReport;

impl Report for LogReport {
    fn refused(&self, id: Option<&str>, _line: Option<u64>, error: &str, reason: &str) {
        tracing::warn!(?id, error, reason, "the target refused a document");
    }
    fn stalled(&self, message: &str) {
        tracing::warn!("{message}");
    }
}

/// Revisions copied by themselves at once ([`Sink::stream`]).
pub const STREAMS_IN_FLIGHT: usize = 2;
/// How long one streamed revision may take (its attachments may be
/// large); a stalled one is given up after it.
pub const STREAM_TIMEOUT: Duration = Duration::from_secs(3600);

/// Consecutive stalls at batch size 1 before giving up.
const STALLS_MAX: u32 = 6;
/// Largest write batch chosen automatically; write size barely matters
/// (the seed), and smaller requests survive proxies better.
pub const BATCH_DOCS_MAX: usize = 2000;
pub const BATCH_DOCS_START: usize = 500;
/// Bytes per `_bulk_docs` request the sizer aims below.
pub const BATCH_BYTES_MAX: usize = 16 << 20;

pub struct Sink {
    db: Db,
    report: Arc<dyn Report>,
    new_edits: bool,
    pub sizer: Sizer,
    retry: RetryPolicy,
    /// Documents acknowledged.
    pub written: u64,
    /// Documents reported as failed.
    pub failed: u64,
    /// Of those, `conflict` errors.
    pub conflicts: u64,
}

impl Sink {
    /// `batch`: a fixed size chosen by the user, or `None` for automatic.
    pub fn new(
        db: Db,
        new_edits: bool,
        batch: Option<usize>,
        retry: RetryPolicy,
        report: Arc<dyn Report>,
    ) -> Sink {
        let sizer = match batch {
            Some(n) => Sizer::fixed(n),
            None => Sizer::adaptive(
                BATCH_DOCS_START,
                1,
                BATCH_DOCS_MAX,
                Duration::from_secs(2),
                BATCH_BYTES_MAX,
            ),
        };
        Sink {
            db,
            report,
            new_edits,
            sizer,
            // Timeouts are answered by shrinking, not by resending as is.
            retry: RetryPolicy {
                retry_timeouts: false,
                ..retry
            },
            written: 0,
            failed: 0,
            conflicts: 0,
        }
    }

    /// Writes `docs`; `lines[i]` is the input line of `docs[i]` when known.
    pub async fn write(
        &mut self,
        docs: &[Box<RawValue>],
        lines: Option<&[u64]>,
    ) -> Result<(), WriteError> {
        let mut i = 0;
        let mut stalls = 0u32;
        while i < docs.len() {
            let n = self.sizer.size().min(docs.len() - i);
            let chunk = &docs[i..i + n];
            let bytes: usize = chunk.iter().map(|d| d.get().len()).sum();
            let t0 = Instant::now();
            match self
                .db
                .bulk_docs(chunk, self.new_edits, Some(self.retry))
                .await
            {
                Ok(results) => {
                    self.sizer.observe(n, bytes, t0.elapsed());
                    self.account(chunk, lines.map(|l| &l[i..i + n]), &results)?;
                    stalls = 0;
                    i += n;
                }
                Err(e) if e.is_too_large() => {
                    if !self.sizer.shrink() {
                        if n == 1 {
                            self.report(
                                doc_id(&chunk[0]).as_deref(),
                                lines.map(|l| l[i]),
                                "too_large",
                                &e.to_string(),
                            );
                            self.failed += 1;
                            i += 1;
                            continue;
                        }
                        return Err(self.fatal(docs.len() - i, lines.map(|l| l[i]), &e));
                    }
                    tracing::warn!(
                        batch = self.sizer.size(),
                        "413 from _bulk_docs; halving the batch"
                    );
                }
                Err(e) if e.is_timeout() => {
                    stalls += 1;
                    if !self.sizer.shrink() && stalls >= STALLS_MAX {
                        return Err(self.fatal(docs.len() - i, lines.map(|l| l[i]), &e));
                    }
                    self.report.stalled(&format!(
                        "write stalled ({e}); retrying with batches of {}",
                        self.sizer.size()
                    ));
                    tokio::time::sleep(self.retry.delay(stalls)).await;
                }
                Err(e) => return Err(self.fatal(docs.len() - i, lines.map(|l| l[i]), &e)),
            }
        }
        Ok(())
    }

    /// Copies `items` from `source` one by one, attachments streamed
    /// ([`Db::copy_revision`]), [`STREAMS_IN_FLIGHT`] at a time. A
    /// revision the target refuses (4xx) is reported and counted as
    /// failed; any other failure (after the client's retries) ends the
    /// write.
    pub async fn stream(&mut self, source: &Db, items: &[Streamed]) -> Result<(), WriteError> {
        let target = self.db.with_retry(self.retry);
        let source = source.with_retry(self.retry);
        for (k, group) in items.chunks(STREAMS_IN_FLIGHT).enumerate() {
            let copies = group.iter().cloned().map(|it| {
                let (source, target) = (source.clone(), target.clone());
                async move {
                    let r = source
                        .copy_revision(&target, &it.id, &it.rev, &it.atts_since, STREAM_TIMEOUT)
                        .await;
                    (it, r)
                }
            });
            for (it, r) in futures_util::future::join_all(copies).await {
                match r {
                    Ok(_) => self.written += 1,
                    Err(settee_client::Error::Couch {
                        status: 400..=499,
                        error,
                        reason,
                        ..
                    }) if error != "unauthorized" => {
                        self.report(Some(&it.id), None, &error, &reason);
                        self.failed += 1;
                    }
                    Err(e) => {
                        let left = items.len() - k * STREAMS_IN_FLIGHT;
                        return Err(self.fatal(left, None, &e));
                    }
                }
            }
        }
        Ok(())
    }

    fn fatal(&self, left: usize, line: Option<u64>, e: &settee_client::Error) -> WriteError {
        let at = line
            .map(|l| format!(" from input line {l}"))
            .unwrap_or_default();
        WriteError(format!(
            "{left} documents{at} not written ({} written, {} failed before): {e}",
            self.written, self.failed
        ))
    }

    /// Counts acknowledgements and reports per-document errors. With
    /// `new_edits=false` CouchDB lists only the failures, so results are
    /// matched to documents by id, not by position.
    fn account(
        &mut self,
        chunk: &[Box<RawValue>],
        lines: Option<&[u64]>,
        results: &[settee_client::types::BulkDocsResult],
    ) -> Result<(), WriteError> {
        let errors: Vec<_> = results.iter().filter(|r| r.is_error()).collect();
        if self.new_edits && results.len() != chunk.len() {
            return Err(WriteError(format!(
                "_bulk_docs answered {} results for {} documents",
                results.len(),
                chunk.len()
            )));
        }
        for (k, r) in results.iter().enumerate() {
            if !r.is_error() {
                continue;
            }
            // Positional when every document has a result; else by id.
            let line = lines.and_then(|l| {
                if results.len() == chunk.len() {
                    l.get(k).copied()
                } else {
                    chunk
                        .iter()
                        .position(|d| doc_id(d).as_deref() == r.id.as_deref())
                        .map(|p| l[p])
                }
            });
            self.report(
                r.id.as_deref(),
                line,
                r.error.as_deref().unwrap_or("error"),
                r.reason.as_deref().unwrap_or(""),
            );
        }
        self.failed += errors.len() as u64;
        self.conflicts += errors
            .iter()
            .filter(|r| r.error.as_deref() == Some("conflict"))
            .count() as u64;
        self.written += (chunk.len() - errors.len().min(chunk.len())) as u64;
        Ok(())
    }

    fn report(&self, id: Option<&str>, line: Option<u64>, error: &str, reason: &str) {
        self.report.refused(id, line, error, reason);
    }
}

/// The `_id` of a raw document, if it has one.
pub fn doc_id(doc: &RawValue) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Id {
        #[serde(rename = "_id")]
        id: Option<String>,
    }
    serde_json::from_str::<Id>(doc.get())
        .ok()
        .and_then(|d| d.id)
}
