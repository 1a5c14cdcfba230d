//! What the planner needs to know of a selector: its normalised form (as
//! CouchDB shows it), the fields a matching document must have, the fields
//! it mentions at all, and the key range each field's conditions allow.
//!
//! Invariant: everything here reads the selector's JSON as given, after
//! [`settee_core::selector::Selector::parse`] accepted it; nothing here
//! decides whether a document matches (that is the parsed selector's job),
//! so a wrong range here can only cost work (rows read and filtered out),
//! never a wrong answer, as long as ranges are supersets.

use std::collections::BTreeSet;

use serde_json::{json, Map, Value};
use settee_core::collate::{collate, collate_loose};

/// A field condition of the normalised selector: (dotted path, operator,
/// argument).
type FieldOp = (String, String, Value);

/// The selector as CouchDB normalises it: every condition
/// `{"path": {"$op": arg}}`, several at one level joined by `$and`,
/// negations pushed into the conditions.
pub fn normalize(sel: &Value) -> Value {
    if sel.as_object().is_some_and(Map::is_empty) {
        return sel.clone();
    }
    normalize_at(sel, "", false)
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn negate_op(op: &str) -> Option<&'static str> {
    Some(match op {
        "$eq" => "$ne",
        "$ne" => "$eq",
        "$gt" => "$lte",
        "$gte" => "$lt",
        "$lt" => "$gte",
        "$lte" => "$gt",
        "$in" => "$nin",
        "$nin" => "$in",
        _ => return None,
    })
}

fn cond(path: &str, op: &str, arg: Value, negated: bool) -> Value {
    // The selectors of `$elemMatch` and friends are normalised too, on
    // the element (the empty path).
    let arg = match op {
        "$elemMatch" | "$allMatch" | "$keyMapMatch" if arg.is_object() => {
            normalize_at(&arg, "", false)
        }
        _ => arg,
    };
    let c = if negated {
        match negate_op(op) {
            Some(n) => json!({ n: arg }),
            None => json!({"$not": { op: arg }}),
        }
    } else {
        json!({ op: arg })
    };
    let mut m = Map::new();
    m.insert(path.to_string(), c);
    Value::Object(m)
}

/// The operator joining members: `$and`, or `$or` under a negation
/// (De Morgan: `not (x and y)` is `not x or not y`).
fn conjunction_op(negated: bool) -> &'static str {
    if negated {
        "$or"
    } else {
        "$and"
    }
}

/// One member's conditions (several joined as [`conjunction_op`] says).
fn one(mut conds: Vec<Value>, negated: bool) -> Value {
    if conds.len() == 1 {
        conds.pop().unwrap_or(Value::Null)
    } else {
        json!({ conjunction_op(negated): conds })
    }
}

fn norm_members(v: &Value, path: &str, negated: bool) -> Vec<Value> {
    let Value::Object(m) = v else {
        return vec![cond(path, "$eq", v.clone(), negated)];
    };
    if m.is_empty() && !path.is_empty() {
        return vec![cond(path, "$eq", v.clone(), negated)];
    }
    let mut out = Vec::new();
    let ops_only = m.keys().all(|k| k.starts_with('$'));
    for (k, x) in m {
        let item = match k.as_str() {
            "$and" | "$or" | "$nor" => {
                let neg_items = k == "$nor";
                let items: Vec<Value> = x
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .map(|i| normalize_at(i, path, negated ^ neg_items))
                            .collect()
                    })
                    .unwrap_or_default();
                // `$nor` is `$and` of negations; under a negation `$and`
                // and `$or` swap (De Morgan).
                let is_or = (k == "$or") != negated;
                let op = if is_or { "$or" } else { "$and" };
                json!({ op: items })
            }
            "$not" => one(norm_members(x, path, !negated), !negated),
            op if op.starts_with('$') => cond(path, op, x.clone(), negated),
            field => {
                let field_path = join(path, field);
                one(norm_members(x, &field_path, negated), negated)
            }
        };
        out.push(item);
    }
    // `{"b": {"$gt": 1, "$lt": 5}}`: one field's operators are one member.
    if ops_only && !path.is_empty() && out.len() > 1 {
        return vec![json!({ conjunction_op(negated): out })];
    }
    out
}

fn normalize_at(v: &Value, path: &str, negated: bool) -> Value {
    one(norm_members(v, path, negated), negated)
}

/// The field conditions of the normalised selector's top-level
/// conjunction (through nested `$and`s).
fn conjunction(norm: &Value, out: &mut Vec<FieldOp>) {
    let Value::Object(m) = norm else { return };
    for (k, v) in m {
        if k == "$and" {
            for i in v.as_array().into_iter().flatten() {
                conjunction(i, out);
            }
        } else if !k.starts_with('$') {
            if let Some((op, arg)) = v.as_object().and_then(|c| c.iter().next()) {
                out.push((k.clone(), op.clone(), arg.clone()));
            }
        }
    }
}

/// Fields every matching document has: those with a condition in the
/// top-level conjunction (any but `$exists: false`), and those required
/// by every branch of an `$or`.
pub fn required_fields(norm: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let Value::Object(m) = norm else { return out };
    for (k, v) in m {
        match k.as_str() {
            "$and" => {
                for i in v.as_array().into_iter().flatten() {
                    out.extend(required_fields(i));
                }
            }
            "$or" => {
                let mut branches = v.as_array().into_iter().flatten().map(required_fields);
                if let Some(first) = branches.next() {
                    out.extend(branches.fold(first, |acc, b| &acc & &b));
                }
            }
            "$nor" | "$not" => {}
            field => {
                let exists_false = v.get("$exists") == Some(&Value::Bool(false));
                if !exists_false {
                    out.insert(field.to_string());
                }
            }
        }
    }
    out
}

/// Every field the selector mentions.
pub fn all_fields(norm: &Value, out: &mut BTreeSet<String>) {
    match norm {
        Value::Object(m) => {
            for (k, v) in m {
                if k.starts_with('$') {
                    if matches!(k.as_str(), "$and" | "$or" | "$nor" | "$not") {
                        all_fields(v, out);
                    }
                } else {
                    out.insert(k.clone());
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| all_fields(i, out)),
        _ => {}
    }
}

/// CouchDB's hints: fields with range conditions (and `$exists`) in the
/// conjunction, and the rest.
pub fn hints(norm: &Value) -> (Vec<String>, Vec<String>) {
    let mut conj = Vec::new();
    conjunction(norm, &mut conj);
    let mut indexable = BTreeSet::new();
    for (f, op, _) in &conj {
        if matches!(
            op.as_str(),
            "$eq" | "$gt" | "$gte" | "$lt" | "$lte" | "$exists" | "$beginsWith"
        ) {
            indexable.insert(f.clone());
        }
    }
    let mut all = BTreeSet::new();
    all_fields(norm, &mut all);
    let mut unindexable: Vec<String> = all.difference(&indexable).cloned().collect();
    unindexable.reverse();
    (indexable.into_iter().rev().collect(), unindexable)
}

/// The range a field's conditions allow: bounds and whether it is one
/// value.
#[derive(Debug, Clone, Default)]
pub struct FieldRange {
    pub low: Option<Value>,
    pub high: Option<Value>,
    pub eq: bool,
    /// The bounds exclude their values (`$gt`, `$lt`).
    pub low_open: bool,
    pub high_open: bool,
}

impl FieldRange {
    /// No value satisfies both bounds (`$gt: "x", $lt: "a"`).
    pub fn is_empty(&self) -> bool {
        let (Some(l), Some(h)) = (&self.low, &self.high) else {
            return false;
        };
        match collate_loose(l, h) {
            std::cmp::Ordering::Greater => true,
            std::cmp::Ordering::Equal => self.low_open || self.high_open,
            std::cmp::Ordering::Less => false,
        }
    }
}

/// The range of one field from the conjunction's conditions on it.
pub fn range_of(norm: &Value, field: &str) -> FieldRange {
    let mut conj = Vec::new();
    conjunction(norm, &mut conj);
    range_in(&conj, field)
}

/// [`range_of`] from the conjunction's conditions.
fn range_in(conj: &[FieldOp], field: &str) -> FieldRange {
    let mut r = FieldRange::default();
    let tighter_low =
        |cur: &Option<Value>, v: &Value| cur.as_ref().is_none_or(|c| collate(v, c).is_gt());
    let tighter_high =
        |cur: &Option<Value>, v: &Value| cur.as_ref().is_none_or(|c| collate(v, c).is_lt());
    let same = |cur: &Option<Value>, v: &Value| cur.as_ref().is_some_and(|c| collate(v, c).is_eq());
    for (_, op, arg) in conj.iter().filter(|(f, _, _)| f == field) {
        match op.as_str() {
            "$eq" => {
                return FieldRange {
                    low: Some(arg.clone()),
                    high: Some(arg.clone()),
                    eq: true,
                    ..FieldRange::default()
                };
            }
            "$gt" | "$gte" if tighter_low(&r.low, arg) => {
                r.low = Some(arg.clone());
                r.low_open = op == "$gt";
            }
            "$gt" if same(&r.low, arg) => r.low_open = true,
            "$lt" | "$lte" if tighter_high(&r.high, arg) => {
                r.high = Some(arg.clone());
                r.high_open = op == "$lt";
            }
            "$lt" if same(&r.high, arg) => r.high_open = true,
            "$beginsWith" => {
                if let Some(s) = arg.as_str() {
                    let (low, high) = (json!(s), json!(format!("{s}\u{fff0}")));
                    if tighter_low(&r.low, &low) {
                        (r.low, r.low_open) = (Some(low), false);
                    }
                    if tighter_high(&r.high, &high) {
                        (r.high, r.high_open) = (Some(high), false);
                    }
                }
            }
            _ => {}
        }
    }
    r
}

/// The field ranges the planner goes by, as CouchDB forms them: when the
/// conditions on some field cannot all hold (an empty range), that field
/// (the first by name) is the only one with a range — every other
/// field's conditions are then left to the filter.
#[derive(Debug)]
pub struct Ranges<'a> {
    norm: &'a Value,
    conj: Vec<FieldOp>,
    empty: Option<String>,
}

impl<'a> Ranges<'a> {
    pub fn new(norm: &'a Value) -> Ranges<'a> {
        let mut conj = Vec::new();
        conjunction(norm, &mut conj);
        let fields: BTreeSet<&str> = conj.iter().map(|(f, _, _)| f.as_str()).collect();
        let empty = fields
            .into_iter()
            .find(|f| range_in(&conj, f).is_empty())
            .map(str::to_string);
        Ranges { norm, conj, empty }
    }

    /// The field whose conditions cannot all hold, if any.
    pub fn empty_field(&self) -> Option<&str> {
        self.empty.as_deref()
    }

    fn kept(&self, field: &str) -> bool {
        self.empty.as_deref().is_none_or(|e| e == field)
    }

    /// The range of `field`'s conditions.
    pub fn of(&self, field: &str) -> FieldRange {
        if self.kept(field) {
            range_in(&self.conj, field)
        } else {
            FieldRange::default()
        }
    }

    /// Whether `field` has a range an index can use (bounds, or
    /// `$exists: true`): what ranks indexes.
    pub fn bounded(&self, field: &str) -> bool {
        self.kept(field)
            && self.conj.iter().any(|(f, op, arg)| {
                f == field
                    && match op.as_str() {
                        "$eq" | "$gt" | "$gte" | "$lt" | "$lte" | "$beginsWith" => true,
                        "$exists" => *arg == Value::Bool(true),
                        _ => false,
                    }
            })
    }

    /// [`alternatives`], unless a field's range is empty.
    pub fn alternatives(&self, field: &str) -> Option<Vec<FieldRange>> {
        if self.empty.is_some() {
            return None;
        }
        alternatives(self.norm, field)
    }
}

/// Most alternatives a field's `$in` or `$or` is read as (more: one range).
const MAX_ALTERNATIVES: usize = 1024;

/// The smallest array: arrays collate after every scalar and before objects.
fn array_region() -> FieldRange {
    FieldRange {
        low: Some(json!([])),
        high: Some(json!({})),
        ..FieldRange::default()
    }
}

/// Beyond CouchDB (which reads the whole index for these): the disjoint
/// ranges, in collation order, that together hold every value of `field`
/// a matching document can have, when the conjunction limits the field to
/// several values or ranges — an `$in`, or an `$or` whose every branch
/// bounds the field. `None` when there is no such choice (the field's
/// [`range_of`] is then the one range). Supersets, like every range here:
/// an `$in` also matches arrays holding one of its values, so the array
/// region is one of its ranges.
pub fn alternatives(norm: &Value, field: &str) -> Option<Vec<FieldRange>> {
    let mut conj = Vec::new();
    conjunction(norm, &mut conj);
    if conj.iter().any(|(f, op, _)| f == field && op == "$eq") {
        return None;
    }
    let from_in = conj.iter().find_map(|(f, op, arg)| {
        (f == field && op == "$in").then(|| {
            let values = arg.as_array().map(Vec::as_slice).unwrap_or_default();
            let mut alts: Vec<FieldRange> = values
                .iter()
                .filter(|v| !v.is_array())
                .map(|v| FieldRange {
                    low: Some(v.clone()),
                    high: Some(v.clone()),
                    eq: true,
                    ..FieldRange::default()
                })
                .collect();
            if !values.is_empty() {
                alts.push(array_region());
            }
            alts
        })
    });
    let alts = from_in.or_else(|| or_branches(norm, field))?;
    let merged = merge(alts);
    (merged.len() <= MAX_ALTERNATIVES).then_some(merged)
}

/// The field's range in each branch of the first `$or` of the
/// conjunction, when every branch bounds it.
fn or_branches(norm: &Value, field: &str) -> Option<Vec<FieldRange>> {
    let branches = find_or(norm)?;
    branches
        .iter()
        .map(|b| {
            let r = range_of(b, field);
            (r.low.is_some() || r.high.is_some()).then_some(r)
        })
        .collect()
}

fn find_or(norm: &Value) -> Option<&Vec<Value>> {
    let m = norm.as_object()?;
    m.get("$or")
        .and_then(Value::as_array)
        .or_else(|| m.get("$and")?.as_array()?.iter().find_map(find_or))
}

/// Sorts ranges by their low bound and joins those that overlap or touch
/// (bounds count as inclusive), so none is read twice.
fn merge(mut alts: Vec<FieldRange>) -> Vec<FieldRange> {
    let low_cmp = |a: &Option<Value>, b: &Option<Value>| match (a, b) {
        (None, None) => std::cmp::Ordering::Equal,
        (None, Some(_)) => std::cmp::Ordering::Less,
        (Some(_), None) => std::cmp::Ordering::Greater,
        (Some(x), Some(y)) => collate_loose(x, y),
    };
    alts.sort_by(|a, b| low_cmp(&a.low, &b.low));
    let mut out: Vec<FieldRange> = Vec::with_capacity(alts.len());
    for r in alts {
        if let Some(cur) = out.last_mut() {
            let overlaps = match (&cur.high, &r.low) {
                (None, _) | (_, None) => true,
                (Some(h), Some(l)) => collate_loose(l, h).is_le(),
            };
            if overlaps {
                let higher = match (&cur.high, &r.high) {
                    (None, _) | (_, None) => None,
                    (Some(h), Some(x)) => {
                        Some(if collate_loose(x, h).is_gt() { x } else { h }.clone())
                    }
                };
                cur.eq = cur.eq && r.eq && higher == cur.high && cur.low == cur.high;
                cur.high = higher;
                continue;
            }
        }
        out.push(r);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_as_couchdb_shows_it() {
        assert_eq!(normalize(&json!({"t": "x"})), json!({"t": {"$eq": "x"}}));
        assert_eq!(
            normalize(&json!({"n": {"$gt": 1, "$lte": 3}})),
            json!({"$and": [{"n": {"$gt": 1}}, {"n": {"$lte": 3}}]})
        );
        assert_eq!(
            normalize(&json!({"a": {"$not": {"$gt": 1}}})),
            json!({"a": {"$lte": 1}})
        );
        assert_eq!(
            normalize(&json!({"a": {"b": 1}})),
            json!({"a.b": {"$eq": 1}})
        );
        assert_eq!(
            normalize(&json!({"$nor": [{"a": 1}], "$not": {"b": 2}})),
            json!({"$and": [{"$and": [{"a": {"$ne": 1}}]}, {"b": {"$ne": 2}}]})
        );
        // De Morgan under negations.
        assert_eq!(
            normalize(&json!({"$not": {"b": {"$lt": -2}, "a": {"$ne": -3}}})),
            json!({"$or": [{"b": {"$gte": -2}}, {"a": {"$eq": -3}}]})
        );
        assert_eq!(
            normalize(&json!({"$nor": [{"_id": {"$gt": "a", "$lt": "c"}}]})),
            json!({"$and": [{"$or": [{"_id": {"$lte": "a"}}, {"_id": {"$gte": "c"}}]}]})
        );
        assert_eq!(
            normalize(&json!({"$nor": [{"$nor": [{"_id": "a"}, {"x": 1}]}]})),
            json!({"$and": [{"$or": [{"_id": {"$eq": "a"}}, {"x": {"$eq": 1}}]}]})
        );
        assert_eq!(
            normalize(&json!({"$not": {"$or": [{"a": 1}, {"b": 2}]}})),
            json!({"$and": [{"a": {"$ne": 1}}, {"b": {"$ne": 2}}]})
        );
    }

    #[test]
    fn required_fields_follow_or_branches() {
        let n = normalize(&json!({"$or": [{"n": 1}, {"n": 3, "t": 1}], "u": {"$exists": false}}));
        assert_eq!(
            required_fields(&n).into_iter().collect::<Vec<_>>(),
            vec!["n"]
        );
    }

    fn bounds(alts: &[FieldRange]) -> Vec<(Option<Value>, Option<Value>, bool)> {
        alts.iter()
            .map(|r| (r.low.clone(), r.high.clone(), r.eq))
            .collect()
    }

    #[test]
    fn in_is_points_in_order_and_the_array_region() {
        let n = normalize(&json!({"k": {"$in": [3, "x", 1, 3.0, [1], {"a": 1}]}}));
        let p = |v: Value| (Some(v.clone()), Some(v), true);
        assert_eq!(
            bounds(&alternatives(&n, "k").unwrap()),
            vec![
                p(json!(1)),
                p(json!(3)),
                p(json!("x")),
                (Some(json!([])), Some(json!({})), false),
                p(json!({"a": 1})),
            ]
        );
        assert!(alternatives(&normalize(&json!({"k": {"$in": []}})), "k")
            .unwrap()
            .is_empty());
        assert!(alternatives(&normalize(&json!({"k": {"$in": [1]}, "j": 2})), "j").is_none());
        assert!(
            alternatives(
                &normalize(&json!({"k": {"$in": [1]}, "$and": [{"k": 2}]})),
                "k"
            )
            .is_none(),
            "an equality is one range"
        );
    }

    #[test]
    fn or_branches_merge_when_they_overlap() {
        let n = normalize(&json!({"$or": [
            {"k": {"$gt": 10, "$lt": 20}},
            {"k": 5},
            {"k": {"$gte": 15, "$lte": 30}},
            {"k": 5},
        ]}));
        assert_eq!(
            bounds(&alternatives(&n, "k").unwrap()),
            vec![
                (Some(json!(5)), Some(json!(5)), true),
                (Some(json!(10)), Some(json!(30)), false),
            ]
        );
        let open = normalize(&json!({"$or": [{"k": {"$lt": 3}}, {"k": {"$gt": 1}}]}));
        assert_eq!(
            bounds(&alternatives(&open, "k").unwrap()),
            vec![(None, None, false)]
        );
        let unbounded = normalize(&json!({"$or": [{"k": 1}, {"j": 2}]}));
        assert!(alternatives(&unbounded, "k").is_none());
    }
}
