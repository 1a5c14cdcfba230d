//! Attachments through the embedded API: inline bytes stored as blobs,
//! stubs kept across updates, `missing_stub`, content stored once,
//! compression of compressible types, and garbage collection of bodies
//! no revision names (including uploads that never finished).

use std::sync::Arc;

use serde_json::{json, Value};
use settee_core::att::{self, AttStub};
use settee_core::doc::Doc;
use settee_db::{Database, DocFailure, Engine, EngineOptions, Error, GetOptions, UpdateOptions};
use settee_store::mem::MemStore;
use settee_store::{Keyspace, Store};

fn engine(grace_ms: u64) -> (Engine, Arc<MemStore>) {
    let store = Arc::new(MemStore::new());
    let opts = EngineOptions {
        blob_grace_ms: grace_ms,
        ..EngineOptions::default()
    };
    (Engine::with_store(store.clone(), opts), store)
}

fn doc(v: Value) -> Doc {
    Doc::from_json(v, || "generated".into()).unwrap()
}

fn stubs(db: &Database, id: &str) -> Vec<(String, AttStub)> {
    let read = db
        .reader()
        .unwrap()
        .get(id, &GetOptions::default())
        .unwrap();
    att::stored_stubs(read.body.as_str()).unwrap()
}

fn bytes_of(db: &Database, stub: &AttStub) -> Vec<u8> {
    db.blobs()
        .open(&stub.md5().unwrap())
        .unwrap()
        .expect("stored")
        .read_all()
        .unwrap()
}

fn blob_keys(store: &MemStore) -> usize {
    let mut n = 0;
    store
        .snapshot()
        .scan(Keyspace::Blobs, &[], &[0xff; 9], false, &mut |_, _| {
            n += 1;
            true
        })
        .unwrap();
    n
}

#[test]
fn inline_bytes_are_stored_and_stubs_carry_over() {
    let (e, _) = engine(600_000);
    let db = e.create_db("a").unwrap();
    let r1 = db
        .put(doc(json!({"_id": "d", "x": 1, "_attachments": {
            "b.bin": {"content_type": "application/octet-stream", "data": "AAEC"}}})))
        .unwrap();
    let s = stubs(&db, "d");
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].1.digest, "md5-uV9n9h67A2GWIteY9F/C0w==");
    assert_eq!((s[0].1.revpos, s[0].1.length), (1, 3));
    assert_eq!(bytes_of(&db, &s[0].1), vec![0, 1, 2]);

    // A stub keeps the attachment; a new one gets the new position.
    let r2 = db
        .put(doc(json!({"_id": "d", "_rev": r1.to_string(), "_attachments": {
            "b.bin": {"stub": true},
            "t.txt": {"content_type": "text/plain", "data": "aGVsbG8gaGVsbG8gaGVsbG8gaGVsbG8gaGVsbG8gaGVsbG8="}}})))
        .unwrap();
    let s = stubs(&db, "d");
    assert_eq!(
        s.iter()
            .map(|(n, a)| (n.as_str(), a.revpos))
            .collect::<Vec<_>>(),
        [("b.bin", 1), ("t.txt", 2)]
    );
    // text/plain is compressible: stored gzip-encoded, digest of the stored bytes.
    let t = &s[1].1;
    assert_eq!(t.encoding.as_deref(), Some("gzip"));
    assert_eq!(t.length, 35);
    let stored = bytes_of(&db, t);
    assert_eq!(Some(stored.len() as u64), t.encoded_length);
    let mut plain = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&stored[..]), &mut plain).unwrap();
    assert_eq!(plain, b"hello hello hello hello hello hello");

    // A stub the parent lacks, or with a wrong revpos: missing_stub.
    for bad in [
        json!({"zz": {"stub": true}}),
        json!({"b.bin": {"stub": true, "revpos": 2}}),
    ] {
        let err = db
            .put(doc(
                json!({"_id": "d", "_rev": r2.to_string(), "_attachments": bad}),
            ))
            .unwrap_err();
        assert!(
            matches!(err, Error::Doc(DocFailure::MissingStub(ref r)) if r.starts_with("Invalid attachment stub in d for ")),
            "{err:?}"
        );
    }
    // An update without _attachments drops them.
    db.put(doc(json!({"_id": "d", "_rev": r2.to_string(), "y": 2})))
        .unwrap();
    assert!(stubs(&db, "d").is_empty());
}

#[test]
fn identical_content_is_stored_once_and_garbage_is_collected() {
    let (e, store) = engine(0);
    let db = e.create_db("a").unwrap();
    let data = base64_of(&vec![7u8; 300_000]);
    for id in ["one", "two"] {
        db.put(doc(
            json!({"_id": id, "_attachments": {"f": {"data": data}}}),
        ))
        .unwrap();
    }
    // One header and its chunks (300,000 bytes in 128 KiB chunks: 3).
    assert_eq!(blob_keys(&store), 4);
    assert_eq!(stubs(&db, "one")[0].1.digest, stubs(&db, "two")[0].1.digest);

    // An upload that never finished (the process died) leaves chunks no
    // header names; while it runs, they are kept.
    let mut w = db.blobs().writer().unwrap();
    w.write_bytes(&vec![1u8; 200_000]).unwrap();
    std::mem::forget(w);
    assert_eq!(blob_keys(&store), 5);
    assert_eq!(db.collect_blobs().unwrap().orphans, 0);
    e.shutdown();
    drop((db, e));
    let e = Engine::with_store(
        store.clone(),
        EngineOptions {
            blob_grace_ms: 0,
            ..EngineOptions::default()
        },
    );
    let db = e.db("a").unwrap();

    // Still named by "two": kept; the abandoned chunk goes.
    let rev = db
        .reader()
        .unwrap()
        .get("one", &GetOptions::default())
        .unwrap()
        .rev;
    db.put(doc(
        json!({"_id": "one", "_rev": rev.to_string(), "_deleted": true}),
    ))
    .unwrap();
    let c = db.collect_blobs().unwrap();
    assert_eq!((c.blobs, c.orphans), (0, 1));
    assert_eq!(blob_keys(&store), 4);

    let rev = db
        .reader()
        .unwrap()
        .get("two", &GetOptions::default())
        .unwrap()
        .rev;
    db.update(
        vec![doc(json!({"_id": "two", "_rev": rev.to_string(), "x": 1}))],
        UpdateOptions::default(),
    )
    .unwrap();
    // The old revision's body still names it until compaction drops it.
    db.compact_now().unwrap();
    assert_eq!(blob_keys(&store), 0);
}

#[test]
fn a_young_unnamed_blob_is_kept() {
    let (e, store) = engine(600_000);
    let db = e.create_db("a").unwrap();
    db.blobs().put(b"just uploaded").unwrap();
    let c = db.collect_blobs().unwrap();
    assert_eq!((c.blobs, c.orphans), (0, 0));
    assert_eq!(blob_keys(&store), 2);
}

fn base64_of(b: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(b)
}

/// Bytes of RocksDB blob files under `dir`.
fn blob_file_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| {
            let p = e.path();
            if p.is_dir() {
                blob_file_bytes(&p)
            } else if p.extension().is_some_and(|x| x == "blob") {
                e.metadata().map_or(0, |m| m.len())
            } else {
                0
            }
        })
        .sum()
}

#[test]
fn compaction_gives_back_the_space_of_deleted_attachments_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let opts = EngineOptions {
        blob_grace_ms: 0,
        ..EngineOptions::default()
    };
    let e = Engine::open(dir.path(), opts).unwrap();
    let db = e.create_db("a").unwrap();
    let mut x = 1u64;
    let bytes: Vec<u8> = (0..6_000_000)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 56) as u8
        })
        .collect();
    let rev = db
        .put(doc(
            json!({"_id": "d", "_attachments": {"f": {"data": base64_of(&bytes)}}}),
        ))
        .unwrap();
    db.compact_now().unwrap();
    let before = blob_file_bytes(dir.path());
    assert!(before > 5_000_000, "{before}");
    db.put(doc(
        json!({"_id": "d", "_rev": rev.to_string(), "_deleted": true}),
    ))
    .unwrap();
    db.compact_now().unwrap();
    let after = blob_file_bytes(dir.path());
    assert!(after < 1_000_000, "blob files {before} → {after} bytes");
}

#[test]
fn a_small_attachment_is_stored_with_its_revision_or_not_at_all() {
    let (e, store) = engine(600_000);
    let db = e.create_db("w").unwrap();
    let r1 = db
        .put(doc(json!({"_id": "d", "_attachments": {
            "a.bin": {"content_type": "application/octet-stream", "data": base64_of(b"first")}}})))
        .unwrap();
    assert_eq!(bytes_of(&db, &stubs(&db, "d")[0].1), b"first");
    // Header and chunk, written by the revision's own write.
    assert_eq!(blob_keys(&store), 2);
    // A refused revision (a conflict: the first revision is not the
    // parent given) stores nothing of its attachment.
    db.put(doc(json!({"_id": "d", "_rev": r1.to_string(), "v": 2})))
        .unwrap();
    let err = db
        .put(doc(
            json!({"_id": "d", "_rev": r1.to_string(), "_attachments": {
            "b.bin": {"content_type": "application/octet-stream", "data": base64_of(b"refused")}}}),
        ))
        .unwrap_err();
    assert!(matches!(err, Error::Doc(DocFailure::Conflict)), "{err:?}");
    let refused: [u8; 16] =
        md5::Digest::finalize(<md5::Md5 as md5::Digest>::new_with_prefix(b"refused")).into();
    assert!(!db.blobs().contains(&refused).unwrap());
    assert_eq!(blob_keys(&store), 2);
    // The same content attached again adds no blob.
    db.put(doc(json!({"_id": "e", "_attachments": {
        "a.bin": {"content_type": "application/octet-stream", "data": base64_of(b"first")}}})))
        .unwrap();
    assert_eq!(blob_keys(&store), 2);
}

#[test]
fn external_size_counts_attachment_lengths() {
    let (e, _) = engine(600_000);
    let db = e.create_db("s").unwrap();
    let r1 = db.put(doc(json!({"_id": "d", "x": 1}))).unwrap();
    let plain = db.info().unwrap().sizes.external;
    let data = vec![7u8; 5000];
    db.put(doc(
        json!({"_id": "d", "_rev": r1.to_string(), "x": 1, "_attachments": {
        "a.bin": {"content_type": "application/octet-stream", "data": base64_of(&data)}}}),
    ))
    .unwrap();
    let with = db.info().unwrap().sizes.external;
    // The body grows by its stub too; the attachment counts its length.
    assert!(with >= plain + 5000, "{plain} then {with}");
    assert!(with < plain + 5000 + 300, "{plain} then {with}");
    assert!(db.info().unwrap().sizes.active >= with);
}
