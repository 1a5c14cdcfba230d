//! Password hashes as CouchDB 3.4 stores and checks them: server admins'
//! hash strings in the `[admins]` config section and the hash fields of
//! `_users` documents.
//!
//! Formats:
//! - Admin config values: `-pbkdf2:PRF-DERIVED,SALT,ITERATIONS` (PRF one of
//!   `sha`, `sha224`, `sha256`, `sha384`, `sha512`), the pre-3.4
//!   `-pbkdf2-DERIVED,SALT,ITERATIONS` (HMAC-SHA1) and the deprecated
//!   `-hashed-SHA1HEX,SALT` (the `simple` scheme).
//! - User documents: `password_scheme` (`pbkdf2` or `simple`; absent means
//!   `simple`), `pbkdf2_prf` (absent means `sha`, i.e. HMAC-SHA1, CouchDB's
//!   legacy), `iterations` (absent means 10,000), `salt`, `derived_key`;
//!   or, for `simple`, `salt` and `password_sha` = hex SHA-1 of password
//!   followed by salt.
//!
//! Invariants:
//! - A salt is 32 random hex digits used *as text*: CouchDB feeds the salt
//!   string itself to PBKDF2, so hashes move between CouchDB and Settee
//!   unchanged.
//! - Derived keys are lower-case hex; a stored key is compared as text, in
//!   constant time, with the lower-case hex of the key just derived (as
//!   CouchDB compares them: an upper-case stored key never verifies).
//! - Verification refuses iteration counts of 0 or above
//!   [`MAX_VERIFY_ITERATIONS`] instead of spending minutes of CPU on a hash
//!   a user wrote into their own document (CouchDB's `max_iterations`
//!   defaults to 10⁹).
//! - Nothing here ever returns or logs a clear-text password.

use rand::RngCore;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::{constant_time_eq, AuthError};

/// PBKDF2 iterations for new hashes (CouchDB 3.4's default for SHA-256).
pub const PBKDF2_ITERATIONS: u32 = 600_000;
/// Iterations CouchDB assumes when a `pbkdf2` user document has none.
pub const DEFAULT_DOC_ITERATIONS: u32 = 10_000;
/// Above this many iterations a hash is refused rather than computed.
pub const MAX_VERIFY_ITERATIONS: u32 = 10_000_000;
const HASH_PREFIX: &str = "-pbkdf2:sha256-";

/// How a password is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// PBKDF2 with [`Prf`], `iterations`, `salt`, `derived_key`.
    Pbkdf2,
    /// Deprecated: `password_sha` = hex SHA-1 of password + salt. Verified,
    /// never created.
    Simple,
}

impl Scheme {
    /// The `password_scheme` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Pbkdf2 => "pbkdf2",
            Scheme::Simple => "simple",
        }
    }

    pub fn parse(s: &str) -> Option<Scheme> {
        match s {
            "pbkdf2" => Some(Scheme::Pbkdf2),
            "simple" => Some(Scheme::Simple),
            _ => None,
        }
    }
}

/// PBKDF2's pseudo-random function (HMAC with this hash), named as in
/// `pbkdf2_prf`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prf {
    /// `sha`: HMAC-SHA1, CouchDB's legacy default.
    Sha1,
    Sha224,
    Sha256,
    Sha384,
    Sha512,
}

impl Prf {
    /// The `pbkdf2_prf` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Prf::Sha1 => "sha",
            Prf::Sha224 => "sha224",
            Prf::Sha256 => "sha256",
            Prf::Sha384 => "sha384",
            Prf::Sha512 => "sha512",
        }
    }

    /// The PRFs CouchDB 3.4 accepts (`sha`, `sha224`, `sha256`, `sha384`,
    /// `sha512`).
    pub fn parse(s: &str) -> Option<Prf> {
        match s {
            "sha" => Some(Prf::Sha1),
            "sha224" => Some(Prf::Sha224),
            "sha256" => Some(Prf::Sha256),
            "sha384" => Some(Prf::Sha384),
            "sha512" => Some(Prf::Sha512),
            _ => None,
        }
    }

    /// Derives the key (the hash's output length, as CouchDB) as lower-case hex.
    pub fn derive_hex(self, password: &[u8], salt: &[u8], iterations: u32) -> String {
        macro_rules! run {
            ($d:ty) => {{
                let mut out = vec![0u8; <$d as Digest>::output_size()];
                pbkdf2::pbkdf2_hmac::<$d>(password, salt, iterations, &mut out);
                hex::encode(out)
            }};
        }
        match self {
            Prf::Sha1 => run!(sha1::Sha1),
            Prf::Sha224 => run!(sha2::Sha224),
            Prf::Sha256 => run!(Sha256),
            Prf::Sha384 => run!(sha2::Sha384),
            Prf::Sha512 => run!(sha2::Sha512),
        }
    }
}

/// The `simple` scheme's hash: hex SHA-1 of the password followed by the salt.
pub fn simple_hex(password: &[u8], salt: &[u8]) -> String {
    let mut h = sha1::Sha1::new();
    h.update(password);
    h.update(salt);
    hex::encode(h.finalize())
}

/// 16 random bytes as 32 lower-case hex digits (what `couch_uuids:random()`
/// gives CouchDB for salts).
pub fn random_salt() -> String {
    let mut salt = [0u8; 16];
    rand::rng().fill_bytes(&mut salt);
    hex::encode(salt)
}

/// A stored password: a user document's hash fields, or a server admin's
/// hash string, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserHash {
    pub scheme: Scheme,
    /// Meaningful for [`Scheme::Pbkdf2`] only.
    pub prf: Prf,
    /// Meaningful for [`Scheme::Pbkdf2`] only (0 for `simple`).
    pub iterations: u32,
    /// The salt, used as text.
    pub salt: String,
    /// PBKDF2's derived key as hex, or `simple`'s `password_sha`.
    pub derived_key: String,
}

impl UserHash {
    /// A new PBKDF2-SHA256 hash of `password` with a random salt.
    pub fn new(password: &str, iterations: u32) -> UserHash {
        UserHash::with_salt(password, Prf::Sha256, random_salt(), iterations)
    }

    /// A PBKDF2 hash with a given PRF and salt.
    pub fn with_salt(password: &str, prf: Prf, salt: String, iterations: u32) -> UserHash {
        let derived_key = prf.derive_hex(password.as_bytes(), salt.as_bytes(), iterations);
        UserHash {
            scheme: Scheme::Pbkdf2,
            prf,
            iterations,
            salt,
            derived_key,
        }
    }

    /// Whether `password` is the one hashed (constant-time comparison).
    pub fn verify(&self, password: &str) -> bool {
        let computed = match self.scheme {
            Scheme::Simple => simple_hex(password.as_bytes(), self.salt.as_bytes()),
            Scheme::Pbkdf2 => {
                if self.iterations == 0 || self.iterations > MAX_VERIFY_ITERATIONS {
                    return false;
                }
                self.prf
                    .derive_hex(password.as_bytes(), self.salt.as_bytes(), self.iterations)
            }
        };
        constant_time_eq(computed.as_bytes(), self.derived_key.as_bytes())
    }

    /// Reads the hash fields of a `_users` document as CouchDB 3.4 stores
    /// them (see the module doc for defaults). `None` when the document
    /// holds no usable hash: an unknown scheme or PRF, a non-string salt or
    /// key, an iteration count that is not a positive 32-bit integer, or no
    /// `derived_key`/`password_sha` at all (CouchDB refuses such a login too).
    pub fn from_user_doc(doc: &Value) -> Option<UserHash> {
        let doc = doc.as_object()?;
        let scheme = match doc.get("password_scheme") {
            None => Scheme::Simple,
            Some(v) => Scheme::parse(v.as_str()?)?,
        };
        let salt = match doc.get("salt") {
            None => String::new(),
            Some(v) => v.as_str()?.to_string(),
        };
        match scheme {
            Scheme::Simple => Some(UserHash {
                scheme,
                prf: Prf::Sha1,
                iterations: 0,
                salt,
                derived_key: doc.get("password_sha")?.as_str()?.to_string(),
            }),
            Scheme::Pbkdf2 => {
                let prf = match doc.get("pbkdf2_prf") {
                    None => Prf::Sha1,
                    Some(v) => Prf::parse(v.as_str()?)?,
                };
                let iterations = match doc.get("iterations") {
                    None => DEFAULT_DOC_ITERATIONS,
                    Some(v) => u32::try_from(v.as_u64()?).ok().filter(|&n| n > 0)?,
                };
                Some(UserHash {
                    scheme,
                    prf,
                    iterations,
                    salt,
                    derived_key: doc.get("derived_key")?.as_str()?.to_string(),
                })
            }
        }
    }

    /// Parses a server admin's hash string from the `[admins]` section
    /// (`-pbkdf2:PRF-…`, `-pbkdf2-…`, `-hashed-…`). `None` for anything else,
    /// including a clear-text password.
    pub fn from_config(stored: &str) -> Option<UserHash> {
        if let Some(rest) = stored.strip_prefix("-hashed-") {
            let mut parts = rest.split(',');
            let (Some(sha), Some(salt), None) = (parts.next(), parts.next(), parts.next()) else {
                return None;
            };
            return Some(UserHash {
                scheme: Scheme::Simple,
                prf: Prf::Sha1,
                iterations: 0,
                salt: salt.to_string(),
                derived_key: sha.to_string(),
            });
        }
        let (prf, rest) = if let Some(r) = stored.strip_prefix("-pbkdf2-") {
            (Prf::Sha1, r)
        } else {
            let r = stored.strip_prefix("-pbkdf2:")?;
            let (name, r) = r.split_once('-')?;
            (Prf::parse(name)?, r)
        };
        let mut parts = rest.split(',');
        let (Some(derived), Some(salt), Some(iters), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return None;
        };
        let iterations = iters.parse::<u32>().ok().filter(|&n| n > 0)?;
        if derived.is_empty() || !derived.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        Some(UserHash {
            scheme: Scheme::Pbkdf2,
            prf,
            iterations,
            salt: salt.to_string(),
            derived_key: derived.to_string(),
        })
    }

    /// The `[admins]` config form: `-pbkdf2:PRF-DERIVED,SALT,ITERATIONS`
    /// (or `-hashed-SHA,SALT` for `simple`).
    pub fn to_config(&self) -> String {
        match self.scheme {
            Scheme::Simple => format!("-hashed-{},{}", self.derived_key, self.salt),
            Scheme::Pbkdf2 => format!(
                "-pbkdf2:{}-{},{},{}",
                self.prf.as_str(),
                self.derived_key,
                self.salt,
                self.iterations
            ),
        }
    }

    /// The hash fields of a user document, in the order CouchDB 3.4 writes
    /// them: `password_scheme`, `pbkdf2_prf`, `salt`, `iterations`,
    /// `derived_key` (for `simple`: `password_scheme`, `salt`, `password_sha`).
    pub fn to_doc_fields(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("password_scheme".into(), self.scheme.as_str().into());
        match self.scheme {
            Scheme::Pbkdf2 => {
                m.insert("pbkdf2_prf".into(), self.prf.as_str().into());
                m.insert("salt".into(), self.salt.clone().into());
                m.insert("iterations".into(), self.iterations.into());
                m.insert("derived_key".into(), self.derived_key.clone().into());
            }
            Scheme::Simple => {
                m.insert("salt".into(), self.salt.clone().into());
                m.insert("password_sha".into(), self.derived_key.clone().into());
            }
        }
        m
    }

    /// CouchDB's iteration limits (`[chttpd_auth] min_iterations`, default
    /// 1, and `max_iterations`, default 10⁹), checked before a login is
    /// attempted. Only meaningful for `pbkdf2`.
    pub fn check_iteration_limits(&self, min: u32, max: u32) -> Result<(), AuthError> {
        if self.scheme != Scheme::Pbkdf2 {
            return Ok(());
        }
        if self.iterations < min {
            return Err(AuthError::forbidden(
                "Iteration count is too low for this server",
            ));
        }
        if self.iterations > max {
            return Err(AuthError::forbidden(
                "Iteration count is too high for this server",
            ));
        }
        Ok(())
    }

    /// Whether CouchDB's hash upgrade (`[chttpd_auth] upgrade_hash_on_auth`,
    /// off by default) would re-hash this after a successful login, with
    /// the target `pbkdf2` scheme, `prf` and `iterations`.
    pub fn needs_upgrade(&self, prf: Prf, iterations: u32) -> bool {
        self.scheme != Scheme::Pbkdf2 || self.prf != prf || self.iterations != iterations
    }
}

/// Hashes a password as CouchDB 3.4 does for a server admin:
/// `-pbkdf2:sha256-<derived hex>,<salt>,<iterations>`, where the salt is 32
/// random hex digits used *as text*.
pub fn hash_password(password: &str) -> String {
    hash_with_iterations(password, PBKDF2_ITERATIONS)
}

/// [`hash_password`] with a given iteration count.
pub fn hash_with_iterations(password: &str, iterations: u32) -> String {
    let hash = UserHash::new(password, iterations);
    debug_assert!(hash.to_config().starts_with(HASH_PREFIX));
    hash.to_config()
}

/// Whether a configured admin value is already a hash (stored as given), by
/// the prefixes CouchDB 3.4 treats as hashed (`couch_passwords:
/// get_unhashed_admins`); anything else is a clear-text password to hash.
pub fn is_password_hash(value: &str) -> bool {
    [
        "-hashed-",
        "-pbkdf2-",
        "-pbkdf2:sha-",
        "-pbkdf2:sha224-",
        "-pbkdf2:sha256-",
        "-pbkdf2:sha384-",
        "-pbkdf2:sha512-",
    ]
    .iter()
    .any(|p| value.starts_with(p))
}

/// Checks a password against a stored admin hash string (see
/// [`UserHash::from_config`]).
pub fn verify_password(stored: &str, password: &str) -> bool {
    UserHash::from_config(stored).is_some_and(|h| h.verify(password))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn hash_and_verify() {
        let h = hash_with_iterations("s3cret", 1000);
        assert!(h.starts_with(HASH_PREFIX));
        assert!(!h.contains("s3cret"));
        assert!(is_password_hash(&h));
        assert!(verify_password(&h, "s3cret"));
        assert!(!verify_password(&h, "s3cre"));
        assert!(!verify_password("garbage", "s3cret"));
        assert!(!verify_password("-pbkdf2:sha256-zz,00,1", "x"));
        // Hashes as CouchDB stores them (salt used as text): SHA-1 and SHA-256.
        let sha1 =
            "-pbkdf2-4f414b2abaa5d15af1a95e18ff5fb772cbb8bdba,0123456789abcdef0123456789abcdef,10";
        assert!(verify_password(sha1, "s3cret"));
        assert!(!verify_password(sha1, "wrong"));
        let sha256 = "-pbkdf2:sha256-c3f3c16b6f6a5886fba4b40f544d97270f5840eb9a71064d1cc3796e9b304c42,0123456789abcdef0123456789abcdef,10";
        assert!(verify_password(sha256, "s3cret"));
        // `-pbkdf2:sha-` is the 3.4 spelling of the legacy `-pbkdf2-`.
        let sha1_new = sha1.replacen("-pbkdf2-", "-pbkdf2:sha-", 1);
        assert!(verify_password(&sha1_new, "s3cret"));
    }

    #[test]
    fn default_hash_format() {
        // CouchDB 3.4's default strength; the format is pinned with fewer
        // iterations (600,000 take seconds in a debug build).
        assert_eq!(PBKDF2_ITERATIONS, 600_000);
        let h = hash_with_iterations("pw", 3);
        assert!(h.ends_with(",3"));
        let parsed = UserHash::from_config(&h).unwrap();
        assert_eq!(parsed.iterations, 3);
        assert_eq!(parsed.prf, Prf::Sha256);
        assert_eq!(parsed.salt.len(), 32);
        assert_eq!(parsed.derived_key.len(), 64);
    }

    #[test]
    fn malformed_admin_hashes_never_verify() {
        for bad in [
            "",
            "pw",
            "-pbkdf2:",
            "-pbkdf2:md5-00,salt,10",
            "-pbkdf2:sha256-00,salt",
            "-pbkdf2:sha256-00,salt,10,extra",
            "-pbkdf2:sha256-00,salt,0",
            "-pbkdf2:sha256-00,salt,-1",
            "-pbkdf2:sha256-00,salt,ten",
            "-pbkdf2:sha256-,salt,10",
            "-pbkdf2:sha256-xyz,salt,10",
            "-hashed-abc",
            "-hashed-abc,salt,extra",
        ] {
            assert!(!verify_password(bad, ""), "{bad}");
            assert!(!verify_password(bad, "pw"), "{bad}");
        }
        // More iterations than we are willing to compute: refused, not run.
        let huge = format!("-pbkdf2:sha256-00,salt,{}", MAX_VERIFY_ITERATIONS + 1);
        assert!(!verify_password(&huge, "pw"));
    }

    #[test]
    fn is_password_hash_follows_couchdb_prefixes() {
        for hashed in [
            "-hashed-x",
            "-pbkdf2-x",
            "-pbkdf2:sha-x",
            "-pbkdf2:sha224-x",
            "-pbkdf2:sha256-x",
            "-pbkdf2:sha384-x",
            "-pbkdf2:sha512-x",
        ] {
            assert!(is_password_hash(hashed), "{hashed}");
        }
        for clear in ["password", "-pbkdf2:md5-x", "pbkdf2-x", "", "-hashed"] {
            assert!(!is_password_hash(clear), "{clear}");
        }
    }

    #[test]
    fn all_prfs_round_trip_through_config_and_doc() {
        for prf in [
            Prf::Sha1,
            Prf::Sha224,
            Prf::Sha256,
            Prf::Sha384,
            Prf::Sha512,
        ] {
            let h = UserHash::with_salt("pw", prf, random_salt(), 50);
            assert!(h.verify("pw"));
            assert!(!h.verify("pW"));
            assert_eq!(Prf::parse(prf.as_str()), Some(prf));
            let cfg = h.to_config();
            assert!(is_password_hash(&cfg), "{cfg}");
            assert_eq!(UserHash::from_config(&cfg).as_ref(), Some(&h));
            assert!(verify_password(&cfg, "pw"));
            let doc = Value::Object(h.to_doc_fields());
            assert_eq!(UserHash::from_user_doc(&doc).as_ref(), Some(&h));
        }
    }

    #[test]
    fn new_hash_shape() {
        let h = UserHash::new("pw", 10);
        assert_eq!(h.scheme, Scheme::Pbkdf2);
        assert_eq!(h.prf, Prf::Sha256);
        assert_eq!(h.iterations, 10);
        assert_eq!(h.salt.len(), 32);
        assert!(h
            .salt
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_eq!(h.derived_key.len(), 64);
        assert!(h.verify("pw"));
        assert!(!h.verify(""));
        // Salts are random.
        assert_ne!(UserHash::new("pw", 10).salt, h.salt);
        let fields = h.to_doc_fields();
        let keys: Vec<_> = fields.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "password_scheme",
                "pbkdf2_prf",
                "salt",
                "iterations",
                "derived_key"
            ]
        );
    }

    #[test]
    fn salt_is_text_not_hex_bytes() {
        // PBKDF2-SHA256("s3cret", salt = the 32 ASCII characters, 10).
        let h = UserHash::with_salt(
            "s3cret",
            Prf::Sha256,
            "0123456789abcdef0123456789abcdef".into(),
            10,
        );
        assert_eq!(
            h.derived_key,
            "c3f3c16b6f6a5886fba4b40f544d97270f5840eb9a71064d1cc3796e9b304c42"
        );
    }

    #[test]
    fn upper_case_stored_key_does_not_verify() {
        let mut h = UserHash::with_salt("pw", Prf::Sha256, "salt".into(), 5);
        h.derived_key = h.derived_key.to_uppercase();
        assert!(!h.verify("pw"));
    }

    #[test]
    fn from_user_doc_defaults_and_rejects() {
        // No pbkdf2_prf: HMAC-SHA1; no iterations: 10,000.
        let legacy = UserHash::with_salt("pw", Prf::Sha1, "abc".into(), DEFAULT_DOC_ITERATIONS);
        let doc =
            json!({"password_scheme": "pbkdf2", "salt": "abc", "derived_key": legacy.derived_key});
        let h = UserHash::from_user_doc(&doc).unwrap();
        assert_eq!((h.prf, h.iterations), (Prf::Sha1, DEFAULT_DOC_ITERATIONS));
        assert!(h.verify("pw"));

        // No scheme: simple; no salt: empty.
        let doc = json!({"password_sha": simple_hex(b"pw", b"")});
        let h = UserHash::from_user_doc(&doc).unwrap();
        assert_eq!(h.scheme, Scheme::Simple);
        assert!(h.verify("pw"));
        assert!(!h.verify("px"));

        let d = |extra: Value| {
            let mut base = json!({"password_scheme": "pbkdf2", "pbkdf2_prf": "sha256",
                "salt": "s", "iterations": 10, "derived_key": "00"});
            for (k, v) in extra.as_object().unwrap() {
                if v.is_null() {
                    base.as_object_mut().unwrap().remove(k);
                } else {
                    base[k] = v.clone();
                }
            }
            UserHash::from_user_doc(&base)
        };
        assert!(d(json!({})).is_some());
        assert!(d(json!({"password_scheme": "bcrypt"})).is_none());
        assert!(d(json!({"password_scheme": 1})).is_none());
        assert!(d(json!({"pbkdf2_prf": "md5"})).is_none());
        assert!(d(json!({"iterations": "10"})).is_none());
        assert!(d(json!({"iterations": 10.5})).is_none());
        assert!(d(json!({"iterations": 0})).is_none());
        assert!(d(json!({"iterations": -3})).is_none());
        assert!(d(json!({"iterations": 1u64 << 40})).is_none());
        assert!(d(json!({"salt": 5})).is_none());
        assert!(d(json!({"derived_key": null})).is_none());
        assert!(d(json!({"derived_key": 5})).is_none());
        assert!(UserHash::from_user_doc(&json!([])).is_none());
        // A user document without any password (e.g. `password: null`).
        assert!(UserHash::from_user_doc(&json!({"name": "x", "password": null})).is_none());
    }

    #[test]
    fn iteration_limits() {
        let h = UserHash::with_salt("pw", Prf::Sha256, "s".into(), 10);
        assert_eq!(h.check_iteration_limits(1, 1_000_000_000), Ok(()));
        assert_eq!(
            h.check_iteration_limits(11, 100).unwrap_err().reason(),
            "Iteration count is too low for this server"
        );
        assert_eq!(
            h.check_iteration_limits(1, 9).unwrap_err().reason(),
            "Iteration count is too high for this server"
        );
    }

    #[test]
    fn upgrade_rule() {
        let h = UserHash::with_salt("pw", Prf::Sha256, "s".into(), 10);
        assert!(!h.needs_upgrade(Prf::Sha256, 10));
        assert!(h.needs_upgrade(Prf::Sha256, 11));
        assert!(h.needs_upgrade(Prf::Sha512, 10));
        let simple = UserHash::from_user_doc(&json!({"password_sha": "00", "salt": "s"})).unwrap();
        assert!(simple.needs_upgrade(Prf::Sha256, 10));
    }
}
