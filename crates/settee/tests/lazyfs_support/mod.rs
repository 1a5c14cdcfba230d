//! LazyFS mounts for the power-loss tests (tests/powerloss.rs,
//! tests/powerloss_cluster.rs): `../shared/reference/lazyfs/mount` builds
//! and mounts LazyFS 0.3.0, which keeps written bytes in its own cache
//! until they are fsynced. Its fault fifo takes `lazyfs::clear-cache` (drop
//! every unsynced byte: the power cut) and `lazyfs::crash::…` (kill the
//! file system itself when an operation on a matching path begins: the
//! operation, and every later one on the mount, fails).
//!
//! Invariants: one mount is being made at a time (the first one builds
//! LazyFS in a shared directory); a mount is unmounted and its process
//! stopped on drop; a remount serves the same backing directory, so what
//! was synced before a crash is there after it and nothing else is.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A LazyFS mount, unmounted (and its process stopped) on drop.
pub struct Lazy {
    pub dir: PathBuf,
    pub fifo: PathBuf,
    pub log: PathBuf,
    pub pid: String,
    cache_mb: usize,
    _tmp: tempfile::TempDir,
}

fn mount_at(dir: &Path, cache_mb: usize) -> (PathBuf, PathBuf, String) {
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/reference/lazyfs/mount");
    // One mount at a time: on a fresh machine the first builds LazyFS
    // in a shared directory, and two builds there at once break each
    // other (seen on a fresh machine: "stdlib.h: No such file").
    static MOUNTING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let guard = MOUNTING.lock().unwrap_or_else(|e| e.into_inner());
    let out = Command::new(&script)
        .arg(dir)
        .args(["--cache-mb", &cache_mb.to_string()])
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", script.display()));
    drop(guard);
    assert!(
        out.status.success(),
        "LazyFS did not mount: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let parts: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(parts.len(), 3, "mount printed {line:?}");
    (
        PathBuf::from(parts[0]),
        PathBuf::from(parts[1]),
        parts[2].to_string(),
    )
}

impl Lazy {
    /// A mount whose cache holds 1 GiB.
    pub fn mount() -> Lazy {
        Lazy::mount_with_cache(1024)
    }

    /// A mount whose cache holds `cache_mb` MiB (LazyFS allocates it at
    /// once).
    pub fn mount_with_cache(cache_mb: usize) -> Lazy {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (dir, fifo, pid) = mount_at(&tmp.path().join("m"), cache_mb);
        Lazy {
            log: PathBuf::from(format!("{}.log", dir.display())),
            dir,
            fifo,
            pid,
            cache_mb,
            _tmp: tmp,
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last lines LazyFS logged.
    pub fn log_tail(&self) -> String {
        let text = self.log_text();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }

    fn cleared(&self) -> usize {
        self.log_text().matches("cache is cleared").count()
    }

    /// The power cut: every byte not yet fsynced is gone.
    pub fn clear_cache(&self) {
        let before = self.cleared();
        std::fs::write(&self.fifo, "lazyfs::clear-cache\n").expect("write the fault fifo");
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.cleared() == before {
            assert!(Instant::now() < deadline, "LazyFS did not clear its cache");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Arms LazyFS to kill itself when an fsync (or fdatasync) of a path
    /// matching `path_regex` begins: that fsync fails in the caller (the
    /// kernel answers it with an error once the file system is gone), the
    /// bytes it was to make durable are lost with LazyFS's cache, and
    /// every later operation on the mount fails too. Returns once LazyFS
    /// has taken the command.
    pub fn crash_on_fsync(&self, path_regex: &str) {
        let valid = || self.log_text().matches("VALID crash fault").count();
        let before = valid();
        let cmd = format!("lazyfs::crash::timing=before::op=fsync::from_rgx={path_regex}\n");
        std::fs::write(&self.fifo, cmd).expect("write the fault fifo");
        let deadline = Instant::now() + Duration::from_secs(30);
        while valid() == before {
            assert!(
                !self.log_text().contains("INVALID crash fault"),
                "LazyFS refused the crash fault: {}",
                self.log_text()
            );
            assert!(Instant::now() < deadline, "LazyFS did not take the fault");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the LazyFS process is still running (a killed one may stay
    /// a zombie for a while: that counts as gone).
    pub fn alive(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).is_ok_and(|stat| {
            // "PID (comm) STATE ...": the state follows the last ')'.
            stat.rsplit_once(')').is_some_and(|(_, rest)| {
                !matches!(rest.trim_start().chars().next(), Some('Z' | 'X'))
            })
        })
    }

    /// After LazyFS died (a crash fault): unmounts the dead mount and mounts
    /// a new LazyFS on the same backing directory, with an empty cache.
    pub fn remount(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.alive() {
            assert!(Instant::now() < deadline, "LazyFS did not die");
            std::thread::sleep(Duration::from_millis(20));
        }
        let ok = Command::new("fusermount3")
            .arg("-u")
            .arg(&self.dir)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "fusermount3 -u {}", self.dir.display());
        let (dir, fifo, pid) = mount_at(&self.dir, self.cache_mb);
        assert_eq!(dir, self.dir);
        self.fifo = fifo;
        self.pid = pid;
    }
}

impl Drop for Lazy {
    fn drop(&mut self) {
        let _ = Command::new("fusermount3")
            .arg("-u")
            .arg(&self.dir)
            .status();
        let _ = Command::new("kill").arg(&self.pid).status();
    }
}
