//! Per-database security and users, attacked through the real server: an
//! authorisation matrix of requesters (anonymous, unknown user, wrong
//! password, a stranger, members by name and by role, database admins by
//! name and by role, the server admin) × endpoint classes (reads, writes,
//! database-admin operations), each outcome stated independently from
//! CouchDB's rules; user passwords stored only as hashes; the users
//! database closed to everyone but server admins. (CouchDB's exact answers
//! are the conformance goldens, tests/conformance/scenarios/security.scn.)

mod common;

use std::sync::atomic::{AtomicU64, Ordering};

use common::{call, Resp, Server, ADMIN};
use serde_json::{json, Value};

const DB: &str = "sx_db";

/// One server for this file, with CouchDB 3's default security
/// (`admin_only`: a new database admits server admins only).
fn shared() -> &'static Server {
    static SERVER: std::sync::OnceLock<Server> = std::sync::OnceLock::new();
    SERVER.get_or_init(Server::start)
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Who {
    Anonymous,
    Unknown,
    WrongPassword,
    Stranger,
    Member,
    RoleMember,
    DbAdmin,
    RoleAdmin,
    ServerAdmin,
}

impl Who {
    const ALL: [Who; 9] = [
        Who::Anonymous,
        Who::Unknown,
        Who::WrongPassword,
        Who::Stranger,
        Who::Member,
        Who::RoleMember,
        Who::DbAdmin,
        Who::RoleAdmin,
        Who::ServerAdmin,
    ];

    fn credentials(self) -> Option<(&'static str, &'static str)> {
        match self {
            Who::Anonymous => None,
            Who::Unknown => Some(("sx_nobody", "pw")),
            Who::WrongPassword => Some(("sx_member", "not-the-password")),
            Who::Stranger => Some(("sx_stranger", "pw-stranger")),
            Who::Member => Some(("sx_member", "pw-member")),
            Who::RoleMember => Some(("sx_role", "pw-role")),
            Who::DbAdmin => Some(("sx_dbadmin", "pw-dbadmin")),
            Who::RoleAdmin => Some(("sx_boss", "pw-boss")),
            Who::ServerAdmin => Some(ADMIN),
        }
    }
}

/// What a class of endpoint needs.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Needs {
    Member,
    DbAdmin,
}

/// The status CouchDB's rules give `who` on an endpoint needing `needs`
/// (`ok` when allowed).
fn expected(who: Who, needs: Needs, ok: u16) -> (u16, &'static str) {
    match who {
        Who::Unknown | Who::WrongPassword => (401, "Name or password is incorrect."),
        Who::Anonymous => (401, "You are not authorized to access this db."),
        Who::Stranger => (403, "You are not allowed to access this db."),
        Who::Member | Who::RoleMember if needs == Needs::DbAdmin => {
            (403, "You are not a db or server admin.")
        }
        _ => (ok, ""),
    }
}

fn request(s: &Server, who: Who, method: &str, path: &str, body: Option<&Value>) -> Resp {
    let text = body.map(Value::to_string);
    let headers: Vec<(&str, &str)> = if body.is_some() {
        vec![("Content-Type", "application/json")]
    } else {
        vec![]
    };
    call(
        &common::agent(),
        method,
        &s.url(path),
        who.credentials(),
        &headers,
        text.as_deref().map(str::as_bytes),
    )
}

fn put_user(s: &Server, name: &str, password: &str, roles: &[&str]) {
    let r = s.admin(
        "PUT",
        &format!("/_users/org.couchdb.user:{name}"),
        Some(
            &json!({"name": name, "password": password, "roles": roles, "type": "user"})
                .to_string(),
        ),
    );
    assert!(r.status == 201 || r.status == 409, "{r:?}");
}

fn setup(s: &Server) {
    put_user(s, "sx_stranger", "pw-stranger", &[]);
    put_user(s, "sx_member", "pw-member", &[]);
    put_user(s, "sx_role", "pw-role", &["sx_readers"]);
    put_user(s, "sx_dbadmin", "pw-dbadmin", &[]);
    put_user(s, "sx_boss", "pw-boss", &["sx_boss"]);
    s.create_db(DB);
    let sec = json!({
        "members": {"names": ["sx_member"], "roles": ["sx_readers"]},
        "admins": {"names": ["sx_dbadmin"], "roles": ["sx_boss"]},
    });
    let r = s.admin("PUT", &format!("/{DB}/_security"), Some(&sec.to_string()));
    assert_eq!(r.status, 200, "{r:?}");
    let r = s.admin("PUT", &format!("/{DB}/d"), Some(r#"{"a":1}"#));
    assert_eq!(r.status, 201, "{r:?}");
    let ddoc = json!({"views": {"v": {"map": "function (doc) { emit(doc.a, 1); }"}}});
    let r = s.admin("PUT", &format!("/{DB}/_design/v"), Some(&ddoc.to_string()));
    assert_eq!(r.status, 201, "{r:?}");
}

static N: AtomicU64 = AtomicU64::new(0);

fn fresh_id() -> String {
    format!("n{}", N.fetch_add(1, Ordering::Relaxed))
}

/// One endpoint: its class, method, path, body, and success status.
struct Endpoint {
    needs: Needs,
    method: &'static str,
    path: String,
    body: Option<Value>,
    ok: u16,
}

fn endpoints() -> Vec<Endpoint> {
    let e = |needs, method, path: String, body: Option<Value>, ok| Endpoint {
        needs,
        method,
        path,
        body,
        ok,
    };
    vec![
        e(Needs::Member, "GET", format!("/{DB}"), None, 200),
        e(Needs::Member, "GET", format!("/{DB}/d"), None, 200),
        e(Needs::Member, "GET", format!("/{DB}/_all_docs"), None, 200),
        e(Needs::Member, "GET", format!("/{DB}/_changes"), None, 200),
        e(
            Needs::Member,
            "POST",
            format!("/{DB}/_find"),
            Some(json!({"selector": {"a": 1}})),
            200,
        ),
        e(
            Needs::Member,
            "GET",
            format!("/{DB}/_design/v/_view/v"),
            None,
            200,
        ),
        e(Needs::Member, "GET", format!("/{DB}/_security"), None, 200),
        e(
            Needs::Member,
            "PUT",
            format!("/{DB}/{}", fresh_id()),
            Some(json!({"b": 2})),
            201,
        ),
        e(
            Needs::Member,
            "POST",
            format!("/{DB}/_bulk_docs"),
            Some(json!({"docs": [{"_id": fresh_id()}]})),
            201,
        ),
        e(
            Needs::Member,
            "PUT",
            format!("/{DB}/_local/{}", fresh_id()),
            Some(json!({"c": 3})),
            201,
        ),
        e(
            Needs::DbAdmin,
            "PUT",
            format!("/{DB}/_design/{}", fresh_id()),
            Some(json!({})),
            201,
        ),
        e(
            Needs::DbAdmin,
            "POST",
            format!("/{DB}/_compact"),
            Some(json!({})),
            202,
        ),
        e(
            Needs::DbAdmin,
            "PUT",
            format!("/{DB}/_revs_limit"),
            Some(json!(1000)),
            200,
        ),
    ]
}

#[test]
fn the_authorisation_matrix_holds_on_every_endpoint_class() {
    let s = shared();
    setup(s);
    for who in Who::ALL {
        for ep in endpoints() {
            let r = request(s, who, ep.method, &ep.path, ep.body.as_ref());
            let (status, reason) = expected(who, ep.needs, ep.ok);
            assert_eq!(
                r.status, status,
                "{who:?} {} {}: {}",
                ep.method, ep.path, r.body
            );
            if !reason.is_empty() {
                assert_eq!(
                    r.json()["reason"],
                    reason,
                    "{who:?} {} {}",
                    ep.method,
                    ep.path
                );
            }
        }
    }
    // The security object itself: db admins change it, members do not.
    let sec = json!({
        "members": {"names": ["sx_member"], "roles": ["sx_readers"]},
        "admins": {"names": ["sx_dbadmin"], "roles": ["sx_boss"]},
    });
    for (who, status) in [
        (Who::Member, 403),
        (Who::Anonymous, 401),
        (Who::DbAdmin, 200),
        (Who::RoleAdmin, 200),
    ] {
        let r = request(s, who, "PUT", &format!("/{DB}/_security"), Some(&sec));
        assert_eq!(r.status, status, "{who:?}: {}", r.body);
    }
}

#[test]
fn security_objects_are_validated_and_new_databases_are_admin_only() {
    let s = shared();
    s.create_db("sx_new");
    let r = s.admin("GET", "/sx_new/_security", None);
    assert_eq!(
        r.json(),
        json!({"members": {"roles": ["_admin"]}, "admins": {"roles": ["_admin"]}})
    );
    for bad in [
        json!({"members": {"names": "x"}}),
        json!({"admins": {"roles": [1]}}),
        json!([]),
        json!({"members": null}),
    ] {
        let r = s.admin("PUT", "/sx_new/_security", Some(&bad.to_string()));
        assert_eq!(r.status, 400, "{bad}: {r:?}");
    }
    // Extra members are kept as given.
    let r = s.admin(
        "PUT",
        "/sx_new/_security",
        Some(r#"{"members":{"names":["a"]},"x":{"y":1}}"#),
    );
    assert_eq!(r.status, 200, "{r:?}");
    let r = s.admin("GET", "/sx_new/_security", None);
    assert_eq!(
        r.json(),
        json!({"members": {"names": ["a"]}, "x": {"y": 1}})
    );
    // An empty object opens the database to everyone.
    s.admin("PUT", "/sx_new/_security", Some("{}"));
    let r = s.anon("PUT", "/sx_new/open", Some(r#"{"v":1}"#));
    assert_eq!(r.status, 201, "{r:?}");
    let r = s.anon("PUT", "/sx_new/_design/nope", Some("{}"));
    assert_eq!(
        r.status, 401,
        "design documents still need a db admin: {r:?}"
    );
}

#[test]
fn users_passwords_are_stored_as_hashes_and_the_users_database_is_closed() {
    let s = shared();
    put_user(s, "sx_hash", "s3cret-pw", &["r"]);
    let doc = s
        .admin("GET", "/_users/org.couchdb.user:sx_hash", None)
        .json();
    assert!(doc.get("password").is_none(), "{doc}");
    assert_eq!(doc["password_scheme"], "pbkdf2");
    assert_eq!(doc["pbkdf2_prf"], "sha256");
    assert!(
        doc["derived_key"].as_str().is_some_and(|k| k.len() == 64),
        "{doc}"
    );
    assert!(!doc.to_string().contains("s3cret-pw"));
    // The user logs in with the password (Basic), as a named user with its roles.
    let agent = common::agent();
    let r = call(
        &agent,
        "GET",
        &s.url("/_session"),
        Some(("sx_hash", "s3cret-pw")),
        &[],
        None,
    );
    assert_eq!(r.status, 200, "{r:?}");
    // Only server admins read, write, or reconfigure the users database.
    for (who, status) in [(None, 401), (Some(("sx_hash", "s3cret-pw")), 403)] {
        for (method, path, body) in [
            ("GET", "/_users/org.couchdb.user:sx_hash", None),
            (
                "PUT",
                "/_users/org.couchdb.user:sx_hash",
                Some(r#"{"name":"sx_hash","roles":["_admin"],"type":"user","password":"x"}"#),
            ),
            (
                "PUT",
                "/_users/org.couchdb.user:sx_evil",
                Some(r#"{"name":"sx_evil","roles":[],"type":"user","password":"x"}"#),
            ),
            ("GET", "/_users/_all_docs", None),
        ] {
            let r = call(
                &agent,
                method,
                &s.url(path),
                who,
                &[("Content-Type", "application/json")],
                body.map(str::as_bytes),
            );
            assert_eq!(r.status, status, "{who:?} {method} {path}: {r:?}");
        }
    }
    let r = s.admin("PUT", "/_users/_security", Some("{}"));
    assert_eq!(r.status, 403, "{r:?}");
    assert_eq!(
        r.json()["reason"],
        "You can't edit the security object of the user database."
    );
    // Malformed user documents are refused as CouchDB refuses them.
    let r = s.admin(
        "PUT",
        "/_users/org.couchdb.user:sx_bad",
        Some(r#"{"name":"someone_else","roles":[],"type":"user"}"#),
    );
    assert_eq!(r.status, 403, "{r:?}");
    assert_eq!(
        r.json()["reason"],
        "Doc ID must be of the form org.couchdb.user:name"
    );
    let r = s.admin(
        "POST",
        "/_users/_bulk_docs",
        Some(r#"{"docs":[{"_id":"org.couchdb.user:sx_bulk","name":"sx_bulk","password":"bulk-pw","roles":[],"type":"user"}]}"#),
    );
    assert_eq!(r.status, 201, "{r:?}");
    let doc = s
        .admin("GET", "/_users/org.couchdb.user:sx_bulk", None)
        .json();
    assert!(
        doc.get("password").is_none() && doc["derived_key"].is_string(),
        "{doc}"
    );
}
