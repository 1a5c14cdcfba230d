//! A text index's definition (`"type": "text"` in `POST /db/_index`)
//! checked as CouchDB's `mango_idx_text` checks it, with CouchDB's errors,
//! and made into what CouchDB stores: the definition with every option's
//! default filled in (`default_analyzer`, `default_field`,
//! `partial_filter_selector`, `selector`, `fields` — `"all_fields"` when
//! none are listed —, `index_array_lengths`) and the `analyzer` beside it
//! (`perfield`: the default analyzer, `$default` with the default field's).
//!
//! Invariant: a definition this accepts is one `settee_search`'s Mango
//! indexer reads as it was meant (every field `{name, type}` with a
//! non-empty name and a type of `string`, `number`, `boolean`; analyzers
//! this server has).

use serde_json::{json, Map, Value};
use settee_core::selector::Selector;

use crate::erl::{term, Style};
use crate::error::{MangoError, Result};
use crate::request::{check_keys, selector_error};

const KEYS: [&str; 6] = [
    "default_analyzer",
    "default_field",
    "partial_filter_selector",
    "selector",
    "fields",
    "index_array_lengths",
];

fn analyzer_name(v: &Value) -> Result<String> {
    match v {
        Value::String(s) if settee_search::analyzer::known(s) && s != "perfield" => Ok(s.clone()),
        other => Err(MangoError::invalid(
            "invalid_index",
            format!("Invalid analyzer: {}", term(other, Style::Bytes)),
        )),
    }
}

fn fields_error(def: &Value) -> MangoError {
    MangoError::invalid(
        "invalid_index_fields_definition",
        format!(
            "Text Index field definitions must be of the form {{\"name\": \"non-empty fieldname\", \"type\": \"boolean,number, or string\"}}. Def: {}",
            term(def, Style::Bytes)
        ),
    )
}

fn selector(v: Option<&Value>) -> Result<Value> {
    match v {
        None => Ok(json!({})),
        Some(p @ Value::Object(_)) => {
            Selector::parse(p).map_err(selector_error)?;
            Ok(p.clone())
        }
        Some(other) => Err(MangoError::invalid(
            "invalid_selector_json",
            format!(
                "Selector must be a JSON object, not: {}",
                term(other, Style::Bytes)
            ),
        )),
    }
}

/// The stored definition and analyzer of a text index's `index` member.
pub fn parse(index: &Value) -> Result<(Value, Value)> {
    let Value::Object(m) = index else {
        return Err(MangoError::invalid(
            "invalid_index",
            format!(
                "Text indexes must be an object, not: {}",
                term(index, Style::Bytes)
            ),
        ));
    };
    check_keys(m, &KEYS)?;
    let default_analyzer = match m.get("default_analyzer") {
        None => "keyword".to_string(),
        Some(v) => analyzer_name(v)?,
    };
    let (enabled, field_analyzer) = match m.get("default_field") {
        None => (true, "standard".to_string()),
        Some(Value::Bool(b)) => (*b, "standard".to_string()),
        Some(Value::Object(o)) => {
            check_keys(o, &["enabled", "analyzer"])?;
            let enabled = match o.get("enabled") {
                None => true,
                Some(Value::Bool(b)) => *b,
                Some(other) => {
                    return Err(MangoError::invalid(
                        "invalid_boolean",
                        format!("Invalid boolean value: {}", term(other, Style::Bytes)),
                    ))
                }
            };
            let a = match o.get("analyzer") {
                None => "standard".to_string(),
                Some(v) => analyzer_name(v)?,
            };
            (enabled, a)
        }
        Some(other) => {
            return Err(MangoError::invalid(
                "invalid_index",
                format!(
                    "default_field must be a boolean or an object, not: {}",
                    term(other, Style::Bytes)
                ),
            ))
        }
    };
    let fields = match m.get("fields") {
        None => json!("all_fields"),
        Some(Value::String(s)) if s == "all_fields" => json!("all_fields"),
        Some(Value::Array(list)) if list.is_empty() => json!("all_fields"),
        Some(Value::Array(list)) => {
            let def = Value::Array(list.clone());
            for f in list {
                let Some(o) = f.as_object() else {
                    return Err(fields_error(&def));
                };
                let name_ok = o
                    .get("name")
                    .and_then(Value::as_str)
                    .is_some_and(|n| !n.is_empty());
                let type_ok = matches!(
                    o.get("type").and_then(Value::as_str),
                    Some("string" | "number" | "boolean")
                );
                if o.len() != 2 || !name_ok || !type_ok {
                    return Err(fields_error(&def));
                }
            }
            def
        }
        Some(other) => return Err(fields_error(other)),
    };
    let lengths = match m.get("index_array_lengths") {
        None => true,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(MangoError::invalid(
                "invalid_boolean",
                format!("Invalid boolean value: {}", term(other, Style::Bytes)),
            ))
        }
    };
    let partial = selector(m.get("partial_filter_selector"))?;
    let old_partial = selector(m.get("selector"))?;
    let mut def = Map::new();
    def.insert("default_analyzer".into(), json!(default_analyzer));
    def.insert(
        "default_field".into(),
        m.get("default_field").cloned().unwrap_or_else(|| json!({})),
    );
    def.insert("partial_filter_selector".into(), partial);
    def.insert("selector".into(), old_partial);
    def.insert("fields".into(), fields);
    def.insert("index_array_lengths".into(), json!(lengths));
    let analyzer = if enabled {
        json!({
            "name": "perfield",
            "default": default_analyzer,
            "fields": {"$default": field_analyzer},
        })
    } else {
        json!("keyword")
    };
    Ok((Value::Object(def), analyzer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definitions_are_checked_and_completed() {
        let (def, analyzer) = parse(&json!({})).unwrap();
        assert_eq!(def["fields"], "all_fields");
        assert_eq!(def["default_analyzer"], "keyword");
        assert_eq!(def["index_array_lengths"], true);
        assert_eq!(analyzer["fields"]["$default"], "standard");
        let (_, a) = parse(&json!({"default_field": false})).unwrap();
        assert_eq!(a, "keyword");
        let e = parse(&json!({"fields": [{"name": "", "type": "string"}]})).unwrap_err();
        assert!(matches!(
            e,
            MangoError::Invalid {
                error: "invalid_index_fields_definition",
                ..
            }
        ));
        let e = parse(&json!({"fields": [{"name": "a", "type": "date"}]})).unwrap_err();
        assert!(matches!(
            e,
            MangoError::Invalid {
                error: "invalid_index_fields_definition",
                ..
            }
        ));
        let e = parse(&json!(["a"])).unwrap_err();
        assert!(matches!(
            e,
            MangoError::Invalid {
                error: "invalid_index",
                ..
            }
        ));
        let e = parse(&json!({"nope": 1})).unwrap_err();
        assert!(matches!(
            e,
            MangoError::Invalid {
                error: "invalid_key",
                ..
            }
        ));
        let e = parse(&json!({"index_array_lengths": 1})).unwrap_err();
        assert!(matches!(
            e,
            MangoError::Invalid {
                error: "invalid_boolean",
                ..
            }
        ));
        let e = parse(&json!({"partial_filter_selector": 1})).unwrap_err();
        assert!(matches!(
            e,
            MangoError::Invalid {
                error: "invalid_selector_json",
                ..
            }
        ));
    }
}
