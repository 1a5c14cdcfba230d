//! A bench run: resolve the servers (and start one with `--spawn-settee`
//! when no URL is given), then run the selected scenarios in table order,
//! each against every server in turn before the next scenario starts
//! (interleaved, so a noisy minute hurts all servers alike), printing each
//! scenario's table as soon as it is done, then the side-by-side table with
//! ratios, the targets, the JSON file and the plots.
//!
//! A scenario that fails outright becomes a row with one error and the
//! message; the run goes on.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use crate::client::{redact, Conn, Target};
use crate::error::BenchError;
use crate::machine::{loadavg, Machine};
use crate::progress::Progress;
use crate::report::{self, Report, ServerInfo};
use crate::scenarios::{self, Ctx, Outcome, Scope};
use crate::spawn::{settee_binary, Spawned};
use crate::stats::Summary;
use crate::targets;

/// What to run.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Servers; the first is the reference for ratios.
    pub urls: Vec<String>,
    /// Scenario names or groups; empty = all.
    pub scenarios: Vec<String>,
    pub quick: bool,
    pub json: Option<PathBuf>,
    pub plots: Option<PathBuf>,
    /// Start settee servers for fault tolerance (and as the target when no URL is given).
    pub spawn_settee: bool,
    pub settee_bin: Option<PathBuf>,
    /// Where `fsync_floor` measures the disk; default the current directory.
    pub fsync_dir: Option<PathBuf>,
    /// The command line, recorded in the report.
    pub command: String,
    pub progress: bool,
}

/// A short name for a server from its welcome document.
fn server_name(welcome: &serde_json::Value) -> String {
    if welcome.get("express-pouchdb").is_some() {
        return "pouchdb-server".into();
    }
    welcome["vendor"]["name"]
        .as_str()
        // Apache CouchDB names its vendor, not itself.
        .map(|s| match s {
            "The Apache Software Foundation" => "couchdb".to_string(),
            s => s.to_lowercase(),
        })
        .or_else(|| welcome.get("couchdb").map(|_| "couchdb".to_string()))
        .unwrap_or_else(|| "server".into())
}

fn is_settee(welcome: &serde_json::Value) -> bool {
    welcome.to_string().to_lowercase().contains("settee")
}

/// Runs the bench; tables go to `out` as they are ready.
pub async fn run(opts: Options, out: &mut (dyn Write + Send)) -> Result<Report, BenchError> {
    let machine_before = Machine::now();
    let defs = scenarios::select(&opts.scenarios)?;
    let settee_bin = if opts.spawn_settee {
        Some(settee_binary(opts.settee_bin.clone())?)
    } else {
        None
    };
    let mut urls = opts.urls.clone();
    let mut _own_server = None;
    if urls.is_empty() {
        let (Some(bin), true) = (&settee_bin, opts.spawn_settee) else {
            return Err(BenchError::BadUrl {
                url: String::new(),
                reason: "give --url (or --spawn-settee)".into(),
            });
        };
        let dir = tempfile::tempdir()?;
        let s = Spawned::start(bin, dir.path())?;
        urls.push(s.url.clone());
        _own_server = Some((s, dir));
    }
    let mut servers: Vec<(Arc<Target>, ServerInfo)> = Vec::new();
    for u in &urls {
        let t = Arc::new(Target::parse(u)?);
        let welcome: serde_json::Value = Conn::connect(&t)
            .await?
            .expect(hyper::Method::GET, "/", bytes::Bytes::new(), &[200])
            .await?
            .json()?;
        let mut name = server_name(&welcome);
        let dup = servers
            .iter()
            .filter(|(_, s)| s.name.starts_with(&name))
            .count();
        if dup > 0 {
            name = format!("{name}#{}", dup + 1);
        }
        servers.push((
            t,
            ServerInfo {
                name,
                url: redact(u),
                welcome,
            },
        ));
    }
    writeln!(
        out,
        "settee bench: {} scenario(s) on {}{}; machine: {} cores, {} GiB, kernel {}, load {}",
        defs.len(),
        servers
            .iter()
            .map(|(_, s)| format!("{} ({})", s.name, s.url))
            .collect::<Vec<_>>()
            .join(", "),
        if opts.quick { " (quick)" } else { "" },
        machine_before.nproc,
        machine_before.mem_total_gib,
        machine_before.kernel,
        machine_before.loadavg
    )?;
    let progress = if opts.progress {
        Progress::new()
    } else {
        Progress::hidden()
    };
    let run_tag = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() % 1_000_000)
    );
    let mut results: Vec<Outcome> = Vec::new();
    let mut skipped = Vec::new();
    for def in &defs {
        let runs: Vec<&(Arc<Target>, ServerInfo)> = match def.scope {
            Scope::PerServer => servers.iter().collect(),
            Scope::Once => servers.iter().take(1).collect(),
        };
        let mut rows = Vec::new();
        for (target, info) in runs {
            let ctx = Arc::new(Ctx {
                target: target.clone(),
                server: info.name.clone(),
                quick: opts.quick,
                progress: progress.clone(),
                settee_bin: settee_bin.clone(),
                run_tag: run_tag.clone(),
                db_counter: AtomicU64::new(0),
                fsync_dir: opts.fsync_dir.clone().unwrap_or_else(|| PathBuf::from(".")),
            });
            let on = if def.scope == Scope::Once {
                "this machine"
            } else {
                info.name.as_str()
            };
            progress.step(format!("{} on {on}", def.name));
            match (def.run)(ctx).await {
                Ok(r) if r.is_empty() => skipped.push(def.name.to_string()),
                Ok(r) => rows.extend(r),
                Err(e) => rows.push(Outcome {
                    name: def.name.to_string(),
                    scenario: def.name.to_string(),
                    server: info.name.clone(),
                    unit: "ops",
                    errors_expected: false,
                    summary: Summary {
                        errors: 1,
                        ..Summary::default()
                    },
                    error_messages: vec![format!("scenario failed: {e}")],
                    extra: Default::default(),
                }),
            }
        }
        if !rows.is_empty() {
            progress.suspend(|| {
                let _ = writeln!(
                    out,
                    "\n## {} — {}\n\n{}",
                    def.name,
                    def.about,
                    report::scenario_table(&rows)
                );
            });
        }
        results.extend(rows);
    }
    progress.finish();
    let names: Vec<String> = servers.iter().map(|(_, s)| s.name.clone()).collect();
    let verdicts: Vec<_> = servers
        .iter()
        .filter(|(_, s)| is_settee(&s.welcome))
        .flat_map(|(_, s)| targets::check(&s.name, &results))
        .filter(|v| v.measured.is_some())
        .collect();
    writeln!(
        out,
        "\n## Side by side (throughput; ratio = {} / other)\n\n{}",
        names[0],
        report::comparison(&names, &results)
    )?;
    if let Some(t) = report::floor_table(&results) {
        writeln!(out, "## Serial durable writes vs the disk\n\n{t}")?;
    }
    if !verdicts.is_empty() {
        writeln!(
            out,
            "## Settee targets\n\n{}",
            report::targets_table(&verdicts)
        )?;
    }
    if !skipped.is_empty() {
        writeln!(out, "skipped: {}", skipped.join(", "))?;
    }
    let report = Report {
        command: opts.command.clone(),
        quick: opts.quick,
        machine_before,
        loadavg_after: loadavg(),
        servers: servers.into_iter().map(|(_, s)| s).collect(),
        results,
        targets: verdicts,
        skipped,
    };
    writeln!(
        out,
        "load average before: {}; after: {}",
        report.machine_before.loadavg, report.loadavg_after
    )?;
    if let Some(path) = &opts.json {
        std::fs::write(path, serde_json::to_vec_pretty(&report)?)?;
        writeln!(out, "JSON: {}", path.display())?;
    }
    if let Some(dir) = &opts.plots {
        for p in crate::plots::write_all(dir, &report)? {
            writeln!(out, "plot: {}", p.display())?;
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_servers_from_their_welcome() {
        let vendor = "The Apache Software Foundation";
        let couch = serde_json::json!({"couchdb": "Welcome", "vendor": {"name": vendor}});
        assert_eq!(server_name(&couch), "couchdb");
        let settee = serde_json::json!({"couchdb": "Welcome", "vendor": {"name": "Settee"}});
        assert_eq!(server_name(&settee), "settee");
        assert!(is_settee(&settee) && !is_settee(&couch));
        let pouch = serde_json::json!({"express-pouchdb": "Welcome"});
        assert_eq!(server_name(&pouch), "pouchdb-server");
    }
}
