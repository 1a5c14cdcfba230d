//! End-to-end tests of the design-document functions around the document
//! API: `validate_doc_update` on every write path, and JavaScript changes
//! filters (`filter=ddoc/name`, `filter=_view`) on every feed. The
//! expected answers are CouchDB 3.4.3's (checked against the reference
//! server), except where a comment says otherwise.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::time::{Duration, Instant};

use common::{shared, Resp, Server};
use serde_json::{json, Value};

/// Puts a design document as admin and asserts success; its revision.
fn put_ddoc(s: &Server, db: &str, name: &str, body: Value) -> String {
    let r = s.admin(
        "PUT",
        &format!("/{db}/_design/{name}"),
        Some(&body.to_string()),
    );
    assert_eq!(r.status, 201, "{r:?}");
    r.json()["rev"].as_str().unwrap().to_string()
}

/// The `{"error", "reason"}` of a response, with its status.
fn err(r: &Resp) -> (u16, String, Value) {
    let v = r.json();
    (
        r.status,
        v["error"].as_str().unwrap_or("").to_string(),
        v["reason"].clone(),
    )
}

/// The JSON a `forbidden` refusal carries as its (string) reason.
fn dumped(r: &Resp) -> Value {
    assert_eq!(r.status, 403, "{r:?}");
    let v = r.json();
    assert_eq!(v["error"], "forbidden");
    serde_json::from_str(v["reason"].as_str().unwrap()).unwrap()
}

/// The hash part of a revision.
fn hash(rev: &str) -> &str {
    rev.split_once('-').unwrap().1
}

/// A validate function that refuses a document with `dump`, showing all
/// its arguments; `kind` picks other ways of refusing.
const VALIDATE: &str = r#"function(newDoc, oldDoc, userCtx, secObj) {
  if (newDoc.dump) throw({forbidden: JSON.stringify({newDoc: newDoc, oldDoc: oldDoc, userCtx: userCtx, secObj: secObj})});
  if (newDoc.kind == 'unauth') throw({unauthorized: 'not you'});
  if (newDoc.kind == 'str') throw 'a string';
  if (newDoc.kind == 'other') throw({other: 'other key'});
  if (newDoc.kind == 'err') throw new Error('an error');
  if (newDoc.kind == 'type') null.foo;
  if (newDoc._deleted && oldDoc && oldDoc.keep) throw({forbidden: 'keep me'});
}"#;

const ADMIN_CTX: &str = r#"{"db":"DB","name":"admin","roles":["_admin"]}"#;

fn admin_ctx(db: &str) -> Value {
    serde_json::from_str(&ADMIN_CTX.replace("DB", db)).unwrap()
}

#[test]
fn single_document_writes_are_validated() {
    let s = shared();
    s.create_db("vd1");
    put_ddoc(s, "vd1", "v", json!({"validate_doc_update": VALIDATE}));
    // A new document: newDoc as sent (no _rev), oldDoc null, userCtx and
    // secObj (the default security object: this server's databases admit
    // anyone, so it is empty).
    let r = s.admin("PUT", "/vd1/d1", Some(r#"{"dump":true,"x":1}"#));
    assert_eq!(
        dumped(&r),
        json!({"newDoc": {"_id": "d1", "dump": true, "x": 1}, "oldDoc": null,
               "userCtx": admin_ctx("vd1"), "secObj": {}})
    );
    assert_eq!(s.admin("GET", "/vd1/d1", None).status, 404);
    // Anonymous writers: name null, no roles.
    let r = s.anon("PUT", "/vd1/d1", Some(r#"{"dump":true}"#));
    assert_eq!(
        dumped(&r)["userCtx"],
        json!({"db": "vd1", "name": null, "roles": []})
    );
    // POST /db too.
    let r = s.anon("POST", "/vd1", Some(r#"{"_id":"p1","dump":true}"#));
    assert_eq!(dumped(&r)["newDoc"], json!({"_id": "p1", "dump": true}));
    // An edit: newDoc names the revision it edits, oldDoc is that revision.
    let r1 = s.anon("PUT", "/vd1/d2", Some(r#"{"x":1,"keep":true}"#));
    assert_eq!(r1.status, 201);
    let rev1 = r1.json()["rev"].as_str().unwrap().to_string();
    let h1 = hash(&rev1);
    let r = s.anon(
        "PUT",
        "/vd1/d2",
        Some(&json!({"_rev": rev1, "dump": true, "x": 2}).to_string()),
    );
    let v = dumped(&r);
    assert_eq!(
        v["newDoc"],
        json!({"_id": "d2", "_rev": rev1, "dump": true, "x": 2, "_revisions": {"start": 1, "ids": [h1]}})
    );
    assert_eq!(
        v["oldDoc"],
        json!({"_id": "d2", "_rev": rev1, "x": 1, "keep": true, "_revisions": {"start": 1, "ids": [h1]}})
    );
    // A deletion: newDoc is `_deleted`, and it is refused here.
    let r = s.anon("DELETE", &format!("/vd1/d2?rev={rev1}"), None);
    assert_eq!(err(&r), (403, "forbidden".into(), json!("keep me")));
    // CouchDB ignores batch=ok on DELETE: still refused.
    let r = s.anon("DELETE", &format!("/vd1/d2?rev={rev1}&batch=ok"), None);
    assert_eq!(err(&r), (403, "forbidden".into(), json!("keep me")));
    assert_eq!(s.anon("GET", "/vd1/d2", None).json()["_rev"], rev1);
    // The other ways of refusing.
    for (kind, status, error, reason) in [
        ("unauth", 401, "unauthorized", "not you"),
        ("str", 500, "unknown_error", "a string"),
        ("other", 500, "unknown_error", "other key"),
        // CouchDB's reason for a thrown Error is `{[]}`; Settee gives the message.
        ("err", 500, "Error", "an error"),
        (
            "type",
            500,
            "TypeError",
            "cannot read property 'foo' of null",
        ),
    ] {
        let r = s.anon(
            "PUT",
            &format!("/vd1/k{kind}"),
            Some(&json!({"kind": kind}).to_string()),
        );
        assert_eq!(err(&r), (status, error.into(), json!(reason)), "{kind}");
        assert_eq!(s.anon("GET", &format!("/vd1/k{kind}"), None).status, 404);
    }
    // COPY: the copy is validated as a new document.
    assert_eq!(s.anon("PUT", "/vd1/src", Some(r#"{"a":1}"#)).status, 201);
    let copy = |dest: &str| {
        common::call(
            &common::agent(),
            "COPY",
            &s.url("/vd1/src"),
            None,
            &[("Destination", dest)],
            None,
        )
    };
    assert_eq!(copy("copied").status, 201);
    put_ddoc(
        s,
        "vd1",
        "nocopy",
        json!({"validate_doc_update": "function(n, o){ if (n._id.indexOf('cp') == 0) throw({forbidden: JSON.stringify([n, o])}); }"}),
    );
    let r = copy("cpdest");
    assert_eq!(r.status, 403);
    let v: Value = serde_json::from_str(r.json()["reason"].as_str().unwrap()).unwrap();
    assert_eq!(v, json!([{"_id": "cpdest", "a": 1}, null]));
    // Valid writes go through.
    assert_eq!(s.anon("PUT", "/vd1/fine", Some(r#"{"x":1}"#)).status, 201);
}

#[test]
fn design_and_local_documents_are_not_validated() {
    let s = shared();
    s.create_db("vd2");
    put_ddoc(
        s,
        "vd2",
        "v",
        json!({"validate_doc_update": "function(){ throw({forbidden: 'nothing'}); }"}),
    );
    assert_eq!(
        err(&s.anon("PUT", "/vd2/x", Some("{}"))),
        (403, "forbidden".into(), json!("nothing"))
    );
    assert_eq!(s.anon("PUT", "/vd2/_local/l", Some("{}")).status, 201);
    assert_eq!(s.anon("DELETE", "/vd2/_local/l", None).status, 200);
    put_ddoc(s, "vd2", "other", json!({"views": {}}));
    let bulk = s.admin(
        "POST",
        "/vd2/_bulk_docs",
        Some(r#"{"docs":[{"_id":"_local/b"},{"_id":"_design/b"},{"_id":"n"}]}"#),
    );
    let v = bulk.json();
    assert_eq!(v[0]["ok"], true);
    assert_eq!(v[1]["ok"], true);
    assert_eq!(v[2]["error"], "forbidden");
}

#[test]
fn conflicts_come_before_validation_and_tombstones_are_old_docs() {
    let s = shared();
    s.create_db("vd3");
    let r1 = s.anon("PUT", "/vd3/a", Some(r#"{"v":1}"#)).json()["rev"]
        .as_str()
        .unwrap()
        .to_string();
    put_ddoc(s, "vd3", "v", json!({"validate_doc_update": VALIDATE}));
    // No revision for a live document, a revision that is not a leaf, a
    // revision of a missing document: conflicts, whatever the function says.
    for (path, body) in [
        ("/vd3/a", json!({"dump": true})),
        ("/vd3/a", json!({"dump": true, "_rev": "1-000"})),
        ("/vd3/zz", json!({"dump": true, "_rev": "1-000"})),
    ] {
        let r = s.anon("PUT", path, Some(&body.to_string()));
        assert_eq!(r.status, 409, "{body}: {r:?}");
    }
    // A deleted document: an edit naming the tombstone sees it as oldDoc
    // (refused here), and is a conflict when allowed.
    let r2 = s.anon("DELETE", &format!("/vd3/a?rev={r1}"), None).json()["rev"]
        .as_str()
        .unwrap()
        .to_string();
    let v = dumped(&s.anon(
        "PUT",
        "/vd3/a",
        Some(&json!({"_rev": r2, "dump": true}).to_string()),
    ));
    assert_eq!(
        v["oldDoc"],
        json!({"_id": "a", "_rev": r2, "_deleted": true,
               "_revisions": {"start": 2, "ids": [hash(&r2), hash(&r1)]}})
    );
    assert_eq!(
        s.anon("PUT", "/vd3/a", Some(&json!({"_rev": r2}).to_string()))
            .status,
        409
    );
    // Recreating it without a revision: oldDoc null.
    let v = dumped(&s.anon("PUT", "/vd3/a", Some(r#"{"dump":true}"#)));
    assert_eq!(v["oldDoc"], Value::Null);
    assert_eq!(s.anon("PUT", "/vd3/a", Some(r#"{"v":3}"#)).status, 201);
}

#[test]
fn bulk_docs_answers_each_refusal_in_place() {
    let s = shared();
    s.create_db("vd4");
    put_ddoc(
        s,
        "vd4",
        "v",
        json!({"validate_doc_update": "function(n, o){ if (n.bad) throw({forbidden: 'bad ' + n._id}); if (n.unauth) throw({unauthorized: 'unauth ' + n._id}); if (n.err) throw new TypeError('te'); if (n.dump) throw({forbidden: JSON.stringify([n, o])}); }"}),
    );
    let r = s.anon(
        "POST",
        "/vd4/_bulk_docs",
        Some(r#"{"docs":[{"_id":"a"},{"_id":"b","bad":1},{"_id":"c","unauth":1},{"_id":"d","err":1},{"_id":"_local/x","bad":1},{"_id":"f"}]}"#),
    );
    assert_eq!(r.status, 201);
    let v = r.json();
    assert_eq!(v[0]["ok"], true);
    assert_eq!(
        v[1],
        json!({"id": "b", "error": "forbidden", "reason": "bad b"})
    );
    assert_eq!(
        v[2],
        json!({"id": "c", "error": "unauthorized", "reason": "unauth c"})
    );
    assert_eq!(
        v[3],
        json!({"id": "d", "error": "TypeError", "reason": "te"})
    );
    assert_eq!(v[4]["ok"], true);
    assert_eq!(v[5]["ok"], true);
    let all = s.anon("GET", "/vd4/_all_docs", None).json();
    let ids: Vec<&str> = all["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["_design/v", "a", "f"]);
    // new_edits=false: refusals name their revision; a revision the
    // database has is not validated again; oldDoc is the nearest stored
    // ancestor.
    let r = s.anon(
        "POST",
        "/vd4/_bulk_docs",
        Some(r#"{"new_edits":false,"docs":[{"_id":"g","_rev":"1-abc"},{"_id":"h","_rev":"1-abc","bad":1}]}"#),
    );
    assert_eq!(
        r.json(),
        json!([{"id": "h", "rev": "1-abc", "error": "forbidden", "reason": "bad h"}])
    );
    let r = s.anon(
        "POST",
        "/vd4/_bulk_docs",
        Some(r#"{"new_edits":false,"docs":[{"_id":"g","_rev":"1-abc","bad":1},{"_id":"g","_rev":"3-ccc","_revisions":{"start":3,"ids":["ccc","bbb","abc"]},"dump":1}]}"#),
    );
    let v = r.json();
    assert_eq!(v.as_array().unwrap().len(), 1, "{v}");
    let dump: Value = serde_json::from_str(v[0]["reason"].as_str().unwrap()).unwrap();
    assert_eq!(
        dump[1],
        json!({"_id": "g", "_rev": "1-abc", "_revisions": {"start": 1, "ids": ["abc"]}})
    );
    assert_eq!(
        dump[0]["_revisions"],
        json!({"start": 3, "ids": ["ccc", "bbb", "abc"]})
    );
    // PUT with new_edits=false too.
    let r = s.anon(
        "PUT",
        "/vd4/k?new_edits=false",
        Some(r#"{"_rev":"1-abc","bad":1}"#),
    );
    assert_eq!(err(&r), (403, "forbidden".into(), json!("bad k")));
    // all_or_nothing (atomic in Settee): a refusal writes nothing.
    let r = s.anon(
        "POST",
        "/vd4/_bulk_docs",
        Some(r#"{"all_or_nothing":true,"docs":[{"_id":"aon1"},{"_id":"aon2","bad":1}]}"#),
    );
    assert_eq!(r.status, 417);
    assert_eq!(
        r.json(),
        json!([{"id": "aon2", "error": "forbidden", "reason": "bad aon2"}])
    );
    assert_eq!(s.anon("GET", "/vd4/aon1", None).status, 404);
}

#[test]
fn bulk_docs_validates_large_requests_in_order() {
    let s = shared();
    s.create_db("vd5");
    put_ddoc(
        s,
        "vd5",
        "v",
        json!({"validate_doc_update": "function(n){ if (n.n % 7 == 0) throw({forbidden: 'no ' + n.n}); }"}),
    );
    let docs: Vec<Value> = (0..2500)
        .map(|n| json!({"_id": format!("d{n:05}"), "n": n}))
        .collect();
    let r = s.anon(
        "POST",
        "/vd5/_bulk_docs",
        Some(&json!({"docs": docs}).to_string()),
    );
    assert_eq!(r.status, 201);
    let v = r.json();
    let results = v.as_array().unwrap();
    assert_eq!(results.len(), 2500);
    for (n, r) in results.iter().enumerate() {
        assert_eq!(r["id"], format!("d{n:05}"));
        if n % 7 == 0 {
            assert_eq!(r["reason"], format!("no {n}"), "{r}");
        } else {
            assert_eq!(r["ok"], true, "{r}");
        }
    }
    let info = s.anon("GET", "/vd5", None).json();
    assert_eq!(info["doc_count"], 1 + 2500 - 2500usize.div_ceil(7));
}

#[test]
fn batch_ok_writes_are_accepted_then_dropped_when_refused() {
    let s = shared();
    s.create_db("vd6");
    put_ddoc(
        s,
        "vd6",
        "v",
        json!({"validate_doc_update": "function(n){ if (n.bad) throw({forbidden: 'bad'}); }"}),
    );
    let r = s.anon("PUT", "/vd6/b1?batch=ok", Some(r#"{"bad":1}"#));
    assert_eq!((r.status, r.json()), (202, json!({"ok": true, "id": "b1"})));
    let r = s.anon("POST", "/vd6?batch=ok", Some(r#"{"_id":"b2","bad":1}"#));
    assert_eq!(r.status, 202);
    assert_eq!(
        s.anon("PUT", "/vd6/b3?batch=ok", Some(r#"{"ok":1}"#))
            .status,
        202
    );
    assert_eq!(
        s.admin("POST", "/vd6/_ensure_full_commit", Some("{}"))
            .status,
        201
    );
    assert_eq!(s.anon("GET", "/vd6/b1", None).status, 404);
    assert_eq!(s.anon("GET", "/vd6/b2", None).status, 404);
    assert_eq!(s.anon("GET", "/vd6/b3", None).status, 200);
}

#[test]
fn every_function_runs_and_changes_take_effect_at_once() {
    let s = shared();
    s.create_db("vd7");
    put_ddoc(
        s,
        "vd7",
        "b",
        json!({"validate_doc_update": "function(n){ if (n.x) throw({forbidden: 'b'}); }"}),
    );
    let rev_a = put_ddoc(
        s,
        "vd7",
        "a",
        json!({"validate_doc_update": "function(n){ if (n.x) throw({forbidden: 'a'}); }"}),
    );
    put_ddoc(
        s,
        "vd7",
        "c",
        json!({"validate_doc_update": "function(n){ if (n.y) throw({forbidden: 'c'}); }"}),
    );
    // In id order; the first refusal answers.
    assert_eq!(
        err(&s.anon("PUT", "/vd7/d", Some(r#"{"x":1}"#))).2,
        json!("a")
    );
    assert_eq!(
        err(&s.anon("PUT", "/vd7/d", Some(r#"{"y":1}"#))).2,
        json!("c")
    );
    // An update of a function applies to the very next write.
    let rev_a = put_ddoc(
        s,
        "vd7",
        "a",
        json!({"_rev": rev_a, "validate_doc_update": "function(n){ if (n.x) throw({forbidden: 'a2'}); }"}),
    );
    assert_eq!(
        err(&s.anon("PUT", "/vd7/d", Some(r#"{"x":1}"#))).2,
        json!("a2")
    );
    // So does a deletion.
    assert_eq!(
        s.admin("DELETE", &format!("/vd7/_design/a?rev={rev_a}"), None)
            .status,
        200
    );
    assert_eq!(
        err(&s.anon("PUT", "/vd7/d", Some(r#"{"x":1}"#))).2,
        json!("b")
    );
    // A function that does not compile refuses every write (500); an
    // empty one answers 404 as in CouchDB.
    s.create_db("vd7b");
    put_ddoc(
        s,
        "vd7b",
        "bad",
        json!({"validate_doc_update": "function(n){ if( }"}),
    );
    let (status, error, _) = err(&s.anon("PUT", "/vd7b/d", Some("{}")));
    assert_eq!((status, error.as_str()), (500, "compilation_error"));
    s.create_db("vd7c");
    put_ddoc(s, "vd7c", "empty", json!({"validate_doc_update": ""}));
    assert_eq!(
        err(&s.anon("PUT", "/vd7c/d", Some("{}"))),
        (
            404,
            "not_found".into(),
            json!("missing validate_doc_update function validate_doc_update on design doc _design/empty")
        )
    );
    // A database deleted and created again has none of the old functions.
    assert_eq!(s.admin("DELETE", "/vd7c", None).status, 200);
    s.create_db("vd7c");
    assert_eq!(s.anon("PUT", "/vd7c/d", Some("{}")).status, 201);
}

#[test]
fn admins_see_the_admin_only_security_object() {
    // The default server: databases for admins only.
    let s = Server::start();
    s.create_db("sec");
    put_ddoc(&s, "sec", "v", json!({"validate_doc_update": VALIDATE}));
    let v = dumped(&s.admin("PUT", "/sec/d", Some(r#"{"dump":true}"#)));
    assert_eq!(v["userCtx"], admin_ctx("sec"));
    assert_eq!(
        v["secObj"],
        json!({"members": {"roles": ["_admin"]}, "admins": {"roles": ["_admin"]}})
    );
    assert_eq!(v["secObj"], s.admin("GET", "/sec/_security", None).json());
}

// ---------------------------------------------------------------- filters

/// A database with d1..d6 (`n` = 1..6), a design document of filters, a
/// conflicted document `c` (winner odd, loser even) and `d2` deleted.
fn filter_db(s: &Server, db: &str) {
    s.create_db(db);
    let docs: Vec<Value> = (1..=6)
        .map(|n| json!({"_id": format!("d{n}"), "n": n}))
        .collect();
    assert_eq!(
        s.anon(
            "POST",
            &format!("/{db}/_bulk_docs"),
            Some(&json!({"docs": docs}).to_string())
        )
        .status,
        201
    );
    put_ddoc(
        s,
        db,
        "f",
        json!({
            "filters": {
                "even": "function(doc, req){ return doc.n % 2 == 0; }",
                "byq": "function(doc, req){ return doc.n == Number(req.query.n); }",
                "del": "function(doc, req){ return !!doc._deleted; }",
                "throws": "function(doc, req){ if (doc.n == 3) throw new Error('boom'); return true; }",
                "req": "function(doc, req){ if (doc._id == 'd1') throw({forbidden: JSON.stringify(req)}); return true; }",
                "doc": "function(doc, req){ if (doc._id == req.query.id) throw({forbidden: JSON.stringify(doc)}); return true; }",
                "syn": "function(doc){ if( }"
            },
            "views": {
                "odd": {"map": "function(doc){ if (doc.n % 2 == 1) emit(doc.n, null); }"},
                "none": {"map": "function(doc){}"}
            }
        }),
    );
    let r = s.anon(
        "POST",
        &format!("/{db}/_bulk_docs"),
        Some(r#"{"new_edits":false,"docs":[{"_id":"c","_rev":"1-aaa","n":2},{"_id":"c","_rev":"1-bbb","n":1}]}"#),
    );
    assert_eq!(r.status, 201);
    let rev = s.anon("GET", &format!("/{db}/d2"), None).json()["_rev"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        s.anon("DELETE", &format!("/{db}/d2?rev={rev}"), None)
            .status,
        200
    );
    // Sequences: d1..d6 1..6, _design/f 7, c 8, d2 9.
}

fn ids(v: &Value) -> Vec<String> {
    common::strings_of(v, "results", "id")
}

fn changes(s: &Server, path: &str) -> Value {
    let r = s.anon("GET", path, None);
    assert_eq!(r.status, 200, "{path}: {r:?}");
    r.json()
}

#[test]
fn filter_functions_on_the_normal_feed() {
    let s = shared();
    filter_db(s, "fl1");
    let v = changes(s, "/fl1/_changes?filter=f/even");
    assert_eq!(ids(&v), ["d4", "d6"]);
    assert_eq!(
        (v["last_seq"].clone(), v["pending"].clone()),
        (json!("9"), json!(0))
    );
    // req.query reaches the function.
    assert_eq!(ids(&changes(s, "/fl1/_changes?filter=f/byq&n=3")), ["d3"]);
    // Deleted documents are judged as CouchDB gives them.
    let v = changes(s, "/fl1/_changes?filter=f/del&include_docs=true");
    assert_eq!(ids(&v), ["d2"]);
    assert_eq!(v["results"][0]["deleted"], true);
    assert_eq!(v["results"][0]["doc"]["_deleted"], true);
    // limit counts passing rows; last_seq takes in a dropped row looked at
    // past the limit, pending does not (CouchDB's accounting).
    let v = changes(s, "/fl1/_changes?filter=f/even&limit=1");
    assert_eq!(ids(&v), ["d4"]);
    assert_eq!(
        (v["last_seq"].clone(), v["pending"].clone()),
        (json!("5"), json!(5))
    );
    let v = changes(s, "/fl1/_changes?filter=f/even&limit=2");
    assert_eq!(
        (v["last_seq"].clone(), v["pending"].clone()),
        (json!("7"), json!(3))
    );
    let v = changes(s, "/fl1/_changes?filter=f/even&descending=true&limit=2");
    assert_eq!(ids(&v), ["d6", "d4"]);
    assert_eq!(
        (v["last_seq"].clone(), v["pending"].clone()),
        (json!("3"), json!(2))
    );
    assert_eq!(
        ids(&changes(s, "/fl1/_changes?filter=f/even&descending=true")),
        ["d6", "d4"]
    );
    assert_eq!(
        ids(&changes(s, "/fl1/_changes?filter=f/even&since=4")),
        ["d6"]
    );
    let v = changes(s, "/fl1/_changes?filter=f/even&include_docs=true&limit=1");
    assert_eq!(v["results"][0]["doc"]["n"], 4);
    // style=all_docs judges every leaf and lists those that passed: c's
    // losing leaf is even.
    let v = changes(s, "/fl1/_changes?filter=f/even&style=all_docs");
    assert_eq!(ids(&v), ["d4", "d6", "c"]);
    assert_eq!(v["results"][2]["changes"], json!([{"rev": "1-aaa"}]));
    // POST works the same.
    let r = s.anon("POST", "/fl1/_changes?filter=f/even", Some("{}"));
    assert_eq!(ids(&r.json()), ["d4", "d6"]);
    // The document a filter sees: _revisions of the leaf alone.
    let r = s.anon("GET", "/fl1/_changes?filter=f/doc&id=d4", None);
    assert_eq!(r.status, 500);
    let reason = r.json()["reason"].as_str().unwrap().to_string();
    let thrown: Value = serde_json::from_str(&reason).unwrap();
    let doc: Value = serde_json::from_str(thrown["forbidden"].as_str().unwrap()).unwrap();
    let rev = s.anon("GET", "/fl1/d4", None).json()["_rev"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        doc,
        json!({"_id": "d4", "_rev": rev, "n": 4, "_revisions": {"start": 1, "ids": [hash(&rev)]}})
    );
}

#[test]
fn view_filters() {
    let s = shared();
    filter_db(s, "fl2");
    assert_eq!(
        ids(&changes(s, "/fl2/_changes?filter=_view&view=f/odd")),
        ["d1", "d3", "d5", "c"]
    );
    assert_eq!(
        ids(&changes(s, "/fl2/_changes?filter=_view&view=f/none")),
        Vec::<String>::new()
    );
    let v = changes(s, "/fl2/_changes?filter=_view&view=f/odd&limit=2");
    assert_eq!(ids(&v), ["d1", "d3"]);
    let v = changes(s, "/fl2/_changes?filter=_view&view=f/odd&feed=longpoll");
    assert_eq!(ids(&v), ["d1", "d3", "d5", "c"]);
}

#[test]
fn the_request_object() {
    let s = shared();
    filter_db(s, "fl3");
    let r = s.raw(
        "POST",
        "/fl3/_changes?filter=f/req&x=1&x=2&y=%2Fa%20b",
        true,
        &[("Content-Type", "application/json"), ("Cookie", "a=b")],
        Some(br#"{"a":[1,2]}"#),
    );
    assert_eq!(r.status, 500);
    let thrown: Value = serde_json::from_str(r.json()["reason"].as_str().unwrap()).unwrap();
    let req: Value = serde_json::from_str(thrown["forbidden"].as_str().unwrap()).unwrap();
    assert_eq!(req["method"], "POST");
    assert_eq!(
        req["query"],
        json!({"filter": "f/req", "x": "2", "y": "/a b"})
    );
    assert_eq!(req["body"], json!({"a": [1, 2]}));
    assert_eq!(req["path"], json!(["fl3", "_changes"]));
    assert_eq!(
        req["raw_path"],
        "/fl3/_changes?filter=f/req&x=1&x=2&y=%2Fa%20b"
    );
    assert_eq!(
        req["requested_path"],
        json!(["fl3", "_changes?filter=f", "req&x=1&x=2&y=/a b"])
    );
    assert_eq!(req["userCtx"], admin_ctx("fl3"));
    assert_eq!(req["secObj"], json!({}));
    assert_eq!(req["id"], Value::Null);
    assert_eq!(req["uuid"].as_str().unwrap().len(), 32);
    assert_eq!(req["info"]["db_name"], "fl3");
    assert_eq!(req["form"], json!({}));
    // Credentials stay out, as in CouchDB 3.4.
    assert_eq!(req["cookie"], json!({}));
    assert_eq!(req["headers"]["Content-Type"], "application/json");
    assert!(req["headers"].get("Authorization").is_none(), "{req}");
    assert!(req["headers"].get("Cookie").is_none(), "{req}");
    // GET: body "undefined", anonymous userCtx.
    let r = s.anon("GET", "/fl3/_changes?filter=f/req", None);
    let thrown: Value = serde_json::from_str(r.json()["reason"].as_str().unwrap()).unwrap();
    let req: Value = serde_json::from_str(thrown["forbidden"].as_str().unwrap()).unwrap();
    assert_eq!(req["body"], "undefined");
    assert_eq!(req["method"], "GET");
    assert_eq!(
        req["userCtx"],
        json!({"db": "fl3", "name": null, "roles": []})
    );
}

#[test]
fn filter_errors() {
    let s = shared();
    filter_db(s, "fl4");
    for (path, status, error, reason) in [
        ("filter=nope/even", 404, "not_found", "missing"),
        ("filter=f/nope", 404, "not_found", "missing json key: nope"),
        (
            "filter=_view&view=f/nope",
            404,
            "not_found",
            "missing json key: nope",
        ),
        ("filter=_view&view=nope/odd", 404, "not_found", "missing"),
        (
            "filter=f",
            400,
            "bad_request",
            "`filter` must be of the form `designname/filtername`",
        ),
        (
            "filter=_view",
            400,
            "bad_request",
            "`view` filter parameter is not provided.",
        ),
        // CouchDB names these `error`; its reason is an Erlang stack trace.
        ("filter=f/throws", 500, "error", "boom"),
        ("filter=f/throws&feed=longpoll", 500, "error", "boom"),
        ("filter=f/throws&feed=continuous", 500, "error", "boom"),
        ("filter=f/throws&feed=eventsource", 500, "error", "boom"),
    ] {
        let r = s.anon("GET", &format!("/fl4/_changes?{path}"), None);
        assert_eq!(err(&r), (status, error.into(), json!(reason)), "{path}");
    }
    let r = s.anon("GET", "/fl4/_changes?filter=f/syn", None);
    assert_eq!((r.status, r.error()), (500, "error".into()));
    // As in CouchDB, a function is compiled when it first has something
    // to judge.
    let v = changes(s, "/fl4/_changes?filter=f/syn&since=now");
    assert_eq!(ids(&v), Vec::<String>::new());
    // A deleted design document.
    let rev = s.admin("GET", "/fl4/_design/f", None).json()["_rev"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        s.admin("DELETE", &format!("/fl4/_design/f?rev={rev}"), None)
            .status,
        200
    );
    assert_eq!(
        err(&s.anon("GET", "/fl4/_changes?filter=f/even", None)),
        (404, "not_found".into(), json!("deleted"))
    );
}

fn stream(s: &Server, path: &str) -> BufReader<Box<dyn Read + Send + Sync>> {
    let agent = ureq::AgentBuilder::new()
        .timeout_read(Duration::from_secs(20))
        .build();
    let resp = agent.get(&s.url(path)).call().expect("feed request");
    BufReader::new(resp.into_reader())
}

/// The next non-empty line of a continuous feed, as JSON.
fn next_row(feed: &mut BufReader<Box<dyn Read + Send + Sync>>) -> Value {
    let mut line = String::new();
    while line.trim().is_empty() {
        line.clear();
        assert!(feed.read_line(&mut line).unwrap() > 0, "feed ended");
    }
    serde_json::from_str(line.trim()).unwrap()
}

#[test]
fn live_feeds_filter() {
    let s = shared();
    filter_db(s, "fl5");
    // Continuous: the existing rows that pass, then live ones; rows that
    // do not pass never show.
    let mut feed = stream(
        s,
        "/fl5/_changes?feed=continuous&filter=f/even&timeout=20000",
    );
    assert_eq!(next_row(&mut feed)["id"], "d4");
    assert_eq!(next_row(&mut feed)["id"], "d6");
    assert_eq!(s.anon("PUT", "/fl5/odd7", Some(r#"{"n":7}"#)).status, 201);
    assert_eq!(s.anon("PUT", "/fl5/even8", Some(r#"{"n":8}"#)).status, 201);
    let row = next_row(&mut feed);
    assert_eq!(
        (row["id"].clone(), row["seq"].clone()),
        (json!("even8"), json!("11"))
    );
    drop(feed);
    // Continuous with a limit: ends after that many passing rows.
    let mut body = String::new();
    stream(s, "/fl5/_changes?feed=continuous&filter=f/even&limit=2")
        .read_to_string(&mut body)
        .unwrap();
    let lines: Vec<Value> = body
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{body}");
    assert_eq!(lines[1]["id"], "d6");
    assert_eq!(lines[2], json!({"last_seq": "7", "pending": 5}));
    // Longpoll waits past changes that do not pass.
    let url = s.url("/fl5/_changes?feed=longpoll&since=now&timeout=20000&filter=f/even");
    let waiter =
        std::thread::spawn(move || common::call(&common::agent(), "GET", &url, None, &[], None));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(s.anon("PUT", "/fl5/odd9", Some(r#"{"n":9}"#)).status, 201);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        s.anon("PUT", "/fl5/even10", Some(r#"{"n":10}"#)).status,
        201
    );
    let v = waiter.join().unwrap().json();
    assert_eq!(ids(&v), ["even10"]);
    // Eventsource.
    let r = s.anon(
        "GET",
        "/fl5/_changes?feed=eventsource&filter=f/even&timeout=200",
        None,
    );
    let events: Vec<Value> = r
        .body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ids: Vec<&str> = events.iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["d4", "d6", "even8", "even10"]);
}

#[test]
fn filters_over_many_changes_in_batches() {
    let s = shared();
    s.create_db("fl6");
    put_ddoc(
        s,
        "fl6",
        "f",
        json!({"filters": {"third": "function(doc){ return doc.n % 3 == 0; }"},
               "views": {"third": {"map": "function(doc){ if (doc.n % 3 == 0) emit(null); }"}}}),
    );
    // More than one scan batch of a live feed (1000 rows) and many
    // JavaScript batches.
    for chunk in 0..5 {
        let docs: Vec<Value> = (0..500)
            .map(|i| {
                let n = chunk * 500 + i;
                json!({"_id": format!("d{n:05}"), "n": n})
            })
            .collect();
        assert_eq!(
            s.anon(
                "POST",
                "/fl6/_bulk_docs",
                Some(&json!({"docs": docs}).to_string())
            )
            .status,
            201
        );
    }
    let expected: Vec<String> = (0..2500)
        .filter(|n| n % 3 == 0)
        .map(|n| format!("d{n:05}"))
        .collect();
    for filter in ["filter=f/third", "filter=_view&view=f/third"] {
        let v = changes(s, &format!("/fl6/_changes?{filter}"));
        assert_eq!(ids(&v), expected, "{filter}");
        // A limit in the middle of a batch.
        let v = changes(s, &format!("/fl6/_changes?{filter}&limit=700"));
        assert_eq!(ids(&v), &expected[..700], "{filter}");
        // The last row sent is d02097 (seq 2099); the next is dropped.
        assert_eq!(v["last_seq"], "2100");
        let mut body = String::new();
        let t = Instant::now();
        stream(
            s,
            &format!("/fl6/_changes?feed=continuous&{filter}&timeout=100"),
        )
        .read_to_string(&mut body)
        .unwrap();
        let rows: Vec<Value> = body
            .lines()
            .filter(|l| l.contains("\"id\""))
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(rows.len(), expected.len(), "{filter}");
        assert_eq!(rows[833]["id"], expected[833]);
        assert!(t.elapsed() < Duration::from_secs(30));
        let v = changes(
            s,
            &format!("/fl6/_changes?{filter}&descending=true&limit=3"),
        );
        assert_eq!(ids(&v), ["d02499", "d02496", "d02493"]);
    }
}

/// A show function that never returns is stopped at the JavaScript time
/// bound (`os_process_timeout`, 5 s by default) with CouchDB's
/// `os_process_error`; the server goes on serving shows.
#[test]
fn a_looping_show_is_stopped_and_the_server_goes_on() {
    let s = shared();
    s.create_db("showloop");
    put_ddoc(
        s,
        "showloop",
        "d",
        json!({"shows": {
            "spin": "function(doc, req){ while (true) {} }",
            "ok": "function(doc, req){ return {json: {id: doc && doc._id, q: req.query.q}}; }"
        }}),
    );
    let r = s.admin("PUT", "/showloop/a", Some("{}"));
    assert_eq!(r.status, 201, "{r:?}");
    let t = Instant::now();
    let r = s.admin("GET", "/showloop/_design/d/_show/spin", None);
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    let (status, error, _) = err(&r);
    assert_eq!((status, error.as_str()), (500, "os_process_error"), "{r:?}");
    let r = s.admin("GET", "/showloop/_design/d/_show/ok/a?q=1", None);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json(), json!({"id": "a", "q": "1"}));
    // The ETag names this answer: If-None-Match with it is 304.
    let tag = r.header("ETag").expect("an ETag").to_string();
    let again = s.raw(
        "GET",
        "/showloop/_design/d/_show/ok/a?q=1",
        true,
        &[("If-None-Match", &tag)],
        None,
    );
    assert_eq!(again.status, 304, "{again:?}");
}

/// Reads a raw HTTP/1.1 response with a chunked body: its head and its
/// chunks, each as sent.
fn raw_chunks(port: u16, request: &str) -> (String, Vec<String>) {
    use std::io::Write;
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    conn.write_all(request.as_bytes()).unwrap();
    let mut r = BufReader::new(conn);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        if line == "\r\n" || line.is_empty() {
            break;
        }
        head.push_str(&line);
    }
    let mut chunks = Vec::new();
    loop {
        let mut size = String::new();
        r.read_line(&mut size).unwrap();
        let n = usize::from_str_radix(size.trim(), 16).unwrap();
        let mut data = vec![0u8; n + 2];
        r.read_exact(&mut data).unwrap();
        if n == 0 {
            break;
        }
        chunks.push(String::from_utf8_lossy(&data[..n]).into_owned());
    }
    (head, chunks)
}

/// List functions stream both ways: rows reach `getRow()` through a
/// bounded queue (5,000 rows, many times its size, all in order), and
/// output leaves at each `getRow()` as a chunk of its own — so a list that
/// loops after sending has already sent that chunk when the time bound
/// stops it, and its body ends with CouchDB's error line. A client that
/// leaves half-way frees the function's worker: lists go on being served.
#[test]
fn lists_stream_rows_in_and_chunks_out() {
    let s = shared();
    s.create_db("liststream");
    let docs: Vec<Value> = (0..5000)
        .map(|n| json!({"_id": format!("d{n:05}"), "n": n}))
        .collect();
    let r = s.admin(
        "POST",
        "/liststream/_bulk_docs",
        Some(&json!({ "docs": docs }).to_string()),
    );
    assert_eq!(r.status, 201, "{r:?}");
    put_ddoc(
        s,
        "liststream",
        "d",
        json!({
            "views": {"v": {"map": "function(doc){ emit(doc.n, null); }"}},
            "lists": {
                "count": "function(head, req){ var r, n = 0, inOrder = true; while (r = getRow()) { if (r.key !== n) inOrder = false; n++; if (n % 1000 === 0) send(n + ' '); } return JSON.stringify({total: head.total_rows, n: n, inOrder: inOrder}); }",
                "spin": "function(head, req){ start({headers: {'Content-Type': 'text/plain'}}); send('first'); getRow(); send('second'); getRow(); while (true) {} }",
                "each": "function(head, req){ var r; while (r = getRow()) send(r.id + '\\n'); }"
            }
        }),
    );
    let r = s.admin("GET", "/liststream/_design/d/_list/count/v", None);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.body,
        "1000 2000 3000 4000 5000 {\"total\":5000,\"n\":5000,\"inOrder\":true}"
    );
    let auth = format!(
        "Basic {}",
        common::base64_lite::encode(format!("{}:{}", common::ADMIN.0, common::ADMIN.1).as_bytes())
    );
    let request = |path: &str| {
        format!(
            "GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\nConnection: close\r\n\r\n"
        )
    };
    let (head, chunks) = raw_chunks(s.port, &request("/liststream/_design/d/_list/spin/v"));
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain"),
        "{head}"
    );
    assert_eq!(&chunks[..2], ["first", "second"], "{chunks:?}");
    let rest = chunks[2..].concat();
    let line: Value = serde_json::from_str(rest.trim()).unwrap();
    assert_eq!(line["code"], 500, "{rest}");
    assert_eq!(line["error"], "os_process_error", "{rest}");
    // Clients that leave after the first bytes: the functions end, their
    // workers serve the next lists.
    for _ in 0..4 {
        use std::io::Write;
        let mut conn = std::net::TcpStream::connect(("127.0.0.1", s.port)).unwrap();
        conn.write_all(request("/liststream/_design/d/_list/each/v").as_bytes())
            .unwrap();
        let mut first = [0u8; 512];
        let _ = conn.read(&mut first).unwrap();
    }
    for _ in 0..8 {
        let r = s.admin("GET", "/liststream/_design/d/_list/each/v?limit=3", None);
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.body, "d00000\nd00001\nd00002\n");
    }
    // `_all_docs` rows stream through the same queue (5,000 documents and
    // the design document).
    let r = s.admin("GET", "/liststream/_design/d/_list/count/_all_docs", None);
    assert_eq!(r.status, 200, "{r:?}");
    assert!(
        r.body
            .ends_with("{\"total\":5001,\"n\":5001,\"inOrder\":false}"),
        "{}",
        r.body
    );
}
