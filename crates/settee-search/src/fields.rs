//! The fields a document's `index(type, name, value, options)` calls
//! give it, checked as CouchDB's Nouveau checks them.
//!
//! Invariant: a document whose function made one call Nouveau refuses (an
//! unknown type, a name that is not a string, a value of the wrong type
//! for its field type, options that are not an object) is indexed with no
//! fields at all, as Nouveau drops a document whose index function threw;
//! fields whose name starts with `_` are reserved and left out.

use serde_json::Value;

/// A field's type, as the index function names it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Analyzed text: searchable by its tokens.
    Text,
    /// One exact token: searchable, sortable, countable (`counts`).
    String,
    /// A number: searchable by value and range, sortable, `ranges`.
    Double,
    /// Only stored (returned in `fields`).
    Stored,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Text => "text",
            Kind::String => "string",
            Kind::Double => "double",
            Kind::Stored => "stored",
        }
    }

    pub fn from_name(s: &str) -> Option<Kind> {
        Some(match s {
            "text" => Kind::Text,
            "string" => Kind::String,
            "double" => Kind::Double,
            "stored" => Kind::Stored,
            _ => return None,
        })
    }
}

/// A field's value.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldValue {
    Str(String),
    Num(f64),
}

impl FieldValue {
    pub fn to_json(&self) -> Value {
        match self {
            FieldValue::Str(s) => Value::String(s.clone()),
            FieldValue::Num(n) => {
                serde_json::Number::from_f64(*n).map_or(Value::Null, Value::Number)
            }
        }
    }
}

/// One checked `index(...)` call.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    pub kind: Kind,
    pub name: String,
    pub value: FieldValue,
    /// Returned in a hit's `fields` (always for [`Kind::Stored`]).
    pub store: bool,
}

/// The fields of one document from its calls' arguments; `Err` names the
/// first call Nouveau would refuse.
pub fn fields_of(calls: Vec<Vec<Value>>) -> Result<Vec<Field>, String> {
    let mut out = Vec::with_capacity(calls.len());
    for args in calls {
        let mut args = args.into_iter();
        let (ty, name, value, options) = (args.next(), args.next(), args.next(), args.next());
        let kind = match ty
            .as_ref()
            .and_then(Value::as_str)
            .and_then(Kind::from_name)
        {
            Some(k) => k,
            None => {
                return Err(format!(
                    "invalid index type {}",
                    ty.map_or_else(|| "undefined".into(), |t| t.to_string())
                ))
            }
        };
        let Some(Value::String(name)) = name else {
            return Err("field name must be a string".into());
        };
        let value = match (kind, value) {
            (Kind::Double, Some(Value::Number(n))) => FieldValue::Num(n.as_f64().unwrap_or(0.0)),
            (Kind::Text | Kind::String, Some(Value::String(s))) => FieldValue::Str(s),
            (Kind::Stored, Some(Value::String(s))) => FieldValue::Str(s),
            (Kind::Stored, Some(Value::Number(n))) => FieldValue::Num(n.as_f64().unwrap_or(0.0)),
            (kind, v) => {
                return Err(format!(
                    "{} value of field {name} must be a {}, not {}",
                    kind.name(),
                    if kind == Kind::Double {
                        "number"
                    } else {
                        "string"
                    },
                    v.map_or_else(|| "undefined".into(), |v| v.to_string())
                ))
            }
        };
        let store = match options {
            None | Some(Value::Null) => false,
            Some(Value::Object(o)) => match o.get("store") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => return Err("store option must be a boolean".into()),
            },
            Some(_) => return Err("index options must be an object".into()),
        };
        if name.starts_with('_') {
            continue;
        }
        out.push(Field {
            store: store || kind == Kind::Stored,
            kind,
            name,
            value,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn calls(v: Value) -> Vec<Vec<Value>> {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn checked_as_nouveau_checks() {
        let f = fields_of(calls(json!([
            ["text", "title", "Hello", {"store": true}],
            ["double", "n", 3],
            ["string", "_hidden", "x"],
            ["stored", "s", 1.5]
        ])))
        .unwrap();
        assert_eq!(f.len(), 3);
        assert_eq!(f[0].kind, Kind::Text);
        assert!(f[0].store && !f[1].store && f[2].store);
        for bad in [
            json!([["double", "n", "3"]]),
            json!([["text", "t", 3]]),
            json!([["bogus", "t", "x"]]),
            json!([["text", 1, "x"]]),
            json!([["text", "t", null]]),
            json!([["text", "t", "x", {"store": "yes"}]]),
            json!([["stored", "t", true]]),
        ] {
            assert!(fields_of(calls(bad.clone())).is_err(), "{bad}");
        }
    }
}
