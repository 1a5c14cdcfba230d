//! Database names and document ids: CouchDB's naming rules.
//!
//! Invariant: a name accepted here is safe to use as a storage key component
//! and as a URL path segment after percent-encoding; nothing else checks names.

use thiserror::Error;

/// Longest database name accepted (CouchDB allows 238 bytes).
pub const DB_NAME_BYTES_MAX: usize = 238;
/// Longest document id accepted. CouchDB's default is unbounded; we bound it
/// so that keys stay small and a hostile client cannot make huge index keys.
pub const DOC_ID_BYTES_MAX: usize = 4096;

/// Databases CouchDB creates for itself; their names start with `_`.
pub const SYSTEM_DBS: &[&str] = &["_users", "_replicator", "_global_changes"];

/// Prefix of design document ids.
pub const DESIGN_PREFIX: &str = "_design/";
/// Prefix of local (non-replicated, unversioned) document ids.
pub const LOCAL_PREFIX: &str = "_local/";

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum NameError {
    #[error("Name: '{0}'. Only lowercase characters (a-z), digits (0-9), and any of the characters _, $, (, ), +, -, and / are allowed. Must begin with a letter.")]
    IllegalDbName(String),
    #[error("At least one path segment of `{0}` is too long.")]
    DbNameTooLong(String),
    #[error("Document id must not be empty")]
    EmptyDocId,
    #[error("Only reserved document ids may start with underscore.")]
    ReservedDocId,
    #[error("Document id is too long (limit {DOC_ID_BYTES_MAX} bytes)")]
    DocIdTooLong,
    /// An `_id` member that is not a JSON string.
    #[error("Document id must be a string")]
    NotString,
    /// An id without a partition in a partitioned database.
    #[error("Doc id must be of form partition:id")]
    NotPartitioned,
    #[error("Partition must not be empty")]
    EmptyPartition,
    #[error("Partition must not start with an underscore")]
    PartitionUnderscore,
}

/// Checks a database name against `^[a-z][a-z0-9_$()+/-]*$` (or a system db).
pub fn validate_db_name(name: &str) -> Result<(), NameError> {
    if SYSTEM_DBS.contains(&name) {
        return Ok(());
    }
    let bad = || NameError::IllegalDbName(name.to_string());
    if name.len() > DB_NAME_BYTES_MAX {
        return Err(NameError::DbNameTooLong(name.to_string()));
    }
    if name.is_empty() {
        return Err(bad());
    }
    let mut bytes = name.bytes();
    match bytes.next() {
        Some(b'a'..=b'z') => {}
        _ => return Err(bad()),
    }
    if bytes.all(
        |b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'$' | b'(' | b')' | b'+' | b'-' | b'/'),
    ) {
        Ok(())
    } else {
        Err(bad())
    }
}

/// Whether `name` is a shard copy's database name as CouchDB names shard
/// files: `shards/BEGIN-END/DB.SUFFIX`, BEGIN and END 8 lowercase hex
/// digits, DB a legal database name and SUFFIX 1 to 20 decimal digits.
/// No database name a client may use has a `.`, so these never collide
/// with one; only the engine (for a cluster node's own copies) takes them.
pub fn is_shard_db_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("shards/") else {
        return false;
    };
    let b = rest.as_bytes();
    let hex = |s: &[u8]| s.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'));
    if b.len() < 19 || !hex(&b[..8]) || b[8] != b'-' || !hex(&b[9..17]) || b[17] != b'/' {
        return false;
    }
    let Some((db, suffix)) = rest[18..].rsplit_once('.') else {
        return false;
    };
    !suffix.is_empty()
        && suffix.len() <= 20
        && suffix.bytes().all(|c| c.is_ascii_digit())
        && validate_db_name(db).is_ok()
        && name.len() <= DB_NAME_BYTES_MAX + 40
}

/// What kind of document an id names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DocKind {
    Normal,
    Design,
    Local,
}

/// Checks a document id (including `_design/` and `_local/` ids) and says
/// what kind of document it names.
pub fn validate_doc_id(id: &str) -> Result<DocKind, NameError> {
    if id.is_empty() {
        return Err(NameError::EmptyDocId);
    }
    if id.len() > DOC_ID_BYTES_MAX {
        return Err(NameError::DocIdTooLong);
    }
    if !id.starts_with('_') {
        return Ok(DocKind::Normal);
    }
    if let Some(rest) = id.strip_prefix(DESIGN_PREFIX) {
        if !rest.is_empty() {
            return Ok(DocKind::Design);
        }
    }
    if let Some(rest) = id.strip_prefix(LOCAL_PREFIX) {
        if !rest.is_empty() {
            return Ok(DocKind::Local);
        }
    }
    Err(NameError::ReservedDocId)
}

/// Checks a document id of a partitioned database: design and local ids
/// as everywhere, every other one `PARTITION:ID` with a valid partition
/// (see [`validate_partition`]) and a valid id after the first colon.
pub fn validate_partitioned_doc_id(id: &str) -> Result<DocKind, NameError> {
    let kind = validate_doc_id(id)?;
    if kind != DocKind::Normal {
        return Ok(kind);
    }
    let (partition, rest) = id.split_once(':').ok_or(NameError::NotPartitioned)?;
    validate_partition(partition)?;
    validate_doc_id(rest)?;
    Ok(kind)
}

/// Checks a partition name: not empty, not starting with an underscore.
pub fn validate_partition(partition: &str) -> Result<(), NameError> {
    if partition.is_empty() {
        return Err(NameError::EmptyPartition);
    }
    if partition.starts_with('_') {
        return Err(NameError::PartitionUnderscore);
    }
    Ok(())
}

/// The partition of a document id (`None` for an id without a colon).
pub fn partition_of(id: &str) -> Option<&str> {
    id.split_once(':').map(|(p, _)| p)
}

/// The id range `[lo, hi)` of a partition's documents: `P:` up to `P;`.
pub fn partition_range(partition: &str) -> (String, String) {
    (format!("{partition}:"), format!("{partition};"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_db_names() {
        assert!(is_shard_db_name("shards/00000000-7fffffff/db.1796475782"));
        assert!(is_shard_db_name("shards/80000000-ffffffff/a/b$c.1"));
        for bad in [
            "shards/00000000-7fffffff/db",
            "shards/00000000-7fffffff/db.",
            "shards/00000000-7fffffff/db.12a",
            "shards/0000000-7fffffff/db.1",
            "shards/00000000-7FFFFFFF/db.1",
            "shards/00000000-7fffffff/Db.1",
            "shards/00000000-7fffffff/.1",
            "shards/00000000-7fffffffdb.1",
            "db.1",
            "shards/",
        ] {
            assert!(!is_shard_db_name(bad), "{bad}");
            assert!(
                validate_db_name(bad).is_err() || !bad.contains('.'),
                "{bad}"
            );
        }
    }

    #[test]
    fn db_names() {
        for ok in ["a", "abc", "a1_$()+-/b", "_users", "_replicator"] {
            assert_eq!(validate_db_name(ok), Ok(()), "{ok}");
        }
        for bad in ["", "A", "1a", "_foo", "a b", "aé", "a.b", &"a".repeat(239)] {
            assert!(validate_db_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn partitioned_doc_ids() {
        use NameError::*;
        for (id, want) in [
            ("p:a", Ok(DocKind::Normal)),
            ("p:a:b", Ok(DocKind::Normal)),
            ("_design/d", Ok(DocKind::Design)),
            ("_local/l", Ok(DocKind::Local)),
            ("nocolon", Err(NotPartitioned)),
            (":x", Err(EmptyPartition)),
            ("p:", Err(EmptyDocId)),
            ("_x:y", Err(ReservedDocId)),
            ("p:_y", Err(ReservedDocId)),
        ] {
            assert_eq!(validate_partitioned_doc_id(id), want, "{id}");
        }
        assert_eq!(validate_partition("_x"), Err(PartitionUnderscore));
        assert_eq!(partition_of("a:b:c"), Some("a"));
        let (lo, hi) = partition_range("a");
        assert!(lo.as_str() < "a:zzz" && "a:zzz" < hi.as_str() && "a;" >= hi.as_str());
    }

    #[test]
    fn doc_ids() {
        assert_eq!(validate_doc_id("x"), Ok(DocKind::Normal));
        assert_eq!(validate_doc_id("_design/x"), Ok(DocKind::Design));
        assert_eq!(validate_doc_id("_local/x"), Ok(DocKind::Local));
        assert_eq!(validate_doc_id(""), Err(NameError::EmptyDocId));
        assert_eq!(validate_doc_id("_foo"), Err(NameError::ReservedDocId));
        assert_eq!(validate_doc_id("_design/"), Err(NameError::ReservedDocId));
        assert_eq!(
            validate_doc_id(&"x".repeat(5000)),
            Err(NameError::DocIdTooLong)
        );
    }
}
