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
//! Invariant (resumability): the checkpoint `_local/settee-copy-<hash>` on
//! the target records a source sequence only after every document of every
//! page up to it was acknowledged by the target without per-document
//! errors. A rerun starts from it; copying a revision twice is harmless.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use settee_client::{seq_param, Db};
use sha2::Digest;

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

Interrupted copies resume from the checkpoint _local/settee-copy-<hash> on
the target. Page and batch sizes are chosen at run time; -u/-b fix them.";

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

/// The checkpoint document's id for this source, target and filter.
pub fn checkpoint_id(src: &Db, dst: &Db, filter_design: bool) -> String {
    let mut h = sha2::Sha256::new();
    h.update(src.display().as_bytes());
    h.update(b"\n");
    h.update(dst.display().as_bytes());
    h.update(if filter_design {
        &b"\nfilter_design"[..]
    } else {
        b""
    });
    format!("settee-copy-{}", &hex::encode(h.finalize())[..32])
}

/// The number a sequence starts with: a JSON number, or a string `"N"`
/// or `"N-opaque"` (as Settee and CouchDB send them); None otherwise.
fn seq_number(seq: &Value) -> Option<u64> {
    match seq {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.split('-').next()?.parse().ok(),
        _ => None,
    }
}

struct Checkpoint {
    id: String,
    rev: Option<String>,
    seq: Value,
    docs: u64,
}

impl Checkpoint {
    async fn load(dst: &Db, id: String) -> Result<Checkpoint, ToolError> {
        let doc = dst
            .get_local(&id)
            .await
            .map_err(|e| explain(dst, "target", e))?;
        let doc = doc.unwrap_or(Value::Null);
        Ok(Checkpoint {
            id,
            rev: doc.get("_rev").and_then(Value::as_str).map(str::to_string),
            seq: doc.get("seq").cloned().unwrap_or(Value::from(0)),
            docs: doc.get("docs").and_then(Value::as_u64).unwrap_or(0),
        })
    }

    async fn save(&mut self, src: &Db, dst: &Db) -> Result<(), ToolError> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let mut doc = json!({
            "source": src.display(),
            "target": dst.display(),
            "seq": self.seq,
            "docs": self.docs,
            "updated": now,
        });
        for attempt in 0..2 {
            if let Some(r) = &self.rev {
                doc["_rev"] = Value::String(r.clone());
            }
            match dst.put_local(&self.id, &doc).await {
                Ok(rev) => {
                    self.rev = Some(rev);
                    return Ok(());
                }
                // Someone else wrote it (a concurrent copy): take its rev.
                Err(e) if e.status() == Some(409) && attempt == 0 => {
                    let cur = dst
                        .get_local(&self.id)
                        .await
                        .map_err(|e| explain(dst, "target", e))?;
                    self.rev = cur
                        .as_ref()
                        .and_then(|d| d.get("_rev"))
                        .and_then(Value::as_str)
                        .map(str::to_string);
                }
                Err(e) => return Err(explain(dst, "checkpoint on target", e)),
            }
        }
        Err(ToolError::Fatal(
            "checkpoint update keeps conflicting".into(),
        ))
    }
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
    let mut ckpt = Checkpoint::load(&dst, checkpoint_id(&src, &dst, args.filter_design)).await?;
    // A checkpoint beyond the source's current sequence belongs to an
    // earlier database of the same name (deleted and recreated): start over.
    let stale = matches!(
        (seq_number(&ckpt.seq), seq_number(&src_info.update_seq)),
        (Some(c), Some(s)) if c > s
    );
    if stale {
        eprintln!(
            "settee copy: checkpoint seq {} is ahead of the source ({}); the source was recreated, copying from the start",
            seq_param(&ckpt.seq),
            seq_param(&src_info.update_seq)
        );
    }
    if args.restart || stale {
        ckpt.seq = Value::from(0);
        ckpt.docs = 0;
    } else if seq_number(&ckpt.seq) != Some(0) {
        eprintln!(
            "settee copy: resuming from checkpoint seq {} ({} documents copied before)",
            seq_param(&ckpt.seq),
            ckpt.docs
        );
    }
    let docs_before = ckpt.docs;
    let total = src_info.doc_count + src_info.doc_del_count;
    let progress = Progress::new(Some(total), ckpt.docs);

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
    opts.revs_diff_target = (!target_empty).then(|| dst.clone());
    let reader = {
        let (src, since, unit, continuous) =
            (src.clone(), ckpt.seq.clone(), args.unit, args.continuous);
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
    while let Some(page) = rx.recv().await {
        if let Err(e) = sink.write(&page.docs, None).await {
            reader.abort();
            progress.finish();
            return Err(e.into());
        }
        revisions += page.docs.len() as u64;
        skipped += page.skipped as u64;
        ckpt.docs += page.changes as u64;
        ckpt.seq = page.last_seq;
        if sink.failed == 0 {
            ckpt.save(&src, &dst).await?;
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
    let docs = ckpt.docs - docs_before;
    eprintln!(
        "settee copy: {docs} documents ({revisions} revisions) copied in {secs:.1} s ({:.0} docs/s); read page {page_size}, write batch {}; checkpoint seq {}{}",
        docs as f64 / secs.max(1e-3),
        sink.sizer.size(),
        seq_param(&ckpt.seq),
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
