//! CouchDB view collation: the one ordering of JSON values that views, `_find`
//! range scans and Mango comparison operators share.
//!
//! This module owns the comparison of [`serde_json::Value`]s and of strings
//! according to <https://docs.couchdb.org/en/stable/ddocs/views/collation.html>:
//!
//! * types rank `null < false < true < numbers < strings < arrays < objects`;
//! * numbers compare by numeric value, exactly even where integers exceed the
//!   53-bit precision of an `f64`;
//! * strings compare with the Unicode Collation Algorithm using the ICU root
//!   locale at tertiary strength (what CouchDB's `couch_ejson_compare` does),
//!   so `"a" < "A" < "aa" < "b"`;
//! * arrays compare element by element, then the shorter one first;
//! * objects compare member by member in their stored order (key by
//!   collation, then value), then the one with fewer members first.
//!
//! Two functions expose that ordering:
//!
//! * [`collate_loose`] is CouchDB's comparison as-is. It is a *total
//!   preorder*: distinct values can compare `Equal` (`1` and `1.0`; the
//!   canonically equivalent strings `"\u{e9}"` and `"e\u{301}"`). Mango
//!   operators use it so that `{"$eq": 1}` matches `1.0` as in CouchDB.
//! * [`collate`] refines it into a *total order* for sorting keys: whenever
//!   `collate_loose` says `Equal` for values that are not identical, the first
//!   difference in traversal order breaks the tie (integers before floats of
//!   the same value, then raw code point order of strings and keys).
//!
//! **Invariants** (checked by the property tests below):
//! * `collate` is antisymmetric and transitive, and returns `Equal` only when
//!   the two values are equal (`a == b`); `collate_loose(a, b) != Equal`
//!   implies `collate(a, b) == collate_loose(a, b)`.
//! * Object member order is significant (it is in CouchDB), so two objects
//!   with the same members in a different order compare unequal even though
//!   `serde_json` considers them `==`.
//! * Comparisons never panic and never allocate. The ICU collator is built
//!   from data compiled into the binary, once per process, and is immutable
//!   afterwards, so results are deterministic.
//!
//! A third, [`compare_raw`], is not CouchDB's collation but the Erlang term
//! order CouchDB falls back to where it compares decoded JSON "raw" (Mango
//! on the top-level `_id`: `numbers < false < null < true < objects <
//! arrays < strings`).
//!
//! Recursion depth follows the nesting depth of the values; `serde_json`
//! refuses to parse documents nested deeper than 128 levels, which bounds it.

use std::cmp::Ordering;
use std::sync::OnceLock;

/// The collation data strings are ordered with (the `icu_collator`
/// release, whose data it embeds). Indexes name it in their signature, so
/// an upgrade that changes string order rebuilds them.
pub const COLLATOR_VERSION: &str = "icu4x-collator-2.4";

use icu_collator::options::CollatorOptions;
use icu_collator::{Collator, CollatorBorrowed, CollatorPreferences};
use serde_json::{Map, Number, Value};

/// Total order on JSON values (CouchDB collation plus a deterministic tie
/// break); see the module documentation.
pub fn collate(a: &Value, b: &Value) -> Ordering {
    let mut tie = Ordering::Equal;
    compare_values(a, b, &mut tie).then(tie)
}

/// CouchDB's own comparison: like [`collate`] but numbers compare by value
/// only and strings by ICU collation only, so distinct values may be `Equal`.
pub fn collate_loose(a: &Value, b: &Value) -> Ordering {
    let mut ignored_tie = Ordering::Equal;
    compare_values(a, b, &mut ignored_tie)
}

/// Total order on strings: ICU root collation, ties broken by code point.
pub fn collate_str(a: &str, b: &str) -> Ordering {
    let mut tie = Ordering::Equal;
    compare_strings(a, b, &mut tie).then(tie)
}

/// Erlang term order of decoded JSON, as CouchDB's `mango_json:cmp_raw`
/// compares (Mango uses it for the top-level `_id`): ranks
/// `numbers < false < null < true < objects < arrays < strings` (atoms
/// alphabetically, then tuples, lists and binaries); numbers by value (`1`
/// equals `1.0`); strings and object member names as raw UTF-8 bytes;
/// arrays element by element, objects member by member (name, then value),
/// then the shorter one first. A total preorder like [`collate_loose`].
pub fn compare_raw(a: &Value, b: &Value) -> Ordering {
    compare_raw_values(a, b, &mut Ordering::Equal)
}

/// Total order on the raw collation ([`compare_raw`], with numerically
/// equal numbers ordered as [`collate`] orders them: the first
/// integer/float difference in traversal order, integers first) — the
/// order of `"collation": "raw"` view keys.
pub fn collate_raw(a: &Value, b: &Value) -> Ordering {
    let mut tie = Ordering::Equal;
    compare_raw_values(a, b, &mut tie).then(tie)
}

/// [`compare_raw`], recording the first strict difference between equal
/// values in `tie` (as [`compare_values`] does).
fn compare_raw_values(a: &Value, b: &Value, tie: &mut Ordering) -> Ordering {
    fn rank(v: &Value) -> u8 {
        match v {
            Value::Number(_) => 0,
            Value::Bool(false) => 1,
            Value::Null => 2,
            Value::Bool(true) => 3,
            Value::Object(_) => 4,
            Value::Array(_) => 5,
            Value::String(_) => 6,
        }
    }
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => compare_numbers(x, y, tie),
        (Value::String(x), Value::String(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Value::Array(x), Value::Array(y)) => {
            for (p, q) in x.iter().zip(y) {
                let ord = compare_raw_values(p, q, tie);
                if ord.is_ne() {
                    return ord;
                }
            }
            x.len().cmp(&y.len())
        }
        (Value::Object(x), Value::Object(y)) => {
            for ((kx, vx), (ky, vy)) in x.iter().zip(y) {
                let ord = kx
                    .as_bytes()
                    .cmp(ky.as_bytes())
                    .then_with(|| compare_raw_values(vx, vy, tie));
                if ord.is_ne() {
                    return ord;
                }
            }
            x.len().cmp(&y.len())
        }
        _ => rank(a).cmp(&rank(b)),
    }
}

/// The shared ICU root collator. Building it resolves locale data, so it is
/// done once; the collator itself is immutable and `Sync`. The index key
/// encoding (settee-index) takes its sort keys from this same collator, so
/// the two orders cannot drift apart.
pub fn collator() -> &'static CollatorBorrowed<'static> {
    static COLLATOR: OnceLock<CollatorBorrowed<'static>> = OnceLock::new();
    COLLATOR.get_or_init(|| {
        // Default preferences select the root locale and default options are
        // tertiary strength, matching CouchDB's `ucol_open("")`. The data is
        // compiled in, so failure would be a build defect, not an input error.
        Collator::try_new(CollatorPreferences::default(), CollatorOptions::default())
            .expect("compiled-in ICU root collation data is always available")
    })
}

/// Compares `a` and `b` with CouchDB's (loose) collation and returns that
/// result. While everything compared so far is loosely equal, the first
/// strict difference found is recorded in `tie` (if `tie` is still `Equal`),
/// so that `result.then(tie)` is the total order of [`collate`] in one pass.
fn compare_values(a: &Value, b: &Value, tie: &mut Ordering) -> Ordering {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => compare_numbers(x, y, tie),
        (Value::String(x), Value::String(y)) => compare_strings(x, y, tie),
        (Value::Array(x), Value::Array(y)) => compare_arrays(x, y, tie),
        (Value::Object(x), Value::Object(y)) => compare_objects(x, y, tie),
        // Same rank for the remaining pairs means both are null or both are
        // booleans, where the rank order is already the full order.
        _ => type_rank(a).cmp(&type_rank(b)),
    }
}

/// Position of a value's type in CouchDB's collation; `false` and `true` get
/// their own ranks because they are ordered as distinct "types".
fn type_rank(v: &Value) -> u8 {
    match v {
        Value::Null => 0,
        Value::Bool(false) => 1,
        Value::Bool(true) => 2,
        Value::Number(_) => 3,
        Value::String(_) => 4,
        Value::Array(_) => 5,
        Value::Object(_) => 6,
    }
}

fn record_tie(tie: &mut Ordering, strict: Ordering) {
    if *tie == Ordering::Equal {
        *tie = strict;
    }
}

fn compare_strings(a: &str, b: &str, tie: &mut Ordering) -> Ordering {
    // Byte-identical strings are common (repeated view keys, `$eq` hits) and
    // need no trip through the collator.
    if a == b {
        return Ordering::Equal;
    }
    let loose = collator().compare(a, b);
    if loose == Ordering::Equal {
        // UTF-8 byte order is code point order.
        record_tie(tie, a.cmp(b));
    }
    loose
}

fn compare_arrays(a: &[Value], b: &[Value], tie: &mut Ordering) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        let ord = compare_values(x, y, tie);
        if ord != Ordering::Equal {
            return ord;
        }
    }
    a.len().cmp(&b.len())
}

fn compare_objects(a: &Map<String, Value>, b: &Map<String, Value>, tie: &mut Ordering) -> Ordering {
    for ((ka, va), (kb, vb)) in a.iter().zip(b) {
        let ord = compare_strings(ka, kb, tie).then_with(|| compare_values(va, vb, tie));
        if ord != Ordering::Equal {
            return ord;
        }
    }
    a.len().cmp(&b.len())
}

/// A JSON number in a form that can be compared exactly (shared with the
/// index key encoding, which must order numbers the same way).
#[derive(Clone, Copy, Debug)]
pub enum Num {
    /// Every `u64` and `i64` fits, so integers never lose precision.
    Int(i128),
    Float(f64),
}

/// The exact form of a JSON number.
pub fn classify(n: &Number) -> Num {
    if let Some(u) = n.as_u64() {
        Num::Int(i128::from(u))
    } else if let Some(i) = n.as_i64() {
        Num::Int(i128::from(i))
    } else {
        // Without `arbitrary_precision` every non-integer is an f64; NaN is a
        // defensive fallback that `serde_json` never actually produces.
        Num::Float(n.as_f64().unwrap_or(f64::NAN))
    }
}

fn compare_numbers(a: &Number, b: &Number, tie: &mut Ordering) -> Ordering {
    let (x, y) = (classify(a), classify(b));
    let loose = match (x, y) {
        (Num::Int(i), Num::Int(j)) => i.cmp(&j),
        (Num::Float(f), Num::Float(g)) => compare_floats(f, g),
        (Num::Int(i), Num::Float(f)) => compare_int_float(i, f),
        (Num::Float(f), Num::Int(i)) => compare_int_float(i, f).reverse(),
    };
    if loose == Ordering::Equal {
        // Same value, different representation (`1` vs `1.0`): serde_json
        // considers them different values, so the order must separate them.
        record_tie(tie, is_float(x).cmp(&is_float(y)));
    }
    loose
}

fn is_float(n: Num) -> bool {
    matches!(n, Num::Float(_))
}

/// `-0.0` and `0.0` are equal, as they are for `serde_json`'s `==`.
fn compare_floats(f: f64, g: f64) -> Ordering {
    f.partial_cmp(&g).unwrap_or_else(|| f.total_cmp(&g))
}

/// Exact comparison of an integer with a float: casting the integer to f64
/// would round above 2^53 and could report `Equal` for different numbers.
fn compare_int_float(i: i128, f: f64) -> Ordering {
    if f.is_nan() {
        // Unreachable with serde_json; keep NaN above every integer so the
        // order stays total.
        return Ordering::Less;
    }
    let whole = f.trunc();
    // `as` saturates, and saturated values are far outside the range of JSON
    // integers (|i| < 2^64), so the comparison below stays correct.
    let whole_int = whole as i128;
    i.cmp(&whole_int).then_with(|| {
        // Same integer part: the fractional part decides.
        0.0_f64.partial_cmp(&(f - whole)).unwrap_or(Ordering::Equal)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// The example from the CouchDB collation documentation, in order.
    fn couchdb_doc_example() -> Vec<Value> {
        vec![
            json!(null),
            json!(false),
            json!(true),
            json!(1),
            json!(2),
            json!(3.0),
            json!(4),
            json!("a"),
            json!("A"),
            json!("aa"),
            json!("b"),
            json!("B"),
            json!("ba"),
            json!("bb"),
            json!(["a"]),
            json!(["b"]),
            json!(["b", "c"]),
            json!(["b", "c", "a"]),
            json!(["b", "d"]),
            json!(["b", "d", "e"]),
            json!({"a": 1}),
            json!({"a": 2}),
            json!({"b": 1}),
            json!({"b": 2}),
            json!({"b": 2, "a": 1}),
            json!({"b": 2, "c": 2}),
        ]
    }

    #[test]
    fn couchdb_documentation_example_sorts_in_order() {
        let expected = couchdb_doc_example();
        let mut shuffled = expected.clone();
        shuffled.reverse();
        shuffled.swap(3, 17);
        shuffled.swap(0, 9);
        shuffled.sort_by(collate);
        assert_eq!(shuffled, expected);
    }

    #[test]
    fn couchdb_documentation_example_is_strictly_increasing() {
        let values = couchdb_doc_example();
        for pair in values.windows(2) {
            assert_eq!(
                collate(&pair[0], &pair[1]),
                Ordering::Less,
                "{} < {}",
                pair[0],
                pair[1]
            );
            assert_eq!(collate(&pair[1], &pair[0]), Ordering::Greater);
        }
    }

    #[test]
    fn strings_use_uca_not_code_points() {
        // Code point order would put "B" before "a".
        assert_eq!(collate_str("a", "B"), Ordering::Less);
        assert_eq!(collate_str("b", "A"), Ordering::Greater);
        // Accents are secondary differences: "resume" < "résumé" < "resumes".
        assert_eq!(collate_str("resume", "r\u{e9}sum\u{e9}"), Ordering::Less);
        assert_eq!(collate_str("r\u{e9}sum\u{e9}", "resumes"), Ordering::Less);
        assert_eq!(collate_str("", "a"), Ordering::Less);
        assert_eq!(collate_str("same", "same"), Ordering::Equal);
    }

    #[test]
    fn canonically_equivalent_strings_are_loosely_equal_but_strictly_ordered() {
        let nfc = json!("\u{e9}");
        let nfd = json!("e\u{301}");
        assert_eq!(collate_loose(&nfc, &nfd), Ordering::Equal);
        // Tie broken by code point: 'e' (U+0065) < 'é' (U+00E9).
        assert_eq!(collate(&nfd, &nfc), Ordering::Less);
        assert_eq!(collate(&nfc, &nfd), Ordering::Greater);
        assert_eq!(collate_str("e\u{301}", "\u{e9}"), Ordering::Less);
    }

    #[test]
    fn ignorable_characters_do_not_make_strings_equal() {
        // U+0000 is completely ignorable in the root collation.
        assert_eq!(
            collate_loose(&json!("a\u{0}"), &json!("a")),
            Ordering::Equal
        );
        assert_eq!(collate(&json!("a"), &json!("a\u{0}")), Ordering::Less);
    }

    #[test]
    fn numbers_compare_by_value_across_representations() {
        assert_eq!(collate(&json!(-1), &json!(0.5)), Ordering::Less);
        assert_eq!(collate(&json!(2.5), &json!(2)), Ordering::Greater);
        assert_eq!(collate(&json!(-2.5), &json!(-2)), Ordering::Less);
        assert_eq!(collate(&json!(-2.5), &json!(-3)), Ordering::Greater);
        assert_eq!(collate(&json!(1e300), &json!(u64::MAX)), Ordering::Greater);
        assert_eq!(collate(&json!(-1e300), &json!(i64::MIN)), Ordering::Less);
        assert_eq!(collate(&json!(i64::MIN), &json!(u64::MAX)), Ordering::Less);
        assert_eq!(collate(&json!(-0.0), &json!(0.0)), Ordering::Equal);
    }

    #[test]
    fn large_integers_are_compared_exactly() {
        // 2^53 + 1 is not representable as f64; a float cast would say Equal.
        let big = json!(9_007_199_254_740_993_u64);
        let big_float = json!(9_007_199_254_740_992.0_f64);
        assert_eq!(collate(&big, &big_float), Ordering::Greater);
        assert_eq!(
            collate(&json!(u64::MAX), &json!(u64::MAX - 1)),
            Ordering::Greater
        );
        assert_eq!(
            collate(&json!(i64::MIN), &json!(i64::MIN + 1)),
            Ordering::Less
        );
    }

    #[test]
    fn integer_and_float_of_same_value_are_loosely_equal() {
        assert_eq!(collate_loose(&json!(3), &json!(3.0)), Ordering::Equal);
        assert_eq!(collate(&json!(3), &json!(3.0)), Ordering::Less);
        assert_eq!(collate(&json!(3.0), &json!(3)), Ordering::Greater);
        assert_eq!(
            collate(&json!([3.0, "a"]), &json!([3, "b"])),
            Ordering::Less
        );
    }

    #[test]
    fn loose_difference_wins_over_an_earlier_tie() {
        // The first elements tie only strictly; the second decides.
        let a = json!(["\u{e9}", "a"]);
        let b = json!(["e\u{301}", "b"]);
        assert_eq!(collate(&a, &b), Ordering::Less);
        assert_eq!(collate(&b, &a), Ordering::Greater);
    }

    #[test]
    fn object_member_order_is_significant() {
        let ab = json!({"a": 1, "b": 2});
        let ba = json!({"b": 2, "a": 1});
        assert_eq!(collate(&ab, &ba), Ordering::Less);
        assert_eq!(collate(&ab, &ab.clone()), Ordering::Equal);
    }

    #[test]
    fn empty_containers_sort_first_within_their_type() {
        assert_eq!(collate(&json!([]), &json!([null])), Ordering::Less);
        assert_eq!(collate(&json!({}), &json!({"": null})), Ordering::Less);
        assert_eq!(collate(&json!("zzz"), &json!([])), Ordering::Less);
        assert_eq!(collate(&json!([{}]), &json!({})), Ordering::Less);
    }

    #[test]
    fn raw_order_is_erlang_term_order() {
        // Recorded from CouchDB 3.4.3: `{"_id": {"$gt": X}}` matches string
        // ids for every X below, `{"_id": {"$lt": X}}` for none.
        let ascending = [
            json!(-1),
            json!(1),
            json!(1.5),
            json!(false),
            json!(null),
            json!(true),
            json!({}),
            json!({"a": 1}),
            json!({"a": 2}),
            json!({"b": 0}),
            json!({"b": 0, "a": 0}),
            json!([]),
            json!([1]),
            json!([1, 0]),
            json!(["a"]),
            json!(""),
            json!("B"),
            json!("a"),
            json!("\u{e9}"),
        ];
        for (i, x) in ascending.iter().enumerate() {
            for (j, y) in ascending.iter().enumerate() {
                assert_eq!(compare_raw(x, y), i.cmp(&j), "{x} vs {y}");
            }
        }
        assert_eq!(compare_raw(&json!(1), &json!(1.0)), Ordering::Equal);
        assert_eq!(compare_raw(&json!([1]), &json!([1.0])), Ordering::Equal);
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        // Small alphabets make ties, case and accent differences likely.
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-3i64..3).prop_map(Value::from),
            prop::sample::select(vec![-1.0, -0.0, 0.0, 0.5, 1.0, 2.0, 1e20]).prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            "[aAbB\u{e9}\u{301}\u{0}e]{0,3}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec(("[abA]{0,2}", inner), 0..4)
                    .prop_map(|members| Value::Object(members.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn collate_is_antisymmetric_and_equal_only_for_equal_values(a in arb_json(), b in arb_json()) {
            let ab = collate(&a, &b);
            prop_assert_eq!(ab, collate(&b, &a).reverse());
            if ab == Ordering::Equal {
                prop_assert_eq!(&a, &b);
            }
            prop_assert_eq!(collate(&a, &a), Ordering::Equal);
        }

        #[test]
        fn collate_refines_loose_collation(a in arb_json(), b in arb_json()) {
            let loose = collate_loose(&a, &b);
            prop_assert_eq!(loose, collate_loose(&b, &a).reverse());
            if loose != Ordering::Equal {
                prop_assert_eq!(collate(&a, &b), loose);
            }
        }

        #[test]
        fn collate_is_transitive(a in arb_json(), b in arb_json(), c in arb_json()) {
            let values = [a, b, c];
            for (i, j, k) in [(0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0)] {
                let (x, y, z) = (&values[i], &values[j], &values[k]);
                let (xy, yz, xz) = (collate(x, y), collate(y, z), collate(x, z));
                if xy != Ordering::Greater && yz != Ordering::Greater {
                    prop_assert_ne!(xz, Ordering::Greater);
                }
                if xy == Ordering::Less && yz != Ordering::Greater {
                    prop_assert_eq!(xz, Ordering::Less);
                }
                if xy == Ordering::Equal && yz == Ordering::Equal {
                    prop_assert_eq!(xz, Ordering::Equal);
                }
            }
        }

        #[test]
        fn collate_str_matches_collate_on_strings(a in "[aAbB\u{e9}\u{301}e]{0,4}", b in "[aAbB\u{e9}\u{301}e]{0,4}") {
            let strings = collate(&Value::String(a.clone()), &Value::String(b.clone()));
            prop_assert_eq!(collate_str(&a, &b), strings);
            prop_assert_eq!(strings == Ordering::Equal, a == b);
        }
    }
}
