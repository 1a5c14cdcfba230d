//! End-to-end tests of `_changes`: every feed, the options and the filters.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::time::{Duration, Instant};

use common::{shared, Server};
use serde_json::{json, Value};

fn setup(s: &Server, db: &str) {
    s.create_db(db);
    let docs = json!({"docs": [
        {"_id": "a", "type": "x", "n": 1},
        {"_id": "b", "type": "y", "n": 2},
        {"_id": "_design/d", "views": {}},
        {"_id": "c", "type": "x", "n": 3},
    ]});
    assert_eq!(
        s.admin(
            "POST",
            &format!("/{db}/_bulk_docs"),
            Some(&docs.to_string())
        )
        .status,
        201
    );
}

fn ids(v: &Value) -> Vec<String> {
    common::strings_of(v, "results", "id")
}

#[test]
fn normal_feed_options() {
    let s = shared();
    setup(s, "ch1");
    let v = s.anon("GET", "/ch1/_changes", None).json();
    assert_eq!(ids(&v), ["a", "b", "_design/d", "c"]);
    // Sequences are strings, as CouchDB's are.
    assert_eq!(v["last_seq"], "4");
    assert_eq!(v["pending"], 0);
    assert_eq!(v["results"][0]["seq"], "1");
    assert!(v["results"][0]["changes"][0]["rev"]
        .as_str()
        .unwrap()
        .starts_with("1-"));
    assert_eq!(
        ids(&s.anon("GET", "/ch1/_changes?since=2", None).json()),
        ["_design/d", "c"]
    );
    let lim = s.anon("GET", "/ch1/_changes?limit=2", None).json();
    assert_eq!(ids(&lim), ["a", "b"]);
    assert_eq!(lim["last_seq"], "2");
    assert_eq!(lim["pending"], 2);
    assert_eq!(
        ids(&s
            .anon("GET", "/ch1/_changes?descending=true&limit=2", None)
            .json()),
        ["c", "_design/d"]
    );
    let now = s.anon("GET", "/ch1/_changes?since=now", None).json();
    assert_eq!(ids(&now), Vec::<String>::new());
    assert_eq!(now["last_seq"], "4");
    // since= takes what the feed gives back, numbers, and CouchDB's form.
    for since in ["%224%22", "4", "4-g1AAAA"] {
        let v = s.anon("GET", &format!("/ch1/_changes?since={since}"), None);
        assert_eq!((v.status, v.json()["last_seq"].clone()), (200, json!("4")));
    }
    let docs = s
        .anon("GET", "/ch1/_changes?include_docs=true&limit=1", None)
        .json();
    assert_eq!(
        docs["results"][0]["doc"],
        json!({"_id": "a", "_rev": docs["results"][0]["changes"][0]["rev"], "type": "x", "n": 1})
    );
    // An update moves a document to the end; deletions are flagged.
    let rev = s.anon("GET", "/ch1/a", None).json()["_rev"]
        .as_str()
        .unwrap()
        .to_string();
    s.anon("DELETE", &format!("/ch1/a?rev={rev}"), None);
    let v = s
        .anon("GET", "/ch1/_changes?since=4&include_docs=true", None)
        .json();
    assert_eq!(ids(&v), ["a"]);
    assert_eq!(v["results"][0]["deleted"], true);
    assert_eq!(v["results"][0]["doc"]["_deleted"], true);
    // style=all_docs lists every leaf; conflicts=true with include_docs.
    let branches = json!({"new_edits": false, "docs": [
        {"_id": "b", "_rev": "1-zzzz", "v": 0}
    ]});
    s.anon("POST", "/ch1/_bulk_docs", Some(&branches.to_string()));
    let v = s
        .anon(
            "GET",
            "/ch1/_changes?since=5&style=all_docs&include_docs=true&conflicts=true",
            None,
        )
        .json();
    assert_eq!(ids(&v), ["b"]);
    assert_eq!(v["results"][0]["changes"].as_array().unwrap().len(), 2);
    assert_eq!(
        v["results"][0]["doc"]["_conflicts"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let main = s.anon("GET", "/ch1/_changes?since=5", None).json();
    assert_eq!(main["results"][0]["changes"].as_array().unwrap().len(), 1);
    // Errors.
    assert_eq!(s.anon("GET", "/ch1/_changes?since=abc", None).status, 400);
    assert_eq!(s.anon("GET", "/ch1/_changes?feed=bogus", None).status, 400);
    assert_eq!(s.anon("GET", "/ch1/_changes?style=bogus", None).status, 400);
    assert_eq!(s.anon("GET", "/ch1/_changes?filter=nope", None).status, 400);
    assert_eq!(s.anon("GET", "/nodb/_changes", None).status, 404);
    assert_eq!(s.anon("PUT", "/ch1/_changes", None).status, 405);
}

#[test]
fn filters() {
    let s = shared();
    setup(s, "ch2");
    let get = s
        .anon(
            "GET",
            "/ch2/_changes?filter=_doc_ids&doc_ids=%5B%22c%22%2C%22a%22%5D",
            None,
        )
        .json();
    assert_eq!(ids(&get), ["a", "c"]);
    // Up to 100 ids are looked up: last_seq is the database's update_seq,
    // pending the changes not looked at (CouchDB's accounting).
    assert_eq!(get["last_seq"], "4");
    assert_eq!(get["pending"], 2);
    let post = s
        .anon(
            "POST",
            "/ch2/_changes?filter=_doc_ids",
            Some(r#"{"doc_ids":["b"]}"#),
        )
        .json();
    assert_eq!(ids(&post), ["b"]);
    assert_eq!(
        s.anon(
            "POST",
            "/ch2/_changes?filter=_doc_ids",
            Some(r#"{"doc_ids":"b"}"#)
        )
        .status,
        400
    );
    let sel = s
        .anon(
            "POST",
            "/ch2/_changes?filter=_selector",
            Some(r#"{"selector":{"type":"x","n":{"$gt":1}}}"#),
        )
        .json();
    assert_eq!(ids(&sel), ["c"]);
    let by_id = s
        .anon(
            "POST",
            "/ch2/_changes?filter=_selector",
            Some(r#"{"selector":{"_id":{"$lt":"b"}}}"#),
        )
        .json();
    assert_eq!(ids(&by_id), ["a", "_design/d"]);
    assert_eq!(
        s.anon("POST", "/ch2/_changes?filter=_selector", Some("{}"))
            .status,
        400
    );
    assert_eq!(
        s.anon(
            "POST",
            "/ch2/_changes?filter=_selector",
            Some(r#"{"selector":{"a":{"$bogus":1}}}"#)
        )
        .status,
        400
    );
    assert_eq!(
        ids(&s.anon("GET", "/ch2/_changes?filter=_design", None).json()),
        ["_design/d"]
    );
    // Filters combine with limit: limit counts matching rows.
    let lim = s
        .anon(
            "POST",
            "/ch2/_changes?filter=_selector&limit=1",
            Some(r#"{"selector":{"type":"x"}}"#),
        )
        .json();
    assert_eq!(ids(&lim), ["a"]);
}

#[test]
fn longpoll() {
    let s = shared();
    setup(s, "ch3");
    // Changes exist: answers at once.
    let t = Instant::now();
    let v = s
        .anon("GET", "/ch3/_changes?feed=longpoll&since=1", None)
        .json();
    assert_eq!(ids(&v).len(), 3);
    assert!(t.elapsed() < Duration::from_secs(5));
    // No changes: times out with last_seq.
    let t = Instant::now();
    let v = s
        .anon(
            "GET",
            "/ch3/_changes?feed=longpoll&since=now&timeout=300",
            None,
        )
        .json();
    assert!(t.elapsed() >= Duration::from_millis(250));
    assert_eq!(ids(&v), Vec::<String>::new());
    assert_eq!(v["last_seq"], "4");
    // Waits for the next change.
    let url = s.url("/ch3/_changes?feed=longpoll&since=now&timeout=20000");
    let waiter =
        std::thread::spawn(move || common::call(&common::agent(), "GET", &url, None, &[], None));
    std::thread::sleep(Duration::from_millis(300));
    s.anon("PUT", "/ch3/late", Some("{}"));
    let v = waiter.join().unwrap().json();
    assert_eq!(ids(&v), ["late"]);
    assert_eq!(v["last_seq"], "5");
    // A filtered longpoll ignores non-matching changes.
    let url = s.url("/ch3/_changes?feed=longpoll&since=now&timeout=20000&filter=_doc_ids&doc_ids=%5B%22wanted%22%5D");
    let waiter =
        std::thread::spawn(move || common::call(&common::agent(), "GET", &url, None, &[], None));
    std::thread::sleep(Duration::from_millis(300));
    s.anon("PUT", "/ch3/other", Some("{}"));
    std::thread::sleep(Duration::from_millis(200));
    s.anon("PUT", "/ch3/wanted", Some("{}"));
    assert_eq!(ids(&waiter.join().unwrap().json()), ["wanted"]);
}

fn stream(s: &Server, path: &str) -> BufReader<Box<dyn Read + Send + Sync>> {
    let agent = ureq::AgentBuilder::new()
        .timeout_read(Duration::from_secs(20))
        .build();
    let resp = agent.get(&s.url(path)).call().expect("feed request");
    BufReader::new(resp.into_reader())
}

#[test]
fn continuous_and_eventsource() {
    let s = shared();
    setup(s, "ch4");
    // Continuous with a timeout: existing rows, then last_seq, then EOF.
    let mut body = String::new();
    stream(s, "/ch4/_changes?feed=continuous&timeout=300")
        .read_to_string(&mut body)
        .unwrap();
    let lines: Vec<Value> = body
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 5, "{body}");
    assert_eq!(lines[0]["id"], "a");
    assert_eq!(lines[4], json!({"last_seq": "4", "pending": 0}));
    // Live rows arrive while the feed is open.
    let mut feed = stream(s, "/ch4/_changes?feed=continuous&since=now&timeout=10000");
    s.anon("PUT", "/ch4/live1", Some("{}"));
    // Like CouchDB, a feed that has sent nothing sends a newline when it
    // starts waiting.
    let mut line = String::new();
    while line.trim().is_empty() {
        line.clear();
        feed.read_line(&mut line).unwrap();
    }
    let row: Value = serde_json::from_str(line.trim()).unwrap();
    assert_eq!(
        (row["id"].as_str(), row["seq"].as_str()),
        (Some("live1"), Some("5"))
    );
    drop(feed);
    // Heartbeats: newlines while idle (heartbeat overrides timeout).
    let mut feed = stream(
        s,
        "/ch4/_changes?feed=continuous&since=now&heartbeat=50&timeout=10",
    );
    let t = Instant::now();
    let mut newlines = 0;
    let mut byte = [0u8; 1];
    while newlines < 3 && t.elapsed() < Duration::from_secs(10) {
        feed.read_exact(&mut byte).unwrap();
        if byte[0] == b'\n' {
            newlines += 1;
        }
    }
    assert_eq!(newlines, 3);
    assert!(t.elapsed() >= Duration::from_millis(100));
    drop(feed);
    // Continuous with limit ends after that many rows.
    let mut body = String::new();
    stream(s, "/ch4/_changes?feed=continuous&limit=2")
        .read_to_string(&mut body)
        .unwrap();
    assert_eq!(body.lines().filter(|l| l.contains("\"id\"")).count(), 2);
    // Eventsource.
    let agent = common::agent();
    let r = common::call(
        &agent,
        "GET",
        &s.url("/ch4/_changes?feed=eventsource&timeout=200"),
        None,
        &[],
        None,
    );
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let events: Vec<&str> = r.body.lines().filter(|l| l.starts_with("data: ")).collect();
    assert_eq!(events.len(), 5);
    let first: Value = serde_json::from_str(&events[0]["data: ".len()..]).unwrap();
    assert_eq!(first["id"], "a");
    assert_eq!(r.header("cache-control"), Some("no-cache"));
    assert!(r.body.contains("\nid: \"1\"\n"));
}
