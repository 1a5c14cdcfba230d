//! The rules CouchDB 3.4 enforces on documents in the users database
//! (`_users`), natively: who may read and write which user document
//! (`couch_users_db:before_doc_update/after_doc_read`), how a clear-text
//! `password` becomes a hash before it is stored (`save_doc`), and the
//! validation function CouchDB installs as `_design/_auth`
//! (`AUTH_DB_DOC_VALIDATE_FUNCTION`).
//!
//! Order of a write, as in CouchDB: [`check_write`] (a logged-in user
//! writing another user's document hears `404 not_found`), then
//! [`before_write`] (hashing), then [`validate`] with the previous
//! revision — `None` when there is none or it is deleted (CouchDB lets
//! anyone re-create a deleted user, whose tombstone is no `oldDoc`). Reads
//! go through [`visible_doc`] (or [`may_read`]); CouchDB's `DELETE` opens
//! the document first, so deleting someone else's document is a 404 too.
//! [`validate`] is for non-design documents: CouchDB checks a design
//! document in `_users` for db-admin rights only (and only admins may read
//! one, [`visible_doc`]).
//!
//! Invariants:
//! - Reasons are CouchDB 3.4.3's texts byte for byte (recorded from the
//!   reference server; see the tests), including its typos (`salt.See`).
//! - The validation follows the JavaScript's order, and its JavaScript
//!   semantics where they decide an outcome (truthiness, `==` against an
//!   old document's name, strict `!==`, string conversion in messages).
//!   Where the JavaScript throws a `TypeError`, the result is CouchDB's
//!   `500 TypeError {[]}`.
//! - Nobody but a server or db admin can set or change `roles`, and
//!   nobody at all can store a role starting with `_` (except `_metrics`).

use serde_json::{Map, Value};

use crate::password::{Prf, UserHash};
use crate::{AuthError, SecurityObject, UserCtx, ADMIN_ROLE};

/// The id prefix of user documents.
pub const USER_PREFIX: &str = "org.couchdb.user:";

/// Fields that describe a password; a new `password` replaces all of them.
pub const PASSWORD_FIELDS: [&str; 8] = [
    "derived_key",
    "iterations",
    "password",
    "password_scheme",
    "password_sha",
    "preserve_salt",
    "pbkdf2_prf",
    "salt",
];

/// The user name a document id belongs to (`org.couchdb.user:NAME`).
pub fn doc_name(doc_id: &str) -> Option<&str> {
    doc_id.strip_prefix(USER_PREFIX)
}

/// The id of `name`'s user document.
pub fn user_doc_id(name: &str) -> String {
    format!("{USER_PREFIX}{name}")
}

fn is_owner(doc_id: &str, user: &UserCtx) -> bool {
    user.name.is_some() && doc_name(doc_id) == user.name.as_deref()
}

/// Whether `user` may read the document `doc_id` in full: a server admin,
/// or the user whose document it is (with a database's db admins, use
/// [`visible_doc`]).
pub fn may_read(doc_id: &str, user: &UserCtx) -> bool {
    if doc_id.starts_with("_design/") {
        return user.is_server_admin();
    }
    user.is_server_admin() || is_owner(doc_id, user)
}

/// What `user` sees of a stored user document (CouchDB's
/// `after_doc_read`): db admins (`sec`) and the owner see everything;
/// design documents are for db admins only (403 `Only administrators can
/// view design docs in the users database.`); anyone else sees the
/// `_`-prefixed members and the `public_fields` (`[chttpd_auth]
/// public_fields`, empty by default), or, when the document has none of
/// those, 404 `missing`.
pub fn visible_doc(
    doc: &Map<String, Value>,
    user: &UserCtx,
    sec: &SecurityObject,
    public_fields: &[&str],
) -> Result<Map<String, Value>, AuthError> {
    let id = doc.get("_id").and_then(Value::as_str).unwrap_or("");
    let admin = sec.is_admin(user);
    if id.starts_with("_design/") {
        return if admin {
            Ok(doc.clone())
        } else {
            Err(AuthError::forbidden(
                "Only administrators can view design docs in the users database.",
            ))
        };
    }
    if admin || is_owner(id, user) {
        return Ok(doc.clone());
    }
    let stripped: Map<String, Value> = doc
        .iter()
        .filter(|(k, _)| k.starts_with('_') || public_fields.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if stripped.keys().all(|k| k.starts_with('_')) {
        return Err(AuthError::missing());
    }
    Ok(stripped)
}

/// Whether `user` may write the document `doc_id` at all (CouchDB's
/// `before_doc_update`): a server admin, the user whose document it is, or
/// an anonymous requester (signing up; the validation decides the rest).
pub fn may_write(doc_id: &str, user: &UserCtx) -> bool {
    user.is_server_admin() || user.is_anonymous() || is_owner(doc_id, user)
}

/// [`may_write`] with db admins from `sec`, and CouchDB's refusal:
/// 404 `not_found`/`missing`.
pub fn check_write(doc_id: &str, user: &UserCtx, sec: &SecurityObject) -> Result<(), AuthError> {
    if sec.is_admin(user) || may_write(doc_id, user) {
        Ok(())
    } else {
        Err(AuthError::missing())
    }
}

/// Replaces a clear-text `password` with a PBKDF2-SHA256 hash of it, as
/// CouchDB 3.4 does before storing a user document (deleted ones
/// included, so no tombstone keeps a clear-text password):
/// every password field ([`PASSWORD_FIELDS`]: `password`, `password_sha`,
/// old hash fields, `preserve_salt`) is removed and `password_scheme`,
/// `pbkdf2_prf`, `salt`, `iterations`, `derived_key` are put first, after
/// `_id` and `_rev`. The salt is new and random, unless `preserve_salt` is
/// `true` and the document has a `salt` (kept as given).
///
/// No `password` member, or `"password": null`: the document is left
/// unchanged. Errors as CouchDB's: a non-string password or salt is 403
/// `Password value of '…' is invalid.` / `Salt value of '…' is invalid.`
/// (the value in Erlang's `~p` notation, best effort: no line breaks);
/// a non-boolean `preserve_salt` is CouchDB's crash, 500 `case_clause`.
/// `iterations` below 1 are taken as 1. A string password is first held
/// to `policy` (`[chttpd_auth] password_regexp`).
pub fn before_write(
    doc: &mut Map<String, Value>,
    iterations: u32,
    policy: &crate::password_rules::PasswordPolicy,
) -> Result<(), AuthError> {
    let preserve_salt = match doc.get("preserve_salt") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(AuthError::Internal {
                error: "case_clause".to_string(),
                reason: erlang_term(other),
            })
        }
    };
    let password = match doc.get("password") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::String(p)) => {
            policy.check(p)?;
            p.clone()
        }
        Some(other) => {
            return Err(AuthError::forbidden(format!(
                "Password value of '{}' is invalid.",
                erlang_term(other)
            )))
        }
    };
    let salt = match doc.get("salt") {
        Some(Value::String(s)) if preserve_salt => s.clone(),
        Some(other) if preserve_salt => {
            return Err(AuthError::forbidden(format!(
                "Salt value of '{}' is invalid.",
                erlang_term(other)
            )))
        }
        _ => crate::password::random_salt(),
    };
    let hash = UserHash::with_salt(&password, Prf::Sha256, salt, iterations.max(1));
    let old = std::mem::take(doc);
    for key in ["_id", "_rev"] {
        if let Some(v) = old.get(key) {
            doc.insert(key.to_string(), v.clone());
        }
    }
    doc.extend(hash.to_doc_fields());
    for (k, v) in old {
        if k != "_id" && k != "_rev" && !PASSWORD_FIELDS.contains(&k.as_str()) {
            doc.insert(k, v);
        }
    }
    Ok(())
}

/// CouchDB's `_users` validation with no db admins but server admins (the
/// `_users` database's default security object). See
/// [`validate_with_security`].
pub fn validate(new_doc: &Value, old_doc: Option<&Value>, user: &UserCtx) -> Result<(), AuthError> {
    validate_with_security(new_doc, old_doc, user, &SecurityObject::default())
}

/// CouchDB 3.4's `_design/_auth` `validate_doc_update`, in its order
/// (every refusal is 403 `forbidden` unless said otherwise):
/// 1. `_deleted: true`: allowed for server admins and the user named in
///    the old revision (JavaScript `==`); otherwise `Only admins may delete
///    other user docs.` (no old revision: 500 `TypeError`).
/// 2. `doc.type must be user`, `doc.name is required`, `doc.roles must
///    exist`, `doc.roles must be an array`, `doc.roles can only contain
///    strings`.
/// 3. `Doc ID must be of the form org.couchdb.user:name`; on update
///    `Usernames can not be changed.`
/// 4. `Users with password_sha must have a salt.See /_utils/script/couch.js
///    for example code.`, ``Password scheme `X` not supported.`` (only
///    `simple` and `pbkdf2`), and for `pbkdf2`: `iterations must be a
///    number.`, `derived_key must be a string.`
/// 5. Not a server or db admin (`sec`): on update, `You may only update
///    your own user document.` and `Only _admin may edit roles` (the roles
///    as a multiset); on creation, `Only _admin may set roles` unless
///    `roles` is empty.
/// 6. For everyone: `No system roles (starting with underscore) in users
///    db.` (`_metrics` excepted), `Username may not start with
///    underscore.`, ``Character `:` is not allowed in usernames.``
///
/// A non-string `name` is treated as the JavaScript treats it (an array
/// is compared through its string form and can pass; a number, boolean or
/// object ends in 500 `TypeError`).
pub fn validate_with_security(
    new_doc: &Value,
    old_doc: Option<&Value>,
    user: &UserCtx,
    sec: &SecurityObject,
) -> Result<(), AuthError> {
    let forbid = |reason: &str| Err(AuthError::forbidden(reason));
    let get = |doc: &Value, key: &str| doc.as_object().and_then(|m| m.get(key)).cloned();
    let user_name = user.name.clone().map(Value::String).unwrap_or(Value::Null);

    if get(new_doc, "_deleted") == Some(Value::Bool(true)) {
        if user.roles.iter().any(|r| r == ADMIN_ROLE) {
            return Ok(());
        }
        let Some(old) = old_doc else {
            return Err(AuthError::js_type_error());
        };
        return if js_loose_eq(&user_name, get(old, "name").as_ref()) {
            Ok(())
        } else {
            forbid("Only admins may delete other user docs.")
        };
    }

    if get(new_doc, "type") != Some(Value::String("user".to_string())) {
        return forbid("doc.type must be user");
    }
    let name = get(new_doc, "name");
    if !truthy(name.as_ref()) {
        return forbid("doc.name is required");
    }
    let name = name.expect("truthy");
    let roles = get(new_doc, "roles");
    if !truthy(roles.as_ref()) {
        return forbid("doc.roles must exist");
    }
    let Some(Value::Array(roles)) = roles else {
        return forbid("doc.roles must be an array");
    };
    let Some(roles) = roles
        .iter()
        .map(Value::as_str)
        .collect::<Option<Vec<&str>>>()
    else {
        return forbid("doc.roles can only contain strings");
    };
    let id_ok = get(new_doc, "_id")
        .is_some_and(|id| id.as_str() == Some(&format!("{USER_PREFIX}{}", js_string(&name))));
    if !id_ok {
        return forbid("Doc ID must be of the form org.couchdb.user:name");
    }
    if let Some(old) = old_doc {
        if !js_strict_eq(get(old, "name").as_ref(), Some(&name)) {
            return forbid("Usernames can not be changed.");
        }
    }
    if truthy(get(new_doc, "password_sha").as_ref()) && !truthy(get(new_doc, "salt").as_ref()) {
        return forbid(
            "Users with password_sha must have a salt.See /_utils/script/couch.js for example code.",
        );
    }
    let scheme = get(new_doc, "password_scheme");
    if truthy(scheme.as_ref()) {
        let scheme = scheme.as_ref().expect("truthy");
        if !matches!(scheme.as_str(), Some("simple" | "pbkdf2")) {
            return Err(AuthError::forbidden(format!(
                "Password scheme `{}` not supported.",
                js_string(scheme)
            )));
        }
    }
    if scheme.as_ref().and_then(Value::as_str) == Some("pbkdf2") {
        if !matches!(get(new_doc, "iterations"), Some(Value::Number(_))) {
            return forbid("iterations must be a number.");
        }
        if !matches!(get(new_doc, "derived_key"), Some(Value::String(_))) {
            return forbid("derived_key must be a string.");
        }
    }

    if !sec.is_admin(user) {
        if let Some(old) = old_doc {
            if !js_strict_eq(Some(&user_name), Some(&name)) {
                return forbid("You may only update your own user document.");
            }
            let old_roles = match get(old, "roles") {
                v if !truthy(v.as_ref()) => Vec::new(),
                Some(Value::Array(items)) => items,
                // `(oldDoc.roles || []).sort()` on a non-array.
                Some(_) => return Err(AuthError::js_type_error()),
                None => Vec::new(),
            };
            let Some(mut old_roles) = old_roles
                .iter()
                .map(Value::as_str)
                .collect::<Option<Vec<&str>>>()
            else {
                return forbid("Only _admin may edit roles");
            };
            let mut new_roles = roles.clone();
            old_roles.sort_unstable();
            new_roles.sort_unstable();
            if old_roles != new_roles {
                return forbid("Only _admin may edit roles");
            }
        } else if !roles.is_empty() {
            return forbid("Only _admin may set roles");
        }
    }

    if roles.iter().any(|r| *r != "_metrics" && r.starts_with('_')) {
        return forbid("No system roles (starting with underscore) in users db.");
    }
    match &name {
        Value::String(n) => {
            if n.starts_with('_') {
                return forbid("Username may not start with underscore.");
            }
            if n.contains(':') {
                return forbid("Character `:` is not allowed in usernames.");
            }
        }
        // `name[0] === '_'` and `name.indexOf(':')` on an array.
        Value::Array(items) => {
            if items.first().and_then(Value::as_str) == Some("_") {
                return forbid("Username may not start with underscore.");
            }
            if items.iter().any(|v| v.as_str() == Some(":")) {
                return forbid("Character `:` is not allowed in usernames.");
            }
        }
        // `name.indexOf` is not a function.
        _ => return Err(AuthError::js_type_error()),
    }
    Ok(())
}

/// JavaScript truthiness of a member (`None`: `undefined`).
fn truthy(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_f64().is_some_and(|f| f != 0.0 && !f.is_nan()),
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(_) | Value::Object(_)) => true,
    }
}

/// JavaScript `===` between members of two separately parsed documents
/// (`None`: `undefined`): arrays and objects are distinct objects, never equal.
fn js_strict_eq(a: Option<&Value>, b: Option<&Value>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(Value::Null), Some(Value::Null)) => true,
        (Some(Value::Bool(x)), Some(Value::Bool(y))) => x == y,
        (Some(Value::String(x)), Some(Value::String(y))) => x == y,
        (Some(Value::Number(x)), Some(Value::Number(y))) => x.as_f64() == y.as_f64(),
        _ => false,
    }
}

/// JavaScript `userCtx.name == oldDoc.name`, where `userCtx.name` is a
/// string or `null` (`None` for the old name: `undefined`).
fn js_loose_eq(user_name: &Value, old_name: Option<&Value>) -> bool {
    match (user_name, old_name) {
        (Value::Null, None | Some(Value::Null)) => true,
        (Value::Null, _) | (_, None | Some(Value::Null)) => false,
        (Value::String(a), Some(Value::String(b))) => a == b,
        (Value::String(a), Some(Value::Number(n))) => js_to_number(a) == n.as_f64(),
        (Value::String(a), Some(Value::Bool(b))) => {
            js_to_number(a) == Some(f64::from(u8::from(*b)))
        }
        // An object or array compares through its string form.
        (Value::String(a), Some(other)) => *a == js_string(other),
        _ => false,
    }
}

/// JavaScript `Number(s)` for the common cases (`None`: `NaN`).
fn js_to_number(s: &str) -> Option<f64> {
    let t = s.trim();
    if t.is_empty() {
        return Some(0.0);
    }
    t.parse::<f64>().ok().filter(|f| f.is_finite())
}

/// JavaScript `String(v)` (as in string concatenation).
fn js_string(v: &Value) -> String {
    match v {
        Value::Null => "null".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::String(s) => s.clone(),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (_, Some(u), _) => u.to_string(),
            (_, _, Some(f)) if f.fract() == 0.0 && f.abs() < 1e21 => format!("{f:.0}"),
            (_, _, Some(f)) => f.to_string(),
            _ => n.to_string(),
        },
        // `[1, null, "a"]` → `1,,a`.
        Value::Array(items) => items
            .iter()
            .map(|i| {
                if i.is_null() {
                    String::new()
                } else {
                    js_string(i)
                }
            })
            .collect::<Vec<_>>()
            .join(","),
        Value::Object(_) => "[object Object]".to_string(),
    }
}

/// A JSON value as Erlang's `~p` prints CouchDB's decoded form of it
/// (`<<"text">>`, `{[{<<"k">>,v}]}`, atoms `true`/`false`/`null`).
fn erlang_term(v: &Value) -> String {
    match v {
        Value::Null => "null".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => {
            if n.is_f64() {
                erlang_float(n.as_f64().unwrap_or(0.0))
            } else {
                n.to_string()
            }
        }
        Value::String(s) => {
            let mut out = String::from("<<\"");
            for c in s.chars() {
                match c {
                    '"' => out.push_str("\\\""),
                    '\\' => out.push_str("\\\\"),
                    '\n' => out.push_str("\\n"),
                    '\t' => out.push_str("\\t"),
                    '\r' => out.push_str("\\r"),
                    c => out.push(c),
                }
            }
            out.push_str("\">>");
            out
        }
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(erlang_term).collect::<Vec<_>>().join(",")
        ),
        Value::Object(m) => format!(
            "{{[{}]}}",
            m.iter()
                .map(|(k, v)| format!(
                    "{{{},{}}}",
                    erlang_term(&Value::String(k.clone())),
                    erlang_term(v)
                ))
                .collect::<Vec<_>>()
                .join(",")
        ),
    }
}

/// Erlang's shortest float notation: `1.5`, `100.0`, `1.0e21`, `1.0e-7`.
fn erlang_float(f: f64) -> String {
    let plain = format!("{f:?}"); // Rust: shortest round-trip, "100.0", "1e21"
    let Some((mantissa, exp)) = plain.split_once('e') else {
        return plain;
    };
    let mantissa = if mantissa.contains('.') {
        mantissa.to_string()
    } else {
        format!("{mantissa}.0")
    };
    format!("{mantissa}e{exp}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn forbidden(r: Result<(), AuthError>) -> String {
        match r {
            Err(AuthError::Forbidden(reason)) => reason,
            other => panic!("expected forbidden, got {other:?}"),
        }
    }

    fn user_doc(name: &str, roles: &[&str]) -> Value {
        json!({"_id": user_doc_id(name), "name": name, "roles": roles, "type": "user"})
    }

    fn admin() -> UserCtx {
        UserCtx::server_admin("admin")
    }

    #[test]
    fn ids() {
        assert_eq!(user_doc_id("joe"), "org.couchdb.user:joe");
        assert_eq!(doc_name("org.couchdb.user:joe"), Some("joe"));
        assert_eq!(doc_name("org.couchdb.user:"), Some(""));
        assert_eq!(doc_name("joe"), None);
    }

    #[test]
    fn valid_docs() {
        let anon = UserCtx::anonymous();
        // Sign-up: anyone, without roles.
        assert_eq!(validate(&user_doc("eve", &[]), None, &anon), Ok(()));
        assert_eq!(
            validate(&user_doc("eve", &[]), None, &UserCtx::user("joe", &[])),
            Ok(())
        );
        // Admins set roles; `_metrics` and empty roles are allowed.
        assert_eq!(validate(&user_doc("bob", &["r1"]), None, &admin()), Ok(()));
        assert_eq!(
            validate(&user_doc("a1", &["_metrics", ""]), None, &admin()),
            Ok(())
        );
        // The owner changes their password, roles unchanged (any order).
        let old = user_doc("joe", &["a", "b", "a"]);
        let mut new = user_doc("joe", &["b", "a", "a"]);
        new["password_scheme"] = json!("pbkdf2");
        new["iterations"] = json!(10);
        new["derived_key"] = json!("00");
        new["salt"] = json!("s");
        assert_eq!(
            validate(&new, Some(&old), &UserCtx::user("joe", &["a", "b"])),
            Ok(())
        );
        // Simple scheme with salt.
        let mut d = user_doc("s", &[]);
        d["password_scheme"] = json!("simple");
        d["password_sha"] = json!("abc");
        d["salt"] = json!("x");
        assert_eq!(validate(&d, None, &anon), Ok(()));
        // Non-ASCII names are fine.
        assert_eq!(validate(&user_doc("jöe", &[]), None, &anon), Ok(()));
    }

    /// The reasons CouchDB 3.4.3 gave for these documents, written by a
    /// server admin (recorded from the reference server).
    #[test]
    fn invalid_docs_as_admin() {
        let a = admin();
        let cases: Vec<(Value, &str)> = vec![
            (json!({"_id": "org.couchdb.user:a1", "name": "a1", "roles": []}), "doc.type must be user"),
            (json!({"_id": "org.couchdb.user:a1", "name": "a1", "roles": [], "type": "admin"}), "doc.type must be user"),
            (json!({"_id": "org.couchdb.user:a1", "roles": [], "type": "user"}), "doc.name is required"),
            (json!({"_id": "org.couchdb.user:", "name": "", "roles": [], "type": "user"}), "doc.name is required"),
            (json!({"_id": "org.couchdb.user:a1", "name": "a1", "type": "user"}), "doc.roles must exist"),
            (json!({"_id": "org.couchdb.user:a1", "name": "a1", "roles": null, "type": "user"}), "doc.roles must exist"),
            (json!({"_id": "org.couchdb.user:a1", "name": "a1", "roles": "", "type": "user"}), "doc.roles must exist"),
            (json!({"_id": "org.couchdb.user:a1", "name": "a1", "roles": "x", "type": "user"}), "doc.roles must be an array"),
            (json!({"_id": "org.couchdb.user:a1", "name": "a1", "roles": {}, "type": "user"}), "doc.roles must be an array"),
            (json!({"_id": "org.couchdb.user:a1", "name": "a1", "roles": [1], "type": "user"}), "doc.roles can only contain strings"),
            (json!({"_id": "org.couchdb.user:a2", "name": "a1", "roles": [], "type": "user"}), "Doc ID must be of the form org.couchdb.user:name"),
            (json!({"_id": "a1", "name": "a1", "roles": [], "type": "user"}), "Doc ID must be of the form org.couchdb.user:name"),
            (json!({"name": "a1", "roles": [], "type": "user"}), "Doc ID must be of the form org.couchdb.user:name"),
            (json!({"_id": "org.couchdb.user:a1", "name": "a1", "roles": [], "type": "user", "password_sha": "abc"}),
                "Users with password_sha must have a salt.See /_utils/script/couch.js for example code."),
            (json!({"_id": "org.couchdb.user:a1", "name": "a1", "roles": [], "type": "user", "password_scheme": "bcrypt"}),
                "Password scheme `bcrypt` not supported."),
            (json!({"_id": "org.couchdb.user:a1", "name": "a1", "roles": [], "type": "user", "password_scheme": 5}),
                "Password scheme `5` not supported."),
            (json!({"_id": "org.couchdb.user:a1", "name": "a1", "roles": [], "type": "user", "password_scheme": ["a", 1]}),
                "Password scheme `a,1` not supported."),
            (json!({"_id": "org.couchdb.user:a1", "name": "a1", "roles": [], "type": "user", "password_scheme": "pbkdf2"}),
                "iterations must be a number."),
            (json!({"_id": "org.couchdb.user:a1", "name": "a1", "roles": [], "type": "user", "password_scheme": "pbkdf2", "iterations": "10"}),
                "iterations must be a number."),
            (json!({"_id": "org.couchdb.user:a1", "name": "a1", "roles": [], "type": "user", "password_scheme": "pbkdf2", "iterations": 10}),
                "derived_key must be a string."),
            (json!({"_id": "org.couchdb.user:a1", "name": "a1", "roles": ["_admin"], "type": "user"}),
                "No system roles (starting with underscore) in users db."),
            (json!({"_id": "org.couchdb.user:_a1", "name": "_a1", "roles": [], "type": "user"}),
                "Username may not start with underscore."),
            (json!({"_id": "org.couchdb.user:a:1", "name": "a:1", "roles": [], "type": "user"}),
                "Character `:` is not allowed in usernames."),
        ];
        for (doc, reason) in cases {
            assert_eq!(forbidden(validate(&doc, None, &a)), reason, "{doc}");
        }
    }

    #[test]
    fn javascript_name_quirks() {
        let a = admin();
        // CouchDB accepts an array name that reads like the id.
        let d = json!({"_id": "org.couchdb.user:p9", "name": ["p9"], "roles": [], "type": "user"});
        assert_eq!(validate(&d, None, &a), Ok(()));
        // ... but never as an update (two arrays are never `===`).
        assert_eq!(
            forbidden(validate(&d, Some(&d), &a)),
            "Usernames can not be changed."
        );
        // A number or boolean name: CouchDB's validation crashes (500).
        for (id, name) in [
            ("org.couchdb.user:5", json!(5)),
            ("org.couchdb.user:true", json!(true)),
        ] {
            let d = json!({"_id": id, "name": name, "roles": [], "type": "user"});
            assert_eq!(validate(&d, None, &a), Err(AuthError::js_type_error()));
        }
        // Falsy names.
        for name in [json!(0), json!(false), json!(null), json!("")] {
            let d = json!({"_id": "org.couchdb.user:", "name": name, "roles": [], "type": "user"});
            assert_eq!(forbidden(validate(&d, None, &a)), "doc.name is required");
        }
    }

    /// Escalation attempts, with the reasons CouchDB 3.4.3 gave (recorded
    /// with `_users` security `{}` so that the validation is reached).
    #[test]
    fn escalations() {
        let anon = UserCtx::anonymous();
        let joe = UserCtx::user("joe", &[]);

        // Anonymous sign-up with roles, even `_admin`.
        for roles in [&["x"][..], &["_admin"][..]] {
            assert_eq!(
                forbidden(validate(&user_doc("eve", roles), None, &anon)),
                "Only _admin may set roles"
            );
        }
        // Joe gives himself roles.
        let old = user_doc("joe", &[]);
        for roles in [&["x"][..], &["_admin"][..]] {
            assert_eq!(
                forbidden(validate(&user_doc("joe", roles), Some(&old), &joe)),
                "Only _admin may edit roles"
            );
        }
        // Joe drops or swaps a role.
        let old = user_doc("joe", &["a", "b"]);
        for roles in [&["a"][..], &["a", "c"][..], &["a", "b", "b"][..]] {
            assert_eq!(
                forbidden(validate(&user_doc("joe", roles), Some(&old), &joe)),
                "Only _admin may edit roles"
            );
        }
        // Old roles that are not strings can never be kept by a non-admin.
        let old =
            json!({"_id": "org.couchdb.user:joe", "name": "joe", "roles": [1], "type": "user"});
        assert_eq!(
            forbidden(validate(&user_doc("joe", &["1"]), Some(&old), &joe)),
            "Only _admin may edit roles"
        );
        // Old document without roles: none may be added.
        let old = json!({"_id": "org.couchdb.user:joe", "name": "joe", "type": "user"});
        assert_eq!(validate(&user_doc("joe", &[]), Some(&old), &joe), Ok(()));
        assert_eq!(
            forbidden(validate(&user_doc("joe", &["x"]), Some(&old), &joe)),
            "Only _admin may edit roles"
        );
        // Joe edits Bob's document. (Over HTTP CouchDB answers 404 first,
        // from `check_write`; the validation alone says this.)
        let old = user_doc("bob", &["r1"]);
        assert_eq!(
            forbidden(validate(&user_doc("bob", &["r1"]), Some(&old), &joe)),
            "You may only update your own user document."
        );
        assert_eq!(
            check_write("org.couchdb.user:bob", &joe, &SecurityObject::default()),
            Err(AuthError::missing())
        );
        // Anonymous edits an existing document (CouchDB 3.4.3 crashes with
        // a 500 `function_clause` before the validation; refused here).
        assert_eq!(
            forbidden(validate(&user_doc("bob", &["r1"]), Some(&old), &anon)),
            "You may only update your own user document."
        );
        // Renaming.
        let old = user_doc("joe", &[]);
        let mut renamed = user_doc("joe", &[]);
        renamed["name"] = json!("root");
        assert_eq!(
            forbidden(validate(&renamed, Some(&old), &joe)),
            "Doc ID must be of the form org.couchdb.user:name"
        );
        let renamed =
            json!({"_id": "org.couchdb.user:joe2", "name": "joe2", "roles": [], "type": "user"});
        assert_eq!(
            forbidden(validate(&renamed, Some(&old), &joe)),
            "Usernames can not be changed."
        );
        // A user calling themselves `_admin`-ish.
        assert_eq!(
            forbidden(validate(&user_doc("_admin", &[]), None, &anon)),
            "Username may not start with underscore."
        );
        // Even a server admin may not store system roles.
        assert_eq!(
            forbidden(validate(&user_doc("bob", &["_reader"]), None, &admin())),
            "No system roles (starting with underscore) in users db."
        );
        // A non-admin's own role `_x` is caught by the roles rule first.
        assert_eq!(
            forbidden(validate(&user_doc("joe", &["_x"]), None, &anon)),
            "Only _admin may set roles"
        );
    }

    #[test]
    fn db_admins_may_set_roles() {
        let sec = SecurityObject::parse(&json!({"admins": {"names": ["ops"], "roles": ["boss"]}}))
            .unwrap();
        for u in [UserCtx::user("ops", &[]), UserCtx::user("x", &["boss"])] {
            assert_eq!(
                validate_with_security(&user_doc("bob", &["r"]), None, &u, &sec),
                Ok(())
            );
            let old = user_doc("bob", &[]);
            assert_eq!(
                validate_with_security(&user_doc("bob", &["r"]), Some(&old), &u, &sec),
                Ok(())
            );
            assert_eq!(check_write("org.couchdb.user:bob", &u, &sec), Ok(()));
            assert!(
                !may_write("org.couchdb.user:bob", &u),
                "without the security object"
            );
        }
        // Without the security object they are plain users.
        assert_eq!(
            forbidden(validate(
                &user_doc("bob", &["r"]),
                None,
                &UserCtx::user("ops", &[])
            )),
            "Only _admin may set roles"
        );
    }

    #[test]
    fn deletion() {
        let tomb = json!({"_id": "org.couchdb.user:bob", "_deleted": true});
        let old = user_doc("bob", &[]);
        assert_eq!(validate(&tomb, Some(&old), &admin()), Ok(()));
        assert_eq!(validate(&tomb, None, &admin()), Ok(()));
        assert_eq!(
            validate(&tomb, Some(&old), &UserCtx::user("bob", &[])),
            Ok(())
        );
        assert_eq!(
            forbidden(validate(&tomb, Some(&old), &UserCtx::user("joe", &[]))),
            "Only admins may delete other user docs."
        );
        assert_eq!(
            forbidden(validate(&tomb, Some(&old), &UserCtx::anonymous())),
            "Only admins may delete other user docs."
        );
        // Db admins are not enough to delete (the JavaScript checks `_admin`).
        let sec = SecurityObject::parse(&json!({"admins": {"names": ["ops"]}})).unwrap();
        assert_eq!(
            forbidden(validate_with_security(
                &tomb,
                Some(&old),
                &UserCtx::user("ops", &[]),
                &sec
            )),
            "Only admins may delete other user docs."
        );
        // No old revision: CouchDB's validation crashes (500 TypeError).
        assert_eq!(
            validate(&tomb, None, &UserCtx::anonymous()),
            Err(AuthError::js_type_error())
        );
        // `null == undefined`: anonymous may delete a document without a name.
        let nameless = json!({"_id": "org.couchdb.user:x", "type": "user"});
        assert_eq!(
            validate(&tomb, Some(&nameless), &UserCtx::anonymous()),
            Ok(())
        );
        // Only `_deleted: true` counts as a deletion.
        let not_really = json!({"_id": "org.couchdb.user:bob", "_deleted": "true"});
        assert_eq!(
            forbidden(validate(
                &not_really,
                Some(&old),
                &UserCtx::user("joe", &[])
            )),
            "doc.type must be user"
        );
        // A deleted doc is validated without any other rule.
        let weird = json!({"_deleted": true, "roles": ["_admin"]});
        assert_eq!(
            validate(&weird, Some(&old), &UserCtx::user("bob", &[])),
            Ok(())
        );
    }

    #[test]
    fn loose_equality() {
        assert!(js_loose_eq(&Value::Null, None));
        assert!(js_loose_eq(&Value::Null, Some(&Value::Null)));
        assert!(!js_loose_eq(&Value::Null, Some(&json!("x"))));
        assert!(js_loose_eq(&json!("5"), Some(&json!(5))));
        assert!(js_loose_eq(&json!(""), Some(&json!(0))));
        assert!(js_loose_eq(&json!("1"), Some(&json!(true))));
        assert!(js_loose_eq(&json!("a,b"), Some(&json!(["a", "b"]))));
        assert!(!js_loose_eq(&json!("a"), None));
        assert!(!js_loose_eq(&json!("a"), Some(&json!("b"))));
    }

    #[test]
    fn write_and_read_access() {
        let anon = UserCtx::anonymous();
        let joe = UserCtx::user("joe", &[]);
        let open = SecurityObject::default();
        assert!(may_write("org.couchdb.user:joe", &joe));
        assert!(!may_write("org.couchdb.user:bob", &joe));
        assert!(
            !may_write("org.couchdb.user:frank", &joe),
            "no signing others up"
        );
        assert!(may_write("org.couchdb.user:bob", &anon), "sign-up");
        assert!(may_write("org.couchdb.user:bob", &admin()));
        assert!(!may_write("_design/_auth", &joe));
        assert_eq!(
            check_write("org.couchdb.user:frank", &joe, &open),
            Err(AuthError::missing())
        );

        assert!(may_read("org.couchdb.user:joe", &joe));
        assert!(!may_read("org.couchdb.user:bob", &joe));
        assert!(!may_read("org.couchdb.user:bob", &anon));
        assert!(may_read("org.couchdb.user:bob", &admin()));
        assert!(!may_read("_design/_auth", &joe));
        assert!(may_read("_design/_auth", &admin()));
        // A name equal to a prefix-less id is not ownership.
        assert!(!may_read("joe", &joe));
    }

    #[test]
    fn visible_docs() {
        let open = SecurityObject::default();
        let doc = json!({"_id": "org.couchdb.user:bob", "_rev": "1-x", "name": "bob",
            "roles": [], "type": "user", "derived_key": "00", "salt": "s"});
        let doc = doc.as_object().unwrap();
        let bob = UserCtx::user("bob", &[]);
        let joe = UserCtx::user("joe", &[]);
        assert_eq!(visible_doc(doc, &bob, &open, &[]).as_ref(), Ok(doc));
        assert_eq!(visible_doc(doc, &admin(), &open, &[]).as_ref(), Ok(doc));
        assert_eq!(
            visible_doc(doc, &joe, &open, &[]),
            Err(AuthError::missing())
        );
        assert_eq!(
            visible_doc(doc, &UserCtx::anonymous(), &open, &[]),
            Err(AuthError::missing())
        );
        let public = visible_doc(doc, &joe, &open, &["name", "nickname"]).unwrap();
        assert_eq!(
            Value::Object(public),
            json!({"_id": "org.couchdb.user:bob", "_rev": "1-x", "name": "bob"})
        );
        assert_eq!(
            visible_doc(doc, &joe, &open, &["nickname"]),
            Err(AuthError::missing())
        );
        let sec = SecurityObject::parse(&json!({"admins": {"names": ["joe"]}})).unwrap();
        assert_eq!(visible_doc(doc, &joe, &sec, &[]).as_ref(), Ok(doc));

        let ddoc = json!({"_id": "_design/_auth", "validate_doc_update": "..."});
        let ddoc = ddoc.as_object().unwrap();
        assert_eq!(
            visible_doc(ddoc, &UserCtx::anonymous(), &open, &["validate_doc_update"]),
            Err(AuthError::forbidden(
                "Only administrators can view design docs in the users database."
            ))
        );
        assert!(visible_doc(ddoc, &admin(), &open, &[]).is_ok());
    }

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn before_write_hashes_like_couchdb() {
        let mut d = obj(
            json!({"_id": "org.couchdb.user:p8", "_rev": "1-a", "a": 1, "name": "p8",
            "password_sha": "x", "roles": [], "type": "user", "password": "pw", "derived_key": "zz"}),
        );
        before_write(&mut d, 10, &Default::default()).unwrap();
        let keys: Vec<&str> = d.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "_id",
                "_rev",
                "password_scheme",
                "pbkdf2_prf",
                "salt",
                "iterations",
                "derived_key",
                "a",
                "name",
                "roles",
                "type"
            ]
        );
        assert_eq!(d["password_scheme"], "pbkdf2");
        assert_eq!(d["pbkdf2_prf"], "sha256");
        assert_eq!(d["iterations"], 10);
        let h = UserHash::from_user_doc(&Value::Object(d.clone())).unwrap();
        assert!(h.verify("pw"));
        assert_eq!(h.salt.len(), 32);
        // The result passes the validation.
        assert_eq!(validate(&Value::Object(d), None, &admin()), Ok(()));
    }

    #[test]
    fn before_write_no_password() {
        for doc in [
            json!({"name": "a3", "roles": []}),
            json!({"name": "a3", "password": null, "password_sha": "x"}),
        ] {
            let mut d = obj(doc.clone());
            before_write(&mut d, 10, &Default::default()).unwrap();
            assert_eq!(Value::Object(d), doc);
        }
    }

    #[test]
    fn before_write_deleted_and_empty_password() {
        let mut d = obj(
            json!({"_id": "org.couchdb.user:a4", "_rev": "1-a", "_deleted": true,
            "password": "zz", "foo": 1}),
        );
        before_write(&mut d, 10, &Default::default()).unwrap();
        assert!(!d.contains_key("password"));
        assert!(UserHash::from_user_doc(&Value::Object(d.clone()))
            .unwrap()
            .verify("zz"));
        assert_eq!(d["_deleted"], true);
        let mut d = obj(json!({"password": ""}));
        before_write(&mut d, 10, &Default::default()).unwrap();
        assert!(UserHash::from_user_doc(&Value::Object(d))
            .unwrap()
            .verify(""));
    }

    #[test]
    fn before_write_preserve_salt() {
        let mut d = obj(json!({"preserve_salt": true, "salt": "abc", "password": "pw"}));
        before_write(&mut d, 1000, &Default::default()).unwrap();
        assert_eq!(d["salt"], "abc");
        assert!(!d.contains_key("preserve_salt"));
        // CouchDB 3.4.3 stored this key for p2 (salt "abc", 1000 iterations).
        assert_eq!(
            d["derived_key"],
            "e00f085c08a8994c073165c18724c2942f6b0c977f20daa6edc594903ce44179"
        );
        let mut d = obj(json!({"preserve_salt": true, "password": "pw"}));
        before_write(&mut d, 10, &Default::default()).unwrap();
        assert_eq!(d["salt"].as_str().unwrap().len(), 32);
        let mut d = obj(json!({"preserve_salt": false, "salt": "abc", "password": "pw"}));
        before_write(&mut d, 10, &Default::default()).unwrap();
        assert_ne!(d["salt"], "abc");
    }

    /// Errors as CouchDB 3.4.3 gave them (recorded).
    #[test]
    fn before_write_errors() {
        let cases = [
            (json!({"password": 5}), "Password value of '5' is invalid."),
            (
                json!({"password": 1.5}),
                "Password value of '1.5' is invalid.",
            ),
            (
                json!({"password": 100.0}),
                "Password value of '100.0' is invalid.",
            ),
            (
                json!({"password": 1e21}),
                "Password value of '1.0e21' is invalid.",
            ),
            (
                json!({"password": true}),
                "Password value of 'true' is invalid.",
            ),
            (
                json!({"password": {"x": 1}}),
                "Password value of '{[{<<\"x\">>,1}]}' is invalid.",
            ),
            (
                json!({"password": [1, "a", true, null, {"k": "é"}]}),
                "Password value of '[1,<<\"a\">>,true,null,{[{<<\"k\">>,<<\"é\">>}]}]' is invalid.",
            ),
            (
                json!({"preserve_salt": true, "salt": 5, "password": "pw"}),
                "Salt value of '5' is invalid.",
            ),
        ];
        for (doc, reason) in cases {
            let mut d = obj(doc.clone());
            assert_eq!(
                before_write(&mut d, 10, &Default::default()),
                Err(AuthError::forbidden(reason)),
                "{doc}"
            );
            assert_eq!(Value::Object(d), doc, "unchanged on error");
        }
        let mut d = obj(json!({"preserve_salt": 1}));
        let e = before_write(&mut d, 10, &Default::default()).unwrap_err();
        assert_eq!(
            (e.status(), e.error(), e.reason()),
            (500, "case_clause", "1")
        );
    }

    #[test]
    fn erlang_floats() {
        assert_eq!(erlang_float(1.5), "1.5");
        assert_eq!(erlang_float(100.0), "100.0");
        assert_eq!(erlang_float(1e21), "1.0e21");
        assert_eq!(erlang_float(2.5e-7), "2.5e-7");
    }

    #[test]
    fn js_strings() {
        assert_eq!(js_string(&json!(5)), "5");
        assert_eq!(js_string(&json!(5.0)), "5");
        assert_eq!(js_string(&json!(1.5)), "1.5");
        assert_eq!(js_string(&json!(true)), "true");
        assert_eq!(js_string(&json!([1, null, "a", [2, 3]])), "1,,a,2,3");
        assert_eq!(js_string(&json!({"a": 1})), "[object Object]");
    }
}
