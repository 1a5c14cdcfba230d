//! Operator tools: `ls-docs`, `post-docs`, `mkdb`, `rmdb`, `copy` — the
//! seed's `lsdocs | grep -v _design | postdocs` workflow, fast by default.
//! They talk HTTP to any CouchDB-compatible server through settee-client.
//!
//! Conventions shared by every tool:
//! - a database is a URL (`http(s)://user:pass@host:port/db`) or a bare
//!   name joined to `--server` / `SETTEE_URL` ([`conn`]);
//! - data goes to stdout (JSON Lines), everything else to stderr;
//! - exit codes: 0 success, 1 fatal error (nothing or only part was done,
//!   and the message says which), 2 finished but some documents or input
//!   lines failed (each reported on stderr as a JSON line);
//! - every buffer is bounded: input line length, channel capacities, page
//!   and batch sizes.

pub mod conn;
pub mod copy;
pub mod jsonl;
pub mod ls_docs;
pub mod mkdb;
pub mod post_docs;
pub mod progress;
pub mod rmdb;

use std::process::ExitCode;
use std::time::Duration;

use settee_client::adapt::Sizer;
use settee_replicator::write::{Report, WriteError};

/// The writing half's reports, on stderr: each refused document as a JSON
/// line (`id`, `error`, `reason`, `line`), stalls as a message.
#[derive(Debug)]
pub struct StderrReport;

impl Report for StderrReport {
    fn refused(&self, id: Option<&str>, line: Option<u64>, error: &str, reason: &str) {
        use std::io::Write;
        let mut v = serde_json::json!({"id": id, "error": error, "reason": reason});
        if let Some(l) = line {
            v["line"] = l.into();
        }
        let _ = writeln!(std::io::stderr().lock(), "{v}");
    }
    fn stalled(&self, message: &str) {
        eprintln!("settee: {message}");
    }
}

/// [`settee_replicator::read::stalled`], said on stderr.
pub fn stalled(
    e: settee_client::Error,
    sizer: &mut Sizer,
    stalls: &mut u32,
) -> Result<Duration, settee_client::Error> {
    let (pause, message) = settee_replicator::read::stalled(e, sizer, stalls)?;
    eprintln!("settee: {message}");
    Ok(pause)
}

impl From<WriteError> for ToolError {
    fn from(e: WriteError) -> ToolError {
        ToolError::Fatal(e.0)
    }
}

/// The tool subcommands (flattened into the binary's command list).
#[derive(clap::Subcommand, Debug)]
pub enum ToolCommand {
    /// Stream a database's documents to stdout as JSON Lines.
    #[command(after_help = ls_docs::EXAMPLES)]
    LsDocs(ls_docs::Args),
    /// Write JSON Lines from stdin to a database with _bulk_docs.
    #[command(after_help = post_docs::EXAMPLES)]
    PostDocs(post_docs::Args),
    /// Create a database.
    #[command(after_help = mkdb::EXAMPLES)]
    Mkdb(mkdb::Args),
    /// Delete a database (asks for confirmation unless --yes).
    #[command(after_help = rmdb::EXAMPLES)]
    Rmdb(rmdb::Args),
    /// Copy a database (revisions, conflicts, deletions), resumably.
    #[command(after_help = copy::EXAMPLES)]
    Copy(copy::Args),
}

/// Why a tool stopped.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// A call failed; the message says what and where.
    #[error("{0}")]
    Fatal(String),
    /// The run finished but some items failed (already reported one by one).
    #[error("{0}")]
    Partial(String),
}

impl ToolError {
    fn exit_code(&self) -> u8 {
        match self {
            ToolError::Fatal(_) => 1,
            ToolError::Partial(_) => 2,
        }
    }
}

/// Runs a tool and maps its outcome to the process exit code.
pub fn run(cmd: ToolCommand) -> ExitCode {
    let (name, result) = match cmd {
        ToolCommand::LsDocs(a) => ("ls-docs", block_on(ls_docs::run(a))),
        ToolCommand::PostDocs(a) => ("post-docs", block_on(post_docs::run(a))),
        ToolCommand::Mkdb(a) => ("mkdb", block_on(mkdb::run(a))),
        ToolCommand::Rmdb(a) => ("rmdb", block_on(rmdb::run(a))),
        ToolCommand::Copy(a) => ("copy", block_on(copy::run(a))),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("settee {name}: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// Two worker threads: one reads the source while the other writes.
fn block_on<F: std::future::Future<Output = Result<(), ToolError>>>(f: F) -> Result<(), ToolError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| ToolError::Fatal(format!("cannot start runtime: {e}")))?;
    rt.block_on(f)
}
