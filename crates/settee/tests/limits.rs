//! End-to-end tests of bad input and bounds: invalid JSON, content types,
//! bad UTF-8, nesting, document and request size, bulk counts, slow
//! clients, connection limits, gzip, CORS, keep-alive — each answers a
//! CouchDB-shaped error (or behaves as HTTP requires) and changes nothing.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{proc_status, shared, Server};
use serde_json::{json, Value};

fn seq(s: &Server, db: &str) -> Value {
    s.anon("GET", &format!("/{db}"), None).json()["update_seq"].clone()
}

#[test]
fn bad_bodies_change_nothing() {
    let s = shared();
    s.create_db("bad");
    let before = seq(s, "bad");
    let deep = format!("{{\"a\":{}1{}}}", "[".repeat(200), "]".repeat(200));
    let cases: Vec<(&str, &str, Vec<u8>, u16, &str)> = vec![
        ("PUT", "/bad/x", b"{not json".to_vec(), 400, "bad_request"),
        (
            "PUT",
            "/bad/x",
            b"{\"a\":\"\xff\xfe\"}".to_vec(),
            400,
            "bad_request",
        ),
        (
            "PUT",
            "/bad/x",
            deep.clone().into_bytes(),
            400,
            "bad_request",
        ),
        ("PUT", "/bad/x", b"".to_vec(), 400, "bad_request"),
        ("POST", "/bad", b"{\"a\":".to_vec(), 400, "bad_request"),
        (
            "POST",
            "/bad/_bulk_docs",
            format!("{{\"docs\":[{deep}]}}").into_bytes(),
            400,
            "bad_request",
        ),
        (
            "POST",
            "/bad/_bulk_docs",
            b"\"docs\"".to_vec(),
            400,
            "bad_request",
        ),
    ];
    for (method, path, body, status, error) in cases {
        let r = s.raw(
            method,
            path,
            false,
            &[("Content-Type", "application/json")],
            Some(&body),
        );
        assert_eq!(
            (r.status, r.error().as_str()),
            (status, error),
            "{method} {path} {:?}",
            String::from_utf8_lossy(&body)
        );
    }
    let r = s.raw(
        "POST",
        "/bad/_bulk_docs",
        false,
        &[("Content-Type", "text/plain")],
        Some(b"{\"docs\":[]}"),
    );
    assert_eq!((r.status, r.error().as_str()), (415, "bad_content_type"));
    let r = s.raw(
        "POST",
        "/bad/_bulk_docs",
        false,
        &[],
        Some(b"{\"docs\":[]}"),
    );
    assert_eq!(r.status, 415);
    // Invalid percent-encoding in the path.
    assert_eq!(s.anon("GET", "/bad/%ff", None).status, 400);
    assert_eq!(seq(s, "bad"), before);
    assert_eq!(s.anon("GET", "/bad/x", None).status, 404);
    // Garbage of many shapes never takes the server down.
    for path in [
        "/%00",
        "/bad/_changes?since=%00",
        "/bad/_all_docs?keys=%5B1",
        "/bad/x?open_revs=[",
        "/_node/_local/_config/a/b/c/d",
    ] {
        let r = s.admin("GET", path, None);
        assert!(r.status >= 400, "{path}: {r:?}");
        r.error();
    }
    assert_eq!(s.anon("GET", "/", None).status, 200);
}

#[test]
fn size_limits() {
    let s = Server::start_open();
    s.create_db("lim");
    // Document size (413 document_too_large; the reason is the body's
    // `_id`, so none for a PUT whose body has none, as in CouchDB).
    assert_eq!(
        s.admin(
            "PUT",
            "/_node/_local/_config/couchdb/max_document_size",
            Some("\"1000\"")
        )
        .status,
        200
    );
    let big = json!({"pad": "x".repeat(2000)}).to_string();
    let r = s.anon("PUT", "/lim/huge", Some(&big));
    assert_eq!((r.status, r.error().as_str()), (413, "document_too_large"));
    assert_eq!(r.json()["reason"], "");
    let big_post = json!({"_id": "huge", "pad": "x".repeat(2000)}).to_string();
    let r = s.anon("POST", "/lim", Some(&big_post));
    assert_eq!((r.status, r.json()["reason"].clone()), (413, json!("huge")));
    // In _bulk_docs a document too large refuses the whole request, as in
    // CouchDB: 413 naming it, nothing written.
    let bulk = json!({"docs": [{"_id": "small"}, {"_id": "huge2", "pad": "x".repeat(2000)}]});
    let r = s.anon("POST", "/lim/_bulk_docs", Some(&bulk.to_string()));
    assert_eq!((r.status, r.error().as_str()), (413, "document_too_large"));
    assert_eq!(r.json()["reason"], "huge2");
    assert_eq!(s.anon("GET", "/lim/small", None).status, 404);
    assert_eq!(s.anon("GET", "/lim/huge2", None).status, 404);
    // A large request (otherwise parsed and written chunk by chunk) too,
    // whether the document too large comes early or last.
    s.create_db("lim2");
    for big in [10, 299] {
        let docs: Vec<serde_json::Value> = (0..300)
            .map(|i| {
                let pad = if i == big { 2000 } else { 1 };
                json!({"_id": format!("s{i:03}"), "pad": "x".repeat(pad)})
            })
            .collect();
        let r = s.anon(
            "POST",
            "/lim2/_bulk_docs",
            Some(&json!({ "docs": docs }).to_string()),
        );
        assert_eq!(r.status, 413);
        assert_eq!(r.json()["reason"], format!("s{big:03}"));
    }
    assert_eq!(s.anon("GET", "/lim2", None).json()["doc_count"], 0);
    // Request size (413 too_large), by Content-Length and by streamed bytes.
    assert_eq!(
        s.admin(
            "PUT",
            "/_node/_local/_config/chttpd/max_http_request_size",
            Some("\"4096\"")
        )
        .status,
        200
    );
    let r = s.anon(
        "PUT",
        "/lim/big",
        Some(&json!({"pad": "y".repeat(10_000)}).to_string()),
    );
    assert_eq!((r.status, r.error().as_str()), (413, "too_large"));
    // Bulk document count.
    assert_eq!(
        s.admin(
            "PUT",
            "/_node/_local/_config/couchdb/max_bulk_docs_count",
            Some("\"2\"")
        )
        .status,
        200
    );
    let r = s.anon("POST", "/lim/_bulk_docs", Some(r#"{"docs":[{},{},{}]}"#));
    assert_eq!(
        (r.status, r.error().as_str()),
        (413, "max_bulk_docs_count_exceeded")
    );
    // Documents past the limit are not kept, but a malformed one there
    // still makes the body malformed (400, as CouchDB, which parses the
    // whole body first).
    let many = format!(r#"{{"docs":[{}]}}"#, vec!["{}"; 5000].join(","));
    let r = s.anon("POST", "/lim/_bulk_docs", Some(&many));
    assert_eq!(r.status, 413);
    let r = s.anon(
        "POST",
        "/lim/_bulk_docs",
        Some(r#"{"docs":[{},{},{},{"a":]}"#),
    );
    assert_eq!((r.status, r.error().as_str()), (400, "bad_request"));
    // Nothing was ever written to `lim`: every write above was refused.
    assert_eq!(s.anon("GET", "/lim", None).json()["doc_count"], 0);
}

#[test]
fn a_body_of_millions_of_tiny_documents_stays_bounded() {
    // 60 MB of `{}` documents: 20 million of them. Kept one pointer each,
    // they took the server past 1.7 GB; past `max_bulk_docs_count` they
    // are only checked now.
    let s = Server::start();
    let pid = s.child.id();
    s.create_db("tiny");
    let n = 20_000_000;
    let body = format!(r#"{{"docs":[{}]}}"#, vec!["{}"; n].join(","));
    let before = proc_status(pid, "VmRSS");
    let r = s.admin("POST", "/tiny/_bulk_docs", Some(&body));
    assert_eq!(
        (r.status, r.error().as_str()),
        (413, "max_bulk_docs_count_exceeded")
    );
    let peak = proc_status(pid, "VmHWM");
    // The body itself is held while it is read and parsed: allow a few
    // copies of it, not a pointer per document (20 M × 16 bytes alone
    // would be 320 MB).
    let bound = before + 4 * body.len() as u64;
    assert!(
        peak < bound,
        "VmHWM {} MB after a {} MB body (RSS before {} MB)",
        peak >> 20,
        body.len() >> 20,
        before >> 20
    );
    assert_eq!(s.admin("GET", "/tiny", None).json()["doc_count"], 0);
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

#[test]
fn gzip_requests_and_responses() {
    let s = shared();
    s.create_db("gz");
    let body = gzip(br#"{"docs":[{"_id":"zipped","v":1}]}"#);
    let r = s.raw(
        "POST",
        "/gz/_bulk_docs",
        false,
        &[
            ("Content-Type", "application/json"),
            ("Content-Encoding", "gzip"),
        ],
        Some(&body),
    );
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(s.anon("GET", "/gz/zipped", None).json()["v"], 1);
    // Corrupt gzip: an error, nothing written.
    let r = s.raw(
        "PUT",
        "/gz/broken",
        false,
        &[("Content-Encoding", "gzip")],
        Some(b"not gzip at all"),
    );
    assert!(r.status == 400 || r.status == 415, "{r:?}");
    assert_eq!(s.anon("GET", "/gz/broken", None).status, 404);
    // Compressed response on request (raw socket: ureq would not decode it).
    let docs: Vec<Value> = (0..200)
        .map(|i| json!({"_id": format!("d{i:03}"), "text": "compressible ".repeat(10)}))
        .collect();
    s.anon(
        "POST",
        "/gz/_bulk_docs",
        Some(&json!({"docs": docs}).to_string()),
    );
    let mut conn = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    write!(conn, "GET /gz/_all_docs?include_docs=true HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n").unwrap();
    let mut raw = Vec::new();
    conn.read_to_end(&mut raw).unwrap();
    let head_end = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&raw[..head_end]).to_lowercase();
    assert!(head.contains("content-encoding: gzip"), "{head}");
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    let body = dechunk(&raw[head_end + 4..]);
    let mut text = String::new();
    flate2::read::GzDecoder::new(&body[..])
        .read_to_string(&mut text)
        .unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["rows"].as_array().unwrap().len(), 201);
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = data.windows(2).position(|w| w == b"\r\n").unwrap();
        let size =
            usize::from_str_radix(std::str::from_utf8(&data[..line_end]).unwrap().trim(), 16)
                .unwrap();
        data = &data[line_end + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

#[test]
fn cors_off_by_default_and_configurable() {
    let s = Server::start_open();
    let origin = [("Origin", "http://app.example")];
    let r = s.raw("GET", "/", false, &origin, None);
    assert_eq!(r.header("access-control-allow-origin"), None);
    s.admin(
        "PUT",
        "/_node/_local/_config/chttpd/enable_cors",
        Some("\"true\""),
    );
    s.admin(
        "PUT",
        "/_node/_local/_config/cors/origins",
        Some("\"http://app.example\""),
    );
    let r = s.raw("GET", "/", false, &origin, None);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("http://app.example")
    );
    let pre = s.raw(
        "OPTIONS",
        "/db/doc",
        false,
        &[
            ("Origin", "http://app.example"),
            ("Access-Control-Request-Method", "PUT"),
        ],
        None,
    );
    assert!(pre.status == 204 || pre.status == 200);
    assert!(pre
        .header("access-control-allow-methods")
        .is_some_and(|m| m.contains("PUT")));
    let other = s.raw(
        "GET",
        "/",
        false,
        &[("Origin", "http://evil.example")],
        None,
    );
    assert_eq!(other.header("access-control-allow-origin"), None);
}

fn read_response(conn: &mut TcpStream) -> String {
    // Reads one small response with a Content-Length.
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        conn.read_exact(&mut byte).unwrap();
        buf.push(byte[0]);
    }
    let head = String::from_utf8(buf).unwrap();
    let len: usize = head
        .lines()
        .find_map(|l| {
            l.to_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap())
        })
        .expect("content-length");
    let mut body = vec![0u8; len];
    conn.read_exact(&mut body).unwrap();
    head + &String::from_utf8(body).unwrap()
}

#[test]
fn keep_alive_slow_clients_and_connection_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start_in(
        tmp.path(),
        &["--header-timeout-ms", "500", "--max-connections", "2"],
    );
    // Keep-alive: two requests on one connection.
    let mut a = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    a.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    for _ in 0..2 {
        write!(a, "GET /_up HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert!(read_response(&mut a).starts_with("HTTP/1.1 200"));
    }
    // The connection limit (2): a third connection waits until one closes.
    let mut b = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    b.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(b, "GET /_up HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert!(read_response(&mut b).starts_with("HTTP/1.1 200"));
    let mut c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    c.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    write!(c, "GET /_up HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut probe = [0u8; 1];
    assert!(
        c.read(&mut probe).is_err(),
        "third connection served beyond the limit"
    );
    drop(a);
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert!(read_response(&mut c).starts_with("HTTP/1.1 200"));
    drop(b);
    drop(c);
    // A slow client that never finishes its request head is disconnected.
    let mut slow = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(slow, "GET / HTTP/1.1\r\nHost: x\r\n").unwrap();
    let t = Instant::now();
    let mut rest = Vec::new();
    let _ = slow.read_to_end(&mut rest);
    assert!(
        t.elapsed() < Duration::from_secs(8),
        "slow client held the connection"
    );
    assert!(!String::from_utf8_lossy(&rest).contains("200 OK"));
    // The server still serves others.
    assert_eq!(s.anon("GET", "/_up", None).status, 200);
}

/// Sends a request head, then (after the server may already have answered)
/// its body; returns the response.
fn head_then_body(conn: &mut TcpStream, head: &str, body: &[u8]) -> String {
    write!(
        conn,
        "{head}\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(30));
    conn.write_all(body).unwrap();
    read_response(conn)
}

#[test]
fn errors_before_the_body_keep_the_connection_usable() {
    let s = shared();
    s.create_db("unread");
    let mut conn = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let big = format!("{{\"a\":\"{}\"}}", "x".repeat(200_000));
    // Each is answered without reading the body: no database, a wrong
    // method, a path that is not UTF-8, a design doc without admin rights.
    let cases = [
        ("PUT /nounread/x HTTP/1.1", "404"),
        ("PATCH /unread/x HTTP/1.1", "405"),
        ("PUT /unread/%ff HTTP/1.1", "400"),
        ("PUT /unread/_design/d HTTP/1.1", "401"),
    ];
    for (head, status) in cases {
        for body in ["{}", big.as_str()] {
            let r = head_then_body(&mut conn, head, body.as_bytes());
            assert!(r.starts_with(&format!("HTTP/1.1 {status}")), "{head}: {r}");
            assert!(!r.to_lowercase().contains("connection: close"), "{r}");
            // The same connection serves the next request.
            write!(conn, "GET /unread HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            let next = read_response(&mut conn);
            assert!(next.starts_with("HTTP/1.1 200"), "after {head}: {next}");
        }
    }
    // A body too large to drain: the answer says the connection closes,
    // and it does.
    write!(
        conn,
        "PUT /nounread/x HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 5000000\r\n\r\n{{\"a\":"
    )
    .unwrap();
    let r = read_response(&mut conn);
    assert!(r.starts_with("HTTP/1.1 404"), "{r}");
    assert!(r.to_lowercase().contains("connection: close"), "{r}");
    let mut rest = Vec::new();
    // EOF (or a reset, when unread bytes remain): nothing more is served.
    let _ = conn.read_to_end(&mut rest);
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
    assert_eq!(s.anon("GET", "/unread", None).json()["doc_count"], 0);
}
