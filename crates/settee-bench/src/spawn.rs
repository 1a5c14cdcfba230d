//! Starting a Settee server the bench owns (`--spawn-settee`): `settee
//! serve --bind 127.0.0.1:0` on a given data directory with a bench admin,
//! waiting (bounded) for its `settee listening on http://ADDR:PORT` line.
//! The server is started with `--exit-on-stdin-eof` and holds a pipe to us,
//! so it cannot outlive the bench; dropping a [`Spawned`] kills it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use crate::error::BenchError;

/// Credentials of spawned servers.
pub const ADMIN: &str = "bench:bench-pw";
/// How long a server may take to print its address.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A running server started by the bench.
#[derive(Debug)]
pub struct Spawned {
    child: Child,
    _stdin: Option<ChildStdin>,
    /// `http://bench:bench-pw@127.0.0.1:PORT`.
    pub url: String,
    pub pid: u32,
}

/// The settee binary to start: `explicit`, else `target/release/settee`
/// next to the running executable's build tree, else the running
/// executable itself (when it is `settee`).
pub fn settee_binary(explicit: Option<PathBuf>) -> Result<PathBuf, BenchError> {
    if let Some(p) = explicit {
        return Ok(p);
    }
    let me = std::env::current_exe()?;
    if me.file_stem().is_some_and(|s| s == "settee") {
        return Ok(me);
    }
    let release = PathBuf::from("target/release/settee");
    if release.exists() {
        return Ok(release);
    }
    Err(BenchError::Spawn(
        "no settee binary found; pass --settee-bin".into(),
    ))
}

impl Spawned {
    /// Starts `bin serve` on `dir`.
    pub fn start(bin: &Path, dir: &Path) -> Result<Spawned, BenchError> {
        let mut child = Command::new(bin)
            .arg("serve")
            .args([
                "--bind",
                "127.0.0.1:0",
                "--admin",
                ADMIN,
                "--exit-on-stdin-eof",
            ])
            .arg("--data")
            .arg(dir)
            .env_remove("SETTEE_ADMIN")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| BenchError::Spawn(format!("{}: {e}", bin.display())))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| BenchError::Spawn("no stdout".into()))?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(first)) = lines.next() {
                let _ = tx.send(first);
            }
            for _ in lines {}
        });
        let line = match rx.recv_timeout(START_TIMEOUT) {
            Ok(l) => l,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(BenchError::Spawn("server did not print its address".into()));
            }
        };
        let addr = line
            .strip_prefix("settee listening on http://")
            .ok_or_else(|| BenchError::Spawn(format!("unexpected first line {line:?}")))?
            .trim()
            .to_string();
        Ok(Spawned {
            pid: child.id(),
            _stdin: child.stdin.take(),
            child,
            url: format!("http://{ADMIN}@{addr}"),
        })
    }

    /// SIGKILL (no cleanup at all) and reap.
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
