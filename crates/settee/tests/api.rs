//! End-to-end tests of the server, database, document and bulk endpoints
//! against the real binary (one shared server; each test has its own dbs).

mod common;

use common::{shared, Server};
use serde_json::{json, Value};

fn put_doc(s: &Server, db: &str, id: &str, body: Value) -> String {
    let r = s.admin("PUT", &format!("/{db}/{id}"), Some(&body.to_string()));
    assert_eq!(r.status, 201, "{r:?}");
    r.json()["rev"].as_str().unwrap().to_string()
}

#[test]
fn server_endpoints() {
    let s = shared();
    let r = s.anon("GET", "/", None);
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["couchdb"], "Welcome");
    assert_eq!(v["vendor"]["name"], "Settee");
    assert!(v["version"].is_string());
    // What CouchDB 3.4.3 lists and Settee has (it lists also access-ready,
    // pluggable-storage-engines and reshard, which Settee has not).
    assert_eq!(
        v["features"],
        serde_json::json!(["search", "nouveau", "partitioned", "scheduler"])
    );
    assert_eq!(s.anon("GET", "/_up", None).json()["status"], "ok");

    // _uuids: count, algorithms, bounds.
    let u = s.anon("GET", "/_uuids?count=5", None).json();
    let ids: Vec<&str> = u["uuids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 5);
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "sequential ids increase: {ids:?}"
    );
    assert!(ids.iter().all(|id| id.len() == 32));
    assert_eq!(s.anon("GET", "/_uuids?count=100000", None).status, 400);
    assert_eq!(s.anon("GET", "/_uuids?count=x", None).status, 400);
    // utc_id (and utc_random) ids strictly increase, also many within one
    // microsecond, across requests, and as ids of POSTed documents.
    for algo in ["utc_id", "utc_random"] {
        let path = "/_node/_local/_config/uuids/algorithm";
        let value = format!("\"{algo}\"");
        assert_eq!(s.admin("PUT", path, Some(&value)).status, 200);
        let mut all: Vec<String> = Vec::new();
        for _ in 0..3 {
            let u = s.anon("GET", "/_uuids?count=1000", None).json();
            all.extend(
                u["uuids"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_str().unwrap().to_string()),
            );
        }
        assert!(
            all.windows(2).all(|w| w[0][..14] < w[1][..14]),
            "{algo} ids strictly increase"
        );
        let width = if algo == "utc_id" { 14 } else { 32 };
        assert!(all.iter().all(|id| id.len() == width), "{algo}: {}", all[0]);
        assert_eq!(s.admin("DELETE", path, None).status, 200);
    }

    // _session.
    let anon = s.anon("GET", "/_session", None).json();
    assert_eq!(anon["userCtx"], json!({"name": null, "roles": []}));
    let admin = s.admin("GET", "/_session", None).json();
    assert_eq!(admin["userCtx"]["name"], "admin");
    assert_eq!(admin["userCtx"]["roles"], json!(["_admin"]));
    // Wrong credentials are 401 everywhere.
    let bad = common::call(
        &common::agent(),
        "GET",
        &s.url("/"),
        Some(("admin", "wrong")),
        &[],
        None,
    );
    assert_eq!(bad.status, 401);
    assert_eq!(bad.error(), "unauthorized");

    // Admin-only server endpoints.
    for path in [
        "/_all_dbs",
        "/_dbs_info",
        "/_active_tasks",
        "/_membership",
        "/_node/_local/_config",
        "/_node/_local/_stats",
    ] {
        let r = s.anon("GET", path, None);
        assert_eq!(r.status, 401, "{path}: {r:?}");
        assert_eq!(r.error(), "unauthorized");
        assert_eq!(s.admin("GET", path, None).status, 200, "{path}");
    }
    let m = s.admin("GET", "/_membership", None).json();
    assert_eq!(m["all_nodes"].as_array().unwrap().len(), 1);
    assert!(s.admin("GET", "/_active_tasks", None).json().is_array());
    let stats = s.admin("GET", "/_node/_local/_stats", None).json();
    assert!(
        stats["couchdb"]["httpd"]["requests"]["value"]
            .as_u64()
            .unwrap()
            > 0
    );
    // `_system`: the process's resident memory and storage's parts.
    let sys = s.admin("GET", "/_node/_local/_system", None).json();
    let rss = sys["memory"]["rss"].as_u64().unwrap();
    assert!(rss > (1 << 20), "{sys}");
    for part in ["block_cache", "memtables", "table_readers", "doc_cache"] {
        let bytes = sys["memory"][part].as_u64();
        assert!(bytes.is_some_and(|b| b < rss), "{part}: {sys}");
    }
    assert_eq!(
        s.admin("GET", "/_node/_local", None).json()["name"],
        "settee@127.0.0.1"
    );
    assert_eq!(
        s.admin("GET", "/_node/other@host/_config", None).status,
        404
    );

    // Wrong method: 405 with Allow and a CouchDB error.
    let r = s.admin("DELETE", "/", None);
    assert_eq!(r.status, 405);
    assert_eq!(r.error(), "method_not_allowed");
    assert_eq!(r.header("allow"), Some("GET,HEAD"));
    // Unknown paths: no such handler, no such database (as CouchDB).
    let r = s.admin("GET", "/_nonsense", None);
    assert_eq!((r.status, r.error()), (404, "not_found".to_string()));
    assert_eq!(s.admin("GET", "/favicon.ico", None).status, 404);
}

#[test]
fn all_dbs_and_dbs_info() {
    let s = shared();
    for n in ["list-a", "list-b", "list-c"] {
        s.create_db(n);
    }
    let all: Vec<String> =
        serde_json::from_value(s.admin("GET", "/_all_dbs", None).json()).unwrap();
    assert!(["list-a", "list-b", "list-c"]
        .iter()
        .all(|n| all.contains(&n.to_string())));
    let w = s
        .admin(
            "GET",
            "/_all_dbs?startkey=%22list-a%22&endkey=%22list-c%22&skip=1&limit=1",
            None,
        )
        .json();
    assert_eq!(w, json!(["list-b"]));
    let d = s
        .admin(
            "GET",
            "/_all_dbs?startkey=%22list-c%22&endkey=%22list-a%22&descending=true",
            None,
        )
        .json();
    assert_eq!(d, json!(["list-c", "list-b", "list-a"]));
    let info = s
        .admin(
            "GET",
            "/_dbs_info?startkey=%22list-a%22&endkey=%22list-b%22",
            None,
        )
        .json();
    assert_eq!(info.as_array().unwrap().len(), 2);
    assert_eq!(info[0]["key"], "list-a");
    assert_eq!(info[0]["info"]["db_name"], "list-a");
    let post = s
        .admin(
            "POST",
            "/_dbs_info",
            Some(r#"{"keys":["list-b","no-such-db"]}"#),
        )
        .json();
    assert_eq!(post[0]["info"]["doc_count"], 0);
    assert_eq!(post[1], json!({"key": "no-such-db", "error": "not_found"}));
}

#[test]
fn config_read_write_and_validation() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start_in(tmp.path(), &[]);
    let r = s.admin(
        "PUT",
        "/_node/_local/_config/couchdb/delayed_commits",
        Some("\"true\""),
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.json(), json!(""));
    assert_eq!(
        s.admin("GET", "/_node/_local/_config/couchdb/delayed_commits", None)
            .json(),
        json!("true")
    );
    assert_eq!(
        s.admin("GET", "/_node/_local/_config/couchdb", None).json()["delayed_commits"],
        "true"
    );
    let bad = s.admin(
        "PUT",
        "/_node/_local/_config/couchdb/delayed_commits",
        Some("\"perhaps\""),
    );
    assert_eq!((bad.status, bad.error().as_str()), (400, "bad_request"));
    assert_eq!(
        s.admin(
            "PUT",
            "/_node/_local/_config/couchdb/max_document_size",
            Some("12")
        )
        .status,
        400,
        "not a string"
    );
    let missing = s.admin("GET", "/_node/_local/_config/couchdb/nope", None);
    assert_eq!(
        (missing.status, missing.json()["reason"].as_str()),
        (404, Some("unknown_config_value"))
    );
    assert_eq!(
        s.anon("PUT", "/_node/_local/_config/couchdb/x", Some("\"1\""))
            .status,
        401
    );
    // Admin passwords are stored hashed; a new admin can log in.
    s.admin(
        "PUT",
        "/_node/_local/_config/admins/second",
        Some("\"pw2\""),
    );
    let stored = s
        .admin("GET", "/_node/_local/_config/admins/second", None)
        .json();
    assert!(
        stored.as_str().unwrap().starts_with("-pbkdf2:sha256-"),
        "{stored}"
    );
    let r = common::call(
        &common::agent(),
        "GET",
        &s.url("/_all_dbs"),
        Some(("second", "pw2")),
        &[],
        None,
    );
    assert_eq!(r.status, 200);
    // The last admin cannot be deleted; others can.
    assert_eq!(
        s.admin("DELETE", "/_node/_local/_config/admins/second", None)
            .status,
        200
    );
    assert_eq!(
        s.admin("DELETE", "/_node/_local/_config/admins/admin", None)
            .status,
        400
    );
    // Persisted across restarts.
    assert!(s.stop().success());
    let s2 = Server::start_in(tmp.path(), &[]);
    assert_eq!(
        s2.admin("GET", "/_node/_local/_config/couchdb/delayed_commits", None)
            .json(),
        json!("true")
    );
    let text = std::fs::read_to_string(tmp.path().join("settee.ini")).unwrap();
    assert!(
        !text.contains(common::ADMIN.1),
        "clear-text password stored"
    );
}

#[test]
fn generated_admin_password_when_none_configured() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start_in(tmp.path(), &["--no-admin"]);
    assert_eq!(s.anon("PUT", "/newdb", None).status, 401, "no admin party");
    let ini = std::fs::read_to_string(tmp.path().join("settee.ini")).unwrap();
    assert!(
        ini.contains("[admins]") && ini.contains("admin = -pbkdf2:sha256-"),
        "{ini}"
    );
}

#[test]
fn database_lifecycle_and_errors() {
    let s = shared();
    assert_eq!(s.anon("PUT", "/lifecycle", None).status, 401);
    let r = s.admin("PUT", "/lifecycle", None);
    assert_eq!(r.status, 201);
    assert_eq!(r.json(), json!({"ok": true}));
    assert!(r
        .header("location")
        .is_some_and(|l| l.ends_with("/lifecycle")));
    let again = s.admin("PUT", "/lifecycle", None);
    assert_eq!((again.status, again.error().as_str()), (412, "file_exists"));
    for bad in ["/Upper", "/1abc", "/a%20b", "/_private"] {
        let r = s.admin("PUT", bad, None);
        assert_eq!(
            (r.status, r.error().as_str()),
            (400, "illegal_database_name"),
            "{bad}"
        );
    }
    let info = s.anon("GET", "/lifecycle", None).json();
    for field in [
        "db_name",
        "update_seq",
        "purge_seq",
        "doc_count",
        "doc_del_count",
        "sizes",
        "instance_start_time",
        "compact_running",
    ] {
        assert!(!info[field].is_null(), "missing {field} in {info}");
    }
    assert_eq!(s.anon("HEAD", "/lifecycle", None).status, 200);
    assert_eq!(s.anon("HEAD", "/nosuchdb", None).status, 404);
    let nf = s.anon("GET", "/nosuchdb", None);
    assert_eq!((nf.status, nf.error().as_str()), (404, "not_found"));
    assert_eq!(nf.json()["reason"], "Database does not exist.");
    // Names with a slash are addressed URL-encoded.
    assert_eq!(s.admin("PUT", "/with%2Fslash", None).status, 201);
    assert_eq!(
        s.anon("GET", "/with%2Fslash", None).json()["db_name"],
        "with/slash"
    );
    assert_eq!(s.anon("DELETE", "/lifecycle", None).status, 401);
    assert_eq!(s.admin("DELETE", "/lifecycle?rev=1-a", None).status, 400);
    assert_eq!(
        s.admin("DELETE", "/lifecycle", None).json(),
        json!({"ok": true})
    );
    assert_eq!(s.admin("DELETE", "/lifecycle", None).status, 404);
    assert_eq!(s.anon("GET", "/lifecycle", None).status, 404);
}

#[test]
fn db_maintenance_endpoints() {
    let s = shared();
    s.create_db("maint");
    assert_eq!(s.anon("GET", "/maint/_revs_limit", None).body, "1000\n");
    assert_eq!(s.anon("PUT", "/maint/_revs_limit", Some("5")).status, 401);
    assert_eq!(
        s.admin("PUT", "/maint/_revs_limit", Some("5")).json(),
        json!({"ok": true})
    );
    assert_eq!(s.anon("GET", "/maint/_revs_limit", None).body, "5\n");
    assert_eq!(
        s.admin("PUT", "/maint/_revs_limit", Some("\"x\"")).status,
        400
    );
    assert_eq!(s.admin("PUT", "/maint/_revs_limit", Some("0")).status, 400);

    assert_eq!(s.anon("POST", "/maint/_compact", Some("{}")).status, 401);
    let r = s.admin("POST", "/maint/_compact", Some("{}"));
    assert_eq!((r.status, r.json()), (202, json!({"ok": true})));
    let r = s.raw("POST", "/maint/_compact", true, &[], None);
    assert_eq!((r.status, r.error().as_str()), (415, "bad_content_type"));

    // Like CouchDB, _ensure_full_commit wants a JSON content type.
    let r = s.anon("POST", "/maint/_ensure_full_commit", None);
    assert_eq!(r.status, 415);
    let r = s.raw(
        "POST",
        "/maint/_ensure_full_commit",
        false,
        &[("Content-Type", "application/json")],
        None,
    );
    assert_eq!(r.status, 201);
    assert_eq!(r.json()["ok"], true);
    assert!(r.json()["instance_start_time"].is_string());

    // _purge removes a revision entirely.
    let rev = put_doc(s, "maint", "gone", json!({"a": 1}));
    assert_eq!(
        s.anon(
            "POST",
            "/maint/_purge",
            Some(&json!({"gone": [rev]}).to_string())
        )
        .status,
        401
    );
    let r = s.admin(
        "POST",
        "/maint/_purge",
        Some(&json!({"gone": [rev]}).to_string()),
    );
    assert_eq!(r.status, 201);
    assert_eq!(r.json()["purged"]["gone"], json!([rev]));
    assert_eq!(s.admin("GET", "/maint/gone", None).status, 404);
    // Sequences are strings, as CouchDB's are.
    assert_eq!(s.admin("GET", "/maint", None).json()["purge_seq"], "1");
    assert_eq!(
        s.admin("POST", "/maint/_purge", Some(r#"{"gone":"x"}"#))
            .status,
        400
    );

    assert_eq!(s.anon("GET", "/maint/_security", None).json(), json!({}));
    assert_eq!(
        s.admin("POST", "/maint/_view_cleanup", Some("{}")).status,
        202
    );
}

#[test]
fn document_crud() {
    let s = shared();
    s.create_db("docs");
    // PUT creates; Location and ETag are set.
    let r = s.anon("PUT", "/docs/a", Some(r#"{"x":1,"nested":{"y":[1,2]}}"#));
    assert_eq!(r.status, 201, "{r:?}");
    let rev1 = r.json()["rev"].as_str().unwrap().to_string();
    assert!(rev1.starts_with("1-"));
    assert_eq!(r.header("etag"), Some(format!("\"{rev1}\"").as_str()));
    assert!(r.header("location").is_some_and(|l| l.ends_with("/docs/a")));
    // GET renders _id, _rev and the body.
    let g = s.anon("GET", "/docs/a", None);
    assert_eq!(
        g.json(),
        json!({"_id": "a", "_rev": rev1, "x": 1, "nested": {"y": [1, 2]}})
    );
    assert_eq!(g.header("etag"), Some(format!("\"{rev1}\"").as_str()));
    // If-None-Match → 304.
    let nm = s.raw(
        "GET",
        "/docs/a",
        false,
        &[("If-None-Match", &format!("\"{rev1}\""))],
        None,
    );
    assert_eq!(nm.status, 304);
    assert_eq!(s.anon("HEAD", "/docs/a", None).status, 200);
    // Update without rev: conflict.
    let c = s.anon("PUT", "/docs/a", Some(r#"{"x":2}"#));
    assert_eq!((c.status, c.error().as_str()), (409, "conflict"));
    assert_eq!(c.json()["reason"], "Document update conflict.");
    // Rev in the body, in ?rev= and in If-Match.
    let rev2 = {
        let r = s.anon(
            "PUT",
            "/docs/a",
            Some(&json!({"_rev": rev1, "x": 2}).to_string()),
        );
        assert_eq!(r.status, 201);
        r.json()["rev"].as_str().unwrap().to_string()
    };
    let rev3 = {
        let r = s.anon("PUT", &format!("/docs/a?rev={rev2}"), Some(r#"{"x":3}"#));
        assert_eq!(r.status, 201);
        r.json()["rev"].as_str().unwrap().to_string()
    };
    let rev4 = {
        let r = s.raw(
            "PUT",
            "/docs/a",
            false,
            &[("If-Match", &format!("\"{rev3}\""))],
            Some(br#"{"x":4}"#),
        );
        assert_eq!(r.status, 201, "{r:?}");
        r.json()["rev"].as_str().unwrap().to_string()
    };
    // Disagreeing revs: 400, nothing written.
    let d = s.anon(
        "PUT",
        &format!("/docs/a?rev={rev3}"),
        Some(&json!({"_rev": rev4, "x": 9}).to_string()),
    );
    assert_eq!(d.status, 400);
    assert_eq!(s.anon("GET", "/docs/a", None).json()["x"], 4);
    // Old revision by ?rev=.
    assert_eq!(
        s.anon("GET", &format!("/docs/a?rev={rev1}"), None).json()["x"],
        1
    );
    assert_eq!(s.anon("GET", "/docs/a?rev=9-zzz", None).status, 404);
    assert_eq!(s.anon("GET", "/docs/a?rev=bogus", None).status, 400);
    // revs, revs_info, local_seq, meta.
    let v = s
        .anon(
            "GET",
            "/docs/a?revs=true&revs_info=true&local_seq=true",
            None,
        )
        .json();
    assert_eq!(v["_revisions"]["start"], 4);
    assert_eq!(v["_revisions"]["ids"].as_array().unwrap().len(), 4);
    assert_eq!(
        v["_revs_info"][0],
        json!({"rev": rev4, "status": "available"})
    );
    assert!(v["_local_seq"].as_u64().unwrap() >= 4);
    // meta=true is revs_info, conflicts and deleted_conflicts (CouchDB's
    // parse_doc_query), not local_seq; a meta member means no ETag.
    let meta = s.anon("GET", "/docs/a?meta=true", None);
    assert_eq!(meta.header("etag"), None);
    let meta = meta.json();
    assert!(meta["_revs_info"].is_array() && meta.get("_local_seq").is_none());
    // DELETE needs the rev; then 404 "deleted"; GET ?rev= shows the tombstone.
    assert_eq!(s.anon("DELETE", "/docs/a", None).status, 409);
    let del = s.anon("DELETE", &format!("/docs/a?rev={rev4}"), None);
    assert_eq!(del.status, 200);
    let rev5 = del.json()["rev"].as_str().unwrap().to_string();
    let gone = s.anon("GET", "/docs/a", None);
    assert_eq!(
        (gone.status, gone.json()["reason"].as_str()),
        (404, Some("deleted"))
    );
    assert_eq!(
        s.anon("GET", &format!("/docs/a?rev={rev5}"), None).json()["_deleted"],
        true
    );
    let missing = s.anon("GET", "/docs/never", None);
    assert_eq!(
        (missing.status, missing.json()["reason"].as_str()),
        (404, Some("missing"))
    );
    assert_eq!(s.anon("DELETE", "/docs/never?rev=1-abc", None).status, 404);
    // Re-create after delete.
    assert_eq!(
        s.anon("PUT", "/docs/a", Some(r#"{"back":true}"#)).status,
        201
    );
    // POST /db generates ids; requires JSON.
    let p = s.anon("POST", "/docs", Some(r#"{"posted":1}"#));
    assert_eq!(p.status, 201);
    let id = p.json()["id"].as_str().unwrap().to_string();
    assert_eq!(id.len(), 32);
    assert_eq!(
        s.anon("GET", &format!("/docs/{id}"), None).json()["posted"],
        1
    );
    let r = s.raw(
        "POST",
        "/docs",
        false,
        &[("Content-Type", "text/plain")],
        Some(b"{}"),
    );
    assert_eq!((r.status, r.error().as_str()), (415, "bad_content_type"));
    // Bad documents.
    assert_eq!(s.anon("PUT", "/docs/b", Some("[1]")).status, 400);
    assert_eq!(
        s.anon("PUT", "/docs/b", Some(r#"{"_foo":1}"#)).error(),
        "doc_validation"
    );
    assert_eq!(
        s.anon("PUT", "/docs/_bad", Some("{}")).error(),
        "illegal_docid"
    );
    // Reading an id no document can have is a plain 404, as in CouchDB.
    assert_eq!(s.anon("GET", "/docs/_bad", None).error(), "not_found");
    assert_eq!(s.anon("PUT", "/nodb/x", Some("{}")).status, 404);
    // Wrong method on a document.
    let r = s.anon("PATCH", "/docs/a", Some("{}"));
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("DELETE,GET,HEAD,POST,PUT,COPY"));
}

#[test]
fn special_ids_design_local_encoded() {
    let s = shared();
    s.create_db("ids");
    // URL-encoded ids with slashes and unicode.
    let r = s.anon("PUT", "/ids/a%2Fb%20c%C3%A9", Some(r#"{"v":1}"#));
    assert_eq!(r.status, 201);
    assert_eq!(r.json()["id"], "a/b cé");
    assert_eq!(
        s.anon("GET", "/ids/a%2Fb%20c%C3%A9", None).json()["_id"],
        "a/b cé"
    );
    // Design documents need an admin to write, anyone may read.
    let d = s.anon("PUT", "/ids/_design/app", Some(r#"{"views":{}}"#));
    assert_eq!((d.status, d.error().as_str()), (401, "unauthorized"));
    assert_eq!(
        s.admin("PUT", "/ids/_design/app", Some(r#"{"views":{}}"#))
            .status,
        201
    );
    assert_eq!(
        s.anon("GET", "/ids/_design/app", None).json()["_id"],
        "_design/app"
    );
    assert_eq!(
        s.anon("GET", "/ids/_design%2Fapp", None).json()["_id"],
        "_design/app"
    );
    // Local documents: 0-N revisions, not in _all_docs or _changes, and
    // no revision check (CouchDB 3): a write without a rev is 0-1 again.
    let l = s.anon("PUT", "/ids/_local/ck", Some(r#"{"last_seq":5}"#));
    assert_eq!(l.status, 201);
    assert_eq!(l.json()["rev"], "0-1");
    let l1 = s.anon("PUT", "/ids/_local/ck", Some(r#"{"last_seq":6}"#));
    assert_eq!((l1.status, l1.json()["rev"].clone()), (201, json!("0-1")));
    let l2 = s.anon(
        "PUT",
        "/ids/_local/ck",
        Some(r#"{"_rev":"0-1","last_seq":6}"#),
    );
    assert_eq!(l2.json()["rev"], "0-2");
    assert_eq!(
        s.anon("GET", "/ids/_local/ck", None).json(),
        json!({"_id": "_local/ck", "_rev": "0-2", "last_seq": 6})
    );
    let all = s.anon("GET", "/ids/_all_docs", None).json();
    assert!(all["rows"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| !r["id"].as_str().unwrap().starts_with("_local/")));
    let ch = s.anon("GET", "/ids/_changes", None).json();
    assert!(ch["results"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| !r["id"].as_str().unwrap().starts_with("_local/")));
    assert_eq!(s.anon("DELETE", "/ids/_local/ck?rev=0-2", None).status, 200);
    assert_eq!(s.anon("GET", "/ids/_local/ck", None).status, 404);
    // A view the design document does not define.
    let r = s.anon("GET", "/ids/_design/app/_view/v", None);
    assert_eq!(
        (r.status, r.json()["reason"].as_str()),
        (404, Some("missing_named_view"))
    );
}

#[test]
fn copy_batch_and_full_commit_header() {
    let s = shared();
    s.create_db("copy");
    let rev = put_doc(s, "copy", "src", json!({"v": "orig"}));
    let c = s.raw("COPY", "/copy/src", false, &[("Destination", "dst")], None);
    assert_eq!(c.status, 201, "{c:?}");
    assert_eq!(c.json()["id"], "dst");
    assert_eq!(s.anon("GET", "/copy/dst", None).json()["v"], "orig");
    // Overwrite needs the destination rev.
    assert_eq!(
        s.raw("COPY", "/copy/src", false, &[("Destination", "dst")], None)
            .status,
        409
    );
    let dst_rev = s.anon("GET", "/copy/dst", None).json()["_rev"]
        .as_str()
        .unwrap()
        .to_string();
    let c2 = s.raw(
        "COPY",
        &format!("/copy/src?rev={rev}"),
        false,
        &[("Destination", &format!("dst?rev={dst_rev}"))],
        None,
    );
    assert_eq!(c2.status, 201);
    assert_eq!(s.raw("COPY", "/copy/src", false, &[], None).status, 400);
    // batch=ok → 202 without a rev; the doc shows up after the flush window.
    let b = s.anon("PUT", "/copy/batched?batch=ok", Some(r#"{"b":1}"#));
    assert_eq!(b.status, 202);
    assert_eq!(b.json(), json!({"ok": true, "id": "batched"}));
    let p = s.anon("POST", "/copy?batch=ok", Some(r#"{"_id":"batched2"}"#));
    assert_eq!(p.status, 202);
    assert_eq!(
        s.raw(
            "POST",
            "/copy/_ensure_full_commit",
            false,
            &[("Content-Type", "application/json")],
            None
        )
        .status,
        201
    );
    assert_eq!(s.anon("GET", "/copy/batched", None).json()["b"], 1);
    assert_eq!(s.anon("GET", "/copy/batched2", None).status, 200);
    // X-Couch-Full-Commit true/false are both accepted.
    for v in ["true", "false"] {
        let r = s.raw(
            "PUT",
            &format!("/copy/fc-{v}"),
            false,
            &[("X-Couch-Full-Commit", v)],
            Some(b"{}"),
        );
        assert_eq!(r.status, 201);
    }
}

#[test]
fn conflicts_open_revs_and_latest() {
    let s = shared();
    s.create_db("conf");
    // Two replicated branches of one document.
    let body = json!({"new_edits": false, "docs": [
        {"_id": "d", "_rev": "2-b", "v": "b", "_revisions": {"start": 2, "ids": ["b", "a"]}},
        {"_id": "d", "_rev": "2-c", "v": "c", "_revisions": {"start": 2, "ids": ["c", "a"]}},
        {"_id": "d", "_rev": "3-d", "_deleted": true, "_revisions": {"start": 3, "ids": ["d", "z", "a"]}},
    ]});
    let r = s.anon("POST", "/conf/_bulk_docs", Some(&body.to_string()));
    assert_eq!(r.status, 201);
    assert_eq!(r.json(), json!([]), "new_edits=false answers only failures");
    let v = s
        .anon("GET", "/conf/d?conflicts=true&deleted_conflicts=true", None)
        .json();
    assert_eq!(v["_rev"], "2-c");
    assert_eq!(v["_conflicts"], json!(["2-b"]));
    assert_eq!(v["_deleted_conflicts"], json!(["3-d"]));
    // open_revs=all as JSON.
    let all = s
        .raw(
            "GET",
            "/conf/d?open_revs=all",
            false,
            &[("Accept", "application/json")],
            None,
        )
        .json();
    assert_eq!(all.as_array().unwrap().len(), 3);
    assert!(all.as_array().unwrap().iter().all(|x| x["ok"].is_object()));
    // A list with a missing rev.
    let some = s
        .raw(
            "GET",
            "/conf/d?open_revs=%5B%222-b%22%2C%229-x%22%5D",
            false,
            &[("Accept", "application/json")],
            None,
        )
        .json();
    assert_eq!(some[0]["ok"]["_rev"], "2-b");
    assert_eq!(some[1], json!({"missing": "9-x"}));
    // Without Accept: JSON, multipart/mixed.
    let mp = s.anon("GET", "/conf/d?open_revs=all", None);
    assert!(mp
        .header("content-type")
        .unwrap()
        .starts_with("multipart/mixed"));
    assert!(mp.body.contains("\"_rev\":\"2-b\""));
    // latest=true follows a non-leaf rev to its leaves.
    let latest = s.anon("GET", "/conf/d?rev=1-a&latest=true", None).json();
    assert_eq!(latest["_rev"], "2-c");
    assert_eq!(
        s.anon("GET", "/conf/missing?open_revs=all", None).status,
        404
    );
}

#[test]
fn bulk_docs_semantics() {
    let s = shared();
    s.create_db("bulk");
    let r = s.anon(
        "POST",
        "/bulk/_bulk_docs",
        Some(r#"{"docs":[{"_id":"a","v":1},{"_id":"b"},{"v":3}]}"#),
    );
    assert_eq!(r.status, 201);
    let res = r.json();
    assert_eq!(res.as_array().unwrap().len(), 3);
    assert!(res
        .as_array()
        .unwrap()
        .iter()
        .all(|x| x["ok"] == true && x["rev"].is_string()));
    let rev_a = res[0]["rev"].as_str().unwrap().to_string();
    // Per-doc conflict; the other doc is written.
    let r = s
        .anon(
            "POST",
            "/bulk/_bulk_docs",
            Some(&json!({"docs": [{"_id": "a", "v": 2}, {"_id": "c"}]}).to_string()),
        )
        .json();
    assert_eq!(
        r[0],
        json!({"id": "a", "error": "conflict", "reason": "Document update conflict."})
    );
    assert_eq!(r[1]["ok"], true);
    // all_or_nothing: a failure writes nothing (417).
    let aon = json!({"all_or_nothing": true, "docs": [{"_id": "a", "v": 3}, {"_id": "d"}]});
    let r = s.anon("POST", "/bulk/_bulk_docs", Some(&aon.to_string()));
    assert_eq!(r.status, 417);
    assert_eq!(r.json()[0]["error"], "conflict");
    assert_eq!(s.anon("GET", "/bulk/d", None).status, 404);
    // Deletion through _bulk_docs.
    let r = s.anon(
        "POST",
        "/bulk/_bulk_docs",
        Some(&json!({"docs": [{"_id": "a", "_rev": rev_a, "_deleted": true}]}).to_string()),
    );
    assert_eq!(r.json()[0]["ok"], true);
    assert_eq!(s.anon("GET", "/bulk/a", None).json()["reason"], "deleted");
    // Malformed requests change nothing.
    let seq = s.anon("GET", "/bulk", None).json()["update_seq"].clone();
    for bad in [
        r#"{"docs":{}}"#,
        r#"{"nodocs":[]}"#,
        r#"{"docs":[{"_id":"ok"},{"_id":"_bad"}]}"#,
        r#"{"docs":[1]}"#,
        "{\"docs\":[",
    ] {
        let r = s.anon("POST", "/bulk/_bulk_docs", Some(bad));
        assert_eq!(r.status, 400, "{bad}: {r:?}");
        r.error();
    }
    assert_eq!(s.anon("GET", "/bulk", None).json()["update_seq"], seq);
    assert_eq!(s.anon("GET", "/bulk/ok", None).status, 404);
    // Design docs in bulk need an admin: refused one by one, as CouchDB.
    let r = s.anon(
        "POST",
        "/bulk/_bulk_docs",
        Some(r#"{"docs":[{"_id":"_design/x"}]}"#),
    );
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.json()[0]["error"], "unauthorized", "{r:?}");
    assert_eq!(s.admin("GET", "/bulk/_design/x", None).status, 404);
    // _local docs in bulk.
    let r = s
        .anon(
            "POST",
            "/bulk/_bulk_docs",
            Some(r#"{"docs":[{"_id":"_local/l","v":1}]}"#),
        )
        .json();
    assert_eq!(r[0]["rev"], "0-1");
    assert_eq!(s.anon("GET", "/bulk/_bulk_docs", None).status, 405);
}

#[test]
fn large_bulk_docs_answer_every_document_in_input_order() {
    // 300 documents span several of the engine's chunks (answered in
    // order, gathered last chunk first).
    let s = shared();
    s.create_db("bulkbig");
    for id in ["d050", "d150", "d299"] {
        assert_eq!(
            s.anon("PUT", &format!("/bulkbig/{id}"), Some("{}")).status,
            201
        );
    }
    let docs: Vec<Value> = (0..300)
        .map(|i| json!({"_id": format!("d{i:03}"), "i": i}))
        .collect();
    let r = s.anon(
        "POST",
        "/bulkbig/_bulk_docs",
        Some(&json!({ "docs": docs }).to_string()),
    );
    assert_eq!(r.status, 201);
    let res = r.json();
    let res = res.as_array().unwrap();
    assert_eq!(res.len(), 300);
    for (i, x) in res.iter().enumerate() {
        assert_eq!(x["id"], format!("d{i:03}"), "{x}");
        if [50, 150, 299].contains(&i) {
            assert_eq!(x["error"], "conflict", "{x}");
        } else {
            assert_eq!(x["ok"], true, "{x}");
        }
    }
    // A local document among them is answered in its place too.
    let mut docs: Vec<Value> = (300..600)
        .map(|i| json!({"_id": format!("d{i:03}")}))
        .collect();
    docs[200] = json!({"_id": "_local/mid", "v": 1});
    let r = s
        .anon(
            "POST",
            "/bulkbig/_bulk_docs",
            Some(&json!({ "docs": docs }).to_string()),
        )
        .json();
    let r = r.as_array().unwrap();
    assert_eq!(r.len(), 300);
    assert_eq!(
        r[200],
        json!({"ok": true, "id": "_local/mid", "rev": "0-1"})
    );
    assert_eq!(r[199]["id"], "d499");
    assert_eq!(r[201]["id"], "d501");
    assert_eq!(r[299]["id"], "d599");
    assert!(r.iter().all(|x| x["ok"] == true), "{r:?}");
    // new_edits=false answers only the failures: none here.
    let docs: Vec<Value> = (0..300)
        .map(|i| json!({"_id": format!("r{i:03}"), "_rev": "1-abc"}))
        .collect();
    let r = s.anon(
        "POST",
        "/bulkbig/_bulk_docs",
        Some(&json!({ "docs": docs, "new_edits": false }).to_string()),
    );
    assert_eq!((r.status, r.json()), (201, json!([])));
    assert_eq!(s.anon("GET", "/bulkbig", None).json()["doc_count"], 899);
}

#[test]
fn bulk_get_revs_diff_missing_revs() {
    let s = shared();
    s.create_db("bget");
    let rev = put_doc(s, "bget", "x", json!({"v": 1}));
    let body = json!({"docs": [{"id": "x", "rev": rev}, {"id": "x"}, {"id": "nope", "rev": "1-abc"}, {"id": "x", "rev": "7-zz"}]});
    let r = s.anon("POST", "/bget/_bulk_get?revs=true", Some(&body.to_string()));
    assert_eq!(r.status, 200);
    let res = r.json()["results"].clone();
    assert_eq!(res[0]["docs"][0]["ok"]["_rev"], json!(rev));
    assert_eq!(res[0]["docs"][0]["ok"]["_revisions"]["start"], 1);
    assert_eq!(res[1]["docs"][0]["ok"]["v"], 1);
    assert_eq!(res[2]["docs"][0]["error"]["error"], "not_found");
    assert_eq!(res[3]["docs"][0]["error"]["rev"], "7-zz");
    assert_eq!(s.anon("POST", "/bget/_bulk_get", Some("{}")).status, 400);

    let diff = json!({"x": [rev, "2-new", "1-other"], "y": ["1-a"]});
    let d = s
        .anon("POST", "/bget/_revs_diff", Some(&diff.to_string()))
        .json();
    assert_eq!(d["x"]["missing"], json!(["2-new", "1-other"]));
    assert_eq!(d["x"]["possible_ancestors"], json!([rev]));
    assert_eq!(d["y"], json!({"missing": ["1-a"]}));
    let none = s
        .anon(
            "POST",
            "/bget/_revs_diff",
            Some(&json!({"x": [rev]}).to_string()),
        )
        .json();
    assert_eq!(none, json!({}));
    let m = s
        .anon("POST", "/bget/_missing_revs", Some(&diff.to_string()))
        .json();
    assert_eq!(
        m,
        json!({"missing_revs": {"x": ["2-new", "1-other"], "y": ["1-a"]}})
    );
    assert_eq!(
        s.anon("POST", "/bget/_revs_diff", Some(r#"{"x":"1-a"}"#))
            .status,
        400
    );
}

#[test]
fn all_docs_design_docs_local_docs() {
    let s = shared();
    s.create_db("alld");
    let docs: Vec<Value> = ["a", "b", "c", "d", "e"]
        .iter()
        .map(|id| json!({"_id": id, "n": id}))
        .collect();
    s.anon(
        "POST",
        "/alld/_bulk_docs",
        Some(&json!({"docs": docs}).to_string()),
    );
    s.admin("PUT", "/alld/_design/one", Some("{}"));
    s.anon("PUT", "/alld/_local/l1", Some("{}"));
    let del_rev = put_doc(s, "alld", "z", json!({}));
    s.anon("DELETE", &format!("/alld/z?rev={del_rev}"), None);
    let ids = |v: &Value| -> Vec<String> {
        v["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap_or("").to_string())
            .collect()
    };
    let all = s.anon("GET", "/alld/_all_docs", None).json();
    assert_eq!(ids(&all), ["_design/one", "a", "b", "c", "d", "e"]);
    assert_eq!(all["total_rows"], 6);
    assert_eq!(all["offset"], 0);
    assert!(all["rows"][1]["value"]["rev"].is_string());
    let q = |qs: &str| ids(&s.anon("GET", &format!("/alld/_all_docs?{qs}"), None).json());
    assert_eq!(q("startkey=%22b%22&endkey=%22d%22"), ["b", "c", "d"]);
    assert_eq!(
        q("start_key=%22b%22&end_key=%22d%22&inclusive_end=false"),
        ["b", "c"]
    );
    assert_eq!(
        q("startkey=%22d%22&endkey=%22b%22&descending=true"),
        ["d", "c", "b"]
    );
    assert_eq!(q("limit=2&skip=1"), ["a", "b"]);
    assert_eq!(q("key=%22c%22"), ["c"]);
    assert_eq!(q("startkey_docid=d"), ["d", "e"]);
    // A key that is not a string sorts before every id (as CouchDB
    // compares _all_docs keys): from the first document on.
    assert_eq!(q("startkey=%5B%5D").len(), 6);
    assert_eq!(q("endkey=%5B%5D"), Vec::<String>::new());
    let inc = s.anon("GET", "/alld/_all_docs?keys=%5B%22a%22%2C%22z%22%2C%22nope%22%5D&include_docs=true&update_seq=true", None).json();
    assert_eq!(inc["rows"][0]["doc"]["n"], "a");
    assert_eq!(inc["rows"][1]["value"]["deleted"], true);
    assert_eq!(inc["rows"][1]["doc"], Value::Null);
    assert_eq!(inc["rows"][2], json!({"key": "nope", "error": "not_found"}));
    // `keys` answers have no update_seq (CouchDB's null); ranges have a
    // string one.
    assert_eq!(inc["update_seq"], Value::Null);
    let seq = s
        .anon("GET", "/alld/_all_docs?update_seq=true&limit=0", None)
        .json();
    assert!(seq["update_seq"].is_string());
    let post = s
        .anon(
            "POST",
            "/alld/_all_docs",
            Some(r#"{"keys":["e","a"],"include_docs":true}"#),
        )
        .json();
    assert_eq!(ids(&post), ["e", "a"]);
    assert_eq!(
        s.anon("GET", "/alld/_all_docs?limit=x", None).error(),
        "query_parse_error"
    );
    assert_eq!(
        s.anon("GET", "/alld/_all_docs?startkey=notjson", None)
            .status,
        400
    );
    let qs = s
        .anon(
            "POST",
            "/alld/_all_docs/queries",
            Some(r#"{"queries":[{"keys":["b"]},{"limit":1,"skip":2}]}"#),
        )
        .json();
    assert_eq!(ids(&qs["results"][0]), ["b"]);
    assert_eq!(ids(&qs["results"][1]), ["b"]);
    assert_eq!(
        ids(&s.anon("GET", "/alld/_design_docs", None).json()),
        ["_design/one"]
    );
    let local = s
        .anon("GET", "/alld/_local_docs?include_docs=true", None)
        .json();
    assert_eq!(ids(&local), ["_local/l1"]);
    assert_eq!(local["rows"][0]["doc"]["_rev"], "0-1");
}

#[test]
fn all_docs_large_pages_stream() {
    let s = shared();
    s.create_db("big");
    for chunk in 0..5 {
        let docs: Vec<Value> = (0..1000)
            .map(|i| json!({"_id": format!("doc{:06}", chunk * 1000 + i), "pad": "x".repeat(100)}))
            .collect();
        assert_eq!(
            s.anon(
                "POST",
                "/big/_bulk_docs",
                Some(&json!({"docs": docs}).to_string())
            )
            .status,
            201
        );
    }
    let v = s
        .anon("GET", "/big/_all_docs?include_docs=true", None)
        .json();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 5000);
    assert_eq!(rows[4999]["id"], "doc004999");
    let page = s
        .anon(
            "GET",
            "/big/_all_docs?startkey=%22doc002000%22&limit=2000",
            None,
        )
        .json();
    assert_eq!(page["rows"].as_array().unwrap().len(), 2000);
    assert_eq!(page["rows"][0]["id"], "doc002000");
}

/// Names of the server's threads, from /proc.
fn thread_names(pid: u32) -> Vec<String> {
    let mut names = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).expect("/proc task dir") {
        let comm = task.expect("task entry").path().join("comm");
        if let Ok(name) = std::fs::read_to_string(comm) {
            names.push(name.trim().to_string());
        }
    }
    names
}

/// How many CPUs a process may run on (`Cpus_allowed_list`, e.g. `0-3,6`).
fn allowed_cpus(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .expect("Cpus_allowed_list")
        .trim();
    list.split(',')
        .map(|part| match part.split_once('-') {
            Some((a, b)) => b.parse::<usize>().unwrap() - a.parse::<usize>().unwrap() + 1,
            None => 1,
        })
        .sum()
}

/// `settee serve` with `flag value` exits at once with an error naming the flag.
fn refused_at_start(data: &std::path::Path, flag: &str, value: &str) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_settee"))
        .args(["serve", "--bind", "127.0.0.1:0", flag, value])
        .arg("--data")
        .arg(data)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(flag), "{err}");
}

#[test]
fn idle_polling_serves_writes_and_reads_and_stops_cleanly() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start_in(tmp.path(), &["--idle-poll-us", "300"]);
    let spinners = thread_names(s.child.id())
        .iter()
        .filter(|n| n.starts_with("idle-poll-"))
        .count();
    assert!(spinners >= 1);
    assert_eq!(spinners, allowed_cpus(s.child.id()), "one spinner per CPU");
    s.create_db("idle");
    for i in 0..50 {
        put_doc(&s, "idle", &format!("d{i}"), json!({ "n": i }));
    }
    let r = s.admin("GET", "/idle/d49", None);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["n"], 49);
    let status = s.stop();
    assert!(status.success(), "{status:?}");
    // Nothing acknowledged was lost across the shutdown.
    let s = Server::start_in(tmp.path(), &[]);
    let r = s.admin("GET", "/idle", None);
    assert_eq!(r.json()["doc_count"], 50, "{r:?}");
    assert!(!thread_names(s.child.id())
        .iter()
        .any(|n| n.starts_with("idle-poll-")));
    drop(s);
    // The window is bounded (1 s): a larger one is refused at start.
    refused_at_start(tmp.path(), "--idle-poll-us", "1000001");
}

#[test]
fn the_write_ahead_log_is_preformatted_in_the_background() {
    let tmp = tempfile::tempdir().unwrap();
    let info_log = tmp.path().join("store").join("LOG");
    let reused =
        || std::fs::read_to_string(&info_log).is_ok_and(|l| l.contains("from recycle list"));
    let s = Server::start_in(tmp.path(), &["--wal-preformat-mb", "4"]);
    s.create_db("pre");
    for i in 0..20 {
        put_doc(&s, "pre", &format!("d{i}"), json!({ "n": i }));
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !reused() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(reused(), "the pre-formatted log was not recycled");
    for i in 20..40 {
        put_doc(&s, "pre", &format!("d{i}"), json!({ "n": i }));
    }
    let status = s.stop();
    assert!(status.success(), "{status:?}");
    // Off: nothing is recycled in a new process life; the data is all there.
    std::fs::remove_file(&info_log).unwrap();
    let s = Server::start_in(tmp.path(), &["--wal-preformat-mb", "0"]);
    assert_eq!(s.admin("GET", "/pre", None).json()["doc_count"], 40);
    put_doc(&s, "pre", "more", json!({}));
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(!reused());
    drop(s);
    refused_at_start(tmp.path(), "--wal-preformat-mb", "4097");
}
