//! One parsed request as handlers see it: method, headers, query
//! parameters, the requester, the settings snapshot, and a body that is
//! read at most once — bounded in size, in time and in JSON nesting.
//!
//! Invariants:
//! - No body is buffered beyond `max_http_request_size` (after
//!   decompression): such requests fail with 413 and change nothing.
//! - A body that takes longer than [`BODY_READ_TIMEOUT`] to arrive fails
//!   with 408 (slow clients cannot hold a handler forever).
//! - JSON deeper than [`MAX_JSON_DEPTH`] is refused before parsing (a
//!   `_bulk_docs` body read the plain way is shallow by construction and
//!   skips the scan).
//! - After the handler, [`Req::settle_body`] reads and drops what the
//!   handler left unread (bounded by [`DRAIN_MAX`] and [`DRAIN_TIMEOUT`]),
//!   so an error answered before the body arrived leaves the keep-alive
//!   connection usable; when it cannot, the response says
//!   `Connection: close` instead of the server silently closing a
//!   connection the client believes is reusable.
//! - Query values are decoded once; helpers turn malformed values into
//!   CouchDB's 400 `query_parse_error` instead of defaults.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body as HttpBody;
use axum::http::{header, HeaderMap, Method, Uri};
use bytes::Bytes;
use http_body_util::BodyExt;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use settee_core::doc::Body;
use settee_core::rev::Rev;
use settee_db::Durability;

use crate::auth::UserCtx;
use crate::config::Settings;
use crate::error::{ApiError, ApiResult};

/// Deepest JSON nesting accepted in a request body. CouchDB has no
/// documented limit (it takes 1000 levels); 127 levels is far beyond real
/// documents, stays within serde_json's own recursion limit (128), and keeps
/// recursive processing (rendering, collation, selectors) stack-safe.
pub const MAX_JSON_DEPTH: usize = 127;
/// Most bytes of an unread (or oversized) body read and dropped after the
/// response so that the connection stays reusable; beyond it, the
/// connection is closed.
pub const DRAIN_MAX: u64 = 1 << 20;
/// How long an unread body may take to drain.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(1);
/// Longest wait for a request body to arrive.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(60);

/// Decoded query parameters, in order.
#[derive(Debug, Clone, Default)]
pub struct Query(Vec<(String, String)>);

impl Query {
    pub fn from_pairs(pairs: Vec<(String, String)>) -> Query {
        Query(pairs)
    }

    /// The pairs encoded as a query string (without `?`).
    pub fn encode(&self) -> String {
        form_urlencoded::Serializer::new(String::new())
            .extend_pairs(self.0.iter())
            .finish()
    }

    pub fn parse(raw: Option<&str>) -> Query {
        match raw {
            Some(q) => Query(form_urlencoded::parse(q.as_bytes()).into_owned().collect()),
            None => Query(Vec::new()),
        }
    }

    /// The last value of `key` (CouchDB uses the last occurrence).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The first of several alias names present.
    pub fn get_any(&self, keys: &[&str]) -> Option<&str> {
        keys.iter().find_map(|k| self.get(k))
    }

    pub fn has(&self, key: &str) -> bool {
        self.0.iter().any(|(k, _)| k == key)
    }

    pub fn bool(&self, key: &str) -> ApiResult<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some("true") => Ok(Some(true)),
            Some("false") => Ok(Some(false)),
            Some(v) => Err(ApiError::query_parse(format!(
                "Invalid boolean parameter: \"{v}\""
            ))),
        }
    }

    pub fn flag(&self, key: &str) -> ApiResult<bool> {
        Ok(self.bool(key)?.unwrap_or(false))
    }

    pub fn u64(&self, key: &str) -> ApiResult<Option<u64>> {
        match self.get(key) {
            None => Ok(None),
            // CouchDB's wording: a negative integer is not a "positive
            // integer", anything else not an "integer".
            Some(v) => v.parse::<u64>().map(Some).map_err(|_| {
                if v.parse::<i64>().is_ok() {
                    ApiError::query_parse(format!("Invalid value for positive integer: \"{v}\""))
                } else {
                    ApiError::query_parse(format!("Invalid value for integer: \"{v}\""))
                }
            }),
        }
    }

    /// A JSON-encoded parameter (keys of `_all_docs`).
    pub fn json(&self, keys: &[&str]) -> ApiResult<Option<Value>> {
        match self.get_any(keys) {
            None => Ok(None),
            Some(v) => parse_json_bytes(v.as_bytes()).map(Some),
        }
    }

    /// `rev=` as a revision.
    /// `rev=`: every occurrence must be a revision (as CouchDB checks
    /// them); the last one counts.
    pub fn rev(&self) -> ApiResult<Option<Rev>> {
        let mut last = None;
        for v in self.all("rev") {
            last = Some(parse_rev(v)?);
        }
        Ok(last)
    }

    /// Every value of `key`, in order.
    pub fn all<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.0
            .iter()
            .filter(move |(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Whether any occurrence of `key` is `true` (CouchDB's document
    /// options add a flag for each `true` and ignore other values).
    pub fn any_true(&self, key: &str) -> bool {
        self.all(key).any(|v| v == "true")
    }

    pub fn pairs(&self) -> &[(String, String)] {
        &self.0
    }
}

pub fn parse_rev(s: &str) -> ApiResult<Rev> {
    s.parse::<Rev>()
        .map_err(|_| ApiError::bad_request("Invalid rev format"))
}

/// Parses `{"docid": ["rev", …], …}` (`_revs_diff`, `_missing_revs`,
/// `_purge`); `not_list` is the reason for a value that is no list.
pub fn parse_id_revs(
    body: Map<String, Value>,
    not_list: &'static str,
) -> ApiResult<Vec<(String, Vec<Rev>)>> {
    body.into_iter()
        .map(|(id, revs)| {
            let revs = revs
                .as_array()
                .ok_or_else(|| ApiError::bad_request(not_list))?
                .iter()
                .map(|r| {
                    r.as_str()
                        .ok_or_else(|| ApiError::bad_request("Invalid rev format"))
                        .and_then(parse_rev)
                })
                .collect::<ApiResult<Vec<Rev>>>()?;
            Ok((id, revs))
        })
        .collect()
}

/// Splits a `_local` document as sent into its `_rev` and its body (None
/// when `_deleted` is true); other special members are dropped.
pub fn local_parts(mut map: Map<String, Value>) -> ApiResult<(Option<String>, Option<Body>)> {
    let rev = match map.shift_remove("_rev") {
        Some(Value::String(s)) => Some(s),
        Some(Value::Null) | None => None,
        Some(_) => return Err(ApiError::bad_request("Invalid rev format")),
    };
    map.shift_remove("_id");
    map.shift_remove("_revisions");
    // CouchDB drops attachments of local documents without a word.
    map.shift_remove("_attachments");
    let deleted = matches!(map.shift_remove("_deleted"), Some(Value::Bool(true)));
    let body = if deleted {
        None
    } else {
        Some(Body::from_value(Value::Object(map))?)
    };
    Ok((rev, body))
}

/// The request as handlers see it.
pub struct Req {
    pub method: Method,
    /// The request target as sent (path and query, not decoded).
    pub uri: Uri,
    pub headers: HeaderMap,
    pub query: Query,
    pub user: UserCtx,
    pub settings: Arc<Settings>,
    /// The security object of the database the request is for, when the
    /// path names an existing database (set by the router).
    pub security: Option<Arc<settee_auth::SecurityObject>>,
    /// How the user was authenticated (`default`, `cookie`), if at all.
    pub auth_method: Option<&'static str>,
    /// The client's address.
    pub peer: Option<std::net::IpAddr>,
    /// In a mutex only so that `&Req` is `Sync` (handlers hold it across awaits);
    /// it is only ever accessed through `&mut self`, never locked concurrently.
    /// `None` once read (or abandoned).
    body: parking_lot::Mutex<Option<HttpBody>>,
    /// The body was dropped part-way (too large, too slow, broken): the
    /// connection cannot be reused.
    abandoned: bool,
    /// How many times `_rewrite` routed this request anew.
    pub rewrites: u32,
    /// The partition of a request routed from `/db/_partition/{p}/…`
    /// (see `routes::partition`).
    pub partition: Option<String>,
    /// Whether the request came from another node of the cluster (it
    /// carried the cluster's secret): it may name shard copies.
    pub internal: bool,
}

impl Req {
    pub fn new(
        method: Method,
        uri: Uri,
        headers: HeaderMap,
        query: Query,
        user: UserCtx,
        settings: Arc<Settings>,
        body: HttpBody,
    ) -> Req {
        Req {
            method,
            uri,
            headers,
            query,
            user,
            settings,
            security: None,
            auth_method: None,
            peer: None,
            body: parking_lot::Mutex::new(Some(body)),
            abandoned: false,
            rewrites: 0,
            partition: None,
            internal: false,
        }
    }

    /// Replaces the body still to be read (a rewrite that names one).
    pub fn replace_body(&mut self, bytes: Bytes) {
        *self.body.get_mut() = Some(HttpBody::from(bytes));
    }

    /// Called once the handler is done: drains what it left of the body.
    /// True when the connection can serve another request.
    pub async fn settle_body(&mut self) -> bool {
        let body = self.body.get_mut().take();
        !self.abandoned && drain_unread(body, &self.headers).await
    }

    pub fn header(&self, name: impl header::AsHeaderName) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Whether the body is declared as `media` (`type/subtype`, compared
    /// without its parameters and case).
    pub fn content_type_is(&self, media: &str) -> bool {
        self.header(header::CONTENT_TYPE).is_some_and(|ct| {
            ct.split(';')
                .next()
                .is_some_and(|t| t.trim().eq_ignore_ascii_case(media))
        })
    }

    /// 415 unless the body is declared as JSON.
    pub fn require_json_ctype(&self) -> ApiResult<()> {
        if self.content_type_is("application/json") {
            Ok(())
        } else {
            Err(ApiError::bad_ctype())
        }
    }

    /// The whole body, bounded by size and time.
    pub async fn body_bytes(&mut self) -> ApiResult<Bytes> {
        let limit = usize::try_from(self.settings.max_http_request_size).unwrap_or(usize::MAX);
        let declared = self
            .header(header::CONTENT_LENGTH)
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > self.settings.max_http_request_size) {
            // The body stays unread: `settle_body` drains a modestly
            // oversized one so the client gets the 413 on a live connection.
            return Err(ApiError::request_too_large());
        }
        let Some(body) = self.body.get_mut().take() else {
            return Ok(Bytes::new());
        };
        let limited = http_body_util::Limited::new(body, limit);
        let read = tokio::time::timeout(BODY_READ_TIMEOUT, limited.collect()).await;
        // A failed read leaves the body part-read.
        self.abandoned = !matches!(read, Ok(Ok(_)));
        match read {
            Err(_) => Err(ApiError::body_timeout()),
            Ok(Ok(collected)) => Ok(collected.to_bytes()),
            Ok(Err(e)) => {
                if is_length_limit(&*e) {
                    Err(ApiError::request_too_large())
                } else if e.to_string().contains("gzip") {
                    // The only decoder between the socket and here is gzip's.
                    Err(ApiError::bad_request(
                        "Request body is not properly gzipped.",
                    ))
                } else {
                    Err(ApiError::bad_request(format!(
                        "cannot read request body: {e}"
                    )))
                }
            }
        }
    }

    /// Hands the body to a streaming reader. The connection is not reused
    /// unless [`Req::body_finished`] says the body was read to its end.
    pub fn take_body(&mut self) -> Option<HttpBody> {
        self.abandoned = true;
        self.body.get_mut().take()
    }

    /// The body taken by [`Req::take_body`] was read to its end.
    pub fn body_finished(&mut self) {
        self.abandoned = false;
    }

    /// The body a frame at a time (never buffered whole), refusing more
    /// than `limit` bytes with `too_large` (also when `Content-Length`
    /// declares more). Each frame must arrive within [`BODY_READ_TIMEOUT`].
    /// The connection is reused only if [`Req::body_finished`] is called
    /// after the last frame.
    pub fn body_frames<F: Fn() -> ApiError>(
        &mut self,
        limit: u64,
        too_large: F,
    ) -> ApiResult<BodyFrames<F>> {
        let declared = self
            .header(header::CONTENT_LENGTH)
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > limit) {
            return Err(too_large());
        }
        Ok(BodyFrames {
            body: self.take_body(),
            total: 0,
            limit,
            too_large,
        })
    }

    /// The body parsed as JSON (any content type).
    pub async fn json_value(&mut self) -> ApiResult<Value> {
        let bytes = self.body_bytes().await?;
        parse_json_bytes(&bytes)
    }

    /// The body parsed as JSON into `T`, requiring a JSON content type.
    pub async fn json<T: DeserializeOwned>(&mut self) -> ApiResult<T> {
        let bytes = self.json_bytes().await?;
        serde_json::from_slice(&bytes).map_err(body_error)
    }

    /// The body of a JSON request as a JSON object, requiring a JSON
    /// content type; any other JSON value is CouchDB's 400 "Request body
    /// must be a JSON object".
    pub async fn json_object(&mut self) -> ApiResult<Map<String, Value>> {
        let bytes = self.json_bytes().await?;
        match parse_json_bytes(&bytes)? {
            Value::Object(m) => Ok(m),
            _ => Err(ApiError::bad_request("Request body must be a JSON object")),
        }
    }

    /// The body of a JSON request, checked for content type, size and
    /// nesting depth but not parsed (for callers that parse it lazily).
    pub async fn json_bytes(&mut self) -> ApiResult<Bytes> {
        let bytes = self.json_bytes_depth_unchecked().await?;
        check_depth(&bytes)?;
        Ok(bytes)
    }

    /// [`Req::json_bytes`] without the depth check: the caller runs
    /// [`check_depth`] itself before parsing anything that could nest
    /// deeper (`_bulk_docs` skips it for bodies it knows are shallow).
    pub async fn json_bytes_depth_unchecked(&mut self) -> ApiResult<Bytes> {
        self.require_json_ctype()?;
        self.body_bytes().await
    }

    /// The durability a write asks for: `batch=ok`, then the
    /// `X-Couch-Full-Commit` header, then the `delayed_commits` setting.
    pub fn durability(&self) -> Durability {
        // The first `batch` counts, as in CouchDB.
        if self.query.all("batch").next() == Some("ok") {
            return Durability::Batch;
        }
        self.commit_durability()
    }

    /// Full or delayed, ignoring `batch=ok` (which only single-document
    /// writes honour, as in CouchDB).
    pub fn commit_durability(&self) -> Durability {
        match self.header("x-couch-full-commit") {
            Some(v) if v.eq_ignore_ascii_case("true") => Durability::Full,
            Some(v) if v.eq_ignore_ascii_case("false") => Durability::Delayed,
            _ if self.settings.delayed_commits => Durability::Delayed,
            _ => Durability::Full,
        }
    }

    /// The client prefers JSON over multipart (open_revs).
    pub fn accepts_json(&self) -> bool {
        self.header(header::ACCEPT)
            .is_some_and(|a| a.contains("application/json"))
    }
}

/// A request body read a frame at a time ([`Req::body_frames`]).
pub struct BodyFrames<F> {
    body: Option<HttpBody>,
    total: u64,
    limit: u64,
    too_large: F,
}

impl<F: Fn() -> ApiError> BodyFrames<F> {
    /// The next frame's bytes; None at the end.
    pub async fn next(&mut self) -> ApiResult<Option<Bytes>> {
        let Some(body) = self.body.as_mut() else {
            return Ok(None);
        };
        loop {
            let frame = match tokio::time::timeout(BODY_READ_TIMEOUT, body.frame()).await {
                Err(_) => return Err(ApiError::body_timeout()),
                Ok(None) => return Ok(None),
                Ok(Some(Err(e))) => {
                    return Err(ApiError::bad_request(format!(
                        "cannot read request body: {e}"
                    )))
                }
                Ok(Some(Ok(f))) => f,
            };
            if let Ok(data) = frame.into_data() {
                self.total += data.len() as u64;
                if self.total > self.limit {
                    return Err((self.too_large)());
                }
                return Ok(Some(data));
            }
        }
    }
}

/// Reads and drops an unread request body, bounded by [`DRAIN_MAX`] and
/// [`DRAIN_TIMEOUT`]. True when the body ended (or there was none), i.e.
/// the connection is positioned at the next request.
pub async fn drain_unread(body: Option<HttpBody>, headers: &HeaderMap) -> bool {
    use http_body::Body as _;
    let Some(body) = body else { return true };
    if body.is_end_stream() {
        return true;
    }
    let get = |name| headers.get(name).and_then(|v| v.to_str().ok());
    // A client waiting for "100 Continue" has not sent the body; reading it
    // now would only ask for bytes nobody wants.
    if get(header::EXPECT).is_some_and(|v| v.eq_ignore_ascii_case("100-continue")) {
        return false;
    }
    if get(header::CONTENT_LENGTH)
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|n| n > DRAIN_MAX)
    {
        return false;
    }
    let limited = http_body_util::Limited::new(body, DRAIN_MAX as usize);
    matches!(
        tokio::time::timeout(DRAIN_TIMEOUT, limited.collect()).await,
        Ok(Ok(_))
    )
}

fn is_length_limit(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if err.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        cur = err.source();
    }
    false
}

/// Parses JSON text after the depth check.
/// A request body that is not the JSON the endpoint wants: 400
/// `bad_request` when it is JSON of the wrong shape, `invalid_json` else.
pub fn body_error(e: serde_json::Error) -> ApiError {
    if e.is_data() {
        ApiError::bad_request(format!("Invalid request body: {e}"))
    } else {
        ApiError::invalid_json()
    }
}

pub fn parse_json_bytes(bytes: &[u8]) -> ApiResult<Value> {
    check_depth(bytes)?;
    serde_json::from_slice(bytes).map_err(|_| ApiError::invalid_json())
}

/// Refuses JSON nested deeper than [`MAX_JSON_DEPTH`] (a linear scan that
/// skips string contents).
pub fn check_depth(bytes: &[u8]) -> ApiResult<()> {
    let mut depth = 0usize;
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'"' => {
                // Skip the string's contents at memchr speed: most of a
                // document's bytes are in strings.
                i += 1;
                loop {
                    let Some(rest) = bytes.get(i..) else {
                        return Ok(());
                    };
                    match memchr::memchr2(b'"', b'\\', rest) {
                        Some(j) if rest[j] == b'\\' => i += j + 2,
                        Some(j) => {
                            i += j + 1;
                            break;
                        }
                        // Unterminated: the parser reports it.
                        None => return Ok(()),
                    }
                }
                continue;
            }
            b'{' | b'[' => {
                depth += 1;
                if depth > MAX_JSON_DEPTH {
                    return Err(ApiError::bad_request(format!(
                        "JSON nested deeper than {MAX_JSON_DEPTH} levels"
                    )));
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_limit() {
        let ok = format!(
            "{}{}",
            "[".repeat(MAX_JSON_DEPTH),
            "]".repeat(MAX_JSON_DEPTH)
        );
        assert!(check_depth(ok.as_bytes()).is_ok());
        let deep = format!(
            "{}{}",
            "[".repeat(MAX_JSON_DEPTH + 1),
            "]".repeat(MAX_JSON_DEPTH + 1)
        );
        assert!(check_depth(deep.as_bytes()).is_err());
        let in_string = format!("\"{}\"", "[".repeat(1000));
        assert!(check_depth(in_string.as_bytes()).is_ok());
    }

    /// The byte-at-a-time scan the fast one must agree with.
    fn check_depth_slowly(bytes: &[u8]) -> bool {
        let (mut depth, mut in_str, mut esc) = (0usize, false, false);
        for &b in bytes {
            if in_str {
                if esc {
                    esc = false;
                } else if b == b'\\' {
                    esc = true;
                } else if b == b'"' {
                    in_str = false;
                }
                continue;
            }
            match b {
                b'"' => in_str = true,
                b'{' | b'[' => {
                    depth += 1;
                    if depth > MAX_JSON_DEPTH {
                        return false;
                    }
                }
                b'}' | b']' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        true
    }

    proptest::proptest! {
        #[test]
        fn depth_check_agrees_with_a_byte_scan(
            parts in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::strategy::Just("[".repeat(40)),
                    proptest::strategy::Just("{".to_string()),
                    proptest::strategy::Just("]".repeat(30)),
                    proptest::strategy::Just("}".to_string()),
                    proptest::strategy::Just("\"".to_string()),
                    proptest::strategy::Just("\\".to_string()),
                    "[a-z:, ]{0,5}",
                ],
                0..40,
            )
        ) {
            let text = parts.concat();
            proptest::prop_assert_eq!(
                check_depth(text.as_bytes()).is_ok(),
                check_depth_slowly(text.as_bytes()),
                "{}", text
            );
        }
    }

    #[test]
    fn query_helpers() {
        let q = Query::parse(Some("a=1&b=true&c=x&key=%22k%22&a=2"));
        assert_eq!(q.get("a"), Some("2"));
        assert_eq!(q.bool("b").unwrap(), Some(true));
        assert!(q.bool("c").is_err());
        assert_eq!(q.json(&["key"]).unwrap(), Some(Value::String("k".into())));
        assert!(q.u64("c").is_err());
    }
}
