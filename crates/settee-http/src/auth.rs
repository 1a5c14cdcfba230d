//! Authentication and authorization — the one place that decides who a
//! request is and what it may do.
//!
//! Today: server admins (the `[admins]` config section, PBKDF2-SHA256
//! hashes only — never a clear-text password) and HTTP Basic auth. The
//! later security issue adds users, sessions and per-database `_security`
//! by extending [`UserCtx`] and the `require_*` checks here.
//!
//! Invariants:
//! - No admin party: [`ensure_admin`] makes sure an admin exists before the
//!   server accepts requests.
//! - A password is verified with PBKDF2 once per process; afterwards a
//!   SHA-256 of the credentials, tied to the stored hash, is compared in
//!   constant time, so a changed password invalidates the cache.
//! - One PBKDF2 verification runs at a time (each is ~0.25 s of CPU): the
//!   requests that arrive with the same credentials meanwhile, e.g. a
//!   client's first burst of parallel connections, wait for it and find
//!   the result cached, and a stream of wrong passwords keeps one CPU busy
//!   at most.
//! - Wrong credentials are always 401, even on endpoints that allow
//!   anonymous access (CouchDB's behaviour).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::http::{header, HeaderMap, StatusCode};
use base64::Engine as _;
use parking_lot::Mutex;
use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::config::Config;
use crate::error::{ApiError, ApiResult};
use crate::request::Req;

/// PBKDF2 iterations for new hashes (CouchDB 3.4's default for SHA-256).
pub const PBKDF2_ITERATIONS: u32 = 600_000;
const HASH_PREFIX: &str = "-pbkdf2:sha256-";
const ADMINS: &str = "admins";

/// Who a request is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserCtx {
    pub name: Option<String>,
    pub roles: Vec<String>,
}

impl UserCtx {
    pub fn is_admin(&self) -> bool {
        self.roles.iter().any(|r| r == "_admin")
    }
}

/// Hashes a password as CouchDB 3.4 does:
/// `-pbkdf2:sha256-<derived hex>,<salt>,<iterations>`, where the salt is 32
/// random hex digits used *as text* (CouchDB feeds the salt string itself to
/// PBKDF2, so hashes move between CouchDB and Settee unchanged).
pub fn hash_password(password: &str) -> String {
    hash_with_iterations(password, PBKDF2_ITERATIONS)
}

fn hash_with_iterations(password: &str, iterations: u32) -> String {
    let mut salt = [0u8; 16];
    rand::rng().fill_bytes(&mut salt);
    let salt = hex::encode(salt);
    let mut out = [0u8; 32];
    pbkdf2::pbkdf2_hmac::<Sha256>(password.as_bytes(), salt.as_bytes(), iterations, &mut out);
    format!("{HASH_PREFIX}{},{salt},{iterations}", hex::encode(out))
}

/// Whether a configured admin value is already a hash (stored as given).
pub fn is_password_hash(value: &str) -> bool {
    value.starts_with("-pbkdf2-") || value.starts_with("-pbkdf2:")
}

/// Checks a password against a stored hash: `-pbkdf2-…` (HMAC-SHA1, CouchDB
/// before 3.4), `-pbkdf2:sha256-…` or `-pbkdf2:sha512-…`.
pub fn verify_password(stored: &str, password: &str) -> bool {
    let (prf, rest) = if let Some(r) = stored.strip_prefix("-pbkdf2-") {
        ("sha", r)
    } else if let Some(r) = stored.strip_prefix(HASH_PREFIX) {
        ("sha256", r)
    } else if let Some(r) = stored.strip_prefix("-pbkdf2:sha512-") {
        ("sha512", r)
    } else {
        return false;
    };
    let mut parts = rest.split(',');
    let (Some(derived), Some(salt), Some(iters), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    let (Ok(derived), Ok(iters)) = (hex::decode(derived), iters.parse::<u32>()) else {
        return false;
    };
    if iters == 0 || iters > 10_000_000 {
        return false;
    }
    let (pw, salt) = (password.as_bytes(), salt.as_bytes());
    let out: Vec<u8> = match prf {
        "sha" => {
            let mut o = [0u8; 20];
            pbkdf2::pbkdf2_hmac::<sha1::Sha1>(pw, salt, iters, &mut o);
            o.to_vec()
        }
        "sha256" => {
            let mut o = [0u8; 32];
            pbkdf2::pbkdf2_hmac::<Sha256>(pw, salt, iters, &mut o);
            o.to_vec()
        }
        _ => {
            let mut o = [0u8; 64];
            pbkdf2::pbkdf2_hmac::<sha2::Sha512>(pw, salt, iters, &mut o);
            o.to_vec()
        }
    };
    constant_time_eq(&out, &derived)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn cache_key(stored: &str, user: &str, password: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(stored.as_bytes());
    h.update([0]);
    h.update(user.as_bytes());
    h.update([0]);
    h.update(password.as_bytes());
    h.finalize().into()
}

/// The authenticator.
#[derive(Debug)]
pub struct Auth {
    config: Arc<Config>,
    /// user → digest of (stored hash, user, password) that verified.
    verified: Mutex<HashMap<String, [u8; 32]>>,
    /// Held while a password is verified with PBKDF2.
    verifying: tokio::sync::Mutex<()>,
    /// PBKDF2 verifications run so far.
    verifications: AtomicU64,
}

impl Auth {
    pub fn new(config: Arc<Config>) -> Auth {
        Auth {
            config,
            verified: Mutex::new(HashMap::new()),
            verifying: tokio::sync::Mutex::new(()),
            verifications: AtomicU64::new(0),
        }
    }

    /// Whether `key` (see [`cache_key`]) is the cached digest of `user`'s
    /// verified credentials.
    fn is_cached(&self, user: &str, key: &[u8; 32]) -> bool {
        self.verified
            .lock()
            .get(user)
            .is_some_and(|k| constant_time_eq(k, key))
    }

    /// Identifies the requester from the `Authorization` header.
    pub async fn authenticate(&self, headers: &HeaderMap) -> ApiResult<UserCtx> {
        let Some(value) = headers.get(header::AUTHORIZATION) else {
            return Ok(UserCtx::default());
        };
        let Some(encoded) = value.to_str().ok().and_then(|v| {
            v.strip_prefix("Basic ")
                .or_else(|| v.strip_prefix("basic "))
        }) else {
            return Ok(UserCtx::default());
        };
        let bad = || ApiError::unauthorized("Name or password is incorrect.");
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .map_err(|_| ApiError::bad_request("Authorization header has invalid base64 value"))?;
        let text = String::from_utf8(decoded).map_err(|_| bad())?;
        // Credentials without a colon are no credentials (anonymous), as in CouchDB.
        let Some((user, password)) = text.split_once(':') else {
            return Ok(UserCtx::default());
        };
        let stored = self.config.get(ADMINS, user).ok_or_else(bad)?;
        let key = cache_key(&stored, user, password);
        if !self.is_cached(user, &key) {
            let _turn = self.verifying.lock().await;
            // Verified by the request this one waited for?
            if !self.is_cached(user, &key) {
                self.verifications.fetch_add(1, Ordering::Relaxed);
                let (s, p) = (stored.clone(), password.to_string());
                let ok = tokio::task::spawn_blocking(move || verify_password(&s, &p)).await?;
                if !ok {
                    return Err(bad());
                }
                self.verified.lock().insert(user.to_string(), key);
            }
        }
        Ok(UserCtx {
            name: Some(user.to_string()),
            roles: vec!["_admin".to_string()],
        })
    }

    /// Sets an admin's password (hashing it), as `PUT /_node/_local/_config/admins/NAME` does.
    pub fn set_admin(&self, user: &str, password: &str) -> ApiResult<Option<String>> {
        let stored = if is_password_hash(password) {
            password.to_string()
        } else {
            hash_password(password)
        };
        self.verified.lock().remove(user);
        self.config.set(ADMINS, user, &stored)
    }

    pub fn has_admins(&self) -> bool {
        !self.config.section(ADMINS).is_empty()
    }
}

/// Makes sure an admin exists. With `admin` (`user:pass`) that admin's
/// password is set unless it already verifies; without one, and with no
/// admin configured, an `admin` user with a random password is created and
/// the password returned so the caller can print it once.
pub fn ensure_admin(
    auth: &Auth,
    config: &Config,
    admin: Option<&str>,
) -> Result<Option<(String, String)>, String> {
    if let Some(spec) = admin {
        let (user, password) = spec
            .split_once(':')
            .ok_or("--admin must be user:password")?;
        if user.is_empty() || password.is_empty() {
            return Err("--admin must be user:password with a non-empty user and password".into());
        }
        if !config
            .get(ADMINS, user)
            .is_some_and(|stored| verify_password(&stored, password))
        {
            auth.set_admin(user, password)
                .map_err(|e| e.reason.to_string())?;
        }
        return Ok(None);
    }
    if auth.has_admins() {
        return Ok(None);
    }
    let mut bytes = [0u8; 18];
    rand::rng().fill_bytes(&mut bytes);
    let password = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    auth.set_admin("admin", &password)
        .map_err(|e| e.reason.to_string())?;
    Ok(Some(("admin".to_string(), password)))
}

/// A database's security object as `GET /{db}/_security` answers it (and
/// `validate_doc_update` gets it as `secObj`). Until per-database security
/// objects exist, it follows `[couchdb] default_security`, as the object
/// CouchDB 3 gives a new database does.
pub fn security_object(req: &Req) -> serde_json::Value {
    if req.settings.default_security_admin_only {
        serde_json::json!({"members": {"roles": ["_admin"]}, "admins": {"roles": ["_admin"]}})
    } else {
        serde_json::json!({})
    }
}

/// Who makes a write, for `validate_doc_update` (`userCtx`, `secObj`).
pub fn write_ctx(req: &Req) -> settee_design::WriteCtx {
    settee_design::WriteCtx {
        name: req.user.name.clone(),
        roles: req.user.roles.clone(),
        security: security_object(req),
    }
}

/// Server-admin-only operations: database creation and deletion,
/// configuration, compaction, purge, `_revs_limit` changes.
pub fn require_admin(user: &UserCtx) -> ApiResult<()> {
    if user.is_admin() {
        Ok(())
    } else {
        Err(ApiError::unauthorized("You are not a server admin."))
    }
}

/// Reading documents and database metadata.
pub fn require_db_reader(req: &Req) -> ApiResult<()> {
    if req.settings.default_security_admin_only && !req.user.is_admin() {
        return Err(denied(&req.user));
    }
    Ok(())
}

/// Database-admin operations (compaction, view clean-up, `_revs_limit`
/// changes): a member check first (so a stranger hears "not authorized to
/// access this db", as from CouchDB), then a db admin, which with an empty
/// `_security` object is a server admin.
pub fn require_db_admin(req: &Req) -> ApiResult<()> {
    require_db_reader(req)?;
    require_design_writer(req)
}

/// Writing non-design documents: like reading (members may write).
pub fn require_db_writer(req: &Req) -> ApiResult<()> {
    require_db_reader(req)
}

/// Writing design documents needs a database admin; with an empty
/// `_security` object that is a server admin.
pub fn require_design_writer(req: &Req) -> ApiResult<()> {
    if req.user.is_admin() {
        Ok(())
    } else {
        Err(ApiError::unauthorized("You are not a db or server admin."))
    }
}

fn denied(user: &UserCtx) -> ApiError {
    if user.name.is_some() {
        ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "You are not allowed to access this db.",
        )
    } else {
        ApiError::unauthorized("You are not authorized to access this db.")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_and_verify() {
        let h = hash_password("s3cret");
        assert!(h.starts_with(HASH_PREFIX));
        assert!(!h.contains("s3cret"));
        assert!(verify_password(&h, "s3cret"));
        assert!(!verify_password(&h, "s3cre"));
        assert!(!verify_password("garbage", "s3cret"));
        assert!(!verify_password("-pbkdf2:sha256-zz,00,1", "x"));
        // Hashes as CouchDB stores them (salt used as text): SHA-1 and SHA-256.
        let sha1 =
            "-pbkdf2-4f414b2abaa5d15af1a95e18ff5fb772cbb8bdba,0123456789abcdef0123456789abcdef,10";
        assert!(verify_password(sha1, "s3cret"));
        assert!(!verify_password(sha1, "wrong"));
        let sha256 = "-pbkdf2:sha256-c3f3c16b6f6a5886fba4b40f544d97270f5840eb9a71064d1cc3796e9b304c42,0123456789abcdef0123456789abcdef,10";
        assert!(verify_password(sha256, "s3cret"));
    }

    fn basic(user: &str, password: &str) -> HeaderMap {
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            format!("Basic {token}").parse().unwrap(),
        );
        h
    }

    #[test]
    fn concurrent_first_requests_share_one_verification() {
        let config = Arc::new(Config::ephemeral());
        // Few iterations: the test is about how many verifications run.
        let stored = hash_with_iterations("pw", 20_000);
        config.set(ADMINS, "admin", &stored).unwrap();
        let auth = Arc::new(Auth::new(config));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        rt.block_on(async {
            let tasks: Vec<_> = (0..8)
                .map(|_| {
                    let auth = auth.clone();
                    tokio::spawn(async move { auth.authenticate(&basic("admin", "pw")).await })
                })
                .collect();
            for t in tasks {
                let user = t.await.unwrap().unwrap();
                assert!(user.is_admin());
            }
            assert_eq!(auth.verifications.load(Ordering::Relaxed), 1);
            // A wrong password is verified (and refused) every time.
            for _ in 0..2 {
                let e = auth
                    .authenticate(&basic("admin", "nope"))
                    .await
                    .unwrap_err();
                assert_eq!(e.status, StatusCode::UNAUTHORIZED);
            }
            assert_eq!(auth.verifications.load(Ordering::Relaxed), 3);
            // The right one is still cached.
            auth.authenticate(&basic("admin", "pw")).await.unwrap();
            assert_eq!(auth.verifications.load(Ordering::Relaxed), 3);
        });
    }
}
