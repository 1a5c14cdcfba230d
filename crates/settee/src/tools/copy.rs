//! `settee copy`: the whole `ls-docs --revs | post-docs --new-edits=false`
//! pipeline in one process, as CouchDB's replicator copies: every leaf
//! revision (conflicts, deleted leaves) with its revision path, written
//! with `new_edits=false`; `_local` documents are not copied.
//!
//! Shape: a reader task (`_changes?style=all_docs` page → `_revs_diff`
//! against the target unless it started empty → `_bulk_get`)
//! feeds a writer (`_bulk_docs`) through a channel of `PAGES_QUEUED`
//! pages, so reading page k+1 overlaps writing page k with bounded memory.
//! The read page size and the write batch size adapt at run time
//! ([`settee_client::adapt::Sizer`]): grow while throughput improves,
//! halve on 413 or on a stalled write.
//!
//! Invariant (resumability): the checkpoint — the replicator's
//! (`settee_replicator::checkpoint`): `_local/{replication id}` on both
//! ends in CouchDB's format, the id `_replicate` computes for the same
//! URLs on the target's server — records a source sequence only after
//! every document of every page up to it was acknowledged by the target
//! without per-document errors. A rerun (or a pull `_replicate` on the
//! target's server) starts from it; copying a revision twice is harmless.

use std::time::Instant;

use serde_json::{json, Value};
use settee_client::{seq_param, Db};
use settee_replicator::checkpoint::{Log, Stats};
use settee_replicator::rep_id;
use settee_replicator::spec::Filter;
use settee_replicator::RepError;

use super::conn::{explain, ConnArgs};
use super::ls_docs::page_sizer;
use super::progress::Progress;
use super::StderrReport;
use super::ToolError;
use settee_replicator::read::{read_loop, LeafPage, ReadOptions, PAGES_QUEUED};
use settee_replicator::write::Sink;

pub const EXAMPLES: &str = "Examples:
  settee copy postal testp --filter-design              # both on $SETTEE_URL
  settee copy http://admin:pw@old:5984/postal https://admin:pw@new:6984/postal --create-target
  settee copy postal http://backup:5984/postal --continuous   # follow changes until Ctrl-C

Interrupted copies resume from their checkpoint (_local/<replication id> on
both ends, as CouchDB's replicator keeps it; a pull _replicate on the
target's server with the same URLs resumes it too). Page and batch sizes are chosen at run time; -u/-b fix them.";

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Source database URL or name on --server.
    pub src: String,
    /// Target database URL or name on --server.
    pub dst: String,
    /// Leave design documents out.
    #[arg(long)]
    pub filter_design: bool,
    /// Keep following the source's changes until interrupted (Ctrl-C).
    #[arg(long)]
    pub continuous: bool,
    /// Create the target database if it does not exist.
    #[arg(long)]
    pub create_target: bool,
    /// Changes per read page (default: chosen automatically).
    #[arg(short = 'u', long = "unit", value_name = "UNIT")]
    pub unit: Option<usize>,
    /// Documents per _bulk_docs request (default: chosen automatically).
    #[arg(short = 'b', long = "batch", value_name = "DOCS")]
    pub batch: Option<usize>,
    /// Ignore an existing checkpoint and copy from the beginning.
    #[arg(long)]
    pub restart: bool,
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// The selector `--filter-design` is equivalent to: its replication id
/// is the one `_replicate` computes with this selector.
fn no_design_selector() -> Value {
    json!({"_id": {"$not": {"$regex": "^_design/"}}})
}

/// The checkpoint id: the replication id CouchDB (and Settee's
/// `_replicate`) computes for these URLs on the target's server (named by
/// `server_uuid`), so a copy and a pull replication run there share their
/// checkpoints.
pub fn checkpoint_id(server_uuid: &str, src: &Db, dst: &Db, filter_design: bool) -> String {
    let filter = if filter_design {
        Filter::Selector(no_design_selector())
    } else {
        Filter::None
    };
    rep_id::base_id(
        server_uuid,
        &rep_id::db_info(src),
        &rep_id::db_info(dst),
        &filter.id_part(None),
    )
}

fn checkpoint_error(e: RepError) -> ToolError {
    ToolError::Fatal(format!("checkpoint: {e}"))
}

pub async fn run(args: Args) -> Result<(), ToolError> {
    // A continuous copy rides out server restarts and network outages:
    // with the 20 s backoff cap, 1,000 retries last about five hours.
    let client = if args.continuous {
        args.conn
            .client_with_retries(args.conn.retries.max(1_000))?
    } else {
        args.conn.client()?
    };
    let src = args.conn.db(&client, &args.src)?;
    let dst = args.conn.db(&client, &args.dst)?;
    let src_info = src.info().await.map_err(|e| explain(&src, "source", e))?;
    // An empty target has every revision missing: skip `_revs_diff`.
    let target_empty = match dst.info().await {
        Ok(i) => i.doc_count + i.doc_del_count == 0,
        Err(e) if e.is_not_found() && args.create_target => {
            dst.create().await.map_err(|e| explain(&dst, "target", e))?;
            true
        }
        Err(e) if e.is_not_found() => {
            return Err(ToolError::Fatal(format!(
                "target database {} does not exist (create it with `settee mkdb` or pass --create-target)",
                dst.display()
            )))
        }
        Err(e) => return Err(explain(&dst, "target", e)),
    };
    // The target's server names the replication (a server that does not
    // say its uuid: a fixed name).
    let uuid = dst
        .server_info()
        .await
        .ok()
        .and_then(|v| v.get("uuid").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| "settee-copy".to_string());
    let id = checkpoint_id(&uuid, &src, &dst, args.filter_design);
    let mut log = Log::load(&src, &dst, &id, true)
        .await
        .map_err(checkpoint_error)?;
    // Resuming needs the checkpoint on both ends, as CouchDB's replicator:
    // a recreated source (or one the copy may only read) has none, so the
    // copy walks the feed from the start and `_revs_diff` skips what the
    // target already has.
    let mut stats = log.resumed.clone();
    if args.restart {
        log.start_seq = Value::from(0);
        stats = Stats::default();
    } else if seq_param(&log.start_seq) != "0" {
        eprintln!(
            "settee copy: resuming from checkpoint seq {} ({} documents copied before)",
            seq_param(&log.start_seq),
            stats.docs_written
        );
    }
    let total = src_info.doc_count + src_info.doc_del_count;
    let progress = Progress::new(Some(total), 0);
    let mut last_seq = log.start_seq.clone();
    let mut changes = 0u64;

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    if args.continuous {
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                let _ = stop_tx.send(true);
            }
        });
    } else {
        // Keep the sender alive: a closed watch channel would read as a change.
        std::mem::forget(stop_tx);
    }
    let (tx, mut rx) = tokio::sync::mpsc::channel::<LeafPage>(PAGES_QUEUED);
    let mut opts = ReadOptions::new(args.filter_design);
    opts.stream_attachments = true;
    opts.revs_diff_target = (!target_empty).then(|| dst.clone());
    let reader = {
        let (src, since, unit, continuous) = (
            src.clone(),
            log.start_seq.clone(),
            args.unit,
            args.continuous,
        );
        tokio::spawn(async move {
            let say = |m: &str| eprintln!("settee: {m}");
            read_loop(
                src,
                since,
                page_sizer(unit),
                opts,
                continuous,
                stop_rx,
                tx,
                &say,
            )
            .await
        })
    };

    let mut sink = Sink::new(
        dst.clone(),
        false,
        args.batch,
        client.options().retry,
        std::sync::Arc::new(StderrReport),
    );
    let t0 = Instant::now();
    let mut revisions = 0u64;
    let mut skipped = 0u64;
    let before = stats.clone();
    while let Some(page) = rx.recv().await {
        let written = match sink.write(&page.docs, None).await {
            Ok(()) => sink.stream(&src, &page.streamed).await,
            Err(e) => Err(e),
        };
        if let Err(e) = written {
            reader.abort();
            progress.finish();
            return Err(e.into());
        }
        let read = (page.docs.len() + page.streamed.len()) as u64;
        revisions += read;
        skipped += page.skipped as u64;
        changes += page.changes as u64;
        stats.count_page(&page, &before, &sink);
        last_seq = page.last_seq;
        if sink.failed == 0 {
            log.record(&src, &dst, &last_seq, &stats)
                .await
                .map_err(checkpoint_error)?;
        }
        progress.inc(page.changes as u64);
        progress.message(format!("batch {}", sink.sizer.size()));
    }
    progress.finish();
    let page_size = match reader.await {
        Ok(r) => r.map_err(|e| explain(&src, "source", e))?,
        Err(e) => return Err(ToolError::Fatal(format!("reader task failed: {e}"))),
    };
    let secs = t0.elapsed().as_secs_f64();
    eprintln!(
        "settee copy: {changes} documents ({revisions} revisions) copied in {secs:.1} s ({:.0} docs/s); read page {page_size}, write batch {}; checkpoint seq {}{}",
        changes as f64 / secs.max(1e-3),
        sink.sizer.size(),
        seq_param(&last_seq),
        if skipped > 0 { format!("; {skipped} superseded revisions skipped") } else { String::new() },
    );
    if sink.failed > 0 {
        return Err(ToolError::Partial(format!(
            "{} revisions failed (reported above); the checkpoint was not advanced past them",
            sink.failed
        )));
    }
    Ok(())
}
