//! A document's fields by Mango's field names (`a.b`, with `\\.` for a
//! dot inside a name): one field's value, and a document cut down to the
//! fields a `_find` asks for (`fields`), as CouchDB projects it.
//!
//! Also the scan-ratio warning `_find` gives, one node's or a cluster's.
//!
//! Invariant: a projection holds exactly the named fields the document
//! has, nested as in the document; a field it lacks is left out.

use serde_json::{Map, Value};

/// Documents a `_find` may examine per result before it warns (CouchDB's).
pub const SCAN_RATIO_WARNING: u64 = 10;

/// The warning past [`SCAN_RATIO_WARNING`] (CouchDB's words).
pub const SCAN_WARNING: &str = "The number of documents examined is high in proportion to the number of results returned. Consider adding a more specific index to improve this.";

use crate::selector::split_field_path;

/// The value at `path` (split field name) in `doc`.
pub fn lookup<'a>(doc: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut v = doc;
    for seg in path {
        v = match v {
            Value::Object(m) => m.get(seg)?,
            _ => return None,
        };
    }
    Some(v)
}

/// The value of field `name` (a Mango field name) in `doc`.
pub fn field(doc: &Value, name: &str) -> Option<Value> {
    lookup(doc, &split_field_path(name)).cloned()
}

/// Puts `v` at `path` in `out`, making the objects on the way.
pub fn insert(out: &mut Map<String, Value>, path: &[String], v: Value) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    if rest.is_empty() {
        out.insert(first.clone(), v);
        return;
    }
    let entry = out
        .entry(first.clone())
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(m) = entry {
        insert(m, rest, v);
    }
}

/// The requested fields of a document (all of it without `fields`).
pub fn project(doc: Value, fields: Option<&[String]>) -> Value {
    let Some(fields) = fields.filter(|f| !f.is_empty()) else {
        return doc;
    };
    let mut out = Map::new();
    for f in fields {
        let path = split_field_path(f);
        if let Some(v) = lookup(&doc, &path) {
            insert(&mut out, &path, v.clone());
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn projections_keep_the_named_fields_nested() {
        let d = json!({"_id": "x", "a": {"b": 1, "c": 2}, "d.e": 3, "f": [1]});
        let f = [
            "_id".to_string(),
            "a.b".into(),
            "d\\.e".into(),
            "nope".into(),
        ];
        assert_eq!(
            project(d.clone(), Some(&f)),
            json!({"_id": "x", "a": {"b": 1}, "d.e": 3})
        );
        assert_eq!(project(d.clone(), None), d);
        assert_eq!(field(&d, "a.c"), Some(json!(2)));
        assert_eq!(field(&d, "f.0"), None);
    }
}
