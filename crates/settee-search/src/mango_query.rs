//! A Mango selector translated into a query over a Mango text index's
//! fields (those [`crate::mango_text`] makes: `path:type` leaves,
//! `$fieldnames`, `$default`), rendered in Lucene's syntax for
//! `_explain` and compiled to tantivy for `_find`.
//!
//! Invariant: the query is a *superset* of the selector — every document
//! of the index the selector matches (by `settee_core::selector`'s rules)
//! is a hit; the caller re-checks every hit with the selector, so the
//! answer is exact. Where a condition cannot be narrowed safely (string
//! order is ICU collation, not term order; `$regex`; negations of what the
//! index cannot say exactly) the translation widens it: to "the field is
//! there" (`$fieldnames`, which names objects and arrays too, so a field
//! holding `{}` is found), or to every document. Negations are pushed
//! down to field conditions as the selector matcher evaluates them (a
//! negated condition still needs its field, except `$exists`). The one
//! clause taken as it is, and not re-checked, is `$text` (a phrase on
//! `$default`), which no selector matcher can evaluate.

use std::fmt::Write as _;

use serde_json::Value;
use settee_core::selector::split_field_path;
use tantivy::query::{
    AllQuery, BooleanQuery, EmptyQuery, Occur, PhrasePrefixQuery, Query, RangeQuery, TermQuery,
};
use tantivy::schema::IndexRecordOption;

use crate::error::Result;
use crate::index::{Meta, SearchIndex};
use crate::mango_text::{escape_part, leaf_name};

/// Longest string compared term by term; a longer one is looked for as
/// "a string is there" (tantivy keeps no term that long).
const TERM_BYTES_MAX: usize = 16_000;

/// Most spellings of a path with numeric segments (each is an array
/// index or a member name); past it the condition reads every document.
const PATH_SPELLINGS_MAX: usize = 8;

/// One end of a numeric range: the bound and whether it is included.
pub type NumBound = Option<(f64, bool)>;

/// A query over a Mango text index.
#[derive(Debug, Clone, PartialEq)]
pub enum TextQuery {
    /// Every document of the index.
    All,
    /// No document.
    Nothing,
    /// `$fieldnames` holds exactly this name.
    FieldName(String),
    /// `$fieldnames` holds a name starting with this.
    FieldNamePrefix(String),
    /// String leaf `field` is `value` (keyword-analyzed: one exact term).
    Str {
        field: String,
        value: String,
    },
    /// String leaf `field` starts with `prefix`.
    StrPrefix {
        field: String,
        prefix: String,
    },
    /// Number leaf `field` within the bounds.
    Num {
        field: String,
        lower: NumBound,
        upper: NumBound,
    },
    /// Boolean leaf `field` (or a `:null` leaf, always `true`).
    Bool {
        field: String,
        value: bool,
    },
    /// `$text`: a phrase on `$default`.
    Default(String),
    And(Vec<TextQuery>),
    Or(Vec<TextQuery>),
}

/// The query of `selector` (already valid for `settee_core::selector`)
/// and of `text` (the `$text` operand), for an index that indexes array
/// lengths (`lengths`) or not.
pub fn translate(selector: &Value, text: Option<&str>, lengths: bool) -> TextQuery {
    let t = Translator { lengths };
    let mut parts = Vec::new();
    if let Some(q) = text {
        parts.push(TextQuery::Default(q.to_string()));
    }
    // The empty selector matches every document.
    if !selector.as_object().is_some_and(|m| m.is_empty()) {
        parts.push(t.value(selector, &[], false, true));
    }
    simplify(TextQuery::And(parts))
}

struct Translator {
    lengths: bool,
}

fn and(parts: Vec<TextQuery>) -> TextQuery {
    simplify(TextQuery::And(parts))
}

fn or(parts: Vec<TextQuery>) -> TextQuery {
    simplify(TextQuery::Or(parts))
}

/// Flattens and drops what does not change the result.
fn simplify(q: TextQuery) -> TextQuery {
    match q {
        TextQuery::And(parts) => {
            let mut out = Vec::new();
            for p in parts.into_iter().map(simplify) {
                match p {
                    TextQuery::All => {}
                    TextQuery::Nothing => return TextQuery::Nothing,
                    TextQuery::And(inner) => out.extend(inner),
                    p => out.push(p),
                }
            }
            match out.len() {
                0 => TextQuery::All,
                1 => out.pop().unwrap_or(TextQuery::All),
                _ => TextQuery::And(out),
            }
        }
        TextQuery::Or(parts) => {
            let mut out = Vec::new();
            for p in parts.into_iter().map(simplify) {
                match p {
                    TextQuery::All => return TextQuery::All,
                    TextQuery::Nothing => {}
                    TextQuery::Or(inner) => out.extend(inner),
                    p => out.push(p),
                }
            }
            match out.len() {
                0 => TextQuery::Nothing,
                1 => out.pop().unwrap_or(TextQuery::Nothing),
                _ => TextQuery::Or(out),
            }
        }
        q => q,
    }
}

/// The spellings of a path in the index: a numeric segment is a member
/// of that name or an array element (`[]`). None: too many.
fn spellings(path: &[String]) -> Option<Vec<Vec<String>>> {
    let mut out: Vec<Vec<String>> = vec![Vec::new()];
    for seg in path {
        let numeric = !seg.is_empty() && seg.parse::<usize>().is_ok();
        if numeric {
            let mut next = Vec::with_capacity(out.len() * 2);
            for p in &out {
                let mut a = p.clone();
                a.push(seg.clone());
                let mut b = p.clone();
                b.push("[]".into());
                next.push(a);
                next.push(b);
            }
            out = next;
            if out.len() > PATH_SPELLINGS_MAX {
                return None;
            }
        } else {
            for p in &mut out {
                p.push(seg.clone());
            }
        }
    }
    Some(out)
}

fn with(path: &[String], seg: &str) -> Vec<String> {
    let mut p = path.to_vec();
    p.push(seg.to_string());
    p
}

fn scalar(v: &Value) -> bool {
    !matches!(v, Value::Array(_) | Value::Object(_))
}

impl Translator {
    /// `f` of every spelling of `path`, any of them.
    fn over(&self, path: &[String], f: impl Fn(&[String]) -> TextQuery) -> TextQuery {
        if path.is_empty() {
            return TextQuery::All;
        }
        match spellings(path) {
            Some(ps) => or(ps.iter().map(|p| f(p)).collect()),
            None => TextQuery::All,
        }
    }

    /// The field at `path` is there (any value, `{}` and `[]` included).
    fn exists(&self, path: &[String]) -> TextQuery {
        self.over(path, |p| {
            let base = p
                .iter()
                .map(|s| escape_part(s))
                .collect::<Vec<_>>()
                .join(".");
            or(vec![
                TextQuery::FieldNamePrefix(format!("{base}_3a")),
                TextQuery::FieldNamePrefix(format!("{base}.")),
            ])
        })
    }

    /// A leaf of type `ty` is there at `path`.
    fn typed(&self, path: &[String], ty: &str) -> TextQuery {
        self.over(path, |p| TextQuery::FieldName(leaf_name(p, ty)))
    }

    fn num(&self, path: &[String], lower: NumBound, upper: NumBound) -> TextQuery {
        self.over(path, |p| TextQuery::Num {
            field: leaf_name(p, "number"),
            lower,
            upper,
        })
    }

    /// The value at `path` equals `v` (as a whole, as `$eq` compares).
    fn eq(&self, path: &[String], v: &Value) -> TextQuery {
        match v {
            // An empty string makes no term; a very long one is not kept.
            Value::String(s) if s.is_empty() || s.len() > TERM_BYTES_MAX => {
                self.typed(path, "string")
            }
            Value::String(s) => self.over(path, |p| TextQuery::Str {
                field: leaf_name(p, "string"),
                value: s.clone(),
            }),
            Value::Number(n) => match n.as_f64() {
                Some(f) => self.num(path, Some((f, true)), Some((f, true))),
                None => self.typed(path, "number"),
            },
            Value::Bool(b) => self.over(path, |p| TextQuery::Bool {
                field: leaf_name(p, "boolean"),
                value: *b,
            }),
            Value::Null => self.over(path, |p| TextQuery::Bool {
                field: leaf_name(p, "null"),
                value: true,
            }),
            Value::Array(items) => {
                let elems = with(path, "[]");
                let mut parts = Vec::new();
                if self.lengths {
                    let n = items.len() as f64;
                    parts.push(self.over(&elems, |p| TextQuery::Num {
                        field: leaf_name(p, "length"),
                        lower: Some((n, true)),
                        upper: Some((n, true)),
                    }));
                }
                if let Some(e) = items.iter().find(|e| scalar(e)) {
                    parts.push(self.eq(&elems, e));
                }
                if parts.is_empty() {
                    self.exists(path)
                } else {
                    and(parts)
                }
            }
            Value::Object(m) => match m.iter().find(|(_, w)| scalar(w)) {
                Some((k, w)) => self.eq(&with(path, k), w),
                None => self.typed(path, "object"),
            },
        }
    }

    /// A value at `path` (the selector's `parse_value`): an object of
    /// members and operators, else an implicit `$eq`. `root`: the
    /// document itself (a list item that is no selector compares it).
    fn value(&self, v: &Value, path: &[String], negated: bool, root: bool) -> TextQuery {
        match v {
            Value::Object(m) if !m.is_empty() => {
                let parts: Vec<TextQuery> = m
                    .iter()
                    .map(|(k, arg)| {
                        if k.starts_with('$') {
                            self.operator(k, arg, path, negated)
                        } else {
                            let mut sub = path.to_vec();
                            sub.extend(split_field_path(k));
                            self.value(arg, &sub, negated, false)
                        }
                    })
                    .collect();
                if negated {
                    or(parts)
                } else {
                    and(parts)
                }
            }
            _ if root && path.is_empty() => {
                if negated {
                    TextQuery::All
                } else {
                    TextQuery::Nothing
                }
            }
            _ => self.cond("$eq", v, path, negated),
        }
    }

    fn list(&self, arg: &Value, path: &[String], negated: bool) -> Vec<TextQuery> {
        arg.as_array()
            .map(|items| {
                items
                    .iter()
                    .map(|i| {
                        let no_selector = i.as_object().is_none_or(|m| m.is_empty());
                        if path.is_empty() && no_selector {
                            // CouchDB's "the document equals it".
                            if negated {
                                TextQuery::All
                            } else {
                                TextQuery::Nothing
                            }
                        } else {
                            self.value(i, path, negated, false)
                        }
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    fn operator(&self, op: &str, arg: &Value, path: &[String], negated: bool) -> TextQuery {
        // Empty lists match everything under either polarity.
        let empty = arg.as_array().is_some_and(Vec::is_empty);
        match op {
            "$and" | "$or" | "$nor" if empty => TextQuery::All,
            "$and" => {
                let parts = self.list(arg, path, negated);
                if negated {
                    or(parts)
                } else {
                    and(parts)
                }
            }
            "$or" => {
                let parts = self.list(arg, path, negated);
                if negated {
                    and(parts)
                } else {
                    or(parts)
                }
            }
            "$nor" => {
                let parts = self.list(arg, path, !negated);
                if negated {
                    or(parts)
                } else {
                    and(parts)
                }
            }
            "$not" => self.value(arg, path, !negated, false),
            _ => self.cond(op, arg, path, negated),
        }
    }

    /// A field condition `op arg` at `path`.
    fn cond(&self, op: &str, arg: &Value, path: &[String], negated: bool) -> TextQuery {
        if path.is_empty() {
            return TextQuery::All;
        }
        if negated {
            // A negated condition holds only where the field is, but for
            // `$exists: true`, which then holds where it is not.
            return match (op, arg) {
                ("$exists", Value::Bool(true)) => TextQuery::All,
                _ => self.exists(path),
            };
        }
        match op {
            "$eq" => self.eq(path, arg),
            "$exists" => match arg {
                Value::Bool(false) => TextQuery::All,
                _ => self.exists(path),
            },
            "$lt" | "$lte" => {
                let inclusive = op == "$lte";
                // CouchDB's collation: null < booleans < numbers <
                // strings < arrays < objects.
                match arg {
                    Value::Null if !inclusive => TextQuery::Nothing,
                    Value::Null => self.typed(path, "null"),
                    Value::Bool(_) => {
                        or(vec![self.typed(path, "null"), self.typed(path, "boolean")])
                    }
                    Value::Number(n) => or(vec![
                        self.typed(path, "null"),
                        self.typed(path, "boolean"),
                        match n.as_f64() {
                            Some(f) => self.num(path, None, Some((f, inclusive))),
                            None => self.typed(path, "number"),
                        },
                    ]),
                    Value::String(_) => or(vec![
                        self.typed(path, "null"),
                        self.typed(path, "boolean"),
                        self.typed(path, "number"),
                        self.typed(path, "string"),
                    ]),
                    _ => self.exists(path),
                }
            }
            "$gt" | "$gte" => match arg {
                Value::Number(n) => {
                    let inclusive = op == "$gte";
                    let numbers = match n.as_f64() {
                        Some(f) => self.num(path, Some((f, inclusive)), None),
                        None => self.typed(path, "number"),
                    };
                    // Strings, arrays and objects sort above every number.
                    let above = self.over(path, |p| {
                        let base = p
                            .iter()
                            .map(|s| escape_part(s))
                            .collect::<Vec<_>>()
                            .join(".");
                        or(vec![
                            TextQuery::FieldName(leaf_name(p, "string")),
                            TextQuery::FieldName(leaf_name(p, "array")),
                            TextQuery::FieldName(leaf_name(p, "object")),
                            TextQuery::FieldNamePrefix(format!("{base}.")),
                        ])
                    });
                    or(vec![numbers, above])
                }
                _ => self.exists(path),
            },
            "$in" => match arg.as_array() {
                Some(args) => or(args
                    .iter()
                    .map(|a| {
                        if scalar(a) {
                            or(vec![self.eq(path, a), self.eq(&with(path, "[]"), a)])
                        } else {
                            self.exists(path)
                        }
                    })
                    .collect()),
                None => self.exists(path),
            },
            "$all" => match arg.as_array().map(Vec::as_slice) {
                Some([]) => TextQuery::Nothing,
                Some([single]) if !scalar(single) => self.exists(path),
                Some(args) => and(args
                    .iter()
                    .map(|a| {
                        if scalar(a) {
                            self.eq(&with(path, "[]"), a)
                        } else {
                            self.exists(&with(path, "[]"))
                        }
                    })
                    .collect()),
                None => self.exists(path),
            },
            "$size" => match arg.as_u64() {
                Some(n) if self.lengths => self.over(&with(path, "[]"), |p| TextQuery::Num {
                    field: leaf_name(p, "length"),
                    lower: Some((n as f64, true)),
                    upper: Some((n as f64, true)),
                }),
                _ => self.typed(path, "array"),
            },
            "$mod" => self.typed(path, "number"),
            "$regex" => self.typed(path, "string"),
            "$beginsWith" => match arg.as_str() {
                Some(p) if !p.is_empty() && p.len() <= TERM_BYTES_MAX => {
                    self.over(path, |q| TextQuery::StrPrefix {
                        field: leaf_name(q, "string"),
                        prefix: p.to_string(),
                    })
                }
                _ => self.typed(path, "string"),
            },
            "$elemMatch" | "$allMatch" => self.exists(&with(path, "[]")),
            "$type" => match arg.as_str() {
                Some(t @ ("null" | "boolean" | "number" | "string" | "array" | "object")) => {
                    self.typed(path, t)
                }
                // A name that is no JSON type matches nothing.
                _ => TextQuery::Nothing,
            },
            // `$ne`, `$nin`, `$keyMapMatch`: the field is there.
            _ => self.exists(path),
        }
    }
}

/// A value in Lucene's syntax, quoted, with `"` and `\` escaped.
fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// A term in Lucene's syntax with its special characters escaped.
fn escaped(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "+-&|!(){}[]^\"~*?:\\/ ".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn num_text(f: f64) -> String {
    if f.fract() == 0.0 && f.abs() < 1e15 {
        format!("{}", f as i64)
    } else {
        format!("{f}")
    }
}

impl TextQuery {
    /// The query in Lucene's syntax, as `_explain` reports it.
    pub fn to_lucene(&self) -> String {
        let mut out = String::new();
        self.render(&mut out);
        out
    }

    fn render(&self, out: &mut String) {
        match self {
            TextQuery::All => out.push_str("*:*"),
            TextQuery::Nothing => out.push_str("(*:* AND NOT *:*)"),
            TextQuery::FieldName(n) => {
                let _ = write!(out, "($fieldnames:{})", escaped(n));
            }
            TextQuery::FieldNamePrefix(p) => {
                let _ = write!(out, "($fieldnames:{}*)", escaped(p));
            }
            TextQuery::Str { field, value } => {
                let _ = write!(out, "({field}:{})", quoted(value));
            }
            TextQuery::StrPrefix { field, prefix } => {
                let _ = write!(out, "({field}:{}*)", escaped(prefix));
            }
            TextQuery::Num {
                field,
                lower,
                upper,
            } => match (lower, upper) {
                (Some((a, true)), Some((b, true))) if a == b => {
                    let _ = write!(out, "({field}:{})", num_text(*a));
                }
                _ => {
                    let (open, low) = match lower {
                        Some((a, inc)) => (if *inc { '[' } else { '{' }, num_text(*a)),
                        None => ('[', "-Infinity".to_string()),
                    };
                    let (close, high) = match upper {
                        Some((b, inc)) => (if *inc { ']' } else { '}' }, num_text(*b)),
                        None => (']', "Infinity".to_string()),
                    };
                    let _ = write!(out, "({field}:{open}{low} TO {high}{close})");
                }
            },
            TextQuery::Bool { field, value } => {
                let _ = write!(out, "({field}:{value})");
            }
            TextQuery::Default(q) => {
                let _ = write!(out, "($default:{})", quoted(q));
            }
            TextQuery::And(parts) | TextQuery::Or(parts) => {
                let sep = if matches!(self, TextQuery::And(_)) {
                    " AND "
                } else {
                    " OR "
                };
                out.push('(');
                for (i, p) in parts.iter().enumerate() {
                    if i > 0 {
                        out.push_str(sep);
                    }
                    p.render(out);
                }
                out.push(')');
            }
        }
    }

    /// The tantivy query on `index` (a Mango text index) at `meta`.
    pub fn compile(&self, index: &SearchIndex, meta: &Meta) -> Result<Box<dyn Query>> {
        Ok(match self {
            TextQuery::All => Box::new(AllQuery),
            TextQuery::Nothing => Box::new(EmptyQuery),
            TextQuery::FieldName(n) => Box::new(TermQuery::new(
                index.text_term("$fieldnames", n),
                IndexRecordOption::Basic,
            )),
            TextQuery::FieldNamePrefix(p) => {
                let mut q = PhrasePrefixQuery::new(vec![index.text_term("$fieldnames", p)]);
                q.set_max_expansions(u32::MAX);
                Box::new(q)
            }
            TextQuery::Str { field, value } => Box::new(TermQuery::new(
                index.text_term(field, value),
                IndexRecordOption::Basic,
            )),
            TextQuery::StrPrefix { field, prefix } => {
                let mut q = PhrasePrefixQuery::new(vec![index.text_term(field, prefix)]);
                q.set_max_expansions(u32::MAX);
                Box::new(q)
            }
            TextQuery::Num {
                field,
                lower,
                upper,
            } => {
                use std::ops::Bound as B;
                let end = |b: &NumBound, open: f64| match b {
                    None => B::Included(index.number_term(field, open)),
                    Some((v, true)) => B::Included(index.number_term(field, *v)),
                    Some((v, false)) => B::Excluded(index.number_term(field, *v)),
                };
                Box::new(RangeQuery::new(
                    end(lower, f64::NEG_INFINITY),
                    end(upper, f64::INFINITY),
                ))
            }
            TextQuery::Bool { field, value } => Box::new(TermQuery::new(
                index.string_term(field, if *value { "true" } else { "false" }),
                IndexRecordOption::Basic,
            )),
            TextQuery::Default(q) => index.compile(
                &crate::lucene::Node::Phrase {
                    field: Some("$default".into()),
                    text: q.clone(),
                    slop: 0,
                },
                meta,
            )?,
            TextQuery::And(parts) | TextQuery::Or(parts) => {
                let occur = if matches!(self, TextQuery::And(_)) {
                    Occur::Must
                } else {
                    Occur::Should
                };
                let mut clauses = Vec::with_capacity(parts.len());
                for p in parts {
                    clauses.push((occur, p.compile(index, meta)?));
                }
                Box::new(BooleanQuery::new(clauses))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn q(v: Value) -> String {
        translate(&v, None, true).to_lucene()
    }

    #[test]
    fn selectors_become_superset_queries() {
        assert_eq!(q(json!({"name": "Ann"})), "(name_3astring:\"Ann\")");
        assert_eq!(q(json!({"age": {"$eq": 30}})), "(age_3anumber:30)");
        assert_eq!(q(json!({"a": {"b": true}})), "(a.b_3aboolean:true)");
        assert_eq!(
            q(json!({"age": {"$lt": 5}})),
            "(($fieldnames:age_3anull) OR ($fieldnames:age_3aboolean) OR (age_3anumber:[-Infinity TO 5}))"
        );
        // Negations need the field only.
        assert_eq!(
            q(json!({"a": {"$ne": 1}})),
            "(($fieldnames:a_3a*) OR ($fieldnames:a.*))"
        );
        assert_eq!(q(json!({"$not": {"a": {"$exists": true}}})), "*:*");
        assert_eq!(q(json!({"a": {"$exists": false}})), "*:*");
        // A numeric segment is a member or an array element.
        assert_eq!(
            q(json!({"a.0": "x"})),
            "((a.0_3astring:\"x\") OR (a._5b_5d_3astring:\"x\"))"
        );
        assert_eq!(
            q(json!({"$or": [{"a": 1}, {"b": {"$regex": "x"}}]})),
            "((a_3anumber:1) OR ($fieldnames:b_3astring))"
        );
        assert_eq!(q(json!({"$and": []})), "*:*");
        assert_eq!(q(json!({"t": {"$size": 2}})), "(t._5b_5d_3alength:2)");
        let t = translate(&json!({"a": 1}), Some("big cat"), true).to_lucene();
        assert_eq!(t, "(($default:\"big cat\") AND (a_3anumber:1))");
        assert_eq!(
            translate(&json!({}), Some("x"), true).to_lucene(),
            "($default:\"x\")"
        );
        assert_eq!(translate(&json!({}), None, true), TextQuery::All);
    }
}
