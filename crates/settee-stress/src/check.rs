//! Judging one response: is it what a CouchDB-compatible server may send?
//!
//! Rules (the contract the hostile runner enforces):
//! - A response the application produced (it carries `Server: Settee/…`,
//!   or any `Server` header when the target is another server) is either
//!   an error — status ≥ 400 with a JSON object body holding string
//!   `error` and `reason` members — or a success whose body, when the
//!   Content-Type says JSON, is JSON (newline-delimited JSON for
//!   continuous feeds). Bodies of HEAD, 204 and 304 are empty (the wire
//!   reader enforces that). A gzip-encoded body is inflated first
//!   (bounded).
//! - A response without a `Server` header and with an empty body is the
//!   HTTP layer refusing the bytes before any handler ran (hyper's
//!   400/408/413/414/431/501/505): acceptable as a protocol-level
//!   rejection. A 500 never is (hyper sends none): it is judged like any
//!   application error, e.g. the panic guard's `unknown_error`.
//! - The one documented non-JSON error: `GET /favicon.ico` is 404
//!   `text/plain` "Not found.", as from CouchDB.
//! - Any 500 is reported with its `error` name; only the names in
//!   [`DOCUMENTED_500`] (storage failures the error table documents) are
//!   not treated as bugs.

use std::io::Read;

use serde_json::Value;

use crate::wire::Response;

/// `error` names of 500s that Settee's error table documents as storage
/// failures (not caused by the request).
pub const DOCUMENTED_500: &[&str] = &[
    "storage_failed",
    "storage_error",
    "corrupt_record",
    "config_error",
];

/// `error` names of the 500s CouchDB (and Settee) answer when a design
/// document's functions fail: a language without a query server, a
/// JavaScript function out of time or memory or that does not compile, or
/// one that threw (validate functions report the exception's name, or
/// `unknown_error` for a thrown non-`Error`). The hostile run's design
/// documents do all of these on purpose; they are judged documented for
/// requests that run design functions (see [`runs_design_functions`]).
pub const DESIGN_FUNCTION_500: &[&str] = &[
    "unknown_query_language",
    "os_process_error",
    "compilation_error",
    "unknown_error",
    "Error",
    "TypeError",
    "ReferenceError",
    "RangeError",
    "SyntaxError",
    "InternalError",
    "EvalError",
    "URIError",
];

/// `error` names of the 500s `POST /_replicate` answers, as CouchDB does:
/// an endpoint database that does not exist (`db_not_found`) or a
/// replication that failed (`error`: an endpoint unreachable, a checkpoint
/// refused). Judged documented for requests to `/_replicate` only.
pub const REPLICATION_500: &[&str] = &["db_not_found", "error"];

/// Whether a request (its head) is a `POST /_replicate`.
pub fn is_replication(head: &[u8]) -> bool {
    let line_end = head.iter().position(|&b| b == b'\n').unwrap_or(head.len());
    let line = String::from_utf8_lossy(&head[..line_end]);
    line.split(' ')
        .nth(1)
        .is_some_and(|p| p.split('?').next() == Some("/_replicate"))
}

/// Whether a request (its head) may run design-document functions: a
/// design-document path (views, `_info`), a filtered `_changes`, or any
/// write to the run's JavaScript database (its validate functions).
pub fn runs_design_functions(head: &[u8]) -> bool {
    let line_end = head.iter().position(|&b| b == b'\n').unwrap_or(head.len());
    let line = String::from_utf8_lossy(&head[..line_end]);
    line.contains("/_design/")
        || line.contains("filter=")
        || ["-js/", "-js ", "-js?"].iter().any(|m| line.contains(m))
}

/// Most bytes a gzip response body may inflate to before it is judged.
const INFLATE_MAX: u64 = 256 << 20;

/// What the response is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// A success (status < 400) with a well-formed body.
    Success,
    /// A CouchDB-shaped error; the `error` member.
    CouchError(String),
    /// Refused by the HTTP layer before routing (no `Server` header).
    ProtocolReject,
    /// Not acceptable; why.
    Bad(String),
}

/// What the request looked like, as far as judging needs.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReqHint {
    /// The request was HEAD: there is no body.
    pub head: bool,
    /// `feed=continuous`: the body is newline-delimited JSON.
    pub continuous: bool,
    /// `/favicon.ico`: CouchDB answers 404 `text/plain` "Not found." (no
    /// icon to serve); Settee copies that on purpose.
    pub favicon: bool,
}

/// Judges `resp`.
pub fn verdict(resp: &Response, hint: ReqHint) -> Verdict {
    if resp.header("server").is_none() {
        // The HTTP layer's own refusals have empty bodies and are never
        // 500s; anything else without a Server header is judged as an
        // application answer (a handler that panicked is answered by the
        // panic guard, around the layer that adds the header).
        if resp.status >= 400 && resp.status != 500 && resp.body.is_empty() {
            return Verdict::ProtocolReject;
        }
        if resp.status < 400 {
            return Verdict::Bad(format!("status {} without a Server header", resp.status));
        }
    }
    let body = match resp.header("content-encoding").map(str::to_ascii_lowercase) {
        None => std::borrow::Cow::Borrowed(resp.body.as_slice()),
        Some(e) if e == "identity" => std::borrow::Cow::Borrowed(resp.body.as_slice()),
        Some(e) if e == "gzip" || e == "deflate" => match inflate(&resp.body, &e) {
            Ok(b) => std::borrow::Cow::Owned(b),
            Err(m) => return Verdict::Bad(format!("{e} body does not inflate: {m}")),
        },
        Some(e) => return Verdict::Bad(format!("unexpected Content-Encoding {e}")),
    };
    let ctype = resp
        .header("content-type")
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let is_json_type = ctype == "application/json";
    if resp.status >= 400 {
        if hint.head {
            // A HEAD answer has no body to judge.
            return Verdict::CouchError(String::new());
        }
        if hint.favicon && resp.status == 404 && ctype == "text/plain" {
            return Verdict::CouchError("(favicon: text/plain, as CouchDB)".into());
        }
        if !is_json_type {
            return Verdict::Bad(format!("error {} with Content-Type {ctype:?}", resp.status));
        }
        return match serde_json::from_slice::<Value>(&body) {
            Ok(Value::Object(m)) => match (m.get("error"), m.get("reason")) {
                (Some(Value::String(e)), Some(Value::String(_))) => Verdict::CouchError(e.clone()),
                _ => Verdict::Bad(format!(
                    "error {} body lacks string error/reason: {}",
                    resp.status,
                    preview(&body, 200)
                )),
            },
            Ok(_) => Verdict::Bad(format!("error {} body is not an object", resp.status)),
            Err(e) => Verdict::Bad(format!(
                "error {} body is not JSON ({e}): {}",
                resp.status,
                preview(&body, 200)
            )),
        };
    }
    if (300..400).contains(&resp.status) && resp.status != 304 && resp.header("location").is_none()
    {
        return Verdict::Bad(format!("redirect {} without Location", resp.status));
    }
    if is_json_type && !body.is_empty() {
        let whole = serde_json::from_slice::<serde::de::IgnoredAny>(&body).is_ok();
        let lines_ok = || {
            body.split(|&b| b == b'\n')
                .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
                .all(|l| serde_json::from_slice::<serde::de::IgnoredAny>(l).is_ok())
        };
        if !(whole || (hint.continuous && lines_ok())) {
            return Verdict::Bad(format!(
                "{} with a JSON Content-Type but a body that is not JSON: {}",
                resp.status,
                preview(&body, 200)
            ));
        }
    }
    Verdict::Success
}

fn inflate(body: &[u8], encoding: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let res = if encoding == "gzip" {
        flate2::read::GzDecoder::new(body)
            .take(INFLATE_MAX)
            .read_to_end(&mut out)
    } else {
        flate2::read::ZlibDecoder::new(body)
            .take(INFLATE_MAX)
            .read_to_end(&mut out)
    };
    res.map(|_| out).map_err(|e| e.to_string())
}

/// The first `max` bytes, printable (non-ASCII and control bytes escaped).
pub fn preview(bytes: &[u8], max: usize) -> String {
    let mut s: String = bytes
        .iter()
        .take(max)
        .flat_map(|&b| std::ascii::escape_default(b))
        .map(char::from)
        .collect();
    if bytes.len() > max {
        s.push_str(&format!("…(+{} bytes)", bytes.len() - max));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn design_function_requests_are_recognised() {
        assert!(runs_design_functions(
            b"GET /db/_design/d/_view/v HTTP/1.1\r\n"
        ));
        assert!(runs_design_functions(b"POST /stress-1-js?x=1 HTTP/1.1\r\n"));
        assert!(runs_design_functions(b"PUT /stress-1-js/d1 HTTP/1.1\r\n"));
        assert!(!runs_design_functions(b"PUT /stress-1-0/d1 HTTP/1.1\r\n"));
    }

    fn resp(status: u16, headers: &[(&str, &str)], body: &str) -> Response {
        Response {
            minor: 1,
            status,
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            body: body.as_bytes().to_vec(),
            close: false,
        }
    }

    const JSON: (&str, &str) = ("Content-Type", "application/json");
    const SERVER: (&str, &str) = ("Server", "Settee/0.1.0");

    #[test]
    fn judges_shapes() {
        let h = ReqHint::default();
        assert_eq!(
            verdict(
                &resp(
                    404,
                    &[SERVER, JSON],
                    r#"{"error":"not_found","reason":"missing"}"#
                ),
                h
            ),
            Verdict::CouchError("not_found".into())
        );
        assert!(matches!(
            verdict(&resp(400, &[SERVER, JSON], r#"{"error":"x"}"#), h),
            Verdict::Bad(_)
        ));
        assert!(matches!(
            verdict(
                &resp(500, &[SERVER, ("Content-Type", "text/plain")], "oops"),
                h
            ),
            Verdict::Bad(_)
        ));
        assert_eq!(verdict(&resp(400, &[], ""), h), Verdict::ProtocolReject);
        assert_eq!(
            verdict(
                &resp(
                    500,
                    &[JSON],
                    r#"{"error":"unknown_error","reason":"internal error"}"#
                ),
                h
            ),
            Verdict::CouchError("unknown_error".into())
        );
        assert!(matches!(verdict(&resp(200, &[], ""), h), Verdict::Bad(_)));
        assert!(matches!(
            verdict(&resp(404, &[SERVER, JSON], ""), h),
            Verdict::Bad(_)
        ));
        let head = ReqHint {
            head: true,
            ..ReqHint::default()
        };
        assert_eq!(
            verdict(&resp(404, &[SERVER, JSON], ""), head),
            Verdict::CouchError(String::new())
        );
        assert_eq!(
            verdict(&resp(200, &[SERVER, JSON], r#"{"ok":true}"#), h),
            Verdict::Success
        );
        assert!(matches!(
            verdict(&resp(200, &[SERVER, JSON], "{\"a\":1}\n{\"b\":2}\n"), h),
            Verdict::Bad(_)
        ));
        assert_eq!(
            verdict(
                &resp(200, &[SERVER, JSON], "{\"a\":1}\n{\"b\":2}\n"),
                ReqHint {
                    continuous: true,
                    ..ReqHint::default()
                }
            ),
            Verdict::Success
        );
    }

    #[test]
    fn previews_escape() {
        assert_eq!(preview(b"a\x00\xff", 10), "a\\x00\\xff");
        assert_eq!(preview(b"abcdef", 2), "ab…(+4 bytes)");
    }
}
