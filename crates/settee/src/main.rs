//! The `settee` binary. `settee serve` runs the CouchDB-compatible server:
//! it opens the engine and the configuration in the data directory, makes
//! sure a server admin exists (no admin party), listens, and on SIGTERM or
//! SIGINT stops accepting, finishes in-flight requests and shuts the engine
//! down — which applies and fsyncs delayed and batch-mode writes — before
//! exiting.
//!
//! Contract with scripts and tests: once the server accepts connections it
//! prints exactly one line `settee listening on http://ADDR:PORT` to stdout
//! (with `--bind 127.0.0.1:0` the kernel picks the port).

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use settee_db::{Durability, Engine, EngineOptions, RocksOptions};
use settee_http::config::Config;
use settee_http::{AppState, ServeOptions};

mod bench;
mod stress;
mod tools;

/// mimalloc: the engine's writer and the HTTP layer allocate many small
/// short-lived buffers; glibc malloc cost ~20% more time in profiles.
/// Built with `no_thp`: mimalloc does not ask for transparent huge pages
/// for its arenas. The first touch of a huge page zeroes 2 MiB at once —
/// on the development VM 3.5–5 ms, stalling whichever request grows the
/// heap (bulk_doc_1000 on a fresh server: p99 13–31 ms with THP, 4–6 ms
/// without; `bench/RESULTS.md`, session 7).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "settee",
    version,
    about = "Settee: a CouchDB-compatible document database"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve CouchDB's HTTP API.
    Serve(ServeArgs),
    /// Benchmark CouchDB-compatible servers side by side (the profiling suite).
    Bench(bench::BenchArgs),
    /// Robustness: hostile requests and a many-client soak against a running server.
    Stress(stress::StressArgs),
    #[command(flatten)]
    Tool(tools::ToolCommand),
}

#[derive(clap::Args, Debug)]
struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:5984")]
    bind: SocketAddr,
    /// Data directory (databases and settee.ini).
    #[arg(long, default_value = "./settee-data")]
    data: PathBuf,
    /// Server admin as user:password (stored only as a PBKDF2 hash).
    #[arg(long, env = "SETTEE_ADMIN", hide_env_values = true)]
    admin: Option<String>,
    /// Most connections served at once.
    #[arg(long, default_value_t = 2048)]
    max_connections: usize,
    /// Milliseconds a client has to send a request head.
    #[arg(long, default_value_t = 30_000)]
    header_timeout_ms: u64,
    /// Microseconds the CPUs keep polling after each request instead of
    /// sleeping (0: off). Lowers latency for serial clients on machines where
    /// waking an idle CPU is slow (VMs), at the cost of CPU time that would
    /// otherwise be idle. At most 1 s.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    idle_poll_us: u64,
    /// MiB of each of the first two write-ahead logs to pre-format in the
    /// background after start-up (0: off): they are filled and recycled,
    /// so commits overwrite log blocks instead of appending (an fsync after
    /// an append also commits the file's new size through the file system's
    /// journal).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(0..=4096))]
    wal_preformat_mb: u64,
    /// MiB of memory for the latest by-id records of documents (their
    /// revision trees and winning bodies), so a `GET` of a recently read
    /// document skips the storage engine (0: off).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(0..=65536))]
    doc_cache_mb: u64,
    /// Seconds compaction keeps an attachment body that no document names
    /// yet (an upload that just finished is named by the document write
    /// that follows it; one whose process died is dropped after this).
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(0..=86_400 * 30))]
    blob_grace_s: u64,
    /// Join a cluster coordinated by the etcd at these URLs
    /// (comma-separated); without it the server runs alone.
    #[arg(long, value_delimiter = ',')]
    cluster_etcd: Vec<String>,
    /// The node's name in the cluster (unique among live members).
    #[arg(long, default_value = "settee@127.0.0.1")]
    node: String,
    /// The URL other nodes reach this one at (default: http://BIND).
    #[arg(long)]
    advertise: Option<String>,
    /// Reach cluster member NAME at URL instead of the URL it advertises
    /// (a proxy, another network's address); repeatable.
    #[arg(long = "peer-url", value_name = "NAME=URL", value_parser = parse_peer_url)]
    peer_urls: Vec<(String, String)>,
    /// The cluster's key prefix in etcd (several clusters may share one).
    #[arg(long, default_value = "/settee/")]
    cluster_prefix: String,
    /// Seconds the node's etcd lease lives without renewal: how soon a
    /// node that died is seen as down (2 to 300).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(2..=300))]
    lease_ttl_s: u64,
    /// Milliseconds between internal replication sweeps (each of the
    /// node's shard copies pushed to the other copies).
    #[arg(long, default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(100..=86_400_000))]
    sync_interval_ms: u64,
    /// Seconds a node may be down before its shard copies are replaced on
    /// the live nodes (`[cluster] heal_after_s`).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=604_800))]
    heal_after_s: u64,
    /// Shard moves in flight at once, cluster-wide, when this node decides
    /// (`[cluster] rebalance_max_moves`).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=64))]
    rebalance_max_moves: u64,
    /// MiB per second the shard moves this node fills may copy together
    /// (`[cluster] rebalance_max_bytes_per_s`; 0: no limit).
    #[arg(long = "rebalance-max-mib-s", default_value_t = 64, value_parser = clap::value_parser!(u64).range(0..=1 << 20))]
    rebalance_max_mib_s: u64,
    /// Shut down gracefully when stdin reaches end of file (lets a parent
    /// process, e.g. a test harness, tie the server's life to its own).
    #[arg(long, hide = true)]
    exit_on_stdin_eof: bool,
    /// Hand every update to the database's writer thread, even a lone one
    /// (for measuring what applying it on the caller's thread saves).
    #[arg(long, hide = true)]
    writer_handoff: bool,
}

/// `NAME=URL` of `--peer-url`.
fn parse_peer_url(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((name, url)) if !name.is_empty() && url.starts_with("http") => {
            Ok((name.to_string(), url.to_string()))
        }
        _ => Err(format!(
            "expected NAME=URL (an http or https URL), got {s:?}"
        )),
    }
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SETTEE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Bench(args) => bench::run(args),
        Command::Stress(args) => stress::run(args),
        Command::Tool(t) => tools::run(t),
        Command::Serve(args) => match serve(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("settee: {e}");
                ExitCode::FAILURE
            }
        },
    }
}

fn serve(args: ServeArgs) -> Result<(), String> {
    std::fs::create_dir_all(&args.data)
        .map_err(|e| format!("cannot create {}: {e}", args.data.display()))?;
    let config =
        Arc::new(Config::load(&args.data).map_err(|e| format!("cannot read configuration: {e}"))?);
    let settings = config.settings();
    let opts = EngineOptions {
        default_durability: if settings.delayed_commits {
            Durability::Delayed
        } else {
            Durability::Full
        },
        // The HTTP layer enforces the live `max_document_size`; the engine's
        // bound is only a backstop.
        max_document_bytes: usize::try_from(settings.max_http_request_size).unwrap_or(usize::MAX),
        rocks: RocksOptions {
            wal_preformat_bytes: args.wal_preformat_mb << 20,
            ..RocksOptions::default()
        },
        doc_cache_bytes: args.doc_cache_mb << 20,
        blob_grace_ms: args.blob_grace_s * 1000,
        caller_commits: !args.writer_handoff,
        ..EngineOptions::default()
    };
    let engine =
        Engine::open(&args.data, opts).map_err(|e| format!("cannot open the engine: {e}"))?;
    let idle_poll = match args.idle_poll_us {
        0 => None,
        us => Some(
            settee_http::idle_poll::IdlePoll::start(std::time::Duration::from_micros(us))
                .map_err(|e| format!("cannot start idle polling: {e}"))?,
        ),
    };
    let app = AppState::new(engine.clone(), config.clone(), idle_poll)
        .map_err(|e| format!("cannot start the JavaScript workers: {e}"))?;
    if let Some((user, password)) =
        settee_http::auth::ensure_admin(&app.auth, &config, args.admin.as_deref())?
    {
        {
            eprintln!("settee: no server admin was configured; created admin user '{user}' with password: {password}");
            eprintln!(
                "settee: (shown once; only its PBKDF2 hash is stored in {})",
                args.data.join("settee.ini").display()
            );
        }
    }
    settee_http::auth::ensure_secret(&config)?;
    let background = app.clone();
    settee_http::auth::ensure_users_db(&engine)
        .map_err(|e| format!("cannot create the _users database: {e}"))?;
    settee_http::replicator_db::ensure_replicator_db(&engine)
        .map_err(|e| format!("cannot create the _replicator database: {e}"))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start runtime: {e}"))?;
    let joined_engine = engine.clone();
    let result = runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(args.bind)
            .await
            .map_err(|e| format!("cannot bind {}: {e}", args.bind))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        {
            let mut out = std::io::stdout().lock();
            // A closed stdout must not stop the server.
            let _ = writeln!(out, "settee listening on http://{addr}");
            let _ = out.flush();
        }
        let coordinator = match args.cluster_etcd.is_empty() {
            true => None,
            false => {
                let config = settee_cluster::NodeConfig {
                    etcd: settee_cluster::EtcdConfig::new(args.cluster_etcd.clone())
                        .with_prefix(&args.cluster_prefix),
                    name: args.node.clone(),
                    advertise: args
                        .advertise
                        .clone()
                        .unwrap_or_else(|| format!("http://{addr}")),
                    ttl: std::time::Duration::from_secs(args.lease_ttl_s),
                    sync_interval: std::time::Duration::from_millis(args.sync_interval_ms),
                    decider: settee_cluster::decider::DeciderConfig {
                        heal_after: std::time::Duration::from_secs(args.heal_after_s),
                        max_moves: args.rebalance_max_moves as usize,
                        max_bytes_per_s: args.rebalance_max_mib_s << 20,
                    },
                    peer_urls: args.peer_urls.iter().cloned().collect(),
                };
                let c = settee_cluster::Coordinator::join(config, joined_engine)
                    .await
                    .map_err(|e| format!("cannot join the cluster: {e}"))?;
                settee_http::routes::cluster::attach(&app, &c);
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "settee joined the cluster as {}", args.node);
                let _ = out.flush();
                Some(c)
            }
        };
        let serve_opts = ServeOptions {
            max_connections: args.max_connections.max(1),
            header_read_timeout: std::time::Duration::from_millis(args.header_timeout_ms.max(1)),
            ..ServeOptions::default()
        };
        let served = settee_http::serve(
            listener,
            app.clone(),
            serve_opts,
            shutdown_signal(args.exit_on_stdin_eof),
        )
        .await
        .map_err(|e| e.to_string());
        if let Some(c) = coordinator {
            if let Err(e) = c.leave().await {
                eprintln!("settee: leaving the cluster: {e}");
            }
        }
        served
    });
    // Flush delayed and batched writes; the writers use blocking calls, so
    // this runs outside the runtime.
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    // Nothing may touch the store while the process exits: the background
    // threads stop first, then the engine flushes and the store closes
    // (its background work waited for), whatever handles remain.
    background.stop_background();
    drop(background);
    let closed = engine
        .close()
        .map_err(|e| format!("cannot close the store: {e}"));
    result.and(closed)
}

/// Waits until stdin is closed (or fails).
fn stdin_eof() -> tokio::sync::oneshot::Receiver<()> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 256];
        let mut stdin = std::io::stdin();
        while matches!(std::io::Read::read(&mut stdin, &mut buf), Ok(n) if n > 0) {}
        let _ = tx.send(());
    });
    rx
}

async fn shutdown_signal(exit_on_stdin_eof: bool) {
    use tokio::signal::unix::{signal, SignalKind};
    let eof = async {
        if exit_on_stdin_eof {
            let _ = stdin_eof().await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    let term = async {
        match signal(SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot install SIGTERM handler");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = term => {}
        _ = tokio::signal::ctrl_c() => {}
        _ = eof => {}
    }
}
