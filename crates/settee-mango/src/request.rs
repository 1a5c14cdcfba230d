//! A `_find` (or `_explain`) request body: every option CouchDB 3.4
//! accepts, validated in CouchDB's order with CouchDB's errors.
//!
//! Invariant: a [`FindRequest`] holds only valid values — its selector is
//! parsed, its numbers in range, its sort one direction or mixed (mixed
//! is refused later, by the planner, as CouchDB does).

use base64::Engine as _;
use serde_json::{Map, Value};
use settee_core::selector::{Selector, SelectorError};

use crate::erl::{term, Style};
use crate::error::{MangoError, Result};

/// `limit` when none is given.
pub const DEFAULT_LIMIT: u64 = 25;

/// The members a `_find` body may have.
const KEYS: [&str; 15] = [
    "selector",
    "use_index",
    "bookmark",
    "limit",
    "skip",
    "sort",
    "fields",
    "partition",
    "r",
    "conflicts",
    "update",
    "stable",
    "stale",
    "execution_stats",
    "allow_fallback",
];

/// A sort direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    Asc,
    Desc,
}

impl Dir {
    pub fn as_str(self) -> &'static str {
        match self {
            Dir::Asc => "asc",
            Dir::Desc => "desc",
        }
    }
}

/// `use_index`: a design document, or one index in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UseIndex {
    /// With its `_design/` prefix.
    pub ddoc: String,
    pub name: Option<String>,
}

impl UseIndex {
    /// As CouchDB names it in warnings and errors.
    pub fn display(&self) -> String {
        match &self.name {
            Some(n) => format!("{}, {n}", self.ddoc),
            None => self.ddoc.clone(),
        }
    }
}

/// Where a bookmark resumes: after the row with this key and id.
#[derive(Debug, Clone, PartialEq)]
pub struct Bookmark {
    pub key: Value,
    pub id: String,
}

impl Bookmark {
    /// The opaque text handed to clients.
    pub fn encode(&self) -> String {
        let v = Value::Array(vec![self.key.clone(), Value::String(self.id.clone())]);
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
    }

    fn decode(text: &str) -> Option<Bookmark> {
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(text)
            .ok()?;
        match serde_json::from_slice::<Value>(&bytes).ok()? {
            Value::Array(mut v) if v.len() == 2 => {
                let id = v.pop()?.as_str()?.to_string();
                Some(Bookmark { key: v.pop()?, id })
            }
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct FindRequest {
    /// The selector as given, without its `$text` operator.
    pub selector_json: Value,
    /// The `$text` operator's query (at the top level or in a top-level
    /// `$and`): only a text index answers it.
    pub text: Option<String>,
    pub selector: Selector,
    pub use_index: Option<UseIndex>,
    /// `use_index` as given (for `_explain`).
    pub use_index_given: Vec<String>,
    /// `bookmark` as given (an empty one as none).
    pub bookmark_given: Option<String>,
    /// A bookmark string that is no bookmark: `_find` refuses it,
    /// `_explain` only shows it.
    pub bookmark_invalid: Option<String>,
    pub bookmark: Option<Bookmark>,
    pub limit: u64,
    pub skip: u64,
    /// Fields with directions, as given.
    pub sort: Vec<(String, Dir)>,
    pub fields: Option<Vec<String>>,
    pub r: u64,
    pub conflicts: bool,
    pub update: bool,
    pub stable: bool,
    pub execution_stats: bool,
    pub allow_fallback: bool,
    /// `update`, `stable` and `stale` as given (before `stale` overrode
    /// them), for `_explain`'s `opts`.
    pub given: (bool, bool, Value),
    /// The partition queried (`/db/_partition/P/_find`, or the body's
    /// `partition` in a partitioned database): only partitioned indexes
    /// and the partition's ids are read.
    pub partition: Option<String>,
}

impl FindRequest {
    pub fn parse(body: &Map<String, Value>) -> Result<FindRequest> {
        check_keys(body, &KEYS)?;
        let selector_json = body
            .get("selector")
            .ok_or_else(|| {
                MangoError::invalid("missing_required_key", "Missing required key: selector")
            })?
            .clone();
        if !selector_json.is_object() {
            return Err(MangoError::invalid(
                "invalid_selector_json",
                format!(
                    "Selector must be a JSON object, not: {}",
                    term(&selector_json, Style::Bytes)
                ),
            ));
        }
        let mut selector_json = selector_json;
        let text = take_text(&mut selector_json)?;
        let selector = Selector::parse(&selector_json).map_err(selector_error)?;
        // `null` is no option at all for `use_index` and `bookmark`, as in
        // CouchDB (clients that write every option send it); an empty
        // bookmark is the first page, like "nil".
        let use_index = match body.get("use_index") {
            None | Some(Value::Null) => None,
            Some(v) => use_index(v)?,
        };
        let mut bookmark_invalid = None;
        let bookmark = match body.get("bookmark") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.is_empty() => None,
            Some(Value::String(s)) => match Bookmark::decode(s) {
                Some(b) => Some(b),
                // Only `_find` reads a bookmark: `_explain` shows it as given.
                None => {
                    bookmark_invalid = Some(s.clone());
                    None
                }
            },
            Some(other) => {
                return Err(MangoError::Server {
                    error: "unknown_error",
                    reason: format!(
                        "Unknown Error: mango_opts :: {{invalid_bookmark,{}}}",
                        term(other, Style::Bytes)
                    ),
                })
            }
        };
        let limit = non_neg(body.get("limit"))?.unwrap_or(DEFAULT_LIMIT);
        let skip = non_neg(body.get("skip"))?.unwrap_or(0);
        let sort = match body.get("sort") {
            None => Vec::new(),
            Some(v) => sort(v)?,
        };
        // An empty list is every field, as no list is.
        let fields = match body.get("fields") {
            None => None,
            Some(v) => Some(fields(v)?).filter(|f: &Vec<String>| !f.is_empty()),
        };
        let r = match body.get("r") {
            None => 1,
            Some(v) => match v.as_u64() {
                Some(n) if n > 0 => n,
                _ => {
                    return Err(MangoError::invalid(
                        "invalid_pos_integer",
                        format!(
                            "{} is not an integer greater than zero",
                            term(v, Style::Bytes)
                        ),
                    ))
                }
            },
        };
        let conflicts = boolean(body.get("conflicts"), false)?;
        let mut update = boolean(body.get("update"), true)?;
        let mut stable = boolean(body.get("stable"), false)?;
        let given = (
            update,
            stable,
            body.get("stale").cloned().unwrap_or(Value::Bool(false)),
        );
        match body.get("stale") {
            None => {}
            Some(Value::String(s)) if s == "ok" => {
                update = false;
                stable = true;
            }
            Some(Value::Bool(false)) => {}
            Some(other) => {
                return Err(MangoError::Server {
                    error: "unknown_error",
                    reason: format!(
                        "Unknown Error: mango_opts :: {{invalid_ok_or_false_value,{}}}",
                        term(other, Style::Bytes)
                    ),
                })
            }
        }
        let execution_stats = boolean(body.get("execution_stats"), false)?;
        let allow_fallback = boolean(body.get("allow_fallback"), true)?;
        // As CouchDB shows them: design document names without their
        // `_design/` prefix, an empty bookmark as "nil".
        let strip = |s: &str| s.strip_prefix("_design/").unwrap_or(s).to_string();
        let use_index_given = match body.get("use_index") {
            Some(Value::String(s)) => vec![strip(s)],
            Some(Value::Array(a)) => a
                .iter()
                .enumerate()
                .filter_map(|(i, v)| {
                    v.as_str()
                        .map(|s| if i == 0 { strip(s) } else { s.to_string() })
                })
                .collect(),
            _ => Vec::new(),
        };
        let bookmark_given = body
            .get("bookmark")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        let partition = match body.get("partition") {
            None => None,
            Some(Value::String(p)) => Some(p.clone()).filter(|p| !p.is_empty()),
            Some(_) => {
                return Err(MangoError::invalid(
                    "illegal_partition",
                    "Partition must be a string",
                ))
            }
        };
        Ok(FindRequest {
            selector_json,
            text,
            selector,
            use_index,
            use_index_given,
            bookmark_given,
            bookmark,
            limit,
            skip,
            sort,
            fields,
            r,
            conflicts,
            update,
            stable,
            execution_stats,
            allow_fallback,
            given,
            partition,
            bookmark_invalid,
        })
    }
}

/// Takes the `$text` operator out of a selector: a member of the top
/// level or of an object in a top-level `$and` (recursively); an `$and`
/// left empty is removed. More than one is CouchDB's
/// `multiple_text_selector`.
fn take_text(sel: &mut Value) -> Result<Option<String>> {
    let shown = term(sel, Style::Bytes);
    let mut found = Vec::new();
    collect_text(sel, &mut found)?;
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop()),
        _ => Err(MangoError::invalid(
            "multiple_text_selector",
            format!("Selector cannot contain more than one $text operator: {shown}"),
        )),
    }
}

fn collect_text(sel: &mut Value, found: &mut Vec<String>) -> Result<()> {
    let Value::Object(m) = sel else {
        return Ok(());
    };
    if let Some(t) = m.remove("$text") {
        match t {
            Value::String(s) => found.push(s),
            other => {
                return Err(MangoError::invalid(
                    "bad_arg",
                    format!(
                        "Bad argument for operator $text: {}",
                        term(&other, Style::Bytes)
                    ),
                ))
            }
        }
    }
    if let Some(Value::Array(items)) = m.get_mut("$and") {
        let mut emptied = Vec::new();
        for (i, item) in items.iter_mut().enumerate() {
            let had = item.as_object().is_some_and(|o| !o.is_empty());
            collect_text(item, found)?;
            if had && item.as_object().is_some_and(Map::is_empty) {
                emptied.push(i);
            }
        }
        if !emptied.is_empty() {
            for i in emptied.into_iter().rev() {
                items.remove(i);
            }
            if items.is_empty() {
                m.remove("$and");
            }
        }
    }
    Ok(())
}

/// CouchDB's `invalid_key` for a body member a request does not take.
pub fn check_keys(body: &Map<String, Value>, allowed: &[&str]) -> Result<()> {
    match body.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(MangoError::invalid(
            "invalid_key",
            format!("Invalid key {k} for this request."),
        )),
        None => Ok(()),
    }
}

/// CouchDB's error for a selector that failed to parse.
pub fn selector_error(e: SelectorError) -> MangoError {
    match e {
        SelectorError::NotAnObject(text) => MangoError::invalid(
            "invalid_selector_json",
            format!("Selector must be a JSON object, not: {text}"),
        ),
        SelectorError::InvalidOperator(op) | SelectorError::UnsupportedOperator(op) => {
            MangoError::invalid("invalid_operator", format!("Invalid operator: {op}"))
        }
        SelectorError::BadArgument { op, value, .. } => {
            if matches!(op.as_str(), "$regex" | "$beginsWith") && !value.is_string() {
                return MangoError::invalid("invalid_operator", format!("Invalid operator: {op}"));
            }
            MangoError::invalid(
                "bad_arg",
                format!(
                    "Bad argument for operator {op}: {}",
                    term(&value, Style::Bytes)
                ),
            )
        }
        SelectorError::InvalidFieldName(name) => {
            MangoError::invalid("invalid_field", format!("Invalid field name: {name}"))
        }
        SelectorError::MissingFieldName => MangoError::invalid(
            "invalid_selector",
            "One or more conditions is missing a field name.",
        ),
    }
}

fn non_neg(v: Option<&Value>) -> Result<Option<u64>> {
    match v {
        None => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) => Ok(Some(n)),
            None => Err(MangoError::invalid(
                "invalid_non_neg_integer",
                format!(
                    "{} is not an integer greater than or equal to zero",
                    term(v, Style::Bytes)
                ),
            )),
        },
    }
}

fn boolean(v: Option<&Value>, default: bool) -> Result<bool> {
    match v {
        None => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(MangoError::invalid(
            "invalid_boolean",
            format!("Invalid boolean value: {}", term(other, Style::Bytes)),
        )),
    }
}

fn use_index(v: &Value) -> Result<Option<UseIndex>> {
    let bad = || {
        MangoError::invalid(
            "invalid_index_name",
            format!("Invalid index name: {}", term(v, Style::Bytes)),
        )
    };
    let ddoc = |s: &str| {
        if s.starts_with("_design/") {
            s.to_string()
        } else {
            format!("_design/{s}")
        }
    };
    match v {
        Value::String(s) => Ok(Some(UseIndex {
            ddoc: ddoc(s),
            name: None,
        })),
        Value::Array(items) => match items.as_slice() {
            [] => Ok(None),
            [Value::String(d)] => Ok(Some(UseIndex {
                ddoc: ddoc(d),
                name: None,
            })),
            [Value::String(d), Value::String(n)] => Ok(Some(UseIndex {
                ddoc: ddoc(d),
                name: Some(n.clone()),
            })),
            _ => Err(bad()),
        },
        _ => Err(bad()),
    }
}

/// A sort: an array of field names and `{field: "asc" | "desc"}`.
pub fn sort(v: &Value) -> Result<Vec<(String, Dir)>> {
    let Value::Array(items) = v else {
        return Err(MangoError::invalid(
            "invalid_sort_json",
            format!(
                "Sort must be an array of sort specs, not: {}",
                term(v, Style::Readable)
            ),
        ));
    };
    items
        .iter()
        .map(|item| {
            let bad = || {
                MangoError::invalid(
                    "invalid_sort_field",
                    format!("Invalid sort field: {}", term(item, Style::Readable)),
                )
            };
            match item {
                Value::String(f) => Ok((f.clone(), Dir::Asc)),
                Value::Object(m) if m.len() == 1 => {
                    let (f, d) = m.iter().next().ok_or_else(bad)?;
                    match d.as_str() {
                        Some("asc") => Ok((f.clone(), Dir::Asc)),
                        Some("desc") => Ok((f.clone(), Dir::Desc)),
                        _ => Err(bad()),
                    }
                }
                _ => Err(bad()),
            }
        })
        .collect()
}

fn fields(v: &Value) -> Result<Vec<String>> {
    let Value::Array(items) = v else {
        return Err(MangoError::invalid(
            "invalid_fields",
            format!(
                "Fields must be an array of strings, not: {}",
                term(v, Style::Bytes)
            ),
        ));
    };
    items
        .iter()
        .map(|f| match f {
            Value::String(s) => Ok(s.clone()),
            other => Err(MangoError::invalid(
                "invalid_field",
                format!("Invalid JSON for field spec: {}", term(other, Style::Bytes)),
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<FindRequest> {
        FindRequest::parse(v.as_object().expect("object"))
    }

    #[test]
    fn defaults_and_errors() {
        let r = parse(json!({"selector": {}})).expect("valid");
        assert_eq!(
            (r.limit, r.skip, r.r, r.update, r.stable),
            (25, 0, 1, true, false)
        );
        let err = |v: Value| match parse(v) {
            Err(MangoError::Invalid { error, reason }) => (error, reason),
            other => panic!("{other:?}"),
        };
        assert_eq!(err(json!({})).0, "missing_required_key");
        assert_eq!(
            err(json!({"selector": {}, "limit": "1"})).1,
            "<<49>> is not an integer greater than or equal to zero"
        );
        assert_eq!(
            err(json!({"selector": {}, "sort": [{"n": "up"}]})).1,
            "Invalid sort field: {[{<<\"n\">>,<<\"up\">>}]}"
        );
        assert_eq!(err(json!({"selector": {}, "foo": 1})).0, "invalid_key");
        // Only `_find` reads a bookmark: parsing keeps a bad one aside.
        let r = parse(json!({"selector": {}, "bookmark": "garbage"})).expect("parses");
        assert_eq!(r.bookmark_invalid.as_deref(), Some("garbage"));
    }

    #[test]
    fn null_and_empty_are_options_left_out() {
        // A client that writes every option sends these.
        let r = parse(json!({"selector": {}, "use_index": null, "bookmark": null})).expect("valid");
        assert!(r.use_index.is_none() && r.bookmark.is_none() && r.bookmark_invalid.is_none());
        let r = parse(json!({"selector": {}, "bookmark": "", "fields": []})).expect("valid");
        assert!(r.bookmark.is_none() && r.bookmark_given.is_none() && r.fields.is_none());
        let r = parse(json!({"selector": {}, "use_index": "_design/ix"})).expect("valid");
        assert_eq!(r.use_index_given, vec!["ix".to_string()]);
        assert!(matches!(
            parse(json!({"selector": {}, "partition": 1})),
            Err(MangoError::Invalid {
                error: "illegal_partition",
                ..
            })
        ));
        // Others refuse `null` as CouchDB does.
        assert!(parse(json!({"selector": {}, "limit": null})).is_err());
    }

    #[test]
    fn bookmarks_round_trip() {
        let b = Bookmark {
            key: json!(["a", 1]),
            id: "x".into(),
        };
        assert_eq!(Bookmark::decode(&b.encode()), Some(b));
    }
}
