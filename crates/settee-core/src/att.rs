//! Attachments as documents carry them: what a client sends in
//! `_attachments` ([`AttIn`]) and what a stored revision keeps of each
//! attachment ([`AttStub`], CouchDB's stub).
//!
//! Invariants:
//! - A stored body with attachments is the text of a JSON object whose
//!   *first* member is `"_attachments"`, an object of stubs in the order
//!   the revision has them; every other member is an ordinary body member.
//!   A body without attachments never has that member. So whether a
//!   revision has attachments is a prefix test ([`has_stored`]), and
//!   readers that show the document as it is stored (map functions,
//!   selectors, validation) see CouchDB's stubs without extra work.
//! - A stub's `digest` is `md5-` and the base64 MD5 of the bytes stored
//!   (the encoded bytes when `encoding` is set), as CouchDB computes it.
//! - Parsing a client's `_attachments` checks what CouchDB checks, with
//!   its reasons: names must not start with `_`; an entry without
//!   `stub`/`follows` needs base64 `data`.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::doc::DocError;

/// The member a stored body begins with when its revision has attachments.
const STORED_PREFIX: &str = "{\"_attachments\":";

/// Content type of an attachment that names none.
pub const DEFAULT_CONTENT_TYPE: &str = "application/octet-stream";

/// What a stored revision keeps of one attachment (CouchDB's stub).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct AttStub {
    pub content_type: String,
    pub revpos: u64,
    /// `md5-` and the base64 MD5 of the stored bytes.
    pub digest: String,
    /// Length of the attachment as the client sent it (identity).
    pub length: u64,
    /// `gzip` when the stored bytes are compressed.
    #[serde(default)]
    pub encoding: Option<String>,
    /// Length of the stored (encoded) bytes, when encoded.
    #[serde(default)]
    pub encoded_length: Option<u64>,
}

impl AttStub {
    /// Length of the bytes stored for it.
    pub fn stored_length(&self) -> u64 {
        self.encoded_length.unwrap_or(self.length)
    }

    /// The raw 16 MD5 bytes of the digest, if it is an MD5 digest.
    pub fn md5(&self) -> Option<[u8; 16]> {
        md5_of_digest(&self.digest)
    }

    /// Writes the stub object as CouchDB renders it: `content_type`,
    /// `revpos`, `digest`, `length`, `stub`, then (with `encoding_info`,
    /// or always when stored) `encoding` and `encoded_length`.
    pub fn write_json(&self, out: &mut String, encoding_info: bool) {
        self.write_head(out);
        out.push_str(",\"length\":");
        out.push_str(&self.length.to_string());
        out.push_str(",\"stub\":true");
        if encoding_info {
            self.write_encoding(out);
        }
        out.push('}');
    }

    /// `{"content_type":…,"revpos":…,"digest":…` (no closing brace).
    pub fn write_head(&self, out: &mut String) {
        out.push_str("{\"content_type\":");
        push_json_str(out, &self.content_type);
        out.push_str(",\"revpos\":");
        out.push_str(&self.revpos.to_string());
        out.push_str(",\"digest\":");
        push_json_str(out, &self.digest);
    }

    /// `,"encoding":…,"encoded_length":…` when the bytes are encoded.
    pub fn write_encoding(&self, out: &mut String) {
        if let (Some(enc), Some(len)) = (&self.encoding, self.encoded_length) {
            out.push_str(",\"encoding\":");
            push_json_str(out, enc);
            out.push_str(",\"encoded_length\":");
            out.push_str(&len.to_string());
        }
    }
}

/// The MD5 bytes of a `md5-<base64>` digest.
pub fn md5_of_digest(digest: &str) -> Option<[u8; 16]> {
    let b = B64.decode(digest.strip_prefix("md5-")?).ok()?;
    b.try_into().ok()
}

/// The digest CouchDB writes for MD5 bytes.
pub fn digest_of_md5(md5: &[u8; 16]) -> String {
    format!("md5-{}", B64.encode(md5))
}

fn push_json_str(out: &mut String, s: &str) {
    // Serializing a string cannot fail.
    out.push_str(&serde_json::to_string(s).expect("a string serializes"));
}

/// True when a stored body begins with attachment stubs.
pub fn has_stored(body: &str) -> bool {
    body.starts_with(STORED_PREFIX)
}

/// A stored body's attachment stubs (in order) and the rest of its text
/// (the body without them, a JSON object). A body without attachments
/// gives no stubs and itself.
pub fn split_stored(body: &str) -> Result<(Vec<(String, AttStub)>, String), serde_json::Error> {
    let Some(after) = body.strip_prefix(STORED_PREFIX) else {
        return Ok((Vec::new(), body.to_string()));
    };
    let (stubs, at) = leading_stubs(after)?;
    let rest = after[at..].trim_start_matches(',');
    Ok((stubs, format!("{{{rest}")))
}

/// Only the stubs of a stored body (see [`split_stored`]).
pub fn stored_stubs(body: &str) -> Result<Vec<(String, AttStub)>, serde_json::Error> {
    match body.strip_prefix(STORED_PREFIX) {
        Some(after) => Ok(leading_stubs(after)?.0),
        None => Ok(Vec::new()),
    }
}

/// The stubs object at the start of `text` and where it ends.
fn leading_stubs(text: &str) -> Result<(Vec<(String, AttStub)>, usize), serde_json::Error> {
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Stubs>();
    match stream.next() {
        Some(Ok(Stubs(stubs))) => Ok((stubs, stream.byte_offset())),
        Some(Err(e)) => Err(e),
        None => Err(serde::de::Error::custom("no attachment stubs")),
    }
}

/// Stubs in the order their object lists them.
struct Stubs(Vec<(String, AttStub)>);

impl<'de> Deserialize<'de> for Stubs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Stubs, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Stubs;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object of attachment stubs")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<Stubs, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = m.next_entry::<String, AttStub>()? {
                    out.push((k, v));
                }
                Ok(Stubs(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// A stored body: `stubs` first (none: `rest` unchanged), then the
/// members of `rest` (a JSON object's text).
pub fn join_stored(stubs: &[(String, AttStub)], rest: &str) -> String {
    if stubs.is_empty() {
        return rest.to_string();
    }
    let mut out = String::with_capacity(rest.len() + 160 * stubs.len());
    out.push_str(STORED_PREFIX);
    out.push('{');
    for (i, (name, stub)) in stubs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_json_str(&mut out, name);
        out.push(':');
        // Stored with their encoding: the default rendering drops it.
        stub.write_json(&mut out, true);
    }
    out.push('}');
    let inner = rest.trim_start_matches('{');
    if inner != "}" {
        out.push(',');
    }
    out.push_str(inner);
    out
}

/// One entry of a client's `_attachments`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttIn {
    pub name: String,
    pub kind: AttKind,
}

/// What a client says of one attachment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttKind {
    /// `stub: true`: keep the attachment of the previous revision (its
    /// `revpos`, when given, must match it).
    Stub { revpos: Option<u64> },
    /// Inline base64 `data`, decoded. `encoding` (from a replicator that
    /// asked for encoded bodies) says the bytes are already compressed.
    Data {
        content_type: String,
        data: Vec<u8>,
        revpos: Option<u64>,
        encoding: Option<String>,
        length: Option<u64>,
    },
    /// `follows: true`: the bytes come in a later part of a multipart body.
    Follows {
        content_type: String,
        revpos: Option<u64>,
        length: Option<u64>,
        encoding: Option<String>,
        encoded_length: Option<u64>,
    },
    /// Bytes in the database's blob store (a stub whose `revpos` is 0 is
    /// given the new revision's position), or about to be: the writes that
    /// store them go with the document's own write.
    Stored(AttStub, BlobWrites),
}

/// Blob-store writes that must land in the same atomic write as the
/// revision naming the blob (a small attachment's bytes and header), as
/// the blob store's own key/value pairs; empty when the blob is stored
/// already. Only the document layer reads them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlobWrites(pub Vec<(Vec<u8>, Vec<u8>)>);

fn invalid_data(name: &str) -> DocError {
    DocError::BadRequest(format!("Invalid attachment data for {name}"))
}

/// Checks an attachment name as CouchDB does.
pub fn validate_name(name: &str) -> Result<(), DocError> {
    if name.starts_with('_') {
        return Err(DocError::BadRequest(format!(
            "Attachment name '{name}' starts with prohibited character '_'"
        )));
    }
    Ok(())
}

fn opt_u64(m: &Map<String, Value>, key: &str) -> Option<u64> {
    m.get(key).and_then(Value::as_u64)
}

fn opt_str(m: &Map<String, Value>, key: &str) -> Option<String> {
    m.get(key).and_then(Value::as_str).map(str::to_string)
}

fn content_type(m: &Map<String, Value>, name: &str) -> Result<String, DocError> {
    match m.get("content_type") {
        None | Some(Value::Null) => Ok(DEFAULT_CONTENT_TYPE.to_string()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(invalid_data(name)),
    }
}

/// Parses a document's `_attachments` member. `None` when it names no
/// attachment. Entries that are not objects are skipped, as CouchDB
/// skips them.
pub fn parse(value: Value) -> Result<Option<Vec<AttIn>>, DocError> {
    let Value::Object(map) = value else {
        return Err(DocError::Validation(
            "Bad special document member: _attachments".into(),
        ));
    };
    let mut out = Vec::with_capacity(map.len());
    for (name, v) in map {
        let Value::Object(m) = v else { continue };
        validate_name(&name)?;
        let revpos = opt_u64(&m, "revpos");
        let kind = if m.get("stub") == Some(&Value::Bool(true)) {
            AttKind::Stub { revpos }
        } else if m.get("follows") == Some(&Value::Bool(true)) {
            AttKind::Follows {
                content_type: content_type(&m, &name)?,
                revpos,
                length: opt_u64(&m, "length"),
                encoding: opt_str(&m, "encoding"),
                encoded_length: opt_u64(&m, "encoded_length"),
            }
        } else {
            let data = match m.get("data") {
                Some(Value::String(s)) => B64.decode(s).map_err(|_| invalid_data(&name))?,
                _ => return Err(invalid_data(&name)),
            };
            AttKind::Data {
                content_type: content_type(&m, &name)?,
                data,
                revpos,
                encoding: opt_str(&m, "encoding"),
                length: opt_u64(&m, "length"),
            }
        };
        out.push(AttIn { name, kind });
    }
    Ok((!out.is_empty()).then_some(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stub(revpos: u64) -> AttStub {
        AttStub {
            content_type: "text/plain".into(),
            revpos,
            digest: "md5-uV9n9h67A2GWIteY9F/C0w==".into(),
            length: 3,
            encoding: None,
            encoded_length: None,
        }
    }

    #[test]
    fn stored_round_trip() {
        let stubs = vec![("a".to_string(), stub(1)), ("b/c".to_string(), stub(2))];
        for rest in ["{}", r#"{"x":1,"y":{"z":[1]}}"#] {
            let text = join_stored(&stubs, rest);
            assert!(has_stored(&text));
            let v: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(v["_attachments"]["a"]["stub"], json!(true));
            let (back, r) = split_stored(&text).unwrap();
            assert_eq!(back, stubs);
            assert_eq!(r, rest);
        }
        assert_eq!(join_stored(&[], r#"{"x":1}"#), r#"{"x":1}"#);
        assert!(!has_stored(r#"{"x":1}"#));
    }

    #[test]
    fn parse_as_couchdb() {
        let atts =
            parse(json!({"f": {"data": "AAEC"}, "s": {"stub": true, "revpos": 2}, "x": "ignored"}))
                .unwrap()
                .unwrap();
        assert_eq!(atts.len(), 2);
        assert!(
            matches!(&atts[0].kind, AttKind::Data { data, content_type, .. }
            if data == &[0, 1, 2] && content_type == DEFAULT_CONTENT_TYPE)
        );
        assert_eq!(atts[1].kind, AttKind::Stub { revpos: Some(2) });
        for bad in [
            json!({"f": {}}),
            json!({"f": {"data": "!!"}}),
            json!({"f": {"data": 1}}),
        ] {
            assert_eq!(
                parse(bad),
                Err(DocError::BadRequest("Invalid attachment data for f".into()))
            );
        }
        assert!(
            matches!(parse(json!({"_f": {"data": ""}})), Err(DocError::BadRequest(r)) if r.contains("prohibited"))
        );
        assert_eq!(parse(json!({})), Ok(None));
    }

    #[test]
    fn digests() {
        let md5 = md5_of_digest("md5-uV9n9h67A2GWIteY9F/C0w==").unwrap();
        assert_eq!(digest_of_md5(&md5), "md5-uV9n9h67A2GWIteY9F/C0w==");
        assert_eq!(md5_of_digest("sha-xx"), None);
    }
}
