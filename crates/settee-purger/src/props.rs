//! A database's automatic purge settings, `GET/PUT /{db}/_auto_purge`:
//! a JSON object whose one known member is `deleted_document_ttl` (a
//! [`crate::ttl`] string). The object is stored as sent; an empty object
//! (or none stored) leaves the database to the server's default.
//!
//! Invariant: only bodies [`validate`] accepts are stored, so a stored
//! object always reads back as a TTL or as no setting.

use serde_json::{Map, Value};

use crate::ttl::{parse_setting, Ttl};

/// The member naming the TTL.
pub const TTL_MEMBER: &str = "deleted_document_ttl";

/// Why a `PUT /db/_auto_purge` body is refused (CouchDB's reasons; the
/// HTTP layer answers 400 `bad_request`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PropsError {
    /// `deleted_document_ttl` is not a string naming a TTL.
    BadTtl,
    /// A member other than `deleted_document_ttl`.
    UnknownProperty,
}

impl PropsError {
    pub fn reason(self) -> &'static str {
        match self {
            PropsError::BadTtl => "deleted_document_ttl must be a valid string",
            PropsError::UnknownProperty => "invalid auto purge property",
        }
    }
}

/// Checks a body's members in order, as CouchDB does (the first bad one
/// decides the reason).
pub fn validate(body: &Map<String, Value>) -> Result<(), PropsError> {
    for (k, v) in body {
        if k != TTL_MEMBER {
            return Err(PropsError::UnknownProperty);
        }
        match v.as_str().and_then(parse_setting) {
            Some(_) => {}
            None => return Err(PropsError::BadTtl),
        }
    }
    Ok(())
}

/// The TTL a stored settings text names; None when it names none (never
/// set, `{}`, or unreadable).
pub fn ttl_of(stored: Option<&str>) -> Option<Ttl> {
    let v: Value = serde_json::from_str(stored?).ok()?;
    v.get(TTL_MEMBER)?.as_str().and_then(parse_setting)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn bodies() {
        assert_eq!(validate(&obj(json!({}))), Ok(()));
        assert_eq!(
            validate(&obj(json!({"deleted_document_ttl": "3_days"}))),
            Ok(())
        );
        assert_eq!(
            validate(&obj(json!({"deleted_document_ttl": "infinity"}))),
            Ok(())
        );
        for bad in [
            json!(5),
            json!(null),
            json!("5"),
            json!("-1_day"),
            json!(["1_day"]),
        ] {
            assert_eq!(
                validate(&obj(json!({ "deleted_document_ttl": bad }))),
                Err(PropsError::BadTtl)
            );
        }
        assert_eq!(
            validate(&obj(json!({"ttl": "1_day"}))),
            Err(PropsError::UnknownProperty)
        );
    }

    #[test]
    fn stored() {
        assert_eq!(ttl_of(None), None);
        assert_eq!(ttl_of(Some("{}")), None);
        assert_eq!(
            ttl_of(Some(r#"{"deleted_document_ttl":"2_min"}"#)),
            Some(Ttl::Secs(120))
        );
        assert_eq!(
            ttl_of(Some(r#"{"deleted_document_ttl":"infinity"}"#)),
            Some(Ttl::Infinity)
        );
    }
}
