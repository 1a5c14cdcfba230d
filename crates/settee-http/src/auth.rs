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

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::http::{header, HeaderMap};
use base64::Engine as _;
use parking_lot::Mutex;
use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::auth_chain::Handler;
use crate::config::{Config, Settings};
use crate::error::{ApiError, ApiResult};
use crate::request::Req;

use serde_json::Value;
use settee_auth::password::UserHash;
pub use settee_auth::password::{
    hash_password, is_password_hash, verify_password, PBKDF2_ITERATIONS,
};
use settee_auth::password_rules::PasswordPolicy;
pub use settee_auth::{SecurityObject, UserCtx};
use settee_db::{Database, Engine, GetOptions};

const ADMINS: &str = "admins";
/// The database of users (CouchDB's `[chttpd_auth] authentication_db`).
pub const USERS_DB: &str = "_users";

/// Creates the users database unless it exists, as CouchDB does at start:
/// readable and writable by server admins only (its security object
/// `admin_only`).
pub fn ensure_users_db(engine: &Engine) -> settee_db::Result<()> {
    ensure_admin_only_db(engine, USERS_DB)
}

/// Creates system database `name` unless it exists, admin-only (as
/// CouchDB creates `_users` and `_replicator` at start).
pub fn ensure_admin_only_db(engine: &Engine, name: &str) -> settee_db::Result<()> {
    match engine.db(name) {
        Ok(_) => Ok(()),
        Err(settee_db::Error::NotFound(_)) => {
            let sec = SecurityObject::admin_only().as_json().to_string();
            match engine.create_db_with_security(name, Some(&sec)) {
                Ok(_) | Err(settee_db::Error::DbExists) => Ok(()),
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}

/// A write to the users database: CouchDB's rules for user documents
/// (who may write which, their fields and roles), and a clear-text
/// `password` replaced by its PBKDF2 hash before anything is stored.
/// Nothing for other databases, design documents, or replicated
/// revisions (`new_edits=false`, whose passwords are hashes already).
/// The hashing runs on the blocking pool (it costs ~0.25 s of CPU).
pub async fn users_db_write(
    req: &Req,
    db: &Database,
    doc: serde_json::Map<String, Value>,
    new_edits: bool,
) -> ApiResult<serde_json::Map<String, Value>> {
    let id = doc.get("_id").and_then(Value::as_str).unwrap_or_default();
    if db.name() != USERS_DB || !new_edits || id.starts_with("_design/") {
        return Ok(doc);
    }
    let (user, sec, db) = (req.user.clone(), db_security(req).into_owned(), db.clone());
    let policy = Arc::clone(&req.settings.password_policy);
    tokio::task::spawn_blocking(move || {
        let mut doc = doc;
        user_doc_write(&user, &sec, &db, &mut doc, &policy)?;
        Ok(doc)
    })
    .await?
}

/// [`users_db_write`] of one document. Blocking.
pub fn user_doc_write(
    user: &UserCtx,
    sec: &SecurityObject,
    db: &Database,
    doc: &mut serde_json::Map<String, Value>,
    policy: &PasswordPolicy,
) -> ApiResult<()> {
    let id = user_doc_prepare(user, sec, doc, policy)?;
    user_doc_validate(user, sec, db, &id, doc)
}

/// The first part of [`user_doc_write`]: may the requester write this
/// user document at all (another user's: 404), and its password hashed.
/// In `_bulk_docs` its refusal fails the whole request. Returns the id.
pub fn user_doc_prepare(
    user: &UserCtx,
    sec: &SecurityObject,
    doc: &mut serde_json::Map<String, Value>,
    policy: &PasswordPolicy,
) -> ApiResult<String> {
    let id = doc
        .get("_id")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    settee_auth::users::check_write(&id, user, sec)?;
    settee_auth::users::before_write(doc, PBKDF2_ITERATIONS, policy)?;
    Ok(id)
}

/// The validation part of [`user_doc_write`] (CouchDB's `_users`
/// validate function): in `_bulk_docs` its refusal is the document's own
/// result.
pub fn user_doc_validate(
    user: &UserCtx,
    sec: &SecurityObject,
    db: &Database,
    id: &str,
    doc: &serde_json::Map<String, Value>,
) -> ApiResult<()> {
    let old = live_doc(db, id)?;
    let new = Value::Object(doc.clone());
    settee_auth::users::validate_with_security(&new, old.as_ref(), user, sec)?;
    Ok(())
}

/// A user document's roles (its strings).
fn doc_roles(doc: &Value) -> Vec<String> {
    doc["roles"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect()
}

/// The value of the request's `AuthSession` cookie, if any.
fn session_cookie_value(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|c| c.trim().strip_prefix("AuthSession=").map(str::to_string))
        .filter(|v| !v.is_empty())
}

/// The `_users` document of user `name`, as JSON (None: no such user).
fn users_doc(engine: &Engine, name: &str) -> ApiResult<Option<Value>> {
    let db = match engine.db(USERS_DB) {
        Ok(db) => db,
        Err(settee_db::Error::NotFound(_)) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    live_doc(&db, &settee_auth::users::user_doc_id(name))
}

/// The latest revision of document `id` as JSON; None when it is missing
/// or deleted.
fn live_doc(db: &Database, id: &str) -> ApiResult<Option<Value>> {
    match db.latest_reader()?.get(id, &GetOptions::default()) {
        Ok(d) if !d.deleted => {
            let text = settee_db::json::doc_string(&d, settee_db::json::Extras::default());
            Ok(serde_json::from_str(&text).ok())
        }
        Ok(_) | Err(settee_db::Error::NotFound(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
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

/// Who a request is, and how that was established.
#[derive(Debug, Clone, Default)]
pub struct Authenticated {
    pub user: UserCtx,
    /// The handler that named the requester (`default` for Basic,
    /// `cookie`, `jwt`, `proxy`); None for anonymous requests (`_session`'s
    /// `info.authenticated`).
    pub method: Option<&'static str>,
    /// A fresh `AuthSession` cookie for the response (`Set-Cookie` value),
    /// when the request's is past a tenth of its life.
    pub set_cookie: Option<String>,
}

impl Authenticated {
    /// `user`, named by a handler (which [`Auth::authenticate`] records).
    fn named(user: UserCtx) -> Authenticated {
        Authenticated {
            user,
            method: None,
            set_cookie: None,
        }
    }
}

/// `[chttpd_auth]`: the server secret and the session timeout.
const AUTH_SECTION: &str = "chttpd_auth";
/// CouchDB's default session lifetime, seconds.
const DEFAULT_TIMEOUT_SECS: u64 = 600;

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The `Set-Cookie` value of a session cookie (`value` empty to end one),
/// as CouchDB writes it.
pub fn session_cookie(config: &Config, value: &str, now: u64) -> String {
    let timeout = session_timeout(config);
    let expires = httpdate::fmt_http_date(
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(now + timeout),
    );
    // "Tue, 24 Nov 2026 18:05:23 GMT" as CouchDB spells it: "Tue, 24-Nov-2026 18:05:23 GMT".
    let parts: Vec<&str> = expires.split(' ').collect();
    let expires = match parts.as_slice() {
        [day, d, m, y, t, z] => format!("{day} {d}-{m}-{y} {t} {z}"),
        _ => expires.clone(),
    };
    let persistent = config
        .get("couch_httpd_auth", "allow_persistent_cookies")
        .is_none_or(|v| v != "false");
    let mut out = format!("AuthSession={value}; Version=1");
    if persistent {
        out.push_str(&format!("; Expires={expires}; Max-Age={timeout}"));
    }
    out.push_str("; Path=/; HttpOnly");
    if let Some(same_site) = config
        .get("couch_httpd_auth", "same_site")
        .filter(|v| !v.is_empty())
    {
        out.push_str(&format!("; SameSite={same_site}"));
    }
    if config
        .get("couch_httpd_auth", "secure")
        .is_some_and(|v| v == "true")
    {
        out.push_str("; Secure");
    }
    out
}

fn session_timeout(config: &Config) -> u64 {
    config
        .get(AUTH_SECTION, "timeout")
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_TIMEOUT_SECS)
}

/// Makes sure the server has a secret for session cookies (CouchDB
/// generates `[chttpd_auth] secret` at first start too).
pub fn ensure_secret(config: &Config) -> Result<(), String> {
    if config
        .get(AUTH_SECTION, "secret")
        .is_some_and(|s| !s.is_empty())
    {
        return Ok(());
    }
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    config
        .set(AUTH_SECTION, "secret", &hex::encode(bytes))
        .map(|_| ())
        .map_err(|e| e.reason.to_string())
}

/// The client's address (a request extension set per connection), which
/// the login lockout counts failures by.
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub Option<std::net::IpAddr>);

/// `[chttpd_auth_lockout]`: after `threshold` failed logins (5) for one
/// user from one address, further attempts are refused (403) without a
/// password check until `max_lifetime` ms (300000) after the first
/// failure; at most `max_objects` (10000) pairs are tracked; `mode` is
/// `enforce` (default), `warn` (log only) or `off`. Only existing users are
/// counted, as in CouchDB.
#[derive(Debug, Default)]
struct Lockout {
    failures: HashMap<(Option<std::net::IpAddr>, String), (u32, std::time::Instant)>,
}

const LOCKOUT_SECTION: &str = "chttpd_auth_lockout";

/// Why credentials were refused.
enum Refused {
    /// A wrong password for an existing user (counted for the lockout).
    Existing,
    /// No such user.
    Unknown,
    /// The check itself failed.
    Api(ApiError),
}
const LOCKED: &str = "Account is temporarily locked due to multiple authentication failures";

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
    /// Failed logins by user and address.
    lockout: Mutex<Lockout>,
    /// `[jwt_keys]` parsed once per key.
    jwt_keys: settee_auth::jwt::KeyCache,
}

impl Auth {
    pub fn new(config: Arc<Config>) -> Auth {
        Auth {
            config,
            verified: Mutex::new(HashMap::new()),
            verifying: tokio::sync::Mutex::new(()),
            verifications: AtomicU64::new(0),
            lockout: Mutex::new(Lockout::default()),
            jwt_keys: settee_auth::jwt::KeyCache::default(),
        }
    }

    fn lockout_setting(&self, key: &str, default: u64) -> u64 {
        self.config
            .get(LOCKOUT_SECTION, key)
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    }

    fn lockout_mode(&self) -> String {
        self.config
            .get(LOCKOUT_SECTION, "mode")
            .unwrap_or_else(|| "enforce".to_string())
    }

    /// 403 when `user` from `peer` is locked out (enforce mode).
    fn check_lockout(&self, peer: Option<std::net::IpAddr>, user: &str) -> ApiResult<()> {
        let mode = self.lockout_mode();
        if mode == "off" {
            return Ok(());
        }
        let threshold = self.lockout_setting("threshold", 5);
        let lifetime =
            std::time::Duration::from_millis(self.lockout_setting("max_lifetime", 300_000));
        let mut lock = self.lockout.lock();
        let key = (peer, user.to_string());
        let locked = match lock.failures.get(&key) {
            Some((_, first)) if first.elapsed() >= lifetime => {
                lock.failures.remove(&key);
                false
            }
            Some((n, _)) => u64::from(*n) >= threshold,
            None => false,
        };
        if !locked {
            return Ok(());
        }
        tracing::warn!(user, ?peer, "authentication rejected for a locked-out user");
        if mode == "enforce" {
            Err(ApiError::new(
                axum::http::StatusCode::FORBIDDEN,
                "forbidden",
                LOCKED,
            ))
        } else {
            Ok(())
        }
    }

    /// Counts a failed login of an existing user.
    fn record_failure(&self, peer: Option<std::net::IpAddr>, user: &str) {
        if self.lockout_mode() == "off" {
            return;
        }
        let max =
            usize::try_from(self.lockout_setting("max_objects", 10_000)).unwrap_or(usize::MAX);
        let lifetime =
            std::time::Duration::from_millis(self.lockout_setting("max_lifetime", 300_000));
        let mut lock = self.lockout.lock();
        if lock.failures.len() >= max {
            lock.failures
                .retain(|_, (_, first)| first.elapsed() < lifetime);
        }
        let key = (peer, user.to_string());
        if lock.failures.len() >= max && !lock.failures.contains_key(&key) {
            return;
        }
        let entry = lock
            .failures
            .entry(key)
            .or_insert((0, std::time::Instant::now()));
        if entry.1.elapsed() >= lifetime {
            *entry = (0, std::time::Instant::now());
        }
        entry.0 = entry.0.saturating_add(1);
    }

    /// Whether `key` (see [`cache_key`]) is the cached digest of `user`'s
    /// verified credentials.
    fn is_cached(&self, user: &str, key: &[u8; 32]) -> bool {
        self.verified
            .lock()
            .get(user)
            .is_some_and(|k| settee_auth::constant_time_eq(k, key))
    }

    /// Identifies the requester: the first of the configured handlers
    /// ([`crate::auth_chain`]) that names one, else anonymous.
    pub async fn authenticate(
        &self,
        headers: &HeaderMap,
        engine: &Engine,
        peer: Option<std::net::IpAddr>,
        settings: &Settings,
    ) -> ApiResult<Authenticated> {
        for handler in &settings.auth_handlers {
            let found = match handler {
                Handler::Jwt => self.jwt(headers, settings)?,
                Handler::Proxy => self.proxy(headers, settings),
                Handler::Cookie => match session_cookie_value(headers) {
                    Some(value) => Some(self.cookie(&value, engine)?),
                    None => None,
                },
                Handler::Default => {
                    let user = self.basic(headers, engine, peer).await?;
                    user.name.is_some().then(|| Authenticated::named(user))
                }
            };
            if let Some(mut who) = found.filter(|w| w.user.name.is_some()) {
                who.method = Some(handler.name());
                return Ok(who);
            }
        }
        Ok(Authenticated::default())
    }

    /// The `jwt` handler: an `Authorization: Bearer` token's user (None
    /// without a token).
    fn jwt(&self, headers: &HeaderMap, settings: &Settings) -> ApiResult<Option<Authenticated>> {
        let Some(token) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .filter(|t| !t.is_empty())
        else {
            return Ok(None);
        };
        let jwt = &settings.jwt;
        let config = settee_auth::jwt::JwtSettings {
            keys: &jwt.keys,
            required_claims: jwt.required_claims.as_deref(),
            roles_claim_name: jwt.roles_claim_name.as_deref(),
            roles_claim_path: jwt.roles_claim_path.as_deref(),
        };
        let user = self
            .jwt_keys
            .authenticate(token, &config, now_secs())
            .map_err(|e| ApiError::from(e.to_couchdb()))?;
        Ok(Some(Authenticated::named(user)))
    }

    /// The `proxy` handler: the user a trusted proxy names in headers.
    fn proxy(&self, headers: &HeaderMap, settings: &Settings) -> Option<Authenticated> {
        let p = &settings.proxy;
        let value = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        // Most requests name no proxied user: no configuration read for them.
        value(&p.username_header)?;
        let secret = p
            .use_secret
            .then(|| self.config.get(AUTH_SECTION, "secret"))
            .flatten();
        let secret = match (&p.use_secret, &secret) {
            (false, _) => settee_auth::proxy::Secret::NotUsed,
            (true, Some(s)) if !s.is_empty() => settee_auth::proxy::Secret::Key(s),
            (true, _) => settee_auth::proxy::Secret::Missing,
        };
        let proxied = settee_auth::proxy::ProxyHeaders {
            username: value(&p.username_header),
            roles: value(&p.roles_header),
            token: value(&p.token_header),
        };
        settee_auth::proxy::authenticate(proxied, secret).map(Authenticated::named)
    }

    /// A session cookie's user; anonymous when it is forged, expired or
    /// its user is gone (as CouchDB), 400 when it is not a cookie at all.
    fn cookie(&self, value: &str, engine: &Engine) -> ApiResult<Authenticated> {
        let Some(secret) = self.config.get(AUTH_SECTION, "secret") else {
            return Ok(Authenticated::default());
        };
        let (now, timeout) = (now_secs(), session_timeout(&self.config));
        let mut found: Option<(UserCtx, String)> = None;
        let verified = settee_auth::cookie::verify(
            value,
            |name| {
                let who = self.lookup(name, engine).ok().flatten()?;
                let salt = who.1.clone();
                found = Some(who);
                Some(salt)
            },
            &secret,
            now,
            timeout,
        );
        match verified {
            Ok((_, issued)) => {
                let Some((user, salt)) = found else {
                    return Ok(Authenticated::default());
                };
                let set_cookie =
                    settee_auth::cookie::needs_refresh(issued, now, timeout).then(|| {
                        let name = user.name.clone().unwrap_or_default();
                        let fresh = settee_auth::cookie::make(&name, &salt, &secret, now);
                        session_cookie(&self.config, &fresh, now)
                    });
                Ok(Authenticated {
                    user,
                    method: Some("cookie"),
                    set_cookie,
                })
            }
            Err(e) => match e.to_couchdb() {
                Some(refusal) => Err(refusal.into()),
                None => Ok(Authenticated::default()),
            },
        }
    }

    /// A user's context and salt: a server admin's from its configured
    /// hash, a user's from its `_users` document. None: no such user.
    fn lookup(&self, name: &str, engine: &Engine) -> ApiResult<Option<(UserCtx, String)>> {
        if let Some(stored) = self.config.get(ADMINS, name) {
            return Ok(
                UserHash::from_config(&stored).map(|h| (UserCtx::server_admin(name), h.salt))
            );
        }
        let Some(doc) = users_doc(engine, name)? else {
            return Ok(None);
        };
        let Some(hash) = UserHash::from_user_doc(&doc) else {
            return Ok(None);
        };
        Ok(Some((
            UserCtx {
                name: Some(name.to_string()),
                roles: doc_roles(&doc),
            },
            hash.salt,
        )))
    }

    /// Logs a user in (`POST /_session`): their context and a session
    /// cookie (`Set-Cookie` value); 401 for a wrong name or password.
    pub async fn login(
        &self,
        name: &str,
        password: &str,
        engine: &Engine,
        peer: Option<std::net::IpAddr>,
    ) -> ApiResult<(UserCtx, String)> {
        let user = self.check_password(name, password, engine, peer).await?;
        let (_, salt) = self
            .lookup(name, engine)?
            .ok_or_else(|| ApiError::unauthorized("Name or password is incorrect."))?;
        let secret = self
            .config
            .get(AUTH_SECTION, "secret")
            .ok_or_else(|| ApiError::unauthorized("Name or password is incorrect."))?;
        let now = now_secs();
        let value = settee_auth::cookie::make(name, &salt, &secret, now);
        Ok((user, session_cookie(&self.config, &value, now)))
    }

    /// The requester named by HTTP Basic credentials.
    async fn basic(
        &self,
        headers: &HeaderMap,
        engine: &Engine,
        peer: Option<std::net::IpAddr>,
    ) -> ApiResult<UserCtx> {
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
        self.check_password(user, password, engine, peer).await
    }

    /// The context of user `user` when `password` is theirs; 401 else.
    async fn check_password(
        &self,
        user: &str,
        password: &str,
        engine: &Engine,
        peer: Option<std::net::IpAddr>,
    ) -> ApiResult<UserCtx> {
        self.check_lockout(peer, user)?;
        let checked = self.verify_credentials(user, password, engine).await;
        if let Err(Refused::Existing) = &checked {
            self.record_failure(peer, user);
        }
        checked.map_err(|r| match r {
            Refused::Api(e) => e,
            Refused::Existing | Refused::Unknown => {
                ApiError::unauthorized("Name or password is incorrect.")
            }
        })
    }

    /// The user's context when `password` is theirs.
    async fn verify_credentials(
        &self,
        user: &str,
        password: &str,
        engine: &Engine,
    ) -> Result<UserCtx, Refused> {
        if let Some(stored) = self.config.get(ADMINS, user) {
            let (s, p) = (stored.clone(), password.to_string());
            if !self
                .verify(user, &stored, password, move || verify_password(&s, &p))
                .await
                .map_err(Refused::Api)?
            {
                return Err(Refused::Existing);
            }
            return Ok(UserCtx::server_admin(user));
        }
        let doc = users_doc(engine, user)
            .map_err(Refused::Api)?
            .ok_or(Refused::Unknown)?;
        let hash = UserHash::from_user_doc(&doc).ok_or(Refused::Unknown)?;
        let stored = format!(
            "{}:{}:{}:{}",
            hash.prf.as_str(),
            hash.iterations,
            hash.salt,
            hash.derived_key
        );
        let p = password.to_string();
        // The cache is shared with admins: a user's entries are apart.
        let slot = format!("{USERS_DB}\0{user}");
        if !self
            .verify(&slot, &stored, password, move || hash.verify(&p))
            .await
            .map_err(Refused::Api)?
        {
            return Err(Refused::Existing);
        }
        Ok(UserCtx {
            name: Some(user.to_string()),
            roles: doc_roles(&doc),
        })
    }

    /// Whether `password` is `slot`'s, whose stored hash is `stored`: from
    /// the cache, else by `check` (PBKDF2: one at a time, on the blocking
    /// pool; the requests waiting meanwhile with the same credentials find
    /// the result cached).
    async fn verify(
        &self,
        slot: &str,
        stored: &str,
        password: &str,
        check: impl FnOnce() -> bool + Send + 'static,
    ) -> ApiResult<bool> {
        let key = cache_key(stored, slot, password);
        if self.is_cached(slot, &key) {
            return Ok(true);
        }
        let _turn = self.verifying.lock().await;
        // Verified by the request this one waited for?
        if self.is_cached(slot, &key) {
            return Ok(true);
        }
        self.verifications.fetch_add(1, Ordering::Relaxed);
        if !tokio::task::spawn_blocking(check).await? {
            return Ok(false);
        }
        self.verified.lock().insert(slot.to_string(), key);
        Ok(true)
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

/// The security object a database gets when created: CouchDB 3's
/// `[couchdb] default_security` (`admin_only`: members and admins are
/// server admins; `everyone`: `{}`).
pub fn default_security(settings: &Settings) -> SecurityObject {
    if settings.default_security_admin_only {
        SecurityObject::admin_only()
    } else {
        SecurityObject::default()
    }
}

/// The security object a database request goes by: its database's, or,
/// for a database that never had one stored (or none named), the default.
pub fn db_security(req: &Req) -> Cow<'_, SecurityObject> {
    match &req.security {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(default_security(&req.settings)),
    }
}

/// A database's security object as `GET /{db}/_security` answers it (and
/// design functions get it as `secObj`).
pub fn security_object(req: &Req) -> serde_json::Value {
    db_security(req).as_json().clone()
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
/// configuration.
pub fn require_admin(user: &UserCtx) -> ApiResult<()> {
    if user.is_server_admin() {
        Ok(())
    } else {
        Err(ApiError::unauthorized("You are not a server admin."))
    }
}

/// Reading documents and database metadata: a member of the database
/// (everyone when its `members` are empty; db and server admins always).
pub fn require_db_reader(req: &Req) -> ApiResult<()> {
    Ok(db_security(req).check_member(&req.user)?)
}

/// Database-admin operations (compaction, view clean-up, `_revs_limit`,
/// `_security` changes): a member check first (so a stranger hears "not
/// authorized to access this db", as from CouchDB), then a db admin.
pub fn require_db_admin(req: &Req) -> ApiResult<()> {
    let sec = db_security(req);
    sec.check_member(&req.user)?;
    Ok(sec.check_admin(&req.user)?)
}

/// Compaction and view clean-up, as CouchDB checks them (its
/// `check_is_admin`): a member check first, then 401 "You are not a server
/// or db admin." for anyone who is not a db admin, named or not.
pub fn require_db_admin_to_compact(req: &Req) -> ApiResult<()> {
    let sec = db_security(req);
    sec.check_member(&req.user)?;
    if sec.is_admin(&req.user) {
        Ok(())
    } else {
        Err(ApiError::unauthorized("You are not a server or db admin."))
    }
}

/// Writing non-design documents: like reading (members may write).
pub fn require_db_writer(req: &Req) -> ApiResult<()> {
    require_db_reader(req)
}

/// Writing design documents needs a database admin.
pub fn require_design_writer(req: &Req) -> ApiResult<()> {
    Ok(db_security(req).check_admin(&req.user)?)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let stored = settee_auth::password::hash_with_iterations("pw", 20_000);
        config.set(ADMINS, "admin", &stored).unwrap();
        let settings = config.settings();
        let auth = Arc::new(Auth::new(config));
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(dir.path(), settee_db::EngineOptions::default()).unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        rt.block_on(async {
            let tasks: Vec<_> = (0..8)
                .map(|_| {
                    let (auth, engine, settings) = (auth.clone(), engine.clone(), settings.clone());
                    tokio::spawn(async move {
                        auth.authenticate(&basic("admin", "pw"), &engine, None, &settings)
                            .await
                    })
                })
                .collect();
            for t in tasks {
                let user = t.await.unwrap().unwrap();
                assert!(user.user.is_server_admin());
            }
            assert_eq!(auth.verifications.load(Ordering::Relaxed), 1);
            // A wrong password is verified (and refused) every time.
            for _ in 0..2 {
                let e = auth
                    .authenticate(&basic("admin", "nope"), &engine, None, &settings)
                    .await
                    .unwrap_err();
                assert_eq!(e.status, axum::http::StatusCode::UNAUTHORIZED);
            }
            assert_eq!(auth.verifications.load(Ordering::Relaxed), 3);
            // The right one is still cached.
            auth.authenticate(&basic("admin", "pw"), &engine, None, &settings)
                .await
                .unwrap();
            assert_eq!(auth.verifications.load(Ordering::Relaxed), 3);
        });
    }
}
