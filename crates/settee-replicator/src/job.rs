//! One replication run: the endpoints checked (the target created when
//! asked), the replication id computed, the checkpoints compared, then
//! pages of the source's changes read ([`crate::read::read_loop`]) and
//! written ([`crate::write::Sink`]) with overlap, checkpointing on both
//! ends every `checkpoint_interval` and at the end. One-shot runs end at
//! the end of the feed; continuous runs follow the feed until stopped.
//!
//! Invariants: a checkpoint never names a sequence whose changes are not
//! all written ([`crate::checkpoint`]); memory is bounded by the page
//! size and [`crate::read::PAGES_QUEUED`] pages in flight, whatever the
//! database's size.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde_json::{json, Value};
use settee_client::adapt::Sizer;
use settee_client::{Client, ClientOptions, Db, RetryPolicy};

use crate::checkpoint::{Log, Stats};
use crate::read::{read_loop, ReadOptions, PAGES_QUEUED};
use crate::rep_id;
use crate::spec::{Endpoint, Filter, Spec};
use crate::write::{LogReport, Sink};
use crate::RepError;

/// Largest page of changes read at once (the adaptive sizer's ceiling).
const PAGE_MAX: usize = 10_000;
/// Bytes per page the sizer aims below.
const PAGE_BYTES_MAX: usize = 16 << 20;

/// What a running job reports (to `_active_tasks` and `_scheduler`).
#[derive(Debug, Clone)]
pub struct Status {
    pub stats: Stats,
    /// The source sequence of the last page written.
    pub source_seq: Value,
    /// The last sequence checkpointed.
    pub checkpointed_seq: Value,
    pub started_on: u64,
    pub updated_on: u64,
}

impl Default for Status {
    fn default() -> Status {
        let now = unix_now();
        Status {
            stats: Stats::default(),
            source_seq: json!(0),
            checkpointed_seq: json!(0),
            started_on: now,
            updated_on: now,
        }
    }
}

pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A job's answer: the body `POST /_replicate` returns for a one-shot run.
pub type Outcome = Value;

/// The client a job talks through, from its options.
pub fn client_for(spec: &Spec) -> Result<Client, RepError> {
    Client::new(ClientOptions {
        request_timeout: spec.connection_timeout.max(Duration::from_secs(1)),
        retry: RetryPolicy {
            retries: spec.retries_per_request,
            ..RetryPolicy::default()
        },
        pool_idle_per_host: spec.http_connections,
        ..ClientOptions::default()
    })
    .map_err(|e| RepError::Failed(e.to_string()))
}

fn db(client: &Client, e: &Endpoint) -> Db {
    let mut headers = e.headers.clone();
    headers.extend(e.forwarded.iter().cloned());
    Db::from_parts(
        client.clone(),
        e.url.clone(),
        e.credentials.clone(),
        e.name.clone(),
    )
    .with_headers(headers)
}

/// A replication whose endpoints answered and whose id is known.
#[derive(Debug)]
pub struct Prepared {
    pub source: Db,
    pub target: Db,
    /// The checkpoint id (`_local/{base_id}`).
    pub base_id: String,
    /// The job id (`base_id` with `+continuous`, `+create_target`).
    pub full_id: String,
}

/// The source code of a JavaScript filter `DDOC/NAME`, from the source.
async fn filter_code(src: &Db, filter: &Filter) -> Result<Option<String>, RepError> {
    let Filter::Named { name, .. } = filter else {
        return Ok(None);
    };
    if name == "_view" {
        return Ok(None);
    }
    let (ddoc, fname) = name.split_once('/').unwrap_or((name, ""));
    let id = format!("_design/{ddoc}");
    let shown = format!("{}/", src.display().trim_end_matches('/'));
    let missing = || {
        RepError::NotFound(format!(
            "Couldn't open document `{id}` from source database `{shown}`: {{error,<<\"not_found\">>}}"
        ))
    };
    let doc = src
        .get_doc(&id)
        .await
        .map_err(|e| RepError::from_client(e, src))?
        .ok_or_else(missing)?;
    match doc
        .get("filters")
        .and_then(|f| f.get(fname))
        .and_then(Value::as_str)
    {
        Some(code) => Ok(Some(code.to_string())),
        None => Err(RepError::NotFound(format!(
            "Couldn't parse filter code from document {ddoc} on `{shown}`  Error: {{not_found,<<\"missing json key: {fname}\">>}}"
        ))),
    }
}

/// The ids of `spec` (the filter's code read from the source).
pub async fn ids(
    spec: &Spec,
    client: &Client,
    server_uuid: &str,
) -> Result<(String, String), RepError> {
    let src = db(client, &spec.source);
    let code = filter_code(&src, &spec.filter).await?;
    let base = rep_id::base_id(
        server_uuid,
        &spec.source.info(),
        &spec.target.info(),
        &spec.filter.id_part(code.as_deref()),
    );
    let full = rep_id::full_id(&base, spec.continuous, spec.create_target);
    Ok((base, full))
}

/// Checks both endpoints (creating the target when asked) and computes
/// the ids.
pub async fn prepare(
    spec: &Spec,
    client: &Client,
    server_uuid: &str,
) -> Result<Prepared, RepError> {
    let source = db(client, &spec.source);
    let target = db(client, &spec.target);
    source
        .info()
        .await
        .map_err(|e| RepError::from_client(e, &source))?;
    match target.info().await {
        Ok(_) => {}
        Err(e) if e.is_not_found() && spec.create_target => {
            let params: Vec<(&str, String)> = spec
                .create_target_params
                .iter()
                .map(|(k, v)| (k.as_str(), v.clone()))
                .collect();
            match target.create_with(&params).await {
                Ok(()) => {}
                // Created meanwhile by someone else.
                Err(e) if e.status() == Some(412) => {}
                Err(e) => return Err(RepError::from_client(e, &target)),
            }
        }
        Err(e) => return Err(RepError::from_client(e, &target)),
    }
    let (base_id, full_id) = ids(spec, client, server_uuid).await?;
    Ok(Prepared {
        source,
        target,
        base_id,
        full_id,
    })
}

fn answer(doc: &Value, no_changes: bool) -> Value {
    let mut out = json!({"ok": true});
    if no_changes {
        out["no_changes"] = json!(true);
    }
    for k in [
        "session_id",
        "source_last_seq",
        "replication_id_version",
        "history",
    ] {
        if let Some(v) = doc.get(k) {
            out[k] = v.clone();
        }
    }
    out
}

/// Runs a prepared replication until the end of the feed (one-shot) or
/// until `stop` turns true (continuous). Returns `POST /_replicate`'s
/// answer.
pub async fn run(
    spec: &Spec,
    p: &Prepared,
    stop: tokio::sync::watch::Receiver<bool>,
    status: &Mutex<Status>,
) -> Result<Outcome, RepError> {
    run_limited(spec, p, stop, status, None).await
}

/// A limit on a replication's bandwidth: the shared [`Throttle`] and the
/// bytes a document copied with its attachments (streamed, its size not
/// known beforehand) is counted as.
#[derive(Clone, Copy, Debug)]
pub struct Limit<'a> {
    pub throttle: &'a crate::throttle::Throttle,
    pub streamed_doc_bytes: u64,
}

/// [`run`], each page of documents waiting for `limit` (if any) before it
/// is written.
pub async fn run_limited(
    spec: &Spec,
    p: &Prepared,
    stop: tokio::sync::watch::Receiver<bool>,
    status: &Mutex<Status>,
    limit: Option<Limit<'_>>,
) -> Result<Outcome, RepError> {
    let mut log = Log::load(&p.source, &p.target, &p.base_id, spec.use_checkpoints).await?;
    if let Some(since) = &spec.since_seq {
        log.start_seq = since.clone();
    }
    {
        let mut st = status.lock();
        st.source_seq = log.start_seq.clone();
        st.checkpointed_seq = log.start_seq.clone();
    }
    let (tx, mut rx) = tokio::sync::mpsc::channel(PAGES_QUEUED);
    let opts = ReadOptions {
        revs_diff_target: Some(p.target.clone()),
        filter: spec.filter.changes(),
        winning_only: spec.winning_revs_only,
        bulk_get: AtomicBool::new(spec.use_bulk_get),
        stream_attachments: true,
        ..ReadOptions::new(false)
    };
    let sizer = Sizer::adaptive(
        spec.worker_batch_size,
        10,
        PAGE_MAX.max(spec.worker_batch_size),
        Duration::from_secs(2),
        PAGE_BYTES_MAX,
    );
    let reader = {
        let (src, since, continuous) = (p.source.clone(), log.start_seq.clone(), spec.continuous);
        tokio::spawn(async move {
            let say = |m: &str| tracing::warn!("{m}");
            read_loop(src, since, sizer, opts, continuous, stop, tx, &say).await
        })
    };
    let mut sink = Sink::new(
        p.target.clone(),
        false,
        None,
        p.target.retry(),
        Arc::new(LogReport),
    );
    // A resumed replication's counts go on from its checkpoint's.
    let mut stats = log.resumed.clone();
    let before = stats.clone();
    let mut last_seq = log.start_seq.clone();
    let mut last_checkpoint = Instant::now();
    let tick = spec.checkpoint_interval.min(Duration::from_secs(3600));
    loop {
        let page = tokio::select! {
            page = rx.recv() => match page {
                Some(page) => Some(page),
                None => break,
            },
            _ = tokio::time::sleep(tick) => None,
        };
        if let Some(page) = page {
            if let Some(l) = limit {
                let json: usize = page.docs.iter().map(|d| d.get().len()).sum();
                let streamed = page.streamed.len() as u64 * l.streamed_doc_bytes;
                l.throttle.take(json as u64 + streamed).await;
            }
            let written = match sink.write(&page.docs, None).await {
                Ok(()) => sink.stream(&p.source, &page.streamed).await,
                Err(e) => Err(e),
            };
            if let Err(e) = written {
                reader.abort();
                return Err(RepError::Failed(e.0));
            }
            stats.count_page(&page, &before, &sink);
            last_seq = page.last_seq;
            let mut st = status.lock();
            st.stats = stats.clone();
            st.source_seq = last_seq.clone();
            st.updated_on = unix_now();
        }
        let due = last_checkpoint.elapsed() >= spec.checkpoint_interval;
        if spec.use_checkpoints
            && due
            && log.recorded_seq.as_ref() != Some(&last_seq)
            && last_seq != log.start_seq
        {
            log.record(&p.source, &p.target, &last_seq, &stats).await?;
            status.lock().checkpointed_seq = last_seq.clone();
            last_checkpoint = Instant::now();
        }
    }
    match reader.await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => return Err(RepError::from_client(e, &p.source)),
        Err(e) => return Err(RepError::Failed(format!("reader task failed: {e}"))),
    }
    let moved = last_seq != log.start_seq || sink.written + sink.failed > 0;
    if !moved {
        if let Some(doc) = log.last_doc.clone() {
            return Ok(answer(&doc, true));
        }
    }
    if !spec.use_checkpoints {
        return Ok(answer(&log.document(&last_seq, &stats), false));
    }
    if log.recorded_seq.as_ref() != Some(&last_seq) || !moved {
        log.record(&p.source, &p.target, &last_seq, &stats).await?;
        status.lock().checkpointed_seq = last_seq.clone();
    }
    let doc = log.last_doc.clone().unwrap_or(Value::Null);
    let mut out = answer(&doc, false);
    if matches!(spec.filter, Filter::DocIds(_)) {
        // CouchDB sums a `doc_ids` replication up at the top too.
        out["start_time"] = json!(log.start_time);
        out["end_time"] = json!(crate::checkpoint::http_date());
        out["docs_read"] = json!(stats.docs_read);
        out["docs_written"] = json!(stats.docs_written);
        out["doc_write_failures"] = json!(stats.doc_write_failures);
    }
    Ok(out)
}
