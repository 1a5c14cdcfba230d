//! Authentication handlers through the real server: the order of
//! `[chttpd] authentication_handlers` (changed live), JSON Web Tokens made
//! here at run time (so expiry is tested against the clock), proxy
//! authentication with and without its secret, and the users database
//! opened to its users (each sees and changes only their own document).
//! CouchDB's exact answers are the conformance goldens
//! (tests/conformance/scenarios/auth_handlers.scn, users_open.scn).

mod common;

use base64::Engine as _;
use common::{Resp, Server, ADMIN};
use hmac::{Hmac, Mac};
use serde_json::{json, Value};

const ALL_HANDLERS: &str = "{chttpd_auth, jwt_authentication_handler}, {chttpd_auth, proxy_authentication_handler}, {chttpd_auth, cookie_authentication_handler}, {chttpd_auth, default_authentication_handler}";

fn set_config(s: &Server, section: &str, key: &str, value: &str) {
    let r = s.admin(
        "PUT",
        &format!("/_node/_local/_config/{section}/{key}"),
        Some(&Value::from(value).to_string()),
    );
    assert_eq!(r.status, 200, "{r:?}");
}

fn delete_config(s: &Server, section: &str, key: &str) {
    let r = s.admin(
        "DELETE",
        &format!("/_node/_local/_config/{section}/{key}"),
        None,
    );
    assert!(r.status == 200 || r.status == 404, "{r:?}");
}

fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// An HS256 token signed with `secret`.
fn hs256(claims: &Value, secret: &[u8]) -> String {
    let head = b64url(br#"{"alg":"HS256","typ":"JWT"}"#);
    let body = b64url(claims.to_string().as_bytes());
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret).unwrap();
    mac.update(format!("{head}.{body}").as_bytes());
    format!("{head}.{body}.{}", b64url(&mac.finalize().into_bytes()))
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn with_headers(
    s: &Server,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Resp {
    let mut h: Vec<(&str, &str)> = headers.to_vec();
    if body.is_some() {
        h.push(("Content-Type", "application/json"));
    }
    s.raw(method, path, false, &h, body.map(str::as_bytes))
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

fn session_user(r: &Resp) -> (Value, Value) {
    assert_eq!(r.status, 200, "{r:?}");
    let v = r.json();
    (v["userCtx"].clone(), v["info"]["authenticated"].clone())
}

#[test]
fn handlers_follow_the_configured_order_and_change_live() {
    let s = Server::start();
    // Default chain: cookie, then Basic.
    let r = s.anon("GET", "/_session", None);
    assert_eq!(
        r.json()["info"]["authentication_handlers"],
        json!(["cookie", "default"])
    );
    // A session cookie and wrong Basic credentials: the cookie is looked at
    // first, as in CouchDB.
    let login = s.anon(
        "POST",
        "/_session",
        Some(&json!({"name": ADMIN.0, "password": ADMIN.1}).to_string()),
    );
    assert_eq!(login.status, 200, "{login:?}");
    let cookie = login
        .header("set-cookie")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let wrong = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("admin:wrong")
    );
    let both = [
        ("Cookie", cookie.as_str()),
        ("Authorization", wrong.as_str()),
    ];
    let (user, method) = session_user(&with_headers(&s, "GET", "/_session", &both, None));
    assert_eq!(
        (user["name"].clone(), method),
        (json!(ADMIN.0), json!("cookie"))
    );
    // Basic first: the wrong password is refused before the cookie is seen.
    set_config(
        &s,
        "chttpd",
        "authentication_handlers",
        "{chttpd_auth, default_authentication_handler}, {chttpd_auth, cookie_authentication_handler}",
    );
    let r = with_headers(&s, "GET", "/_session", &both, None);
    assert_eq!(r.status, 401, "{r:?}");
    // Without the cookie handler a cookie is no credential at all.
    set_config(
        &s,
        "chttpd",
        "authentication_handlers",
        "{chttpd_auth, default_authentication_handler}",
    );
    let r = with_headers(&s, "GET", "/_session", &[("Cookie", cookie.as_str())], None);
    let (user, method) = session_user(&r);
    assert_eq!((user["name"].clone(), method), (Value::Null, Value::Null));
    assert_eq!(
        r.json()["info"]["authentication_handlers"],
        json!(["default"])
    );
    // Nor is a JWT while its handler is off; on, it is.
    set_config(&s, "jwt_keys", "hmac:_default", "c2VjcmV0");
    let token = hs256(&json!({"sub": "jo", "exp": now() + 60}), b"secret");
    let auth = bearer(&token);
    let (user, _) = session_user(&with_headers(
        &s,
        "GET",
        "/_session",
        &[("Authorization", auth.as_str())],
        None,
    ));
    assert_eq!(user["name"], Value::Null);
    set_config(&s, "chttpd", "authentication_handlers", ALL_HANDLERS);
    let (user, method) = session_user(&with_headers(
        &s,
        "GET",
        "/_session",
        &[("Authorization", auth.as_str())],
        None,
    ));
    assert_eq!((user["name"].clone(), method), (json!("jo"), json!("jwt")));
    // Back to the default.
    delete_config(&s, "chttpd", "authentication_handlers");
    let r = s.anon("GET", "/_session", None);
    assert_eq!(
        r.json()["info"]["authentication_handlers"],
        json!(["cookie", "default"])
    );
}

#[test]
fn jwt_users_are_checked_against_the_clock_keys_and_security() {
    let s = Server::start();
    set_config(&s, "chttpd", "authentication_handlers", ALL_HANDLERS);
    set_config(&s, "jwt_keys", "hmac:_default", "c2VjcmV0");
    let get = |path: &str, token: &str| {
        let auth = bearer(token);
        with_headers(&s, "GET", path, &[("Authorization", auth.as_str())], None)
    };
    // exp is required by default, and checked against the clock.
    let fresh = hs256(
        &json!({"sub": "alice", "exp": now() + 60, "_couchdb.roles": ["readers"]}),
        b"secret",
    );
    let (user, _) = session_user(&get("/_session", &fresh));
    assert_eq!(user, json!({"name": "alice", "roles": ["readers"]}));
    let expired = hs256(&json!({"sub": "alice", "exp": now() - 5}), b"secret");
    let r = get("/_session", &expired);
    assert_eq!(
        (r.status, r.error()),
        (401, "unauthorized".to_string()),
        "{r:?}"
    );
    assert_eq!(r.json()["reason"], "exp not in future");
    let no_exp = hs256(&json!({"sub": "alice"}), b"secret");
    assert_eq!(
        get("/_session", &no_exp).json()["reason"],
        "Missing exp claim"
    );
    // Another key, a tampered payload: refused.
    let forged = hs256(&json!({"sub": "alice", "exp": now() + 60}), b"other");
    assert_eq!(get("/_session", &forged).json()["reason"], "Bad HMAC");
    let mut parts: Vec<String> = fresh.split('.').map(str::to_string).collect();
    parts[1] = b64url(
        json!({"sub": "root", "exp": now() + 60, "_couchdb.roles": ["_admin"]})
            .to_string()
            .as_bytes(),
    );
    let r = get("/_all_dbs", &parts.join("."));
    assert_eq!(r.status, 400, "{r:?}");
    // alg none is never accepted.
    let none = format!(
        "{}.{}.",
        b64url(br#"{"alg":"none"}"#),
        b64url(br#"{"sub":"root","_couchdb.roles":["_admin"]}"#)
    );
    assert_eq!(get("/_all_dbs", &none).status, 400);
    // The key is rotated: old tokens stop working at once.
    set_config(&s, "jwt_keys", "hmac:_default", "bmV3LXNlY3JldA==");
    assert_eq!(get("/_session", &fresh).json()["reason"], "Bad HMAC");
    let rotated = hs256(
        &json!({"sub": "alice", "exp": now() + 60, "_couchdb.roles": ["readers"]}),
        b"new-secret",
    );
    // A JWT user is a member by role; `_admin` in the token makes a server admin.
    s.create_db("jwt_db");
    let sec = json!({"members": {"roles": ["readers"]}, "admins": {"names": ["boss"]}});
    assert_eq!(
        s.admin("PUT", "/jwt_db/_security", Some(&sec.to_string()))
            .status,
        200
    );
    assert_eq!(s.admin("PUT", "/jwt_db/d", Some("{}")).status, 201);
    assert_eq!(get("/jwt_db/d", &rotated).status, 200);
    let outsider = hs256(&json!({"sub": "mallory", "exp": now() + 60}), b"new-secret");
    assert_eq!(get("/jwt_db/d", &outsider).status, 403);
    assert_eq!(get("/_all_dbs", &rotated).status, 401);
    let root = hs256(
        &json!({"sub": "ops", "exp": now() + 60, "_couchdb.roles": ["_admin"]}),
        b"new-secret",
    );
    assert_eq!(get("/_all_dbs", &root).status, 200);
}

#[test]
fn proxy_headers_are_trusted_only_with_the_right_token_when_a_secret_is_used() {
    let s = Server::start();
    set_config(&s, "chttpd", "authentication_handlers", ALL_HANDLERS);
    s.create_db("proxy_db");
    let sec = json!({"members": {"roles": ["staff"]}});
    assert_eq!(
        s.admin("PUT", "/proxy_db/_security", Some(&sec.to_string()))
            .status,
        200
    );
    assert_eq!(s.admin("PUT", "/proxy_db/d", Some("{}")).status, 201);
    let as_proxy = |name: &str, roles: &str, token: Option<&str>| {
        let mut h = vec![
            ("X-Auth-CouchDB-UserName", name),
            ("X-Auth-CouchDB-Roles", roles),
        ];
        if let Some(t) = token {
            h.push(("X-Auth-CouchDB-Token", t));
        }
        with_headers(&s, "GET", "/proxy_db/d", &h, None)
    };
    assert_eq!(as_proxy("pat", "staff", None).status, 200);
    assert_eq!(as_proxy("pat", "guests", None).status, 403);
    // With proxy_use_secret, only the HMAC of the name under the server's
    // secret counts; anything else is anonymous (401 on a members-only db).
    set_config(&s, "chttpd_auth", "secret", "0123456789abcdef");
    set_config(&s, "chttpd_auth", "proxy_use_secret", "true");
    assert_eq!(as_proxy("pat", "staff", None).status, 401);
    let good = settee_auth::proxy::token("0123456789abcdef", "pat");
    assert_eq!(as_proxy("pat", "staff", Some(&good)).status, 200);
    assert_eq!(as_proxy("eve", "staff", Some(&good)).status, 401);
    let foreign = settee_auth::proxy::token("another-secret", "pat");
    assert_eq!(as_proxy("pat", "staff", Some(&foreign)).status, 401);
    // The proxy handler off: the headers mean nothing.
    delete_config(&s, "chttpd", "authentication_handlers");
    assert_eq!(as_proxy("pat", "staff", Some(&good)).status, 401);
}

/// A user document as a member of an open `_users` reads it.
fn user_get(s: &Server, who: (&str, &str), path: &str) -> Resp {
    common::call(&common::agent(), "GET", &s.url(path), Some(who), &[], None)
}

#[test]
fn an_open_users_database_shows_each_user_only_their_own_document() {
    let s = Server::start();
    set_config(&s, "couchdb", "users_db_security_editable", "true");
    assert_eq!(s.admin("PUT", "/_users/_security", Some("{}")).status, 200);
    for name in ["joe", "ann"] {
        let doc = json!({"name": name, "password": "pw", "roles": [], "type": "user"});
        let r = s.anon(
            "PUT",
            &format!("/_users/org.couchdb.user:{name}"),
            Some(&doc.to_string()),
        );
        assert_eq!(r.status, 201, "sign-up {name}: {r:?}");
    }
    let joe = ("joe", "pw");
    let own = user_get(&s, joe, "/_users/org.couchdb.user:joe");
    assert_eq!(own.status, 200);
    assert!(own.json()["derived_key"].is_string());
    for path in [
        "/_users/org.couchdb.user:ann",
        "/_users/org.couchdb.user:ann?revs_info=true",
        "/_users/org.couchdb.user:ann?open_revs=all",
    ] {
        let r = user_get(&s, joe, path);
        assert_eq!(
            (r.status, r.json()["reason"].clone()),
            (404, json!("missing")),
            "{path}: {r:?}"
        );
    }
    let r = s.anon("GET", "/_users/org.couchdb.user:ann", None);
    assert_eq!(r.status, 404, "{r:?}");
    // Listings are for server admins.
    for path in [
        "/_users/_all_docs",
        "/_users/_changes?include_docs=true",
        "/_users/_local_docs",
    ] {
        assert_eq!(user_get(&s, joe, path).status, 401, "{path}");
    }
    assert_eq!(user_get(&s, joe, "/_users/_design/_auth").status, 403);
    // `_find` and `_bulk_get` hand out nothing but the own document.
    let find = common::call(
        &common::agent(),
        "POST",
        &s.url("/_users/_find"),
        Some(joe),
        &[("Content-Type", "application/json")],
        Some(br#"{"selector":{"type":"user"}}"#),
    );
    assert_eq!(find.status, 200, "{find:?}");
    let ids: Vec<Value> = find.json()["docs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["_id"].clone())
        .collect();
    assert_eq!(ids, vec![json!("org.couchdb.user:joe")]);
    let bulk = common::call(
        &common::agent(),
        "POST",
        &s.url("/_users/_bulk_get"),
        Some(joe),
        &[("Content-Type", "application/json")],
        Some(br#"{"docs":[{"id":"org.couchdb.user:joe"},{"id":"org.couchdb.user:ann"}]}"#),
    );
    let results = bulk.json()["results"].clone();
    assert!(
        results[0]["docs"][0]["ok"]["derived_key"].is_string(),
        "{results}"
    );
    assert_eq!(
        results[1]["docs"][0]["error"]["error"], "not_found",
        "{results}"
    );
    assert!(
        !bulk.body.contains("org.couchdb.user:ann\",\"_rev"),
        "{}",
        bulk.body
    );
    // Another user's document cannot be changed, deleted, copied or given an attachment.
    let ann_rev = s.admin("GET", "/_users/org.couchdb.user:ann", None).json()["_rev"]
        .as_str()
        .unwrap()
        .to_string();
    let writes: [(&str, String, Option<&[u8]>); 3] = [
        (
            "DELETE",
            format!("/_users/org.couchdb.user:ann?rev={ann_rev}"),
            None,
        ),
        (
            "PUT",
            format!("/_users/org.couchdb.user:ann/a.txt?rev={ann_rev}"),
            Some(b"hi"),
        ),
        (
            "PUT",
            "/_users/org.couchdb.user:ann".to_string(),
            Some(br#"{"name":"ann","password":"mine","roles":[],"type":"user"}"#),
        ),
    ];
    for (method, path, body) in writes {
        let r = common::call(
            &common::agent(),
            method,
            &s.url(&path),
            Some(joe),
            &[("Content-Type", "application/json")],
            body,
        );
        assert_eq!(r.status, 404, "{method} {path}: {r:?}");
    }
    let r = common::call(
        &common::agent(),
        "COPY",
        &s.url("/_users/org.couchdb.user:joe"),
        Some(joe),
        &[("Destination", "org.couchdb.user:joe2")],
        None,
    );
    assert_eq!(r.status, 404, "{r:?}");
    assert_eq!(
        s.admin("GET", "/_users/org.couchdb.user:ann", None).json()["_rev"],
        json!(ann_rev)
    );
    // Roles stay the admins' to give.
    let r = common::call(
        &common::agent(),
        "PUT",
        &s.url("/_users/org.couchdb.user:joe"),
        Some(joe),
        &[("Content-Type", "application/json")],
        Some(
            json!({"_rev": own.json()["_rev"], "name": "joe", "roles": ["boss"], "type": "user"})
                .to_string()
                .as_bytes(),
        ),
    );
    assert_eq!(
        (r.status, r.json()["reason"].clone()),
        (403, json!("Only _admin may edit roles")),
        "{r:?}"
    );
    // Closed again: users are refused their own document too.
    let closed = json!({"members": {"roles": ["_admin"]}, "admins": {"roles": ["_admin"]}});
    assert_eq!(
        s.admin("PUT", "/_users/_security", Some(&closed.to_string()))
            .status,
        200
    );
    assert_eq!(
        user_get(&s, joe, "/_users/org.couchdb.user:joe").status,
        403
    );
}
