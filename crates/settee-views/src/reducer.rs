//! Running a view's reduce function (built-in or JavaScript) over rows and
//! over partial reductions, in the order CouchDB feeds them.
//!
//! Invariant: a partial reduction of a run of rows, rereduced with the
//! partials of the neighbouring runs, gives the reduction of all of them
//! (for built-ins exactly; for JavaScript, as far as the function honours
//! CouchDB's rereduce contract), so partials may be kept per block of rows
//! and combined at query time.

use serde_json::Value;
use settee_index::reduce::{Partial, Row};
use settee_js::JsEngine;

use crate::error::Result;
use crate::spec::{IndexSpec, Reduce};

pub(crate) struct Reducer<'a> {
    pub reduce: Reduce,
    pub js: &'a JsEngine,
    pub spec: &'a IndexSpec,
    pub view_name: &'a str,
}

impl Reducer<'_> {
    /// Reduces rows given in index order. Like CouchDB's, JavaScript
    /// reduces and `_sum` see them in reverse (which decides float sums
    /// and which bad value `_sum` reports) and `_stats` in order (which
    /// decides its error message); recorded from CouchDB 3.4.3.
    pub fn reduce_rows(&self, rows: &[(Value, String, Value)]) -> Result<Partial> {
        let reversed: Vec<&(Value, String, Value)> =
            if self.reduce == Reduce::Builtin(settee_index::reduce::Builtin::Stats) {
                rows.iter().collect()
            } else {
                rows.iter().rev().collect()
            };
        match self.reduce {
            Reduce::Builtin(b) => {
                let rows: Vec<Row<'_>> = reversed
                    .iter()
                    .map(|(k, id, v)| Row {
                        key: k,
                        doc_id: id,
                        value: v,
                    })
                    .collect();
                Ok(b.reduce(&rows)?)
            }
            Reduce::Js => {
                let kvs: Vec<(Value, Value)> = reversed
                    .iter()
                    .map(|(k, id, v)| {
                        (
                            Value::Array(vec![k.clone(), Value::String(id.clone())]),
                            v.clone(),
                        )
                    })
                    .collect();
                Ok(Partial::Json(self.js.reduce(
                    &self.spec.js,
                    self.view_name,
                    &kvs,
                )?))
            }
        }
    }

    /// The value of a run of partials (in index order): the last rereduce.
    pub fn finish(&self, partials: Vec<Partial>) -> Result<Value> {
        match self.reduce {
            Reduce::Builtin(b) => {
                let p = if partials.len() == 1 {
                    partials.into_iter().next().expect("one partial")
                } else {
                    b.rereduce(&partials)?
                };
                Ok(b.finalize(&p)?)
            }
            Reduce::Js => {
                // CouchDB always ends with a rereduce, even of one value.
                let values: Vec<Value> = partials
                    .into_iter()
                    .map(|p| match p {
                        Partial::Json(v) => v,
                        Partial::Sketch(_) => Value::Null,
                    })
                    .collect();
                Ok(self.js.rereduce(&self.spec.js, self.view_name, &values)?)
            }
        }
    }
}
