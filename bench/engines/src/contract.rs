//! A quick check that a store keeps the [`Store`] contract the document
//! layer relies on (run before every benchmark, and by `--check`): atomic
//! batches in several keyspaces, snapshots isolated from later writes, scans
//! in unsigned byte order both ways with `[from, to)` bounds and early stop,
//! reads from inside a scan's visitor, range deletes, `multi_get` order,
//! `sync`, and synced writes surviving a reopen.

use std::path::Path;
use std::sync::Arc;

use settee_store::{Batch, Keyspace, Snapshot, Store};

use crate::stores::EngineKind;

type Check = Result<(), String>;

fn ensure(cond: bool, what: &str) -> Check {
    if cond {
        Ok(())
    } else {
        Err(format!("contract violated: {what}"))
    }
}

fn e<E: std::fmt::Display>(err: E) -> String {
    format!("store error: {err}")
}

fn keys(
    snap: &dyn Snapshot,
    ks: Keyspace,
    from: &[u8],
    to: &[u8],
    reverse: bool,
    max: usize,
) -> Result<Vec<Vec<u8>>, String> {
    let mut out = Vec::new();
    snap.scan(ks, from, to, reverse, &mut |k, _| {
        out.push(k.to_vec());
        out.len() < max
    })
    .map_err(e)?;
    Ok(out)
}

fn writes_and_scans(s: &dyn Store) -> Check {
    let mut b = Batch::new();
    for k in [0x00u8, 0x01, 0x7f, 0x80, 0xfe, 0xff] {
        b.put(Keyspace::Seqs, vec![k], vec![k, k]);
    }
    b.put(Keyspace::Docs, b"a".to_vec(), b"1".to_vec());
    b.put(Keyspace::Bodies, b"a".to_vec(), Vec::new());
    s.write(b, true).map_err(e)?;
    ensure(
        s.get(Keyspace::Docs, b"a").map_err(e)? == Some(b"1".to_vec()),
        "get after synced write",
    )?;
    ensure(
        s.get(Keyspace::Bodies, b"a").map_err(e)? == Some(Vec::new()),
        "empty value",
    )?;
    ensure(
        s.get(Keyspace::Meta, b"a").map_err(e)?.is_none(),
        "keyspaces are separate",
    )?;

    let snap = s.snapshot();
    let mut b = Batch::new();
    b.delete_range(Keyspace::Seqs, vec![0x01], vec![0xfe]);
    b.delete(Keyspace::Docs, b"a".to_vec());
    b.put(Keyspace::Docs, b"b".to_vec(), b"2".to_vec());
    s.write(b, false).map_err(e)?;

    let all = keys(
        &*snap,
        Keyspace::Seqs,
        &[0x00],
        &[0xff, 0xff],
        false,
        usize::MAX,
    )?;
    ensure(
        all == [[0x00], [0x01], [0x7f], [0x80], [0xfe], [0xff]],
        "snapshot isolation / unsigned order",
    )?;
    let rev = keys(&*snap, Keyspace::Seqs, &[0x01], &[0xfe], true, usize::MAX)?;
    ensure(
        rev == [[0x80], [0x7f], [0x01]],
        "reverse scan within [from, to)",
    )?;
    ensure(
        keys(&*snap, Keyspace::Seqs, &[0x00], &[0xff], false, 2)? == [[0x00], [0x01]],
        "early stop",
    )?;
    ensure(
        keys(&*snap, Keyspace::Seqs, &[0x80], &[0x80], false, 9)?.is_empty(),
        "empty range",
    )?;
    // Bounds longer than any stored key (LMDB cannot seek to them directly).
    let (lo, hi) = ([0x7fu8; 600], [0xffu8; 600]);
    ensure(
        keys(&*snap, Keyspace::Seqs, &lo, &hi, false, 9)? == [[0x80], [0xfe], [0xff]],
        "long bounds",
    )?;
    ensure(
        keys(&*snap, Keyspace::Seqs, &lo, &hi, true, 9)? == [[0xff], [0xfe], [0x80]],
        "long bounds, reverse",
    )?;
    ensure(
        keys(&*snap, Keyspace::Seqs, b"", &[0x01], false, 9)? == [[0x00]],
        "empty lower bound",
    )?;
    ensure(
        snap.get(Keyspace::Seqs, &hi).map_err(e)?.is_none(),
        "get of a long absent key",
    )?;
    ensure(
        snap.get(Keyspace::Docs, b"a").map_err(e)? == Some(b"1".to_vec()),
        "snapshot keeps deleted key",
    )?;
    ensure(
        snap.get(Keyspace::Docs, b"b").map_err(e)?.is_none(),
        "snapshot hides later put",
    )?;

    // The document layer reads bodies from inside a scan's visitor.
    let mut nested = Vec::new();
    snap.scan(Keyspace::Docs, b"", b"\xff", false, &mut |k, _| {
        nested.push(snap.get(Keyspace::Bodies, k));
        true
    })
    .map_err(e)?;
    ensure(
        matches!(nested.as_slice(), [Ok(Some(v))] if v.is_empty()),
        "get inside a scan",
    )?;

    let now = s.snapshot();
    let live = keys(
        &*now,
        Keyspace::Seqs,
        &[0x00],
        &[0xff, 0xff],
        false,
        usize::MAX,
    )?;
    ensure(live == [[0x00], [0xfe], [0xff]], "delete_range [from, to)")?;
    let got = s
        .multi_get(Keyspace::Docs, &[b"b", b"a", b"zz"])
        .map_err(e)?;
    ensure(got == [Some(b"2".to_vec()), None, None], "multi_get order")?;
    s.sync().map_err(e)
}

/// Runs the contract checks on a fresh store of `kind` in `dir`.
pub fn check(kind: EngineKind, dir: &Path) -> Check {
    {
        let s: Arc<dyn Store> = kind.open(dir).map_err(e)?;
        writes_and_scans(&*s)?;
        let mut b = Batch::new();
        b.put(Keyspace::Meta, b"durable".to_vec(), b"yes".to_vec());
        s.write(b, true).map_err(e)?;
    }
    let s = kind.open(dir).map_err(e)?;
    ensure(
        s.get(Keyspace::Meta, b"durable").map_err(e)? == Some(b"yes".to_vec()),
        "synced write survives reopen",
    )?;
    ensure(
        s.get(Keyspace::Docs, b"b").map_err(e)? == Some(b"2".to_vec()),
        "synced-after write survives reopen",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_engine_keeps_the_contract() {
        for kind in EngineKind::ALL {
            let dir = std::env::temp_dir().join(format!(
                "settee-bench-contract-{}-{}",
                kind.name(),
                std::process::id()
            ));
            let _ = std::fs::remove_dir_all(&dir);
            let r = check(kind, &dir);
            let _ = std::fs::remove_dir_all(&dir);
            assert_eq!(r, Ok(()), "{}", kind.name());
        }
    }
}
