//! [`Db`]: a database URL, its credentials and typed calls on it.
//!
//! A database is named by a full URL (`http(s)://user:pass@host:port/db`)
//! or by a bare name resolved against a server URL. Database names may
//! contain `/`; it is percent-encoded as one path segment.

use bytes::Bytes;
use reqwest::Method;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::client::{Client, Credentials, Request, RetryPolicy};
use crate::error::Error;
use crate::types::{
    AllDocsPage, BulkDocsResult, BulkGetItem, BulkGetResponse, ChangesPage, DbInfo, RevsDiff,
};

/// A database on a CouchDB-compatible server.
#[derive(Debug, Clone)]
pub struct Db {
    client: Client,
    url: url::Url,
    credentials: Option<Credentials>,
    name: String,
    retry: RetryPolicy,
    headers: std::sync::Arc<[(String, String)]>,
}

/// The URL without user name and password.
pub fn display_url(url: &url::Url) -> String {
    let mut u = url.clone();
    let _ = u.set_username("");
    let _ = u.set_password(None);
    u.to_string()
}

fn invalid(url: &str, detail: impl Into<String>) -> Error {
    Error::InvalidUrl {
        url: url.to_string(),
        detail: detail.into(),
    }
}

/// Resolves `spec` — a full database URL, or a bare database name joined
/// to `server` — into the database URL (credentials removed), the
/// credentials found in it (or in `server`), and the database name.
pub fn parse_db_url(
    spec: &str,
    server: &str,
) -> Result<(url::Url, Option<Credentials>, String), Error> {
    let (mut url, name) = if spec.contains("://") {
        let url = url::Url::parse(spec).map_err(|e| invalid(spec, e.to_string()))?;
        let name = url
            .path_segments()
            .and_then(|mut s| s.rfind(|seg| !seg.is_empty()).map(str::to_string))
            .ok_or_else(|| invalid(spec, "no database name in the path"))?;
        let name = percent_encoding::percent_decode_str(&name)
            .decode_utf8_lossy()
            .into_owned();
        (url, name)
    } else {
        if spec.is_empty() {
            return Err(invalid(spec, "empty database name"));
        }
        let mut url =
            url::Url::parse(server).map_err(|e| invalid(server, format!("server URL: {e}")))?;
        url.path_segments_mut()
            .map_err(|_| invalid(server, "server URL cannot have a path"))?
            .pop_if_empty()
            .push(spec);
        (url, spec.to_string())
    };
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid(spec, "the scheme must be http or https"));
    }
    // A trailing slash would make relative paths resolve wrongly.
    if let Ok(mut segs) = url.path_segments_mut() {
        segs.pop_if_empty();
    }
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8_lossy()
            .into_owned()
    };
    let credentials = if !url.username().is_empty() {
        Some(Credentials {
            user: decode(url.username()),
            password: decode(url.password().unwrap_or("")),
        })
    } else {
        None
    };
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.set_query(None);
    url.set_fragment(None);
    Ok((url, credentials, name))
}

/// Options of a `_changes` request.
#[derive(Debug, Clone)]
pub struct ChangesQuery {
    pub since: Value,
    pub limit: Option<usize>,
    /// `style=all_docs`: every leaf revision, not only the winner.
    pub all_docs: bool,
    pub include_docs: bool,
    /// Wait up to this long for a change (`feed=longpoll`).
    pub longpoll_ms: Option<u64>,
    /// Only the changes this filter passes.
    pub filter: Option<ChangesFilter>,
}

/// The filters a replication can ask of a source's `_changes`.
#[derive(Debug, Clone)]
pub enum ChangesFilter {
    /// `filter=_doc_ids` with the ids in the body.
    DocIds(Vec<String>),
    /// `filter=_selector` with a Mango selector in the body.
    Selector(Value),
    /// `filter=DDOC/NAME` (a design document's JavaScript filter) with
    /// its query parameters.
    Named {
        name: String,
        params: Vec<(String, String)>,
    },
}

/// A sequence as a query-string value: strings as they are, numbers as JSON.
pub fn seq_param(seq: &Value) -> String {
    match seq {
        Value::String(s) => s.clone(),
        Value::Null => "0".into(),
        other => other.to_string(),
    }
}

impl Db {
    /// `spec` is a database URL or a bare name joined to `server`.
    pub fn new(client: Client, spec: &str, server: &str) -> Result<Db, Error> {
        let (url, credentials, name) = parse_db_url(spec, server)?;
        Ok(Db::from_parts(client, url, credentials, name))
    }

    /// A database from its parts: `url` without credentials.
    pub fn from_parts(
        client: Client,
        url: url::Url,
        credentials: Option<Credentials>,
        name: String,
    ) -> Db {
        let retry = client.options().retry;
        Db {
            client,
            url,
            credentials,
            name,
            retry,
            headers: std::sync::Arc::new([]),
        }
    }

    /// The same database with these headers sent on every request (an
    /// endpoint's `headers`, e.g. a cookie or a bearer token).
    pub fn with_headers(&self, headers: Vec<(String, String)>) -> Db {
        Db {
            headers: headers.into(),
            ..self.clone()
        }
    }

    /// The credentials sent with every request, if any.
    pub fn credentials(&self) -> Option<&Credentials> {
        self.credentials.as_ref()
    }

    /// The extra headers sent with every request.
    pub fn headers(&self) -> &[(String, String)] {
        &self.headers
    }

    /// The same database with another retry policy for its calls (e.g. a
    /// reader that answers stalls by shrinking its pages, not by resending).
    pub fn with_retry(&self, retry: RetryPolicy) -> Db {
        Db {
            retry,
            ..self.clone()
        }
    }

    pub fn retry(&self) -> RetryPolicy {
        self.retry
    }

    /// The database name (decoded).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The URL without credentials, for messages.
    pub fn display(&self) -> String {
        display_url(&self.url)
    }

    /// The URL without credentials.
    pub fn url(&self) -> &url::Url {
        &self.url
    }

    fn url_for(&self, path: &[&str], query: &[(&str, String)]) -> url::Url {
        let mut u = self.url.clone();
        if !path.is_empty() {
            if let Ok(mut segs) = u.path_segments_mut() {
                segs.extend(path);
            }
        }
        if !query.is_empty() {
            let mut q = u.query_pairs_mut();
            for (k, v) in query {
                q.append_pair(k, v);
            }
        }
        u
    }

    fn request(
        &self,
        method: Method,
        path: &[&str],
        query: &[(&str, String)],
        body: Option<Bytes>,
    ) -> Request {
        Request {
            method,
            url: self.url_for(path, query),
            body,
            credentials: self.credentials.clone(),
            retry: self.retry,
            timeout: None,
            headers: self.headers.clone(),
        }
    }

    async fn json<T: serde::de::DeserializeOwned>(&self, req: Request) -> Result<T, Error> {
        let (_, body) = self.client.send(&req).await?;
        serde_json::from_slice(&body).map_err(|e| Error::BadResponse {
            method: req.method.to_string(),
            url: display_url(&req.url),
            detail: e.to_string(),
        })
    }

    /// `GET /db`.
    pub async fn info(&self) -> Result<DbInfo, Error> {
        self.json(self.request(Method::GET, &[], &[], None)).await
    }

    /// `PUT /db`. An existing database is an error (412 `file_exists`).
    pub async fn create(&self) -> Result<(), Error> {
        self.create_with(&[]).await
    }

    /// `PUT /db?k=v…` (e.g. `q`, `partitioned`).
    pub async fn create_with(&self, params: &[(&str, String)]) -> Result<(), Error> {
        let req = self.request(Method::PUT, &[], params, None);
        self.client.send(&req).await.map(|_| ())
    }

    /// `GET /` of the server this database is on (its welcome object).
    pub async fn server_info(&self) -> Result<Value, Error> {
        let mut url = self.url.clone();
        if let Ok(mut segs) = url.path_segments_mut() {
            segs.pop();
            segs.push("");
        }
        let req = Request {
            url,
            ..self.request(Method::GET, &[], &[], None)
        };
        self.json(req).await
    }

    /// `DELETE /db`.
    pub async fn delete(&self) -> Result<(), Error> {
        let req = self.request(Method::DELETE, &[], &[], None);
        self.client.send(&req).await.map(|_| ())
    }

    /// One page of `_all_docs?include_docs=true`: up to `limit` rows with
    /// ids ≥ `start` (the caller drops the repeated first row).
    pub async fn all_docs(&self, start: Option<&str>, limit: usize) -> Result<AllDocsPage, Error> {
        let mut q = vec![
            ("include_docs", "true".to_string()),
            ("limit", limit.to_string()),
        ];
        if let Some(s) = start {
            q.push(("startkey", Value::String(s.to_string()).to_string()));
        }
        self.json(self.request(Method::GET, &["_all_docs"], &q, None))
            .await
    }

    /// One page of `_changes` (normal feed, or longpoll).
    pub async fn changes(&self, cq: &ChangesQuery) -> Result<ChangesPage, Error> {
        let mut q = vec![("since", seq_param(&cq.since))];
        if let Some(l) = cq.limit {
            q.push(("limit", l.to_string()));
        }
        if cq.all_docs {
            q.push(("style", "all_docs".into()));
        }
        if cq.include_docs {
            q.push(("include_docs", "true".into()));
        }
        let mut body = None;
        match &cq.filter {
            None => {}
            Some(ChangesFilter::DocIds(ids)) => {
                q.push(("filter", "_doc_ids".into()));
                body = Some(serde_json::json!({ "doc_ids": ids }));
            }
            Some(ChangesFilter::Selector(sel)) => {
                q.push(("filter", "_selector".into()));
                body = Some(serde_json::json!({ "selector": sel }));
            }
            Some(ChangesFilter::Named { name, params }) => {
                q.push(("filter", name.clone()));
                for (k, v) in params {
                    q.push((k.as_str(), v.clone()));
                }
            }
        }
        if let Some(ms) = cq.longpoll_ms {
            q.push(("feed", "longpoll".into()));
            q.push(("timeout", ms.to_string()));
        }
        let mut req = match body {
            Some(b) => {
                let b = serde_json::to_vec(&b).map_err(|e| Error::Config(e.to_string()))?;
                self.request(Method::POST, &["_changes"], &q, Some(b.into()))
            }
            None => self.request(Method::GET, &["_changes"], &q, None),
        };
        if let Some(ms) = cq.longpoll_ms {
            // The server holds the request for up to `ms`.
            req.timeout =
                Some(self.client.options().request_timeout + std::time::Duration::from_millis(ms));
        }
        self.json(req).await
    }

    /// `POST /db/_bulk_get` for (id, rev, atts_since) items; `revs` adds
    /// `_revisions`, `attachments` inlines attachment bodies (base64) but
    /// those of revisions up to an item's `atts_since` (stubs).
    pub async fn bulk_get(
        &self,
        items: &[BulkGetItem],
        revs: bool,
        attachments: bool,
    ) -> Result<BulkGetResponse, Error> {
        #[derive(serde::Serialize)]
        struct Body<'a> {
            docs: &'a [BulkGetItem],
        }
        let body =
            serde_json::to_vec(&Body { docs: items }).map_err(|e| Error::Config(e.to_string()))?;
        let mut q = vec![];
        if revs {
            q.push(("revs", "true".to_string()));
        }
        if attachments {
            q.push(("attachments", "true".to_string()));
        }
        self.json(self.request(Method::POST, &["_bulk_get"], &q, Some(body.into())))
            .await
    }

    /// Copies revision `rev` of document `id`, attachments included, to
    /// `target` without holding it in memory: `GET
    /// /db/ID?rev=R&revs=true&attachments=true&atts_since=[…]`
    /// (multipart/related where this server can send it, JSON otherwise)
    /// streamed as the body of `PUT target/ID?new_edits=false`. Attachments
    /// of revisions up to `atts_since` travel as stubs (the target has
    /// them). A transfer cut short is retried whole per the retry policy.
    pub async fn copy_revision(
        &self,
        target: &Db,
        id: &str,
        rev: &str,
        atts_since: &[String],
        timeout: std::time::Duration,
    ) -> Result<Value, Error> {
        let path: Vec<&str> = match id.strip_prefix("_design/") {
            Some(rest) => vec!["_design", rest],
            None => vec![id],
        };
        let mut q = vec![
            ("rev", rev.to_string()),
            ("revs", "true".to_string()),
            ("attachments", "true".to_string()),
        ];
        if !atts_since.is_empty() {
            q.push((
                "atts_since",
                serde_json::to_string(atts_since).map_err(|e| Error::Config(e.to_string()))?,
            ));
        }
        let mut get = self.request(Method::GET, &path, &q, None);
        get.timeout = Some(timeout);
        let mut put = target.request(
            Method::PUT,
            &path,
            &[("new_edits", "false".to_string())],
            None,
        );
        put.timeout = Some(timeout);
        let body = self
            .client
            .stream_copy(&get, "multipart/related, application/json", &put)
            .await?;
        serde_json::from_slice(&body).map_err(|e| Error::BadResponse {
            method: "PUT".into(),
            url: display_url(&put.url),
            detail: e.to_string(),
        })
    }

    /// `GET /db/ID?open_revs=[…]&revs=true` (JSON, not multipart): the
    /// per-document way to read given revisions, for servers without
    /// `_bulk_get` (CouchDB 1.x). Answers are in the `_bulk_get` shape;
    /// a missing revision becomes a `not_found` error entry.
    pub async fn open_revs(
        &self,
        id: &str,
        revs: &[String],
        attachments: bool,
    ) -> Result<Vec<crate::types::BulkGetDoc>, Error> {
        let mut q = vec![
            (
                "open_revs",
                serde_json::to_string(revs).map_err(|e| Error::Config(e.to_string()))?,
            ),
            ("revs", "true".to_string()),
        ];
        if attachments {
            q.push(("attachments", "true".to_string()));
        }
        // `_design/x` is one id but two path segments on the wire.
        let path: Vec<&str> = match id.strip_prefix("_design/") {
            Some(rest) => vec!["_design", rest],
            None => vec![id],
        };
        #[derive(serde::Deserialize)]
        struct Entry {
            #[serde(default)]
            ok: Option<Box<RawValue>>,
            #[serde(default)]
            missing: Option<String>,
        }
        let entries: Vec<Entry> = self
            .json(self.request(Method::GET, &path, &q, None))
            .await?;
        Ok(entries
            .into_iter()
            .map(|e| crate::types::BulkGetDoc {
                ok: e.ok,
                error: e.missing.map(|rev| {
                    serde_json::json!({"id": id, "rev": rev, "error": "not_found", "reason": "missing"})
                }),
            })
            .collect())
    }

    /// `POST /db/_bulk_docs` with documents given as raw JSON, sent as they
    /// are. `retry` overrides the client's policy (e.g. no retry of
    /// timeouts when the caller shrinks the batch instead).
    pub async fn bulk_docs<D: AsRef<RawValue>>(
        &self,
        docs: &[D],
        new_edits: bool,
        retry: Option<RetryPolicy>,
    ) -> Result<Vec<BulkDocsResult>, Error> {
        let len: usize = docs.iter().map(|d| d.as_ref().get().len() + 1).sum();
        let mut body = Vec::with_capacity(len + 40);
        body.extend_from_slice(if new_edits {
            b"{\"docs\":["
        } else {
            b"{\"new_edits\":false,\"docs\":["
        });
        for (i, d) in docs.iter().enumerate() {
            if i > 0 {
                body.push(b',');
            }
            body.extend_from_slice(d.as_ref().get().as_bytes());
        }
        body.extend_from_slice(b"]}");
        let mut req = self.request(Method::POST, &["_bulk_docs"], &[], Some(body.into()));
        if let Some(r) = retry {
            req.retry = r;
        }
        self.json(req).await
    }

    /// `POST /db/_revs_diff`: of the given revisions per id, those this
    /// database lacks (ids with nothing missing are absent from the map).
    pub async fn revs_diff(
        &self,
        revs: &std::collections::BTreeMap<&str, Vec<&str>>,
    ) -> Result<std::collections::HashMap<String, RevsDiff>, Error> {
        let body = serde_json::to_vec(revs).map_err(|e| Error::Config(e.to_string()))?;
        let v: std::collections::HashMap<String, RevsDiff> = self
            .json(self.request(Method::POST, &["_revs_diff"], &[], Some(body.into())))
            .await?;
        Ok(v.into_iter()
            .filter(|(_, m)| !m.missing.is_empty())
            .collect())
    }

    /// `GET /db/ID` (also `_design/NAME`); `None` when it does not exist.
    pub async fn get_doc(&self, id: &str) -> Result<Option<Value>, Error> {
        let path: Vec<&str> = match id.strip_prefix("_design/") {
            Some(name) => vec!["_design", name],
            None => vec![id],
        };
        match self
            .json::<Value>(self.request(Method::GET, &path, &[], None))
            .await
        {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `GET /db/_local/ID`; `None` when it does not exist.
    pub async fn get_local(&self, id: &str) -> Result<Option<Value>, Error> {
        match self
            .json::<Value>(self.request(Method::GET, &["_local", id], &[], None))
            .await
        {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `PUT /db/_local/ID`; returns the new `_rev`.
    pub async fn put_local(&self, id: &str, doc: &Value) -> Result<String, Error> {
        let body = serde_json::to_vec(doc).map_err(|e| Error::Config(e.to_string()))?;
        let v: Value = self
            .json(self.request(Method::PUT, &["_local", id], &[], Some(body.into())))
            .await?;
        Ok(v.get("rev")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_url_with_credentials() {
        let (u, c, n) = parse_db_url("https://ad%40m:p%3Ass@h:6984/my%2Fdb/", "").unwrap();
        assert_eq!(u.as_str(), "https://h:6984/my%2Fdb");
        let c = c.unwrap();
        assert_eq!((c.user.as_str(), c.password.as_str()), ("ad@m", "p:ss"));
        assert_eq!(n, "my/db");
    }

    #[test]
    fn bare_name_joins_server() {
        let (u, c, n) = parse_db_url("a/b", "http://u:p@127.0.0.1:5984/").unwrap();
        assert_eq!(u.as_str(), "http://127.0.0.1:5984/a%2Fb");
        assert_eq!(c.unwrap().user, "u");
        assert_eq!(n, "a/b");
        let (u, _, _) = parse_db_url("x", "http://h/prefix").unwrap();
        assert_eq!(u.as_str(), "http://h/prefix/x");
    }

    #[test]
    fn rejects_bad_urls() {
        assert!(parse_db_url("ftp://h/db", "").is_err());
        assert!(parse_db_url("http://h/", "").is_err());
        assert!(parse_db_url("", "http://h").is_err());
    }

    #[test]
    fn display_hides_password() {
        let u = url::Url::parse("http://a:secret@h/db").unwrap();
        assert_eq!(display_url(&u), "http://h/db");
    }
}
