//! The arguments of a view query (and of `_all_docs`, which CouchDB serves
//! with the same machinery): parsed from the query string and a POST body
//! as CouchDB parses them, and checked against the kind of view.
//!
//! Invariants: unknown parameters are ignored (as CouchDB does); a value
//! is refused with CouchDB's error and reason, which name the value as
//! CouchDB prints it (`"-1"` from a query string, `-1` or `<<"x">>` from
//! JSON); parameters apply in order, later ones overriding earlier ones.

use serde_json::{Map, Value};
use settee_core::erl::{term, Style};

use crate::error::{Result, ViewError};

/// `update=` (and `stale=`, its older form).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Update {
    /// Bring the index up to date before answering (the default).
    True,
    /// Answer from the index as it is.
    False,
    /// Answer from the index as it is, then update it.
    Lazy,
}

/// The arguments of one query.
#[derive(Debug, Clone)]
pub struct ViewArgs {
    pub keys: Option<Vec<Value>>,
    pub start_key: Option<Value>,
    pub end_key: Option<Value>,
    pub start_docid: Option<String>,
    pub end_docid: Option<String>,
    pub inclusive_end: bool,
    pub descending: bool,
    pub limit: u64,
    pub skip: u64,
    pub include_docs: bool,
    pub conflicts: bool,
    /// Whether `conflicts` was given at all (a reduce refuses even
    /// `conflicts=false`, as CouchDB does).
    pub conflicts_given: bool,
    /// With `include_docs`: attachment bytes inline (`attachments`), and
    /// their encoding (`att_encoding_info`).
    pub attachments: bool,
    pub att_encoding_info: bool,
    pub update_seq: bool,
    /// `Some(false)` when `reduce=false` was asked for.
    pub reduce: Option<bool>,
    pub group: Option<bool>,
    pub group_level: Option<u64>,
    pub update: Update,
    pub sorted: bool,
    /// `partition=`: only partitioned design documents take it.
    pub partition: Option<String>,
}

impl Default for ViewArgs {
    fn default() -> Self {
        ViewArgs {
            keys: None,
            start_key: None,
            end_key: None,
            start_docid: None,
            end_docid: None,
            inclusive_end: true,
            descending: false,
            limit: u64::MAX,
            skip: 0,
            include_docs: false,
            conflicts: false,
            conflicts_given: false,
            attachments: false,
            att_encoding_info: false,
            update_seq: false,
            reduce: None,
            group: None,
            group_level: None,
            update: Update::True,
            sorted: true,
            partition: None,
        }
    }
}

/// A parameter's value as it arrived: query-string text or decoded JSON.
#[derive(Clone, Copy, Debug)]
pub enum Src<'a> {
    Text(&'a str),
    Json(&'a Value),
}

fn query_parse(reason: impl Into<String>) -> ViewError {
    ViewError::QueryParse(reason.into())
}

/// CouchDB's answer to a parameter that is not JSON.
fn invalid_json() -> ViewError {
    ViewError::BadRequest("invalid UTF-8 JSON".into())
}

/// Parses JSON text of a parameter.
pub fn parse_json(text: &str) -> Result<Value> {
    serde_json::from_str(text).map_err(|_| invalid_json())
}

impl Src<'_> {
    /// How CouchDB prints the value in its messages (Erlang's `~p`).
    fn shown(&self) -> String {
        match self {
            // An empty string is an empty list to Erlang.
            Src::Text("") => "[]".to_string(),
            Src::Text(s) => format!("{s:?}"),
            Src::Json(v) => term(v, Style::Readable),
        }
    }

    fn json(&self) -> Result<Value> {
        match self {
            Src::Text(s) => parse_json(s),
            Src::Json(v) => Ok((*v).clone()),
        }
    }

    fn boolean(&self) -> Result<bool> {
        let text: &str = match self {
            Src::Json(Value::Bool(b)) => return Ok(*b),
            Src::Json(Value::String(s)) => s,
            Src::Text(s) => s,
            Src::Json(v) => {
                return Err(query_parse(format!(
                    "Invalid boolean parameter: {}",
                    term(v, Style::Readable)
                )))
            }
        };
        match text.to_ascii_lowercase().as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            // CouchDB reads the text as a list: an empty one prints `[]`.
            "" => Err(query_parse("Invalid boolean parameter: []")),
            _ => Err(query_parse(format!("Invalid boolean parameter: {text:?}"))),
        }
    }

    fn pos_int(&self) -> Result<u64> {
        let n: Option<i128> = match self {
            Src::Text(s) => s.parse::<i128>().ok(),
            Src::Json(Value::Number(n)) => {
                n.as_i64().map(i128::from).or(n.as_u64().map(i128::from))
            }
            Src::Json(_) => None,
        };
        let n =
            n.ok_or_else(|| query_parse(format!("Invalid value for integer: {}", self.shown())))?;
        if n < 0 {
            return Err(query_parse(format!(
                "Invalid value for positive integer: {}",
                self.shown()
            )));
        }
        Ok(u64::try_from(n).unwrap_or(u64::MAX))
    }

    /// The value as a string (`couch_util:to_binary`).
    fn text(&self) -> String {
        match self {
            Src::Text(s) => s.to_string(),
            Src::Json(Value::String(s)) => s.clone(),
            Src::Json(v) => v.to_string(),
        }
    }
}

pub const KEYS_INCOMPATIBLE: &str = "`keys` is incompatible with `key`, `start_key` and `end_key`";

const KEYS_NOT_ARRAY: &str = "`keys` must be an array of strings.";

/// Which checks a query's arguments get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViewKind {
    /// A view without a reduce function (and `_all_docs`).
    Map,
    /// A view with a reduce function.
    Reduce,
}

impl ViewArgs {
    /// Applies one parameter (unknown ones are ignored, as in CouchDB).
    pub fn apply(&mut self, name: &str, v: Src<'_>) -> Result<()> {
        match name {
            "key" => {
                let k = v.json()?;
                self.start_key = Some(k.clone());
                self.end_key = Some(k);
            }
            "keys" => match v.json()? {
                // A single key is a `key` (CouchDB reads it as a range).
                Value::Array(mut a) if a.len() == 1 => {
                    let k = a.pop().unwrap_or(Value::Null);
                    self.start_key = Some(k.clone());
                    self.end_key = Some(k);
                }
                Value::Array(a) => self.keys = Some(a),
                _ => return Err(query_parse(KEYS_NOT_ARRAY)),
            },
            "startkey" | "start_key" => self.start_key = Some(v.json()?),
            "endkey" | "end_key" => self.end_key = Some(v.json()?),
            "startkey_docid" | "start_key_doc_id" => self.start_docid = Some(v.text()),
            "endkey_docid" | "end_key_doc_id" => self.end_docid = Some(v.text()),
            "limit" => self.limit = v.pos_int()?,
            "skip" => self.skip = v.pos_int()?,
            "descending" => self.descending = v.boolean()?,
            "inclusive_end" => self.inclusive_end = v.boolean()?,
            "include_docs" => self.include_docs = v.boolean()?,
            "conflicts" => {
                self.conflicts = v.boolean()?;
                self.conflicts_given = true;
            }
            "update_seq" => self.update_seq = v.boolean()?,
            "reduce" => self.reduce = Some(v.boolean()?),
            "group" => self.group = Some(v.boolean()?),
            "group_level" => self.group_level = Some(v.pos_int()?),
            "sorted" => self.sorted = v.boolean()?,
            "attachments" => self.attachments = v.boolean()?,
            "att_encoding_info" => self.att_encoding_info = v.boolean()?,
            "stale" => {
                self.update = match v.text().as_str() {
                    "ok" => Update::False,
                    "update_after" => Update::Lazy,
                    _ => return Err(query_parse("Invalid value for `stale`.")),
                }
            }
            "stable" if !matches!(v.text().as_str(), "true" | "false") => {
                return Err(query_parse("Invalid value for `stable`."));
            }
            "partition" => self.partition = Some(v.text()),
            "update" => {
                self.update = match v.text().as_str() {
                    "true" => Update::True,
                    "false" => Update::False,
                    "lazy" => Update::Lazy,
                    _ => return Err(query_parse("Invalid value for `update`.")),
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Applies query-string parameters, in order (`keys` too).
    pub fn apply_pairs<'a>(
        &mut self,
        pairs: impl Iterator<Item = (&'a str, &'a str)>,
    ) -> Result<()> {
        for (k, v) in pairs {
            self.apply(k, Src::Text(v))?;
        }
        Ok(())
    }

    /// Applies the members of a JSON object, in order.
    pub fn apply_object(&mut self, m: &Map<String, Value>) -> Result<()> {
        for (k, v) in m {
            self.apply(k, Src::Json(v))?;
        }
        Ok(())
    }

    /// The arguments of a GET (`body: None`) or POST request: a POST's
    /// members, then the query string, as CouchDB reads them (`keys` of
    /// the query string wins over the body's). `keys` together with a key
    /// range is dropped, as CouchDB does for views.
    pub fn from_request<'a>(
        query: impl Iterator<Item = (&'a str, &'a str)> + Clone,
        body: Option<&Map<String, Value>>,
    ) -> Result<ViewArgs> {
        let mut o = ViewArgs::default();
        if let Some(body) = body {
            match body.get("keys") {
                None | Some(Value::Array(_)) => {}
                Some(_) => {
                    return Err(ViewError::BadRequest(
                        "`keys` member must be an array.".into(),
                    ))
                }
            }
            o.apply_object(body)?;
        }
        o.apply_pairs(query)?;
        if o.keys.is_some() && (o.start_key.is_some() || o.end_key.is_some()) {
            o.keys = None;
        }
        Ok(o)
    }

    /// Whether the query reduces (a reduce view not asked `reduce=false`).
    pub fn reduces(&self, kind: ViewKind) -> bool {
        kind == ViewKind::Reduce && self.reduce != Some(false)
    }

    /// CouchDB's checks of the arguments for a kind of view, of a
    /// partitioned index (which needs a `partition`) or a global one
    /// (which takes none).
    pub fn validate(&self, kind: ViewKind, partitioned: bool) -> Result<()> {
        if partitioned && self.partition.is_none() {
            return Err(query_parse(
                "`partition` parameter is mandatory for queries to this view.",
            ));
        }
        if self.group == Some(false) && self.group_level.is_some_and(|l| l > 0) {
            return Err(query_parse(
                "Can't specify group=false and group_level>0 at the same time",
            ));
        }
        if kind == ViewKind::Map && self.reduce == Some(true) {
            return Err(query_parse("Reduce is invalid for map-only views."));
        }
        let reduces = self.reduces(kind);
        if !reduces && (self.group == Some(true) || self.group_level.is_some()) {
            return Err(query_parse("Invalid use of grouping on a map view."));
        }
        let keyed = self.keys.as_ref().is_some_and(|k| !k.is_empty());
        if keyed && (self.start_key.is_some() || self.end_key.is_some()) {
            return Err(query_parse(KEYS_INCOMPATIBLE));
        }
        if !partitioned && self.partition.is_some() {
            return Err(query_parse(
                "`partition` parameter is not supported in this design doc",
            ));
        }
        if reduces {
            if self.include_docs {
                return Err(query_parse("`include_docs` is invalid for reduce"));
            }
            if self.conflicts_given {
                return Err(query_parse("`conflicts` is invalid for reduce views."));
            }
            // Even an empty list of keys is a multi-key fetch.
            if self.keys.is_some() && self.group_level() != Some(None) {
                return Err(query_parse(
                    "Multi-key fetches for reduce views must use `group=true`",
                ));
            }
        }
        Ok(())
    }

    /// The grouping of a reducing query: `None` for one group of all rows,
    /// `Some(None)` for `group=true` (exact keys), `Some(Some(n))` for
    /// `group_level=n`.
    pub fn group_level(&self) -> Option<Option<u64>> {
        match (self.group, self.group_level) {
            (_, Some(0)) => None,
            (_, Some(n)) => Some(Some(n)),
            (Some(true), None) => Some(None),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn get(q: &[(&str, &str)]) -> Result<ViewArgs> {
        ViewArgs::from_request(q.iter().copied(), None)
    }

    #[test]
    fn parses_values_as_couchdb_prints_them() {
        let e = get(&[("limit", "-1")]).unwrap_err();
        assert_eq!(e.to_string(), "Invalid value for positive integer: \"-1\"");
        let e = get(&[("descending", "yes")]).unwrap_err();
        assert_eq!(e.to_string(), "Invalid boolean parameter: \"yes\"");
        let e = get(&[("keys", "1")]).unwrap_err();
        assert!(matches!(e, ViewError::QueryParse(_)));
        let e = get(&[("key", "{bad")]).unwrap_err();
        assert!(matches!(e, ViewError::BadRequest(_)));
        let a = get(&[("keys", "[1]"), ("stale", "ok")]).unwrap();
        assert_eq!((a.start_key, a.update), (Some(json!(1)), Update::False));
    }

    #[test]
    fn query_keys_win_over_body_keys_and_ranges_over_keys() {
        let body = json!({"keys": [1, 2]});
        let a = ViewArgs::from_request([("keys", "[3,4]")].into_iter(), body.as_object()).unwrap();
        assert_eq!(a.keys, Some(vec![json!(3), json!(4)]));
        let a = ViewArgs::from_request([("endkey", "3")].into_iter(), body.as_object()).unwrap();
        assert_eq!(a.keys, None);
        let e = get(&[("limit", "")]).unwrap_err();
        assert_eq!(e.to_string(), "Invalid value for integer: []");
    }

    #[test]
    fn checks_by_kind() {
        let a = get(&[("group", "true")]).unwrap();
        assert!(a.validate(ViewKind::Map, false).is_err());
        assert!(a.validate(ViewKind::Reduce, false).is_ok());
        let a = get(&[("include_docs", "true")]).unwrap();
        assert!(a.validate(ViewKind::Reduce, false).is_err());
        let a = get(&[("include_docs", "true"), ("reduce", "false")]).unwrap();
        assert!(a.validate(ViewKind::Reduce, false).is_ok());
        let a = get(&[("keys", "[1,2]")]).unwrap();
        assert!(a.validate(ViewKind::Reduce, false).is_err());
        assert_eq!(
            get(&[("group_level", "2")]).unwrap().group_level(),
            Some(Some(2))
        );
    }
}
