use proptest::prelude::*;
use serde_json::{json, Value};

use super::erlang::{external_size, format_float, pretty, to_binary, write, Term};
use super::*;
use crate::keycodec::{encode_row_key, group_key, Collation, GroupLevel};

fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// Rows `[case, doc_id] -> value` with doc ids `case-000`, `case-001`, ...
/// as the recording views emitted them.
fn case_rows(case: &str, values: &[Value]) -> (Vec<Value>, Vec<String>) {
    let ids: Vec<String> = (0..values.len())
        .map(|i| format!("{case}-{i:03}"))
        .collect();
    let keys = ids.iter().map(|id| json!([case, id])).collect();
    (keys, ids)
}

fn rows<'a>(keys: &'a [Value], ids: &'a [String], values: &'a [Value]) -> Vec<Row<'a>> {
    keys.iter()
        .zip(ids)
        .zip(values)
        .map(|((key, doc_id), value)| Row { key, doc_id, value })
        .collect()
}

/// What CouchDB 3.4.3 answers for a reduce over a small view (one shard,
/// one B-tree leaf): it reduces the rows in key order when it writes the
/// index (a failure there fails the view), reduces them again in *reverse*
/// key order at query time, and the coordinator rereduces that once more.
fn couchdb_small_view(builtin: Builtin, rows: &[Row<'_>]) -> Result<Value, ReduceError> {
    builtin.reduce(rows)?;
    let reversed: Vec<Row<'_>> = rows.iter().rev().copied().collect();
    let leaf = builtin.reduce(&reversed)?;
    let result = builtin.rereduce(&[leaf])?;
    builtin.finalize(&result)
}

enum Want {
    /// HTTP 200 with this value (JSON text).
    Ok(&'static str),
    /// HTTP 500 `invalid_value` with this reason (a JSON string).
    Invalid(&'static str),
    /// HTTP 500 with this error and, where CouchDB printed the term rather
    /// than a stack trace, this reason (a JSON string).
    Crash(&'static str, Option<&'static str>),
    NotRecorded,
}

struct Recorded {
    case: &'static str,
    /// The values as CouchDB's reducer received them from the JavaScript
    /// view server (so `1.0` arrived as `1` and `-0.0` as `0`).
    values: &'static str,
    sum: Want,
    stats: Want,
    count: Want,
}

fn check(case: &str, builtin: Builtin, got: Result<Value, ReduceError>, want: &Want) {
    match want {
        Want::NotRecorded => {}
        Want::Ok(text) => {
            let got = got.unwrap_or_else(|e| panic!("{case} {builtin:?}: {e}"));
            // Text comparison: member order matters (CouchDB sorts summed
            // objects), which `Value`'s `==` would not check.
            assert_eq!(
                got.to_string(),
                parse(text).to_string(),
                "{case} {builtin:?}"
            );
        }
        Want::Invalid(reason) => {
            let reason: String = serde_json::from_str(reason).unwrap();
            assert_eq!(
                got,
                Err(ReduceError::InvalidValue { reason }),
                "{case} {builtin:?}"
            );
        }
        Want::Crash(error, reason) => {
            let err = got.expect_err(case);
            assert_eq!(err.couch_error(), *error, "{case} {builtin:?}: {err}");
            if let Some(reason) = reason {
                let reason: String = serde_json::from_str(reason).unwrap();
                assert_eq!(err.couch_reason(), reason, "{case} {builtin:?}");
            }
        }
    }
}

#[test]
fn builtins_answer_what_couchdb_answered() {
    for rec in RECORDED {
        let values: Vec<Value> = match parse(rec.values) {
            Value::Array(items) => items,
            _ => unreachable!(),
        };
        let (keys, ids) = case_rows(rec.case, &values);
        let rows = rows(&keys, &ids, &values);
        check(
            rec.case,
            Builtin::Sum,
            couchdb_small_view(Builtin::Sum, &rows),
            &rec.sum,
        );
        check(
            rec.case,
            Builtin::Stats,
            couchdb_small_view(Builtin::Stats, &rows),
            &rec.stats,
        );
        check(
            rec.case,
            Builtin::Count,
            couchdb_small_view(Builtin::Count, &rows),
            &rec.count,
        );
    }
}

#[test]
fn builtin_names_match_by_prefix_like_couchdb() {
    // Recorded from CouchDB 3.4.3: `_sumfoo`, `_sum `, `_count_x` and
    // `_approx_count_distinctX` are accepted, `_foo` is refused with this
    // `invalid_design_doc` reason.
    assert_eq!(Builtin::from_source("_sumfoo"), Ok(Builtin::Sum));
    assert_eq!(Builtin::from_source("_sum "), Ok(Builtin::Sum));
    assert_eq!(Builtin::from_source("_count_x"), Ok(Builtin::Count));
    assert_eq!(Builtin::from_source("_stats"), Ok(Builtin::Stats));
    assert_eq!(
        Builtin::from_source("_approx_count_distinctX"),
        Ok(Builtin::ApproxCountDistinct)
    );
    assert_eq!(
        Builtin::from_source("_foo").unwrap_err().to_string(),
        "`_foo` is not a supported reduce function."
    );
}

/// `_sum` results over 4906 bytes (external term size) that did not
/// shrink to half their input, recorded from CouchDB 3.4.3: views
/// `emit(doc._id, doc.v)` over the documents below.
#[test]
fn sum_overflow_matches_couchdb() {
    let object = |prefix: &str, value: i64| -> Value {
        Value::Object(
            (0..400)
                .map(|i| (format!("{prefix}{i:04}"), Value::from(value)))
                .collect(),
        )
    };
    let run = |ids: &[&str], values: Vec<Value>| -> Value {
        let keys: Vec<Value> = ids.iter().map(|id| json!(id)).collect();
        let ids: Vec<String> = ids.iter().map(|id| id.to_string()).collect();
        couchdb_small_view(Builtin::Sum, &rows(&keys, &ids, &values)).unwrap()
    };
    let overflow = |input: usize, output: usize| {
        json!({
            "error": "builtin_reduce_error",
            "reason": format!("Reduce output must shrink more rapidly: input size: {input} output size: {output}"),
        })
    };
    // Disjoint members: the reduce itself overflows.
    assert_eq!(
        run(&["a", "b"], vec![object("k", 1), object("j", 1)]),
        overflow(11271, 11209)
    );
    // The same members: the reduce halves its input, the final rereduce of
    // one partial does not.
    assert_eq!(
        run(&["c", "d"], vec![object("k", 1), object("k", 1)]),
        overflow(5622, 5609)
    );
    let numbers: Value = (0..3000).collect::<Vec<i64>>().into();
    assert_eq!(
        run(&["e", "f"], vec![numbers.clone(), numbers]),
        overflow(28531, 14623)
    );
    let wide = Value::Object(
        (0..800)
            .map(|i| (format!("k{i:04}"), Value::from(1)))
            .collect(),
    );
    assert_eq!(run(&["g"], vec![wide]), overflow(11239, 11209));
}

/// `group_level` reductions recorded from CouchDB 3.4.3 (`emit(doc.k,
/// doc.v)`, doc ids `r00`..), computed here by grouping encoded rows with
/// `keycodec::group_key` and reducing each group.
#[test]
fn grouped_reductions_match_couchdb() {
    let data = [
        (json!(["a", 1]), 1),
        (json!(["a", 2]), 2),
        (json!(["b", 1]), 3),
        (json!(["b", 1, "x"]), 4),
        (json!("c"), 5),
        (json!(5), 6),
        (json!([]), 7),
        (json!(["a"]), 8),
        (json!(["A", 1]), 9),
        (json!(["\u{e9}", 1]), 10),
        (json!(["e\u{301}", 2]), 11),
    ];
    let ids: Vec<String> = (0..data.len()).map(|i| format!("r{i:02}")).collect();
    let values: Vec<Value> = data.iter().map(|(_, v)| Value::from(*v)).collect();
    let mut order: Vec<(Vec<u8>, usize)> = data
        .iter()
        .enumerate()
        .map(|(i, (key, _))| (encode_row_key(key, &ids[i], Collation::Couch), i))
        .collect();
    order.sort();
    let grouped = |builtin: Builtin, level: GroupLevel| -> Vec<Value> {
        let mut groups: Vec<(Vec<u8>, Vec<Row<'_>>)> = Vec::new();
        for (bytes, i) in &order {
            let group = group_key(bytes, level, Collation::Couch)
                .unwrap()
                .into_owned();
            let row = Row {
                key: &data[*i].0,
                doc_id: &ids[*i],
                value: &values[*i],
            };
            match groups.last_mut() {
                Some((last, rows)) if *last == group => rows.push(row),
                _ => groups.push((group, vec![row])),
            }
        }
        groups
            .iter()
            .map(|(_, rows)| builtin.finalize(&builtin.reduce(rows).unwrap()).unwrap())
            .collect()
    };
    let values_of = |v: Value| -> Vec<Value> { v.as_array().unwrap().clone() };
    assert_eq!(
        grouped(Builtin::Sum, GroupLevel::Level(0)),
        values_of(json!([66]))
    );
    assert_eq!(
        grouped(Builtin::Sum, GroupLevel::Level(1)),
        values_of(json!([6, 5, 7, 11, 9, 7, 21]))
    );
    assert_eq!(
        grouped(Builtin::Sum, GroupLevel::Level(2)),
        values_of(json!([6, 5, 7, 8, 1, 2, 9, 7, 10, 11]))
    );
    assert_eq!(
        grouped(Builtin::Sum, GroupLevel::Exact),
        values_of(json!([6, 5, 7, 8, 1, 2, 9, 3, 4, 10, 11]))
    );
    assert_eq!(
        grouped(Builtin::Count, GroupLevel::Level(1)),
        values_of(json!([1, 1, 1, 3, 1, 2, 2]))
    );
    assert_eq!(
        grouped(Builtin::ApproxCountDistinct, GroupLevel::Level(1)),
        values_of(json!([1, 1, 1, 3, 1, 2, 2]))
    );
    assert_eq!(
        grouped(Builtin::Stats, GroupLevel::Level(1))[3],
        json!({"sum": 11, "count": 3, "min": 1, "max": 8, "sumsqr": 69})
    );
    assert_eq!(
        grouped(Builtin::Stats, GroupLevel::Level(1))[6],
        json!({"sum": 21, "count": 2, "min": 10, "max": 11, "sumsqr": 221})
    );
    assert_eq!(
        grouped(Builtin::Stats, GroupLevel::Level(0)),
        vec![json!({"sum": 66, "count": 11, "min": 1, "max": 11, "sumsqr": 506})]
    );
}

fn distinct(keys: impl Iterator<Item = Value>) -> u64 {
    let keys: Vec<Value> = keys.collect();
    let ids: Vec<String> = (0..keys.len()).map(|i| format!("d{i}")).collect();
    let nulls = vec![Value::Null; keys.len()];
    let partial = Builtin::ApproxCountDistinct
        .reduce(&rows(&keys, &ids, &nulls))
        .unwrap();
    Builtin::ApproxCountDistinct
        .finalize(&partial)
        .unwrap()
        .as_u64()
        .unwrap()
}

/// CouchDB 3.4.3's `_approx_count_distinct` estimates, recorded with
/// `group_level=1` over keys `[n, i]` and `[n, "k" + i]` for `i < n`:
/// n = 1, 2, 10, 100, 1000, 5000, 20000 gave 1, 2, 10, 100, 998, 5102,
/// 19912 and 1, 2, 10, 101, 1006, 4957, 19902; all 26113 integer keys
/// gave 26117; 3000 rows of 7 distinct keys gave 7. Estimates here differ
/// (another hash and estimator) but stay as close to the truth.
#[test]
fn approx_count_distinct_is_close_like_couchdb() {
    for n in [1u64, 2, 10, 100, 1000, 5000, 20000] {
        let ints = distinct((0..n).map(|i| json!([n, i])));
        let strs = distinct((0..n).map(|i| json!([n, format!("k{i}")])));
        for estimate in [ints, strs] {
            let off = (estimate as f64 - n as f64).abs();
            // Small counts are (nearly) exact; 100 keys collide in about
            // 2.4 of 2048 registers, so +-5 is three standard deviations.
            // Above that, three standard errors (6.9 %): CouchDB's worst
            // error here was 2.0 %, ours is 5.9 % (the 5000 strings; over
            // other hash seeds the same keys give -3.4 % .. +1.9 %).
            let allowed = match n {
                0..=10 => 0.0,
                11..=100 => 5.0,
                _ => 0.069 * n as f64,
            };
            assert!(off <= allowed, "n = {n}: estimate {estimate}");
        }
    }
    assert_eq!(distinct((0..3000).map(|i| json!(i % 7))), 7);
    // Distinct means distinct JSON: 1 and 1.0 are two keys (two Erlang terms).
    assert_eq!(distinct([json!(1), json!(1.0), json!(1)].into_iter()), 2);
}

#[test]
fn approx_count_distinct_accuracy_over_many_sizes() {
    let mut worst: f64 = 0.0;
    for n in (1..=60).map(|i| (i * i * 37) as u64) {
        let estimate = distinct((0..n).map(|i| json!(format!("doc-{i}"))));
        worst = worst.max((estimate as f64 - n as f64).abs() / n as f64);
    }
    // 3 standard errors of a 2048-register sketch is 6.9 %.
    assert!(worst < 0.069, "worst relative error {worst}");
}

#[test]
fn empty_reductions() {
    let none: [Row<'_>; 0] = [];
    for (builtin, want) in [
        (Builtin::Count, json!(0)),
        (Builtin::Sum, json!(0)),
        (
            Builtin::Stats,
            json!({"sum": 0, "count": 0, "min": 0, "max": 0, "sumsqr": 0}),
        ),
        (Builtin::ApproxCountDistinct, json!(0)),
    ] {
        let partial = builtin.reduce(&none).unwrap();
        assert_eq!(builtin.finalize(&partial).unwrap(), want, "{builtin:?}");
        assert_eq!(
            builtin.finalize(&builtin.rereduce(&[]).unwrap()).unwrap(),
            want,
            "{builtin:?}"
        );
    }
}

#[test]
fn partials_of_another_builtin_are_refused() {
    let json_partial = Partial::Json(json!(1));
    let sketch = Partial::Sketch(HyperLogLog::new());
    assert!(Builtin::ApproxCountDistinct
        .rereduce(std::slice::from_ref(&json_partial))
        .is_err());
    assert!(Builtin::Sum
        .rereduce(std::slice::from_ref(&sketch))
        .is_err());
    assert!(Builtin::Count.finalize(&sketch).is_err());
    assert!(Builtin::ApproxCountDistinct
        .finalize(&json_partial)
        .is_err());
}

#[test]
fn stored_partials_round_trip_and_reject_garbage() {
    let mut sparse = HyperLogLog::new();
    sparse.insert_hash(0x1234_5678_9abc_def0);
    let mut dense = HyperLogLog::new();
    for i in 0..100_000u64 {
        dense.insert_hash(xxh3_64(&i.to_le_bytes()));
    }
    for partial in [
        Partial::Json(json!({"sum": 1.5, "count": 2, "min": 0, "max": 1.5, "sumsqr": 2.25})),
        Partial::Sketch(HyperLogLog::new()),
        Partial::Sketch(sparse),
        Partial::Sketch(dense),
    ] {
        let bytes = partial.to_bytes();
        assert_eq!(Partial::from_bytes(&bytes).unwrap(), partial);
    }
    assert_eq!(Partial::Sketch(HyperLogLog::new()).to_bytes(), [0x03]);
    for garbage in [
        &[][..],
        &[0x09],
        &[0x01, b'{'],
        &[0x02, 1, 2],
        &[0x03, 0x08, 0x00, 1],
        &[0x03, 0, 5, 1, 0, 4, 1],
        &[0x03, 0, 1, 0],
    ] {
        assert!(Partial::from_bytes(garbage).is_err(), "{garbage:?}");
    }
    let mut too_high = [0u8; HLL_REGISTERS];
    too_high[3] = 60;
    let mut bytes = vec![0x02];
    bytes.extend_from_slice(&too_high);
    assert!(Partial::from_bytes(&bytes).is_err());
}

// ---------------------------------------------------------------------------
// Erlang formatting, checked against OTP 25.2 (CouchDB 3.4.3's runtime)
// ---------------------------------------------------------------------------

/// The bytes of a golden string that holds Latin-1 characters (what
/// `io_lib:format` produces), one byte per character.
fn latin1_bytes(text: &str) -> Vec<u8> {
    text.chars()
        .map(|c| u8::try_from(u32::from(c)).expect("Latin-1"))
        .collect()
}

/// `testdata/otp25_terms.jsonl`: JSON values decoded by jiffy (as CouchDB
/// decodes them) and printed by OTP 25.2 with `~w`, with `~p` at columns 1
/// and 84 (and the member list of objects at column 47), with
/// `couch_util:to_binary/1`, and measured by `erlang:external_size/1`.
/// `gen_cases.py` and `format_cases.erl` beside it made the file.
#[test]
fn erlang_printing_matches_otp() {
    let golden = include_str!("testdata/otp25_terms.jsonl");
    let mut checked = 0;
    for line in golden.lines() {
        let case = parse(line);
        let value = parse(case["json"].as_str().unwrap());
        let term = Term::from_json(&value);
        let field = |name: &str| latin1_bytes(case[name].as_str().unwrap());
        assert_eq!(write(&term).into_bytes(), field("w"), "~w of {value}");
        assert_eq!(pretty(&term, 1), field("p1"), "~p at 1 of {value}");
        assert_eq!(
            String::from_utf8_lossy(&pretty(&term, 84)),
            String::from_utf8_lossy(&field("p84")),
            "~p at 84 of {value}"
        );
        if let Value::Object(members) = &value {
            assert_eq!(
                pretty(&Term::proplist(members.iter()), 47),
                field("props47"),
                "~p of members of {value}"
            );
        }
        assert_eq!(
            to_binary(&term).into_bytes(),
            String::from_utf8_lossy(&field("to_binary"))
                .into_owned()
                .into_bytes(),
            "to_binary of {value}"
        );
        assert_eq!(
            external_size(&term) as u64,
            case["size"].as_u64().unwrap(),
            "external_size of {value}"
        );
        checked += 1;
    }
    assert!(checked > 200);
}

/// `testdata/otp25_floats.txt`: f64 bit patterns and OTP 25.2's `~w`.
#[test]
fn erlang_float_printing_matches_otp() {
    let golden = include_str!("testdata/otp25_floats.txt");
    for line in golden.lines() {
        let (bits, expected) = line.split_once(' ').unwrap();
        let f = f64::from_bits(bits.parse().unwrap());
        assert_eq!(format_float(f), expected, "{f:e}");
    }
}

// ---------------------------------------------------------------------------
// Property tests: partial reductions combine like whole ones
// ---------------------------------------------------------------------------

/// Values `_sum` and `_stats` accept, with integers only so that addition
/// is exact and therefore associative (float sums depend on grouping, in
/// CouchDB as here).
fn arb_number_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        (-1000i64..1000).prop_map(Value::from),
        any::<i32>().prop_map(Value::from)
    ]
}

/// Values that `_sum` accepts together: numbers mixed with arrays of
/// numbers, or objects of numbers (nested), but not the two kinds mixed.
fn arb_summable(objects: bool) -> BoxedStrategy<Value> {
    if objects {
        // Member `c` always holds an object, the others numbers: mixing the
        // two under one name is invalid (and order-dependent) in CouchDB.
        let nested = prop::collection::vec(("[xy]", arb_number_value()), 0..3)
            .prop_map(|m| Value::Object(m.into_iter().collect()));
        (
            proptest::option::of(arb_number_value()),
            proptest::option::of(arb_number_value()),
            proptest::option::of(nested),
        )
            .prop_map(|(a, b, c)| {
                let members = [("a", a), ("b", b), ("c", c)];
                Value::Object(
                    members
                        .into_iter()
                        .filter_map(|(k, v)| v.map(|v| (k.to_string(), v)))
                        .collect(),
                )
            })
            .boxed()
    } else {
        prop_oneof![
            arb_number_value(),
            prop::collection::vec(arb_number_value(), 0..4).prop_map(Value::Array)
        ]
        .boxed()
    }
}

/// Any JSON, for checking that reducers never panic.
fn arb_any() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        arb_number_value(),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        "[a-z]{0,3}".prop_map(Value::String),
        Just(json!("builtin_reduce_error")),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop::sample::select(vec![
                        "a", "b", "error", "sum", "count", "min", "max", "sumsqr"
                    ]),
                    inner
                ),
                0..5
            )
            .prop_map(|members| Value::Object(
                members
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect()
            )),
        ]
    })
}

/// Reduces `values` as `chunks` consecutive runs and rereduces the
/// partials (through their stored bytes), as an index does.
fn reduce_in_chunks(
    builtin: Builtin,
    keys: &[Value],
    values: &[Value],
    cuts: &[usize],
) -> Result<Partial, ReduceError> {
    let ids: Vec<String> = (0..values.len()).map(|i| format!("id{i}")).collect();
    let all = rows(keys, &ids, values);
    let mut bounds: Vec<usize> = cuts.iter().map(|c| c % (values.len() + 1)).collect();
    bounds.push(0);
    bounds.push(values.len());
    bounds.sort_unstable();
    // An index never reduces an empty run: CouchDB's empty reductions are
    // not neutral (`_stats` gives min 0, `_sum` 0, which an object sum
    // refuses).
    bounds.dedup();
    let mut partials = Vec::new();
    for pair in bounds.windows(2) {
        let partial = builtin.reduce(&all[pair[0]..pair[1]])?;
        partials.push(Partial::from_bytes(&partial.to_bytes()).unwrap());
    }
    builtin.rereduce(&partials)
}

fn finalized(
    builtin: Builtin,
    partial: Result<Partial, ReduceError>,
) -> Result<String, ReduceError> {
    partial.map(|p| builtin.finalize(&p).unwrap().to_string())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn rereduce_of_chunks_equals_reduce(
        values in any::<bool>().prop_flat_map(|objects| prop::collection::vec(arb_summable(objects), 0..12)),
        cuts in prop::collection::vec(any::<usize>(), 0..4),
    ) {
        let keys: Vec<Value> = values.iter().enumerate().map(|(i, _)| json!([i % 3, i])).collect();
        let ids: Vec<String> = (0..values.len()).map(|i| format!("id{i}")).collect();
        for builtin in [Builtin::Count, Builtin::Sum, Builtin::Stats, Builtin::ApproxCountDistinct] {
            let whole = finalized(builtin, builtin.reduce(&rows(&keys, &ids, &values)));
            let chunked = finalized(builtin, reduce_in_chunks(builtin, &keys, &values, &cuts));
            // `_stats` over mixed shapes fails either way.
            if builtin == Builtin::Stats && whole.is_err() {
                prop_assert!(chunked.is_err());
            } else {
                prop_assert_eq!(chunked, whole, "{:?}", builtin);
            }
        }
    }

    #[test]
    fn order_does_not_matter_for_valid_input(
        values in prop::collection::vec(arb_number_value(), 0..12),
        arrays in prop::collection::vec(prop::collection::vec(arb_number_value(), 3), 1..6),
        seed in any::<u64>(),
    ) {
        let shuffle = |mut v: Vec<Value>| {
            let mut s = seed | 1;
            for i in (1..v.len()).rev() {
                s ^= s << 13; s ^= s >> 7; s ^= s << 17;
                v.swap(i, (s % (i as u64 + 1)) as usize);
            }
            v
        };
        let arrays: Vec<Value> = arrays.into_iter().map(Value::Array).collect();
        for input in [values, arrays] {
            let keys: Vec<Value> = input.clone();
            let ids: Vec<String> = (0..input.len()).map(|i| format!("id{i}")).collect();
            let shuffled = shuffle(input.clone());
            for builtin in [Builtin::Count, Builtin::Sum, Builtin::Stats, Builtin::ApproxCountDistinct] {
                let a = finalized(builtin, builtin.reduce(&rows(&keys, &ids, &input)));
                let b = finalized(builtin, builtin.reduce(&rows(&shuffle(keys.clone()), &ids, &shuffled)));
                prop_assert_eq!(a, b, "{:?}", builtin);
            }
        }
    }

    #[test]
    fn reducers_never_panic(values in prop::collection::vec(arb_any(), 0..8), cuts in prop::collection::vec(any::<usize>(), 0..3)) {
        let keys: Vec<Value> = values.clone();
        for builtin in [Builtin::Count, Builtin::Sum, Builtin::Stats, Builtin::ApproxCountDistinct] {
            if let Ok(partial) = reduce_in_chunks(builtin, &keys, &values, &cuts) {
                builtin.finalize(&partial).unwrap();
            }
        }
    }

    #[test]
    fn sketch_union_is_order_free_and_idempotent(a in prop::collection::vec(any::<u64>(), 0..200), b in prop::collection::vec(any::<u64>(), 0..200)) {
        let sketch = |hashes: &[u64]| {
            let mut s = HyperLogLog::new();
            hashes.iter().for_each(|&h| s.insert_hash(h));
            s
        };
        let (sa, sb) = (sketch(&a), sketch(&b));
        let mut ab = sa.clone();
        ab.union(&sb);
        let mut ba = sb.clone();
        ba.union(&sa);
        prop_assert_eq!(&ab, &ba);
        prop_assert_eq!(&ab, &sketch(&[a.clone(), b.clone()].concat()));
        let mut twice = ab.clone();
        twice.union(&ab);
        prop_assert_eq!(twice, ab);
    }
}

// ---------------------------------------------------------------------------
// Recorded answers
// ---------------------------------------------------------------------------

/// Answers of CouchDB 3.4.3 (`/work/shared/reference/couchdb`, q=1) to
/// `GET /db/_design/{sum,stats,count}_CASE/_view/v` over documents
/// `{"_id": "CASE-00i", "c": CASE, "v": VALUE}` and views
/// `function(doc) { if (doc.c === CASE) emit([doc.c, doc._id], doc.v); }`
/// with `"reduce": "_sum"` / `"_stats"` / `"_count"`. Recorded facts, not
/// code: where CouchDB printed a stack trace, only the error is kept;
/// where it printed `{"error": "{case_clause,T}"}` (a failure while
/// writing the index), the reason is what it prints for that term at query
/// time.
const RECORDED: &[Recorded] = &[
    Recorded {
        case: "arrays",
        values: r#"[[1,2],[10],[100,200,300]]"#,
        sum: Want::Ok(r#"[111,202,300]"#),
        stats: Want::Crash("function_clause", None),
        count: Want::Ok(r#"3"#),
    },
    Recorded {
        case: "arrnum",
        values: r#"[[10,20],1]"#,
        sum: Want::Ok(r#"[11,20]"#),
        stats: Want::Invalid(
            r#""The _stats function requires that map values be numbers or arrays of numbers, not '{1,\n                                                                                    1,\n                                                                                    1,\n                                                                                    1,\n                                                                                    1}'""#,
        ),
        count: Want::Ok(r#"2"#),
    },
    Recorded {
        case: "arrobj",
        values: r#"[[5],{"a":1}]"#,
        sum: Want::Crash("case_clause", Some(r#""\u0005""#)),
        stats: Want::Invalid(r#""user _stats input missing required field sum ([{<<\"a\">>,1}])""#),
        count: Want::Ok(r#"2"#),
    },
    Recorded {
        case: "arrsame",
        values: r#"[[1,2],[3,4]]"#,
        sum: Want::Ok(r#"[4,6]"#),
        stats: Want::Ok(
            r#"[{"sum":4,"count":2,"min":1,"max":3,"sumsqr":10},{"sum":6,"count":2,"min":2,"max":4,"sumsqr":20}]"#,
        ),
        count: Want::Ok(r#"2"#),
    },
    Recorded {
        case: "arrstr",
        values: r#"[[1,"x"]]"#,
        sum: Want::Ok(r#"[1,"x"]"#),
        stats: Want::Invalid(r#""non-numeric _stats input: <<120>>""#),
        count: Want::Ok(r#"1"#),
    },
    Recorded {
        case: "big",
        values: r#"[9007199254740992,9007199254740992]"#,
        sum: Want::Ok(r#"18014398509481984"#),
        stats: Want::Ok(
            r#"{"sum":18014398509481984,"count":2,"min":9007199254740992,"max":9007199254740992,"sumsqr":162259276829213363391578010288128}"#,
        ),
        count: Want::Ok(r#"2"#),
    },
    Recorded {
        case: "bool",
        values: r#"[true]"#,
        sum: Want::Ok(
            r#"{"error":"builtin_reduce_error","reason":"The _sum function requires that map values be numbers, arrays of numbers, or objects. Objects cannot be mixed with other data structures. Objects can be arbitrarily nested, provided that the values for all fields are themselves numbers, arrays of numbers, or objects.","caused_by":true}"#,
        ),
        stats: Want::Invalid(r#""non-numeric _stats input: true""#),
        count: Want::Ok(r#"1"#),
    },
    Recorded {
        case: "e21",
        values: r#"[1e+21,1]"#,
        sum: Want::Ok(r#"1e+21"#),
        stats: Want::Ok(r#"{"sum":1e+21,"count":2,"min":1,"max":1e+21,"sumsqr":1e+42}"#),
        count: Want::Ok(r#"2"#),
    },
    Recorded {
        case: "emptyarr",
        values: r#"[[]]"#,
        sum: Want::Ok(r#"[0]"#),
        stats: Want::Ok(r#"[]"#),
        count: Want::Ok(r#"1"#),
    },
    Recorded {
        case: "emptyobj",
        values: r#"[{}]"#,
        sum: Want::Ok(r#"{}"#),
        stats: Want::Invalid(r#""user _stats input missing required field sum ([])""#),
        count: Want::Ok(r#"1"#),
    },
    Recorded {
        case: "errobj",
        values: r#"[{"error":"builtin_reduce_error","reason":"x"}]"#,
        sum: Want::Ok(r#"{"error":"builtin_reduce_error","reason":"x"}"#),
        stats: Want::Invalid(
            r#""user _stats input missing required field sum ([{<<\"error\">>,\n                                                <<\"builtin_reduce_error\">>},\n                                               {<<\"reason\">>,<<\"x\">>}])""#,
        ),
        count: Want::Ok(r#"1"#),
    },
    Recorded {
        case: "floats",
        values: r#"[1.5,1.5]"#,
        sum: Want::Ok(r#"3.0"#),
        stats: Want::Ok(r#"{"sum":3.0,"count":2,"min":1.5,"max":1.5,"sumsqr":4.5}"#),
        count: Want::Ok(r#"2"#),
    },
    Recorded {
        case: "floatsum",
        values: r#"[1,2]"#,
        sum: Want::Ok(r#"3"#),
        stats: Want::Ok(r#"{"sum":3,"count":2,"min":1,"max":2,"sumsqr":5}"#),
        count: Want::Ok(r#"2"#),
    },
    Recorded {
        case: "huge",
        values: r#"[1e+300,1e+300]"#,
        sum: Want::Ok(r#"2e+300"#),
        stats: Want::Crash("badarith", None),
        count: Want::Ok(r#"2"#),
    },
    Recorded {
        case: "ints",
        values: r#"[1,2,3]"#,
        sum: Want::Ok(r#"6"#),
        stats: Want::Ok(r#"{"sum":6,"count":3,"min":1,"max":3,"sumsqr":14}"#),
        count: Want::Ok(r#"3"#),
    },
    Recorded {
        case: "mixnum",
        values: r#"[1,2.5]"#,
        sum: Want::Ok(r#"3.5"#),
        stats: Want::Ok(r#"{"sum":3.5,"count":2,"min":1,"max":2.5,"sumsqr":7.25}"#),
        count: Want::Ok(r#"2"#),
    },
    Recorded {
        case: "neg0",
        values: r#"[0]"#,
        sum: Want::Ok(r#"0"#),
        stats: Want::Ok(r#"{"sum":0,"count":1,"min":0,"max":0,"sumsqr":0}"#),
        count: Want::Ok(r#"1"#),
    },
    Recorded {
        case: "nestarr",
        values: r#"[[[1]]]"#,
        sum: Want::Ok(
            r#"{"error":"builtin_reduce_error","reason":"The _sum function requires that map values be numbers, arrays of numbers, or objects. Objects cannot be mixed with other data structures. Objects can be arbitrarily nested, provided that the values for all fields are themselves numbers, arrays of numbers, or objects.","caused_by":[0]}"#,
        ),
        stats: Want::Ok(r#"[[{"sum":1,"count":1,"min":1,"max":1,"sumsqr":1}]]"#),
        count: Want::Ok(r#"1"#),
    },
    Recorded {
        case: "nul",
        values: r#"[null]"#,
        sum: Want::Ok(
            r#"{"error":"builtin_reduce_error","reason":"The _sum function requires that map values be numbers, arrays of numbers, or objects. Objects cannot be mixed with other data structures. Objects can be arbitrarily nested, provided that the values for all fields are themselves numbers, arrays of numbers, or objects.","caused_by":null}"#,
        ),
        stats: Want::Invalid(r#""non-numeric _stats input: null""#),
        count: Want::Ok(r#"1"#),
    },
    Recorded {
        case: "numarr",
        values: r#"[1,[10,20]]"#,
        sum: Want::Ok(r#"[11,20]"#),
        stats: Want::Invalid(
            r#""The _stats function requires that map values be numbers or arrays of numbers, not '[10,\n                                                                                    20]'""#,
        ),
        count: Want::Ok(r#"2"#),
    },
    Recorded {
        case: "numobj",
        values: r#"[5,{"a":1}]"#,
        sum: Want::Crash("case_clause", Some(r#""5""#)),
        stats: Want::Invalid(r#""user _stats input missing required field sum ([{<<\"a\">>,1}])""#),
        count: Want::Ok(r#"2"#),
    },
    Recorded {
        case: "objarr",
        values: r#"[{"a":1},[5]]"#,
        sum: Want::Crash("case_clause", Some(r#""\u0005""#)),
        stats: Want::Invalid(r#""user _stats input missing required field sum ([{<<\"a\">>,1}])""#),
        count: Want::Ok(r#"2"#),
    },
    Recorded {
        case: "objarrval",
        values: r#"[{"a":[1,2]},{"a":5}]"#,
        sum: Want::Ok(r#"{"a":[6,2]}"#),
        stats: Want::Invalid(
            r#""user _stats input missing required field sum ([{<<\"a\">>,[1,2]}])""#,
        ),
        count: Want::Ok(r#"2"#),
    },
    Recorded {
        case: "objkeyorder",
        values: r#"[{"z":1,"a":2},{"m":3}]"#,
        sum: Want::Ok(r#"{"a":2,"m":3,"z":1}"#),
        stats: Want::Invalid(
            r#""user _stats input missing required field sum ([{<<\"z\">>,1},{<<\"a\">>,2}])""#,
        ),
        count: Want::Ok(r#"2"#),
    },
    Recorded {
        case: "objnested",
        values: r#"[{"b":{"x":1}},{"b":{"x":2,"y":3}}]"#,
        sum: Want::Ok(r#"{"b":{"x":3,"y":3}}"#),
        stats: Want::Invalid(
            r#""user _stats input missing required field sum ([{<<\"b\">>,{[{<<\"x\">>,1}]}}])""#,
        ),
        count: Want::Ok(r#"2"#),
    },
    Recorded {
        case: "objnum",
        values: r#"[{"a":1},5]"#,
        sum: Want::Crash("case_clause", Some(r#""5""#)),
        stats: Want::Invalid(r#""user _stats input missing required field sum ([{<<\"a\">>,1}])""#),
        count: Want::Ok(r#"2"#),
    },
    Recorded {
        case: "objnumobj",
        values: r#"[{"a":5},{"a":{"x":1}}]"#,
        sum: Want::Crash("case_clause", Some(r#""5""#)),
        stats: Want::Invalid(r#""user _stats input missing required field sum ([{<<\"a\">>,5}])""#),
        count: Want::Ok(r#"2"#),
    },
    Recorded {
        case: "objobjnum",
        values: r#"[{"a":{"x":1}},{"a":5}]"#,
        sum: Want::Crash("case_clause", Some(r#""5""#)),
        stats: Want::Invalid(
            r#""user _stats input missing required field sum ([{<<\"a\">>,{[{<<\"x\">>,1}]}}])""#,
        ),
        count: Want::Ok(r#"2"#),
    },
    Recorded {
        case: "objs",
        values: r#"[{"a":1,"b":2},{"a":10,"c":[1,2]},{"b":{"x":1}}]"#,
        sum: Want::Crash("case_clause", Some(r#""2""#)),
        stats: Want::Invalid(
            r#""user _stats input missing required field sum ([{<<\"a\">>,1},{<<\"b\">>,2}])""#,
        ),
        count: Want::Ok(r#"3"#),
    },
    Recorded {
        case: "objstr",
        values: r#"[{"a":"x"}]"#,
        sum: Want::Ok(r#"{"a":"x"}"#),
        stats: Want::Invalid(
            r#""user _stats input missing required field sum ([{<<\"a\">>,<<\"x\">>}])""#,
        ),
        count: Want::Ok(r#"1"#),
    },
    Recorded {
        case: "pointone",
        values: r#"[0.1,0.2]"#,
        sum: Want::Ok(r#"0.30000000000000004"#),
        stats: Want::Ok(
            r#"{"sum":0.30000000000000004,"count":2,"min":0.1,"max":0.2,"sumsqr":0.05000000000000001}"#,
        ),
        count: Want::Ok(r#"2"#),
    },
    Recorded {
        case: "statsarrobj",
        values: r#"[[{"sum":10,"count":2,"min":1,"max":9,"sumsqr":82},3],[1,2]]"#,
        sum: Want::Ok(
            r#"{"error":"builtin_reduce_error","reason":"The _sum function requires that map values be numbers, arrays of numbers, or objects. Objects cannot be mixed with other data structures. Objects can be arbitrarily nested, provided that the values for all fields are themselves numbers, arrays of numbers, or objects.","caused_by":[1,2]}"#,
        ),
        stats: Want::Ok(
            r#"[{"sum":11,"count":3,"min":1,"max":9,"sumsqr":83},{"sum":5,"count":2,"min":2,"max":3,"sumsqr":13}]"#,
        ),
        count: Want::Ok(r#"2"#),
    },
    Recorded {
        case: "statsbad",
        values: r#"[{"sum":"x","count":2,"min":1,"max":9,"sumsqr":82}]"#,
        sum: Want::Ok(r#"{"sum":"x","count":2,"min":1,"max":9,"sumsqr":82}"#),
        stats: Want::Invalid(r#""non-numeric _stats input received for sum: <<120>>""#),
        count: Want::Ok(r#"1"#),
    },
    Recorded {
        case: "statsmissing",
        values: r#"[{"sum":10,"count":2}]"#,
        sum: Want::Ok(r#"{"sum":10,"count":2}"#),
        stats: Want::Invalid(
            r#""user _stats input missing required field min ([{<<\"sum\">>,10},{<<\"count\">>,2}])""#,
        ),
        count: Want::Ok(r#"1"#),
    },
    Recorded {
        case: "statsobj",
        values: r#"[{"sum":10,"count":2,"min":1,"max":9,"sumsqr":82},5]"#,
        sum: Want::Crash("case_clause", Some(r#""5""#)),
        stats: Want::Ok(r#"{"sum":15,"count":3,"min":1,"max":9,"sumsqr":107}"#),
        count: Want::Ok(r#"2"#),
    },
    Recorded {
        case: "statsobj2",
        values: r#"[5,{"sum":10,"count":2,"min":1,"max":9,"sumsqr":82}]"#,
        sum: Want::Crash("case_clause", Some(r#""5""#)),
        stats: Want::Ok(r#"{"sum":15,"count":3,"min":1,"max":9,"sumsqr":107}"#),
        count: Want::Ok(r#"2"#),
    },
    Recorded {
        case: "str",
        values: r#"["foo"]"#,
        sum: Want::Ok(
            r#"{"error":"builtin_reduce_error","reason":"The _sum function requires that map values be numbers, arrays of numbers, or objects. Objects cannot be mixed with other data structures. Objects can be arbitrarily nested, provided that the values for all fields are themselves numbers, arrays of numbers, or objects.","caused_by":"foo"}"#,
        ),
        stats: Want::Invalid(r#""non-numeric _stats input: <<102,111,111>>""#),
        count: Want::Ok(r#"1"#),
    },
    Recorded {
        case: "strs",
        values: r#"[1,"foo"]"#,
        sum: Want::Ok(
            r#"{"error":"builtin_reduce_error","reason":"The _sum function requires that map values be numbers, arrays of numbers, or objects. Objects cannot be mixed with other data structures. Objects can be arbitrarily nested, provided that the values for all fields are themselves numbers, arrays of numbers, or objects.","caused_by":"foo"}"#,
        ),
        stats: Want::Invalid(
            r#""The _stats function requires that map values be numbers or arrays of numbers, not '<<\"foo\">>'""#,
        ),
        count: Want::Ok(r#"2"#),
    },
    Recorded {
        case: "zeroobj",
        values: r#"[0,{"a":1}]"#,
        sum: Want::Ok(
            r#"{"error":"builtin_reduce_error","reason":"The _sum function requires that map values be numbers, arrays of numbers, or objects. Objects cannot be mixed with other data structures. Objects can be arbitrarily nested, provided that the values for all fields are themselves numbers, arrays of numbers, or objects.","caused_by":0}"#,
        ),
        stats: Want::Invalid(r#""user _stats input missing required field sum ([{<<\"a\">>,1}])""#),
        count: Want::Ok(r#"2"#),
    },
    Recorded {
        case: "arrtail",
        values: r#"[[1,2,3],[4,"x"]]"#,
        sum: Want::Ok(
            r#"{"error":"builtin_reduce_error","reason":"The _sum function requires that map values be numbers, arrays of numbers, or objects. Objects cannot be mixed with other data structures. Objects can be arbitrarily nested, provided that the values for all fields are themselves numbers, arrays of numbers, or objects.","caused_by":["x"]}"#,
        ),
        stats: Want::Invalid(
            r#""The _stats function requires that map values be numbers or arrays of numbers, not '<<\"x\">>'""#,
        ),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "arrtail2",
        values: r#"[[1,2,3],[4,5],[1,"y",3]]"#,
        sum: Want::Ok(
            r#"{"error":"builtin_reduce_error","reason":"The _sum function requires that map values be numbers, arrays of numbers, or objects. Objects cannot be mixed with other data structures. Objects can be arbitrarily nested, provided that the values for all fields are themselves numbers, arrays of numbers, or objects.","caused_by":["y",3]}"#,
        ),
        stats: Want::Crash("function_clause", None),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "errfirst",
        values: r#"[{"error":"builtin_reduce_error","reason":"x"},{"error":"x"}]"#,
        sum: Want::Crash("case_clause", Some(r#""{<<\"error\">>,<<\"x\">>}""#)),
        stats: Want::Invalid(
            r#""user _stats input missing required field sum ([{<<\"error\">>,\n                                                <<\"builtin_reduce_error\">>},\n                                               {<<\"reason\">>,<<\"x\">>}])""#,
        ),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "errnested",
        values: r#"[{"a":1},{"a":{"error":"builtin_reduce_error","why":1}}]"#,
        sum: Want::Ok(
            r#"{"error":"builtin_reduce_error","reason":"The _sum function requires that map values be numbers, arrays of numbers, or objects. Objects cannot be mixed with other data structures. Objects can be arbitrarily nested, provided that the values for all fields are themselves numbers, arrays of numbers, or objects.","caused_by":1}"#,
        ),
        stats: Want::Invalid(r#""user _stats input missing required field sum ([{<<\"a\">>,1}])""#),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "errnestedinv",
        values: r#"[{"a":1},{"a":"s"}]"#,
        sum: Want::Ok(
            r#"{"error":"builtin_reduce_error","reason":"The _sum function requires that map values be numbers, arrays of numbers, or objects. Objects cannot be mixed with other data structures. Objects can be arbitrarily nested, provided that the values for all fields are themselves numbers, arrays of numbers, or objects.","caused_by":1}"#,
        ),
        stats: Want::Invalid(r#""user _stats input missing required field sum ([{<<\"a\">>,1}])""#),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "errother",
        values: r#"[{"error":"x","a":1}]"#,
        sum: Want::Crash("case_clause", Some(r#""{<<\"error\">>,<<\"x\">>}""#)),
        stats: Want::Invalid(
            r#""user _stats input missing required field sum ([{<<\"error\">>,<<\"x\">>},\n                                               {<<\"a\">>,1}])""#,
        ),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "errother2",
        values: r#"[{"a":1},{"error":"x","a":1}]"#,
        sum: Want::Crash("case_clause", Some(r#""{<<\"error\">>,<<\"x\">>}""#)),
        stats: Want::Invalid(r#""user _stats input missing required field sum ([{<<\"a\">>,1}])""#),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "errshort",
        values: r#"["foo",{"a":1}]"#,
        sum: Want::Ok(
            r#"{"error":"builtin_reduce_error","reason":"The _sum function requires that map values be numbers, arrays of numbers, or objects. Objects cannot be mixed with other data structures. Objects can be arbitrarily nested, provided that the values for all fields are themselves numbers, arrays of numbers, or objects.","caused_by":"foo"}"#,
        ),
        stats: Want::Invalid(r#""non-numeric _stats input: <<102,111,111>>""#),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "floatover",
        values: r#"[1e+308,1e+308]"#,
        sum: Want::Crash("badarith", None),
        stats: Want::Crash("badarith", None),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "intzero",
        values: r#"[1,-1,{"a":1}]"#,
        sum: Want::Ok(
            r#"{"error":"builtin_reduce_error","reason":"The _sum function requires that map values be numbers, arrays of numbers, or objects. Objects cannot be mixed with other data structures. Objects can be arbitrarily nested, provided that the values for all fields are themselves numbers, arrays of numbers, or objects.","caused_by":-1}"#,
        ),
        stats: Want::Invalid(r#""user _stats input missing required field sum ([{<<\"a\">>,1}])""#),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "negzero",
        values: r#"[0.5,-0.5,{"a":1}]"#,
        sum: Want::Crash("case_clause", Some(r#""0.0""#)),
        stats: Want::Invalid(r#""user _stats input missing required field sum ([{<<\"a\">>,1}])""#),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "nestedcause",
        values: r#"[{"a":[1,2,3]},{"a":[4,"x"]}]"#,
        sum: Want::Ok(
            r#"{"error":"builtin_reduce_error","reason":"The _sum function requires that map values be numbers, arrays of numbers, or objects. Objects cannot be mixed with other data structures. Objects can be arbitrarily nested, provided that the values for all fields are themselves numbers, arrays of numbers, or objects.","caused_by":["x"]}"#,
        ),
        stats: Want::Invalid(
            r#""user _stats input missing required field sum ([{<<\"a\">>,[1,2,3]}])""#,
        ),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "objacc_str",
        values: r#"[{"a":"x"},{"a":1}]"#,
        sum: Want::Ok(
            r#"{"error":"builtin_reduce_error","reason":"The _sum function requires that map values be numbers, arrays of numbers, or objects. Objects cannot be mixed with other data structures. Objects can be arbitrarily nested, provided that the values for all fields are themselves numbers, arrays of numbers, or objects.","caused_by":"x"}"#,
        ),
        stats: Want::Invalid(
            r#""user _stats input missing required field sum ([{<<\"a\">>,<<\"x\">>}])""#,
        ),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "objacc_strobj",
        values: r#"[{"a":"x"},{"a":{"b":1}}]"#,
        sum: Want::Crash("case_clause", Some(r#""x""#)),
        stats: Want::Invalid(
            r#""user _stats input missing required field sum ([{<<\"a\">>,<<\"x\">>}])""#,
        ),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "stats_p_empty",
        values: r#"[1,[]]"#,
        sum: Want::Ok(r#"[1]"#),
        stats: Want::Invalid(
            r#""The _stats function requires that map values be numbers or arrays of numbers, not '[]'""#,
        ),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "stats_p_emptyobj",
        values: r#"[1,{}]"#,
        sum: Want::Crash("case_clause", Some(r#""1""#)),
        stats: Want::Invalid(r#""user _stats input missing required field sum ([])""#),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "stats_p_float",
        values: r#"[1,[2.5,3]]"#,
        sum: Want::Ok(r#"[3.5,3]"#),
        stats: Want::Invalid(
            r#""The _stats function requires that map values be numbers or arrays of numbers, not '[2.5,\n                                                                                    3]'""#,
        ),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "stats_p_nested",
        values: r#"[1,{"a":{"b":[1,"x"]}}]"#,
        sum: Want::Crash("case_clause", Some(r#""1""#)),
        stats: Want::Invalid(
            r#""user _stats input missing required field sum ([{<<\"a\">>,\n                                                {[{<<\"b\">>,[1,<<\"x\">>]}]}}])""#,
        ),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "stats_p_true",
        values: r#"[1,true]"#,
        sum: Want::Ok(
            r#"{"error":"builtin_reduce_error","reason":"The _sum function requires that map values be numbers, arrays of numbers, or objects. Objects cannot be mixed with other data structures. Objects can be arbitrarily nested, provided that the values for all fields are themselves numbers, arrays of numbers, or objects.","caused_by":true}"#,
        ),
        stats: Want::Invalid(
            r#""The _stats function requires that map values be numbers or arrays of numbers, not 'true'""#,
        ),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "stats_w_arr",
        values: r#"[{"sum":[1,2],"count":1,"min":1,"max":1,"sumsqr":1}]"#,
        sum: Want::Ok(r#"{"sum":[1,2],"count":1,"min":1,"max":1,"sumsqr":1}"#),
        stats: Want::Invalid(r#""non-numeric _stats input received for sum: [1,2]""#),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "stats_w_float",
        values: r#"[{"sum":1.5,"count":1,"min":1,"max":1,"sumsqr":"z"}]"#,
        sum: Want::Ok(r#"{"sum":1.5,"count":1,"min":1,"max":1,"sumsqr":"z"}"#),
        stats: Want::Invalid(r#""non-numeric _stats input received for sumsqr: <<122>>""#),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "stats_w_list",
        values: r#"[[1,"ab"]]"#,
        sum: Want::Ok(r#"[1,"ab"]"#),
        stats: Want::Invalid(r#""non-numeric _stats input: <<97,98>>""#),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "stats_w_neg",
        values: r#"[null,1]"#,
        sum: Want::Ok(
            r#"{"error":"builtin_reduce_error","reason":"The _sum function requires that map values be numbers, arrays of numbers, or objects. Objects cannot be mixed with other data structures. Objects can be arbitrarily nested, provided that the values for all fields are themselves numbers, arrays of numbers, or objects.","caused_by":null}"#,
        ),
        stats: Want::Invalid(r#""non-numeric _stats input: null""#),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "stats_w_obj",
        values: r#"[{"sum":{"a":1},"count":1,"min":1,"max":1,"sumsqr":1}]"#,
        sum: Want::Ok(r#"{"sum":{"a":1},"count":1,"min":1,"max":1,"sumsqr":1}"#),
        stats: Want::Invalid(r#""non-numeric _stats input received for sum: {[{<<97>>,1}]}""#),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "statsarrlong",
        values: r#"[[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30],1]"#,
        sum: Want::Ok(
            r#"[2,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30]"#,
        ),
        stats: Want::Invalid(
            r#""The _stats function requires that map values be numbers or arrays of numbers, not '{1,\n                                                                                    1,\n                                                                                    1,\n                                                                                    1,\n                                                                                    1}'""#,
        ),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "statsfloatmin",
        values: r#"[2.5,1,3]"#,
        sum: Want::Ok(r#"6.5"#),
        stats: Want::Ok(r#"{"sum":6.5,"count":3,"min":1,"max":3,"sumsqr":16.25}"#),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "statsnest2",
        values: r#"[1,[[1,2],[3]]]"#,
        sum: Want::Ok(
            r#"{"error":"builtin_reduce_error","reason":"The _sum function requires that map values be numbers, arrays of numbers, or objects. Objects cannot be mixed with other data structures. Objects can be arbitrarily nested, provided that the values for all fields are themselves numbers, arrays of numbers, or objects.","caused_by":[0]}"#,
        ),
        stats: Want::Invalid(
            r#""The _stats function requires that map values be numbers or arrays of numbers, not '[[1,\n                                                                                     2],\n                                                                                    [3]]'""#,
        ),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "statsnestedbad",
        values: r#"[[1,2],[3,[4]]]"#,
        sum: Want::Ok(
            r#"{"error":"builtin_reduce_error","reason":"The _sum function requires that map values be numbers, arrays of numbers, or objects. Objects cannot be mixed with other data structures. Objects can be arbitrarily nested, provided that the values for all fields are themselves numbers, arrays of numbers, or objects.","caused_by":[[4]]}"#,
        ),
        stats: Want::Invalid(
            r#""The _stats function requires that map values be numbers or arrays of numbers, not '[4]'""#,
        ),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "statsnull",
        values: r#"[{"sum":null,"count":1,"min":1,"max":1,"sumsqr":1}]"#,
        sum: Want::Ok(r#"{"sum":null,"count":1,"min":1,"max":1,"sumsqr":1}"#),
        stats: Want::Invalid(r#""non-numeric _stats input received for sum: null""#),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "statsobj2b",
        values: r#"[1,{"a":1,"b":[1,2]}]"#,
        sum: Want::Crash("case_clause", Some(r#""1""#)),
        stats: Want::Invalid(
            r#""user _stats input missing required field sum ([{<<\"a\">>,1},{<<\"b\">>,[1,2]}])""#,
        ),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "statsobjarr",
        values: r#"[{"sum":1,"count":1,"min":1,"max":1,"sumsqr":1},[1]]"#,
        sum: Want::Crash("case_clause", Some(r#""\u0001""#)),
        stats: Want::Invalid(
            r#""The _stats function requires that map values be numbers or arrays of numbers, not '[1]'""#,
        ),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "statsobjmore",
        values: r#"[{"count":2,"sum":10,"min":1,"max":9,"sumsqr":82,"extra":"x"},{"sum":1,"count":1,"min":1,"max":1,"sumsqr":1}]"#,
        sum: Want::Ok(r#"{"count":3,"extra":"x","max":10,"min":2,"sum":11,"sumsqr":83}"#),
        stats: Want::Ok(r#"{"sum":11,"count":3,"min":1,"max":9,"sumsqr":83}"#),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "statsobjstr",
        values: r#"[{"a":"q\"x"}]"#,
        sum: Want::Ok(r#"{"a":"q\"x"}"#),
        stats: Want::Invalid(
            r#""user _stats input missing required field sum ([{<<\"a\">>,<<\"q\\\"x\">>}])""#,
        ),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "statsobjuni",
        values: r#"[{"é":1}]"#,
        sum: Want::Ok(r#"{"é":1}"#),
        stats: Want::Invalid(r#""user _stats input missing required field sum ([{<<\"é\">>,1}])""#),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "statsstrlong",
        values: r#"[1,"a fairly long string value that goes past the line width"]"#,
        sum: Want::Ok(
            r#"{"error":"builtin_reduce_error","reason":"The _sum function requires that map values be numbers, arrays of numbers, or objects. Objects cannot be mixed with other data structures. Objects can be arbitrarily nested, provided that the values for all fields are themselves numbers, arrays of numbers, or objects.","caused_by":"a fairly long string value that goes past the line width"}"#,
        ),
        stats: Want::Invalid(
            r#""The _stats function requires that map values be numbers or arrays of numbers, not '<<\"a fairly long string value that goes past the line width\">>'""#,
        ),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "statsuni",
        values: r#"["héllo"]"#,
        sum: Want::Ok(
            r#"{"error":"builtin_reduce_error","reason":"The _sum function requires that map values be numbers, arrays of numbers, or objects. Objects cannot be mixed with other data structures. Objects can be arbitrarily nested, provided that the values for all fields are themselves numbers, arrays of numbers, or objects.","caused_by":"héllo"}"#,
        ),
        stats: Want::Invalid(r#""non-numeric _stats input: <<104,195,169,108,108,111>>""#),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "statsuni2",
        values: r#"[1,"héllo"]"#,
        sum: Want::Ok(
            r#"{"error":"builtin_reduce_error","reason":"The _sum function requires that map values be numbers, arrays of numbers, or objects. Objects cannot be mixed with other data structures. Objects can be arbitrarily nested, provided that the values for all fields are themselves numbers, arrays of numbers, or objects.","caused_by":"héllo"}"#,
        ),
        stats: Want::Invalid(
            r#""The _stats function requires that map values be numbers or arrays of numbers, not '<<\"héllo\">>'""#,
        ),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "p_count",
        values: r#"[{"sum":1,"x":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]}]"#,
        sum: Want::NotRecorded,
        stats: Want::Invalid(
            r#""user _stats input missing required field count ([{<<\"sum\">>,1},\n                                                 {<<\"x\">>,\n                                                  [1,2,3,4,5,6,7,8,9,10,11,12,\n                                                   13,14,15]}])""#,
        ),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "p_ctrl",
        values: r#"[1,"a\nb\tc"]"#,
        sum: Want::NotRecorded,
        stats: Want::Invalid(
            r#""The _stats function requires that map values be numbers or arrays of numbers, not '<<\"a\\nb\\tc\">>'""#,
        ),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "p_empty",
        values: r#"[1,""]"#,
        sum: Want::NotRecorded,
        stats: Want::Invalid(
            r#""The _stats function requires that map values be numbers or arrays of numbers, not '<<>>'""#,
        ),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "p_euro",
        values: r#"[1,"€"]"#,
        sum: Want::NotRecorded,
        stats: Want::Invalid(
            r#""The _stats function requires that map values be numbers or arrays of numbers, not '<<226,130,\n                                                                                     172>>'""#,
        ),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "p_floats",
        values: r#"[1,[1e+21,0.0001,1e-07,123456.5]]"#,
        sum: Want::NotRecorded,
        stats: Want::Invalid(
            r#""The _stats function requires that map values be numbers or arrays of numbers, not '[1.0e21,\n                                                                                    0.0001,\n                                                                                    1.0e-7,\n                                                                                    123456.5]'""#,
        ),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "p_latin",
        values: r#"[1,"ÿ "]"#,
        sum: Want::NotRecorded,
        stats: Want::Invalid(
            r#""The _stats function requires that map values be numbers or arrays of numbers, not '<<\"ÿ \">>'""#,
        ),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "p_many",
        values: r#"[{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6}]"#,
        sum: Want::NotRecorded,
        stats: Want::Invalid(
            r#""user _stats input missing required field sum ([{<<\"a\">>,1},\n                                               {<<\"b\">>,2},\n                                               {<<\"c\">>,3},\n                                               {<<\"d\">>,4},\n                                               {<<\"e\">>,5},\n                                               {<<\"f\">>,6}])""#,
        ),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "p_numlist",
        values: r#"[{"x":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30]}]"#,
        sum: Want::NotRecorded,
        stats: Want::Invalid(
            r#""user _stats input missing required field sum ([{<<\"x\">>,\n                                                [1,2,3,4,5,6,7,8,9,10,11,12,\n                                                 13,14,15,16,17,18,19,20,21,\n                                                 22,23,24,25,26,27,28,29,30]}])""#,
        ),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "p_objv",
        values: r#"[1,[{"a":1}]]"#,
        sum: Want::NotRecorded,
        stats: Want::Invalid(
            r#""The _stats function requires that map values be numbers or arrays of numbers, not '[{[{<<\"a\">>,\n                                                                                       1}]}]'""#,
        ),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "p_strs",
        values: r#"[{"x":["aa","bb","cc","dd","ee","ff","gg","hh","ii","jj","kk","ll"]}]"#,
        sum: Want::NotRecorded,
        stats: Want::Invalid(
            r#""user _stats input missing required field sum ([{<<\"x\">>,\n                                                [<<\"aa\">>,<<\"bb\">>,<<\"cc\">>,\n                                                 <<\"dd\">>,<<\"ee\">>,<<\"ff\">>,\n                                                 <<\"gg\">>,<<\"hh\">>,<<\"ii\">>,\n                                                 <<\"jj\">>,<<\"kk\">>,<<\"ll\">>]}])""#,
        ),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "w_ctrl",
        values: r#"[{"sum":"a\nb"}]"#,
        sum: Want::NotRecorded,
        stats: Want::Invalid(r#""non-numeric _stats input received for sum: <<97,10,98>>""#),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "w_floats",
        values: r#"[{"sum":[1e+21,0.0001,1e-07,123456.5,1.5e+300,0.1,100.5,1e-300,0,1.7976931348623157e+308,12345678901234568]}]"#,
        sum: Want::NotRecorded,
        stats: Want::Invalid(
            r#""non-numeric _stats input received for sum: [1.0e21,0.0001,1.0e-7,123456.5,1.5e300,0.1,100.5,1.0e-300,0,1.7976931348623157e308,12345678901234568]""#,
        ),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "w_negs",
        values: r#"[{"sum":[-1,-2.5]}]"#,
        sum: Want::NotRecorded,
        stats: Want::Invalid(r#""non-numeric _stats input received for sum: [-1,-2.5]""#),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "w_nested",
        values: r#"[{"sum":{"a":[1,{"b":"c"}],"d":null,"e":true,"f":false}}]"#,
        sum: Want::NotRecorded,
        stats: Want::Invalid(
            r#""non-numeric _stats input received for sum: {[{<<97>>,[1,{[{<<98>>,<<99>>}]}]},{<<100>>,null},{<<101>>,true},{<<102>>,false}]}""#,
        ),
        count: Want::NotRecorded,
    },
    Recorded {
        case: "w_unicodekey",
        values: r#"[{"sum":{"é":1}}]"#,
        sum: Want::NotRecorded,
        stats: Want::Invalid(r#""non-numeric _stats input received for sum: {[{<<195,169>>,1}]}""#),
        count: Want::NotRecorded,
    },
];
