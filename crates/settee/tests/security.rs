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
            Who::WrongPassword => Some(("sx_wrongpw", "not-the-password")),
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
    /// Compaction: CouchDB answers 401 to members who are not db admins.
    Compactor,
}

/// Wrong passwords sent so far (the sixth locks the user out).
static WRONG: AtomicU64 = AtomicU64::new(0);

/// The status CouchDB's rules give `who` on an endpoint needing `needs`
/// (`ok` when allowed).
fn expected(who: Who, needs: Needs, ok: u16) -> (u16, &'static str) {
    match who {
        Who::WrongPassword if WRONG.fetch_add(1, Ordering::Relaxed) >= 5 => (
            403,
            "Account is temporarily locked due to multiple authentication failures",
        ),
        Who::Unknown | Who::WrongPassword => (401, "Name or password is incorrect."),
        Who::Anonymous => (401, "You are not authorized to access this db."),
        Who::Stranger => (403, "You are not allowed to access this db."),
        Who::Member | Who::RoleMember if needs == Needs::DbAdmin => {
            (403, "You are not a db or server admin.")
        }
        Who::Member | Who::RoleMember if needs == Needs::Compactor => {
            (401, "You are not a server or db admin.")
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
    put_user(s, "sx_wrongpw", "pw-wrongpw", &[]);
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
            Needs::Compactor,
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
    // A member's bulk request: design documents refused one by one.
    let r = request(
        s,
        Who::Member,
        "POST",
        &format!("/{DB}/_bulk_docs"),
        Some(&json!({"docs": [{"_id": "_design/sx_bulk"}, {"_id": fresh_id()}]})),
    );
    assert_eq!(r.status, 201, "{r:?}");
    let results = r.json();
    assert_eq!(results[0]["error"], "forbidden", "{results}");
    assert_eq!(results[0]["reason"], "You are not a db or server admin.");
    assert!(results[1]["ok"] == true, "{results}");
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
    // Only server admins read, write, or reconfigure the users database
    // (listing it: 401 "You are not a server admin." for users too).
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
            let status = if path.ends_with("_all_docs") {
                401
            } else {
                status
            };
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

fn login(s: &Server, content_type: &str, body: &str) -> Resp {
    call(
        &common::agent(),
        "POST",
        &s.url("/_session"),
        None,
        &[("Content-Type", content_type)],
        Some(body.as_bytes()),
    )
}

/// The `AuthSession=…` pair of a response's `Set-Cookie`.
fn cookie_of(r: &Resp) -> String {
    let set = r.header("set-cookie").expect("Set-Cookie");
    set.split(';').next().expect("pair").to_string()
}

fn with_cookie(s: &Server, path: &str, cookie: &str) -> Resp {
    call(
        &common::agent(),
        "GET",
        &s.url(path),
        None,
        &[("Cookie", cookie)],
        None,
    )
}

#[test]
fn sessions_log_in_with_cookies_that_expire_and_cannot_be_forged() {
    let s = shared();
    put_user(s, "sx_sess", "sess-pw", &["sx_sess_role"]);
    s.create_db("sx_sessdb");
    let sec = json!({"members": {"names": ["sx_sess"]}});
    s.admin("PUT", "/sx_sessdb/_security", Some(&sec.to_string()));
    // JSON and form logins answer the user and a cookie.
    let r = login(
        s,
        "application/json",
        r#"{"name":"sx_sess","password":"sess-pw"}"#,
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.json(),
        json!({"ok": true, "name": "sx_sess", "roles": ["sx_sess_role"]})
    );
    let set = r.header("set-cookie").expect("Set-Cookie").to_string();
    assert!(
        set.contains("; Version=1") && set.contains("; Path=/; HttpOnly"),
        "{set}"
    );
    let r = login(
        s,
        "application/x-www-form-urlencoded",
        "name=sx_sess&password=sess-pw",
    );
    assert_eq!(r.status, 200, "{r:?}");
    let cookie = cookie_of(&r);
    // The cookie identifies the user everywhere.
    let who = with_cookie(s, "/_session", &cookie).json();
    assert_eq!(who["userCtx"]["name"], "sx_sess", "{who}");
    assert_eq!(who["info"]["authenticated"], "cookie");
    assert_eq!(with_cookie(s, "/sx_sessdb", &cookie).status, 200);
    // Wrong passwords, unknown users: 401 and no cookie.
    for body in [
        r#"{"name":"sx_sess","password":"nope"}"#,
        r#"{"name":"sx_nobody","password":"x"}"#,
        r#"{"name":"sx_sess"}"#,
    ] {
        let r = login(s, "application/json", body);
        assert_eq!(r.status, 401, "{body}: {r:?}");
        // An emptied cookie, as CouchDB sends.
        assert!(r
            .header("set-cookie")
            .is_some_and(|c| c.starts_with("AuthSession=;")));
    }
    // `next` redirects after the login.
    let r = call(
        &ureq::AgentBuilder::new().redirects(0).build(),
        "POST",
        &s.url("/_session?next=/sx_sessdb"),
        None,
        &[("Content-Type", "application/json")],
        Some(br#"{"name":"sx_sess","password":"sess-pw"}"#),
    );
    assert_eq!(r.status, 302, "{r:?}");
    assert!(r
        .header("location")
        .is_some_and(|l| l.ends_with("/sx_sessdb")));
    // Tampered cookies are anonymous: another user's name with this MAC,
    // a cut MAC, a cookie made with another secret; garbage is a 400.
    let value = cookie.trim_start_matches("AuthSession=");
    let decoded = base64_decode(value);
    let colon = decoded.iter().position(|&b| b == b':').expect("name:");
    let mut other = b"sx_member".to_vec();
    other.extend_from_slice(&decoded[colon..]);
    let forged = [
        format!("AuthSession={}", base64_encode(&other)),
        format!(
            "AuthSession={}",
            base64_encode(&decoded[..decoded.len() - 4])
        ),
        format!(
            "AuthSession={}",
            settee_auth::cookie::make(
                "sx_sess",
                "0123456789abcdef0123456789abcdef",
                "not-the-secret",
                now()
            )
        ),
    ];
    for c in &forged {
        let r = with_cookie(s, "/sx_sessdb", c);
        assert_eq!(r.status, 401, "{c}: {r:?}");
        assert_eq!(
            with_cookie(s, "/_session", c).json()["userCtx"]["name"],
            Value::Null
        );
    }
    assert_eq!(with_cookie(s, "/_session", "AuthSession=%%%").status, 400);
    // Logging out answers an emptied cookie.
    let r = call(
        &common::agent(),
        "DELETE",
        &s.url("/_session"),
        None,
        &[],
        None,
    );
    assert_eq!(r.status, 200);
    assert!(r
        .header("set-cookie")
        .is_some_and(|c| c.starts_with("AuthSession=;")));
}

#[test]
fn session_cookies_are_renewed_and_expire_with_the_configured_timeout() {
    let s = Server::start();
    put_user(&s, "sx_short", "short-pw", &[]);
    let r = s.admin(
        "PUT",
        "/_node/_local/_config/chttpd_auth/timeout",
        Some(r#""3""#),
    );
    assert_eq!(r.status, 200, "{r:?}");
    let r = login(
        &s,
        "application/json",
        r#"{"name":"sx_short","password":"short-pw"}"#,
    );
    let cookie = cookie_of(&r);
    assert!(r
        .header("set-cookie")
        .is_some_and(|c| c.contains("Max-Age=3")));
    std::thread::sleep(std::time::Duration::from_millis(1100));
    // Past a tenth of its life: the answer carries a fresh cookie.
    let r = with_cookie(&s, "/_session", &cookie);
    assert_eq!(r.json()["userCtx"]["name"], "sx_short");
    assert!(r.header("set-cookie").is_some(), "renewed: {r:?}");
    std::thread::sleep(std::time::Duration::from_millis(2500));
    // Expired: anonymous.
    let r = with_cookie(&s, "/_session", &cookie);
    assert_eq!(r.json()["userCtx"]["name"], Value::Null, "{r:?}");
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

fn base64_decode(s: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s)
        .expect("base64url")
}

fn base64_encode(b: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
}

#[test]
fn repeated_wrong_passwords_lock_a_user_out_and_unknown_users_are_not_tracked() {
    let s = Server::start();
    put_user(&s, "sx_locked", "right-pw", &[]);
    let agent = common::agent();
    let basic = |user: &str, pw: &str| {
        call(
            &agent,
            "GET",
            &s.url("/_session"),
            Some((user, pw)),
            &[],
            None,
        )
    };
    // Five failures are 401s; from the sixth on the account is locked (403),
    // even with the right password, and no password is checked.
    for _ in 0..5 {
        assert_eq!(basic("sx_locked", "wrong").status, 401);
    }
    for pw in ["wrong", "right-pw"] {
        let r = basic("sx_locked", pw);
        assert_eq!(r.status, 403, "{r:?}");
        assert_eq!(
            r.json()["reason"],
            "Account is temporarily locked due to multiple authentication failures"
        );
    }
    let r = login(
        &s,
        "application/json",
        r#"{"name":"sx_locked","password":"right-pw"}"#,
    );
    assert_eq!(r.status, 403, "_session logins are locked too: {r:?}");
    // Unknown users are never locked out.
    for _ in 0..7 {
        assert_eq!(basic("sx_no_such_user", "x").status, 401);
    }
    // `mode = off` stops enforcing.
    let r = s.admin(
        "PUT",
        "/_node/_local/_config/chttpd_auth_lockout/mode",
        Some(r#""off""#),
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(basic("sx_locked", "right-pw").status, 200);
}

#[test]
fn require_valid_user_refuses_anonymous_requests_but_logins() {
    let s = Server::start();
    put_user(&s, "sx_valid", "valid-pw", &[]);
    for (key, value) in [
        ("chttpd/require_valid_user", r#""true""#),
        (
            "httpd/WWW-Authenticate",
            r#""Basic realm=\"administrator\"""#,
        ),
    ] {
        let r = s.admin("PUT", &format!("/_node/_local/_config/{key}"), Some(value));
        assert_eq!(r.status, 200, "{key}: {r:?}");
    }
    for path in ["/", "/_session", "/_up", "/_all_dbs"] {
        let r = s.anon("GET", path, None);
        assert_eq!(r.status, 401, "{path}: {r:?}");
        assert_eq!(r.json()["reason"], "Authentication required.");
        assert_eq!(r.header("www-authenticate"), Some("Basic realm=\"server\""));
    }
    // Logging in needs no credentials; the cookie then counts as valid.
    let r = login(
        &s,
        "application/json",
        r#"{"name":"sx_valid","password":"valid-pw"}"#,
    );
    assert_eq!(r.status, 200, "{r:?}");
    let cookie = cookie_of(&r);
    assert_eq!(with_cookie(&s, "/", &cookie).status, 200);
    // `/_up` may be exempted.
    s.admin(
        "PUT",
        "/_node/_local/_config/chttpd/require_valid_user_except_for_up",
        Some(r#""true""#),
    );
    assert_eq!(s.anon("GET", "/_up", None).status, 200);
    // Without require_valid_user, 401s carry the configured challenge.
    s.admin(
        "PUT",
        "/_node/_local/_config/chttpd/require_valid_user",
        Some(r#""false""#),
    );
    let r = s.anon("GET", "/_all_dbs", None);
    assert_eq!(r.status, 401, "{r:?}");
    assert_eq!(
        r.header("www-authenticate"),
        Some("Basic realm=\"administrator\"")
    );
    assert_eq!(s.anon("GET", "/", None).status, 200);
}
