//! `settee stress`: the command-line glue of the robustness suite (the
//! suite itself is crates/settee-stress). `stress hostile` sends seeded
//! malformed and hostile requests at a running server and checks it
//! afterwards; `stress soak` runs many keep-alive clients against it.
//! Both print their figures; the exit code is 0 only when nothing failed
//! (1 when the run found a problem, 2 when it could not run).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use settee_stress::{HostileOptions, SoakOptions, Target};

#[derive(clap::Args, Debug)]
pub struct StressArgs {
    #[command(subcommand)]
    command: StressCommand,
}

#[derive(clap::Subcommand, Debug)]
enum StressCommand {
    /// Malformed and hostile requests, then consistency checks.
    Hostile(HostileArgs),
    /// Many concurrent keep-alive clients mixing reads and writes.
    Soak(SoakArgs),
}

#[derive(clap::Args, Debug)]
struct HostileArgs {
    /// Server root with admin credentials: http://user:pass@127.0.0.1:PORT
    /// (loopback only).
    #[arg(long)]
    url: String,
    /// Requests to generate (pipelined copies come on top).
    #[arg(long, default_value_t = 100_000)]
    requests: u64,
    /// Generator seed: request I of seed S is always the same bytes.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Parallel connections (slow clients run beside them).
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// Most seconds spent sending.
    #[arg(long, default_value_t = 900)]
    secs: u64,
    /// Seconds a well-framed request may wait for its response.
    #[arg(long, default_value_t = 30)]
    timeout_secs: u64,
    /// Largest request body in MiB (oversized-body cases above it are skipped).
    #[arg(long, default_value_t = 70)]
    max_body_mb: usize,
    /// Wrong admin passwords per million requests (each costs the server a
    /// PBKDF2 verification).
    #[arg(long, default_value_t = 100)]
    pbkdf2_per_million: u32,
    /// Slow or broken client deliveries per thousand requests.
    #[arg(long, default_value_t = 15)]
    slow_per_mille: u32,
    /// Server process id (RSS, liveness); default: the process listening
    /// on the URL's port.
    #[arg(long)]
    pid: Option<u32>,
    /// The server's stderr log, scanned for panics afterwards.
    #[arg(long)]
    server_stderr: Option<PathBuf>,
    /// Skip the consistency check after the run.
    #[arg(long)]
    no_consistency: bool,
    /// Only regenerate request INDEX, send it alone and print both sides.
    #[arg(long)]
    show: Option<u64>,
    /// Write the figures as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
struct SoakArgs {
    /// Server root with admin credentials (loopback only).
    #[arg(long)]
    url: String,
    /// Concurrent keep-alive clients.
    #[arg(long, default_value_t = 1000)]
    clients: usize,
    /// Seconds of load.
    #[arg(long, default_value_t = 60)]
    secs: u64,
    /// Documents in the soak database.
    #[arg(long, default_value_t = 10_000)]
    docs: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Server process id; default: the process listening on the URL's port.
    #[arg(long)]
    pid: Option<u32>,
    /// The server's stderr log, scanned for panics afterwards.
    #[arg(long)]
    server_stderr: Option<PathBuf>,
    /// Write the figures as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

pub fn run(args: StressArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("settee stress: cannot start runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(run_async(args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("settee stress: {e}");
            ExitCode::from(2)
        }
    }
}

fn write_json(path: Option<&PathBuf>, value: &impl serde::Serialize) -> Result<(), String> {
    let Some(path) = path else { return Ok(()) };
    let text = serde_json::to_string_pretty(value).map_err(|e| e.to_string())?;
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// True when the run passed.
async fn run_async(args: StressArgs) -> Result<bool, String> {
    match args.command {
        StressCommand::Hostile(a) => {
            let mut o = HostileOptions::new(Target::parse(&a.url)?);
            o.requests = a.requests;
            o.seed = a.seed;
            o.connections = a.connections.max(1);
            o.max_duration = Duration::from_secs(a.secs);
            o.request_timeout = Duration::from_secs(a.timeout_secs.max(1));
            o.max_body_bytes = a.max_body_mb << 20;
            o.pbkdf2_per_million = a.pbkdf2_per_million;
            o.slow_per_mille = a.slow_per_mille.min(1000);
            o.pid = a.pid;
            o.server_stderr = a.server_stderr;
            o.check_consistency = !a.no_consistency;
            o.progress = true;
            if let Some(i) = a.show {
                print!("{}", settee_stress::hostile::show(&o, i).await);
                return Ok(true);
            }
            let report = settee_stress::hostile::run(o).await?;
            print!("{}", report.render());
            write_json(a.json.as_ref(), &report)?;
            Ok(report.ok())
        }
        StressCommand::Soak(a) => {
            let mut o = SoakOptions::new(Target::parse(&a.url)?);
            o.clients = a.clients.max(1);
            o.duration = Duration::from_secs(a.secs.max(1));
            o.docs = a.docs.max(1);
            o.seed = a.seed;
            o.pid = a.pid;
            o.server_stderr = a.server_stderr;
            o.progress = true;
            let report = settee_stress::soak::run(o).await?;
            print!("{}", report.render());
            write_json(a.json.as_ref(), &report)?;
            Ok(report.ok())
        }
    }
}
