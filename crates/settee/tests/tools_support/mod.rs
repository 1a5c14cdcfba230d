//! Helpers for the operator-tool tests (`tests/tools_*.rs`): run the real
//! `settee` binary as a tool with a deadline, build a database holding
//! every kind of document a faithful copy must carry (conflicts, deleted
//! documents, a deleted conflict, design documents, a local document), and
//! take a comparable snapshot of a database (ids, winning revisions with
//! bodies and `_revisions`, conflicts, every leaf revision).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::Read;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{self, Server, ADMIN};

/// A tool run may not take longer than this.
pub const TOOL_DEADLINE: Duration = Duration::from_secs(120);

/// The database URL with admin credentials.
pub fn db_url(server: &Server, db: &str) -> String {
    format!(
        "http://{}:{}@127.0.0.1:{}/{db}",
        ADMIN.0, ADMIN.1, server.port
    )
}

/// A `settee` command for a tool, with a clean environment.
pub fn tool(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_settee"));
    c.args(args)
        .env_remove("SETTEE_URL")
        .env_remove("SETTEE_ADMIN")
        .env("SETTEE_LOG", "warn");
    c
}

/// Runs a tool with `stdin` as input; panics after [`TOOL_DEADLINE`].
pub fn run(args: &[&str], stdin: &[u8]) -> Output {
    run_cmd(tool(args), stdin)
}

pub fn run_cmd(mut cmd: Command, stdin: &[u8]) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn settee");
    let mut input = child.stdin.take().expect("stdin");
    let data = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        let _ = input.write_all(&data);
    });
    let out = wait_output(child, TOOL_DEADLINE);
    let _ = writer.join();
    out
}

/// Collects a child's output, killing it after `limit`.
pub fn wait_output(mut child: Child, limit: Duration) -> Output {
    let mut so = child.stdout.take();
    let mut se = child.stderr.take();
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        if let Some(s) = so.as_mut() {
            let _ = s.read_to_end(&mut v);
        }
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        if let Some(s) = se.as_mut() {
            let _ = s.read_to_end(&mut v);
        }
        v
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tool did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: t_out.join().unwrap_or_default(),
        stderr: t_err.join().unwrap_or_default(),
    }
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts exit code 0 and returns stderr.
pub fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "tool failed: {:?}\nstderr: {}",
        o.status,
        stderr(o)
    );
    stderr(o)
}

/// A plain HTTP client for any CouchDB-compatible server (credentials in
/// `base` are sent as Basic auth).
pub struct Http {
    agent: ureq::Agent,
    /// e.g. http://127.0.0.1:5984
    pub base: String,
    pub auth: Option<(String, String)>,
}

impl Http {
    pub fn settee(server: &Server) -> Http {
        Http {
            agent: common::agent(),
            base: format!("http://127.0.0.1:{}", server.port),
            auth: Some((ADMIN.0.into(), ADMIN.1.into())),
        }
    }

    /// A server at `base` with Basic credentials.
    #[allow(dead_code)]
    pub fn with_basic(base: String, user: &str, password: &str) -> Http {
        Http {
            agent: common::agent(),
            base,
            auth: Some((user.into(), password.into())),
        }
    }

    pub fn anonymous(base: String) -> Http {
        Http {
            agent: common::agent(),
            base,
            auth: None,
        }
    }

    pub fn req(&self, method: &str, path: &str, body: Option<&Value>) -> common::Resp {
        let text = body.map(|b| b.to_string());
        let auth = self.auth.as_ref().map(|(u, p)| (u.as_str(), p.as_str()));
        let headers: &[(&str, &str)] = if body.is_some() {
            &[("Content-Type", "application/json")]
        } else {
            &[]
        };
        common::call(
            &self.agent,
            method,
            &format!("{}{}", self.base, path),
            auth,
            headers,
            text.as_deref().map(str::as_bytes),
        )
    }

    /// A request that must succeed (2xx); returns the JSON body.
    pub fn ok(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        let r = self.req(method, path, body);
        assert!(
            (200..300).contains(&r.status),
            "{method} {path}: {} {}",
            r.status,
            r.body
        );
        r.json()
    }
}

/// Fills `db` (created here) with `n_plain` plain documents and every
/// special case: two-branch conflict, deleted document, deleted conflict,
/// a deep history, two design documents and a local document.
pub fn build_fixture(h: &Http, db: &str, n_plain: usize) {
    h.ok("PUT", &format!("/{db}"), None);
    let mut docs: Vec<Value> = (0..n_plain)
        .map(|i| json!({"_id": format!("doc-{i:05}"), "n": i, "text": "abc".repeat(i % 7)}))
        .collect();
    docs.push(json!({"_id": "_design/app", "views": {"all": {"map": "function(d){emit(d._id)}"}}}));
    docs.push(json!({"_id": "_design/other", "language": "javascript"}));
    docs.push(json!({"_id": "gone", "v": 1}));
    for chunk in docs.chunks(500) {
        h.ok(
            "POST",
            &format!("/{db}/_bulk_docs"),
            Some(&json!({"docs": chunk})),
        );
    }
    let gone = h.ok("GET", &format!("/{db}/gone"), None);
    h.ok(
        "DELETE",
        &format!("/{db}/gone?rev={}", gone["_rev"].as_str().unwrap()),
        None,
    );
    let a = "a".repeat(32);
    let b = "b".repeat(32);
    let c = "c".repeat(32);
    let d = "d".repeat(32);
    let e = "e".repeat(32);
    let edits = json!({"new_edits": false, "docs": [
        // Two live branches: a conflict.
        {"_id": "conf", "_rev": format!("2-{b}"), "side": "b",
         "_revisions": {"start": 2, "ids": [b, a]}},
        {"_id": "conf", "_rev": format!("2-{c}"), "side": "c",
         "_revisions": {"start": 2, "ids": [c, a]}},
        // A live branch and a deleted branch: a deleted conflict.
        {"_id": "dconf", "_rev": format!("2-{b}"), "side": "live",
         "_revisions": {"start": 2, "ids": [b, a]}},
        {"_id": "dconf", "_rev": format!("3-{d}"), "_deleted": true,
         "_revisions": {"start": 3, "ids": [d, c, a]}},
        // A long history.
        {"_id": "deep", "_rev": format!("5-{e}"), "k": 5,
         "_revisions": {"start": 5, "ids": [e, d, c, b, a]}},
    ]});
    h.ok("POST", &format!("/{db}/_bulk_docs"), Some(&edits));
    h.ok(
        "PUT",
        &format!("/{db}/_local/keep"),
        Some(&json!({"local": true})),
    );
}

/// What a faithful copy must reproduce, per document id.
#[derive(Debug, PartialEq)]
pub struct DocState {
    /// Every leaf revision (sorted), from `_changes?style=all_docs`.
    pub leaves: Vec<String>,
    pub deleted: bool,
    /// The winner (live documents): body with `_rev` and `_revisions`,
    /// `_conflicts` sorted.
    pub winner: Option<Value>,
}

/// A snapshot of every document of `db` (local documents excluded).
pub fn snapshot(h: &Http, db: &str) -> BTreeMap<String, DocState> {
    let changes = h.ok("GET", &format!("/{db}/_changes?style=all_docs"), None);
    let mut out = BTreeMap::new();
    for row in changes["results"].as_array().expect("results") {
        let id = row["id"].as_str().expect("id").to_string();
        let mut leaves: Vec<String> = row["changes"]
            .as_array()
            .expect("changes")
            .iter()
            .map(|c| c["rev"].as_str().expect("rev").to_string())
            .collect();
        leaves.sort();
        let deleted = row["deleted"].as_bool().unwrap_or(false);
        let winner = if deleted {
            None
        } else {
            let mut doc = h.ok("GET", &format!("/{db}/{id}?revs=true&conflicts=true"), None);
            if let Some(Value::Array(c)) = doc.get_mut("_conflicts") {
                c.sort_by(|x, y| x.as_str().cmp(&y.as_str()));
            }
            Some(doc)
        };
        out.insert(
            id,
            DocState {
                leaves,
                deleted,
                winner,
            },
        );
    }
    out
}

/// Asserts that `dst` holds exactly what `src` holds.
pub fn assert_same(
    src: &BTreeMap<String, DocState>,
    dst: &BTreeMap<String, DocState>,
    skip_design: bool,
) {
    let want: BTreeMap<_, _> = src
        .iter()
        .filter(|(id, _)| !(skip_design && id.starts_with("_design/")))
        .collect();
    let got: BTreeMap<_, _> = dst.iter().collect();
    let want_ids: Vec<_> = want.keys().collect();
    let got_ids: Vec<_> = got.keys().collect();
    assert_eq!(want_ids, got_ids, "document ids differ");
    for (id, w) in &want {
        assert_eq!(Some(w), got.get(id), "document {id} differs");
    }
}

/// Checks the fixture's special cases are really in `snap` (so equality
/// of two snapshots is not trivially true).
pub fn assert_fixture_shape(snap: &BTreeMap<String, DocState>) {
    let conf = &snap["conf"];
    assert_eq!(conf.leaves.len(), 2, "{conf:?}");
    let w = conf.winner.as_ref().expect("conf live");
    assert_eq!(w["_conflicts"].as_array().map(Vec::len), Some(1), "{w}");
    let dconf = &snap["dconf"];
    assert_eq!(dconf.leaves.len(), 2, "{dconf:?}");
    assert!(!dconf.deleted);
    assert!(snap["gone"].deleted);
    assert!(snap["gone"].winner.is_none());
    assert_eq!(
        snap["deep"].winner.as_ref().unwrap()["_revisions"]["ids"]
            .as_array()
            .map(Vec::len),
        Some(5)
    );
    assert!(snap.contains_key("_design/app"));
    assert!(!snap.keys().any(|k| k.starts_with("_local/")));
}

/// A pouchdb-server 4.2.0 (tests/peers, pinned by package-lock.json) on a
/// free loopback port, in a temporary directory; stopped on drop.
pub struct PouchServer {
    child: Child,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for PouchServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts pouchdb-server and waits (60 s at most) until it answers. A
/// missing npm install is a failure, never a skip.
pub fn start_pouchdb() -> PouchServer {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let bin = root.join("tests/peers/node_modules/pouchdb-server/bin/pouchdb-server");
    assert!(
        bin.exists(),
        "{} is missing: run `npm ci --prefix tests/peers` (scripts/test does)",
        bin.display()
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let child = Command::new("node")
        .arg("--unhandled-rejections=warn")
        .arg(&bin)
        .args(["-n", "-o", "127.0.0.1", "-p", &port.to_string(), "-d"])
        .arg(dir.path())
        .arg("-c")
        .arg(dir.path().join("config.json"))
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start pouchdb-server (node)");
    let server = PouchServer {
        child,
        port,
        _dir: dir,
    };
    wait_up(
        &format!("http://127.0.0.1:{port}/"),
        "pouchdb-server",
        Duration::from_secs(60),
    );
    server
}

/// Waits until `url` answers a GET, at most `limit`.
pub fn wait_up(url: &str, what: &str, limit: Duration) {
    let agent = common::agent();
    let deadline = Instant::now() + limit;
    while agent.get(url).call().is_err() {
        assert!(
            Instant::now() < deadline,
            "{what} did not answer in {} s",
            limit.as_secs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A free loopback port (bound, then released).
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}
