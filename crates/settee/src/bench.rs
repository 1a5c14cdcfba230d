//! `settee bench`: the command-line glue of the profiling suite (the suite
//! itself is crates/settee-bench). Parses the arguments, runs the bench on
//! its own multi-threaded runtime and maps the outcome to an exit code:
//! 0 when every scenario ran, 1 when the run could not start or a scenario
//! failed outright, or a fault-tolerance round lost an acknowledged write.

use std::path::PathBuf;
use std::process::ExitCode;

use settee_bench::{scenarios, Options};

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Server to measure (CouchDB-compatible; credentials in the URL:
    /// http://user:pass@host:port).
    #[arg(long)]
    url: Option<String>,
    /// More servers, measured side by side (interleaved scenario by scenario);
    /// ratios are relative to --url.
    #[arg(long = "vs")]
    vs: Vec<String>,
    /// Scenarios or groups (chapter, concurrency, copy, views, mango,
    /// attachments, ycsb, embedded, fault); default all. See --list.
    scenarios: Vec<String>,
    /// Shrink every scenario (counts and durations): a smoke run.
    #[arg(long)]
    quick: bool,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write SVG plots into this directory.
    #[arg(long)]
    plots: Option<PathBuf>,
    /// Start settee servers (temporary data directories) for the fault
    /// tolerance scenario, and as the target when no --url is given.
    #[arg(long)]
    spawn_settee: bool,
    /// The settee binary to start (default: this executable).
    #[arg(long)]
    settee_bin: Option<PathBuf>,
    /// A directory on the data directory's disk, where `fsync_floor`
    /// measures fdatasync (default: the current directory).
    #[arg(long)]
    fsync_dir: Option<PathBuf>,
    /// List the scenarios and exit.
    #[arg(long)]
    list: bool,
}

pub fn run(args: BenchArgs) -> ExitCode {
    if args.list {
        for d in scenarios::all() {
            println!("{:<28} {:<12} {}", d.name, d.group, d.about);
        }
        return ExitCode::SUCCESS;
    }
    let command = std::env::args()
        .map(|a| settee_bench::client::redact(&a))
        .collect::<Vec<_>>()
        .join(" ");
    let opts = Options {
        urls: args.url.into_iter().chain(args.vs).collect(),
        scenarios: args.scenarios,
        quick: args.quick,
        json: args.json,
        plots: args.plots,
        spawn_settee: args.spawn_settee,
        settee_bin: args.settee_bin,
        fsync_dir: args.fsync_dir,
        command,
        progress: true,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("settee bench: cannot start runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut out = std::io::stdout();
    match runtime.block_on(settee_bench::run(opts, &mut out)) {
        Ok(report) => {
            let failed = report.results.iter().any(|o| {
                o.error_messages
                    .iter()
                    .any(|m| m.starts_with("scenario failed"))
                    || o.extra.get("lost").and_then(|v| v.as_u64()).unwrap_or(0) > 0
            });
            if failed {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("settee bench: {e}");
            ExitCode::FAILURE
        }
    }
}
