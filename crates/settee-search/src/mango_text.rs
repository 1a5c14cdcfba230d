//! The fields of a Mango text index (`POST /db/_index` with `"type":
//! "text"`, stored as CouchDB stores it: an `indexes` member of a
//! `"language": "query"` design document whose `index` is the
//! definition), made natively — no JavaScript — as CouchDB's Mango
//! indexer makes them: every leaf of a document (or of the fields the
//! definition lists) as a field named `path:type` with each part of the
//! path escaped (`_` and two hex digits for every byte but letters and
//! digits) and `[]` for array elements, the array lengths
//! (`path.[]:length`), every string again in `$default` (unless the
//! default field is disabled), and every field name in `$fieldnames`.
//! Beyond CouchDB, `$fieldnames` also names every object and array
//! value (`path:object`, `path:array`, empty ones included), so that a
//! query for "the field is there" ([`crate::mango_query`]) finds a field
//! holding `{}` or `[]` too.
//!
//! Invariant: a document is indexed only if it matches the definition's
//! `partial_filter_selector` (its older name `selector`); the calls made
//! are those of Clouseau's `index(name, value, {})`, read by
//! [`crate::fields::search_fields_of`] like any other.

use std::collections::BTreeSet;

use serde_json::{json, Value};
use settee_core::selector::Selector;

/// A Mango text index's definition, read.
#[derive(Debug, Clone)]
pub struct MangoTextDef {
    /// The indexed fields as escaped `name:type` (None: all fields).
    pub fields: Option<BTreeSet<String>>,
    pub default_field: bool,
    pub index_array_lengths: bool,
    pub partial: Option<Selector>,
}

/// A field name's part as CouchDB escapes it for Lucene: letters and
/// digits as they are, every other byte as `_` and two hex digits.
pub fn escape_part(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("_{b:02x}"));
        }
    }
    out
}

/// A user's field path (`a.b`, `a\.b` for a dot in a name) as the
/// escaped parts joined by `.`.
pub fn escape_user(path: &str) -> String {
    split_path(path)
        .iter()
        .map(|p| escape_part(p))
        .collect::<Vec<_>>()
        .join(".")
}

/// A field path's parts (`\.` is a dot inside a part).
pub fn split_path(path: &str) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut chars = path.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'.') => {
                chars.next();
                parts.last_mut().expect("a part").push('.');
            }
            '\\' => {}
            '.' => parts.push(String::new()),
            c => parts.last_mut().expect("a part").push(c),
        }
    }
    parts
}

/// The escaped name of the leaf of type `ty` at `path` (not empty):
/// `a.b` of type `string` is `a.b_3astring`.
pub fn leaf_name(path: &[String], ty: &str) -> String {
    let mut name = path
        .iter()
        .map(|p| escape_part(p))
        .collect::<Vec<_>>()
        .join(".");
    name.push_str("_3a");
    name.push_str(ty);
    name
}

impl MangoTextDef {
    /// The definition stored in the design document (`index`).
    pub fn from_json(def: &Value) -> MangoTextDef {
        let fields = match def.get("fields") {
            Some(Value::Array(list)) if !list.is_empty() => Some(
                list.iter()
                    .filter_map(|f| {
                        let name = f.get("name")?.as_str()?;
                        let ty = match f.get("type").and_then(Value::as_str) {
                            Some("number") => "number",
                            Some("boolean") => "boolean",
                            _ => "string",
                        };
                        Some(escape_user(&format!("{name}:{ty}")))
                    })
                    .collect(),
            ),
            _ => None,
        };
        let default_field = match def.get("default_field") {
            Some(Value::Bool(b)) => *b,
            Some(Value::Object(o)) => o.get("enabled").and_then(Value::as_bool).unwrap_or(true),
            _ => true,
        };
        let index_array_lengths = def
            .get("index_array_lengths")
            .and_then(Value::as_bool)
            .unwrap_or(true);
        let partial = ["partial_filter_selector", "selector"]
            .iter()
            .filter_map(|k| def.get(*k))
            .find(|v| v.as_object().is_some_and(|o| !o.is_empty()))
            .and_then(|v| Selector::parse(v).ok());
        MangoTextDef {
            fields,
            default_field,
            index_array_lengths,
            partial,
        }
    }

    /// The `index(name, value, {})` calls for document `doc` (None: the
    /// document is not indexed).
    pub fn calls(&self, doc: &Value) -> Option<Vec<Vec<Value>>> {
        if let Some(p) = &self.partial {
            if !p.matches(doc) {
                return None;
            }
        }
        let mut leaves: Vec<(String, Value)> = Vec::new();
        let mut marks: Vec<String> = Vec::new();
        let mut path: Vec<String> = Vec::new();
        self.walk(doc, &mut path, &mut leaves, &mut marks);
        if self.default_field {
            let strings: Vec<Value> = leaves
                .iter()
                .filter(|(n, v)| v.is_string() && n.ends_with("_3astring"))
                .map(|(_, v)| v.clone())
                .collect();
            leaves.extend(strings.into_iter().map(|v| ("$default".to_string(), v)));
        }
        let names: BTreeSet<&str> = leaves
            .iter()
            .map(|(n, _)| n.as_str())
            .chain(marks.iter().map(String::as_str))
            .collect();
        let mut calls: Vec<Vec<Value>> = names
            .iter()
            .map(|n| vec![json!("$fieldnames"), json!(n), json!({})])
            .collect();
        calls.extend(
            leaves
                .iter()
                .map(|(n, v)| vec![json!(n), v.clone(), json!({})]),
        );
        Some(calls)
    }

    fn leaf(&self, path: &[String], ty: &str, value: Value, out: &mut Vec<(String, Value)>) {
        if path.is_empty() {
            return;
        }
        let name = leaf_name(path, ty);
        if ty != "length" && self.fields.as_ref().is_some_and(|f| !f.contains(&name)) {
            return;
        }
        out.push((name, value));
    }

    fn walk(
        &self,
        v: &Value,
        path: &mut Vec<String>,
        out: &mut Vec<(String, Value)>,
        marks: &mut Vec<String>,
    ) {
        match v {
            Value::Object(m) => {
                if !path.is_empty() {
                    marks.push(leaf_name(path, "object"));
                }
                for (k, child) in m {
                    path.push(k.clone());
                    self.walk(child, path, out, marks);
                    path.pop();
                }
            }
            Value::Array(items) => {
                if !path.is_empty() {
                    marks.push(leaf_name(path, "array"));
                }
                path.push("[]".into());
                if self.index_array_lengths {
                    self.leaf(path, "length", json!(items.len()), out);
                }
                for item in items {
                    self.walk(item, path, out, marks);
                }
                path.pop();
            }
            Value::String(_) => self.leaf(path, "string", v.clone(), out),
            Value::Number(_) => self.leaf(path, "number", v.clone(), out),
            Value::Bool(_) => self.leaf(path, "boolean", v.clone(), out),
            Value::Null => self.leaf(path, "null", json!(true), out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(calls: &[Vec<Value>]) -> Vec<String> {
        calls
            .iter()
            .filter(|c| c[0] != "$fieldnames")
            .map(|c| format!("{}={}", c[0].as_str().unwrap(), c[1]))
            .collect()
    }

    #[test]
    fn documents_are_flattened_as_mango_flattens_them() {
        let all = MangoTextDef::from_json(&json!({"fields": [], "default_field": {}}));
        let doc = json!({"_id": "a", "name": {"first": "Ann"}, "age": 30, "tags": ["x", "y"], "ok": true, "n": null});
        let calls = all.calls(&doc).unwrap();
        let got = names(&calls);
        for want in [
            "_5fid_3astring=\"a\"",
            "name.first_3astring=\"Ann\"",
            "age_3anumber=30",
            "tags._5b_5d_3alength=2",
            "tags._5b_5d_3astring=\"x\"",
            "tags._5b_5d_3astring=\"y\"",
            "ok_3aboolean=true",
            "n_3anull=true",
            "$default=\"Ann\"",
        ] {
            assert!(got.contains(&want.to_string()), "{want} in {got:?}");
        }
        let fieldnames: Vec<&Value> = calls
            .iter()
            .filter(|c| c[0] == "$fieldnames")
            .map(|c| &c[1])
            .collect();
        assert!(fieldnames.contains(&&json!("$default")));
        assert!(fieldnames.contains(&&json!("age_3anumber")));
        assert!(fieldnames.contains(&&json!("name_3aobject")));
        assert!(fieldnames.contains(&&json!("tags_3aarray")));
        let empty = all.calls(&json!({"_id": "e", "o": {}, "l": []})).unwrap();
        let marks: Vec<&Value> = empty
            .iter()
            .filter(|c| c[0] == "$fieldnames")
            .map(|c| &c[1])
            .collect();
        assert!(marks.contains(&&json!("o_3aobject")) && marks.contains(&&json!("l_3aarray")));
        let some = MangoTextDef::from_json(&json!({
            "fields": [{"name": "name.first", "type": "string"}],
            "default_field": {"enabled": false},
            "index_array_lengths": false,
            "partial_filter_selector": {"age": {"$gt": 20}}
        }));
        let got = names(&some.calls(&doc).unwrap());
        assert_eq!(got, ["name.first_3astring=\"Ann\""]);
        assert!(some.calls(&json!({"age": 10})).is_none());
        assert_eq!(escape_user("a\\.b.c"), "a_2eb.c");
    }
}
