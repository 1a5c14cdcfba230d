//! `_sum` (and `_count`'s rereduce, which sums counts the same way).
//!
//! The rules, as CouchDB 3.4.3 applies them to each value in turn with an
//! accumulator that starts as the integer `0`:
//!
//! * number + number adds (integers exactly, floats may not overflow);
//! * arrays add element-wise, the longer array's extra elements kept as
//!   they are (unchecked); a number meets an array as a one-element array;
//! * an object is taken as it is while the accumulator is still the
//!   integer `0`, and is otherwise merged member-wise with an object
//!   accumulator (members sorted by name, shared members summed by these
//!   same rules, the others kept unchecked);
//! * any other value ends the fold with the value `{"error":
//!   "builtin_reduce_error", "reason": SUM_ERROR, "caused_by": value}`
//!   (for arrays, the rest of the accumulator's array at the mismatch);
//! * an object with an `"error": "builtin_reduce_error"` member (such a
//!   result, or a value that looks like one) ends the fold as the result;
//!   an object with any other `"error"` member, or an object meeting an
//!   accumulator that is neither `0` nor an object, crashes CouchDB
//!   (`case_clause`).

use std::cmp::Ordering;

use serde_json::{Map, Value};

use super::erlang::{external_size, to_binary, Crash, Num, Term};
use super::{ReduceError, Row};

pub(crate) const SUM_ERROR: &str = "The _sum function requires that map values be numbers, arrays of numbers, or objects. Objects cannot be mixed with other data structures. Objects can be arbitrarily nested, provided that the values for all fields are themselves numbers, arrays of numbers, or objects.";

/// CouchDB's `reduce_limit` threshold for `_sum` output, in external term
/// format bytes.
const OVERFLOW_OUTPUT_BYTES: usize = 4906;

/// A value during summation: numbers kept exact, everything else carried.
#[derive(Clone, Debug, PartialEq)]
enum S {
    Num(Num),
    List(Vec<S>),
    Obj(Vec<(String, S)>),
    /// `null`, booleans and strings, which only ever ride along.
    Other(Value),
}

impl S {
    fn from_json(v: &Value) -> S {
        match v {
            Value::Number(n) => S::Num(Num::from_json(n)),
            Value::Array(items) => S::List(items.iter().map(S::from_json).collect()),
            Value::Object(members) => S::Obj(
                members
                    .iter()
                    .map(|(k, v)| (k.clone(), S::from_json(v)))
                    .collect(),
            ),
            other => S::Other(other.clone()),
        }
    }

    fn into_json(self) -> Value {
        match self {
            S::Num(n) => n.to_json(),
            S::List(items) => Value::Array(items.into_iter().map(S::into_json).collect()),
            S::Obj(members) => Value::Object(
                members
                    .into_iter()
                    .map(|(k, v)| (k, v.into_json()))
                    .collect::<Map<_, _>>(),
            ),
            S::Other(v) => v,
        }
    }
}

/// Why a fold stopped early.
enum Stop {
    /// `throw_sum_error(Cause)`: the result is an error object.
    Invalid(S),
    /// An error object met in the input is the result.
    ErrorObject(S),
    Crash(Crash),
}

impl From<Crash> for Stop {
    fn from(crash: Crash) -> Self {
        Stop::Crash(crash)
    }
}

/// `_sum`'s reduce: folds the row values, then applies the overflow check
/// to the input CouchDB would have measured (`[[[Key, DocId], Value]]`).
pub(crate) fn reduce(rows: &[Row<'_>]) -> Result<Value, ReduceError> {
    let sum = fold(rows.iter().map(|row| row.value))?;
    let input = Term::List(
        rows.iter()
            .map(|row| {
                Term::List(vec![
                    Term::List(vec![
                        Term::from_json(row.key),
                        Term::Bin(row.doc_id.as_bytes()),
                    ]),
                    Term::from_json(row.value),
                ])
            })
            .collect(),
    );
    Ok(check_overflow(external_size(&input), sum))
}

/// `_sum`'s rereduce: folds the partial sums, then applies the overflow
/// check to `[[[], Partial]]`.
pub(crate) fn rereduce(partials: &[&Value]) -> Result<Value, ReduceError> {
    let sum = fold(partials.iter().copied())?;
    let input = Term::List(
        partials
            .iter()
            .map(|p| Term::List(vec![Term::List(Vec::new()), Term::from_json(p)]))
            .collect(),
    );
    Ok(check_overflow(external_size(&input), sum))
}

/// The fold alone, without the overflow check: how `_count` rereduces.
pub(crate) fn fold<'a>(values: impl Iterator<Item = &'a Value>) -> Result<Value, ReduceError> {
    let mut acc = S::Num(Num::Int(0));
    for value in values {
        match add(S::from_json(value), acc) {
            Ok(next) => acc = next,
            Err(Stop::Invalid(cause)) => return Ok(error_object(cause)),
            Err(Stop::ErrorObject(obj)) => return Ok(obj.into_json()),
            Err(Stop::Crash(crash)) => return Err(crash.into()),
        }
    }
    Ok(acc.into_json())
}

fn error_object(cause: S) -> Value {
    let mut obj = Map::new();
    obj.insert("error".into(), Value::from("builtin_reduce_error"));
    obj.insert("reason".into(), Value::from(SUM_ERROR));
    obj.insert("caused_by".into(), cause.into_json());
    Value::Object(obj)
}

fn check_overflow(input_size: usize, sum: Value) -> Value {
    let output_size = external_size(&Term::from_json(&sum));
    if output_size > OVERFLOW_OUTPUT_BYTES && output_size * 2 > input_size {
        let mut obj = Map::new();
        obj.insert("error".into(), Value::from("builtin_reduce_error"));
        obj.insert(
            "reason".into(),
            Value::from(format!(
                "Reduce output must shrink more rapidly: input size: {input_size} output size: {output_size}"
            )),
        );
        Value::Object(obj)
    } else {
        sum
    }
}

/// Adds `value` into `acc` (CouchDB's `sum_values(Value, Acc)`).
fn add(value: S, acc: S) -> Result<S, Stop> {
    match (value, acc) {
        (S::Num(v), S::Num(a)) => Ok(S::Num(a.add(v)?)),
        (S::List(v), S::List(a)) => add_arrays(a, v),
        (S::Num(v), S::List(a)) => add_arrays(a, vec![S::Num(v)]),
        (S::List(v), S::Num(a)) => add_arrays(vec![S::Num(a)], v),
        (S::Obj(members), acc) => add_object(members, acc),
        (value, _) => Err(Stop::Invalid(value)),
    }
}

fn add_object(members: Vec<(String, S)>, acc: S) -> Result<S, Stop> {
    if let Some((_, marker)) = members.iter().find(|(k, _)| k == "error") {
        return match marker {
            S::Other(Value::String(s)) if s == "builtin_reduce_error" => {
                Err(Stop::ErrorObject(S::Obj(members)))
            }
            other => {
                let other = other.clone().into_json();
                let clause = Term::Tuple(vec![Term::Bin(b"error"), Term::from_json(&other)]);
                Err(Stop::Crash(case_clause(&clause)))
            }
        };
    }
    match acc {
        S::Num(n) if n.is_int_zero() => Ok(S::Obj(members)),
        S::Obj(acc_members) => Ok(S::Obj(merge_objects(sorted(members), sorted(acc_members))?)),
        other => {
            let other = other.into_json();
            Err(Stop::Crash(case_clause(&Term::from_json(&other))))
        }
    }
}

fn case_clause(term: &Term<'_>) -> Crash {
    Crash {
        error: "case_clause",
        reason: to_binary(term),
    }
}

/// Members sorted by name as bytes (Erlang's order of binaries).
fn sorted(mut members: Vec<(String, S)>) -> Vec<(String, S)> {
    members.sort_by(|(a, _), (b, _)| a.as_bytes().cmp(b.as_bytes()));
    members
}

fn merge_objects(
    values: Vec<(String, S)>,
    accs: Vec<(String, S)>,
) -> Result<Vec<(String, S)>, Stop> {
    let mut out = Vec::with_capacity(values.len().max(accs.len()));
    let mut values = values.into_iter().peekable();
    let mut accs = accs.into_iter().peekable();
    loop {
        let order = match (values.peek(), accs.peek()) {
            (None, None) => break,
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some((kv, _)), Some((ka, _))) => kv.as_bytes().cmp(ka.as_bytes()),
        };
        match order {
            Ordering::Less => out.extend(values.next()),
            Ordering::Greater => out.extend(accs.next()),
            Ordering::Equal => {
                let (name, v) = values.next().expect("peeked");
                let (_, a) = accs.next().expect("peeked");
                out.push((name, add(v, a)?));
            }
        }
    }
    Ok(out)
}

/// `sum_arrays(Acc, Value)`: element-wise while both have numbers.
fn add_arrays(acc: Vec<S>, value: Vec<S>) -> Result<S, Stop> {
    let mut out = Vec::with_capacity(acc.len().max(value.len()));
    let mut xs = acc.into_iter();
    let mut ys = value.into_iter();
    loop {
        match (xs.next(), ys.next()) {
            (None, None) => break,
            (Some(x), None) => {
                out.push(x);
                out.extend(xs);
                break;
            }
            (None, Some(y)) => {
                out.push(y);
                out.extend(ys);
                break;
            }
            (Some(S::Num(x)), Some(S::Num(y))) => out.push(S::Num(x.add(y)?)),
            (Some(x), Some(_)) => {
                // The cause is what is left of the accumulator's array.
                let mut rest = vec![x];
                rest.extend(xs);
                return Err(Stop::Invalid(S::List(rest)));
            }
        }
    }
    Ok(S::List(out))
}
