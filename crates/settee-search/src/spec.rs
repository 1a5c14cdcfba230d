//! What a design document asks to be indexed for search: its `nouveau`
//! indexes, each an index function with its analyzers, and the signature
//! that names the index's files.
//!
//! Invariant: the signature is a function of exactly what changes the
//! index's contents (the function's source, the default analyzer, the
//! field analyzers, whether the database is partitioned): a design
//! document edited elsewhere keeps its index, and any change to those
//! rebuilds it under a new signature.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::analyzer;
use crate::error::{Result, SearchError};

/// One `nouveau` index of a design document.
#[derive(Debug, Clone, PartialEq)]
pub struct NouveauSpec {
    pub ddoc_id: String,
    pub name: String,
    /// The index function's source.
    pub def: String,
    pub default_analyzer: String,
    /// Analyzers of named fields (others use the default).
    pub field_analyzers: BTreeMap<String, String>,
    pub partitioned: bool,
    pub signature: [u8; 16],
}

impl NouveauSpec {
    /// The index `name` of design document `ddoc` (its JSON, with `_id`).
    pub fn from_ddoc(ddoc: &Value, name: &str, db_partitioned: bool) -> Result<NouveauSpec> {
        let ddoc_id = ddoc
            .get("_id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let missing = || SearchError::NotFound(format!("{name} not found."));
        let indexes = match ddoc.get("nouveau") {
            Some(Value::Object(m)) => m,
            _ => return Err(missing()),
        };
        let invalid =
            || SearchError::InvalidDesignDoc(format!("index `{name}` must have parameter `index`"));
        let def = match indexes.get(name) {
            None => return Err(missing()),
            Some(Value::Object(def)) => def,
            Some(_) => return Err(invalid()),
        };
        let source = match def.get("index") {
            Some(Value::String(s)) => s.clone(),
            _ => return Err(invalid()),
        };
        let default_analyzer = match def.get("default_analyzer") {
            None | Some(Value::Null) => "standard".to_string(),
            Some(Value::String(s)) => s.clone(),
            Some(_) => {
                return Err(SearchError::InvalidDesignDoc(
                    "default_analyzer must be a string".into(),
                ))
            }
        };
        let mut field_analyzers = BTreeMap::new();
        match def.get("field_analyzers") {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) => {
                for (k, v) in m {
                    let Some(a) = v.as_str() else {
                        return Err(SearchError::InvalidDesignDoc(
                            "field_analyzers values must be strings".into(),
                        ));
                    };
                    field_analyzers.insert(k.clone(), a.to_string());
                }
            }
            Some(_) => {
                return Err(SearchError::InvalidDesignDoc(
                    "field_analyzers must be an object".into(),
                ))
            }
        }
        for a in std::iter::once(&default_analyzer).chain(field_analyzers.values()) {
            if !analyzer::known(a) {
                return Err(SearchError::BadRequest(format!(
                    "{a} is not a valid analyzer"
                )));
            }
        }
        let partitioned = match ddoc.pointer("/options/partitioned") {
            Some(Value::Bool(b)) => *b,
            _ => db_partitioned,
        };
        let signed = serde_json::json!([source, default_analyzer, field_analyzers, partitioned]);
        let signature = xxhash_rust::xxh3::xxh3_128(signed.to_string().as_bytes()).to_be_bytes();
        Ok(NouveauSpec {
            ddoc_id,
            name: name.to_string(),
            def: source,
            default_analyzer,
            field_analyzers,
            partitioned,
            signature,
        })
    }

    pub fn signature_hex(&self) -> String {
        hex::encode(self.signature)
    }

    /// The analyzer of field `name`.
    pub fn analyzer_of(&self, name: &str) -> &str {
        self.field_analyzers
            .get(name)
            .unwrap_or(&self.default_analyzer)
    }

    /// The distinct analyzers the index uses, default first.
    pub fn analyzers(&self) -> Vec<String> {
        let mut out = vec![self.default_analyzer.clone()];
        for a in self.field_analyzers.values() {
            if !out.contains(a) {
                out.push(a.clone());
            }
        }
        out
    }
}

/// The names of every `nouveau` index of a design document.
pub fn index_names(ddoc: &Value) -> Vec<String> {
    match ddoc.get("nouveau") {
        Some(Value::Object(m)) => m.keys().cloned().collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn signature_follows_what_changes_the_index() {
        let ddoc = |f: &str, a: &str| json!({"_id": "_design/d", "other": 1, "nouveau": {"i": {"index": f, "default_analyzer": a}}});
        let s1 = NouveauSpec::from_ddoc(&ddoc("function(d){}", "standard"), "i", false).unwrap();
        let mut edited = ddoc("function(d){}", "standard");
        edited["other"] = json!(2);
        let s2 = NouveauSpec::from_ddoc(&edited, "i", false).unwrap();
        assert_eq!(s1.signature, s2.signature);
        let s3 = NouveauSpec::from_ddoc(&ddoc("function(d){ }", "standard"), "i", false).unwrap();
        let s4 = NouveauSpec::from_ddoc(&ddoc("function(d){}", "english"), "i", false).unwrap();
        assert_ne!(s1.signature, s3.signature);
        assert_ne!(s1.signature, s4.signature);
    }

    #[test]
    fn couchdb_errors() {
        let d = json!({"_id": "_design/d", "nouveau": {"i": {"x": 1}, "j": 3}});
        assert!(matches!(
            NouveauSpec::from_ddoc(&d, "nope", false),
            Err(SearchError::NotFound(r)) if r == "nope not found."
        ));
        assert!(matches!(
            NouveauSpec::from_ddoc(&d, "i", false),
            Err(SearchError::InvalidDesignDoc(r)) if r == "index `i` must have parameter `index`"
        ));
        assert!(matches!(
            NouveauSpec::from_ddoc(&d, "j", false),
            Err(SearchError::InvalidDesignDoc(_))
        ));
    }
}
