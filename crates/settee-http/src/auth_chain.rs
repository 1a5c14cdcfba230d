//! Which authentication handlers run, and in which order: CouchDB's
//! `[chttpd] authentication_handlers`, e.g.
//! `{chttpd_auth, jwt_authentication_handler}, {chttpd_auth, cookie_authentication_handler}, {chttpd_auth, default_authentication_handler}`.
//!
//! Each handler looks at the request: it names the requester (the chain
//! stops there), refuses the request (an error), or passes it on; a request
//! no handler names is anonymous. `jwt` acts on `Authorization: Bearer`,
//! `proxy` on the proxy's user-name header, `cookie` on `AuthSession`,
//! `default` on HTTP Basic credentials.
//!
//! Invariants:
//! - The setting is read from the live configuration (CouchDB reads it
//!   only at start; Settee applies a change at once).
//! - Entries that name no handler Settee knows are skipped with a warning;
//!   a setting that names none at all (or is absent) means CouchDB's
//!   default, `cookie` then `default`.

/// One authentication handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handler {
    /// `jwt_authentication_handler`: a signed JSON Web Token.
    Jwt,
    /// `proxy_authentication_handler`: headers set by a trusted proxy.
    Proxy,
    /// `cookie_authentication_handler`: the `AuthSession` cookie.
    Cookie,
    /// `default_authentication_handler`: HTTP Basic credentials.
    Default,
}

impl Handler {
    /// The name `_session` reports (`info.authentication_handlers`,
    /// `info.authenticated`).
    pub fn name(self) -> &'static str {
        match self {
            Handler::Jwt => "jwt",
            Handler::Proxy => "proxy",
            Handler::Cookie => "cookie",
            Handler::Default => "default",
        }
    }

    fn from_function(function: &str) -> Option<Handler> {
        match function {
            "jwt_authentication_handler" => Some(Handler::Jwt),
            "proxy_authentication_handler" => Some(Handler::Proxy),
            "cookie_authentication_handler" => Some(Handler::Cookie),
            "default_authentication_handler" => Some(Handler::Default),
            _ => None,
        }
    }
}

/// CouchDB's default chain.
pub const DEFAULT_HANDLERS: [Handler; 2] = [Handler::Cookie, Handler::Default];

/// The handlers a setting names, in its order (see the module doc).
pub fn parse(setting: Option<&str>) -> Vec<Handler> {
    let mut out = Vec::new();
    for entry in setting.unwrap_or_default().split('}') {
        let entry = entry.trim_start_matches([',', ' ', '\t', '\n']).trim();
        if entry.is_empty() {
            continue;
        }
        let inner = entry.trim_start_matches('{');
        let mut parts = inner.split(',').map(str::trim);
        let (module, function) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        match Handler::from_function(function) {
            Some(h) if module == "chttpd_auth" || module == "couch_httpd_auth" => {
                if !out.contains(&h) {
                    out.push(h);
                }
            }
            _ => tracing::warn!(entry, "unknown authentication handler skipped"),
        }
    }
    if out.is_empty() {
        out.extend(DEFAULT_HANDLERS);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_couchdb_settings() {
        assert_eq!(parse(None), DEFAULT_HANDLERS);
        assert_eq!(parse(Some("")), DEFAULT_HANDLERS);
        assert_eq!(
            parse(Some("{chttpd_auth, cookie_authentication_handler}, {chttpd_auth, default_authentication_handler}")),
            DEFAULT_HANDLERS
        );
        assert_eq!(
            parse(Some(
                "{chttpd_auth, jwt_authentication_handler}, {chttpd_auth, proxy_authentication_handler},{chttpd_auth,cookie_authentication_handler}, {chttpd_auth, default_authentication_handler}"
            )),
            [Handler::Jwt, Handler::Proxy, Handler::Cookie, Handler::Default]
        );
        // Order is kept; unknown and repeated entries are skipped.
        assert_eq!(
            parse(Some("{chttpd_auth, default_authentication_handler}, {foo, bar}, {chttpd_auth, jwt_authentication_handler}, {chttpd_auth, default_authentication_handler}")),
            [Handler::Default, Handler::Jwt]
        );
        assert_eq!(parse(Some("garbage")), DEFAULT_HANDLERS);
        assert_eq!(
            parse(Some("{couch_httpd_auth, proxy_authentication_handler}")),
            [Handler::Proxy]
        );
    }

    #[test]
    fn names_as_session_reports_them() {
        let names: Vec<_> = [
            Handler::Jwt,
            Handler::Proxy,
            Handler::Cookie,
            Handler::Default,
        ]
        .iter()
        .map(|h| h.name())
        .collect();
        assert_eq!(names, ["jwt", "proxy", "cookie", "default"]);
    }
}
