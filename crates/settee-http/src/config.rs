//! Server configuration: CouchDB-style `[section] key = value` settings,
//! kept in `settee.ini` in the data directory, read and written through
//! `/_node/_local/_config`.
//!
//! Invariants:
//! - The file is rewritten atomically (temp file, fsync, rename) on every
//!   change, so a crash leaves either the old or the new configuration.
//! - Values of the settings the server interprets are validated before they
//!   are stored; the typed [`Settings`] snapshot is rebuilt after every
//!   change and handed out as an `Arc`, so a request sees one consistent set.
//! - Values are single-line strings (no CR/LF), keys have no `=`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::error::{ApiError, ApiResult};

pub type Sections = BTreeMap<String, BTreeMap<String, String>>;

/// CouchDB 3's default `max_document_size`.
pub const DEFAULT_MAX_DOCUMENT_SIZE: u64 = 8_000_000;
/// Default largest request body. CouchDB's default is 4 GiB; we bound
/// requests at 64 MiB unless the operator raises it.
pub const DEFAULT_MAX_HTTP_REQUEST_SIZE: u64 = 64 * 1024 * 1024;
/// CouchDB's `max_bulk_docs_count` default.
pub const DEFAULT_MAX_BULK_DOCS: u64 = 10_000;
/// CouchDB's `max_bulk_get_count` default.
pub const DEFAULT_MAX_BULK_GET: u64 = 10_000;

/// How new identifiers are generated (`[uuids] algorithm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UuidAlgorithm {
    Sequential,
    Random,
    UtcRandom,
    /// Microseconds since the epoch (14 hex digits) + `[uuids] utc_id_suffix`.
    UtcId,
}

/// CORS settings (`[chttpd] enable_cors`, `[cors] …`).
#[derive(Debug, Clone, Default)]
pub struct Cors {
    pub enabled: bool,
    /// `*` or exact origins.
    pub origins: Vec<String>,
    pub credentials: bool,
    pub methods: String,
    pub headers: String,
    pub max_age: u64,
}

/// The typed view of the settings the server interprets.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `[couchdb] delayed_commits`: default durability is delayed, not full.
    pub delayed_commits: bool,
    pub max_document_size: u64,
    /// `[couchdb] max_partition_size`: bytes past which a partition takes
    /// no more writes (0 or unset: no limit).
    pub max_partition_size: u64,
    pub max_http_request_size: u64,
    pub max_bulk_docs_count: u64,
    pub max_bulk_get_count: u64,
    /// `[couchdb] default_security`: `everyone` (what a database with an
    /// empty `_security` object allows: anyone reads and writes non-design
    /// documents) or `admin_only` (only server admins; CouchDB 3's default).
    pub default_security_admin_only: bool,
    /// `[chttpd] admin_only_all_dbs` (CouchDB 3 default true).
    pub admin_only_all_dbs: bool,
    /// `[replicator] max_jobs`: replications running at once (CouchDB's
    /// default 500); `_replicator` documents beyond it wait (`pending`).
    pub replicator_max_jobs: u64,
    /// `[replicator] max_churn`: jobs one rotation stops (default 20).
    pub replicator_max_churn: u64,
    /// `[replicator] interval`: milliseconds between rotations (default
    /// 60000).
    pub replicator_interval_ms: u64,
    /// `[couchdb] users_db_security_editable` (default false: the users
    /// database's security object cannot be changed).
    pub users_db_security_editable: bool,
    /// `[chttpd] require_valid_user`: anonymous requests are refused (401
    /// "Authentication required.") but for logging in (`POST /_session`),
    /// and for `/_up` with `require_valid_user_except_for_up`.
    pub require_valid_user: bool,
    pub require_valid_user_except_for_up: bool,
    /// `[httpd] WWW-Authenticate`: sent with every 401 when set.
    pub www_authenticate: Option<String>,
    /// `[chttpd] authentication_handlers`, in order.
    pub auth_handlers: Vec<crate::auth_chain::Handler>,
    /// `[jwt_keys]` and `[jwt_auth]`.
    pub jwt: JwtSettings,
    /// `[chttpd_auth]`'s proxy settings.
    pub proxy: ProxySettings,
    pub uuid_algorithm: UuidAlgorithm,
    /// `[uuids] utc_id_suffix`, appended by the `utc_id` algorithm.
    pub utc_id_suffix: String,
    /// `[chttpd] max_db_number_for_dbs_info_req`: most names one
    /// `POST /_dbs_info` may ask for (CouchDB's default is 100).
    pub max_db_number_for_dbs_info_req: usize,
    pub uuid_max_count: u64,
    /// `[chttpd] changes_timeout`: default timeout of longpoll and continuous feeds.
    pub changes_timeout_ms: u64,
    pub cors: Cors,
    /// `[chttpd] allow_jsonp`: wrap JSON responses in `?callback=` (off by default).
    pub allow_jsonp: bool,
    /// `[couchdb] os_process_timeout`: the longest one JavaScript call may
    /// run (read when the server starts).
    pub os_process_timeout_ms: u64,
    /// `[query_server_config] reduce_limit`: refuse JavaScript reduce
    /// output that does not shrink (read when the server starts).
    pub reduce_limit: bool,
    /// `[couchdb] max_attachment_size` (absent or `infinity`: no limit).
    pub max_attachment_size: u64,
    /// `[query_server_config] partition_query_limit`: the default and
    /// largest `limit` of a partition's view and `_all_docs` queries
    /// (CouchDB's default 2000).
    pub partition_query_limit: u64,
    /// `[chttpd_auth] password_regexp` (or `[couch_httpd_auth]`'s): the
    /// rules a new password must meet.
    pub password_policy: Arc<settee_auth::password_rules::PasswordPolicy>,
    /// `[attachments] compressible_types` and `compression_level`.
    pub att_compression: settee_db::atts::AttCompression,
}

/// `[jwt_keys]` (every entry, `kind:kid` → key) and `[jwt_auth]`.
#[derive(Debug, Clone, Default)]
pub struct JwtSettings {
    pub keys: Vec<(String, String)>,
    pub required_claims: Option<String>,
    pub roles_claim_name: Option<String>,
    pub roles_claim_path: Option<String>,
}

/// `[chttpd_auth] proxy_use_secret` and the proxy's header names
/// (`x_auth_username`, `x_auth_roles`, `x_auth_token`).
#[derive(Debug, Clone, Default)]
pub struct ProxySettings {
    pub use_secret: bool,
    pub username_header: String,
    pub roles_header: String,
    pub token_header: String,
}

impl Settings {
    fn from_sections(s: &Sections) -> Settings {
        let get = |sec: &str, key: &str| s.get(sec).and_then(|m| m.get(key)).map(String::as_str);
        let boolean = |sec, key, default| get(sec, key).and_then(parse_bool).unwrap_or(default);
        let number = |sec, key, default| {
            get(sec, key)
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(default)
        };
        Settings {
            delayed_commits: boolean("couchdb", "delayed_commits", false),
            max_document_size: number("couchdb", "max_document_size", DEFAULT_MAX_DOCUMENT_SIZE),
            max_partition_size: number("couchdb", "max_partition_size", 0),
            max_http_request_size: number(
                "chttpd",
                "max_http_request_size",
                DEFAULT_MAX_HTTP_REQUEST_SIZE,
            ),
            max_bulk_docs_count: number("couchdb", "max_bulk_docs_count", DEFAULT_MAX_BULK_DOCS),
            max_bulk_get_count: number("couchdb", "max_bulk_get_count", DEFAULT_MAX_BULK_GET),
            default_security_admin_only: get("couchdb", "default_security") != Some("everyone"),
            admin_only_all_dbs: boolean("chttpd", "admin_only_all_dbs", true),
            replicator_max_jobs: number("replicator", "max_jobs", 500),
            replicator_max_churn: number("replicator", "max_churn", 20),
            replicator_interval_ms: number("replicator", "interval", 60_000),
            users_db_security_editable: boolean("couchdb", "users_db_security_editable", false),
            require_valid_user: boolean("chttpd", "require_valid_user", false),
            require_valid_user_except_for_up: boolean(
                "chttpd",
                "require_valid_user_except_for_up",
                false,
            ),
            www_authenticate: get("httpd", "WWW-Authenticate")
                .filter(|v| !v.is_empty())
                .map(str::to_string),
            auth_handlers: crate::auth_chain::parse(get("chttpd", "authentication_handlers")),
            jwt: JwtSettings {
                keys: s
                    .get("jwt_keys")
                    .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                    .unwrap_or_default(),
                required_claims: get("jwt_auth", "required_claims").map(str::to_string),
                roles_claim_name: get("jwt_auth", "roles_claim_name").map(str::to_string),
                roles_claim_path: get("jwt_auth", "roles_claim_path").map(str::to_string),
            },
            proxy: ProxySettings {
                use_secret: boolean("chttpd_auth", "proxy_use_secret", false),
                username_header: get("chttpd_auth", "x_auth_username")
                    .unwrap_or(settee_auth::proxy::USERNAME_HEADER)
                    .to_string(),
                roles_header: get("chttpd_auth", "x_auth_roles")
                    .unwrap_or(settee_auth::proxy::ROLES_HEADER)
                    .to_string(),
                token_header: get("chttpd_auth", "x_auth_token")
                    .unwrap_or(settee_auth::proxy::TOKEN_HEADER)
                    .to_string(),
            },
            uuid_algorithm: match get("uuids", "algorithm") {
                Some("random") => UuidAlgorithm::Random,
                Some("utc_random") => UuidAlgorithm::UtcRandom,
                Some("utc_id") => UuidAlgorithm::UtcId,
                _ => UuidAlgorithm::Sequential,
            },
            uuid_max_count: number("uuids", "max_count", 1000),
            utc_id_suffix: get("uuids", "utc_id_suffix").unwrap_or("").to_string(),
            max_db_number_for_dbs_info_req: usize::try_from(number(
                "chttpd",
                "max_db_number_for_dbs_info_req",
                100,
            ))
            .unwrap_or(usize::MAX),
            changes_timeout_ms: number("chttpd", "changes_timeout", 60_000),
            allow_jsonp: boolean("chttpd", "allow_jsonp", false),
            os_process_timeout_ms: number("couchdb", "os_process_timeout", 5000),
            reduce_limit: boolean("query_server_config", "reduce_limit", true),
            max_attachment_size: number("couchdb", "max_attachment_size", u64::MAX),
            partition_query_limit: number("query_server_config", "partition_query_limit", 2000),
            password_policy: Arc::new(settee_auth::password_rules::PasswordPolicy::parse(
                get("chttpd_auth", "password_regexp")
                    .or_else(|| get("couch_httpd_auth", "password_regexp")),
            )),
            att_compression: {
                let d = settee_db::atts::AttCompression::default();
                settee_db::atts::AttCompression {
                    types: get("attachments", "compressible_types")
                        .map_or(d.types, settee_db::atts::AttCompression::parse_types),
                    level: number("attachments", "compression_level", u64::from(d.level)).min(9)
                        as u32,
                }
            },
            cors: Cors {
                enabled: boolean("chttpd", "enable_cors", false),
                origins: get("cors", "origins")
                    .map(|o| {
                        o.split(',')
                            .map(|x| x.trim().to_string())
                            .filter(|x| !x.is_empty())
                            .collect()
                    })
                    .unwrap_or_default(),
                credentials: boolean("cors", "credentials", false),
                methods: get("cors", "methods")
                    .unwrap_or("GET, PUT, POST, HEAD, DELETE")
                    .to_string(),
                headers: get("cors", "headers")
                    .unwrap_or("accept, authorization, content-type, origin, referer, x-csrf-token")
                    .to_string(),
                max_age: number("cors", "max_age", 600),
            },
        }
    }
}

pub fn parse_bool(v: &str) -> Option<bool> {
    match v.trim() {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

/// Settings whose values must have a type.
fn validate(section: &str, key: &str, value: &str) -> ApiResult<()> {
    let expected = match (section, key) {
        ("couchdb", "delayed_commits")
        | ("chttpd", "enable_cors")
        | ("chttpd", "admin_only_all_dbs")
        | ("chttpd", "allow_jsonp")
        | ("cors", "credentials")
            if parse_bool(value).is_none() =>
        {
            "true or false"
        }
        ("couchdb", "max_document_size")
        | ("replicator", "max_jobs")
        | ("replicator", "max_churn")
        | ("replicator", "interval")
        | ("couchdb", "max_bulk_docs_count")
        | ("couchdb", "max_bulk_get_count")
        | ("chttpd", "max_http_request_size")
        | ("chttpd", "changes_timeout")
        | ("uuids", "max_count")
        | ("chttpd", "max_db_number_for_dbs_info_req")
        | ("cors", "max_age")
        | ("query_server_config", "partition_query_limit")
            if !value.trim().parse::<u64>().is_ok_and(|n| n > 0) =>
        {
            "a positive integer"
        }
        ("couchdb", "default_security") if !matches!(value, "everyone" | "admin_only") => {
            "everyone or admin_only"
        }
        ("uuids", "algorithm")
            if !matches!(value, "sequential" | "random" | "utc_random" | "utc_id") =>
        {
            "sequential, random, utc_random or utc_id"
        }
        _ => return Ok(()),
    };
    Err(ApiError::bad_request(format!(
        "Invalid value for [{section}] {key}: expected {expected}"
    )))
}

/// Settings CouchDB's `default.ini` lists that clients read back (e.g.
/// Fauxton and PouchDB's authentication plugins look up the users
/// database); shown under stored values, never written to `settee.ini`.
const DEFAULTS: &[(&str, &str, &str)] = &[
    ("couch_httpd_auth", "authentication_db", "_users"),
    ("chttpd", "bind_address", "127.0.0.1"),
];

/// The configuration store.
pub struct Config {
    path: PathBuf,
    sections: Mutex<Sections>,
    settings: RwLock<Arc<Settings>>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

fn parse_ini(text: &str) -> Sections {
    let mut out = Sections::new();
    let mut section = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with(';') || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.trim().to_string();
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            out.entry(section.clone())
                .or_default()
                .insert(k.trim().to_string(), v.trim().to_string());
        }
    }
    out
}

fn render_ini(s: &Sections) -> String {
    let mut out =
        String::from("; Settee configuration (written by the server; edit while it is stopped).\n");
    for (section, kv) in s {
        if kv.is_empty() {
            continue;
        }
        out.push_str(&format!("\n[{section}]\n"));
        for (k, v) in kv {
            out.push_str(&format!("{k} = {v}\n"));
        }
    }
    out
}

fn checked_name(s: &str, what: &str) -> ApiResult<()> {
    if s.is_empty() || s.contains(['\n', '\r', '=', '[', ']']) || s.trim() != s {
        return Err(ApiError::bad_request(format!("Invalid config {what}")));
    }
    Ok(())
}

impl Config {
    /// Loads `settee.ini` from `dir` (an absent file is an empty config).
    pub fn load(dir: &Path) -> std::io::Result<Config> {
        let path = dir.join("settee.ini");
        let sections = match std::fs::read_to_string(&path) {
            Ok(text) => parse_ini(&text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Sections::new(),
            Err(e) => return Err(e),
        };
        let settings = Arc::new(Settings::from_sections(&sections));
        Ok(Config {
            path,
            sections: Mutex::new(sections),
            settings: RwLock::new(settings),
        })
    }

    /// An in-memory configuration that is never persisted (tests).
    pub fn ephemeral() -> Config {
        let sections = Sections::new();
        Config {
            path: PathBuf::new(),
            settings: RwLock::new(Arc::new(Settings::from_sections(&sections))),
            sections: Mutex::new(sections),
        }
    }

    /// The data directory the configuration was loaded from (None for an
    /// ephemeral one).
    pub fn data_dir(&self) -> Option<&Path> {
        if self.path.as_os_str().is_empty() {
            return None;
        }
        self.path.parent()
    }

    pub fn settings(&self) -> Arc<Settings> {
        self.settings.read().clone()
    }

    /// Every setting: the stored ones over [`DEFAULTS`].
    pub fn all(&self) -> Sections {
        let mut out = Sections::new();
        for (sec, key, value) in DEFAULTS {
            out.entry((*sec).to_string())
                .or_default()
                .insert((*key).to_string(), (*value).to_string());
        }
        for (sec, keys) in self.sections.lock().iter() {
            out.entry(sec.clone()).or_default().extend(keys.clone());
        }
        out
    }

    pub fn section(&self, section: &str) -> BTreeMap<String, String> {
        let mut out: BTreeMap<String, String> = DEFAULTS
            .iter()
            .filter(|(s, _, _)| *s == section)
            .map(|(_, k, v)| ((*k).to_string(), (*v).to_string()))
            .collect();
        if let Some(m) = self.sections.lock().get(section) {
            out.extend(m.clone());
        }
        out
    }

    pub fn get(&self, section: &str, key: &str) -> Option<String> {
        self.sections
            .lock()
            .get(section)
            .and_then(|m| m.get(key))
            .cloned()
            .or_else(|| {
                DEFAULTS
                    .iter()
                    .find(|(s, k, _)| *s == section && *k == key)
                    .map(|(_, _, v)| (*v).to_string())
            })
    }

    /// Sets a value (validated) and persists; returns the previous value.
    pub fn set(&self, section: &str, key: &str, value: &str) -> ApiResult<Option<String>> {
        checked_name(section, "section")?;
        checked_name(key, "key")?;
        if !value.is_ascii() {
            // CouchDB keeps its ini files ASCII and refuses anything else.
            return Err(ApiError::bad_request("Invalid configuration value"));
        }
        if value.contains(['\n', '\r']) {
            return Err(ApiError::bad_request(
                "Config values must be single-line strings",
            ));
        }
        validate(section, key, value)?;
        self.change(|s| {
            s.entry(section.to_string())
                .or_default()
                .insert(key.to_string(), value.to_string())
        })
    }

    /// Deletes a value and persists; returns the previous value.
    pub fn delete(&self, section: &str, key: &str) -> ApiResult<Option<String>> {
        self.change(|s| s.get_mut(section).and_then(|m| m.remove(key)))
    }

    fn change(&self, f: impl FnOnce(&mut Sections) -> Option<String>) -> ApiResult<Option<String>> {
        let mut sections = self.sections.lock();
        let mut next = sections.clone();
        let old = f(&mut next);
        self.persist(&next).map_err(|e| {
            ApiError::new(
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                "config_error",
                format!("cannot write configuration: {e}"),
            )
        })?;
        *self.settings.write() = Arc::new(Settings::from_sections(&next));
        *sections = next;
        Ok(old)
    }

    fn persist(&self, s: &Sections) -> std::io::Result<()> {
        if self.path.as_os_str().is_empty() {
            return Ok(());
        }
        let tmp = self.path.with_extension("ini.tmp");
        {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(render_ini(s).as_bytes())?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_validation() {
        let dir = tempfile::tempdir().unwrap();
        let c = Config::load(dir.path()).unwrap();
        assert!(!c.settings().delayed_commits);
        assert_eq!(c.set("couchdb", "delayed_commits", "true").unwrap(), None);
        assert!(c.settings().delayed_commits);
        assert!(c.set("couchdb", "delayed_commits", "maybe").is_err());
        assert!(c.set("couchdb", "max_document_size", "-1").is_err());
        assert!(c.set("a", "b", "x\ny").is_err());
        c.set("cors", "origins", "http://a, http://b").unwrap();
        let again = Config::load(dir.path()).unwrap();
        assert!(again.settings().delayed_commits);
        assert_eq!(again.settings().cors.origins, vec!["http://a", "http://b"]);
        assert_eq!(
            again
                .delete("couchdb", "delayed_commits")
                .unwrap()
                .as_deref(),
            Some("true")
        );
        assert!(!again.settings().delayed_commits);
    }
}
