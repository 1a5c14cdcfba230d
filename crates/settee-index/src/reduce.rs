//! CouchDB's built-in reduce functions, natively: `_count`, `_sum`,
//! `_stats` and `_approx_count_distinct`.
//!
//! This module owns their results and errors and the representation of
//! partial reductions ([`Partial`]), which an index stores for ranges of
//! rows and combines later: `rereduce` of the partials of consecutive runs
//! of rows equals `reduce` of all the rows (property-tested), so partials
//! can be stored and combined in any grouping. Runs must not be empty: the
//! reduction of no rows is CouchDB's (`0`, or a `_stats` object of zeros),
//! which is not a neutral element (its `min` of 0 would count), and CouchDB
//! never reduces an empty run either. `_count`, `_stats` and
//! `_approx_count_distinct` are also commutative; `_sum` is commutative
//! over numbers, arrays and objects of numbers, while the outcome of
//! *invalid* mixtures (which error CouchDB reports) depends on the order
//! of the values, as it does in CouchDB.
//!
//! # Fidelity to CouchDB 3.4.3
//!
//! Results and error texts follow what CouchDB 3.4.3 answers; the tests
//! hold the answers recorded from it. Deliberate and known differences:
//!
//! * **Fold order.** `reduce` folds rows in the order given (key order)
//!   and `rereduce` folds partials in the order given. CouchDB folds in key
//!   order when it writes its B-tree, but re-reduces small leaves at query
//!   time in *reverse* key order, so for order-dependent invalid input
//!   (`_sum` over `[{"a": 1}, "x"]` and the like) the error CouchDB shows
//!   depends on its B-tree shape; no single order matches it everywhere.
//! * **Big integers.** Erlang integers are unbounded; here they are exact
//!   up to `i128` and results beyond 64 bits become the nearest float
//!   (`serde_json` has no wider numbers). JavaScript emits integers beyond
//!   2^53 rounded anyway.
//! * **Crashes.** Where CouchDB's reducer crashes (`case_clause`,
//!   `function_clause`, `badarith`), CouchDB answers 500 with an Erlang
//!   stack trace as the reason; [`ReduceError::Crash`] carries the error
//!   name and the offending term instead.
//! * **`_approx_count_distinct`** is a HyperLogLog like CouchDB's (2^11
//!   registers, standard error about 2.3 %) but with its own hash
//!   (XXH3-64 of the key's JSON text) and estimator (Ertl's improved
//!   estimator, which needs no bias tables), so estimates differ from
//!   CouchDB's within that error; both are exact for small counts.
//!   Estimates are deterministic.
//! * **`reduce_limit`.** `_sum` applies CouchDB's default overflow check
//!   (an error object once a result's external term size is over 4906
//!   bytes and more than half its input's) to each `reduce` and `rereduce`
//!   call; the sizes it reports depend on how rows were grouped into
//!   calls, as in CouchDB.

use serde_json::Value;
use xxhash_rust::xxh3::xxh3_64;

mod erlang;
mod hll;
mod stats;
mod sum;
#[cfg(test)]
mod tests;

pub use hll::{HyperLogLog, HLL_PRECISION_BITS, HLL_REGISTERS};

/// One of CouchDB's built-in reduce functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Builtin {
    Count,
    Sum,
    Stats,
    ApproxCountDistinct,
}

/// A design document names a reduce function CouchDB does not have.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a supported reduce function.")]
pub struct UnknownBuiltin(pub String);

impl Builtin {
    /// The builtin a view's `"reduce"` source names. Like CouchDB, only
    /// the prefix counts (`"_sum_of_all"` is `_sum`). Sources that do not
    /// start with `_` are JavaScript functions, not builtins; the error's
    /// message is CouchDB's `invalid_design_doc` reason.
    pub fn from_source(source: &str) -> Result<Builtin, UnknownBuiltin> {
        const NAMES: [(&str, Builtin); 4] = [
            ("_count", Builtin::Count),
            ("_sum", Builtin::Sum),
            ("_stats", Builtin::Stats),
            ("_approx_count_distinct", Builtin::ApproxCountDistinct),
        ];
        NAMES
            .iter()
            .find(|(name, _)| source.starts_with(name))
            .map(|(_, builtin)| *builtin)
            .ok_or_else(|| UnknownBuiltin(source.to_string()))
    }

    pub fn name(self) -> &'static str {
        match self {
            Builtin::Count => "_count",
            Builtin::Sum => "_sum",
            Builtin::Stats => "_stats",
            Builtin::ApproxCountDistinct => "_approx_count_distinct",
        }
    }

    /// Reduces view rows into a partial reduction.
    ///
    /// A `_sum` that CouchDB reports as a value (`{"error":
    /// "builtin_reduce_error", ...}`, returned with HTTP 200) is an `Ok`
    /// partial holding that object; it stays the result of every rereduce
    /// it takes part in. `Err` is what CouchDB reports as a failure of the
    /// whole view (HTTP 500); for `_stats` CouchDB then cannot build the
    /// index at all, so even `reduce=false` queries fail.
    pub fn reduce(self, rows: &[Row<'_>]) -> Result<Partial, ReduceError> {
        match self {
            Builtin::Count => Ok(Partial::Json(Value::from(rows.len() as u64))),
            Builtin::Sum => sum::reduce(rows).map(Partial::Json),
            Builtin::Stats => stats::reduce(rows.iter().map(|row| row.value)).map(Partial::Json),
            Builtin::ApproxCountDistinct => {
                let mut sketch = HyperLogLog::new();
                for row in rows {
                    sketch.insert_hash(key_hash(row.key));
                }
                Ok(Partial::Sketch(sketch))
            }
        }
    }

    /// Combines partial reductions of consecutive runs of rows, in order.
    pub fn rereduce(self, partials: &[Partial]) -> Result<Partial, ReduceError> {
        match self {
            Builtin::Count => {
                let values = self.json_partials(partials)?;
                sum::fold(values.iter().copied()).map(Partial::Json)
            }
            Builtin::Sum => sum::rereduce(&self.json_partials(partials)?).map(Partial::Json),
            Builtin::Stats => {
                stats::reduce(self.json_partials(partials)?.into_iter()).map(Partial::Json)
            }
            Builtin::ApproxCountDistinct => {
                let mut union = HyperLogLog::new();
                for partial in partials {
                    match partial {
                        Partial::Sketch(sketch) => union.union(sketch),
                        Partial::Json(_) => return Err(ReduceError::WrongPartial(self.name())),
                    }
                }
                Ok(Partial::Sketch(union))
            }
        }
    }

    /// The value a query returns for a partial reduction.
    pub fn finalize(self, partial: &Partial) -> Result<Value, ReduceError> {
        match (self, partial) {
            (Builtin::ApproxCountDistinct, Partial::Sketch(sketch)) => {
                Ok(Value::from(sketch.estimate().round() as u64))
            }
            (Builtin::ApproxCountDistinct, Partial::Json(_)) | (_, Partial::Sketch(_)) => {
                Err(ReduceError::WrongPartial(self.name()))
            }
            (_, Partial::Json(value)) => Ok(value.clone()),
        }
    }

    fn json_partials(self, partials: &[Partial]) -> Result<Vec<&Value>, ReduceError> {
        partials
            .iter()
            .map(|partial| match partial {
                Partial::Json(value) => Ok(value),
                Partial::Sketch(_) => Err(ReduceError::WrongPartial(self.name())),
            })
            .collect()
    }
}

/// A view row as the reducers see it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Row<'a> {
    pub key: &'a Value,
    /// Only `_sum`'s overflow check looks at it (the size of CouchDB's
    /// reduce input includes the doc ids).
    pub doc_id: &'a str,
    pub value: &'a Value,
}

/// The key hash `_approx_count_distinct` counts: keys are distinct when
/// their JSON text is (so `1` and `1.0` are two keys, as they are two
/// Erlang terms in CouchDB).
fn key_hash(key: &Value) -> u64 {
    let text = serde_json::to_vec(key).expect("serializing a JSON value cannot fail");
    xxh3_64(&text)
}

/// A partial reduction, to be stored and combined by `rereduce`.
#[derive(Clone, Debug, PartialEq)]
pub enum Partial {
    /// `_count`, `_sum` and `_stats`: the reduction as CouchDB keeps and
    /// returns it (a count; a sum or `builtin_reduce_error` object; a
    /// stats object or array of them).
    Json(Value),
    /// `_approx_count_distinct`.
    Sketch(HyperLogLog),
}

/// Storage format of a partial: a tag byte, then the body.
const PARTIAL_JSON: u8 = 0x01;
const PARTIAL_SKETCH_DENSE: u8 = 0x02;
const PARTIAL_SKETCH_SPARSE: u8 = 0x03;

/// Stored bytes that are not a partial reduction.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed stored partial reduction: {0}")]
pub struct PartialDecodeError(&'static str);

impl Partial {
    /// The stored form: `01` + JSON text, or `02` + the 2048 registers, or
    /// `03` + (index u16 BE, register u8) per non-zero register, whichever
    /// of the two sketch forms is shorter.
    pub fn to_bytes(&self) -> Vec<u8> {
        match self {
            Partial::Json(value) => {
                let mut out = vec![PARTIAL_JSON];
                serde_json::to_writer(&mut out, value)
                    .expect("serializing a JSON value cannot fail");
                out
            }
            Partial::Sketch(sketch) => {
                let registers = sketch.registers();
                let used = registers.iter().filter(|&&r| r != 0).count();
                if used * 3 < registers.len() {
                    let mut out = Vec::with_capacity(1 + used * 3);
                    out.push(PARTIAL_SKETCH_SPARSE);
                    for (index, &r) in registers.iter().enumerate().filter(|(_, &r)| r != 0) {
                        out.extend_from_slice(&(index as u16).to_be_bytes());
                        out.push(r);
                    }
                    out
                } else {
                    let mut out = Vec::with_capacity(1 + registers.len());
                    out.push(PARTIAL_SKETCH_DENSE);
                    out.extend_from_slice(registers);
                    out
                }
            }
        }
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Partial, PartialDecodeError> {
        let (&tag, body) = bytes.split_first().ok_or(PartialDecodeError("empty"))?;
        match tag {
            PARTIAL_JSON => serde_json::from_slice(body)
                .map(Partial::Json)
                .map_err(|_| PartialDecodeError("invalid JSON")),
            PARTIAL_SKETCH_DENSE => {
                let registers: &[u8; HLL_REGISTERS] = body
                    .try_into()
                    .map_err(|_| PartialDecodeError("sketch of wrong size"))?;
                HyperLogLog::from_registers(*registers)
                    .map(Partial::Sketch)
                    .ok_or(PartialDecodeError("register out of range"))
            }
            PARTIAL_SKETCH_SPARSE => {
                if body.len() % 3 != 0 {
                    return Err(PartialDecodeError("sparse sketch of wrong size"));
                }
                let mut registers = [0u8; HLL_REGISTERS];
                let mut last: Option<usize> = None;
                for entry in body.chunks_exact(3) {
                    let index = usize::from(u16::from_be_bytes([entry[0], entry[1]]));
                    if index >= HLL_REGISTERS || last.is_some_and(|l| index <= l) || entry[2] == 0 {
                        return Err(PartialDecodeError("sparse sketch entries out of order"));
                    }
                    registers[index] = entry[2];
                    last = Some(index);
                }
                HyperLogLog::from_registers(registers)
                    .map(Partial::Sketch)
                    .ok_or(PartialDecodeError("register out of range"))
            }
            _ => Err(PartialDecodeError("unknown tag")),
        }
    }
}

/// A reduction CouchDB fails with HTTP 500 `{"error": .., "reason": ..}`.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ReduceError {
    /// `{"error": "invalid_value", "reason": reason}` (`_stats` input that
    /// is not numbers, arrays of numbers or stats objects).
    #[error("invalid_value: {reason}")]
    InvalidValue { reason: String },
    /// An Erlang runtime error in CouchDB's reducer: `error` is its name
    /// (`case_clause`, `function_clause`, `badarith`); `reason` is the term
    /// CouchDB reports for it at query time where that is known (for
    /// `function_clause` and `badarith` CouchDB prints a stack trace).
    #[error("{error}: {reason}")]
    Crash { error: &'static str, reason: String },
    /// A partial reduction made by a different builtin (a caller bug).
    #[error("a partial reduction of another builtin was given to {0}")]
    WrongPartial(&'static str),
}

impl ReduceError {
    /// CouchDB's `error` field for this failure.
    pub fn couch_error(&self) -> &str {
        match self {
            ReduceError::InvalidValue { .. } => "invalid_value",
            ReduceError::Crash { error, .. } => error,
            ReduceError::WrongPartial(_) => "unknown_error",
        }
    }

    /// CouchDB's `reason` field for this failure.
    pub fn couch_reason(&self) -> String {
        match self {
            ReduceError::InvalidValue { reason } | ReduceError::Crash { reason, .. } => {
                reason.clone()
            }
            ReduceError::WrongPartial(_) => self.to_string(),
        }
    }
}

impl From<erlang::Crash> for ReduceError {
    fn from(crash: erlang::Crash) -> Self {
        ReduceError::Crash {
            error: crash.error,
            reason: crash.reason,
        }
    }
}
