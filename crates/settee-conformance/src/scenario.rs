//! Scenario files: the parser of the request-script format.
//!
//! A file (`scenarios/<area>.scn`) holds scenarios; each is a sequence of
//! requests run in order against one server, in a fresh database `${db}`.
//!
//! ```text
//! # a comment
//! === docs.put.new  A new document, then read back
//! @nodb                          (no per-scenario database)
//! PUT /${db}/doc1 {"a":1}        METHOD PATH [BODY: the rest of the line]
//!   header If-Match: ${1.rev}    indented lines modify the request above
//! GET /${db}/doc1?rev=${1.rev}
//! ```
//!
//! Modifiers: `header Name: value`, `raw "json string"` (the exact body),
//! `base64 "AAEC/w=="` (the exact body as bytes, for binary uploads),
//! `chunked`, `gzip` (compress the body), `noauth`, `auth user:pass`,
//! `no-content-type`, `no-accept`, `keep Header-Name` (also compare that
//! header), `exact Header-Name` (compare that header without the `{etag}`
//! placeholder: an attachment's ETag is its digest; `X-Couch-Request-ID`
//! by its value), `present Header-Name` (compare only whether that header
//! is there: a value neither side can match, e.g. a time), `ignore PATH` (do not compare that body path: a value neither
//! side can match; `ignore PATH?`: nor whether it is there at all),
//! `sleep MS` (wait before sending).
//!
//! Invariant: parsing is total — every malformed line is an error naming
//! its file and line, never a silently dropped request.

use std::path::Path;

use thiserror::Error;

/// A parse error, with where it happened.
#[derive(Debug, Error)]
#[error("{file}:{line}: {msg}")]
pub struct ParseError {
    pub file: String,
    pub line: usize,
    pub msg: String,
}

/// How a request authenticates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    /// The server admin the harness was given.
    Admin,
    /// No `Authorization` header.
    None,
    /// Basic with these credentials (`user:pass`).
    Basic(String),
}

/// One request of a scenario (its text still holds `${...}` templates).
#[derive(Debug, Clone)]
pub struct Step {
    pub method: String,
    pub path: String,
    pub body: Option<String>,
    /// The body as bytes (`base64`), sent as is instead of `body`.
    pub bytes: Option<Vec<u8>>,
    pub headers: Vec<(String, String)>,
    pub auth: Auth,
    pub chunked: bool,
    pub gzip: bool,
    pub content_type: bool,
    pub accept: bool,
    pub keep_headers: Vec<String>,
    /// Headers compared without the `{etag}` placeholder (lowercase).
    pub exact_headers: Vec<String>,
    /// Headers compared by presence only (lowercase).
    pub present_headers: Vec<String>,
    pub ignore: Vec<String>,
    pub sleep_ms: u64,
    /// The request line as written, for reports and goldens.
    pub text: String,
}

/// A scenario: an id unique across all files, a title, its requests.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub id: String,
    pub area: String,
    pub title: String,
    pub nodb: bool,
    pub steps: Vec<Step>,
    /// A hash of the scenario's text: a golden recorded from other text is stale.
    pub hash: String,
}

const METHODS: &[&str] = &[
    "GET", "HEAD", "PUT", "POST", "DELETE", "COPY", "OPTIONS", "PATCH", "TRACE", "PROPFIND",
];

/// Parses one scenario file's text; `area` names the file.
pub fn parse(area: &str, file: &str, text: &str) -> Result<Vec<Scenario>, ParseError> {
    let err = |line: usize, msg: String| ParseError {
        file: file.to_string(),
        line,
        msg,
    };
    let mut out: Vec<Scenario> = Vec::new();
    let mut raw_text = String::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let trimmed = line.trim_end();
        if trimmed.trim_start().starts_with('#') || trimmed.trim().is_empty() {
            continue;
        }
        if let Some(rest) = trimmed.strip_prefix("=== ") {
            finish(&mut out, &mut raw_text);
            let rest = rest.trim();
            let (id, title) = match rest.split_once(char::is_whitespace) {
                Some((id, title)) => (id, title.trim()),
                None => (rest, ""),
            };
            if id.is_empty()
                || !id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
            {
                return Err(err(n, format!("bad scenario id {id:?}")));
            }
            out.push(Scenario {
                id: id.to_string(),
                area: area.to_string(),
                title: title.to_string(),
                nodb: false,
                steps: Vec::new(),
                hash: String::new(),
            });
            raw_text.push_str(trimmed);
            raw_text.push('\n');
            continue;
        }
        let Some(sc) = out.last_mut() else {
            return Err(err(n, "text before the first `=== id` line".into()));
        };
        raw_text.push_str(trimmed);
        raw_text.push('\n');
        if trimmed == "@nodb" {
            sc.nodb = true;
            continue;
        }
        if let Some(m) = trimmed.strip_prefix("  ") {
            let Some(step) = sc.steps.last_mut() else {
                return Err(err(n, "a modifier before any request".into()));
            };
            modifier(step, m.trim()).map_err(|m| err(n, m))?;
            continue;
        }
        let (method, rest) = trimmed.split_once(' ').unwrap_or((trimmed, ""));
        if !METHODS.contains(&method) {
            return Err(err(
                n,
                format!("expected METHOD PATH [BODY], got {trimmed:?}"),
            ));
        }
        let (path, body) = match rest.split_once(' ') {
            Some((p, b)) => (p, Some(b.to_string())),
            None => (rest, None),
        };
        if !path.starts_with('/') && path != "*" {
            return Err(err(n, format!("path must start with /: {path:?}")));
        }
        sc.steps.push(Step {
            method: method.to_string(),
            path: path.to_string(),
            body,
            bytes: None,
            headers: Vec::new(),
            auth: Auth::Admin,
            chunked: false,
            gzip: false,
            content_type: true,
            accept: true,
            keep_headers: Vec::new(),
            exact_headers: Vec::new(),
            present_headers: Vec::new(),
            ignore: Vec::new(),
            sleep_ms: 0,
            text: trimmed.to_string(),
        });
    }
    finish(&mut out, &mut raw_text);
    for sc in &out {
        if sc.steps.is_empty() {
            return Err(err(0, format!("scenario {} has no request", sc.id)));
        }
    }
    Ok(out)
}

fn finish(out: &mut [Scenario], raw: &mut String) {
    if let Some(sc) = out.last_mut() {
        if sc.hash.is_empty() {
            sc.hash = format!("{:016x}", xxhash_rust::xxh3::xxh3_64(raw.as_bytes()));
        }
    }
    raw.clear();
}

fn modifier(step: &mut Step, m: &str) -> Result<(), String> {
    let (word, arg) = m.split_once(' ').unwrap_or((m, ""));
    let arg = arg.trim();
    match word {
        "header" => {
            let (k, v) = arg
                .split_once(':')
                .ok_or_else(|| format!("header needs `Name: value`, got {arg:?}"))?;
            step.headers
                .push((k.trim().to_string(), v.trim().to_string()));
        }
        "raw" => {
            let s: String = serde_json::from_str(arg)
                .map_err(|e| format!("raw needs a JSON string literal: {e}"))?;
            step.body = Some(s);
        }
        "base64" => {
            use base64::Engine as _;
            let s: String = serde_json::from_str(arg)
                .map_err(|e| format!("base64 needs a JSON string literal: {e}"))?;
            let b = base64::engine::general_purpose::STANDARD
                .decode(s)
                .map_err(|e| format!("base64 needs base64 data: {e}"))?;
            step.body = Some(String::new());
            step.bytes = Some(b);
        }
        "chunked" => step.chunked = true,
        "gzip" => step.gzip = true,
        "noauth" => step.auth = Auth::None,
        "auth" => step.auth = Auth::Basic(arg.to_string()),
        "no-content-type" => step.content_type = false,
        "no-accept" => step.accept = false,
        "keep" => step.keep_headers.push(arg.to_ascii_lowercase()),
        "exact" => step.exact_headers.push(arg.to_ascii_lowercase()),
        "present" => step.present_headers.push(arg.to_ascii_lowercase()),
        "ignore" => step.ignore.push(arg.to_string()),
        "sleep" => {
            step.sleep_ms = arg
                .parse()
                .map_err(|_| format!("sleep needs milliseconds, got {arg:?}"))?
        }
        _ => return Err(format!("unknown modifier {word:?}")),
    }
    Ok(())
}

/// Every scenario of every `*.scn` file in `dir`, in file-name order.
/// Ids must be unique.
pub fn load_dir(dir: &Path) -> Result<Vec<Scenario>, ParseError> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| ParseError {
            file: dir.display().to_string(),
            line: 0,
            msg: e.to_string(),
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "scn"))
        .collect();
    files.sort();
    let mut all: Vec<Scenario> = Vec::new();
    for f in files {
        let area = f
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("")
            .to_string();
        let text = std::fs::read_to_string(&f).map_err(|e| ParseError {
            file: f.display().to_string(),
            line: 0,
            msg: e.to_string(),
        })?;
        let scs = parse(&area, &f.display().to_string(), &text)?;
        for sc in scs {
            if all.iter().any(|o| o.id == sc.id) {
                return Err(ParseError {
                    file: f.display().to_string(),
                    line: 0,
                    msg: format!("duplicate scenario id {}", sc.id),
                });
            }
            all.push(sc);
        }
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_requests_modifiers_and_ids() {
        let text = "# c\n=== a.b  Title here\nPUT /${db}/x {\"a\": 1}\n  header If-Match: 1-x\n  noauth\nGET /${db}/x?rev=${1.rev}\n=== a.c\n@nodb\nGET /\n  raw \"a\\nb\"\n";
        let s = parse("a", "f", text).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].title, "Title here");
        assert_eq!(s[0].steps[0].body.as_deref(), Some("{\"a\": 1}"));
        assert_eq!(
            s[0].steps[0].headers,
            vec![("If-Match".into(), "1-x".into())]
        );
        assert_eq!(s[0].steps[0].auth, Auth::None);
        assert_eq!(s[0].steps[1].path, "/${db}/x?rev=${1.rev}");
        assert!(s[1].nodb);
        assert_eq!(s[1].steps[0].body.as_deref(), Some("a\nb"));
        assert_ne!(s[0].hash, s[1].hash);
    }

    #[test]
    fn binary_bodies_and_exact_headers() {
        let text = "=== a.b\nPUT /${db}/d/x\n  base64 \"AAEC/w==\"\n  exact ETag\n";
        let s = parse("a", "f", text).unwrap();
        assert_eq!(s[0].steps[0].bytes.as_deref(), Some(&[0u8, 1, 2, 255][..]));
        assert_eq!(s[0].steps[0].exact_headers, vec!["etag".to_string()]);
        assert!(parse("a", "f", "=== x\nPUT /\n  base64 \"!!\"\n").is_err());
    }

    #[test]
    fn rejects_malformed_lines() {
        assert!(parse("a", "f", "GET /\n").is_err());
        assert!(parse("a", "f", "=== x\nFETCH /\n").is_err());
        assert!(parse("a", "f", "=== x\nGET nope\n").is_err());
        assert!(parse("a", "f", "=== x\nGET /\n  bogus\n").is_err());
        assert!(parse("a", "f", "=== x\n").is_err());
    }
}
