//! Wire rendering: JSON responses, conditional GETs' 304 answers
//! (`If-None-Match` lists, `Content-Length: 0`), and CouchDB's document
//! JSON (stored documents from `settee_db::json`, `_local` documents here).
//!
//! Invariant: a stored [`Body`] is JSON object text and is spliced into the
//! output as it is — never parsed and re-serialized — after `_id` and `_rev`
//! and before the requested meta members (`_revisions`, `_conflicts`, …).

use axum::body::Body as HttpBody;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use settee_core::doc::Body;
use settee_db::json::push_body_members;
pub use settee_db::json::{doc_string, push_doc, push_rev, push_str, push_u64, Extras};

/// A JSON response from prepared text.
/// A JSON response; like CouchDB's, the body ends with a newline.
pub fn json_response(status: StatusCode, mut body: String) -> Response {
    body.push('\n');
    let mut resp = Response::new(HttpBody::from(body));
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("must-revalidate"),
    );
    resp
}

/// A JSON response from a serializable value.
pub fn json_value(status: StatusCode, v: &serde_json::Value) -> Response {
    json_response(status, v.to_string())
}

/// `"rev"` as an ETag header value.
pub fn etag(rev: &str) -> Option<HeaderValue> {
    HeaderValue::from_str(&format!("\"{rev}\"")).ok()
}

/// Whether an `If-None-Match` header names `tag` (a quoted ETag): the
/// header may list several, separated by commas.
pub fn none_match(if_none_match: Option<&str>, tag: &str) -> bool {
    if_none_match.is_some_and(|v| v.split(',').any(|t| t.trim() == tag))
}

/// The 304 answer to a conditional GET whose `If-None-Match` named `tag`:
/// no body, `Content-Length: 0` and the ETag, as CouchDB answers it.
pub fn not_modified(tag: &str) -> Response {
    let mut resp = Response::new(HttpBody::new(ZeroLength));
    *resp.status_mut() = StatusCode::NOT_MODIFIED;
    let h = resp.headers_mut();
    h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
    if let Ok(v) = HeaderValue::from_str(tag) {
        h.insert(header::ETAG, v);
    }
    resp
}

/// An empty body that says so by its size (exactly 0) rather than by
/// having ended: hyper sends the `Content-Length: 0` of a bodiless answer
/// (a 304) only for such a body, and drops it for one that has ended.
struct ZeroLength;

impl http_body::Body for ZeroLength {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
        std::task::Poll::Ready(None)
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(0)
    }
}

/// Renders a `_local` document.
pub fn push_local_doc(out: &mut String, id: &str, rev: &str, body: &Body) {
    push_local_doc_with(out, id, rev, body, false);
}

/// Renders a `_local` document (`rev` is `0-N`). With `revisions`, its
/// one-revision history as CouchDB shows it: `{"start":0,"ids":["N"]}`.
pub fn push_local_doc_with(out: &mut String, id: &str, rev: &str, body: &Body, revisions: bool) {
    out.push_str("{\"_id\":");
    push_str(out, id);
    out.push_str(",\"_rev\":");
    push_str(out, rev);
    push_body_members(out, body.as_str());
    if revisions {
        // Local revisions are `0-N`: CouchDB shows `N` as the one id.
        let n = rev.split_once('-').map_or(rev, |(_, n)| n);
        out.push_str(",\"_revisions\":{\"start\":0,\"ids\":[");
        push_str(out, n);
        out.push_str("]}");
    }
    out.push('}');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_local_docs() {
        let body = Body::from_stored(r#"{"a":1}"#.into());
        let mut s = String::new();
        push_local_doc(&mut s, "_local/x", "0-2", &body);
        assert_eq!(s, r#"{"_id":"_local/x","_rev":"0-2","a":1}"#);
        s.clear();
        push_local_doc_with(&mut s, "_local/x", "0-2", &body, true);
        let v: serde_json::Value = serde_json::from_str(&s).unwrap();
        assert_eq!(
            v["_revisions"],
            serde_json::json!({"start": 0, "ids": ["2"]})
        );
    }
}
