//! `_stats`: sum, count, min, max and sum of squares.
//!
//! The first value sets the shape of the result: a number gives one stats
//! object, an array one stats entry per element (nested arrays nest), and
//! an object is taken as a stats object already reduced (it must have the
//! numeric members `sum`, `count`, `min`, `max` and `sumsqr`; others are
//! ignored), which is also how partial results are re-reduced. Later
//! values must match that shape: numbers and stats objects combine with a
//! stats entry, arrays with an array of the same length, element by
//! element. Anything else is CouchDB's `invalid_value` (or, for arrays of
//! different lengths, its `function_clause` crash), which fails the view.

use serde_json::{Map, Value};

use super::erlang::{pretty, write, Crash, Num, Term};
use super::ReduceError;

const SHAPE_ERROR_PREFIX: &str =
    "The _stats function requires that map values be numbers or arrays of numbers, not '";
const MISSING_FIELD_PREFIX: &str = "user _stats input missing required field ";
const FIELDS: [&str; 5] = ["sum", "count", "min", "max", "sumsqr"];

#[derive(Clone, Copy, Debug)]
struct Stat {
    sum: Num,
    count: Num,
    min: Num,
    max: Num,
    sumsqr: Num,
}

enum Acc {
    One(Stat),
    Many(Vec<Acc>),
}

/// A value being combined: a JSON value, or a number or stats object
/// already turned into a stats entry.
enum Input<'a> {
    Json(&'a Value),
    Stat(Stat),
}

pub(crate) fn reduce<'a>(
    mut values: impl Iterator<Item = &'a Value>,
) -> Result<Value, ReduceError> {
    let Some(first) = values.next() else {
        let zero = Num::Int(0);
        return Ok(pack(&Acc::One(Stat {
            sum: zero,
            count: zero,
            min: zero,
            max: zero,
            sumsqr: zero,
        })));
    };
    let mut acc = initial(first)?;
    for value in values {
        acc = combine(Input::Json(value), acc)?;
    }
    Ok(pack(&acc))
}

fn initial(value: &Value) -> Result<Acc, ReduceError> {
    match value {
        Value::Array(items) => Ok(Acc::Many(
            items.iter().map(initial).collect::<Result<_, _>>()?,
        )),
        Value::Number(n) => Ok(Acc::One(of_number(Num::from_json(n))?)),
        Value::Object(members) => Ok(Acc::One(unpack(members)?)),
        other => Err(ReduceError::InvalidValue {
            reason: format!(
                "non-numeric _stats input: {}",
                write(&Term::from_json(other))
            ),
        }),
    }
}

fn of_number(n: Num) -> Result<Stat, Crash> {
    Ok(Stat {
        sum: n,
        count: Num::Int(1),
        min: n,
        max: n,
        sumsqr: n.mul(n)?,
    })
}

/// A stats object given as a value (or a partial being re-reduced).
fn unpack(members: &Map<String, Value>) -> Result<Stat, ReduceError> {
    let mut nums = [Num::Int(0); 5];
    for (slot, field) in nums.iter_mut().zip(FIELDS) {
        *slot = match members.get(field) {
            Some(Value::Number(n)) => Num::from_json(n),
            None => {
                let prefix = format!("{MISSING_FIELD_PREFIX}{field} (");
                let props = Term::proplist(members.iter());
                let printed = pretty(&props, prefix.len() + 1);
                return Err(ReduceError::InvalidValue {
                    reason: format!("{prefix}{})", String::from_utf8_lossy(&printed)),
                });
            }
            Some(other) => {
                return Err(ReduceError::InvalidValue {
                    reason: format!(
                        "non-numeric _stats input received for {field}: {}",
                        write(&Term::from_json(other))
                    ),
                });
            }
        };
    }
    let [sum, count, min, max, sumsqr] = nums;
    Ok(Stat {
        sum,
        count,
        min,
        max,
        sumsqr,
    })
}

fn combine(value: Input<'_>, acc: Acc) -> Result<Acc, ReduceError> {
    match (value, acc) {
        (Input::Json(Value::Array(items)), Acc::Many(accs)) => {
            // `lists:zipwith/3`: element by element, failing where one list
            // runs out before the other.
            let mut out = Vec::with_capacity(accs.len());
            let mut items = items.iter();
            let mut accs = accs.into_iter();
            loop {
                match (items.next(), accs.next()) {
                    (Some(item), Some(acc)) => out.push(combine(Input::Json(item), acc)?),
                    (None, None) => break,
                    _ => {
                        return Err(ReduceError::Crash {
                            error: "function_clause",
                            reason: "lists:zipwith/3: _stats arrays of different lengths".into(),
                        })
                    }
                }
            }
            Ok(Acc::Many(out))
        }
        (Input::Json(Value::Object(members)), acc) => combine(Input::Stat(unpack(members)?), acc),
        (Input::Json(Value::Number(n)), acc) => {
            combine(Input::Stat(of_number(Num::from_json(n))?), acc)
        }
        (Input::Stat(s), Acc::One(a)) => Ok(Acc::One(Stat {
            sum: s.sum.add(a.sum)?,
            count: s.count.add(a.count)?,
            min: s.min.min(a.min),
            max: s.max.max(a.max),
            sumsqr: s.sumsqr.add(a.sumsqr)?,
        })),
        (value, _) => {
            let term = match value {
                Input::Json(v) => Term::from_json(v),
                Input::Stat(s) => Term::Tuple(
                    [s.sum, s.count, s.min, s.max, s.sumsqr]
                        .into_iter()
                        .map(Term::Num)
                        .collect(),
                ),
            };
            let printed = pretty(&term, SHAPE_ERROR_PREFIX.len() + 1);
            Err(ReduceError::InvalidValue {
                reason: format!("{SHAPE_ERROR_PREFIX}{}'", String::from_utf8_lossy(&printed)),
            })
        }
    }
}

fn pack(acc: &Acc) -> Value {
    match acc {
        Acc::One(s) => {
            let mut obj = Map::new();
            for (field, n) in FIELDS
                .into_iter()
                .zip([s.sum, s.count, s.min, s.max, s.sumsqr])
            {
                obj.insert(field.into(), n.to_json());
            }
            Value::Object(obj)
        }
        Acc::Many(items) => Value::Array(items.iter().map(pack).collect()),
    }
}
