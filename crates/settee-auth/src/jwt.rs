//! CouchDB 3.4's JWT authentication handler (`{chttpd_auth,
//! jwt_authentication_handler}`) as pure logic: from the text after
//! `Authorization: Bearer `, the `[jwt_keys]` entries and the `[jwt_auth]`
//! settings to the requester's [`UserCtx`], or a [`JwtError`] carrying
//! CouchDB's status, error name and reason.
//!
//! The `jsonwebtoken` crate is used only to parse keys and check
//! signatures; splitting, base64url, JSON, and every claim rule are done
//! here, because CouchDB's rules and messages are its own. Everything below
//! was measured against CouchDB 3.4.3.
//!
//! Steps, in CouchDB's order (the first failing step answers):
//! 1. `[jwt_auth] required_claims` is read (unset = `exp`): every
//!    lowercase word and every `{word,<spaces>"value"}` in the text is a
//!    check; `alg` is always added. Nothing recognisable in a non-blank
//!    text → 500 `misconfigured_server`; a check listed twice → 500
//!    `duplicate_checks`; an unknown name → 500 `unknown_checks`. This
//!    happens before the token is looked at.
//! 2. The token: three base64url parts without padding (trailing bits are
//!    ignored, as CouchDB does), header and payload JSON objects (the
//!    first of duplicate keys wins, as in CouchDB).
//! 3. Header: `typ` (absent or `"JWT"`), then `alg` (HS/RS 256/384/512,
//!    ES256, ES384), then `kid` if listed.
//! 4. Payload claims, when listed: `iss`, `iat` (an integer), `nbf`
//!    (`nbf < now`), `exp` (`exp > now`). Claims that are not listed are
//!    not checked: with `required_claims = ""` an expired token passes.
//! 5. The key `[jwt_keys] {hmac|rsa|ec}:{kid or _default}`, then the
//!    signature. Claim errors therefore win over signature errors, as in
//!    CouchDB (they only tell the sender about its own token).
//! 6. Roles (`roles_claim_path`, else `roles_claim_name`, else the
//!    top-level claim `_couchdb.roles`), then `sub` (the name).
//!
//! Invariants:
//! - No I/O and no clock: `now` (Unix seconds) is an argument.
//! - Never panics; a token longer than [`MAX_TOKEN_LEN`] is refused as
//!   malformed before it is decoded; JSON nesting is bounded by
//!   `serde_json`'s recursion limit (128).
//! - A key is parsed once per (config name, config value) and kept in a
//!   bounded [`KeyCache`]; a changed value is parsed again.
//! - `_admin` among the roles is only a role here; the caller decides.
//!
//! Deliberate differences from CouchDB 3.4.3 (where it crashes with a 500,
//! or accepts what makes no sense):
//! - `exp` listed but not a number: CouchDB accepts it (Erlang term order
//!   puts every string above every number); Settee answers 401
//!   `exp not in future`. (A non-number `nbf` is `nbf not in past` in both.)
//! - `sub` not a string: CouchDB takes any JSON value as the name (`5`,
//!   `null`, `["a"]`); Settee answers 401 `Token missing sub claim.`
//!   (an empty string is still the name `""`, as in CouchDB).
//! - Roles value neither a string nor an array (number, object, `null`,
//!   boolean): CouchDB 500 `unknown_error`/`badarg`; Settee 400
//!   `bad_request`/`Malformed token` (as CouchDB answers for an array
//!   holding a non-string).
//! - Header `typ` other than `"JWT"` while `typ` is not listed: CouchDB 500
//!   `case_clause`; Settee 400 `Invalid typ header parameter` (what CouchDB
//!   answers when `typ` is listed).
//! - Header `kid` not a string: CouchDB 500 `function_clause`; Settee 400
//!   `Unknown kid`.
//! - ECDSA signature part of the wrong shape (padded, standard alphabet):
//!   CouchDB 500 `badarg`; Settee 400 `Bad signature`.
//! - `ES512`: CouchDB accepts it; the `jsonwebtoken` crate has no P-521, so
//!   Settee answers 400 `Invalid alg header parameter`.
//! - `{exp|nbf|iat|typ, "value"}` in `required_claims`: CouchDB crashes
//!   (500 `case_clause`) on requests; Settee answers 500
//!   `misconfigured_server` for every request. (`{alg|kid|sig, "value"}`
//!   are ignored, as in CouchDB.)
//! - A `[jwt_keys]` value that is not base64 (hmac) or not a PEM public key
//!   (rsa, ec): 500 `misconfigured_server` (CouchDB's answer not measured).
//! - `iat` an integer beyond 64 bits: CouchDB accepts it; Settee reads it
//!   as a float and answers `Invalid iat claim`. JSON nested deeper than
//!   128 levels: CouchDB accepts it; Settee answers `Malformed token`.
//!
//! CouchDB quirks kept: a plain `iss` in `required_claims` is satisfied
//! only by the JSON value `true` (so any string `iss` is
//! `Invalid iss claim`); with several `iss` checks the first one counts;
//! `kid` listed and absent is `Missing kid claim` (sic); a missing key on
//! `roles_claim_path` is 404 `not_found`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine as _;
use jsonwebtoken::{Algorithm, DecodingKey};
use serde_json::{Map, Value};

use crate::{AuthError, UserCtx};

/// Tokens longer than this are refused as malformed before decoding.
pub const MAX_TOKEN_LEN: usize = 64 * 1024;
/// `[jwt_auth] required_claims` when it is not set.
pub const DEFAULT_REQUIRED_CLAIMS: &str = "exp";
/// The top-level claim holding the roles when neither `roles_claim_name`
/// nor `roles_claim_path` is set.
pub const DEFAULT_ROLES_CLAIM: &str = "_couchdb.roles";
/// Parsed keys kept by a [`KeyCache`] before it is cleared.
pub const KEY_CACHE_CAPACITY: usize = 64;

/// The configuration the handler reads.
#[derive(Debug, Clone, Copy)]
pub struct JwtSettings<'a> {
    /// `[jwt_keys]` entries: (`"hmac:_default"`, base64 of the secret),
    /// (`"rsa:r1"` or `"ec:e1"`, a PEM public key with literal `\n`
    /// sequences as the ini file stores it, or real newlines). The first
    /// entry with a given name counts.
    pub keys: &'a [(String, String)],
    /// `[jwt_auth] required_claims` as written; `None` = not set
    /// ([`DEFAULT_REQUIRED_CLAIMS`]).
    pub required_claims: Option<&'a str>,
    /// `[jwt_auth] roles_claim_name`: a top-level claim.
    pub roles_claim_name: Option<&'a str>,
    /// `[jwt_auth] roles_claim_path`: a dotted path (`\.` is a literal
    /// dot); wins over `roles_claim_name`.
    pub roles_claim_path: Option<&'a str>,
}

impl<'a> JwtSettings<'a> {
    /// The given keys with every `[jwt_auth]` setting unset.
    pub fn new(keys: &'a [(String, String)]) -> JwtSettings<'a> {
        JwtSettings {
            keys,
            required_claims: None,
            roles_claim_name: None,
            roles_claim_path: None,
        }
    }
}

/// Why a token was refused, as CouchDB answers it: [`status`],
/// [`error`] and [`reason`] (the `Display` text is the reason).
///
/// [`status`]: JwtError::status
/// [`error`]: JwtError::error
/// [`reason`]: JwtError::reason
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwtError {
    /// 400: not three base64url parts, bad JSON, too long, or a roles value
    /// of the wrong type.
    #[error("Malformed token")]
    Malformed,
    /// 400: header or payload is JSON but not an object.
    #[error("Not an object")]
    NotAnObject,
    /// 400: `typ` (listed) or `alg` absent from the header.
    #[error("Missing {0} header parameter")]
    MissingHeader(&'static str),
    /// 400: `typ` other than `"JWT"`, or an `alg` not accepted.
    #[error("Invalid {0} header parameter")]
    InvalidHeader(&'static str),
    /// 400: a listed claim (`kid`, `iss`, `iat`, `nbf`, `exp`) is absent.
    #[error("Missing {0} claim")]
    MissingClaim(&'static str),
    /// 400: `iss` not the required value, or `iat` not an integer.
    #[error("Invalid {0} claim")]
    InvalidClaim(&'static str),
    /// 401: `exp` listed and `exp <= now` (or not a number).
    #[error("exp not in future")]
    ExpNotInFuture,
    /// 401: `nbf` listed and `nbf >= now` (or not a number).
    #[error("nbf not in past")]
    NbfNotInPast,
    /// 400: no `[jwt_keys]` entry for `{kind}:{kid}`.
    #[error("Unknown kid")]
    UnknownKid,
    /// 400: HS* signature does not match.
    #[error("Bad HMAC")]
    BadHmac,
    /// 400: RS*/ES* signature does not verify.
    #[error("Bad signature")]
    BadSignature,
    /// 401: no string `sub`.
    #[error("Token missing sub claim.")]
    MissingSub,
    /// 404: a key on `roles_claim_path` is absent (the key's name).
    #[error("missing json key: {0}")]
    MissingJsonKey(String),
    /// 404: a step of `roles_claim_path` is not an object.
    #[error("json_mismatch")]
    JsonMismatch,
    /// 500 `misconfigured_server`: `required_claims` unreadable, or a
    /// `[jwt_keys]` value that is not a key.
    #[error("JWT is not configured correctly")]
    Misconfigured,
    /// 500 `duplicate_checks`: the repeated checks as CouchDB prints them
    /// (`[exp,foo]`).
    #[error("{0}")]
    DuplicateChecks(String),
    /// 500 `unknown_checks`: the unknown checks as CouchDB prints them
    /// (`[foo,{bar,<<"x">>}]`).
    #[error("{0}")]
    UnknownChecks(String),
}

impl JwtError {
    /// The HTTP status CouchDB answers with.
    pub fn status(&self) -> u16 {
        match self {
            JwtError::ExpNotInFuture | JwtError::NbfNotInPast | JwtError::MissingSub => 401,
            JwtError::MissingJsonKey(_) | JwtError::JsonMismatch => 404,
            JwtError::Misconfigured | JwtError::DuplicateChecks(_) | JwtError::UnknownChecks(_) => {
                500
            }
            _ => 400,
        }
    }

    /// The `error` member of CouchDB's answer.
    pub fn error(&self) -> &'static str {
        match self.status() {
            401 => "unauthorized",
            404 => "not_found",
            500 => match self {
                JwtError::DuplicateChecks(_) => "duplicate_checks",
                JwtError::UnknownChecks(_) => "unknown_checks",
                _ => "misconfigured_server",
            },
            _ => "bad_request",
        }
    }

    /// The `reason` member of CouchDB's answer.
    pub fn reason(&self) -> String {
        self.to_string()
    }

    /// The same refusal as the crate's [`AuthError`].
    pub fn to_couchdb(&self) -> AuthError {
        let reason = self.reason();
        match self.status() {
            401 => AuthError::Unauthorized(reason),
            404 => AuthError::NotFound(reason),
            500 => AuthError::Internal {
                error: self.error().to_string(),
                reason,
            },
            _ => AuthError::BadRequest(reason),
        }
    }
}

/// name → (config value, parsed key or `None` when the value is not a key).
type Entries = HashMap<String, (String, Option<Arc<DecodingKey>>)>;

/// Parsed `[jwt_keys]` values, by config name; a value is parsed again
/// only when it changes. Holds at most [`KEY_CACHE_CAPACITY`] names (it is
/// emptied when full). Shared between requests (`Send + Sync`). Its
/// `Debug` shows the names only, never key material.
#[derive(Default)]
pub struct KeyCache {
    entries: Mutex<Entries>,
    parses: AtomicUsize,
}

impl std::fmt::Debug for KeyCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<String> = self.lock().keys().cloned().collect();
        names.sort();
        f.debug_struct("KeyCache")
            .field("names", &names)
            .field("parses", &self.parse_count())
            .finish()
    }
}

impl KeyCache {
    pub fn new() -> KeyCache {
        KeyCache::default()
    }

    /// How many key values were parsed since creation (a diagnostic: a
    /// steady count under load means the cache works).
    pub fn parse_count(&self) -> usize {
        self.parses.load(Ordering::Relaxed)
    }

    /// How many names are cached.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The key for config `name` holding `value`, parsed as `kind`.
    fn key(&self, name: &str, value: &str, kind: KeyKind) -> Result<Arc<DecodingKey>, JwtError> {
        if let Some((cached_value, parsed)) = self.lock().get(name) {
            if cached_value == value {
                return parsed.clone().ok_or(JwtError::Misconfigured);
            }
        }
        // Parsed outside the lock; two threads may both parse a new value,
        // which is harmless.
        self.parses.fetch_add(1, Ordering::Relaxed);
        let parsed = parse_key(value, kind).map(Arc::new);
        let mut entries = self.lock();
        if entries.len() >= KEY_CACHE_CAPACITY && !entries.contains_key(name) {
            entries.clear();
        }
        entries.insert(name.to_string(), (value.to_string(), parsed.clone()));
        parsed.ok_or(JwtError::Misconfigured)
    }

    /// Authenticates `token` (the text after `Bearer `) at Unix time `now`.
    pub fn authenticate(
        &self,
        token: &str,
        settings: &JwtSettings<'_>,
        now: u64,
    ) -> Result<UserCtx, JwtError> {
        let checks = Checks::parse(settings.required_claims.unwrap_or(DEFAULT_REQUIRED_CLAIMS))?;
        if token.len() > MAX_TOKEN_LEN {
            return Err(JwtError::Malformed);
        }
        let mut parts = token.split('.');
        let (Some(header_b64), Some(payload_b64), Some(signature_b64), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(JwtError::Malformed);
        };

        let header = decode_object(header_b64)?;
        let (alg, kind) = checks.header(&header)?;
        let claims = decode_object(payload_b64)?;
        checks.claims(&claims, now)?;

        let kid = match header.get("kid") {
            None => "_default",
            Some(Value::String(kid)) => kid.as_str(),
            Some(_) => return Err(JwtError::UnknownKid),
        };
        let name = format!("{}:{}", kind.prefix(), kid);
        let value = settings
            .keys
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
            .ok_or(JwtError::UnknownKid)?;
        let key = self.key(&name, value, kind)?;
        let bad = match kind {
            KeyKind::Hmac => JwtError::BadHmac,
            KeyKind::Rsa | KeyKind::Ec => JwtError::BadSignature,
        };
        // CouchDB ignores the unused bits of the last base64 character;
        // `jsonwebtoken` wants the canonical form, so re-encode.
        let signature = B64URL.decode(signature_b64).map_err(|_| bad.clone())?;
        let signature = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(signature);
        let message_len = header_b64.len() + 1 + payload_b64.len();
        let message = &token.as_bytes()[..message_len];
        match jsonwebtoken::crypto::verify(&signature, message, &key, alg) {
            Ok(true) => {}
            _ => return Err(bad),
        }

        let roles = roles(&claims, settings)?;
        match claims.get("sub") {
            Some(Value::String(sub)) => Ok(UserCtx {
                name: Some(sub.clone()),
                roles,
            }),
            _ => Err(JwtError::MissingSub),
        }
    }
}

/// base64url without padding, ignoring the unused bits of the last
/// character (as CouchDB decodes).
const B64URL: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(DecodePaddingMode::RequireNone)
        .with_decode_allow_trailing_bits(true),
);

/// Standard base64, padding optional (the `[jwt_keys] hmac:` values).
const B64_SECRET: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyKind {
    Hmac,
    Rsa,
    Ec,
}

impl KeyKind {
    fn prefix(self) -> &'static str {
        match self {
            KeyKind::Hmac => "hmac",
            KeyKind::Rsa => "rsa",
            KeyKind::Ec => "ec",
        }
    }
}

fn parse_key(value: &str, kind: KeyKind) -> Option<DecodingKey> {
    match kind {
        KeyKind::Hmac => B64_SECRET
            .decode(value.trim())
            .ok()
            .map(|secret| DecodingKey::from_secret(&secret)),
        KeyKind::Rsa | KeyKind::Ec => {
            let pem = value.replace("\\n", "\n");
            let pem = pem.trim().as_bytes();
            match kind {
                KeyKind::Rsa => DecodingKey::from_rsa_pem(pem).ok(),
                _ => DecodingKey::from_ec_pem(pem).ok(),
            }
        }
    }
}

/// The accepted `alg` values.
fn algorithm(alg: &str) -> Option<(Algorithm, KeyKind)> {
    Some(match alg {
        "HS256" => (Algorithm::HS256, KeyKind::Hmac),
        "HS384" => (Algorithm::HS384, KeyKind::Hmac),
        "HS512" => (Algorithm::HS512, KeyKind::Hmac),
        "RS256" => (Algorithm::RS256, KeyKind::Rsa),
        "RS384" => (Algorithm::RS384, KeyKind::Rsa),
        "RS512" => (Algorithm::RS512, KeyKind::Rsa),
        "ES256" => (Algorithm::ES256, KeyKind::Ec),
        "ES384" => (Algorithm::ES384, KeyKind::Ec),
        _ => return None,
    })
}

/// Decodes one base64url part holding a JSON object.
fn decode_object(part: &str) -> Result<Map<String, Value>, JwtError> {
    let bytes = B64URL.decode(part).map_err(|_| JwtError::Malformed)?;
    let value = serde_json::from_slice::<FirstWins>(&bytes)
        .map_err(|_| JwtError::Malformed)?
        .0;
    match value {
        Value::Object(map) => Ok(map),
        _ => Err(JwtError::NotAnObject),
    }
}

/// A JSON value in which the first of duplicate object keys wins (CouchDB
/// reads JSON objects as property lists and looks up the first match;
/// `serde_json` alone would keep the last).
struct FirstWins(Value);

impl<'de> serde::Deserialize<'de> for FirstWins {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<FirstWins, D::Error> {
        d.deserialize_any(FirstWinsVisitor).map(FirstWins)
    }
}

struct FirstWinsVisitor;

impl<'de> serde::de::Visitor<'de> for FirstWinsVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        // JSON numbers are finite; `from_f64` only fails on NaN/inf.
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(FirstWins(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let FirstWins(value) = map.next_value()?;
            object.entry(key).or_insert(value);
        }
        Ok(Value::Object(object))
    }
}

/// One entry of `required_claims`: a name, or `{name, "value"}`. The
/// derived order is Erlang's term order for these terms (atoms before
/// tuples, then by text), which `duplicate_checks` is printed in.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Check {
    Name(String),
    Tuple(String, String),
}

impl Check {
    fn name(&self) -> &str {
        match self {
            Check::Name(n) | Check::Tuple(n, _) => n,
        }
    }

    /// As Erlang prints the term (`exp`, `'end'`, `{foo,<<"x">>}`).
    fn erlang_text(&self) -> String {
        match self {
            Check::Name(n) => erlang_atom(n),
            Check::Tuple(n, v) => {
                format!("{{{},<<\"{}\">>}}", erlang_atom(n), v.replace('\\', "\\\\"))
            }
        }
    }
}

/// Erlang quotes its reserved words when printing them as atoms (the
/// names here are `[a-z]+`, so nothing else needs quoting).
fn erlang_atom(name: &str) -> String {
    const RESERVED: &[&str] = &[
        "after", "and", "andalso", "band", "begin", "bnot", "bor", "bsl", "bsr", "bxor", "case",
        "catch", "cond", "div", "end", "fun", "if", "let", "not", "of", "or", "orelse", "receive",
        "rem", "try", "when", "xor",
    ];
    if RESERVED.contains(&name) {
        format!("'{name}'")
    } else {
        name.to_string()
    }
}

fn erlang_list(checks: &[&Check]) -> String {
    let items: Vec<String> = checks.iter().map(|c| c.erlang_text()).collect();
    format!("[{}]", items.join(","))
}

const KNOWN_CHECKS: &[&str] = &["alg", "exp", "iat", "iss", "kid", "nbf", "sig", "typ"];

/// What `required_claims` asks for.
#[derive(Debug, Default)]
struct Checks {
    typ: bool,
    kid: bool,
    /// `Some(None)`: plain `iss` (only JSON `true` passes, as in CouchDB);
    /// `Some(Some(v))`: `iss` must be the string `v`.
    iss: Option<Option<String>>,
    iat: bool,
    nbf: bool,
    exp: bool,
}

impl Checks {
    fn parse(text: &str) -> Result<Checks, JwtError> {
        let text = text.trim();
        let listed = scan_checks(text);
        if listed.is_empty() && !text.is_empty() {
            return Err(JwtError::Misconfigured);
        }
        let mut all = Vec::with_capacity(listed.len() + 1);
        all.push(Check::Name("alg".to_string()));
        all.extend(listed);

        let mut sorted: Vec<&Check> = all.iter().collect();
        sorted.sort();
        let duplicates: Vec<&Check> = sorted
            .windows(2)
            .filter(|w| w[0] == w[1])
            .map(|w| w[1])
            .collect();
        if !duplicates.is_empty() {
            return Err(JwtError::DuplicateChecks(erlang_list(&duplicates)));
        }
        let unknown: Vec<&Check> = all
            .iter()
            .filter(|c| !KNOWN_CHECKS.contains(&c.name()))
            .collect();
        if !unknown.is_empty() {
            return Err(JwtError::UnknownChecks(erlang_list(&unknown)));
        }

        let mut checks = Checks::default();
        for check in &all {
            match check {
                Check::Name(n) => match n.as_str() {
                    "typ" => checks.typ = true,
                    "kid" => checks.kid = true,
                    "iat" => checks.iat = true,
                    "nbf" => checks.nbf = true,
                    "exp" => checks.exp = true,
                    "iss" => {
                        checks.iss.get_or_insert(None);
                    }
                    _ => {} // alg: always checked; sig: always verified.
                },
                Check::Tuple(n, v) => match n.as_str() {
                    "iss" => {
                        checks.iss.get_or_insert(Some(v.clone()));
                    }
                    "alg" | "kid" | "sig" => {}
                    _ => return Err(JwtError::Misconfigured),
                },
            }
        }
        Ok(checks)
    }

    /// The header rules: `typ`, `alg`, then `kid`.
    fn header(&self, header: &Map<String, Value>) -> Result<(Algorithm, KeyKind), JwtError> {
        match header.get("typ") {
            None if self.typ => return Err(JwtError::MissingHeader("typ")),
            None => {}
            Some(Value::String(t)) if t == "JWT" => {}
            Some(_) => return Err(JwtError::InvalidHeader("typ")),
        }
        let alg = match header.get("alg") {
            None => return Err(JwtError::MissingHeader("alg")),
            Some(Value::String(alg)) => algorithm(alg),
            Some(_) => None,
        }
        .ok_or(JwtError::InvalidHeader("alg"))?;
        if self.kid && !header.contains_key("kid") {
            return Err(JwtError::MissingClaim("kid"));
        }
        Ok(alg)
    }

    /// The payload rules: `iss`, `iat`, `nbf`, then `exp`.
    fn claims(&self, claims: &Map<String, Value>, now: u64) -> Result<(), JwtError> {
        if let Some(expected) = &self.iss {
            let iss = claims.get("iss").ok_or(JwtError::MissingClaim("iss"))?;
            let ok = match expected {
                None => *iss == Value::Bool(true),
                Some(v) => iss.as_str() == Some(v.as_str()),
            };
            if !ok {
                return Err(JwtError::InvalidClaim("iss"));
            }
        }
        if self.iat {
            let iat = claims.get("iat").ok_or(JwtError::MissingClaim("iat"))?;
            if !(iat.is_i64() || iat.is_u64()) {
                return Err(JwtError::InvalidClaim("iat"));
            }
        }
        if self.nbf {
            let nbf = claims.get("nbf").ok_or(JwtError::MissingClaim("nbf"))?;
            if compare(nbf, now) != Some(std::cmp::Ordering::Less) {
                return Err(JwtError::NbfNotInPast);
            }
        }
        if self.exp {
            let exp = claims.get("exp").ok_or(JwtError::MissingClaim("exp"))?;
            if compare(exp, now) != Some(std::cmp::Ordering::Greater) {
                return Err(JwtError::ExpNotInFuture);
            }
        }
        Ok(())
    }
}

/// How a JSON number compares with `now`; `None` for a non-number.
fn compare(value: &Value, now: u64) -> Option<std::cmp::Ordering> {
    let n = match value {
        Value::Number(n) => n,
        _ => return None,
    };
    if let Some(i) = n.as_i64() {
        Some(i128::from(i).cmp(&i128::from(now)))
    } else if let Some(u) = n.as_u64() {
        Some(u.cmp(&now))
    } else {
        n.as_f64()?.partial_cmp(&(now as f64))
    }
}

/// The checks named in `required_claims`: every run of `[a-z]` letters, and
/// every `{name,"value"}` (spaces, not other whitespace, allowed around the
/// comma; a non-empty value without `"`); everything else is skipped.
fn scan_checks(text: &str) -> Vec<Check> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_lowercase() {
            let end = lowercase_end(b, i);
            out.push(Check::Name(text[i..end].to_string()));
            i = end;
        } else if let Some((name, value, end)) = scan_tuple(text, i) {
            out.push(Check::Tuple(name, value));
            i = end;
        } else {
            i += 1;
        }
    }
    out
}

fn lowercase_end(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i].is_ascii_lowercase() {
        i += 1;
    }
    i
}

/// `{name *, *"value"}` at `start`: (name, value, end).
fn scan_tuple(text: &str, start: usize) -> Option<(String, String, usize)> {
    let b = text.as_bytes();
    let at = |i: usize, c: u8| b.get(i) == Some(&c);
    let skip_spaces = |mut i: usize| {
        while at(i, b' ') {
            i += 1;
        }
        i
    };
    if !at(start, b'{') {
        return None;
    }
    let name_start = start + 1;
    let name_end = lowercase_end(b, name_start);
    if name_end == name_start {
        return None;
    }
    let mut i = skip_spaces(name_end);
    if !at(i, b',') {
        return None;
    }
    i = skip_spaces(i + 1);
    if !at(i, b'"') {
        return None;
    }
    let value_start = i + 1;
    let value_end = value_start + b[value_start..].iter().position(|&c| c == b'"')?;
    if value_end == value_start || !at(value_end + 1, b'}') {
        return None;
    }
    Some((
        text[name_start..name_end].to_string(),
        text[value_start..value_end].to_string(),
        value_end + 2,
    ))
}

/// The roles claim, by path, name or default.
fn roles(claims: &Map<String, Value>, settings: &JwtSettings<'_>) -> Result<Vec<String>, JwtError> {
    let value = if let Some(path) = settings.roles_claim_path {
        let mut object = claims;
        let mut found: Option<&Value> = None;
        for key in split_path(path) {
            if let Some(value) = found {
                object = value.as_object().ok_or(JwtError::JsonMismatch)?;
            }
            found = Some(object.get(&key).ok_or(JwtError::MissingJsonKey(key))?);
        }
        found
    } else {
        claims.get(settings.roles_claim_name.unwrap_or(DEFAULT_ROLES_CLAIM))
    };
    match value {
        None => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(split_roles(s)),
        Some(Value::Array(items)) => items
            .iter()
            .map(|r| r.as_str().map(str::to_string).ok_or(JwtError::Malformed))
            .collect(),
        Some(_) => Err(JwtError::Malformed),
    }
}

/// `roles_claim_path` → keys: split at dots not preceded by a backslash,
/// then `\.` → `.` in each key (`a.b\.c` → `a`, `b.c`).
fn split_path(path: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let mut current = String::new();
    let mut after_backslash = false;
    for c in path.chars() {
        if c == '.' && !after_backslash {
            keys.push(std::mem::take(&mut current));
        } else {
            current.push(c);
        }
        after_backslash = c == '\\';
    }
    keys.push(current);
    keys.into_iter().map(|k| k.replace("\\.", ".")).collect()
}

/// A roles string: split at commas together with the ASCII whitespace
/// around them, trailing empty roles dropped; without a comma the string
/// is the one role, as is (`" x, y ,z,"` → `" x"`, `"y"`, `"z"`;
/// `"a,,b"` → `"a"`, `""`, `"b"`; `""` → `""`).
fn split_roles(s: &str) -> Vec<String> {
    let b = s.as_bytes();
    let is_space = |c: u8| matches!(c, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r');
    let mut parts: Vec<&str> = Vec::new();
    let mut start = 0;
    while let Some(offset) = b[start..].iter().position(|&c| c == b',') {
        let comma = start + offset;
        let mut piece_end = comma;
        while piece_end > start && is_space(b[piece_end - 1]) {
            piece_end -= 1;
        }
        parts.push(&s[start..piece_end]);
        start = comma + 1;
        while start < b.len() && is_space(b[start]) {
            start += 1;
        }
    }
    if parts.is_empty() {
        return vec![s.to_string()];
    }
    parts.push(&s[start..]);
    while parts.last() == Some(&"") {
        parts.pop();
    }
    parts.into_iter().map(str::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::EncodingKey;

    const FIXTURES: &str = include_str!("../tests/jwt_fixtures/tokens.json");
    /// Inside every recorded token's validity (iat = nbf = 1700000000).
    const NOW: u64 = 1_800_000_000;

    fn fixtures() -> Value {
        serde_json::from_str(FIXTURES).unwrap()
    }

    fn fixture_keys() -> Vec<(String, String)> {
        fixtures()["keys"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
            .collect()
    }

    fn fixture_token(name: &str) -> String {
        fixtures()["tokens"][name].as_str().unwrap().to_string()
    }

    fn b64(text: &str) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text)
    }

    /// A token with the given header and payload texts, signed with HMAC
    /// (`alg` chooses the hash; the header text is taken as is).
    fn signed(alg: Algorithm, secret: &str, header: &str, payload: &str) -> String {
        let message = format!("{}.{}", b64(header), b64(payload));
        let sig = jsonwebtoken::crypto::sign(
            message.as_bytes(),
            &EncodingKey::from_secret(secret.as_bytes()),
            alg,
        )
        .unwrap();
        format!("{message}.{sig}")
    }

    /// HS256 with the `_default` secret and header `{"alg":"HS256"}`.
    fn hs(payload: &str) -> String {
        signed(Algorithm::HS256, "secret", r#"{"alg":"HS256"}"#, payload)
    }

    fn hs_header(header: &str, payload: &str) -> String {
        signed(Algorithm::HS256, "secret", header, payload)
    }

    struct Env {
        keys: Vec<(String, String)>,
        required: Option<String>,
        name: Option<String>,
        path: Option<String>,
        cache: KeyCache,
    }

    impl Env {
        fn new() -> Env {
            Env {
                keys: fixture_keys(),
                required: None,
                name: None,
                path: None,
                cache: KeyCache::new(),
            }
        }

        fn required(mut self, r: &str) -> Env {
            self.required = Some(r.to_string());
            self
        }

        fn roles_name(mut self, n: &str) -> Env {
            self.name = Some(n.to_string());
            self
        }

        fn roles_path(mut self, p: &str) -> Env {
            self.path = Some(p.to_string());
            self
        }

        fn auth_at(&self, token: &str, now: u64) -> Result<UserCtx, JwtError> {
            let settings = JwtSettings {
                keys: &self.keys,
                required_claims: self.required.as_deref(),
                roles_claim_name: self.name.as_deref(),
                roles_claim_path: self.path.as_deref(),
            };
            self.cache.authenticate(token, &settings, now)
        }

        fn auth(&self, token: &str) -> Result<UserCtx, JwtError> {
            self.auth_at(token, NOW)
        }

        /// (status, error, reason) of a refusal.
        fn refusal(&self, token: &str) -> (u16, &'static str, String) {
            let e = self.auth(token).expect_err("refused");
            (e.status(), e.error(), e.reason())
        }

        fn roles(&self, token: &str) -> Vec<String> {
            self.auth(token).unwrap().roles
        }
    }

    fn bad_request(reason: &str) -> (u16, &'static str, String) {
        (400, "bad_request", reason.to_string())
    }

    fn unauthorized(reason: &str) -> (u16, &'static str, String) {
        (401, "unauthorized", reason.to_string())
    }

    fn alice() -> UserCtx {
        UserCtx::user("alice", &["reader", "_admin"])
    }

    #[test]
    fn recorded_tokens_of_every_algorithm_are_accepted() {
        for required in [None, Some("exp, nbf, iat"), Some("")] {
            let mut env = Env::new();
            env.required = required.map(str::to_string);
            for name in [
                "HS256",
                "HS384",
                "HS512",
                "HS256_kid_k2",
                "RS256",
                "RS384",
                "RS512",
                "ES256",
                "ES384",
            ] {
                assert_eq!(env.auth(&fixture_token(name)), Ok(alice()), "{name}");
            }
            let mallory = env.auth(&fixture_token("RS256_mallory")).unwrap();
            assert_eq!(mallory.name.as_deref(), Some("mallory"));
        }
    }

    #[test]
    fn signatures_are_checked() {
        let env = Env::new();
        // Another payload with the header and signature of a genuine token.
        for (genuine, other) in [("RS256", "RS256_mallory"), ("ES256", "ES256_mallory")] {
            let g = fixture_token(genuine);
            let o = fixture_token(other);
            let g: Vec<&str> = g.split('.').collect();
            let o: Vec<&str> = o.split('.').collect();
            let forged = format!("{}.{}.{}", g[0], o[1], g[2]);
            assert_eq!(env.refusal(&forged), bad_request("Bad signature"));
        }
        let hs256 = fixture_token("HS256");
        let h: Vec<&str> = hs256.split('.').collect();
        let forged = format!(
            "{}.{}.{}",
            h[0],
            b64(r#"{"sub":"mallory","exp":1900000000}"#),
            h[2]
        );
        assert_eq!(env.refusal(&forged), bad_request("Bad HMAC"));
        // A P-384 signature checked with the P-256 key of `ec:e1`.
        assert_eq!(
            env.refusal(&fixture_token("ES384_kid_e1")),
            bad_request("Bad signature")
        );
        // Wrong secrets.
        let t = signed(
            Algorithm::HS256,
            "wrong",
            r#"{"alg":"HS256"}"#,
            r#"{"sub":"a","exp":1900000000}"#,
        );
        assert_eq!(env.refusal(&t), bad_request("Bad HMAC"));
        let t = signed(
            Algorithm::HS256,
            "secret",
            r#"{"alg":"HS256","kid":"k2"}"#,
            r#"{"sub":"a","exp":1900000000}"#,
        );
        assert_eq!(env.refusal(&t), bad_request("Bad HMAC"));
        let t = signed(
            Algorithm::HS512,
            "other",
            r#"{"alg":"HS512","kid":"k2"}"#,
            r#"{"sub":"a","exp":1900000000}"#,
        );
        assert_eq!(env.auth(&t).unwrap().name.as_deref(), Some("a"));
        // A signature that is not base64url, empty, padded.
        let good = hs(r#"{"sub":"a","exp":1900000000}"#);
        let (msg, sig) = good.rsplit_once('.').unwrap();
        for s in ["@@@", "", &format!("{sig}=")] {
            assert_eq!(env.refusal(&format!("{msg}.{s}")), bad_request("Bad HMAC"));
        }
        let rs = fixture_token("RS256");
        let (msg, sig) = rs.rsplit_once('.').unwrap();
        for s in ["", "@@@", &format!("{sig}==")] {
            assert_eq!(
                env.refusal(&format!("{msg}.{s}")),
                bad_request("Bad signature")
            );
        }
        let es = fixture_token("ES256");
        let (msg, sig) = es.rsplit_once('.').unwrap();
        for s in ["", &sig[..10], &format!("{sig}=")] {
            assert_eq!(
                env.refusal(&format!("{msg}.{s}")),
                bad_request("Bad signature")
            );
        }
    }

    /// Flips the unused low bits of the last character of a base64url
    /// part whose length is not a multiple of 4.
    fn non_canonical(part: &str) -> String {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        assert_ne!(part.len() % 4, 0);
        let last = *part.as_bytes().last().unwrap();
        let i = ALPHABET.iter().position(|&c| c == last).unwrap();
        let flipped = ALPHABET[i ^ 1] as char;
        format!("{}{}", &part[..part.len() - 1], flipped)
    }

    #[test]
    fn unused_base64_bits_are_ignored_as_couchdb_does() {
        let env = Env::new();
        for name in ["HS256", "RS256", "ES256"] {
            let t = fixture_token(name);
            let (msg, sig) = t.rsplit_once('.').unwrap();
            let t2 = format!("{msg}.{}", non_canonical(sig));
            assert_ne!(t, t2);
            assert_eq!(env.auth(&t2), Ok(alice()), "{name}");
        }
        // A payload part with non-canonical trailing bits, signed as is.
        let h = b64(r#"{"alg":"HS256"}"#);
        let p = b64(r#"{"sub":"a","exp":1900000000}"#);
        let p2 = non_canonical(&p);
        let message = format!("{h}.{p2}");
        let sig = jsonwebtoken::crypto::sign(
            message.as_bytes(),
            &EncodingKey::from_secret(b"secret"),
            Algorithm::HS256,
        )
        .unwrap();
        assert_eq!(
            env.auth(&format!("{message}.{sig}"))
                .unwrap()
                .name
                .as_deref(),
            Some("a")
        );
    }

    #[test]
    fn algorithms() {
        let env = Env::new();
        let payload = r#"{"sub":"a","exp":1900000000}"#;
        assert_eq!(
            env.refusal(&fixture_token("PS256")),
            bad_request("Invalid alg header parameter")
        );
        for header in [
            r#"{"alg":"none"}"#,
            r#"{"alg":"EdDSA"}"#,
            r#"{"alg":"ES512"}"#,
            r#"{"alg":"hs256"}"#,
            r#"{"alg":256}"#,
            r#"{"alg":null}"#,
        ] {
            assert_eq!(
                env.refusal(&hs_header(header, payload)),
                bad_request("Invalid alg header parameter"),
                "{header}"
            );
        }
        // alg none with an empty signature, as an attacker would send it.
        let none = format!("{}.{}.", b64(r#"{"alg":"none"}"#), b64(payload));
        assert_eq!(
            env.refusal(&none),
            bad_request("Invalid alg header parameter")
        );
        assert_eq!(
            env.refusal(&hs_header(r#"{"typ":"JWT"}"#, payload)),
            bad_request("Missing alg header parameter")
        );
        // The header is checked before the payload is decoded.
        let t = format!("{}.{}.x", b64(r#"{"alg":"PS256"}"#), b64("{x"));
        assert_eq!(env.refusal(&t), bad_request("Invalid alg header parameter"));
        let t = format!("{}.{}.x", b64(r#"{"typ":"JWT"}"#), b64("[1]"));
        assert_eq!(env.refusal(&t), bad_request("Missing alg header parameter"));
    }

    #[test]
    fn key_selection() {
        let env = Env::new();
        let payload = r#"{"sub":"a","exp":1900000000}"#;
        assert_eq!(
            env.refusal(&fixture_token("ES256_kid_r1")),
            bad_request("Unknown kid")
        );
        // A key of `ec:e384` exists but an RSA token looks for `rsa:e384`.
        assert_eq!(
            env.refusal(&hs_header(r#"{"alg":"RS256","kid":"e384"}"#, payload)),
            bad_request("Unknown kid")
        );
        for header in [
            r#"{"alg":"HS256","kid":"nope"}"#,
            r#"{"alg":"HS256","kid":""}"#,
            r#"{"alg":"HS256","kid":5}"#,
            r#"{"alg":"HS256","kid":null}"#,
            r#"{"alg":"HS256","kid":"r1"}"#,
        ] {
            assert_eq!(
                env.refusal(&hs_header(header, payload)),
                bad_request("Unknown kid"),
                "{header}"
            );
        }
        // No kid and no `_default` key.
        let mut env = Env::new();
        env.keys.retain(|(k, _)| k != "hmac:_default");
        assert_eq!(env.refusal(&hs(payload)), bad_request("Unknown kid"));
        assert!(env.auth(&fixture_token("HS256_kid_k2")).is_ok());
        // The first of two entries with the same name counts.
        let mut env = Env::new();
        env.keys.insert(
            0,
            (
                "hmac:_default".into(),
                base64::engine::general_purpose::STANDARD.encode("first"),
            ),
        );
        assert_eq!(env.refusal(&hs(payload)), bad_request("Bad HMAC"));
        let t = signed(Algorithm::HS256, "first", r#"{"alg":"HS256"}"#, payload);
        assert!(env.auth(&t).is_ok());
    }

    #[test]
    fn malformed_tokens() {
        let env = Env::new();
        let good = hs(r#"{"sub":"a","exp":1900000000}"#);
        let parts: Vec<&str> = good.split('.').collect();
        let (h, p, s) = (parts[0], parts[1], parts[2]);
        let cases = [
            String::new(),
            "garbage".into(),
            "a.b".into(),
            "x.y.z".into(),
            format!("{good}.x"),
            format!("{h}.{p}"),
            format!("{h}=.{p}.{s}"),
            format!("{h}.{p}=.{s}"),
            format!("{h}.{p}==.{s}"),
            format!(" {good}"),
            format!("{h}.{}.{s}", &p[..p.len() - 1]),
            format!("{h}.{}A.{s}", p),
            format!("{h}..{s}"),
            format!(".{p}.{s}"),
            format!("{}.{p}.{s}", b64("{x")),
            format!("{h}.{}.{s}", b64("{x")),
            format!("{h}.{}.{s}", b64(r#"{"sub":"a"} x"#)),
            format!("{h}.{}.{s}", b64("\u{feff}{\"sub\":\"a\"}")),
            format!("{h}.{}.{s}", b64(r#"{"sub":"\ud800"}"#)),
            format!("{h}.{}.{s}", b64(r#"{"x":1e400}"#)),
            format!(
                "{h}.{}.{s}",
                base64::engine::general_purpose::URL_SAFE_NO_PAD.encode([b'{', 0xff, b'}'])
            ),
            format!(
                "{h}.{}.{s}",
                b64(&format!("{}{}", "[".repeat(200), "]".repeat(200)))
            ),
        ];
        for t in &cases {
            assert_eq!(env.refusal(t), bad_request("Malformed token"), "{t:?}");
        }
        // The standard alphabet is refused: `?>~` encodes with `_`.
        let p_url = b64(r#"{"sub":"?>~"}"#);
        assert!(p_url.contains('_'));
        let t = hs(r#"{"sub":"?>~"}"#);
        assert_eq!(env.auth(&t).err(), Some(JwtError::MissingClaim("exp")));
        let std_alphabet = t.replace('_', "/").replace('-', "+");
        assert_eq!(env.refusal(&std_alphabet), bad_request("Malformed token"));
        // Too long, even when well formed.
        let long = hs(&format!(
            r#"{{"sub":"a","exp":1900000000,"x":"{}"}}"#,
            "y".repeat(MAX_TOKEN_LEN)
        ));
        assert_eq!(env.refusal(&long), bad_request("Malformed token"));
        let fits = hs(&format!(
            r#"{{"sub":"a","exp":1900000000,"x":"{}"}}"#,
            "y".repeat(40_000)
        ));
        assert!(fits.len() <= MAX_TOKEN_LEN);
        assert!(env.auth(&fits).is_ok());
        for json in ["[1]", r#""s""#, "1", "null", "true"] {
            let t = format!("{}.{}.{s}", b64(json), p);
            assert_eq!(
                env.refusal(&t),
                bad_request("Not an object"),
                "header {json}"
            );
            let t = format!("{h}.{}.{s}", b64(json));
            assert_eq!(
                env.refusal(&t),
                bad_request("Not an object"),
                "payload {json}"
            );
        }
    }

    #[test]
    fn json_details() {
        let env = Env::new().required("");
        // The first of duplicate keys wins, in the header and the payload.
        let t = hs(r#"{"sub":"a","sub":"b","_couchdb.roles":["x"],"_couchdb.roles":5}"#);
        assert_eq!(env.auth(&t), Ok(UserCtx::user("a", &["x"])));
        let t = hs_header(r#"{"alg":"HS256","alg":"none"}"#, r#"{"sub":"a"}"#);
        assert!(env.auth(&t).is_ok());
        let t = hs_header(r#"{"alg":"none","alg":"HS256"}"#, r#"{"sub":"a"}"#);
        assert_eq!(env.refusal(&t), bad_request("Invalid alg header parameter"));
        // Nested duplicates too (roles path).
        let env2 = Env::new().required("").roles_path("a.b");
        let t = hs(r#"{"sub":"a","a":{"b":["first"],"b":["second"]}}"#);
        assert_eq!(env2.roles(&t), vec!["first"]);
        // Whitespace around the JSON, unicode names.
        let t = hs_header(
            " { \"alg\" : \"HS256\" } ",
            " {\"sub\":\"\\u00e9\u{4e2d}\"} ",
        );
        assert_eq!(env.auth(&t).unwrap().name.as_deref(), Some("é中"));
    }

    #[test]
    fn typ_header() {
        let env = Env::new().required("");
        let p = r#"{"sub":"a"}"#;
        assert!(env
            .auth(&hs_header(r#"{"alg":"HS256","typ":"JWT"}"#, p))
            .is_ok());
        assert!(env.auth(&hs_header(r#"{"alg":"HS256"}"#, p)).is_ok());
        for typ in [r#""jwt""#, r#""x""#, "1", "null"] {
            let h = format!(r#"{{"alg":"HS256","typ":{typ}}}"#);
            assert_eq!(
                env.refusal(&hs_header(&h, p)),
                bad_request("Invalid typ header parameter"),
                "{typ}"
            );
        }
        // typ is checked before alg.
        assert_eq!(
            env.refusal(&hs_header(r#"{"alg":"PS256","typ":"x"}"#, p)),
            bad_request("Invalid typ header parameter")
        );
        // Listed typ and kid: typ, then alg, then kid.
        let env = Env::new().required("kid, typ");
        let cases = [
            (r#"{}"#, "Missing typ header parameter"),
            (r#"{"alg":"HS256"}"#, "Missing typ header parameter"),
            (r#"{"alg":"PS256"}"#, "Missing typ header parameter"),
            (r#"{"typ":"JWT"}"#, "Missing alg header parameter"),
            (
                r#"{"typ":"JWT","kid":"k2"}"#,
                "Missing alg header parameter",
            ),
            (
                r#"{"typ":"JWT","kid":"k2","alg":"PS256"}"#,
                "Invalid alg header parameter",
            ),
            (r#"{"typ":"JWT","alg":"HS256"}"#, "Missing kid claim"),
            (r#"{"typ":"x"}"#, "Invalid typ header parameter"),
        ];
        for (h, reason) in cases {
            assert_eq!(env.refusal(&hs_header(h, p)), bad_request(reason), "{h}");
        }
        let t = signed(
            Algorithm::HS256,
            "other",
            r#"{"typ":"JWT","alg":"HS256","kid":"k2"}"#,
            p,
        );
        assert!(env.auth(&t).is_ok());
        // Header checks come before the payload is decoded.
        let t = format!("{}.{}.x", b64(r#"{"alg":"HS256"}"#), b64("{x"));
        assert_eq!(env.refusal(&t), bad_request("Missing typ header parameter"));
        let t = format!(
            "{}.{}.x",
            b64(r#"{"typ":"JWT","alg":"HS256","kid":"k2"}"#),
            b64("{x")
        );
        assert_eq!(env.refusal(&t), bad_request("Malformed token"));
    }

    #[test]
    fn exp_is_required_by_default() {
        let env = Env::new();
        assert_eq!(
            env.refusal(&hs(r#"{"sub":"a"}"#)),
            bad_request("Missing exp claim")
        );
        // Boundary: exp must be after now.
        let t = hs(r#"{"sub":"a","exp":1000}"#);
        assert_eq!(env.auth_at(&t, 999).unwrap().name.as_deref(), Some("a"));
        assert_eq!(env.auth_at(&t, 1000).err(), Some(JwtError::ExpNotInFuture));
        assert_eq!(env.auth_at(&t, 1001).err(), Some(JwtError::ExpNotInFuture));
        assert_eq!(env.refusal(&t), unauthorized("exp not in future"));
        // Floats compare as numbers; very large numbers are far future.
        let t = hs(r#"{"sub":"a","exp":1000.5}"#);
        assert!(env.auth_at(&t, 1000).is_ok());
        assert_eq!(env.auth_at(&t, 1001).err(), Some(JwtError::ExpNotInFuture));
        for exp in [
            "123456789012345678901234567890",
            "1e30",
            "18446744073709551615",
        ] {
            let t = hs(&format!(r#"{{"sub":"a","exp":{exp}}}"#));
            assert!(env.auth(&t).is_ok(), "{exp}");
        }
        // Settee: a non-number exp is not in the future (CouchDB accepts).
        for exp in [r#""abc""#, "true", "null", "[]", "-5"] {
            let t = hs(&format!(r#"{{"sub":"a","exp":{exp}}}"#));
            assert_eq!(env.refusal(&t), unauthorized("exp not in future"), "{exp}");
        }
        // Not listed, not checked: nbf in the future passes.
        let t = hs(r#"{"sub":"a","exp":1900000000,"nbf":1900000000}"#);
        assert!(env.auth(&t).is_ok());
    }

    #[test]
    fn nothing_required_when_empty() {
        for required in ["", "   "] {
            let env = Env::new().required(required);
            let t = hs(r#"{"sub":"a","exp":5,"nbf":1900000000,"iat":"x","iss":5}"#);
            assert_eq!(env.auth(&t), Ok(UserCtx::user("a", &[])), "{required:?}");
        }
    }

    #[test]
    fn nbf_and_iat() {
        let env = Env::new().required("nbf, iat");
        assert_eq!(
            env.refusal(&hs(r#"{"sub":"a","nbf":1}"#)),
            bad_request("Missing iat claim")
        );
        assert_eq!(
            env.refusal(&hs(r#"{"sub":"a","iat":1}"#)),
            bad_request("Missing nbf claim")
        );
        // nbf must be strictly before now.
        let t = hs(r#"{"sub":"a","nbf":1000,"iat":1}"#);
        assert!(env.auth_at(&t, 1001).is_ok());
        assert_eq!(env.auth_at(&t, 1000).err(), Some(JwtError::NbfNotInPast));
        assert_eq!(env.auth_at(&t, 999).err(), Some(JwtError::NbfNotInPast));
        let e = env.auth_at(&t, 1000).unwrap_err();
        assert_eq!(
            (e.status(), e.error(), e.reason()),
            unauthorized("nbf not in past")
        );
        let t = hs(r#"{"sub":"a","nbf":999.5,"iat":1}"#);
        assert!(env.auth_at(&t, 1000).is_ok());
        for nbf in [r#""x""#, "null", "true"] {
            let t = hs(&format!(r#"{{"sub":"a","nbf":{nbf},"iat":1}}"#));
            assert_eq!(env.refusal(&t), unauthorized("nbf not in past"), "{nbf}");
        }
        // iat: an integer, any value (future and negative included).
        for iat in ["-5", "0", "1900000000", "18446744073709551615"] {
            let t = hs(&format!(r#"{{"sub":"a","nbf":1,"iat":{iat}}}"#));
            assert!(env.auth(&t).is_ok(), "{iat}");
        }
        for iat in ["1.5", "1.0", "1e3", r#""1""#, "null", "true"] {
            let t = hs(&format!(r#"{{"sub":"a","nbf":1,"iat":{iat}}}"#));
            assert_eq!(env.refusal(&t), bad_request("Invalid iat claim"), "{iat}");
        }
    }

    #[test]
    fn claim_order_is_iss_iat_nbf_exp() {
        for required in [
            "exp, nbf, iat, {iss, \"me\"}",
            "{iss, \"me\"}, iat, nbf, exp",
        ] {
            let env = Env::new().required(required);
            let cases = [
                (r#"{"sub":"a"}"#, bad_request("Missing iss claim")),
                (
                    r#"{"sub":"a","iss":"x","exp":1}"#,
                    bad_request("Invalid iss claim"),
                ),
                (
                    r#"{"sub":"a","iss":"me"}"#,
                    bad_request("Missing iat claim"),
                ),
                (
                    r#"{"sub":"a","iss":"me","exp":1,"nbf":1900000000,"iat":"x"}"#,
                    bad_request("Invalid iat claim"),
                ),
                (
                    r#"{"sub":"a","iss":"me","iat":1}"#,
                    bad_request("Missing nbf claim"),
                ),
                (
                    r#"{"sub":"a","iss":"me","iat":1,"exp":1,"nbf":1900000000}"#,
                    unauthorized("nbf not in past"),
                ),
                (
                    r#"{"sub":"a","iss":"me","iat":1,"nbf":1}"#,
                    bad_request("Missing exp claim"),
                ),
                (
                    r#"{"sub":"a","iss":"me","iat":1,"nbf":1,"exp":1}"#,
                    unauthorized("exp not in future"),
                ),
            ];
            for (payload, expected) in cases {
                assert_eq!(env.refusal(&hs(payload)), expected, "{required}: {payload}");
            }
            let ok = hs(r#"{"sub":"a","iss":"me","iat":1,"nbf":1,"exp":1900000000}"#);
            assert!(env.auth(&ok).is_ok());
        }
    }

    #[test]
    fn claims_are_checked_before_the_key_and_the_signature() {
        let env = Env::new();
        let t = signed(
            Algorithm::HS256,
            "wrong",
            r#"{"alg":"HS256"}"#,
            r#"{"sub":"a","exp":1}"#,
        );
        assert_eq!(env.refusal(&t), unauthorized("exp not in future"));
        let t = hs_header(r#"{"alg":"HS256","kid":"nope"}"#, r#"{"sub":"a"}"#);
        assert_eq!(env.refusal(&t), bad_request("Missing exp claim"));
        // The key before the signature.
        let t = signed(
            Algorithm::HS256,
            "wrong",
            r#"{"alg":"HS256","kid":"zz"}"#,
            r#"{"sub":"a","exp":1900000000}"#,
        );
        assert_eq!(env.refusal(&t), bad_request("Unknown kid"));
    }

    #[test]
    fn iss() {
        let env = Env::new().required(r#"{iss, "me"}"#);
        assert_eq!(
            env.refusal(&hs(r#"{"sub":"a"}"#)),
            bad_request("Missing iss claim")
        );
        for iss in [r#""x""#, "5", "true", r#""me ""#, r#""ME""#] {
            let t = hs(&format!(r#"{{"sub":"a","iss":{iss}}}"#));
            assert_eq!(env.refusal(&t), bad_request("Invalid iss claim"), "{iss}");
        }
        assert!(env.auth(&hs(r#"{"sub":"a","iss":"me"}"#)).is_ok());
        // Spaces around the comma are allowed, nothing else.
        for required in [r#"{iss,"me"}"#, r#"{iss ,  "me"}"#, r#"{iss, "me"} }"#] {
            let env = Env::new().required(required);
            assert!(
                env.auth(&hs(r#"{"sub":"a","iss":"me"}"#)).is_ok(),
                "{required}"
            );
        }
        let env = Env::new().required(r#"{iss, "m}e, é"}"#);
        assert!(env.auth(&hs(r#"{"sub":"a","iss":"m}e, é"}"#)).is_ok());
        // The first iss check counts; a plain iss wants JSON true.
        let env = Env::new().required(r#"{iss, "me"}, {iss, "you"}"#);
        assert!(env.auth(&hs(r#"{"sub":"a","iss":"me"}"#)).is_ok());
        assert_eq!(
            env.refusal(&hs(r#"{"sub":"a","iss":"you"}"#)),
            bad_request("Invalid iss claim")
        );
        let env = Env::new().required(r#"{iss, "me"}, iss"#);
        assert!(env.auth(&hs(r#"{"sub":"a","iss":"me"}"#)).is_ok());
        for required in ["iss", r#"iss, {iss, "me"}"#, r#"{iss, ""}"#, "{iss}"] {
            let env = Env::new().required(required);
            assert_eq!(
                env.refusal(&hs(r#"{"sub":"a"}"#)),
                bad_request("Missing iss claim")
            );
            assert_eq!(
                env.refusal(&hs(r#"{"sub":"a","iss":"me"}"#)),
                bad_request("Invalid iss claim"),
                "{required}"
            );
            assert!(
                env.auth(&hs(r#"{"sub":"a","iss":true}"#)).is_ok(),
                "{required}"
            );
        }
    }

    #[test]
    fn required_claims_syntax() {
        // (text, payload that must pass, payload that must fail with reason)
        let cases = [
            (
                "exp,,nbf",
                r#"{"exp":1900000000,"nbf":1}"#,
                r#"{"exp":1900000000}"#,
                "Missing nbf claim",
            ),
            (
                " exp ",
                r#"{"exp":1900000000}"#,
                r#"{}"#,
                "Missing exp claim",
            ),
            (
                "exp,",
                r#"{"exp":1900000000}"#,
                r#"{}"#,
                "Missing exp claim",
            ),
            (
                "exp nbf",
                r#"{"exp":1900000000,"nbf":1}"#,
                r#"{"exp":1900000000}"#,
                "Missing nbf claim",
            ),
            (
                "[exp]",
                r#"{"exp":1900000000}"#,
                r#"{}"#,
                "Missing exp claim",
            ),
            (
                "\"exp\"",
                r#"{"exp":1900000000}"#,
                r#"{}"#,
                "Missing exp claim",
            ),
            (
                "exp9",
                r#"{"exp":1900000000}"#,
                r#"{}"#,
                "Missing exp claim",
            ),
            ("sig", r#"{}"#, r#"{"sub":5}"#, "Token missing sub claim."),
            (
                r#"{alg, "x"}"#,
                r#"{}"#,
                r#"{"sub":5}"#,
                "Token missing sub claim.",
            ),
            (
                r#"{kid, "k9"}"#,
                r#"{}"#,
                r#"{"sub":5}"#,
                "Token missing sub claim.",
            ),
            (
                r#"{sig, "x"}"#,
                r#"{}"#,
                r#"{"sub":5}"#,
                "Token missing sub claim.",
            ),
        ];
        for (required, pass, fail, reason) in cases {
            let env = Env::new().required(required);
            let with_sub = |p: &str| p.replacen('{', r#"{"sub":"a","#, 1).replace(",}", "}");
            assert!(env.auth(&hs(&with_sub(pass))).is_ok(), "{required}: {pass}");
            let fail = if fail.contains("sub") {
                fail.to_string()
            } else {
                with_sub(fail)
            };
            let e = env.auth(&hs(&fail)).unwrap_err();
            assert_eq!(e.reason(), reason, "{required}: {fail}");
        }
    }

    #[test]
    fn required_claims_errors() {
        let cases = [
            ("exp, foo", "unknown_checks", "[foo]"),
            ("foo, bar", "unknown_checks", "[foo,bar]"),
            ("sub", "unknown_checks", "[sub]"),
            ("aud, jti", "unknown_checks", "[aud,jti]"),
            ("{iss, me}", "unknown_checks", "[me]"),
            ("{ iss , \"me\" }", "unknown_checks", "[me]"),
            ("{iss,\t\"me\"}", "unknown_checks", "[me]"),
            ("{iss, 'me'}", "unknown_checks", "[me]"),
            ("{iss, \"me\"", "unknown_checks", "[me]"),
            ("{iss, \"me\", x}", "unknown_checks", "[me,x]"),
            ("exp_x", "unknown_checks", "[x]"),
            (
                "{foo, \"a b!\"}, bar9",
                "unknown_checks",
                r#"[{foo,<<"a b!">>},bar]"#,
            ),
            ("{foo, \"é\"}", "unknown_checks", r#"[{foo,<<"é">>}]"#),
            (
                r#"{iss, "a\\b"}, {foo, "a\\b"}"#,
                "unknown_checks",
                r#"[{foo,<<"a\\\\b">>}]"#,
            ),
            ("end, foo", "unknown_checks", "['end',foo]"),
            (
                "maybe, else, cond, let, fun, receive, foo",
                "unknown_checks",
                "[maybe,else,'cond','let','fun','receive',foo]",
            ),
            ("alg", "duplicate_checks", "[alg]"),
            ("foo, alg", "duplicate_checks", "[alg]"),
            ("exp, exp", "duplicate_checks", "[exp]"),
            ("exp, exp, exp", "duplicate_checks", "[exp,exp]"),
            ("exp, exp, foo", "duplicate_checks", "[exp]"),
            ("exp, exp, foo, foo", "duplicate_checks", "[exp,foo]"),
            ("foo, exp, foo, exp", "duplicate_checks", "[exp,foo]"),
            (
                r#"{iss, "me"}, {iss, "me"}"#,
                "duplicate_checks",
                r#"[{iss,<<"me">>}]"#,
            ),
            (
                r#"iss, {iss, "me"}, iss, {iss, "me"}"#,
                "duplicate_checks",
                r#"[iss,{iss,<<"me">>}]"#,
            ),
            (
                ",",
                "misconfigured_server",
                "JWT is not configured correctly",
            ),
            (
                "EXP",
                "misconfigured_server",
                "JWT is not configured correctly",
            ),
            (
                "{exp, \"x\"}",
                "misconfigured_server",
                "JWT is not configured correctly",
            ),
            (
                "{nbf, \"x\"}",
                "misconfigured_server",
                "JWT is not configured correctly",
            ),
            (
                "{iat, \"x\"}",
                "misconfigured_server",
                "JWT is not configured correctly",
            ),
            (
                "{typ, \"JWT\"}",
                "misconfigured_server",
                "JWT is not configured correctly",
            ),
        ];
        let good = hs(r#"{"sub":"a","exp":1900000000,"iss":"me"}"#);
        for (required, error, reason) in cases {
            let env = Env::new().required(required);
            // Before the token is even decoded.
            for t in [good.as_str(), "x.y.z", ""] {
                let e = env.auth(t).unwrap_err();
                assert_eq!(
                    (e.status(), e.error(), e.reason().as_str()),
                    (500, error, reason),
                    "{required:?}"
                );
            }
        }
    }

    #[test]
    fn sub() {
        let env = Env::new().required("");
        for sub in ["5", "null", r#"["a"]"#, r#"{"a":1}"#, "true", "1.5"] {
            let t = hs(&format!(r#"{{"sub":{sub}}}"#));
            assert_eq!(
                env.refusal(&t),
                unauthorized("Token missing sub claim."),
                "{sub}"
            );
        }
        assert_eq!(
            env.refusal(&hs("{}")),
            unauthorized("Token missing sub claim.")
        );
        assert_eq!(env.auth(&hs(r#"{"sub":""}"#)), Ok(UserCtx::user("", &[])));
        // The sub check comes after the signature.
        let t = signed(Algorithm::HS256, "wrong", r#"{"alg":"HS256"}"#, "{}");
        assert_eq!(env.refusal(&t), bad_request("Bad HMAC"));
    }

    #[test]
    fn default_roles_claim() {
        let env = Env::new().required("");
        assert_eq!(env.roles(&hs(r#"{"sub":"a"}"#)), Vec::<String>::new());
        assert_eq!(
            env.roles(&hs(r#"{"sub":"a","_couchdb.roles":["_admin","", " a "]}"#)),
            vec!["_admin", "", " a "]
        );
        // The default is the top-level name, not a path.
        assert_eq!(
            env.roles(&hs(r#"{"sub":"a","_couchdb":{"roles":["x"]}}"#)),
            Vec::<String>::new()
        );
        let admin = env
            .auth(&hs(r#"{"sub":"a","_couchdb.roles":["_admin"]}"#))
            .unwrap();
        assert!(admin.is_server_admin());
    }

    #[test]
    fn roles_strings_are_split_at_commas() {
        let env = Env::new().required("");
        let cases: &[(&str, &[&str])] = &[
            ("a, b,c", &["a", "b", "c"]),
            (" x, y ,z,", &[" x", "y", "z"]),
            ("a,,b", &["a", "", "b"]),
            (",a", &["", "a"]),
            ("a,", &["a"]),
            ("a , b ", &["a", "b "]),
            ("  ", &["  "]),
            ("", &[""]),
            (",", &[]),
            (",,", &[]),
            ("a,  ,b", &["a", "", "b"]),
            ("a\t,\tb", &["a", "b"]),
            ("a\n,b", &["a", "b"]),
            ("a, ", &["a"]),
            (" ,a", &["", "a"]),
            ("é , ü", &["é", "ü"]),
        ];
        for (s, expected) in cases {
            let payload = serde_json::json!({"sub": "a", "_couchdb.roles": s}).to_string();
            assert_eq!(env.roles(&hs(&payload)), *expected, "{s:?}");
        }
    }

    #[test]
    fn malformed_roles() {
        for env in [
            Env::new().required(""),
            Env::new().required("").roles_name("roles"),
            Env::new().required("").roles_path("roles"),
        ] {
            let claim = env
                .name
                .clone()
                .or(env.path.clone())
                .unwrap_or(DEFAULT_ROLES_CLAIM.into());
            for roles in [r#"["x",1]"#, "[null]", "5", "null", "{}", "true"] {
                let t = hs(&format!(r#"{{"sub":"a","{claim}":{roles}}}"#));
                assert_eq!(
                    env.refusal(&t),
                    bad_request("Malformed token"),
                    "{claim}: {roles}"
                );
                // Roles are read before sub is checked.
                let t = hs(&format!(r#"{{"{claim}":{roles}}}"#));
                assert_eq!(
                    env.refusal(&t),
                    bad_request("Malformed token"),
                    "{claim}: {roles}"
                );
            }
        }
    }

    #[test]
    fn roles_claim_name() {
        let env = Env::new().required("").roles_name("roles");
        assert_eq!(
            env.roles(&hs(r#"{"sub":"a","roles":["x"],"_couchdb.roles":["d"]}"#)),
            vec!["x"]
        );
        assert_eq!(
            env.roles(&hs(r#"{"sub":"a","_couchdb.roles":["d"]}"#)),
            Vec::<String>::new()
        );
        assert_eq!(
            env.roles(&hs(r#"{"sub":"a","roles":"p,q"}"#)),
            vec!["p", "q"]
        );
    }

    #[test]
    fn roles_claim_path() {
        let env = Env::new()
            .required("")
            .roles_path(r"my.nested._couchdb\.roles")
            .roles_name("roles");
        let deep = r#"{"sub":"a","roles":["x"],"my":{"nested":{"_couchdb.roles":["deep"]}}}"#;
        assert_eq!(env.roles(&hs(deep)), vec!["deep"]);
        let t = hs(r#"{"sub":"a","my":{"nested":{"_couchdb.roles":"u, v"}}}"#);
        assert_eq!(env.roles(&t), vec!["u", "v"]);
        let not_found = |reason: &str| (404, "not_found", reason.to_string());
        let cases = [
            (
                r#"{"sub":"a","roles":["x"]}"#,
                not_found("missing json key: my"),
            ),
            (
                r#"{"sub":"a","my.nested._couchdb.roles":["t"]}"#,
                not_found("missing json key: my"),
            ),
            (
                r#"{"sub":"a","my":{}}"#,
                not_found("missing json key: nested"),
            ),
            (
                r#"{"sub":"a","my":{"nested":{}}}"#,
                not_found("missing json key: _couchdb.roles"),
            ),
            (r#"{"sub":"a","my":5}"#, not_found("json_mismatch")),
            (
                r#"{"sub":"a","my":[{"nested":1}]}"#,
                not_found("json_mismatch"),
            ),
            (r#"{"sub":"a","my":"x"}"#, not_found("json_mismatch")),
            (
                r#"{"sub":"a","my":{"nested":null}}"#,
                not_found("json_mismatch"),
            ),
            // Roles before sub.
            (r#"{}"#, not_found("missing json key: my")),
            (
                r#"{"sub":"a","my":{"nested":{"_couchdb.roles":5}}}"#,
                bad_request("Malformed token"),
            ),
        ];
        for (payload, expected) in cases {
            assert_eq!(env.refusal(&hs(payload)), expected, "{payload}");
        }
        // The signature before roles.
        let t = signed(
            Algorithm::HS256,
            "wrong",
            r#"{"alg":"HS256"}"#,
            r#"{"sub":"a"}"#,
        );
        assert_eq!(env.refusal(&t), bad_request("Bad HMAC"));
        let e = env.auth(&hs(r#"{"sub":"a"}"#)).unwrap_err();
        assert_eq!(
            e.to_couchdb(),
            AuthError::NotFound("missing json key: my".into())
        );
    }

    #[test]
    fn roles_path_splitting() {
        assert_eq!(
            split_path(r"my.nested._couchdb\.roles"),
            ["my", "nested", "_couchdb.roles"]
        );
        assert_eq!(split_path(""), [""]);
        assert_eq!(split_path("a..b"), ["a", "", "b"]);
        assert_eq!(split_path("a."), ["a", ""]);
        assert_eq!(split_path(".a"), ["", "a"]);
        assert_eq!(split_path(r"a\"), [r"a\"]);
        assert_eq!(split_path(r"a\\.b"), [r"a\.b"]);
        assert_eq!(split_path(r"a\b"), [r"a\b"]);
        assert_eq!(split_path(r"a\..b"), ["a.", "b"]);
        // As CouchDB resolves them against one payload.
        let payload = r#"{"sub":"a","roles":["R"],"a":{"":{"b":["AB"]},"b":["A.B"]},"":{"a":["EA"]},
            "a\\":["BS"],"a\\.b":["ADB"],"a\\b":["AXB"],"_couchdb":{"roles":["NEST"]},"_couchdb.roles":["TOP"]}"#;
        let cases = [
            ("roles", "R"),
            ("a..b", "AB"),
            (".a", "EA"),
            (r"a\", "BS"),
            (r"a\\.b", "ADB"),
            (r"a\b", "AXB"),
            ("_couchdb.roles", "NEST"),
            (r"_couchdb\.roles", "TOP"),
            ("a.b", "A.B"),
        ];
        for (path, role) in cases {
            let env = Env::new().required("").roles_path(path);
            assert_eq!(env.roles(&hs(payload)), vec![role], "{path}");
        }
        let env = Env::new().required("").roles_path("");
        assert_eq!(
            env.refusal(&hs(r#"{"sub":"a"}"#)),
            (404, "not_found", "missing json key: ".into())
        );
        assert_eq!(env.roles(&hs(r#"{"sub":"a","":["E"]}"#)), vec!["E"]);
    }

    #[test]
    fn key_cache_parses_each_key_once() {
        let env = Env::new();
        for _ in 0..50 {
            for name in ["RS256", "ES256", "ES384", "HS256", "HS256_kid_k2"] {
                assert_eq!(env.auth(&fixture_token(name)), Ok(alice()));
            }
        }
        assert_eq!(env.cache.parse_count(), 5);
        assert_eq!(env.cache.len(), 5);
        // A changed value is parsed again (and the old key is gone).
        let mut env = env;
        for (k, v) in &mut env.keys {
            if k == "rsa:r1" {
                *v = v.replace("\\n", "\n");
            }
        }
        assert_eq!(env.auth(&fixture_token("RS256")), Ok(alice()));
        assert_eq!(env.cache.parse_count(), 6);
        assert_eq!(env.cache.len(), 5);
    }

    #[test]
    fn key_cache_is_bounded() {
        let cache = KeyCache::new();
        let keys: Vec<(String, String)> = (0..200)
            .map(|i| {
                (
                    format!("hmac:k{i}"),
                    base64::engine::general_purpose::STANDARD.encode(format!("s{i}")),
                )
            })
            .collect();
        let settings = JwtSettings {
            required_claims: Some(""),
            ..JwtSettings::new(&keys)
        };
        for i in 0..200 {
            let t = signed(
                Algorithm::HS256,
                &format!("s{i}"),
                &format!(r#"{{"alg":"HS256","kid":"k{i}"}}"#),
                r#"{"sub":"a"}"#,
            );
            assert!(cache.authenticate(&t, &settings, NOW).is_ok());
            assert!(cache.len() <= KEY_CACHE_CAPACITY);
        }
        assert_eq!(cache.parse_count(), 200);
        assert!(!cache.is_empty());
    }

    #[test]
    fn keys_that_are_not_keys() {
        let t = hs(r#"{"sub":"a","exp":1900000000}"#);
        for bad in ["not base64!", "c2VjcmV0==="] {
            let mut env = Env::new();
            env.keys.retain(|(k, _)| k != "hmac:_default");
            env.keys.push(("hmac:_default".into(), bad.into()));
            let e = env.auth(&t).unwrap_err();
            assert_eq!(
                (e.status(), e.error(), e.reason().as_str()),
                (
                    500,
                    "misconfigured_server",
                    "JWT is not configured correctly"
                ),
                "{bad}"
            );
            // The failure is cached too.
            assert!(env.auth(&t).is_err());
            assert_eq!(env.cache.parse_count(), 1);
        }
        // Padding is optional in the hmac value.
        let mut env = Env::new();
        for (k, v) in &mut env.keys {
            if k == "hmac:k2" {
                *v = "b3RoZXI".into();
            }
        }
        assert!(env.auth(&fixture_token("HS256_kid_k2")).is_ok());
        // A PEM that is not a key, an EC key under rsa:, an RSA key under ec:.
        let ec_pem = fixture_keys()
            .into_iter()
            .find(|(k, _)| k == "ec:e1")
            .unwrap()
            .1;
        let rsa_pem = fixture_keys()
            .into_iter()
            .find(|(k, _)| k == "rsa:r1")
            .unwrap()
            .1;
        for (name, value, token) in [
            (
                "rsa:r1",
                "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n".to_string(),
                "RS256",
            ),
            ("rsa:r1", ec_pem, "RS256"),
            ("ec:e1", rsa_pem, "ES256"),
        ] {
            let mut env = Env::new();
            for (k, v) in &mut env.keys {
                if k == name {
                    *v = value.clone();
                }
            }
            assert_eq!(
                env.auth(&fixture_token(token)).err(),
                Some(JwtError::Misconfigured),
                "{name}"
            );
        }
    }

    #[test]
    fn error_table() {
        let cases = [
            (JwtError::Malformed, 400, "bad_request", "Malformed token"),
            (JwtError::NotAnObject, 400, "bad_request", "Not an object"),
            (
                JwtError::MissingHeader("alg"),
                400,
                "bad_request",
                "Missing alg header parameter",
            ),
            (
                JwtError::InvalidHeader("typ"),
                400,
                "bad_request",
                "Invalid typ header parameter",
            ),
            (
                JwtError::MissingClaim("exp"),
                400,
                "bad_request",
                "Missing exp claim",
            ),
            (
                JwtError::InvalidClaim("iss"),
                400,
                "bad_request",
                "Invalid iss claim",
            ),
            (
                JwtError::ExpNotInFuture,
                401,
                "unauthorized",
                "exp not in future",
            ),
            (
                JwtError::NbfNotInPast,
                401,
                "unauthorized",
                "nbf not in past",
            ),
            (JwtError::UnknownKid, 400, "bad_request", "Unknown kid"),
            (JwtError::BadHmac, 400, "bad_request", "Bad HMAC"),
            (JwtError::BadSignature, 400, "bad_request", "Bad signature"),
            (
                JwtError::MissingSub,
                401,
                "unauthorized",
                "Token missing sub claim.",
            ),
            (
                JwtError::MissingJsonKey("my".into()),
                404,
                "not_found",
                "missing json key: my",
            ),
            (JwtError::JsonMismatch, 404, "not_found", "json_mismatch"),
            (
                JwtError::Misconfigured,
                500,
                "misconfigured_server",
                "JWT is not configured correctly",
            ),
            (
                JwtError::DuplicateChecks("[exp]".into()),
                500,
                "duplicate_checks",
                "[exp]",
            ),
            (
                JwtError::UnknownChecks("[foo]".into()),
                500,
                "unknown_checks",
                "[foo]",
            ),
        ];
        for (e, status, error, reason) in cases {
            assert_eq!(
                (e.status(), e.error(), e.reason().as_str()),
                (status, error, reason)
            );
            let a = e.to_couchdb();
            assert_eq!((a.status(), a.error(), a.reason()), (status, error, reason));
        }
    }

    #[test]
    fn shareable() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<KeyCache>();
        assert_send_sync::<JwtError>();
    }

    mod never_panics {
        use super::*;
        use proptest::prelude::*;

        fn envs() -> [Env; 3] {
            [
                Env::new(),
                Env::new().required("exp, nbf, iat, {iss, \"me\"}, kid, typ"),
                Env::new().required("").roles_path(r"a.b\.c"),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            #[test]
            fn arbitrary_text(token in ".{0,300}") {
                for env in envs() {
                    let _ = env.auth(&token);
                }
            }

            #[test]
            fn three_base64url_parts(
                h in "[A-Za-z0-9_-]{0,60}",
                p in "[A-Za-z0-9_-]{0,120}",
                s in "[A-Za-z0-9_=+/-]{0,100}",
            ) {
                for env in envs() {
                    let _ = env.auth(&format!("{h}.{p}.{s}"));
                }
            }

            #[test]
            fn json_parts(header in any::<serde_json_arb::Json>(), payload in any::<serde_json_arb::Json>()) {
                let t = hs_header(&header.0, &payload.0);
                for env in envs() {
                    let _ = env.auth(&t);
                }
            }

            #[test]
            fn mutated_recorded_tokens(
                which in 0usize..9,
                at in any::<prop::sample::Index>(),
                byte in any::<u8>(),
                op in 0u8..3,
            ) {
                let names = ["HS256", "HS384", "HS512", "HS256_kid_k2", "RS256", "RS384", "RS512", "ES256", "ES384"];
                let token = fixture_token(names[which]).into_bytes();
                let i = at.index(token.len());
                let mut t = token.clone();
                match op {
                    0 => t[i] = byte,
                    1 => t.insert(i, byte),
                    _ => { t.remove(i); }
                }
                let t = String::from_utf8_lossy(&t).into_owned();
                let env = Env::new();
                let r = env.auth(&t);
                if t != String::from_utf8_lossy(&token) {
                    // A changed token is never accepted as alice, except
                    // when only unused base64 bits changed.
                    if let Ok(user) = r {
                        prop_assert_eq!(user, alice());
                    }
                }
            }
        }

        /// Small JSON texts for headers and payloads: objects with the
        /// names the handler reads and values of every type.
        mod serde_json_arb {
            use proptest::prelude::*;

            #[derive(Debug, Clone)]
            pub struct Json(pub String);

            fn leaf() -> impl Strategy<Value = String> {
                prop_oneof![
                    Just("null".to_string()),
                    any::<bool>().prop_map(|b| b.to_string()),
                    any::<i64>().prop_map(|i| i.to_string()),
                    any::<f64>()
                        .prop_filter("finite", |f| f.is_finite())
                        .prop_map(|f| format!("{f:e}")),
                    "[a-zA-Z0-9 ,._\\\\]{0,8}"
                        .prop_map(|s| serde_json::Value::String(s).to_string()),
                    prop::sample::select(vec![
                        "\"HS256\"",
                        "\"RS256\"",
                        "\"ES256\"",
                        "\"JWT\"",
                        "\"k2\"",
                        "\"me\"",
                        "1800000001"
                    ])
                    .prop_map(str::to_string),
                ]
            }

            fn value() -> impl Strategy<Value = String> {
                leaf().prop_recursive(3, 24, 4, |inner| {
                    prop_oneof![
                        prop::collection::vec(inner.clone(), 0..4)
                            .prop_map(|v| format!("[{}]", v.join(","))),
                        prop::collection::vec((key(), inner), 0..4).prop_map(|v| {
                            let items: Vec<String> =
                                v.into_iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                            format!("{{{}}}", items.join(","))
                        }),
                    ]
                })
            }

            fn key() -> impl Strategy<Value = String> {
                prop::sample::select(vec![
                    "alg",
                    "typ",
                    "kid",
                    "sub",
                    "exp",
                    "nbf",
                    "iat",
                    "iss",
                    "_couchdb.roles",
                    "a",
                    "b.c",
                    "roles",
                ])
                .prop_map(str::to_string)
            }

            impl Arbitrary for Json {
                type Parameters = ();
                type Strategy = BoxedStrategy<Json>;

                fn arbitrary_with(_: ()) -> Self::Strategy {
                    prop_oneof![
                        value(),
                        prop::collection::vec((key(), value()), 0..6).prop_map(|v| {
                            let items: Vec<String> =
                                v.into_iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                            format!("{{{}}}", items.join(","))
                        }),
                    ]
                    .prop_map(Json)
                    .boxed()
                }
            }
        }
    }
}
