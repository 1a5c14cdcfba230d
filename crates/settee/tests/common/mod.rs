//! Shared helpers for end-to-end tests: start the real `settee` binary on a
//! random loopback port with a temporary data directory and an admin, and
//! a tiny HTTP client that returns status, headers and body for any status.
//!
//! Servers are started with `--exit-on-stdin-eof`, so a server shuts down
//! when the test process (holding its stdin) exits, even if a test panics.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

pub const ADMIN: (&str, &str) = ("admin", "s3cret-pw");

/// A running server.
pub struct Server {
    pub child: Child,
    pub port: u16,
    pub dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    _stdin: Option<ChildStdin>,
    agent: ureq::Agent,
}

/// A response of any status.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Resp {
    /// (status, `error`, `reason`) of an error answer.
    pub fn error_triple(&self) -> (u16, String, String) {
        let v = self.json();
        let text = |k: &str| v[k].as_str().unwrap_or_default().to_string();
        (self.status, text("error"), text("reason"))
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    /// Asserts a CouchDB error shape and returns the error name.
    pub fn error(&self) -> String {
        let v = self.json();
        assert!(v["reason"].is_string(), "no reason in {v}");
        v["error"]
            .as_str()
            .unwrap_or_else(|| panic!("no error in {v}"))
            .to_string()
    }
}

/// The string member `field` of each object in the array `v[list]` (the
/// `id` of each of `rows`, the `_id` of each of `docs`…), in order.
pub fn strings_of(v: &Value, list: &str, field: &str) -> Vec<String> {
    v[list]
        .as_array()
        .unwrap_or_else(|| panic!("no {list} array in {v}"))
        .iter()
        .map(|e| {
            e[field]
                .as_str()
                .unwrap_or_else(|| panic!("no {field} string in {e}"))
                .to_string()
        })
        .collect()
}

pub fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(60))
        .build()
}

impl Server {
    /// A server on a fresh data directory.
    pub fn start() -> Server {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().to_path_buf();
        let mut s = Server::start_in(&dir, &[]);
        s._tmp = Some(tmp);
        s
    }

    /// A server whose databases admit anyone, as CouchDB's
    /// `[couchdb] default_security = everyone` does (CouchDB 3's default,
    /// and Settee's, is admin-only): for tests of the document API that
    /// send anonymous requests on purpose.
    pub fn start_open() -> Server {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().to_path_buf();
        open_security(&dir);
        let mut s = Server::start_in(&dir, &[]);
        s._tmp = Some(tmp);
        s
    }

    /// A server on `dir` with extra arguments.
    pub fn start_in(dir: &Path, extra: &[&str]) -> Server {
        Server::spawn_with(dir, &Server::serve_args(dir, extra), None)
    }

    /// [`Server::start_in`] with the server's stderr appended to `log`
    /// (for tests that look for panics in it).
    pub fn start_in_logged(dir: &Path, extra: &[&str], log: &Path) -> Server {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("stderr log");
        Server::spawn_with(dir, &Server::serve_args(dir, extra), Some(file))
    }

    fn serve_args(dir: &Path, extra: &[&str]) -> Vec<String> {
        let admin = format!("{}:{}", ADMIN.0, ADMIN.1);
        let mut args = vec![
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--data",
            dir.to_str().expect("utf-8 path"),
            "--exit-on-stdin-eof",
        ];
        if !extra.contains(&"--no-admin") {
            args.extend(["--admin", admin.as_str()]);
        }
        args.extend(extra.iter().filter(|a| **a != "--no-admin"));
        args.into_iter().map(str::to_string).collect()
    }

    /// Starts the binary with `args`; its stderr goes to `stderr_log` if
    /// given, else it is read and dropped.
    fn spawn_with<S: AsRef<std::ffi::OsStr>>(
        dir: &Path,
        args: &[S],
        stderr_log: Option<std::fs::File>,
    ) -> Server {
        let logged = stderr_log.is_some();
        let mut child = Command::new(env!("CARGO_BIN_EXE_settee"))
            .args(args)
            .env_remove("SETTEE_ADMIN")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr_log.map_or_else(Stdio::piped, Stdio::from))
            .spawn()
            .expect("start settee");
        let stdout = child.stdout.take().expect("stdout");
        if !logged {
            let stderr = child.stderr.take().expect("stderr");
            std::thread::spawn(move || {
                let mut sink = Vec::new();
                let _ = BufReader::new(stderr).read_to_end(&mut sink);
            });
        }
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(first)) = lines.next() {
                let _ = tx.send(first);
            }
            for _ in lines {}
        });
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("server did not print its address in 60 s");
        let port = line
            .strip_prefix("settee listening on http://127.0.0.1:")
            .and_then(|p| p.trim().parse::<u16>().ok())
            .unwrap_or_else(|| panic!("unexpected first line: {line}"));
        let stdin = child.stdin.take();
        Server {
            child,
            port,
            dir: dir.to_path_buf(),
            _tmp: None,
            _stdin: stdin,
            agent: agent(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{}", self.port, path)
    }

    /// A request as admin.
    pub fn admin(&self, method: &str, path: &str, body: Option<&str>) -> Resp {
        call(
            &self.agent,
            method,
            &self.url(path),
            Some(ADMIN),
            &json_headers(body),
            body.map(str::as_bytes),
        )
    }

    /// An anonymous request.
    pub fn anon(&self, method: &str, path: &str, body: Option<&str>) -> Resp {
        call(
            &self.agent,
            method,
            &self.url(path),
            None,
            &json_headers(body),
            body.map(str::as_bytes),
        )
    }

    /// Any request.
    pub fn raw(
        &self,
        method: &str,
        path: &str,
        auth: bool,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> Resp {
        call(
            &self.agent,
            method,
            &self.url(path),
            auth.then_some(ADMIN),
            headers,
            body,
        )
    }

    /// `POST /{db}/_bulk_docs` of `docs` as admin, asserting 201: the results.
    pub fn bulk(&self, db: &str, docs: Vec<Value>) -> Vec<Value> {
        let body = serde_json::json!({ "docs": docs }).to_string();
        let r = self.admin("POST", &format!("/{db}/_bulk_docs"), Some(&body));
        assert_eq!(r.status, 201, "{r:?}");
        r.json().as_array().expect("results").clone()
    }

    /// Creates a database (as admin) and asserts success.
    pub fn create_db(&self, name: &str) {
        let r = self.admin("PUT", &format!("/{name}"), None);
        assert_eq!(r.status, 201, "{r:?}");
    }

    /// Sends SIGTERM and waits (bounded) for a clean exit.
    pub fn stop(mut self) -> std::process::ExitStatus {
        self.signal(libc::SIGTERM);
        self.wait(Duration::from_secs(30))
            .expect("server did not stop within 30 s after SIGTERM")
    }

    /// SIGKILL: no cleanup at all.
    pub fn kill9(mut self) {
        self.signal(libc::SIGKILL);
        let _ = self.wait(Duration::from_secs(30));
    }

    fn signal(&mut self, sig: i32) {
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{sig} failed");
    }

    fn wait(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + limit;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn json_headers(body: Option<&str>) -> Vec<(&'static str, &'static str)> {
    if body.is_some() {
        vec![("Content-Type", "application/json")]
    } else {
        vec![]
    }
}

/// An `Authorization` header value for Basic credentials.
pub fn basic_auth(user: &str, password: &str) -> String {
    format!(
        "Basic {}",
        base64_lite::encode(format!("{user}:{password}").as_bytes())
    )
}

/// Performs a request and returns the response whatever its status.
pub fn call(
    agent: &ureq::Agent,
    method: &str,
    url: &str,
    auth: Option<(&str, &str)>,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Resp {
    let mut req = agent.request(method, url);
    if let Some((u, p)) = auth {
        req = req.set("Authorization", &basic_auth(u, p));
    }
    for (k, v) in headers {
        req = req.set(k, v);
    }
    let result = match body {
        Some(b) => req.send_bytes(b),
        None => req.call(),
    };
    let resp = match result {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("{method} {url}: transport error {e}"),
    };
    let status = resp.status();
    let headers = resp
        .headers_names()
        .into_iter()
        .filter_map(|n| resp.header(&n).map(|v| (n.clone(), v.to_string())))
        .collect();
    let mut body = String::new();
    resp.into_reader()
        .read_to_string(&mut body)
        .expect("read body");
    Resp {
        status,
        headers,
        body,
    }
}

/// Minimal base64 for Basic auth headers.
pub mod base64_lite {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    pub fn encode(input: &[u8]) -> String {
        let mut out = String::new();
        for chunk in input.chunks(3) {
            let b = [
                chunk[0],
                *chunk.get(1).unwrap_or(&0),
                *chunk.get(2).unwrap_or(&0),
            ];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            for i in 0..4 {
                if i <= chunk.len() {
                    out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
                } else {
                    out.push('=');
                }
            }
        }
        out
    }
}

/// One server shared by the tests of a file (each test uses its own
/// databases). Its databases admit anyone (`default_security = everyone`):
/// these tests exercise the document API with anonymous requests; the
/// admin-only default is checked by the conformance scenarios.
pub fn shared() -> &'static Server {
    static SERVER: std::sync::OnceLock<Server> = std::sync::OnceLock::new();
    SERVER.get_or_init(|| {
        // A static is never dropped: keep its data under target/tmp, not /tmp.
        let tmp = tempfile::Builder::new()
            .prefix("settee-e2e-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .expect("tempdir");
        let dir = tmp.path().to_path_buf();
        open_security(&dir);
        let mut s = Server::start_in(&dir, &[]);
        s._tmp = Some(tmp);
        s
    })
}

/// Writes a `settee.ini` whose databases admit anyone.
fn open_security(dir: &Path) {
    std::fs::write(
        dir.join("settee.ini"),
        "[couchdb]\ndefault_security = everyone\n",
    )
    .expect("write settee.ini");
}

/// A `kB` field of /proc/PID/status (`VmRSS`, `VmHWM`…), in bytes.
pub fn proc_status(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}
