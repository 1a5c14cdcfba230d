//! The fields a document's index calls give it: Nouveau's
//! `index(type, name, value, options)` checked as CouchDB's Nouveau
//! checks them ([`fields_of`]), and Clouseau's `index(name, value,
//! options)` as CouchDB's search query server and Clouseau read them
//! ([`search_fields_of`]).
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
    /// Counted (`counts`, `drilldown`) or ranged (`ranges`): Clouseau's
    /// `facet` option.
    pub facet: bool,
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
            facet: false,
        });
    }
    Ok(out)
}

/// The fields of one document from its Clouseau-style `index(name,
/// value, options)` calls; `Err` names the first call CouchDB's search
/// query server throws for (which drops the whole document).
///
/// A string is analyzed text (`index: true` or `"analyzed"`, the
/// default), one exact token (`"not_analyzed"`; booleans always, as
/// `"true"`/`"false"`), or only stored (`index: false` or `"no"`); a
/// number is a double. `store` is `true` or `"yes"`; `facet` is `true`.
pub fn search_fields_of(calls: Vec<Vec<Value>>) -> Result<Vec<Field>, String> {
    read_search_calls(calls, false)
}

/// [`search_fields_of`] for calls made natively (Mango text indexes),
/// whose names may start with `_` (`_id:string`).
pub fn native_fields_of(calls: Vec<Vec<Value>>) -> Result<Vec<Field>, String> {
    read_search_calls(calls, true)
}

fn read_search_calls(calls: Vec<Vec<Value>>, reserved_ok: bool) -> Result<Vec<Field>, String> {
    let mut out = Vec::with_capacity(calls.len());
    for args in calls {
        let mut args = args.into_iter();
        let (name, value, options) = (args.next(), args.next(), args.next());
        let name = match name {
            Some(Value::String(s)) => s,
            other => {
                return Err(format!(
                    "name must be a string not {}",
                    js_type(other.as_ref())
                ))
            }
        };
        if name.starts_with('_') && !reserved_ok {
            return Err("name must not start with an underscore".into());
        }
        let options = match options {
            None | Some(Value::Null) | Some(Value::Bool(false)) => serde_json::Map::new(),
            Some(Value::Object(o)) => o,
            Some(Value::Number(n)) if n.as_f64() == Some(0.0) => serde_json::Map::new(),
            Some(Value::String(s)) if s.is_empty() => serde_json::Map::new(),
            Some(other) => {
                return Err(format!(
                    "options must be an object not {}",
                    js_type(Some(&other))
                ))
            }
        };
        let store = match options.get("store") {
            Some(Value::Bool(b)) => *b,
            Some(Value::String(s)) => s.eq_ignore_ascii_case("yes"),
            _ => false,
        };
        let facet = matches!(options.get("facet"), Some(Value::Bool(true)));
        // Some(true): analyzed; Some(false): one exact token; None: not
        // indexed.
        let analyzed = match options.get("index") {
            Some(Value::Bool(false)) => None,
            Some(Value::String(s)) => match s.to_ascii_lowercase().as_str() {
                "no" => None,
                "not_analyzed" | "not_analyzed_no_norms" => Some(false),
                _ => Some(true),
            },
            _ => Some(true),
        };
        let (kind, value) = match value {
            Some(Value::String(s)) => (
                match analyzed {
                    Some(true) => Kind::Text,
                    Some(false) => Kind::String,
                    None => Kind::Stored,
                },
                FieldValue::Str(s),
            ),
            Some(Value::Bool(b)) => (Kind::String, FieldValue::Str(b.to_string())),
            Some(Value::Number(n)) => (Kind::Double, FieldValue::Num(n.as_f64().unwrap_or(0.0))),
            other => {
                return Err(format!(
                    "value must be a string, a number or boolean not {}",
                    js_type(other.as_ref())
                ))
            }
        };
        out.push(Field {
            kind,
            name,
            value,
            store: store || kind == Kind::Stored,
            facet,
        });
    }
    Ok(out)
}

/// JavaScript's `typeof` of a value as the query server received it.
fn js_type(v: Option<&Value>) -> &'static str {
    match v {
        None | Some(Value::Null) => "undefined",
        Some(Value::Bool(_)) => "boolean",
        Some(Value::Number(_)) => "number",
        Some(Value::String(_)) => "string",
        Some(Value::Array(_) | Value::Object(_)) => "object",
    }
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

    #[test]
    fn search_calls_are_read_as_clouseau_reads_them() {
        let f = search_fields_of(calls(json!([
            ["default", "Hello world", {"store": true}],
            ["n", 3, {"facet": true}],
            ["flag", true],
            ["code", "AB-1", {"index": "not_analyzed", "store": "yes"}],
            ["note", "kept", {"index": false, "store": true}]
        ])))
        .unwrap();
        let kinds: Vec<Kind> = f.iter().map(|f| f.kind).collect();
        assert_eq!(
            kinds,
            [
                Kind::Text,
                Kind::Double,
                Kind::String,
                Kind::String,
                Kind::Stored
            ]
        );
        assert!(f[0].store && !f[1].store && f[1].facet && f[3].store && f[4].store);
        assert_eq!(f[2].value, FieldValue::Str("true".into()));
        for bad in [
            json!([["_x", "v"]]),
            json!([[1, "v"]]),
            json!([["a", null]]),
            json!([["a", ["v"]]]),
            json!([["a", "v", "opts"]]),
        ] {
            assert!(search_fields_of(calls(bad.clone())).is_err(), "{bad}");
        }
    }
}
