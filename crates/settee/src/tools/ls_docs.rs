//! `settee ls-docs`: a database's documents as JSON Lines on stdout.
//!
//! Three ways to read, one line per document (or per revision):
//! - default: `_all_docs?include_docs=true` pages, walked by `startkey`;
//!   the current winning revision of every live document;
//! - `--since SEQ`: `_changes?include_docs=true` from SEQ — winners,
//!   deletions included as tombstones (`"_deleted":true`);
//! - `--revs`: a faithful dump for `post-docs --new-edits=false`: every leaf
//!   revision (conflicts and deleted leaves too) with its `_revisions`
//!   path, from `_changes?style=all_docs` + `_bulk_get?revs=true`.
//!
//! The page size (`-u`) is chosen at run time unless given: pages grow
//! while throughput improves (the seed: 50 → 61 min, 2000 → 5 min).

use std::io::Write;
use std::time::{Duration, Instant};

use serde_json::Value;
use settee_client::adapt::Sizer;
use settee_client::{ChangesQuery, Db};

use super::conn::{explain, ConnArgs};
use super::jsonl::{is_design, write_doc};
use super::progress::Progress;
use super::stalled;
use super::ToolError;
use settee_replicator::read::{read_leaves, reader_db, ReadOptions};

pub const EXAMPLES: &str = "Examples:
  settee ls-docs postal > postal.jsonl                 # winners of live docs, design docs excluded
  settee ls-docs postal -u 2000 -p 1 > /dev/null       # time one page of 2000
  settee ls-docs http://admin:pw@db1:5984/postal --revs --include-design \\
      | settee post-docs http://admin:pw@db2:5984/postal --new-edits=false   # faithful copy
  settee ls-docs postal --since 1200                   # what changed after seq 1200";

/// Page size bounds for automatic choice.
pub const PAGE_START: usize = 1000;
pub const PAGE_MAX: usize = 10_000;
/// A page's documents should stay below this many bytes.
pub const PAGE_BYTES_MAX: usize = 64 << 20;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Database URL (http(s)://user:pass@host:port/db) or name on --server.
    pub db: String,
    /// Documents per page (default: chosen automatically from throughput).
    #[arg(short = 'u', long = "unit", value_name = "UNIT")]
    pub unit: Option<usize>,
    /// Stop after this many pages.
    #[arg(short = 'p', long = "pages", value_name = "PAGES")]
    pub pages: Option<u64>,
    /// Include design documents (excluded by default).
    #[arg(long)]
    pub include_design: bool,
    /// Read the changes feed from this sequence instead of _all_docs.
    #[arg(long, value_name = "SEQ")]
    pub since: Option<String>,
    /// Every leaf revision with _revisions (and deletions), for
    /// `post-docs --new-edits=false`.
    #[arg(long)]
    pub revs: bool,
    #[command(flatten)]
    pub conn: ConnArgs,
}

pub fn page_sizer(unit: Option<usize>) -> Sizer {
    match unit {
        Some(n) => Sizer::fixed(n.clamp(1, 100_000)),
        None => Sizer::adaptive(
            PAGE_START,
            10,
            PAGE_MAX,
            Duration::from_secs(2),
            PAGE_BYTES_MAX,
        ),
    }
}

/// A sequence from the command line: a number if it is one, else opaque.
pub fn parse_seq(s: &str) -> Value {
    s.parse::<u64>()
        .map(Value::from)
        .unwrap_or_else(|_| Value::String(s.to_string()))
}

pub async fn run(args: Args) -> Result<(), ToolError> {
    let client = args.conn.client()?;
    let db = reader_db(&args.conn.db(&client, &args.db)?);
    let info = db.info().await.map_err(|e| explain(&db, "source", e))?;
    let progress = Progress::new(Some(info.doc_count), 0);
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(1 << 20, stdout.lock());
    let mut sizer = page_sizer(args.unit);
    let pages_max = args.pages.unwrap_or(u64::MAX);
    let t0 = Instant::now();
    let n = if args.revs || args.since.is_some() {
        let since = args
            .since
            .as_deref()
            .map(parse_seq)
            .unwrap_or(Value::from(0));
        changes_mode(
            &db, &args, since, &mut sizer, pages_max, &mut out, &progress,
        )
        .await?
    } else {
        all_docs_mode(&db, &args, &mut sizer, pages_max, &mut out, &progress).await?
    };
    out.flush().map_err(stdout_err(n))?;
    progress.finish();
    tracing::info!(
        docs = n,
        secs = t0.elapsed().as_secs_f64(),
        page = sizer.size(),
        "ls-docs done"
    );
    Ok(())
}

fn stdout_err(n: u64) -> impl Fn(std::io::Error) -> ToolError {
    move |e| ToolError::Fatal(format!("cannot write to stdout after {n} documents: {e}"))
}

async fn all_docs_mode<W: Write>(
    db: &Db,
    args: &Args,
    sizer: &mut Sizer,
    pages_max: u64,
    out: &mut W,
    progress: &Progress,
) -> Result<u64, ToolError> {
    let mut n = 0u64;
    let mut last: Option<String> = None;
    let mut pages = 0u64;
    let mut stalls = 0u32;
    while pages < pages_max {
        let size = sizer.size();
        // After the first page, `startkey` repeats the last id: ask one more.
        let limit = size + usize::from(last.is_some());
        let t = Instant::now();
        let page = match db.all_docs(last.as_deref(), limit).await {
            Ok(p) => {
                stalls = 0;
                p
            }
            Err(e) => {
                let pause = stalled(e, sizer, &mut stalls).map_err(|e| explain(db, "source", e))?;
                tokio::time::sleep(pause).await;
                continue;
            }
        };
        let got = page.rows.len();
        let mut bytes = 0;
        let mut rows = 0;
        for row in &page.rows {
            if last.as_deref() == Some(row.id.as_str()) {
                continue;
            }
            rows += 1;
            if !args.include_design && is_design(&row.id) {
                continue;
            }
            let Some(doc) = &row.doc else { continue };
            bytes += doc.get().len();
            write_doc(out, doc).map_err(stdout_err(n))?;
            n += 1;
        }
        progress.inc(rows as u64);
        sizer.observe(rows, bytes, t.elapsed());
        pages += 1;
        if got < limit {
            break;
        }
        last = page.rows.last().map(|r| r.id.clone());
    }
    Ok(n)
}

async fn changes_mode<W: Write>(
    db: &Db,
    args: &Args,
    mut since: Value,
    sizer: &mut Sizer,
    pages_max: u64,
    out: &mut W,
    progress: &Progress,
) -> Result<u64, ToolError> {
    let mut n = 0u64;
    let mut pages = 0u64;
    let mut stalls = 0u32;
    let opts = ReadOptions::new(!args.include_design);
    while pages < pages_max {
        let size = sizer.size();
        let t = Instant::now();
        let (rows, bytes, next) = if args.revs {
            let page = match read_leaves(db, &since, size, &opts).await {
                Ok(p) => p,
                Err(e) => {
                    let pause =
                        stalled(e, sizer, &mut stalls).map_err(|e| explain(db, "source", e))?;
                    tokio::time::sleep(pause).await;
                    continue;
                }
            };
            for doc in &page.docs {
                write_doc(out, doc).map_err(stdout_err(n))?;
                n += 1;
            }
            progress.inc(page.changes as u64);
            (page.rows, page.bytes, page.last_seq)
        } else {
            let page = match db
                .changes(&ChangesQuery {
                    since: since.clone(),
                    limit: Some(size),
                    all_docs: false,
                    include_docs: true,
                    longpoll_ms: None,
                    filter: None,
                })
                .await
            {
                Ok(p) => p,
                Err(e) => {
                    let pause =
                        stalled(e, sizer, &mut stalls).map_err(|e| explain(db, "source", e))?;
                    tokio::time::sleep(pause).await;
                    continue;
                }
            };
            let mut bytes = 0;
            for c in &page.results {
                if !args.include_design && is_design(&c.id) {
                    continue;
                }
                if let Some(doc) = &c.doc {
                    bytes += doc.get().len();
                    write_doc(out, doc).map_err(stdout_err(n))?;
                    n += 1;
                }
            }
            progress.inc(page.results.len() as u64);
            (page.results.len(), bytes, page.last_seq)
        };
        sizer.observe(rows, bytes, t.elapsed());
        stalls = 0;
        pages += 1;
        since = next;
        if rows < size {
            break;
        }
    }
    Ok(n)
}
