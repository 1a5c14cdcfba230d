//! Normalisation: a response becomes a comparable record, with the values
//! two correct servers cannot share replaced by placeholders.
//!
//! - Every run of exactly 32 hex digits (revision hashes, uuids, server
//!   uuid) becomes `#hN`, numbered by first appearance within the scenario,
//!   so equal hashes stay equal and different ones stay different.
//! - Sequence values (`seq`, `last_seq`, `update_seq`, `purge_seq`, …) that
//!   are strings `N-opaque` or `N` become `"seq:N"`; numbers stay numbers.
//! - `instance_start_time` and `sizes` become `"{volatile}"`; the server's
//!   own `http://host:port` becomes `{base}`; `X-Couch-Request-ID` and
//!   non-revision ETags become `{present}`/`{etag}` (unless the step says
//!   `exact ETag` or `exact X-Couch-Request-ID`), as does any header the
//!   step names with `present`.
//! - A multipart body (`Content-Type: multipart/…; boundary=…`) becomes
//!   `{"$multipart": [{"headers": {…}, "body": …}, …]}`, each part's body
//!   read like a whole body (nested multiparts too; a `Content-Encoding:
//!   gzip` part as `{"$gunzip": …}` of its decoded bytes), and every
//!   `boundary` parameter becomes `{boundary}`: boundaries are random.
//!   A body that is not UTF-8 becomes `{"$base64": "…"}`.
//!
//! Invariant: normalisation is a deterministic function of the responses
//! in order and both sides go through the same one; it never drops a field,
//! it only replaces values, so a missing or extra field is still a difference.

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::http::Response;

/// Headers compared by default (lowercase).
pub const COMPARED_HEADERS: &[&str] = &[
    "content-type",
    "location",
    "etag",
    "cache-control",
    "x-couch-request-id",
    "www-authenticate",
    "x-couch-update-newrev",
    "x-couch-id",
];

const SEQ_KEYS: &[&str] = &[
    "seq",
    "last_seq",
    "update_seq",
    "purge_seq",
    "committed_update_seq",
    "since",
];
const VOLATILE_KEYS: &[&str] = &["instance_start_time", "sizes"];

/// Per-scenario state: the placeholder numbering of hashes, the base URL.
#[derive(Debug)]
pub struct Normalizer {
    hashes: HashMap<String, usize>,
    base: String,
}

impl Normalizer {
    pub fn new(base: &str) -> Normalizer {
        Normalizer {
            hashes: HashMap::new(),
            base: base.to_string(),
        }
    }

    /// One step's record: `{req, status, headers, body}`.
    pub fn record(
        &mut self,
        req_text: &str,
        resp: &Response,
        keep: &[String],
        exact: &[String],
        present: &[String],
        ignore: &[String],
    ) -> Value {
        let mut headers = Map::new();
        let mut names: Vec<&str> = COMPARED_HEADERS.to_vec();
        names.extend(keep.iter().map(|s| s.as_str()));
        names.extend(exact.iter().map(|s| s.as_str()));
        names.extend(present.iter().map(|s| s.as_str()));
        for name in names {
            if let Some(v) = resp.header(name) {
                let v = without_boundary(v);
                let v = v.as_str();
                let is_exact = exact.iter().any(|e| e == name);
                let v = match name {
                    _ if present.iter().any(|p| p == name) => "{present}".to_string(),
                    "x-couch-request-id" if is_exact => v.to_string(),
                    "x-couch-request-id" => "{present}".to_string(),
                    "etag" if !is_exact => {
                        let n = self.string(v);
                        if n.contains("#h") {
                            n
                        } else {
                            "{etag}".to_string()
                        }
                    }
                    _ => self.string(v),
                };
                headers.insert(name.to_string(), Value::String(v));
            }
        }
        let mut body = body_value(resp);
        for p in ignore {
            if p == "body" {
                // The whole body (e.g. a configuration value's old value).
                body = Value::String("{ignored}".into());
                continue;
            }
            // `PATH?`: present or not (a member one server may leave out).
            let (p, optional) = match p.strip_suffix('?') {
                Some(p) => (p, true),
                None => (p.as_str(), false),
            };
            set_path(
                &mut body,
                p.strip_prefix("body.").unwrap_or(p),
                Value::String("{ignored}".into()),
                optional,
            );
        }
        let body = self.value(body, None);
        let mut rec = Map::new();
        rec.insert("req".into(), Value::String(req_text.to_string()));
        rec.insert("status".into(), Value::from(resp.status));
        rec.insert("headers".into(), Value::Object(headers));
        rec.insert("body".into(), body);
        Value::Object(rec)
    }

    fn value(&mut self, v: Value, key: Option<&str>) -> Value {
        match v {
            Value::String(s) => {
                if let Some(k) = key {
                    if SEQ_KEYS.contains(&k) {
                        if let Some(n) = seq_number(&s) {
                            return Value::String(format!("seq:{n}"));
                        }
                    }
                }
                Value::String(self.string(&s))
            }
            Value::Array(a) => Value::Array(a.into_iter().map(|x| self.value(x, None)).collect()),
            Value::Object(m) => {
                // Keys in sorted order, so numbering does not depend on the
                // order a server writes its fields in.
                let mut keys: Vec<String> = m.keys().cloned().collect();
                keys.sort();
                let mut m = m;
                let mut out = Map::new();
                for k in keys {
                    let x = m.remove(&k).unwrap_or(Value::Null);
                    let x = if VOLATILE_KEYS.contains(&k.as_str()) {
                        Value::String("{volatile}".into())
                    } else {
                        self.value(x, Some(&k))
                    };
                    out.insert(self.string(&k), x);
                }
                Value::Object(out)
            }
            other => other,
        }
    }

    /// Replaces 32-hex runs and the base URL inside any string.
    pub fn string(&mut self, s: &str) -> String {
        let s = if self.base.is_empty() {
            s.to_string()
        } else {
            s.replace(&self.base, "{base}")
        };
        let b = s.as_bytes();
        let mut out = String::with_capacity(s.len());
        let mut i = 0;
        let mut last = 0;
        while i < b.len() {
            if b[i].is_ascii_hexdigit() && (i == 0 || !b[i - 1].is_ascii_hexdigit()) {
                let mut j = i;
                while j < b.len() && b[j].is_ascii_hexdigit() {
                    j += 1;
                }
                if j - i == 32 {
                    out.push_str(&s[last..i]);
                    let h = s[i..j].to_ascii_lowercase();
                    let next = self.hashes.len() + 1;
                    let n = *self.hashes.entry(h).or_insert(next);
                    out.push_str(&format!("#h{n}"));
                    last = j;
                }
                i = j;
            } else {
                i += 1;
            }
        }
        out.push_str(&s[last..]);
        out
    }
}

fn seq_number(s: &str) -> Option<u64> {
    let digits = s.split('-').next()?;
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    if digits.len() != s.len() && !s[digits.len()..].starts_with('-') {
        return None;
    }
    digits.parse().ok()
}

/// The body as a value: JSON if it parses, newline-separated JSON as
/// `{"$lines": [...]}`, other text as `{"$text": "..."}`, bytes that are
/// not UTF-8 as `{"$base64": "..."}`, a multipart body as
/// `{"$multipart": [...]}` (see the module doc), empty as null.
pub fn body_value(resp: &Response) -> Value {
    bytes_value(resp.header("content-type"), &resp.body)
}

fn bytes_value(content_type: Option<&str>, body: &[u8]) -> Value {
    if body.is_empty() {
        return Value::Null;
    }
    if let Some(b) = content_type.and_then(boundary) {
        if content_type.is_some_and(|c| {
            c.trim_start()
                .to_ascii_lowercase()
                .starts_with("multipart/")
        }) {
            if let Some(v) = multipart(body, &b) {
                return v;
            }
            // Not well-formed: compared as text, the boundary replaced.
            let text = String::from_utf8_lossy(body).replace(&b, "{boundary}");
            return serde_json::json!({ "$text": text });
        }
    }
    let Ok(text) = std::str::from_utf8(body) else {
        use base64::Engine as _;
        return serde_json::json!({
            "$base64": base64::engine::general_purpose::STANDARD.encode(body)
        });
    };
    if let Ok(v) = serde_json::from_str::<Value>(text) {
        return v;
    }
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.len() > 1 {
        let parsed: Option<Vec<Value>> =
            lines.iter().map(|l| serde_json::from_str(l).ok()).collect();
        if let Some(p) = parsed {
            return serde_json::json!({ "$lines": p });
        }
    }
    serde_json::json!({ "$text": text })
}

/// The `boundary` parameter of a media type, unquoted.
fn boundary(content_type: &str) -> Option<String> {
    let (start, end) = boundary_span(content_type)?;
    Some(content_type[start..end].to_string())
}

/// Where the value of the `boundary` parameter is, without its quotes.
fn boundary_span(ct: &str) -> Option<(usize, usize)> {
    let lower = ct.to_ascii_lowercase();
    let mut from = 0;
    while let Some(i) = lower[from..].find("boundary=") {
        let at = from + i;
        let before = lower[..at].trim_end();
        from = at + 9;
        if !before.ends_with(';') {
            continue;
        }
        let rest = &ct[from..];
        if let Some(q) = rest.strip_prefix('"') {
            let end = q.find('"')?;
            return Some((from + 1, from + 1 + end));
        }
        let end = rest.find([';', ' ', '\t']).unwrap_or(rest.len());
        return Some((from, from + end));
    }
    None
}

/// A header value with its `boundary` parameter's value (quotes kept)
/// replaced by `{boundary}`.
fn without_boundary(v: &str) -> String {
    match boundary_span(v) {
        Some((s, e)) => format!("{}{{boundary}}{}", &v[..s], &v[e..]),
        None => v.to_string(),
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A multipart body (RFC 2046) as `{"$multipart": [{headers, body}]}`;
/// None if it is not well-formed (CRLF line ends, a closing delimiter).
fn multipart(body: &[u8], b: &str) -> Option<Value> {
    let delim = format!("--{b}");
    let d = delim.as_bytes();
    let close = format!("\r\n{delim}");
    let mut pos = if body.starts_with(d) {
        0
    } else {
        find(body, close.as_bytes())? + 2
    };
    let mut parts = Vec::new();
    loop {
        pos += d.len();
        let rest = &body[pos..];
        if rest.starts_with(b"--") {
            break;
        }
        // Transport padding, then the line end.
        let pad = rest
            .iter()
            .take_while(|c| **c == b' ' || **c == b'\t')
            .count();
        if !rest[pad..].starts_with(b"\r\n") {
            return None;
        }
        let start = pos + pad + 2;
        let end = start + find(&body[start..], close.as_bytes())?;
        parts.push(part(&body[start..end])?);
        pos = end + 2;
    }
    Some(serde_json::json!({ "$multipart": parts }))
}

fn part(p: &[u8]) -> Option<Value> {
    let (head, body) = if p.starts_with(b"\r\n") {
        (&p[..0], &p[2..])
    } else {
        let i = find(p, b"\r\n\r\n")?;
        (&p[..i], &p[i + 4..])
    };
    let mut raw: Vec<(String, &str)> = Vec::new();
    for line in std::str::from_utf8(head).ok()?.split("\r\n") {
        if line.is_empty() {
            continue;
        }
        let (k, v) = line.split_once(':')?;
        raw.push((k.trim().to_ascii_lowercase(), v.trim()));
    }
    let get = |n: &str| raw.iter().find(|(k, _)| k == n).map(|(_, v)| *v);
    let ct = get("content-type");
    let body = if get("content-encoding").is_some_and(|e| e.eq_ignore_ascii_case("gzip")) {
        use std::io::Read as _;
        let mut out = Vec::new();
        match flate2::read::GzDecoder::new(body).read_to_end(&mut out) {
            Ok(_) => serde_json::json!({ "$gunzip": bytes_value(ct, &out) }),
            Err(_) => bytes_value(None, body),
        }
    } else {
        bytes_value(ct, body)
    };
    let headers: Map<String, Value> = raw
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(without_boundary(v))))
        .collect();
    Some(serde_json::json!({ "headers": headers, "body": body }))
}

/// Sets the value at a dotted path (array indices as numbers), if present.
/// Replaces the value at a dotted path; with `insert`, a missing last member
/// of an existing object is added.
fn set_path(v: &mut Value, path: &str, new: Value, insert: bool) {
    let mut cur = v;
    let parts: Vec<&str> = path.split('.').collect();
    for (i, p) in parts.iter().enumerate() {
        if insert && i + 1 == parts.len() {
            if let Value::Object(m) = cur {
                m.insert((*p).to_string(), new);
                return;
            }
        }
        let next = match cur {
            Value::Object(m) => m.get_mut(*p),
            Value::Array(a) => p.parse::<usize>().ok().and_then(|n| a.get_mut(n)),
            _ => None,
        };
        let Some(n) = next else { return };
        if i + 1 == parts.len() {
            *n = new;
            return;
        }
        cur = n;
    }
}

/// The value at a dotted path (for `${N.path}` templates).
pub fn get_path<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = v;
    for p in path.split('.') {
        cur = match cur {
            Value::Object(m) => m.get(p)?,
            Value::Array(a) => a.get(p.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resp(body: &str) -> Response {
        Response {
            status: 200,
            headers: vec![(
                "etag".into(),
                "\"1-0123456789abcdef0123456789abcdef\"".into(),
            )],
            body: body.as_bytes().to_vec(),
        }
    }

    #[test]
    fn hashes_numbered_by_first_appearance_and_kept_apart() {
        let mut n = Normalizer::new("http://127.0.0.1:1");
        let r = n.record(
            "GET /",
            &resp(r#"{"rev":"1-0123456789abcdef0123456789abcdef","other":"2-ffffffffffffffffffffffffffffffff","last_seq":"12-g1AAAA","update_seq":7}"#),
            &[],
            &[],
            &[],
            &[],
        );
        assert_eq!(r["headers"]["etag"], "\"1-#h1\"");
        assert_eq!(r["body"]["rev"], "1-#h1");
        assert_eq!(r["body"]["other"], "2-#h2");
        assert_eq!(r["body"]["last_seq"], "seq:12");
        assert_eq!(r["body"]["update_seq"], 7);
    }

    #[test]
    fn present_and_exact_headers() {
        let mut n = Normalizer::new("");
        let mut r = resp("{}");
        r.headers.push(("x-couch-request-id".into(), "abc".into()));
        r.headers.push(("x-couchdb-body-time".into(), "3".into()));
        let plain = n.record("GET /", &r, &[], &[], &[], &[]);
        assert_eq!(plain["headers"]["x-couch-request-id"], "{present}");
        assert!(plain["headers"].get("x-couchdb-body-time").is_none());
        let named = n.record(
            "GET /",
            &r,
            &[],
            &["x-couch-request-id".into()],
            &["x-couchdb-body-time".into(), "x-missing".into()],
            &[],
        );
        assert_eq!(named["headers"]["x-couch-request-id"], "abc");
        assert_eq!(named["headers"]["x-couchdb-body-time"], "{present}");
        assert!(named["headers"].get("x-missing").is_none());
    }

    #[test]
    fn base_url_and_ignored_paths() {
        let mut n = Normalizer::new("http://127.0.0.1:1");
        let r = n.record(
            "GET /",
            &resp(r#"{"u":"http://127.0.0.1:1/db","t":5}"#),
            &[],
            &[],
            &[],
            &["body.t".into()],
        );
        assert_eq!(r["body"]["u"], "{base}/db");
        assert_eq!(r["body"]["t"], "{ignored}");
        // `PATH?` ignores a member whether it is there or not; plain `PATH`
        // leaves a missing one missing.
        let r = n.record(
            "GET /",
            &resp(r#"{"t":5}"#),
            &[],
            &[],
            &[],
            &["body.w?".into(), "body.x".into(), "body.t?".into()],
        );
        assert_eq!(r["body"]["w"], "{ignored}");
        assert_eq!(r["body"]["t"], "{ignored}");
        assert!(r["body"].get("x").is_none());
    }

    #[test]
    fn text_and_json_lines() {
        assert_eq!(
            body_value(&resp("a\nb")),
            serde_json::json!({"$text": "a\nb"})
        );
        assert_eq!(
            body_value(&resp("{\"a\":1}\n{\"b\":2}\n")),
            serde_json::json!({"$lines": [{"a":1},{"b":2}]})
        );
        assert_eq!(body_value(&resp("")), Value::Null);
        let mut r = resp("");
        r.body = vec![0, 1, 2, 255];
        assert_eq!(body_value(&r), serde_json::json!({"$base64": "AAEC/w=="}));
    }

    #[test]
    fn multipart_bodies_and_boundaries() {
        let b = "0123456789abcdef0123456789abcdef";
        let inner = "abc";
        let gz = crate::http::gzip(b"hi");
        let mut body = format!(
            "--{b}\r\nContent-Type: application/json\r\n\r\n{{\"_rev\":\"1-ffffffffffffffffffffffffffffffff\"}}\r\n--{b}\r\nContent-Type: multipart/related; boundary={inner}\r\n\r\n--{inner}\r\n\r\nx\r\n--{inner}--\r\n--{b}\r\nContent-Encoding: gzip\r\n\r\n"
        )
        .into_bytes();
        body.extend_from_slice(&gz);
        body.extend_from_slice(format!("\r\n--{b}\r\n\r\n").as_bytes());
        body.extend_from_slice(&[0, 255]);
        body.extend_from_slice(format!("\r\n--{b}--").as_bytes());
        let r = Response {
            status: 200,
            headers: vec![(
                "content-type".into(),
                format!("multipart/mixed; boundary=\"{b}\""),
            )],
            body,
        };
        let mut n = Normalizer::new("");
        let rec = n.record("GET /", &r, &[], &[], &[], &[]);
        assert_eq!(
            rec["headers"]["content-type"],
            "multipart/mixed; boundary=\"{boundary}\""
        );
        assert_eq!(
            rec["body"],
            serde_json::json!({"$multipart": [
                {"headers": {"content-type": "application/json"}, "body": {"_rev": "1-#h1"}},
                {"headers": {"content-type": "multipart/related; boundary={boundary}"},
                 "body": {"$multipart": [{"headers": {}, "body": {"$text": "x"}}]}},
                {"headers": {"content-encoding": "gzip"}, "body": {"$gunzip": {"$text": "hi"}}},
                {"headers": {}, "body": {"$base64": "AP8="}},
            ]})
        );
        // Not well-formed: text, the boundary replaced.
        let mut r = r;
        r.body = format!("--{b}\nno CRLF").into_bytes();
        assert_eq!(
            body_value(&r),
            serde_json::json!({"$text": "--{boundary}\nno CRLF"})
        );
    }
}
