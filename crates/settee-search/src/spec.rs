//! What a design document asks to be indexed for search: its `nouveau`
//! indexes (CouchDB 3.4's Nouveau) and its `indexes` (Clouseau-style
//! search, `_search`), each an index function with its analyzers, and
//! the signature that names the index's files.
//!
//! Invariant: the signature is a function of exactly what changes the
//! index's contents (the flavor, the function's source, the default
//! analyzer, the field analyzers, whether the database is partitioned):
//! a design document edited elsewhere keeps its index, and any change to
//! those rebuilds it under a new signature.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::analyzer;
use crate::error::{Result, SearchError};

/// Which API an index serves: what its index function's calls mean, how
/// queries read numbers, what answers look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Flavor {
    /// A `nouveau` index: `index(type, name, value, options)`.
    Nouveau,
    /// An `indexes` index (`_search`): `index(name, value, options)`.
    Clouseau,
}

impl Flavor {
    /// The design document's member holding indexes of this flavor.
    pub fn section(self) -> &'static str {
        match self {
            Flavor::Nouveau => "nouveau",
            Flavor::Clouseau => "indexes",
        }
    }
}

/// One search index of a design document.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexSpec {
    pub flavor: Flavor,
    pub ddoc_id: String,
    pub name: String,
    /// The index function's source.
    pub def: String,
    pub default_analyzer: String,
    /// Analyzers of named fields (others use the default).
    pub field_analyzers: BTreeMap<String, String>,
    pub partitioned: bool,
    pub signature: [u8; 16],
    /// A Mango text index's definition (an `indexes` member of a
    /// `"language": "query"` design document whose `index` is an object):
    /// indexed natively, without JavaScript.
    pub mango: Option<Value>,
}

impl IndexSpec {
    /// The index `name` of flavor `flavor` of design document `ddoc` (its
    /// JSON, with `_id`).
    pub fn of(ddoc: &Value, flavor: Flavor, name: &str, db_partitioned: bool) -> Result<IndexSpec> {
        match flavor {
            Flavor::Nouveau => IndexSpec::from_ddoc(ddoc, name, db_partitioned),
            Flavor::Clouseau => IndexSpec::from_search_ddoc(ddoc, name, db_partitioned),
        }
    }

    /// The `nouveau` index `name` of design document `ddoc`.
    pub fn from_ddoc(ddoc: &Value, name: &str, db_partitioned: bool) -> Result<IndexSpec> {
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
        Ok(IndexSpec {
            flavor: Flavor::Nouveau,
            ddoc_id,
            name: name.to_string(),
            def: source,
            default_analyzer,
            field_analyzers,
            partitioned,
            signature,
            mango: None,
        })
    }

    /// The `indexes` (Clouseau-style) index `name` of design document
    /// `ddoc`: `analyzer` is a name, or an object with `name` (and, for
    /// `perfield`, `default` and `fields`; `stopwords` for analyzers that
    /// take them).
    pub fn from_search_ddoc(ddoc: &Value, name: &str, db_partitioned: bool) -> Result<IndexSpec> {
        let ddoc_id = ddoc
            .get("_id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let missing = || SearchError::NotFound(format!("{name} not found."));
        let Some(Value::Object(indexes)) = ddoc.get("indexes") else {
            return Err(missing());
        };
        let invalid =
            || SearchError::InvalidDesignDoc(format!("index `{name}` must have parameter `index`"));
        let def = match indexes.get(name) {
            None => return Err(missing()),
            Some(Value::Object(def)) => def,
            Some(_) => return Err(invalid()),
        };
        let query_language = ddoc.get("language").and_then(Value::as_str) == Some("query");
        let (source, mango) = match def.get("index") {
            Some(Value::String(s)) => (s.clone(), None),
            Some(m @ Value::Object(_)) if query_language => (m.to_string(), Some(m.clone())),
            _ => return Err(invalid()),
        };
        let (default_analyzer, field_analyzers) = search_analyzers(def.get("analyzer"))?;
        let partitioned = match ddoc.pointer("/options/partitioned") {
            Some(Value::Bool(b)) => *b,
            _ => db_partitioned,
        };
        let signed = serde_json::json!([
            // `mango/2`: `$fieldnames` names objects and arrays too.
            if mango.is_some() {
                "mango/2"
            } else {
                "indexes"
            },
            source,
            default_analyzer,
            field_analyzers,
            partitioned
        ]);
        let signature = xxhash_rust::xxh3::xxh3_128(signed.to_string().as_bytes()).to_be_bytes();
        Ok(IndexSpec {
            flavor: Flavor::Clouseau,
            ddoc_id,
            name: name.to_string(),
            def: source,
            default_analyzer,
            field_analyzers,
            partitioned,
            signature,
            mango,
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

/// The analyzer of a Clouseau-style index definition as the default
/// analyzer's key and the field analyzers' ([`analyzer::key`]).
fn search_analyzers(v: Option<&Value>) -> Result<(String, BTreeMap<String, String>)> {
    let one = |v: &Value| -> Result<String> {
        match v {
            Value::String(s) => analyzer::key(s, None),
            Value::Object(o) => {
                let name = o.get("name").and_then(Value::as_str).unwrap_or("standard");
                let stop = match o.get("stopwords") {
                    None | Some(Value::Null) => None,
                    Some(Value::Array(words)) => Some(
                        words
                            .iter()
                            .map(|w| {
                                w.as_str().map(str::to_string).ok_or_else(|| {
                                    SearchError::BadRequest("stopwords must be strings".into())
                                })
                            })
                            .collect::<Result<Vec<String>>>()?,
                    ),
                    Some(_) => {
                        return Err(SearchError::BadRequest(
                            "stopwords must be a list of strings".into(),
                        ))
                    }
                };
                analyzer::key(name, stop)
            }
            _ => Err(SearchError::BadRequest("no_such_analyzer".into())),
        }
    };
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(("standard".into(), BTreeMap::new()));
    };
    let perfield = v.get("name").and_then(Value::as_str) == Some("perfield");
    if !perfield {
        return Ok((one(v)?, BTreeMap::new()));
    }
    let default = match v.get("default") {
        None | Some(Value::Null) => "standard".to_string(),
        Some(d) => one(d)?,
    };
    let mut fields = BTreeMap::new();
    match v.get("fields") {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) => {
            for (k, a) in m {
                fields.insert(k.clone(), one(a)?);
            }
        }
        Some(_) => return Err(SearchError::BadRequest("no_such_analyzer".into())),
    }
    Ok((default, fields))
}

/// The names of every `nouveau` index of a design document.
pub fn index_names(ddoc: &Value) -> Vec<String> {
    names_in(ddoc, Flavor::Nouveau)
}

/// The names of every index of flavor `flavor` of a design document.
pub fn names_in(ddoc: &Value, flavor: Flavor) -> Vec<String> {
    match ddoc.get(flavor.section()) {
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
        let s1 = IndexSpec::from_ddoc(&ddoc("function(d){}", "standard"), "i", false).unwrap();
        let mut edited = ddoc("function(d){}", "standard");
        edited["other"] = json!(2);
        let s2 = IndexSpec::from_ddoc(&edited, "i", false).unwrap();
        assert_eq!(s1.signature, s2.signature);
        let s3 = IndexSpec::from_ddoc(&ddoc("function(d){ }", "standard"), "i", false).unwrap();
        let s4 = IndexSpec::from_ddoc(&ddoc("function(d){}", "english"), "i", false).unwrap();
        assert_ne!(s1.signature, s3.signature);
        assert_ne!(s1.signature, s4.signature);
    }

    #[test]
    fn couchdb_errors() {
        let d = json!({"_id": "_design/d", "nouveau": {"i": {"x": 1}, "j": 3}});
        assert!(matches!(
            IndexSpec::from_ddoc(&d, "nope", false),
            Err(SearchError::NotFound(r)) if r == "nope not found."
        ));
        assert!(matches!(
            IndexSpec::from_ddoc(&d, "i", false),
            Err(SearchError::InvalidDesignDoc(r)) if r == "index `i` must have parameter `index`"
        ));
        assert!(matches!(
            IndexSpec::from_ddoc(&d, "j", false),
            Err(SearchError::InvalidDesignDoc(_))
        ));
    }
}
