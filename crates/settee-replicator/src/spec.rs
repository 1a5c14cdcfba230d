//! A replication's definition: the JSON body of `POST /_replicate` (or a
//! `_replicator` document) checked and turned into a [`Spec`], with
//! CouchDB's error reasons for what it refuses.
//!
//! Endpoints are URLs (credentials in the URL, in `auth.basic`, or any
//! header in `headers`) or, for `_replicate`, names of databases on this
//! server ([`Local`]: the server's own URL and the requester's
//! credentials, as CouchDB 3 turns local names into URLs).
//!
//! Invariant: a [`Spec`] is fully validated; the job never meets a bad
//! option at run time. Credentials are kept out of every message.

use std::time::Duration;

use serde_json::{Map, Value};
use settee_client::{ChangesFilter, Credentials};

use crate::rep_id::{EndpointInfo, FilterPart};
use crate::RepError;

/// How local database names become endpoints.
#[derive(Debug, Clone)]
pub struct Local {
    /// This server's URL as the replicator reaches it (`http://127.0.0.1:P`).
    pub base: url::Url,
    /// The requester's credentials, forwarded to the local endpoints.
    pub credentials: Option<Credentials>,
    /// The requester's authentication headers (Authorization, Cookie,
    /// proxy headers), forwarded to local endpoints but not part of the
    /// replication id (a session cookie changes; the replication does not).
    pub headers: Vec<(String, String)>,
    /// The requester's name (for the replication id).
    pub user: Option<String>,
}

/// One end of a replication.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// The database URL, without credentials.
    pub url: url::Url,
    pub name: String,
    pub credentials: Option<Credentials>,
    /// The endpoint's own headers (part of the replication id).
    pub headers: Vec<(String, String)>,
    /// Headers forwarded from the requester to a local endpoint.
    pub forwarded: Vec<(String, String)>,
    /// The user named by the endpoint (for the replication id).
    pub user: Option<String>,
}

impl Endpoint {
    /// The URL as CouchDB shows it: no credentials, a trailing slash.
    pub fn display(&self) -> String {
        let mut s = settee_client::display_url(&self.url);
        if !s.ends_with('/') {
            s.push('/');
        }
        s
    }

    pub fn info(&self) -> EndpointInfo {
        EndpointInfo::new(&self.url, self.user.as_deref(), &self.headers)
    }
}

/// The filter a replication applies to the source's changes.
#[derive(Debug, Clone)]
pub enum Filter {
    None,
    DocIds(Vec<String>),
    Selector(Value),
    /// `DDOC/NAME` (or `_view` with `query_params.view`), with its
    /// `query_params`.
    Named {
        name: String,
        query_params: Map<String, Value>,
    },
}

impl Filter {
    /// The source `_changes` filter.
    pub fn changes(&self) -> Option<ChangesFilter> {
        match self {
            Filter::None => None,
            Filter::DocIds(ids) => Some(ChangesFilter::DocIds(ids.clone())),
            Filter::Selector(s) => Some(ChangesFilter::Selector(s.clone())),
            Filter::Named { name, query_params } => Some(ChangesFilter::Named {
                name: name.clone(),
                params: query_pairs(query_params),
            }),
        }
    }

    /// What the filter adds to the replication id (`code`: a JavaScript
    /// filter's source, fetched from the source's design document).
    pub fn id_part(&self, code: Option<&str>) -> FilterPart {
        match self {
            Filter::None => FilterPart::None,
            Filter::DocIds(ids) => FilterPart::DocIds(ids.clone()),
            Filter::Selector(s) => FilterPart::Selector(s.clone()),
            Filter::Named { name, query_params } if name == "_view" => FilterPart::View {
                name: name.clone(),
                query_params: Value::Object(query_params.clone()),
            },
            Filter::Named { query_params, .. } => FilterPart::Code {
                code: code.unwrap_or_default().to_string(),
                query_params: Value::Object(query_params.clone()),
            },
        }
    }
}

/// A validated replication.
#[derive(Debug, Clone)]
pub struct Spec {
    pub source: Endpoint,
    pub target: Endpoint,
    pub continuous: bool,
    pub create_target: bool,
    /// Query parameters of the target's creation (`q`, `partitioned`…).
    pub create_target_params: Vec<(String, String)>,
    pub cancel: bool,
    /// `replication_id` given to cancel a job by its id.
    pub replication_id: Option<String>,
    pub filter: Filter,
    pub since_seq: Option<Value>,
    pub use_checkpoints: bool,
    pub checkpoint_interval: Duration,
    pub worker_batch_size: usize,
    pub connection_timeout: Duration,
    pub retries_per_request: u32,
    pub http_connections: usize,
    pub use_bulk_get: bool,
    pub winning_revs_only: bool,
}

/// Largest `worker_batch_size` accepted (documents per write).
pub const BATCH_MAX: usize = 10_000;

/// An object's members as query parameters: strings as they are, other
/// values as JSON.
fn query_pairs(o: &Map<String, Value>) -> Vec<(String, String)> {
    o.iter()
        .map(|(k, v)| {
            let v = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (k.clone(), v)
        })
        .collect()
}

fn bad(reason: impl Into<String>) -> RepError {
    RepError::BadRequest(reason.into())
}

fn boolean(body: &Map<String, Value>, key: &str, default: bool) -> Result<bool, RepError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(bad(format!("parameter `{key}` must be a boolean"))),
    }
}

/// The options' types, checked in the body's order before anything else
/// (as CouchDB does): a flag must be a boolean and an object option an
/// object, `null` included.
fn check_types(body: &Map<String, Value>) -> Result<(), RepError> {
    const FLAGS: &[&str] = &[
        "cancel",
        "continuous",
        "create_target",
        "use_checkpoints",
        "use_bulk_get",
        "winning_revs_only",
    ];
    const OBJECTS: &[&str] = &["selector", "create_target_params"];
    for (k, v) in body {
        if FLAGS.contains(&k.as_str()) && !v.is_boolean() {
            return Err(bad(format!("parameter `{k}` must be a boolean")));
        }
        if OBJECTS.contains(&k.as_str()) && !v.is_object() {
            return Err(bad(format!("parameter `{k}` must be a JSON object")));
        }
    }
    Ok(())
}

fn integer(body: &Map<String, Value>, key: &str, default: u64, min: u64) -> Result<u64, RepError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => {
            let n = v
                .as_u64()
                .or_else(|| v.as_str().and_then(|s| s.parse().ok()));
            match n {
                Some(n) if n >= min => Ok(n),
                _ => Err(bad(format!(
                    "parameter `{key}` must be an integer of at least {min}"
                ))),
            }
        }
    }
}

fn endpoint(v: Option<&Value>, which: &str, local: Option<&Local>) -> Result<Endpoint, RepError> {
    let (url, headers, auth) = match v {
        None | Some(Value::Null) => {
            return Err(bad(format!("Missing replication {which}")));
        }
        Some(Value::String(s)) => (s.as_str(), Map::new(), None),
        Some(Value::Object(o)) => {
            let url = o.get("url").and_then(Value::as_str).ok_or_else(|| {
                RepError::InvalidReplication("endpoint has an invalid url".into())
            })?;
            let headers = match o.get("headers") {
                None | Some(Value::Null) => Map::new(),
                Some(Value::Object(h)) => h.clone(),
                Some(_) => return Err(bad(format!("`{which}` `headers` must be an object"))),
            };
            (url, headers, o.get("auth"))
        }
        Some(_) => return Err(bad(format!("`{which}` must be a URL or an object"))),
    };
    let headers: Vec<(String, String)> = headers
        .into_iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k, s)),
            _ => Err(bad(format!("`{which}` header `{k}` must be a string"))),
        })
        .collect::<Result<_, _>>()?;
    let is_url = url.starts_with("http://") || url.starts_with("https://");
    let mut forwarded = vec![];
    let (db_url, mut credentials, name, mut user) = if is_url {
        let (u, c, n) = settee_client::parse_db_url(url, "")
            .map_err(|e| bad(format!("invalid `{which}` URL: {e}")))?;
        let user = c.as_ref().map(|c| c.user.clone());
        (u, c, n, user)
    } else if url.contains("://") {
        return Err(bad(format!("`{which}` URL must use http or https")));
    } else {
        let local = local.ok_or(RepError::LocalEndpoint)?;
        let (u, _, n) = settee_client::parse_db_url(url, local.base.as_str())
            .map_err(|e| bad(format!("invalid `{which}` database name: {e}")))?;
        forwarded = local.headers.clone();
        (u, local.credentials.clone(), n, local.user.clone())
    };
    if let Some(auth) = auth {
        let basic = auth.get("basic").and_then(Value::as_object);
        if let Some(b) = basic {
            let get = |k: &str| b.get(k).and_then(Value::as_str).map(str::to_string);
            match (get("username"), get("password")) {
                (Some(u), Some(p)) => {
                    user = Some(u.clone());
                    credentials = Some(Credentials {
                        user: u,
                        password: p,
                    });
                }
                _ => {
                    return Err(bad(format!(
                        "`{which}` `auth.basic` needs `username` and `password`"
                    )))
                }
            }
        }
    }
    if user.is_none() {
        user = basic_user(&headers);
    }
    Ok(Endpoint {
        url: db_url,
        name,
        credentials,
        headers,
        forwarded,
        user,
    })
}

/// The user of an `Authorization: Basic` header, if one is given.
fn basic_user(headers: &[(String, String)]) -> Option<String> {
    use base64::Engine;
    let (_, v) = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("authorization"))?;
    let b64 = v
        .strip_prefix("Basic ")
        .or_else(|| v.strip_prefix("basic "))?;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .ok()?;
    let s = String::from_utf8(raw).ok()?;
    s.split_once(':').map(|(u, _)| u.to_string())
}

impl Spec {
    /// Checks a `_replicate` body. `local` resolves database names; without
    /// it (a `_replicator` document) a name is refused as CouchDB refuses it.
    pub fn parse(body: &Value, local: Option<&Local>) -> Result<Spec, RepError> {
        let body = body
            .as_object()
            .ok_or_else(|| bad("Request body must be a JSON object"))?;
        check_types(body)?;
        let cancel = boolean(body, "cancel", false)?;
        let replication_id = match body.get("replication_id") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => return Err(bad("parameter `replication_id` must be a string")),
        };
        let continuous = boolean(body, "continuous", false)?;
        let create_target = boolean(body, "create_target", false)?;
        let create_target_params = match body.get("create_target_params") {
            None | Some(Value::Null) => vec![],
            Some(Value::Object(o)) => query_pairs(o),
            Some(_) => {
                return Err(bad(
                    "parameter `create_target_params` must be a JSON object",
                ))
            }
        };
        let doc_ids = match body.get("doc_ids") {
            None | Some(Value::Null) => None,
            Some(Value::Array(a)) => Some(
                a.iter()
                    .map(|v| v.as_str().map(str::to_string))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| bad("parameter `doc_ids` must be an array of strings"))?,
            ),
            Some(_) => return Err(bad("parameter `doc_ids` must be an array")),
        };
        let selector = match body.get("selector") {
            None | Some(Value::Null) => None,
            Some(s @ Value::Object(_)) => Some(s.clone()),
            Some(_) => return Err(bad("parameter `selector` must be a JSON object")),
        };
        let filter_name = match body.get("filter") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => return Err(bad("parameter `filter` must be a string")),
        };
        let query_params = match body.get("query_params") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(o)) => o.clone(),
            Some(_) => return Err(bad("parameter `query_params` must be an object")),
        };
        let given = [doc_ids.is_some(), filter_name.is_some(), selector.is_some()];
        if given.iter().filter(|g| **g).count() > 1 {
            return Err(bad("`doc_ids`,`filter`,`selector` are mutually exclusive"));
        }
        let filter = match (doc_ids, selector, filter_name) {
            (Some(ids), _, _) => Filter::DocIds(ids),
            (_, Some(s), _) => Filter::Selector(s),
            (_, _, Some(name)) => {
                if name != "_view"
                    && name
                        .split_once('/')
                        .is_none_or(|(d, f)| d.is_empty() || f.is_empty())
                {
                    return Err(bad("Invalid filter. Must match `ddocname/filtername`."));
                }
                Filter::Named { name, query_params }
            }
            _ => Filter::None,
        };
        // A cancel by id needs no endpoints.
        let (source, target) = if cancel && replication_id.is_some() {
            let none = Endpoint {
                url: url::Url::parse("http://cancel.invalid/").map_err(|e| bad(e.to_string()))?,
                name: String::new(),
                credentials: None,
                headers: vec![],
                forwarded: vec![],
                user: None,
            };
            (none.clone(), none)
        } else {
            (
                endpoint(body.get("source"), "source", local)?,
                endpoint(body.get("target"), "target", local)?,
            )
        };
        let since_seq = body.get("since_seq").filter(|v| !v.is_null()).cloned();
        Ok(Spec {
            source,
            target,
            continuous,
            create_target,
            create_target_params,
            cancel,
            replication_id,
            filter,
            since_seq,
            use_checkpoints: boolean(body, "use_checkpoints", true)?,
            checkpoint_interval: Duration::from_millis(integer(
                body,
                "checkpoint_interval",
                30_000,
                1,
            )?),
            worker_batch_size: (integer(body, "worker_batch_size", 500, 0)? as usize)
                .clamp(1, BATCH_MAX),
            connection_timeout: Duration::from_millis(integer(
                body,
                "connection_timeout",
                30_000,
                1,
            )?),
            retries_per_request: integer(body, "retries_per_request", 5, 0)?.min(100) as u32,
            http_connections: (integer(body, "http_connections", 20, 1)? as usize).min(100),
            use_bulk_get: boolean(body, "use_bulk_get", true)?,
            winning_revs_only: boolean(body, "winning_revs_only", false)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn local() -> Local {
        Local {
            base: url::Url::parse("http://127.0.0.1:5984").unwrap(),
            credentials: Some(Credentials {
                user: "admin".into(),
                password: "pw".into(),
            }),
            headers: vec![],
            user: Some("admin".into()),
        }
    }

    #[test]
    fn urls_names_and_auth() {
        let s = Spec::parse(
            &json!({"source": "http://u:p@h:5984/a%2Fb", "target": {"url": "https://h2/t", "auth": {"basic": {"username": "x", "password": "y"}}, "headers": {"X-A": "1"}}}),
            Some(&local()),
        )
        .unwrap();
        assert_eq!(s.source.display(), "http://h:5984/a%2Fb/");
        assert_eq!(s.source.name, "a/b");
        assert_eq!(s.source.user.as_deref(), Some("u"));
        assert_eq!(
            s.target.credentials.as_ref().map(|c| c.user.as_str()),
            Some("x")
        );
        assert_eq!(s.target.headers, vec![("X-A".to_string(), "1".to_string())]);
        let l = Spec::parse(&json!({"source": "db1", "target": "db2"}), Some(&local())).unwrap();
        assert_eq!(l.source.display(), "http://127.0.0.1:5984/db1/");
        assert_eq!(l.target.user.as_deref(), Some("admin"));
        assert!(matches!(
            Spec::parse(&json!({"source": "db1", "target": "db2"}), None),
            Err(RepError::LocalEndpoint)
        ));
    }

    #[test]
    fn refusals() {
        let reason = |body: Value| match Spec::parse(&body, Some(&local())) {
            Err(RepError::BadRequest(r)) => r,
            other => panic!("{other:?}"),
        };
        assert_eq!(reason(json!([])), "Request body must be a JSON object");
        assert_eq!(
            reason(json!({"source": "a", "target": "b", "continuous": "yes"})),
            "parameter `continuous` must be a boolean"
        );
        assert_eq!(
            reason(json!({"source": "a", "target": "b", "doc_ids": "a"})),
            "parameter `doc_ids` must be an array"
        );
        assert_eq!(
            reason(json!({"source": "a", "target": "b", "doc_ids": ["a"], "selector": {}})),
            "`doc_ids`,`filter`,`selector` are mutually exclusive"
        );
        assert!(reason(json!({"source": "ftp://x/y", "target": "b"})).contains("http"));
        assert!(reason(json!({"target": "b"})).contains("source"));
    }
}
