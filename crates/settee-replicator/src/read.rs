//! The reading half of replication, shared by the replicator, `settee copy`
//! and `ls-docs --revs`: one page of the source's `_changes`
//! (`style=all_docs`: every leaf revision, live, deleted or in conflict;
//! optionally filtered), the leaves the target lacks (`_revs_diff`), then
//! those leaves with their revision paths (`_bulk_get?revs=true`, or
//! `open_revs` from a source without `_bulk_get`), ready for `_bulk_docs`
//! with `new_edits=false`.
//!
//! Invariants: `_local` documents never appear (the changes feed does not
//! carry them, and ids starting with `_local/` are dropped defensively);
//! a leaf the source no longer has (compacted away between the two calls)
//! is skipped — its successor appears later in the feed.

use std::sync::atomic::{AtomicBool, Ordering};

use futures_util::StreamExt;
use serde_json::value::RawValue;
use serde_json::Value;
use settee_client::types::{BulkGetDoc, BulkGetResult};
use std::time::Duration;

use settee_client::adapt::Sizer;
use settee_client::{ChangesFilter, ChangesQuery, Db, Error, RetryPolicy};

/// Most (id, rev) pairs in one `_bulk_get` (CouchDB's `max_bulk_get_count`).
const BULK_GET_MAX: usize = 10_000;
/// Concurrent `_bulk_get` requests per page, each of at least
/// `BULK_GET_PART_MIN` revisions.
const BULK_GET_PARALLEL: usize = 2;
const BULK_GET_PART_MIN: usize = 250;
/// Concurrent per-document reads when the source lacks `_bulk_get`.
const OPEN_REVS_IN_FLIGHT: usize = 8;

/// Consecutive stalls at the smallest page size before a reader gives up.
pub const STALLS_MAX: u32 = 6;

/// The source as readers use it: timeouts are not resent as they are
/// (the caller shrinks the page instead, see [`stalled`]).
pub fn reader_db(db: &Db) -> Db {
    db.with_retry(RetryPolicy {
        retry_timeouts: false,
        ..db.retry()
    })
}

/// After a failed read: a stall (timeout) halves the page size and returns
/// the pause before asking again with a message saying so; any other error
/// is handed back.
pub fn stalled(e: Error, sizer: &mut Sizer, stalls: &mut u32) -> Result<(Duration, String), Error> {
    if !e.is_timeout() {
        return Err(e);
    }
    *stalls += 1;
    if !sizer.shrink() && *stalls >= STALLS_MAX {
        return Err(e);
    }
    let message = format!(
        "read stalled ({e}); retrying with pages of {}",
        sizer.size()
    );
    Ok((RetryPolicy::default().delay(*stalls), message))
}

/// One page read from the source.
#[derive(Debug)]
pub struct LeafPage {
    /// Leaf revisions with `_revisions`, in feed order.
    pub docs: Vec<Box<RawValue>>,
    /// Rows of the changes feed (documents) this page covers.
    pub changes: usize,
    /// Rows the feed returned before filtering (for page-size decisions).
    pub rows: usize,
    /// The sequence to continue from (and to checkpoint once written).
    pub last_seq: Value,
    pub bytes: usize,
    /// Leaves the source could not return any more.
    pub skipped: usize,
    /// Revisions the target was asked about (`_revs_diff`) and of those
    /// the ones it lacked (CouchDB's `missing_checked`/`missing_found`).
    pub missing_checked: usize,
    pub missing_found: usize,
}

pub struct ReadOptions {
    pub filter_design: bool,
    pub longpoll_ms: Option<u64>,
    /// Cleared for good once the source answers `_bulk_get` with 400, 404
    /// or 405 (CouchDB 1.x): then every document is read with `open_revs`.
    pub bulk_get: AtomicBool,
    /// Ask this target which leaves it lacks (`_revs_diff`) and read only
    /// those, as the replicator does.
    pub revs_diff_target: Option<Db>,
    /// Only the source's changes this filter passes.
    pub filter: Option<ChangesFilter>,
    /// Only each document's winning revision (`winning_revs_only`), not
    /// every leaf.
    pub winning_only: bool,
}

impl ReadOptions {
    pub fn new(filter_design: bool) -> ReadOptions {
        ReadOptions {
            filter_design,
            longpoll_ms: None,
            bulk_get: AtomicBool::new(true),
            revs_diff_target: None,
            filter: None,
            winning_only: false,
        }
    }
}

/// One `_bulk_get` split into up to `BULK_GET_PARALLEL` concurrent
/// requests (results in order): the server answers them on several cores.
async fn bulk_get_split(db: &Db, items: &[(String, String)]) -> Result<Vec<BulkGetResult>, Error> {
    let parts = (items.len() / BULK_GET_PART_MIN).clamp(1, BULK_GET_PARALLEL);
    let size = items.len().div_ceil(parts).max(1);
    let answers =
        futures_util::future::try_join_all(items.chunks(size).map(|c| db.bulk_get(c, true, true)))
            .await?;
    Ok(answers.into_iter().flat_map(|a| a.results).collect())
}

/// Reads leaves with one `GET …?open_revs=` per document, a few at a time,
/// in order.
async fn read_by_open_revs(
    db: &Db,
    wanted: &[(String, String)],
) -> Result<Vec<BulkGetResult>, Error> {
    let mut by_id: Vec<(String, Vec<String>)> = Vec::new();
    for (id, rev) in wanted {
        match by_id.last_mut() {
            Some((last, revs)) if last == id => revs.push(rev.clone()),
            _ => by_id.push((id.clone(), vec![rev.clone()])),
        }
    }
    let results: Vec<Result<BulkGetResult, Error>> = futures_util::stream::iter(by_id)
        .map(|(id, revs)| async move {
            let docs: Vec<BulkGetDoc> = db.open_revs(&id, &revs, true).await?;
            Ok(BulkGetResult { id: Some(id), docs })
        })
        .buffered(OPEN_REVS_IN_FLIGHT)
        .collect()
        .await;
    results.into_iter().collect()
}

pub async fn read_leaves(
    db: &Db,
    since: &Value,
    limit: usize,
    opts: &ReadOptions,
) -> Result<LeafPage, Error> {
    let page = db
        .changes(&ChangesQuery {
            since: since.clone(),
            limit: Some(limit),
            all_docs: !opts.winning_only,
            include_docs: false,
            longpoll_ms: opts.longpoll_ms,
            filter: opts.filter.clone(),
        })
        .await?;
    let rows = page.results.len();
    let mut wanted = Vec::new();
    let mut changes = 0;
    for c in &page.results {
        if c.id.starts_with("_local/") || (opts.filter_design && c.id.starts_with("_design/")) {
            continue;
        }
        changes += 1;
        for r in &c.changes {
            wanted.push((c.id.clone(), r.rev.clone()));
        }
    }
    let missing_checked = wanted.len();
    if let Some(target) = &opts.revs_diff_target {
        if !wanted.is_empty() {
            let mut ask: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
            for (id, rev) in &wanted {
                ask.entry(id.as_str()).or_default().push(rev.as_str());
            }
            let missing = target.revs_diff(&ask).await?;
            wanted.retain(|(id, rev)| missing.get(id).is_some_and(|m| m.contains(rev)));
        }
    }
    let missing_found = wanted.len();
    let mut docs = Vec::with_capacity(wanted.len());
    let mut bytes = 0;
    let mut skipped = 0;
    let mut chunk_max = BULK_GET_MAX;
    let mut rest = &wanted[..];
    while !rest.is_empty() {
        let n = chunk_max.min(rest.len());
        let results = if opts.bulk_get.load(Ordering::Relaxed) {
            match bulk_get_split(db, &rest[..n]).await {
                Ok(r) => r,
                Err(e) if e.is_too_large() && n > 1 => {
                    chunk_max = n / 2;
                    continue;
                }
                Err(e) if matches!(e.status(), Some(400 | 404 | 405)) => {
                    tracing::warn!(error = %e, "the source has no _bulk_get; reading documents one by one");
                    opts.bulk_get.store(false, Ordering::Relaxed);
                    continue;
                }
                Err(e) => return Err(e),
            }
        } else {
            read_by_open_revs(db, &rest[..n]).await?
        };
        for result in results {
            for d in result.docs {
                match (d.ok, d.error) {
                    (Some(doc), _) => {
                        bytes += doc.get().len();
                        docs.push(doc);
                    }
                    (None, Some(err)) => {
                        // CouchDB: {"error":{"error":"not_found",…}}; PouchDB: {"error":"not_found"}.
                        let kind = err
                            .get("error")
                            .and_then(Value::as_str)
                            .or(err.as_str())
                            .unwrap_or("");
                        if kind != "not_found" {
                            return Err(Error::BadResponse {
                                method: "POST".into(),
                                url: format!("{}/_bulk_get", db.display()),
                                detail: format!("document {:?}: {err}", result.id),
                            });
                        }
                        tracing::warn!(id = ?result.id, "leaf no longer on the source; skipped");
                        skipped += 1;
                    }
                    (None, None) => skipped += 1,
                }
            }
        }
        rest = &rest[n..];
    }
    Ok(LeafPage {
        docs,
        changes,
        rows,
        last_seq: page.last_seq,
        bytes,
        skipped,
        missing_checked,
        missing_found,
    })
}

/// Pages read ahead of the writer by [`read_loop`].
pub const PAGES_QUEUED: usize = 2;
/// How long one longpoll request waits for changes once caught up.
pub const LONGPOLL_MS: u64 = 30_000;

/// Reads pages from `since` into `tx` until the end of the feed (or,
/// `continuous`, until `stop` turns true), adapting the page size with
/// `sizer`; stalls are said through `on_stall`. Returns the last page size.
/// The feed's position travels with each page (`last_seq`), so the writer
/// checkpoints only what it wrote.
#[allow(clippy::too_many_arguments)]
pub async fn read_loop(
    src: Db,
    mut since: Value,
    mut sizer: Sizer,
    mut opts: ReadOptions,
    continuous: bool,
    mut stop: tokio::sync::watch::Receiver<bool>,
    tx: tokio::sync::mpsc::Sender<LeafPage>,
    on_stall: &(dyn Fn(&str) + Send + Sync),
) -> Result<usize, Error> {
    let mut caught_up = false;
    let src = reader_db(&src);
    let mut stalls = 0u32;
    loop {
        if *stop.borrow() {
            return Ok(sizer.size());
        }
        let size = sizer.size();
        opts.longpoll_ms = (continuous && caught_up).then_some(LONGPOLL_MS);
        let t = std::time::Instant::now();
        let page = tokio::select! {
            r = read_leaves(&src, &since, size, &opts) => r,
            _ = stop.changed() => return Ok(size),
        };
        let page = match page {
            Ok(p) => {
                stalls = 0;
                p
            }
            Err(e) => {
                let (pause, message) = stalled(e, &mut sizer, &mut stalls)?;
                on_stall(&message);
                tokio::time::sleep(pause).await;
                continue;
            }
        };
        if opts.longpoll_ms.is_none() {
            sizer.observe(page.rows, page.bytes, t.elapsed());
        }
        let rows = page.rows;
        let moved = page.last_seq != since;
        since = page.last_seq.clone();
        // A page whose changes were all left out (filters, `_local`)
        // still moves the checkpoint forward.
        if (rows > 0 || moved) && tx.send(page).await.is_err() {
            return Ok(size); // the writer stopped; it reports why
        }
        if rows < size {
            if !continuous {
                return Ok(size);
            }
            caught_up = true;
            if rows == 0 {
                // An empty longpoll answer: poll again at once; a server
                // that answers immediately is throttled a little.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        } else {
            caught_up = false;
        }
    }
}
