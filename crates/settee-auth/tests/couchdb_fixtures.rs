//! Values recorded from the reference CouchDB 3.4.3 (user documents as it
//! stored them, cookies it issued with `[chttpd_auth] secret` set to
//! `settee-test-secret`), checked against this crate.

use serde_json::{json, Value};
use settee_auth::cookie::{self, CookieError, MacAlgorithm};
use settee_auth::password::{self, Prf, Scheme, UserHash};
use settee_auth::users;
use settee_auth::UserCtx;

const SECRET: &str = "settee-test-secret";

fn doc(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

/// `PUT /_users/org.couchdb.user:joe {"name":"joe","password":"pw","roles":[],"type":"user"}`
/// with CouchDB's defaults (PBKDF2-SHA256, 600,000 iterations).
const JOE: &str = r#"{"_id":"org.couchdb.user:joe","_rev":"4-39a39e2073d7f7eeded7a4e31d4a6528","password_scheme":"pbkdf2","pbkdf2_prf":"sha256","salt":"9e4f30baf7e4321ba117218dba35aea4","iterations":600000,"derived_key":"307b0c7e406e6afa2fb309a052f62a04a9199d4226d74bef7fc2e5c35d1af0d8","name":"joe","roles":[],"type":"user"}"#;
/// With `[chttpd_auth] iterations = 1000`.
const FAST: &str = r#"{"_id":"org.couchdb.user:fast","_rev":"1-f1d78b3d42e658daeab9417ab0af5702","password_scheme":"pbkdf2","pbkdf2_prf":"sha256","salt":"735d4eb689d262e5c392b283bb32c7ac","iterations":1000,"derived_key":"e92e20e7916008bdfe745c3ecc39aad40fefc177cd9a270547035d3e66f8c43b","name":"fast","roles":["reader"],"type":"user"}"#;
/// With `pbkdf2_prf = sha` (HMAC-SHA1).
const LEGACY: &str = r#"{"_id":"org.couchdb.user:legacy","_rev":"1-2e4569c3079fe2fb6f5d6927820aa818","password_scheme":"pbkdf2","pbkdf2_prf":"sha","salt":"bdf5fd09e3b5137b96a0492f45410155","iterations":1000,"derived_key":"e24e12e7a35177f92a8ee2b1661643b7c2c7cb70","name":"legacy","roles":[],"type":"user"}"#;
/// With `pbkdf2_prf = sha512`.
const BIG: &str = r#"{"_id":"org.couchdb.user:big","_rev":"1-bb82ec596c533d33698928bdf28e89ba","password_scheme":"pbkdf2","pbkdf2_prf":"sha512","salt":"61b20f8190b323b824476d7e707c80e2","iterations":1000,"derived_key":"92682bcb1e9d651f28f22f3ff4bb5062e8eece61d5b2cb5f77b3bf9fb0c60c7542ce2d4ca77578a09873ebe0fb2ae292e107ef5f7220737a2fb798a5825dfa57","name":"big","roles":[],"type":"user"}"#;
/// With `password_scheme = simple`.
const SIMPLE: &str = r#"{"_id":"org.couchdb.user:simple","_rev":"1-656f4d3ff5c81f13fc34fb13b57eb0b7","password_scheme":"simple","salt":"1dd4dfbd05620eb96cae05bb1e850383","password_sha":"f4743bb53d6c092c87d3d1a3a1f4ffd58afe8e64","name":"simple","roles":[],"type":"user"}"#;
/// The server admin `admin:admin` as CouchDB hashed it in `[admins]`.
const ADMIN_HASH: &str = "-pbkdf2:sha256-ec01c86948cb746babe1a183fb06909748226979d7531d6345fe07c3b1d7decd,6395d76dbd609fae4bfc0e39a354e6f9,600000";

#[test]
fn couchdb_user_docs_verify() {
    let cases = [
        (FAST, "fastpw", Prf::Sha256),
        (LEGACY, "legacypw", Prf::Sha1),
        (BIG, "bigpw", Prf::Sha512),
    ];
    for (text, pw, prf) in cases {
        let d = doc(text);
        let h = UserHash::from_user_doc(&d).unwrap();
        assert_eq!((h.scheme, h.prf, h.iterations), (Scheme::Pbkdf2, prf, 1000));
        assert!(h.verify(pw), "{text}");
        assert!(!h.verify("wrong"), "{text}");
        // Stored documents are valid as they are, for their owner too.
        let name = d["name"].as_str().unwrap();
        assert_eq!(
            users::validate(&d, Some(&d), &UserCtx::user(name, &[])),
            Ok(())
        );
    }
    let h = UserHash::from_user_doc(&doc(SIMPLE)).unwrap();
    assert_eq!(h.scheme, Scheme::Simple);
    assert!(h.verify("simplepw"));
    assert!(!h.verify("simplepW"));
}

/// One verification at CouchDB's full 600,000 iterations.
#[test]
fn couchdb_default_strength_hashes_verify() {
    let h = UserHash::from_user_doc(&doc(JOE)).unwrap();
    assert_eq!(h.iterations, 600_000);
    assert!(h.verify("pw"));
    // The admin hash parses to the same kind (verifying it would cost
    // another 600,000 iterations; the same code runs at 1,000 above).
    let admin = UserHash::from_config(ADMIN_HASH).unwrap();
    assert_eq!((admin.prf, admin.iterations), (Prf::Sha256, 600_000));
    assert!(password::is_password_hash(ADMIN_HASH));
}

#[test]
fn before_write_then_couchdb_shape() {
    // Our hash of a sign-up has the fields CouchDB stored for `fast`, in
    // the same order.
    let mut d = json!({"_id": "org.couchdb.user:fast", "name": "fast", "password": "fastpw",
        "roles": ["reader"], "type": "user"});
    users::before_write(d.as_object_mut().unwrap(), 1000, &Default::default()).unwrap();
    let ours: Vec<String> = d.as_object().unwrap().keys().cloned().collect();
    let theirs: Vec<String> = doc(FAST)
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| *k != "_rev")
        .cloned()
        .collect();
    assert_eq!(ours, theirs);
    // And with CouchDB's salt, CouchDB's key.
    let couch = UserHash::from_user_doc(&doc(FAST)).unwrap();
    let again = UserHash::with_salt("fastpw", Prf::Sha256, couch.salt.clone(), 1000);
    assert_eq!(again.derived_key, couch.derived_key);
}

/// `POST /_session {"name":"joe","password":"pw"}` at 1795540858
/// (0x6B05C77A), answered with this cookie.
const JOE_COOKIE: &str = "am9lOjZCMDVDNzdBOvwel28f4yyyciJVvwa8FO9xYGwE_FVk9tBb4SqUTb7c";
const JOE_ISSUED: u64 = 1_795_540_858;
/// The same for the server admin (salt from the `[admins]` hash).
const ADMIN_COOKIE: &str = "YWRtaW46NkIwNUM4RkE6NRjMD79HIRlKYZKnPJIdM2aoKWx9xh0T3FsgxhorwIE";
const ADMIN_ISSUED: u64 = 1_795_541_242;
/// `fast`, with `[chttpd_auth] hash_algorithms = sha` (an HMAC-SHA1 cookie).
const FAST_SHA1_COOKIE: &str = "ZmFzdDo2QjA1QzhGQTpnVcWvoMpzvkeIVVFS-pfTdpqlTQ";

fn salt_of(text: &str) -> String {
    doc(text)["salt"].as_str().unwrap().to_string()
}

#[test]
fn couchdb_cookies_verify() {
    let joe_salt = salt_of(JOE);
    let lookup = |name: &str| (name == "joe").then(|| joe_salt.clone());
    assert_eq!(
        cookie::verify(JOE_COOKIE, lookup, SECRET, JOE_ISSUED + 1, 600),
        Ok(("joe".to_string(), JOE_ISSUED))
    );
    // We make the very same cookie.
    assert_eq!(
        cookie::make("joe", &joe_salt, SECRET, JOE_ISSUED),
        JOE_COOKIE
    );
    // Expired after 600 s; refreshed after 60 s.
    assert_eq!(
        cookie::verify(JOE_COOKIE, lookup, SECRET, JOE_ISSUED + 600, 600),
        Err(CookieError::Expired)
    );
    assert!(!cookie::needs_refresh(JOE_ISSUED, JOE_ISSUED + 60, 600));
    assert!(cookie::needs_refresh(JOE_ISSUED, JOE_ISSUED + 61, 600));
    // Another secret, or a new salt after a password change: refused.
    assert_eq!(
        cookie::verify(JOE_COOKIE, lookup, "other-secret", JOE_ISSUED, 600),
        Err(CookieError::BadMac)
    );
    let changed = |_: &str| Some(password::random_salt());
    assert_eq!(
        cookie::verify(JOE_COOKIE, changed, SECRET, JOE_ISSUED, 600),
        Err(CookieError::BadMac)
    );

    let admin_salt = UserHash::from_config(ADMIN_HASH).unwrap().salt;
    assert_eq!(
        cookie::verify(
            ADMIN_COOKIE,
            |_| Some(admin_salt.clone()),
            SECRET,
            ADMIN_ISSUED,
            600
        ),
        Ok(("admin".to_string(), ADMIN_ISSUED))
    );
    assert_eq!(
        cookie::make("admin", &admin_salt, SECRET, ADMIN_ISSUED),
        ADMIN_COOKIE
    );

    let fast_salt = salt_of(FAST);
    assert_eq!(
        cookie::verify(
            FAST_SHA1_COOKIE,
            |_| Some(fast_salt.clone()),
            SECRET,
            ADMIN_ISSUED,
            600
        ),
        Ok(("fast".to_string(), ADMIN_ISSUED))
    );
    assert_eq!(
        cookie::make_with(MacAlgorithm::Sha1, "fast", &fast_salt, SECRET, ADMIN_ISSUED),
        FAST_SHA1_COOKIE
    );
}
