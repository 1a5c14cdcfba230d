//! Facts recorded from a 3-node reference CouchDB 3.4.3 cluster
//! (`../shared/reference/couchdb/start-cluster --nodes 3 --base-port 25984`,
//! databases created with `?q=2`, `?q=8`, `?q=3` and `?q=4&partitioned=true`),
//! checked against settee-cluster's layout: the ranges of `GET /{db}/_shards`,
//! the range of `GET /{db}/_shards/{docid}` for each id below, and the
//! `_dbs` documents as `GET /_node/_local/_dbs/{db}` returned them.

use settee_cluster::layout::{self, doc_hash, range_index, ShardMap};

/// `GET /{db}/_shards` range names, per q.
const SHARDS_Q2: &[&str] = &["00000000-7fffffff", "80000000-ffffffff"];
const SHARDS_Q3: &[&str] = &[
    "00000000-55555554",
    "55555555-aaaaaaa9",
    "aaaaaaaa-ffffffff",
];
const SHARDS_Q4: &[&str] = &[
    "00000000-3fffffff",
    "40000000-7fffffff",
    "80000000-bfffffff",
    "c0000000-ffffffff",
];
const SHARDS_Q8: &[&str] = &[
    "00000000-1fffffff",
    "20000000-3fffffff",
    "40000000-5fffffff",
    "60000000-7fffffff",
    "80000000-9fffffff",
    "a0000000-bfffffff",
    "c0000000-dfffffff",
    "e0000000-ffffffff",
];

/// (doc id, range in the q=2 db, in the q=8 db, in the q=3 db), from
/// `GET /{db}/_shards/{docid}`.
const DOC_RANGES: &[(&str, &str, &str, &str)] = &[
    (
        "a",
        "80000000-ffffffff",
        "e0000000-ffffffff",
        "aaaaaaaa-ffffffff",
    ),
    (
        "b",
        "00000000-7fffffff",
        "60000000-7fffffff",
        "55555555-aaaaaaa9",
    ),
    (
        "foo",
        "80000000-ffffffff",
        "80000000-9fffffff",
        "55555555-aaaaaaa9",
    ),
    (
        "bar",
        "00000000-7fffffff",
        "60000000-7fffffff",
        "55555555-aaaaaaa9",
    ),
    (
        "doc1",
        "80000000-ffffffff",
        "c0000000-dfffffff",
        "aaaaaaaa-ffffffff",
    ),
    (
        "doc2",
        "00000000-7fffffff",
        "40000000-5fffffff",
        "00000000-55555554",
    ),
    (
        "doc-00042",
        "80000000-ffffffff",
        "e0000000-ffffffff",
        "aaaaaaaa-ffffffff",
    ),
    (
        "0",
        "80000000-ffffffff",
        "e0000000-ffffffff",
        "aaaaaaaa-ffffffff",
    ),
    (
        "1",
        "80000000-ffffffff",
        "80000000-9fffffff",
        "55555555-aaaaaaa9",
    ),
    (
        "42",
        "00000000-7fffffff",
        "20000000-3fffffff",
        "00000000-55555554",
    ),
    (
        "_design/app",
        "80000000-ffffffff",
        "80000000-9fffffff",
        "55555555-aaaaaaa9",
    ),
    (
        "hello world",
        "00000000-7fffffff",
        "00000000-1fffffff",
        "00000000-55555554",
    ),
    (
        "ünïcødé",
        "80000000-ffffffff",
        "e0000000-ffffffff",
        "aaaaaaaa-ffffffff",
    ),
    (
        "日本語",
        "80000000-ffffffff",
        "a0000000-bfffffff",
        "55555555-aaaaaaa9",
    ),
    (
        "user:alice",
        "80000000-ffffffff",
        "80000000-9fffffff",
        "55555555-aaaaaaa9",
    ),
    (
        "user:bob",
        "00000000-7fffffff",
        "00000000-1fffffff",
        "00000000-55555554",
    ),
    (
        "sensor-17:2024-01-01",
        "80000000-ffffffff",
        "c0000000-dfffffff",
        "aaaaaaaa-ffffffff",
    ),
    (
        "UPPER",
        "80000000-ffffffff",
        "80000000-9fffffff",
        "55555555-aaaaaaa9",
    ),
    (
        "with/slash",
        "80000000-ffffffff",
        "a0000000-bfffffff",
        "55555555-aaaaaaa9",
    ),
];
/// 300 times "x": q=2, q=8, q=3.
const LONG_ID_RANGES: (&str, &str, &str) = (
    "00000000-7fffffff",
    "00000000-1fffffff",
    "00000000-55555554",
);

/// (doc id, range) in the partitioned q=4 db: ids of one partition share a
/// range; design documents hash whole.
const PARTITIONED_RANGES: &[(&str, &str)] = &[
    ("user:alice", "80000000-bfffffff"),
    ("user:bob", "80000000-bfffffff"),
    ("user:carol", "80000000-bfffffff"),
    ("sensor-17:2024-01-01", "40000000-7fffffff"),
    ("sensor-17:2024-01-02", "40000000-7fffffff"),
    ("_design/app", "80000000-bfffffff"),
    ("a:b", "c0000000-ffffffff"),
    ("日本:語", "c0000000-ffffffff"),
];

/// `GET /_node/_local/_dbs/l38q2`, as CouchDB returned it.
const DBS_DOC_Q2: &str = r#"{"_id":"l38q2","_rev":"1-d5ae2621a6ab94b4cde841c02a7e3426","shard_suffix":[46,49,55,57,54,52,55,53,55,56,50],"changelog":[["add","00000000-7fffffff","couchdb25984@127.0.0.1"],["add","00000000-7fffffff","couchdb25985@127.0.0.1"],["add","00000000-7fffffff","couchdb25986@127.0.0.1"],["add","80000000-ffffffff","couchdb25984@127.0.0.1"],["add","80000000-ffffffff","couchdb25985@127.0.0.1"],["add","80000000-ffffffff","couchdb25986@127.0.0.1"]],"by_node":{"couchdb25984@127.0.0.1":["00000000-7fffffff","80000000-ffffffff"],"couchdb25985@127.0.0.1":["00000000-7fffffff","80000000-ffffffff"],"couchdb25986@127.0.0.1":["00000000-7fffffff","80000000-ffffffff"]},"by_range":{"00000000-7fffffff":["couchdb25984@127.0.0.1","couchdb25985@127.0.0.1","couchdb25986@127.0.0.1"],"80000000-ffffffff":["couchdb25984@127.0.0.1","couchdb25985@127.0.0.1","couchdb25986@127.0.0.1"]},"props":{}}"#;

/// `GET /_node/_local/_dbs/l38n1` (`?q=8&n=1`), by_node and by_range only.
const DBS_DOC_N1: &str = r#"{"_id":"l38n1","shard_suffix":[46,49,55,57,54,52,55,53,55,56,56],"by_node":{"couchdb25984@127.0.0.1":["40000000-5fffffff","a0000000-bfffffff"],"couchdb25985@127.0.0.1":["20000000-3fffffff","80000000-9fffffff","e0000000-ffffffff"],"couchdb25986@127.0.0.1":["00000000-1fffffff","60000000-7fffffff","c0000000-dfffffff"]},"by_range":{"00000000-1fffffff":["couchdb25986@127.0.0.1"],"20000000-3fffffff":["couchdb25985@127.0.0.1"],"40000000-5fffffff":["couchdb25984@127.0.0.1"],"60000000-7fffffff":["couchdb25986@127.0.0.1"],"80000000-9fffffff":["couchdb25985@127.0.0.1"],"a0000000-bfffffff":["couchdb25984@127.0.0.1"],"c0000000-dfffffff":["couchdb25986@127.0.0.1"],"e0000000-ffffffff":["couchdb25985@127.0.0.1"]},"props":{}}"#;

/// The props of the partitioned database's `_dbs` document.
const DBS_PROPS_PARTITIONED: &str = r#"{"partitioned":true,"hash":["couch_partition","hash",[]]}"#;

/// Shard file names `GET /_node/couchdb25984@127.0.0.1/_all_dbs` listed.
const SHARD_FILES: &[&str] = &[
    "shards/00000000-7fffffff/l38q2.1796475782",
    "shards/55555555-aaaaaaa9/l38q3.1796475782",
    "shards/e0000000-ffffffff/l38q8.1796475782",
];

fn names(q: u32) -> Vec<String> {
    layout::ranges(q)
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect()
}

fn range_of(q: u32, id: &str, partitioned: bool) -> String {
    let rs = layout::ranges(q).unwrap();
    rs[range_index(&rs, doc_hash(id, partitioned)).unwrap()].to_string()
}

#[test]
fn ranges_are_couchdbs() {
    assert_eq!(names(2), SHARDS_Q2);
    assert_eq!(names(3), SHARDS_Q3);
    assert_eq!(names(4), SHARDS_Q4);
    assert_eq!(names(8), SHARDS_Q8);
}

#[test]
fn each_id_lands_in_couchdbs_range() {
    for (id, q2, q8, q3) in DOC_RANGES {
        assert_eq!(range_of(2, id, false), *q2, "{id} q=2");
        assert_eq!(range_of(8, id, false), *q8, "{id} q=8");
        assert_eq!(range_of(3, id, false), *q3, "{id} q=3");
    }
    let long = "x".repeat(300);
    assert_eq!(
        (
            range_of(2, &long, false),
            range_of(8, &long, false),
            range_of(3, &long, false)
        ),
        (
            LONG_ID_RANGES.0.to_string(),
            LONG_ID_RANGES.1.to_string(),
            LONG_ID_RANGES.2.to_string()
        )
    );
    for (id, r) in PARTITIONED_RANGES {
        assert_eq!(range_of(4, id, true), *r, "{id} partitioned q=4");
    }
}

#[test]
fn couchdbs_dbs_documents_parse_and_validate() {
    let m: ShardMap = serde_json::from_str(DBS_DOC_Q2).unwrap();
    m.validate().unwrap();
    assert_eq!(m.db, "l38q2");
    assert_eq!(m.shard_suffix, ".1796475782");
    assert_eq!(m.q(), 2);
    assert_eq!(m.shard_name(m.ranges()[0]), SHARD_FILES[0]);
    let (r, nodes) = m.shard_of("foo").unwrap();
    assert_eq!(r.to_string(), "80000000-ffffffff");
    assert_eq!(nodes.len(), 3);

    // Ours, made for the same nodes, q, n and time, is the same document
    // but for `_rev` (CouchDB lists each range's nodes sorted, as we do).
    let nodes: Vec<String> = m.by_node.keys().cloned().collect();
    let ours = ShardMap::new("l38q2", 2, 3, &nodes, 1796475782, false).unwrap();
    let mut theirs: serde_json::Value = serde_json::from_str(DBS_DOC_Q2).unwrap();
    theirs.as_object_mut().unwrap().remove("_rev");
    assert_eq!(serde_json::to_value(&ours).unwrap(), theirs);

    // n=1 over 3 nodes: CouchDB's round-robin (its rotation is random,
    // ours is by the name's hash, so the same shape, not the same nodes).
    let n1: ShardMap = serde_json::from_str(DBS_DOC_N1).unwrap();
    n1.validate().unwrap();
    let mut held: Vec<usize> = n1.by_node.values().map(Vec::len).collect();
    held.sort();
    assert_eq!(held, [2, 3, 3]);
    let ours = ShardMap::new("l38n1", 8, 1, &nodes, 0, false).unwrap();
    let mut held: Vec<usize> = ours.by_node.values().map(Vec::len).collect();
    held.sort();
    assert_eq!(held, [2, 3, 3]);

    let p = ShardMap::new("l38p", 4, 3, &nodes, 1796475782, true).unwrap();
    assert_eq!(
        serde_json::to_string(&p.props).unwrap(),
        DBS_PROPS_PARTITIONED
    );
    assert_eq!(
        p.shard_of("user:carol").unwrap().0.to_string(),
        "80000000-bfffffff"
    );
}

#[test]
fn shard_file_names_parse() {
    for name in SHARD_FILES {
        let (r, db, suffix) = layout::parse_shard_name(name).unwrap();
        assert_eq!(layout::shard_name(r, db, suffix), *name);
        assert_eq!(suffix, ".1796475782");
    }
}
