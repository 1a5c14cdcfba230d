//! Design documents as the engine receives them.
//!
//! Owns [`DesignDoc`]: a design document checked once (a JSON object with a
//! string `_id`, JavaScript or CoffeeScript as its language), its JSON text (without
//! `_attachments`, which no function may use) and its *signature*, a 128-bit
//! XXH3 hash of that text. Invariant: equal signatures mean equal text, so
//! a worker may reuse functions it compiled for a design document with the
//! same signature; any change to the document changes the signature and the
//! functions are compiled anew.

use std::sync::Arc;

use serde_json::Value;

use crate::JsError;

/// A design document ready to be run. Cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct DesignDoc {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    id: String,
    json: String,
    signature: u128,
    /// `"language": "coffeescript"`: every function is CoffeeScript,
    /// translated to JavaScript before it is compiled.
    coffee: bool,
}

impl DesignDoc {
    /// Checks a design document (its JSON, with `_id`).
    pub fn new(ddoc: &Value) -> Result<DesignDoc, JsError> {
        let Some(obj) = ddoc.as_object() else {
            return Err(JsError::InvalidInput {
                reason: "a design document must be a JSON object".into(),
            });
        };
        let Some(id) = obj.get("_id").and_then(Value::as_str) else {
            return Err(JsError::InvalidInput {
                reason: "a design document needs a string _id".into(),
            });
        };
        let mut coffee = false;
        match obj.get("language") {
            None | Some(Value::Null) => {}
            Some(Value::String(l)) if l == "javascript" => {}
            Some(Value::String(l)) if l == "coffeescript" => coffee = true,
            Some(other) => {
                return Err(JsError::UnsupportedLanguage {
                    language: other
                        .as_str()
                        .map_or_else(|| other.to_string(), str::to_string),
                })
            }
        }
        let json = if obj.contains_key("_attachments") {
            let mut trimmed = obj.clone();
            trimmed.shift_remove("_attachments");
            serde_json::to_string(&trimmed)
        } else {
            serde_json::to_string(ddoc)
        }
        .map_err(|e| JsError::InvalidInput {
            reason: format!("design document cannot be serialised: {e}"),
        })?;
        let signature = xxhash_rust::xxh3::xxh3_128(json.as_bytes());
        Ok(DesignDoc {
            inner: Arc::new(Inner {
                id: id.to_string(),
                json,
                signature,
                coffee,
            }),
        })
    }

    /// Parses and checks a design document given as JSON text.
    pub fn from_json(text: &str) -> Result<DesignDoc, JsError> {
        let value: Value = serde_json::from_str(text).map_err(|e| JsError::InvalidInput {
            reason: format!("design document is not valid JSON: {e}"),
        })?;
        DesignDoc::new(&value)
    }

    /// The design document's `_id`.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The signature, as 32 lowercase hex digits.
    pub fn signature(&self) -> String {
        format!("{:032x}", self.inner.signature)
    }

    pub(crate) fn signature_bits(&self) -> u128 {
        self.inner.signature
    }

    /// Whether its functions are CoffeeScript.
    pub fn is_coffee(&self) -> bool {
        self.inner.coffee
    }

    pub(crate) fn json(&self) -> &str {
        &self.inner.json
    }
}
