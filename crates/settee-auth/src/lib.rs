//! CouchDB 3.4's access model as pure logic: who a requester is
//! ([`UserCtx`]), how passwords are hashed and checked ([`password`]) and which
//! passwords are allowed ([`password_rules`]), the
//! rules for documents in the `_users` database ([`users`]), the
//! `AuthSession` cookie ([`cookie`]), per-database security objects
//! ([`security`]), JSON Web Tokens ([`jwt`]) and proxy authentication
//! ([`proxy`]).
//!
//! Invariants:
//! - No HTTP, no storage, no threads: every function is a function of its
//!   arguments (clocks and randomness come in as arguments, except the
//!   random salts of new password hashes).
//! - Every refusal is an [`AuthError`] that carries CouchDB's error name,
//!   reason text and status code, so the HTTP layer maps all of them in one
//!   place ([`AuthError::error`], [`AuthError::reason`],
//!   [`AuthError::status`]). Reason texts are CouchDB 3.4.3's, byte for
//!   byte, as recorded from the reference server.
//! - Secrets (derived keys, MACs) are compared in constant time.

pub mod cookie;
pub mod jwt;
pub mod password;
pub mod password_rules;
pub mod proxy;
pub mod security;
pub mod users;

use serde::{Deserialize, Serialize};

pub use security::{Section, SecurityObject};

/// The role that makes a user a server admin.
pub const ADMIN_ROLE: &str = "_admin";

/// Who a request is: CouchDB's `userCtx` (`name` is `null` for anonymous
/// requests).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserCtx {
    pub name: Option<String>,
    pub roles: Vec<String>,
}

impl UserCtx {
    /// The anonymous requester (no name, no roles).
    pub fn anonymous() -> UserCtx {
        UserCtx::default()
    }

    /// A named user with the given roles.
    pub fn user(name: &str, roles: &[&str]) -> UserCtx {
        UserCtx {
            name: Some(name.to_string()),
            roles: roles.iter().map(|r| r.to_string()).collect(),
        }
    }

    /// A server admin (`_admin` role) named `name`.
    pub fn server_admin(name: &str) -> UserCtx {
        UserCtx::user(name, &[ADMIN_ROLE])
    }

    /// Whether the requester has the `_admin` role.
    pub fn is_server_admin(&self) -> bool {
        self.has_role(ADMIN_ROLE)
    }

    pub fn has_role(&self, role: &str) -> bool {
        self.roles.iter().any(|r| r == role)
    }

    pub fn is_anonymous(&self) -> bool {
        self.name.is_none()
    }
}

/// A refusal as CouchDB words it: `{"error": error(), "reason": reason()}`
/// with HTTP status [`status`](AuthError::status).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// 403 `forbidden`.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// 401 `unauthorized`.
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// 400 `bad_request`.
    #[error("bad_request: {0}")]
    BadRequest(String),
    /// 404 `not_found` (CouchDB hides other users' documents this way; the
    /// reason is then `missing`).
    #[error("not_found: {0}")]
    NotFound(String),
    /// 500 with CouchDB's own error name, for inputs on which CouchDB
    /// itself crashes (its `_users` validation function raising a
    /// JavaScript `TypeError`, a clustered `_security` write failing on
    /// every shard). Kept so that Settee answers what CouchDB answers; the
    /// HTTP layer may choose to remap these.
    #[error("{error}: {reason}")]
    Internal { error: String, reason: String },
}

impl AuthError {
    pub fn forbidden(reason: impl Into<String>) -> AuthError {
        AuthError::Forbidden(reason.into())
    }

    pub fn unauthorized(reason: impl Into<String>) -> AuthError {
        AuthError::Unauthorized(reason.into())
    }

    /// 404 `not_found`/`missing`.
    pub fn missing() -> AuthError {
        AuthError::NotFound("missing".to_string())
    }

    /// CouchDB's `{"error":"TypeError","reason":"{[]}"}` (status 500): what
    /// the `_users` validation function answers when it crashes on a value
    /// of an unexpected type.
    pub fn js_type_error() -> AuthError {
        AuthError::Internal {
            error: "TypeError".to_string(),
            reason: "{[]}".to_string(),
        }
    }

    /// The `error` member of CouchDB's answer.
    pub fn error(&self) -> &str {
        match self {
            AuthError::Forbidden(_) => "forbidden",
            AuthError::Unauthorized(_) => "unauthorized",
            AuthError::BadRequest(_) => "bad_request",
            AuthError::NotFound(_) => "not_found",
            AuthError::Internal { error, .. } => error,
        }
    }

    /// The `reason` member of CouchDB's answer.
    pub fn reason(&self) -> &str {
        match self {
            AuthError::Forbidden(r)
            | AuthError::Unauthorized(r)
            | AuthError::BadRequest(r)
            | AuthError::NotFound(r) => r,
            AuthError::Internal { reason, .. } => reason,
        }
    }

    /// The HTTP status code CouchDB answers with.
    pub fn status(&self) -> u16 {
        match self {
            AuthError::Forbidden(_) => 403,
            AuthError::Unauthorized(_) => 401,
            AuthError::BadRequest(_) => 400,
            AuthError::NotFound(_) => 404,
            AuthError::Internal { .. } => 500,
        }
    }
}

/// Compares two byte strings in constant time (for equal lengths; a length
/// difference is answered at once, as CouchDB's `couch_passwords:verify`
/// does).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_ctx_roles() {
        assert!(!UserCtx::anonymous().is_server_admin());
        assert!(UserCtx::anonymous().is_anonymous());
        assert!(UserCtx::server_admin("admin").is_server_admin());
        let joe = UserCtx::user("joe", &["reader"]);
        assert!(!joe.is_server_admin());
        assert!(joe.has_role("reader"));
        assert!(!joe.is_anonymous());
        let json = serde_json::to_value(&joe).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"name": "joe", "roles": ["reader"]})
        );
        let anon: UserCtx =
            serde_json::from_value(serde_json::json!({"name": null, "roles": []})).unwrap();
        assert_eq!(anon, UserCtx::anonymous());
    }

    #[test]
    fn error_table() {
        let cases = [
            (AuthError::forbidden("x"), "forbidden", 403),
            (AuthError::unauthorized("x"), "unauthorized", 401),
            (AuthError::BadRequest("x".into()), "bad_request", 400),
            (AuthError::NotFound("x".into()), "not_found", 404),
        ];
        for (e, name, status) in cases {
            assert_eq!(e.error(), name);
            assert_eq!(e.reason(), "x");
            assert_eq!(e.status(), status);
        }
        let e = AuthError::js_type_error();
        assert_eq!(
            (e.error(), e.reason(), e.status()),
            ("TypeError", "{[]}", 500)
        );
        assert_eq!(AuthError::missing().reason(), "missing");
        assert_eq!(AuthError::forbidden("no").to_string(), "forbidden: no");
    }

    #[test]
    fn constant_time_comparison() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(constant_time_eq(b"", b""));
    }
}
