//! CouchDB's proxy authentication: a trusted proxy in front of the server
//! names the user in request headers (`[chttpd_auth] x_auth_username`,
//! default `X-Auth-CouchDB-UserName`; roles in `x_auth_roles`,
//! `X-Auth-CouchDB-Roles`, comma-separated) and, with
//! `[chttpd_auth] proxy_use_secret = true`, proves it knows the server
//! secret with a token (`x_auth_token`, `X-Auth-CouchDB-Token`): the
//! lower-case hex HMAC of the user name keyed by `[chttpd_auth] secret`,
//! under any of the cookie's hash algorithms (SHA-256, SHA-1).
//!
//! As CouchDB 3.4.3 answers (recorded from the reference server): a missing
//! or wrong token, or no secret configured, are no credentials — the
//! request goes on to the next handler — never an error; an empty user-name
//! header names the user `""`.
//!
//! Invariant: tokens are compared in constant time.

use crate::cookie::{MacAlgorithm, DEFAULT_ALGORITHMS};
use crate::{constant_time_eq, UserCtx};

/// The default header names (`[chttpd_auth] x_auth_username`,
/// `x_auth_roles`, `x_auth_token`).
pub const USERNAME_HEADER: &str = "X-Auth-CouchDB-UserName";
pub const ROLES_HEADER: &str = "X-Auth-CouchDB-Roles";
pub const TOKEN_HEADER: &str = "X-Auth-CouchDB-Token";

/// The token a proxy sends for `name` (the signing algorithm's).
pub fn token(secret: &str, name: &str) -> String {
    token_with(MacAlgorithm::Sha256, secret, name)
}

/// The token for `name` under `algorithm`.
pub fn token_with(algorithm: MacAlgorithm, secret: &str, name: &str) -> String {
    hex::encode(algorithm.mac(secret.as_bytes(), name.as_bytes()))
}

/// What the proxy's headers say.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProxyHeaders<'a> {
    pub username: Option<&'a str>,
    pub roles: Option<&'a str>,
    pub token: Option<&'a str>,
}

/// The user the headers name, or None (no credentials: the next handler
/// decides). With `proxy_use_secret` on ([`Secret::Key`]) only a matching
/// token makes a user.
pub fn authenticate(headers: ProxyHeaders<'_>, secret: Secret<'_>) -> Option<UserCtx> {
    // An empty name is a name (CouchDB 3.4.3 authenticates the user "").
    let name = headers.username?;
    match secret {
        Secret::NotUsed => {}
        Secret::Missing => return None,
        Secret::Key(secret) => {
            let given = headers.token?;
            let ok = DEFAULT_ALGORITHMS.iter().any(|alg| {
                constant_time_eq(token_with(*alg, secret, name).as_bytes(), given.as_bytes())
            });
            if !ok {
                return None;
            }
        }
    }
    Some(UserCtx {
        name: Some(name.to_string()),
        roles: headers.roles.map(split_roles).unwrap_or_default(),
    })
}

/// Whether, and with which key, tokens are required.
#[derive(Debug, Clone, Copy)]
pub enum Secret<'a> {
    /// `proxy_use_secret` off: the headers are trusted as they are.
    NotUsed,
    /// `proxy_use_secret` on but no server secret: nobody authenticates.
    Missing,
    /// `proxy_use_secret` on: tokens are checked with this secret.
    Key(&'a str),
}

/// A comma-separated roles header as a list (each role trimmed, empty ones
/// dropped).
pub fn split_roles(header: &str) -> Vec<String> {
    header
        .split(',')
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "645d93aca05003c4ffd081da1ec4e81e";

    fn h<'a>(u: Option<&'a str>, r: Option<&'a str>, t: Option<&'a str>) -> ProxyHeaders<'a> {
        ProxyHeaders {
            username: u,
            roles: r,
            token: t,
        }
    }

    #[test]
    fn tokens_are_hex_hmacs_of_the_name() {
        // `printf pat | openssl dgst -sha256 -hmac SECRET` (and -sha1); the
        // reference CouchDB accepted both for `pat` with this secret.
        assert_eq!(
            token(SECRET, "pat"),
            "dc072e8c15bc984e124fb7386eab50050736a3fa87c96142d377d9153ebf7123"
        );
        assert_eq!(
            token_with(MacAlgorithm::Sha1, SECRET, "pat"),
            "798a73e198c5770f617a1162b5a1c6380e49b945"
        );
    }

    #[test]
    fn headers_make_a_user_without_a_secret() {
        let u = authenticate(h(Some("pat"), Some("a, b,,c "), None), Secret::NotUsed).unwrap();
        assert_eq!(u, UserCtx::user("pat", &["a", "b", "c"]));
        let u = authenticate(h(Some("pat"), None, Some("junk")), Secret::NotUsed).unwrap();
        assert_eq!(u, UserCtx::user("pat", &[]));
        let u = authenticate(h(Some(""), Some("a"), None), Secret::NotUsed).unwrap();
        assert_eq!(u, UserCtx::user("", &["a"]));
        assert_eq!(
            authenticate(h(None, Some("a"), None), Secret::NotUsed),
            None
        );
    }

    #[test]
    fn with_a_secret_only_a_matching_token_makes_a_user() {
        let sha256 = token(SECRET, "pat");
        let sha1 = token_with(MacAlgorithm::Sha1, SECRET, "pat");
        for good in [&sha256, &sha1] {
            let u = authenticate(
                h(Some("pat"), Some("_admin"), Some(good)),
                Secret::Key(SECRET),
            );
            assert_eq!(u, Some(UserCtx::server_admin("pat")));
        }
        let upper = sha256.to_uppercase();
        for bad in [None, Some("abc"), Some(upper.as_str()), Some(&sha256[1..])] {
            assert_eq!(
                authenticate(h(Some("pat"), None, bad), Secret::Key(SECRET)),
                None
            );
        }
        // Another user's token does not pass for this one.
        let other = token(SECRET, "root");
        assert_eq!(
            authenticate(h(Some("pat"), None, Some(&other)), Secret::Key(SECRET)),
            None
        );
        assert_eq!(
            authenticate(h(Some("pat"), None, Some(&sha256)), Secret::Missing),
            None
        );
    }
}
