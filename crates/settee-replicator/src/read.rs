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
use settee_client::types::{BulkGetDoc, BulkGetItem, BulkGetResult};
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
/// Attachment bytes of one revision up to which they travel inline
/// (base64 in `_bulk_get`/`_bulk_docs`) when attachments are streamed;
/// a revision with more is copied by itself ([`Streamed`]).
pub const INLINE_ATTACHMENTS_MAX: u64 = 1 << 20;

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
    /// Revisions whose attachments are too large to travel inline: each
    /// is copied by itself, streamed ([`settee_client::Db::copy_revision`]).
    pub streamed: Vec<Streamed>,
}

/// A revision to copy by itself, attachments streamed.
#[derive(Debug, Clone)]
pub struct Streamed {
    pub id: String,
    pub rev: String,
    /// Revisions the target has that may be its ancestors (their
    /// attachments are not sent again).
    pub atts_since: Vec<String>,
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
    /// Attachments the target already has (`_revs_diff`'s
    /// `possible_ancestors`) are not read again, and revisions with more
    /// than [`INLINE_ATTACHMENTS_MAX`] bytes of attachments are left to
    /// be streamed ([`LeafPage::streamed`]). Off: every attachment inline.
    pub stream_attachments: bool,
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
            stream_attachments: false,
        }
    }
}

/// One `_bulk_get` split into up to `BULK_GET_PARALLEL` concurrent
/// requests (results in order): the server answers them on several cores.
async fn bulk_get_split(
    db: &Db,
    items: &[BulkGetItem],
    attachments: bool,
) -> Result<Vec<BulkGetResult>, Error> {
    let parts = (items.len() / BULK_GET_PART_MIN).clamp(1, BULK_GET_PARALLEL);
    let size = items.len().div_ceil(parts).max(1);
    let answers = futures_util::future::try_join_all(
        items
            .chunks(size)
            .map(|c| db.bulk_get(c, true, attachments)),
    )
    .await?;
    Ok(answers.into_iter().flat_map(|a| a.results).collect())
}

/// Reads leaves with one `GET …?open_revs=` per document, a few at a time,
/// in order.
async fn read_by_open_revs(db: &Db, wanted: &[BulkGetItem]) -> Result<Vec<BulkGetResult>, Error> {
    let mut by_id: Vec<(String, Vec<String>)> = Vec::new();
    for BulkGetItem { id, rev, .. } in wanted {
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
    let mut ancestors: std::collections::HashMap<String, Vec<String>> = Default::default();
    if let Some(target) = &opts.revs_diff_target {
        if !wanted.is_empty() {
            let mut ask: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
            for (id, rev) in &wanted {
                ask.entry(id.as_str()).or_default().push(rev.as_str());
            }
            let diff = target.revs_diff(&ask).await?;
            wanted.retain(|(id, rev)| diff.get(id).is_some_and(|m| m.missing.contains(rev)));
            if opts.stream_attachments {
                ancestors = diff
                    .into_iter()
                    .filter(|(_, d)| !d.possible_ancestors.is_empty())
                    .map(|(id, d)| (id, d.possible_ancestors))
                    .collect();
            }
        }
    }
    let missing_found = wanted.len();
    let atts_since = |id: &str| ancestors.get(id).cloned().unwrap_or_default();
    let items: Vec<BulkGetItem> = wanted
        .into_iter()
        .map(|(id, rev)| BulkGetItem {
            atts_since: atts_since(&id),
            id,
            rev,
        })
        .collect();
    let mut got = Got::default();
    let mut streamed = Vec::new();
    if opts.stream_attachments {
        // First without attachments; revisions that have some are read
        // again (small ones inline, from what the target lacks) or left
        // to be streamed.
        let (results, inline) = fetch(db, &items, false, opts).await?;
        let mut again = Vec::new();
        for doc in got.take(db, results)? {
            match (inline, attachment_info(&doc)) {
                (false, Some((bytes, id, rev))) if bytes <= INLINE_ATTACHMENTS_MAX => {
                    again.push(BulkGetItem {
                        atts_since: atts_since(&id),
                        id,
                        rev,
                    });
                }
                (false, Some((_, id, rev))) => streamed.push(Streamed {
                    atts_since: atts_since(&id),
                    id,
                    rev,
                }),
                _ => got.push(doc),
            }
        }
        if !again.is_empty() {
            let (results, _) = fetch(db, &again, true, opts).await?;
            for doc in got.take(db, results)? {
                got.push(doc);
            }
        }
    } else {
        let (results, _) = fetch(db, &items, true, opts).await?;
        for doc in got.take(db, results)? {
            got.push(doc);
        }
    }
    Ok(LeafPage {
        docs: got.docs,
        changes,
        rows,
        last_seq: page.last_seq,
        bytes: got.bytes,
        skipped: got.skipped,
        missing_checked,
        missing_found,
        streamed,
    })
}

/// The revisions a page read, with their bytes and the leaves skipped.
#[derive(Default)]
struct Got {
    docs: Vec<Box<RawValue>>,
    bytes: usize,
    skipped: usize,
}

impl Got {
    fn push(&mut self, doc: Box<RawValue>) {
        self.bytes += doc.get().len();
        self.docs.push(doc);
    }

    /// The documents of `results`, in order; a leaf the source no longer
    /// has is counted as skipped, any other error fails the read.
    fn take(&mut self, db: &Db, results: Vec<BulkGetResult>) -> Result<Vec<Box<RawValue>>, Error> {
        let mut docs = Vec::new();
        for result in results {
            for d in result.docs {
                match (d.ok, d.error) {
                    (Some(doc), _) => docs.push(doc),
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
                        self.skipped += 1;
                    }
                    (None, None) => self.skipped += 1,
                }
            }
        }
        Ok(docs)
    }
}

/// Reads `items` with `_bulk_get` (`attachments` inline or as stubs), in
/// chunks of at most [`BULK_GET_MAX`] halved on 413, or one document at a
/// time (`open_revs`, attachments always inline) from a source without
/// `_bulk_get`. Also says whether attachments came inline.
async fn fetch(
    db: &Db,
    items: &[BulkGetItem],
    attachments: bool,
    opts: &ReadOptions,
) -> Result<(Vec<BulkGetResult>, bool), Error> {
    let mut out = Vec::with_capacity(items.len());
    let mut inline = attachments;
    let mut chunk_max = BULK_GET_MAX;
    let mut rest = items;
    while !rest.is_empty() {
        let n = chunk_max.min(rest.len());
        if opts.bulk_get.load(Ordering::Relaxed) {
            match bulk_get_split(db, &rest[..n], attachments).await {
                Ok(r) => out.extend(r),
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
            inline = true;
            out.extend(read_by_open_revs(db, &rest[..n]).await?);
        }
        rest = &rest[n..];
    }
    Ok((out, inline))
}

/// For a revision read without attachments: the bytes its attachments
/// name (their stubs' lengths), its id and rev; None without attachments.
fn attachment_info(doc: &RawValue) -> Option<(u64, String, String)> {
    if !doc.get().contains("\"_attachments\"") {
        return None;
    }
    #[derive(serde::Deserialize)]
    struct Stub {
        #[serde(default)]
        length: u64,
    }
    #[derive(serde::Deserialize)]
    struct Doc {
        #[serde(rename = "_id")]
        id: String,
        #[serde(rename = "_rev")]
        rev: String,
        #[serde(default, rename = "_attachments")]
        attachments: Option<std::collections::HashMap<String, Stub>>,
    }
    let d: Doc = serde_json::from_str(doc.get()).ok()?;
    let atts = d.attachments?;
    (!atts.is_empty()).then(|| (atts.values().map(|a| a.length).sum(), d.id, d.rev))
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
