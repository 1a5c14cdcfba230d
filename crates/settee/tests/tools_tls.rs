//! The tools through TLS and proxies, like the seed's stunnel setup: a
//! small Node.js TLS terminator (certificates made with the openssl CLI)
//! in front of a real Settee server checks `--cacert`, client certificates
//! (`--cert`/`--key`), `--proxy`, and the stunnel finding — a middle layer
//! that stalls large writes makes the tools shrink their batches until
//! writes pass, and nothing is lost.

mod common;
mod tools_support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::json;
use tools_support::*;

/// mode: "tls" (HTTPS, optional client auth), "plain" (an HTTP forward
/// proxy), "nobulkget" (plain, answering `_bulk_get` with 404 like
/// CouchDB 1.x) or "stallreads" (plain, never answering a read with
/// `limit` over 300); every request whose body exceeds stallBytes is swallowed: read,
/// never answered (a stalled tunnel).
const PROXY_JS: &str = r#"
const http = require('http'), https = require('https'), fs = require('fs');
const [mode, target, stallBytes, dir, clientAuth] = process.argv.slice(2);
function handler(req, res) {
  let path = req.url;
  if (/^https?:\/\//.test(path)) { const u = new URL(path); path = u.pathname + u.search; }
  if (mode === 'nobulkget' && path.includes('/_bulk_get')) {
    req.resume();
    res.writeHead(404, {'Content-Type': 'application/json'});
    res.end('{"error":"not_found","reason":"missing"}');
    return;
  }
  const limit = /[?&]limit=(\d+)/.exec(path);
  if (mode === 'stallreads' && limit && parseInt(limit[1], 10) > 300) { req.resume(); return; }
  const len = parseInt(req.headers['content-length'] || '0', 10);
  if (len > parseInt(stallBytes, 10)) { req.resume(); return; }
  const p = http.request({host: '127.0.0.1', port: +target, method: req.method, path,
                          headers: req.headers}, r => { res.writeHead(r.statusCode, r.headers); r.pipe(res); });
  p.on('error', () => { res.writeHead(502); res.end(); });
  req.pipe(p);
}
const server = mode === 'tls'
  ? https.createServer({key: fs.readFileSync(dir + '/server.key'), cert: fs.readFileSync(dir + '/server.pem'),
                        ca: fs.readFileSync(dir + '/ca.pem'), requestCert: clientAuth === 'yes',
                        rejectUnauthorized: clientAuth === 'yes'}, handler)
  : http.createServer(handler);
server.listen(0, '127.0.0.1', () => console.log('port ' + server.address().port));
"#;

struct Proxy {
    child: Child,
    port: u16,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn proxy(dir: &Path, mode: &str, target: u16, stall_bytes: usize, client_auth: bool) -> Proxy {
    let script = dir.join("proxy.js");
    std::fs::write(&script, PROXY_JS).unwrap();
    let mut child = Command::new("node")
        .arg(&script)
        .args([
            mode,
            &target.to_string(),
            &stall_bytes.to_string(),
            dir.to_str().unwrap(),
            if client_auth { "yes" } else { "no" },
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("node");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .trim()
        .strip_prefix("port ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("proxy said {line:?}"));
    Proxy { child, port }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate.
fn make_certs(dir: &Path) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=settee-test-ca",
        ],
    );
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("client.ext"),
        "extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    for who in ["server", "client"] {
        openssl(
            dir,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                &format!("{who}.key"),
                "-out",
                &format!("{who}.csr"),
                "-subj",
                &format!("/CN={who}"),
            ],
        );
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{who}.csr"),
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &format!("{who}.pem"),
                "-days",
                "2",
                "-extfile",
                &format!("{who}.ext"),
            ],
        );
    }
}

fn docs_jsonl(n: usize, pad: usize) -> Vec<u8> {
    let mut s = String::new();
    for i in 0..n {
        s.push_str(&json!({"_id": format!("t{i:04}"), "pad": "x".repeat(pad)}).to_string());
        s.push('\n');
    }
    s.into_bytes()
}

#[test]
fn tls_with_custom_ca_and_client_certificate() {
    let server = common::shared();
    let h = Http::settee(server);
    let dir = tempfile::tempdir().unwrap();
    make_certs(dir.path());
    let ca = dir.path().join("ca.pem");
    let cert = dir.path().join("client.pem");
    let key = dir.path().join("client.key");
    let p = proxy(dir.path(), "tls", server.port, usize::MAX >> 12, true);
    let url = |db: &str| format!("https://admin:s3cret-pw@127.0.0.1:{}/{db}", p.port);

    // Untrusted server certificate: a clear failure.
    let out = run(&["mkdb", &url("tls_db"), "--retries", "0"], b"");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).to_lowercase().contains("certificate"),
        "{}",
        stderr(&out)
    );
    // Trusted, but the server wants a client certificate.
    let out = run(
        &[
            "mkdb",
            &url("tls_db"),
            "--retries",
            "0",
            "--cacert",
            ca.to_str().unwrap(),
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let tls = |args: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        v.extend(
            [
                "--cacert",
                ca.to_str().unwrap(),
                "--cert",
                cert.to_str().unwrap(),
                "--key",
                key.to_str().unwrap(),
            ]
            .map(String::from),
        );
        v
    };
    let args = tls(&["mkdb", &url("tls_db")]);
    ok(&run(
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
        b"",
    ));
    let args = tls(&["post-docs", &url("tls_db")]);
    ok(&run(
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
        &docs_jsonl(300, 100),
    ));
    let args = tls(&["ls-docs", &url("tls_db")]);
    let out = run(&args.iter().map(String::as_str).collect::<Vec<_>>(), b"");
    ok(&out);
    assert_eq!(out.stdout.iter().filter(|&&b| b == b'\n').count(), 300);
    assert_eq!(h.ok("GET", "/tls_db", None)["doc_count"], 300);
}

#[test]
fn writes_through_a_stalling_tunnel_shrink_until_they_pass() {
    let server = common::shared();
    let h = Http::settee(server);
    let dir = tempfile::tempdir().unwrap();
    make_certs(dir.path());
    let ca = dir.path().join("ca.pem");
    // Requests with bodies over 30 KB never get an answer.
    let p = proxy(dir.path(), "tls", server.port, 30_000, false);
    let url = |db: &str| format!("https://admin:s3cret-pw@127.0.0.1:{}/{db}", p.port);
    let ca_s = ca.to_str().unwrap();
    ok(&run(&["mkdb", &url("stall_db"), "--cacert", ca_s], b""));
    // ~1 KB documents in batches of 200: 200 KB requests stall; 25 pass.
    let out = run(
        &[
            "post-docs",
            &url("stall_db"),
            "--cacert",
            ca_s,
            "-u",
            "200",
            "--timeout",
            "1",
        ],
        &docs_jsonl(400, 1000),
    );
    let err = ok(&out);
    assert!(err.contains("stalled"), "{err}");
    assert!(err.contains("batches of 25"), "{err}");
    assert_eq!(h.ok("GET", "/stall_db", None)["doc_count"], 400);

    // copy adapts the same way (automatic batch size, starting at 500).
    let out = run(
        &[
            "copy",
            &db_url(server, "stall_db"),
            &url("stall_copy"),
            "--create-target",
            "--cacert",
            ca_s,
            "--timeout",
            "1",
        ],
        b"",
    );
    let err = ok(&out);
    assert!(err.contains("stalled"), "{err}");
    assert_eq!(h.ok("GET", "/stall_copy", None)["doc_count"], 400);
}

#[test]
fn http_proxy_option_is_used() {
    let server = common::shared();
    let h = Http::settee(server);
    let dir = tempfile::tempdir().unwrap();
    let p = proxy(dir.path(), "plain", server.port, usize::MAX >> 12, false);
    // The URL names a closed port: only the proxy can reach the server.
    let closed = free_port();
    let url = format!("http://admin:s3cret-pw@127.0.0.1:{closed}/proxied");
    let proxy_url = format!("http://127.0.0.1:{}", p.port);
    let out = run(&["mkdb", &url, "--retries", "0"], b"");
    assert_eq!(out.status.code(), Some(1));
    ok(&run(&["mkdb", &url, "--proxy", &proxy_url], b""));
    ok(&run(
        &["post-docs", &url, "--proxy", &proxy_url],
        &docs_jsonl(10, 10),
    ));
    assert_eq!(h.ok("GET", "/proxied", None)["doc_count"], 10);
}

#[test]
fn copy_falls_back_to_open_revs_without_bulk_get() {
    let server = common::shared();
    let h = Http::settee(server);
    build_fixture(&h, "old_src", 300);
    let dir = tempfile::tempdir().unwrap();
    let p = proxy(
        dir.path(),
        "nobulkget",
        server.port,
        usize::MAX >> 12,
        false,
    );
    let old = format!("http://admin:s3cret-pw@127.0.0.1:{}/old_src", p.port);
    let out = run(
        &["copy", &old, &db_url(server, "old_dst"), "--create-target"],
        b"",
    );
    let err = ok(&out);
    assert!(err.contains("no _bulk_get"), "{err}");
    assert_same(&snapshot(&h, "old_src"), &snapshot(&h, "old_dst"), false);
    // ls-docs --revs the same way.
    let out = run(&["ls-docs", &old, "--revs", "--include-design"], b"");
    ok(&out);
    let lines = out.stdout.iter().filter(|&&b| b == b'\n').count();
    assert_eq!(
        lines,
        300 + 2 + 1 + 2 + 2 + 1,
        "plain, design, gone, conf×2, dconf×2, deep"
    );
}

#[test]
fn stalled_reads_shrink_the_pages() {
    let server = common::shared();
    let h = Http::settee(server);
    build_fixture(&h, "slow_src", 700);
    let dir = tempfile::tempdir().unwrap();
    let p = proxy(
        dir.path(),
        "stallreads",
        server.port,
        usize::MAX >> 12,
        false,
    );
    let slow = format!("http://admin:s3cret-pw@127.0.0.1:{}/slow_src", p.port);
    // ls-docs starts with pages of 1,000: stalls, then 500, then 250 pass.
    let out = run(&["ls-docs", &slow, "--timeout", "1"], b"");
    let err = ok(&out);
    assert!(err.contains("read stalled"), "{err}");
    assert!(err.contains("pages of 250"), "{err}");
    let lines = out.stdout.iter().filter(|&&b| b == b'\n').count();
    assert_eq!(lines, 703);
    // copy the same way.
    let out = run(
        &[
            "copy",
            &slow,
            &db_url(server, "slow_dst"),
            "--create-target",
            "--timeout",
            "1",
        ],
        b"",
    );
    let err = ok(&out);
    assert!(err.contains("read stalled"), "{err}");
    assert_same(&snapshot(&h, "slow_src"), &snapshot(&h, "slow_dst"), false);
}
