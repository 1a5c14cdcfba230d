//! CouchDB's `AuthSession` cookie: making, checking and refreshing it.
//!
//! Format (CouchDB 3.4.3, `couch_httpd_auth:cookie_auth_cookie/3` and
//! `cookie_authentication_handler/2`, read from the reference release):
//! the cookie value is base64url without padding of
//! `NAME ":" TIME ":" MAC`, where `TIME` is the issue time in Unix seconds
//! as upper-case hex (`integer_to_list(T, 16)`), and `MAC` the raw bytes of
//! HMAC(key = server secret ++ the user's `salt`, data = `NAME ":" TIME`).
//! The hash is the first of `[chttpd_auth] hash_algorithms` (default
//! `sha256, sha`) when signing; a cookie verifies when its MAC matches
//! under *any* of them (so SHA-1 cookies from older nodes are still
//! accepted by default). A user without a `salt` contributes nothing to the
//! key.
//!
//! A cookie is valid while `now < issued + timeout` (`[chttpd_auth]
//! timeout`, default 600 s). CouchDB sends a fresh cookie with a response
//! when the one it received has `time_left < timeout * 0.9`, with
//! `time_left = issued + timeout - now`: once more than 10 % of the timeout
//! has passed since it was issued ([`needs_refresh`]).
//!
//! Over HTTP only a cookie that cannot be decoded or split is an error
//! (400 `bad_request`, [`CookieError::to_couchdb`]); every other failure —
//! unknown user, expired, wrong MAC — makes CouchDB treat the request as
//! anonymous.
//!
//! Invariants: MACs are compared in constant time; changing the server
//! secret or a user's salt (CouchDB gives a user a new salt with every
//! password change) invalidates every cookie issued before.

use base64::Engine as _;
use hmac::{Hmac, Mac};

use crate::{constant_time_eq, AuthError};

/// The cookie's name.
pub const COOKIE_NAME: &str = "AuthSession";
/// CouchDB's default `[chttpd_auth] timeout`, in seconds.
pub const DEFAULT_TIMEOUT_SECS: u64 = 600;
const MALFORMED: &str = "Malformed AuthSession cookie. Please clear your cookies.";

/// The HMAC hash of a cookie.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MacAlgorithm {
    Sha256,
    /// HMAC-SHA1, as CouchDB before 3.3 signed cookies.
    Sha1,
}

/// CouchDB 3.4's default `hash_algorithms`: sign with SHA-256, accept
/// SHA-256 and SHA-1.
pub const DEFAULT_ALGORITHMS: &[MacAlgorithm] = &[MacAlgorithm::Sha256, MacAlgorithm::Sha1];

impl MacAlgorithm {
    pub(crate) fn mac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        match self {
            MacAlgorithm::Sha256 => {
                let mut m = Hmac::<sha2::Sha256>::new_from_slice(key).expect("any key length");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
            MacAlgorithm::Sha1 => {
                let mut m = Hmac::<sha1::Sha1>::new_from_slice(key).expect("any key length");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
        }
    }
}

/// Why a cookie was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CookieError {
    /// Not base64url, or fewer than three `:`-separated parts.
    #[error("Malformed AuthSession cookie. Please clear your cookies.")]
    Malformed,
    /// No such user (the salt lookup found nothing).
    #[error("AuthSession cookie for an unknown user")]
    UnknownUser,
    /// The MAC matches under no accepted algorithm: another secret, another
    /// salt, or a tampered name or time.
    #[error("AuthSession cookie has a bad MAC")]
    BadMac,
    /// Authentic, but its time is not hexadecimal (never issued so).
    #[error("AuthSession cookie has an invalid time")]
    InvalidTime,
    /// Authentic, but `now >= issued + timeout`.
    #[error("AuthSession cookie expired")]
    Expired,
}

impl CookieError {
    /// What CouchDB answers: 400 `bad_request` for a malformed cookie;
    /// `None` for the rest, after which the request goes on as anonymous.
    pub fn to_couchdb(&self) -> Option<AuthError> {
        match self {
            CookieError::Malformed => Some(AuthError::BadRequest(MALFORMED.to_string())),
            _ => None,
        }
    }
}

/// A cookie's parts, before any check but the format's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed<'a> {
    /// The user name as its bytes (UTF-8 for every real user).
    pub name: &'a [u8],
    /// The time as written (hex digits).
    pub time: &'a [u8],
    pub mac: &'a [u8],
}

/// Decodes a cookie value: base64url without padding (CouchDB 3.4.3
/// refuses a padded value, or one in standard base64, as malformed).
pub fn decode(value: &str) -> Result<Vec<u8>, CookieError> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(value)
        .map_err(|_| CookieError::Malformed)
}

/// Splits a decoded cookie at its first two colons (the MAC may contain
/// colons).
pub fn split(decoded: &[u8]) -> Result<Parsed<'_>, CookieError> {
    let mut parts = decoded.splitn(3, |&b| b == b':');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(name), Some(time), Some(mac)) => Ok(Parsed { name, time, mac }),
        _ => Err(CookieError::Malformed),
    }
}

fn key(secret: &str, user_salt: &str) -> Vec<u8> {
    [secret.as_bytes(), user_salt.as_bytes()].concat()
}

/// Makes a cookie value for `name`, issued at `now_secs`, signed with
/// HMAC-SHA256 (CouchDB 3.4's default).
pub fn make(name: &str, user_salt: &str, secret: &str, now_secs: u64) -> String {
    make_with(MacAlgorithm::Sha256, name, user_salt, secret, now_secs)
}

/// [`make`] with a chosen MAC algorithm.
pub fn make_with(
    algorithm: MacAlgorithm,
    name: &str,
    user_salt: &str,
    secret: &str,
    now_secs: u64,
) -> String {
    let data = format!("{name}:{now_secs:X}");
    let mac = algorithm.mac(&key(secret, user_salt), data.as_bytes());
    let mut raw = data.into_bytes();
    raw.push(b':');
    raw.extend_from_slice(&mac);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

/// Checks a cookie value with CouchDB's default algorithms: decodes it,
/// looks up the user's salt (`None`: no such user), checks the MAC in
/// constant time, then the time. Returns the user name and the issue time.
pub fn verify<F, S>(
    value: &str,
    user_salt: F,
    secret: &str,
    now_secs: u64,
    timeout_secs: u64,
) -> Result<(String, u64), CookieError>
where
    F: FnOnce(&str) -> Option<S>,
    S: AsRef<str>,
{
    verify_with(
        DEFAULT_ALGORITHMS,
        value,
        user_salt,
        secret,
        now_secs,
        timeout_secs,
    )
}

/// [`verify`] accepting MACs under `algorithms` only.
pub fn verify_with<F, S>(
    algorithms: &[MacAlgorithm],
    value: &str,
    user_salt: F,
    secret: &str,
    now_secs: u64,
    timeout_secs: u64,
) -> Result<(String, u64), CookieError>
where
    F: FnOnce(&str) -> Option<S>,
    S: AsRef<str>,
{
    let decoded = decode(value)?;
    let parts = split(&decoded)?;
    let name = std::str::from_utf8(parts.name).map_err(|_| CookieError::UnknownUser)?;
    let salt = user_salt(name).ok_or(CookieError::UnknownUser)?;
    let key = key(secret, salt.as_ref());
    let data = &decoded[..parts.name.len() + 1 + parts.time.len()];
    // Every algorithm is tried, so the time taken does not say which matched.
    let authentic = algorithms.iter().fold(false, |ok, alg| {
        constant_time_eq(&alg.mac(&key, data), parts.mac) | ok
    });
    if !authentic {
        return Err(CookieError::BadMac);
    }
    let issued = parse_time(parts.time).ok_or(CookieError::InvalidTime)?;
    if now_secs >= issued.saturating_add(timeout_secs) {
        return Err(CookieError::Expired);
    }
    Ok((name.to_string(), issued))
}

fn parse_time(hex: &[u8]) -> Option<u64> {
    if hex.is_empty() || hex.len() > 16 || !hex.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
}

/// Whether a response should carry a fresh cookie: CouchDB's
/// `issued + timeout - now < timeout * 0.9` (more than 10 % of the timeout
/// has passed).
pub fn needs_refresh(issued_secs: u64, now_secs: u64, timeout_secs: u64) -> bool {
    let time_left = i128::from(issued_secs) + i128::from(timeout_secs) - i128::from(now_secs);
    (time_left as f64) < (timeout_secs as f64) * 0.9
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "server-secret";
    const SALT: &str = "9e4f30baf7e4321ba117218dba35aea4";
    const T: u64 = 1_795_540_858;

    fn salts(name: &str) -> Option<String> {
        match name {
            "joe" => Some(SALT.to_string()),
            "bob" => Some("b0b5a17".to_string()),
            "nosalt" => Some(String::new()),
            _ => None,
        }
    }

    fn check(value: &str, now: u64) -> Result<(String, u64), CookieError> {
        verify(value, salts, SECRET, now, DEFAULT_TIMEOUT_SECS)
    }

    fn raw(value: &str) -> Vec<u8> {
        decode(value).unwrap()
    }

    fn encode(raw: &[u8]) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
    }

    #[test]
    fn round_trip() {
        let c = make("joe", SALT, SECRET, T);
        assert!(!c.contains('='));
        assert!(!c.contains('+') && !c.contains('/'));
        let r = raw(&c);
        assert!(r.starts_with(b"joe:6B05C77A:"), "time is upper-case hex");
        assert_eq!(r.len(), "joe:6B05C77A:".len() + 32);
        assert_eq!(check(&c, T), Ok(("joe".to_string(), T)));
        assert_eq!(check(&c, T + 599), Ok(("joe".to_string(), T)));
        // Padding or standard base64 is malformed (as in CouchDB).
        let c46 = make("fast", SALT, SECRET, T);
        assert_eq!(c46.len() % 4, 2);
        assert_eq!(check(&format!("{c46}=="), T), Err(CookieError::Malformed));
        assert_eq!(check(&format!("{c}="), T), Err(CookieError::Malformed));
        // No salt: the key is the secret alone.
        let c = make("nosalt", "", SECRET, T);
        assert_eq!(check(&c, T).unwrap().0, "nosalt");
        // UTF-8 names.
        let c = make("jöe", SALT, SECRET, T);
        let r = verify(&c, |_| Some(SALT), SECRET, T, 600);
        assert_eq!(r, Ok(("jöe".to_string(), T)));
    }

    #[test]
    fn expiry() {
        let c = make("joe", SALT, SECRET, T);
        assert_eq!(check(&c, T + 600), Err(CookieError::Expired));
        assert_eq!(check(&c, T + 100_000), Err(CookieError::Expired));
        assert_eq!(
            verify(&c, salts, SECRET, T + 10, 10),
            Err(CookieError::Expired)
        );
        assert!(verify(&c, salts, SECRET, T + 9, 10).is_ok());
        // Issued in the future (clock skew between nodes): still valid.
        assert!(check(&c, T - 1000).is_ok());
        // A zero timeout accepts nothing issued at or before now.
        assert_eq!(verify(&c, salts, SECRET, T, 0), Err(CookieError::Expired));
    }

    #[test]
    fn forged_with_another_secret() {
        let c = make("joe", SALT, "guessed-secret", T);
        assert_eq!(check(&c, T), Err(CookieError::BadMac));
        // Secret and salt are concatenated: moving bytes between them is
        // the same key, but only the server knows the secret.
        let c = make("joe", "", &format!("{SECRET}{SALT}"), T);
        assert_eq!(check(&c, T), Ok(("joe".to_string(), T)));
    }

    #[test]
    fn tampered_name_or_time() {
        let c = make("joe", SALT, SECRET, T);
        let r = raw(&c);
        let mac = &r["joe:6B05C77A:".len()..];
        // Another user's name with joe's MAC (and bob's salt lookup).
        let forged = encode(&[b"bob:6B05C77A:".as_slice(), mac].concat());
        assert_eq!(check(&forged, T), Err(CookieError::BadMac));
        // Same user, later time (to extend the session).
        let later = format!("joe:{:X}:", T + 3600);
        let forged = encode(&[later.as_bytes(), mac].concat());
        assert_eq!(check(&forged, T + 1000), Err(CookieError::BadMac));
        // Lower-case spelling of the same time: different bytes, bad MAC.
        let forged = encode(&[b"joe:6b05c77a:".as_slice(), mac].concat());
        assert_eq!(check(&forged, T), Err(CookieError::BadMac));
        // A truncated or extended MAC.
        let forged = encode(&r[..r.len() - 1]);
        assert_eq!(check(&forged, T), Err(CookieError::BadMac));
        let forged = encode(&[r.as_slice(), b"x"].concat());
        assert_eq!(check(&forged, T), Err(CookieError::BadMac));
        // A flipped bit in the MAC.
        let mut flipped = r.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert_eq!(check(&encode(&flipped), T), Err(CookieError::BadMac));
    }

    #[test]
    fn salt_change_invalidates() {
        let c = make("joe", SALT, SECRET, T);
        let r = verify(
            &c,
            |_| Some("new-salt-after-password-change"),
            SECRET,
            T,
            600,
        );
        assert_eq!(r, Err(CookieError::BadMac));
    }

    #[test]
    fn unknown_user() {
        let c = make("ghost", SALT, SECRET, T);
        assert_eq!(check(&c, T), Err(CookieError::UnknownUser));
        let c = encode(b"\xff\xfe:6B05C77A:mac");
        assert_eq!(check(&c, T), Err(CookieError::UnknownUser));
        assert_eq!(CookieError::UnknownUser.to_couchdb(), None);
    }

    #[test]
    fn malformed() {
        for bad in [
            "!!!",
            "a",
            &encode(b"joe"),
            &encode(b"joe:6B05C77A"),
            "am9lOjZCMDVDNzdBOvwel28f4yy+yciJV/wa8",
        ] {
            assert_eq!(check(bad, T), Err(CookieError::Malformed), "{bad}");
        }
        let e = CookieError::Malformed.to_couchdb().unwrap();
        assert_eq!(
            (e.status(), e.error(), e.reason()),
            (
                400,
                "bad_request",
                "Malformed AuthSession cookie. Please clear your cookies."
            )
        );
        // Empty parts are well-formed (and then nobody's).
        assert_eq!(check(&encode(b"::"), T), Err(CookieError::UnknownUser));
        // A colon inside the MAC is part of the MAC.
        let p = split(b"joe:1:a:b").unwrap();
        assert_eq!(
            (p.name, p.time, p.mac),
            (&b"joe"[..], &b"1"[..], &b"a:b"[..])
        );
    }

    #[test]
    fn invalid_time_even_if_authentic() {
        // Signed by the server over a time that is not hex: refused.
        let key = [SECRET.as_bytes(), SALT.as_bytes()].concat();
        for time in ["", "zz", "-1", "+5", "11111111111111111"] {
            let data = format!("joe:{time}");
            let mac = MacAlgorithm::Sha256.mac(&key, data.as_bytes());
            let c = encode(&[data.as_bytes(), b":", &mac].concat());
            assert_eq!(check(&c, T), Err(CookieError::InvalidTime), "{time}");
        }
        // Lower-case hex signed as such is fine (CouchDB parses either case).
        let data = format!("joe:{T:x}");
        let mac = MacAlgorithm::Sha256.mac(&key, data.as_bytes());
        let c = encode(&[data.as_bytes(), b":", &mac].concat());
        assert_eq!(check(&c, T), Ok(("joe".into(), T)));
    }

    #[test]
    fn sha1_cookies_accepted_by_default_only() {
        let c = make_with(MacAlgorithm::Sha1, "joe", SALT, SECRET, T);
        assert_eq!(raw(&c).len(), "joe:6B05C77A:".len() + 20);
        assert_eq!(check(&c, T), Ok(("joe".to_string(), T)));
        let only256 = verify_with(&[MacAlgorithm::Sha256], &c, salts, SECRET, T, 600);
        assert_eq!(only256, Err(CookieError::BadMac));
        assert_eq!(
            verify_with(&[], &c, salts, SECRET, T, 600),
            Err(CookieError::BadMac)
        );
    }

    #[test]
    fn refresh_rule() {
        // Timeout 600: refreshed once more than 60 s have passed.
        assert!(!needs_refresh(T, T, 600));
        assert!(!needs_refresh(T, T + 60, 600));
        assert!(needs_refresh(T, T + 61, 600));
        assert!(needs_refresh(T, T + 599, 600));
        // Issued "in the future" (clock skew): never refreshed early.
        assert!(!needs_refresh(T + 100, T, 600));
        assert!(!needs_refresh(0, 0, 0));
        assert!(needs_refresh(0, 1, 0));
        assert!(needs_refresh(0, u64::MAX, 10));
    }
}
