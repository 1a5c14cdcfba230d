//! `settee post-docs`: JSON Lines from stdin into a database, in
//! `_bulk_docs` batches.
//!
//! A reader thread parses stdin (lines bounded by `--max-line-bytes`) and
//! hands chunks of documents over a bounded channel to the writer, so
//! parsing and writing overlap with bounded memory (≤ `CHUNKS_QUEUED`
//! chunks of ≤ `CHUNK_BYTES_MAX` bytes). Malformed lines are reported on
//! stderr with their line number, skipped, and make the exit code 2; so
//! do per-document failures (see [`super::sink`]).

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use serde_json::value::RawValue;

use super::conn::{explain, ConnArgs};
use super::jsonl::{parse_doc, read_line, Line, LINE_BYTES_MAX};
use super::progress::Progress;
use super::ToolError;
use settee_replicator::write::{Sink, BATCH_DOCS_MAX};

pub const EXAMPLES: &str = "Examples:
  settee ls-docs postal -u 2000 | grep -v _design | settee post-docs testp -u 200 --new-edits=false
  settee post-docs http://admin:pw@127.0.0.1:5984/testp < docs.jsonl
  settee ls-docs src --revs --include-design | settee post-docs dst --new-edits=false

Each input line is one JSON object (a document). Failures are printed to
stderr as JSON lines {\"id\",\"error\",\"reason\",\"line\"}; the exit code is 2
when any document or line failed, 1 on a fatal error.";

/// Chunks waiting between the reader thread and the writer.
const CHUNKS_QUEUED: usize = 4;
/// Bytes per chunk handed to the writer.
const CHUNK_BYTES_MAX: usize = 16 << 20;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Database URL (http(s)://user:pass@host:port/db) or name on --server.
    pub db: String,
    /// Documents per _bulk_docs request (default: chosen automatically).
    #[arg(short = 'u', long = "unit", value_name = "UNIT")]
    pub unit: Option<usize>,
    /// `--new-edits=false` stores the given revisions as they are (with
    /// `_revisions`: a faithful copy) instead of creating new ones.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true", require_equals = true)]
    pub new_edits: bool,
    /// Longest accepted input line in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = LINE_BYTES_MAX)]
    pub max_line_bytes: usize,
    #[command(flatten)]
    pub conn: ConnArgs,
}

struct Chunk {
    docs: Vec<Box<RawValue>>,
    lines: Vec<u64>,
}

pub async fn run(args: Args) -> Result<(), ToolError> {
    let client = args.conn.client()?;
    let db = args.conn.db(&client, &args.db)?;
    db.info().await.map_err(|e| explain(&db, "target", e))?;
    let chunk_docs = args.unit.unwrap_or(BATCH_DOCS_MAX).clamp(1, 100_000);
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Chunk>(CHUNKS_QUEUED);
    let malformed = Arc::new(AtomicU64::new(0));
    let max_line = args.max_line_bytes.max(2);
    let reader = {
        let malformed = malformed.clone();
        std::thread::spawn(move || read_stdin(tx, chunk_docs, max_line, &malformed))
    };
    let mut sink = Sink::new(
        db.clone(),
        args.new_edits,
        args.unit,
        client.options().retry,
        std::sync::Arc::new(super::StderrReport),
    );
    let progress = Progress::new(None, 0);
    let t0 = Instant::now();
    let mut result: Result<(), ToolError> = Ok(());
    while let Some(chunk) = rx.recv().await {
        if let Err(e) = sink.write(&chunk.docs, Some(&chunk.lines)).await {
            result = Err(e.into());
            break;
        }
        progress.inc(chunk.docs.len() as u64);
    }
    progress.finish();
    // On a fatal error the reader may be blocked on stdin: do not wait for it.
    result?;
    let read = reader
        .join()
        .map_err(|_| ToolError::Fatal("stdin reader panicked".into()))?;
    let lines_read = read.map_err(|e| ToolError::Fatal(format!("cannot read stdin: {e}")))?;
    let malformed = malformed.load(Ordering::Relaxed);
    let secs = t0.elapsed().as_secs_f64();
    tracing::info!(
        lines = lines_read,
        written = sink.written,
        secs,
        "post-docs done"
    );
    if malformed > 0 || sink.failed > 0 {
        let hint = if args.new_edits && sink.conflicts > 0 {
            "; hint: a document whose _rev the target lacks conflicts — \
             to store revisions as they are (a copy), pass --new-edits=false"
        } else {
            ""
        };
        return Err(ToolError::Partial(format!(
            "{} documents written; {} failed, {} malformed input lines (reported above){hint}",
            sink.written, sink.failed, malformed
        )));
    }
    Ok(())
}

/// Reads stdin to the end (or until the writer goes away); returns the
/// number of lines read.
fn read_stdin(
    tx: tokio::sync::mpsc::Sender<Chunk>,
    chunk_docs: usize,
    max_line: usize,
    malformed: &AtomicU64,
) -> std::io::Result<u64> {
    let stdin = std::io::stdin();
    let mut r = std::io::BufReader::with_capacity(1 << 20, stdin.lock());
    let mut buf = Vec::new();
    let mut line_no = 0u64;
    let mut chunk = Chunk {
        docs: Vec::new(),
        lines: Vec::new(),
    };
    let mut chunk_bytes = 0;
    let report = |line: u64, reason: String| {
        malformed.fetch_add(1, Ordering::Relaxed);
        let v = serde_json::json!({"line": line, "error": "bad_request", "reason": format!("line {line}: {reason}")});
        let _ = writeln!(std::io::stderr().lock(), "{v}");
    };
    loop {
        let got = read_line(&mut r, &mut buf, max_line)?;
        if got == Line::Eof {
            break;
        }
        line_no += 1;
        if got == Line::TooLong {
            report(line_no, format!("longer than {max_line} bytes"));
            continue;
        }
        if buf.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match parse_doc(&buf) {
            Ok(doc) => {
                chunk_bytes += doc.get().len();
                chunk.docs.push(doc);
                chunk.lines.push(line_no);
            }
            Err(reason) => report(line_no, reason),
        }
        if chunk.docs.len() >= chunk_docs || chunk_bytes >= CHUNK_BYTES_MAX {
            let full = std::mem::replace(
                &mut chunk,
                Chunk {
                    docs: Vec::new(),
                    lines: Vec::new(),
                },
            );
            chunk_bytes = 0;
            if tx.blocking_send(full).is_err() {
                return Ok(line_no);
            }
        }
    }
    if !chunk.docs.is_empty() {
        let _ = tx.blocking_send(chunk);
    }
    Ok(line_no)
}
