//! Blob files a crash left unfinished, and their removal at open.
//!
//! A flush or compaction that writes values to a RocksDB blob file and is
//! killed before it finishes leaves the file without its footer. Nothing
//! names such a file (a blob file enters the store's version only after
//! its footer is written and synced), yet RocksDB keeps every footer-less
//! blob file when it purges obsolete files, at open too (it cannot tell
//! them from files its direct-write mode is still writing; we never use
//! that mode). Left alone, each crash during a large attachment upload
//! would leak up to one blob file per running flush or compaction.
//!
//! Invariants:
//! - Only files found before the store is opened are candidates: no
//!   process had the store open then (RocksDB's lock), so none was being
//!   written.
//! - A candidate is removed after the store opened only if it is still
//!   footer-less and untouched since (same inode, length and modification
//!   time): a file number recovery reused for a new file is never removed.

use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// A blob log file's header and footer lengths, and the magic number that
/// opens its footer (RocksDB's `BlobLogHeader::kSize`, `BlobLogFooter`).
const HEADER_LEN: u64 = 30;
const FOOTER_LEN: u64 = 32;
const MAGIC: u32 = 0x0024_8f37;

/// A footer-less blob file as found before the store was opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unfinished {
    path: PathBuf,
    len: u64,
    ino: u64,
    modified: Option<SystemTime>,
}

/// The footer-less blob files in the store directory `dir`.
pub(crate) fn find(dir: &Path) -> Vec<Unfinished> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let path = e.path();
        if path.extension().is_none_or(|x| x != "blob") {
            continue;
        }
        let Ok(m) = e.metadata() else { continue };
        if m.is_file() && !has_footer(&path, m.len()) {
            out.push(Unfinished {
                len: m.len(),
                ino: m.ino(),
                modified: m.modified().ok(),
                path,
            });
        }
    }
    out
}

/// Removes the `found` files that are still as they were (see the module
/// doc); returns how many files and bytes went.
pub(crate) fn remove_untouched(found: &[Unfinished]) -> (usize, u64) {
    let mut removed = (0, 0);
    for f in found {
        let Ok(m) = fs::metadata(&f.path) else {
            continue;
        };
        let same = m.ino() == f.ino && m.len() == f.len && m.modified().ok() == f.modified;
        if same && !has_footer(&f.path, m.len()) && fs::remove_file(&f.path).is_ok() {
            removed.0 += 1;
            removed.1 += f.len;
        }
    }
    removed
}

/// True when the blob file at `path`, `len` bytes long, ends with a footer.
fn has_footer(path: &Path, len: u64) -> bool {
    if len < HEADER_LEN + FOOTER_LEN {
        return false;
    }
    let mut magic = [0u8; 4];
    File::open(path)
        .and_then(|mut f| {
            f.seek(SeekFrom::Start(len - FOOTER_LEN))?;
            f.read_exact(&mut magic)
        })
        .is_ok()
        && u32::from_le_bytes(magic) == MAGIC
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, footer: bool, len: usize) -> PathBuf {
        let mut bytes = vec![7u8; len];
        if footer {
            let at = len - FOOTER_LEN as usize;
            bytes[at..at + 4].copy_from_slice(&MAGIC.to_le_bytes());
        }
        let p = dir.join(name);
        fs::write(&p, bytes).unwrap();
        p
    }

    #[test]
    fn finds_only_footerless_blob_files_and_removes_only_untouched_ones() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        write(d, "000010.blob", true, 4096);
        let cut = write(d, "000011.blob", false, 4096);
        let tiny = write(d, "000012.blob", false, 10);
        let reused = write(d, "000013.blob", false, 4096);
        write(d, "000014.sst", false, 4096);
        let mut found = find(d);
        found.sort_by(|a, b| a.path.cmp(&b.path));
        let paths: Vec<&PathBuf> = found.iter().map(|f| &f.path).collect();
        assert_eq!(paths, [&cut, &tiny, &reused]);
        // Recovery reuses 000013 for a new file (rewritten, another length).
        fs::write(&reused, vec![1u8; 100]).unwrap();
        assert_eq!(remove_untouched(&found), (2, 4106));
        assert!(!cut.exists() && !tiny.exists());
        assert!(reused.exists() && d.join("000010.blob").exists());
    }
}
