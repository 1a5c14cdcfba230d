//! Running scenarios against a server: template substitution, the
//! per-scenario database, recording normalised responses.
//!
//! Invariant: each scenario starts from the same state on every server -- its
//! database `${db}` freshly created (unless `@nodb`) -- and leaves none of
//! its databases behind (every database whose name starts with `${db}` is
//! deleted afterwards).

use std::time::Duration;

use base64::Engine as _;
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use serde_json::Value;

use crate::http::{self, Request, Response};
use crate::normalize::{body_value, get_path, Normalizer};
use crate::scenario::{Auth, Scenario, Step};

/// A server to run against.
#[derive(Debug, Clone)]
pub struct Target {
    /// `host:port`.
    pub addr: String,
    /// The server admin (`user`, `password`).
    pub admin: (String, String),
}

impl Target {
    /// Parses `http://user:pass@host:port`.
    pub fn from_url(url: &str) -> Result<Target, String> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| format!("only http:// URLs: {url}"))?;
        let rest = rest.trim_end_matches('/');
        let (creds, addr) = rest.rsplit_once('@').ok_or_else(|| {
            format!("the URL needs admin credentials (http://user:pass@host:port): {url}")
        })?;
        let (u, p) = creds
            .split_once(':')
            .ok_or("credentials must be user:pass")?;
        Ok(Target {
            addr: addr.to_string(),
            admin: (u.to_string(), p.to_string()),
        })
    }

    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A plain admin request (set-up and clean-up).
    pub fn admin_request(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> Result<Response, String> {
        let mut headers = vec![
            ("Accept".to_string(), "application/json".to_string()),
            (
                "Authorization".to_string(),
                basic(&format!("{}:{}", self.admin.0, self.admin.1)),
            ),
        ];
        if body.is_some() {
            headers.push(("Content-Type".into(), "application/json".into()));
        }
        http::send(
            &self.addr,
            &Request {
                method: method.into(),
                target: path.into(),
                headers,
                body: body.map(|b| b.as_bytes().to_vec()),
                chunked: false,
            },
            Duration::from_secs(60),
        )
    }
}

fn basic(creds: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(creds)
    )
}

/// The database name of a scenario.
pub fn db_name(sc: &Scenario) -> String {
    let mut s = String::from("conf_");
    for c in sc.id.chars() {
        s.push(if c.is_ascii_alphanumeric() {
            c.to_ascii_lowercase()
        } else {
            '_'
        });
    }
    s
}

/// Runs one scenario; returns one normalised record per step.
pub fn run(t: &Target, sc: &Scenario) -> Result<Vec<Value>, String> {
    let db = db_name(sc);
    cleanup(t, &db)?;
    if !sc.nodb {
        let r = t.admin_request("PUT", &format!("/{db}"), None)?;
        if r.status != 201 {
            return Err(format!(
                "creating {db}: {} {}",
                r.status,
                String::from_utf8_lossy(&r.body)
            ));
        }
    }
    let result = run_steps(t, sc, &db);
    cleanup(t, &db)?;
    result
}

fn run_steps(t: &Target, sc: &Scenario, db: &str) -> Result<Vec<Value>, String> {
    let mut norm = Normalizer::new(&t.base());
    let mut raw: Vec<Response> = Vec::new();
    let mut out = Vec::new();
    for (i, step) in sc.steps.iter().enumerate() {
        if step.sleep_ms > 0 {
            std::thread::sleep(Duration::from_millis(step.sleep_ms));
        }
        let req = build(t, step, db, &raw).map_err(|e| format!("step {}: {e}", i + 1))?;
        let resp = http::send(&t.addr, &req, Duration::from_secs(60))
            .map_err(|e| format!("step {} ({}): {e}", i + 1, step.text))?;
        out.push(norm.record(
            &step.text,
            &resp,
            &step.keep_headers,
            &step.exact_headers,
            &step.present_headers,
            &step.ignore,
        ));
        raw.push(resp);
    }
    Ok(out)
}

fn build(t: &Target, step: &Step, db: &str, prev: &[Response]) -> Result<Request, String> {
    let path = subst(&step.path, db, &t.addr, prev)?;
    let mut headers: Vec<(String, String)> = Vec::new();
    if step.accept {
        headers.push(("Accept".into(), "application/json".into()));
    }
    match &step.auth {
        Auth::Admin => headers.push((
            "Authorization".into(),
            basic(&format!("{}:{}", t.admin.0, t.admin.1)),
        )),
        Auth::None => {}
        Auth::Basic(c) => {
            headers.push(("Authorization".into(), basic(&subst(c, db, &t.addr, prev)?)))
        }
    }
    let mut body = match (&step.bytes, &step.body) {
        (Some(b), _) => Some(b.clone()),
        (None, Some(b)) => Some(subst(b, db, &t.addr, prev)?.into_bytes()),
        (None, None) => None,
    };
    if body.is_some()
        && step.content_type
        && !step
            .headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
    {
        headers.push(("Content-Type".into(), "application/json".into()));
    }
    for (k, v) in &step.headers {
        let v = subst(v, db, &t.addr, prev)?;
        // A scenario's own header replaces a default of the same name.
        headers.retain(|(h, _)| !h.eq_ignore_ascii_case(k));
        headers.push((k.clone(), v));
    }
    if step.gzip {
        if let Some(b) = &body {
            body = Some(http::gzip(b));
            headers.push(("Content-Encoding".into(), "gzip".into()));
        }
    }
    Ok(Request {
        method: step.method.clone(),
        target: path,
        headers,
        body,
        chunked: step.chunked,
    })
}

/// Replaces `${db}`, `${host}` (the server's `host:port`, e.g. for a
/// `Referer`), `${N.path}`, `${N.h.Header}` and `${...|url}`.
fn subst(s: &str, db: &str, host: &str, prev: &[Response]) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("unclosed ${{ in {s:?}"))?;
        let expr = &after[..end];
        let (expr, url) = match expr.strip_suffix("|url") {
            Some(e) => (e, true),
            None => (expr, false),
        };
        let v = if expr == "db" {
            db.to_string()
        } else if expr == "host" {
            host.to_string()
        } else {
            let (n, path) = expr
                .split_once('.')
                .ok_or_else(|| format!("bad template ${{{expr}}}"))?;
            let n: usize = n
                .parse()
                .map_err(|_| format!("bad step number in ${{{expr}}}"))?;
            let r = prev
                .get(n.wrapping_sub(1))
                .ok_or_else(|| format!("${{{expr}}} names a step not yet run"))?;
            if let Some(h) = path.strip_prefix("h.") {
                r.header(h)
                    .ok_or_else(|| format!("${{{expr}}}: no header {h}"))?
                    .to_string()
            } else {
                let body = body_value(r);
                match get_path(&body, path) {
                    Some(Value::String(s)) => s.clone(),
                    Some(v) => v.to_string(),
                    None => return Err(format!("${{{expr}}}: no {path} in step {n}'s body")),
                }
            }
        };
        if url {
            out.push_str(&utf8_percent_encode(&v, NON_ALPHANUMERIC).to_string());
        } else {
            out.push_str(&v);
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Deletes every database whose name starts with `db`.
fn cleanup(t: &Target, db: &str) -> Result<(), String> {
    let r = t.admin_request("GET", "/_all_dbs", None)?;
    let all: Vec<String> = serde_json::from_slice(&r.body).map_err(|e| format!("_all_dbs: {e}"))?;
    for name in all.iter().filter(|n| n.starts_with(db)) {
        let enc = utf8_percent_encode(name, NON_ALPHANUMERIC).to_string();
        t.admin_request("DELETE", &format!("/{enc}"), None)?;
    }
    Ok(())
}
