//! Crash test: a child process writes concurrently with full commit and
//! reports every acknowledged revision; it is killed with SIGKILL at random
//! moments. After each kill the database is reopened and must hold every
//! acknowledged revision and be internally consistent (counts, changes and
//! by-id agree).
//!
//! The child is this same test binary, re-run with `--ignored --exact
//! crash_child` and the data directory in `SETTEE_CRASH_DIR`.

use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rand::Rng;
use serde_json::json;
use settee_core::doc::Doc;
use settee_core::rev::Rev;
use settee_db::{Engine, EngineOptions, Error, GetOptions, IdRange};

const ROUNDS: usize = 20;
const CHILD_WRITERS: usize = 8;
/// The child stops by itself after this long if nobody kills it.
const CHILD_LIFETIME: Duration = Duration::from_secs(30);

#[test]
#[ignore = "child process of crash_test_sigkill_keeps_every_acknowledged_write"]
fn crash_child() {
    let dir = std::env::var("SETTEE_CRASH_DIR").expect("SETTEE_CRASH_DIR names the data directory");
    let round = std::env::var("SETTEE_CRASH_ROUND").expect("SETTEE_CRASH_ROUND");
    let engine = Engine::open(dir.as_ref(), EngineOptions::default()).unwrap();
    let db = match engine.create_db("crash") {
        Ok(db) => db,
        Err(Error::DbExists) => engine.db("crash").unwrap(),
        Err(e) => panic!("{e}"),
    };
    let started = Instant::now();
    let threads: Vec<_> = (0..CHILD_WRITERS)
        .map(|t| {
            let db = db.clone();
            let round = round.clone();
            std::thread::spawn(move || {
                let mut n = 0u64;
                while started.elapsed() < CHILD_LIFETIME {
                    let id = format!("r{round}-t{t}-{n}");
                    let rev = db
                        .put(Doc::new(id.clone(), json!({"n": n, "pad": "x".repeat(100)})).unwrap())
                        .unwrap();
                    ack(&id, &rev);
                    // Every other document gets a second revision.
                    if n.is_multiple_of(2) {
                        let mut d = Doc::new(id.clone(), json!({"n": n, "edited": true})).unwrap();
                        d.rev = Some(rev);
                        let rev2 = db.put(d).unwrap();
                        ack(&id, &rev2);
                    }
                    n += 1;
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

fn ack(id: &str, rev: &Rev) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "ack {id} {rev}").unwrap();
    out.flush().unwrap();
}

/// Runs one child, kills it after a random delay, returns its acks.
fn run_child_and_kill(
    dir: &std::path::Path,
    round: usize,
    rng: &mut impl Rng,
) -> Vec<(String, Rev)> {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "crash_child",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("SETTEE_CRASH_DIR", dir)
        .env("SETTEE_CRASH_ROUND", round.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut acks = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let mut parts = line.split(' ');
            if parts.next() == Some("ack") {
                let (Some(id), Some(rev)) = (parts.next(), parts.next()) else {
                    continue;
                };
                acks.push((id.to_string(), rev.parse::<Rev>().unwrap()));
            }
        }
        acks
    });
    std::thread::sleep(Duration::from_millis(rng.random_range(150..600)));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    reader.join().unwrap()
}

#[test]
fn crash_test_sigkill_keeps_every_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = rand::rng();
    let mut acked: BTreeMap<String, HashSet<Rev>> = BTreeMap::new();
    let mut total_acks = 0;
    for round in 0..ROUNDS {
        let acks = run_child_and_kill(dir.path(), round, &mut rng);
        total_acks += acks.len();
        for (id, rev) in acks {
            acked.entry(id).or_default().insert(rev);
        }
        verify(dir.path(), &acked);
    }
    eprintln!("crash test: {ROUNDS} SIGKILLs, {total_acks} acknowledged writes verified");
    assert!(
        total_acks > ROUNDS * 10,
        "the children acknowledged writes ({total_acks})"
    );
}

fn verify(dir: &std::path::Path, acked: &BTreeMap<String, HashSet<Rev>>) {
    let engine = Engine::open(dir, EngineOptions::default()).unwrap();
    let db = match engine.db("crash") {
        Ok(db) => db,
        // Killed before the creation committed: then nothing was acknowledged.
        Err(Error::NotFound(_)) => {
            assert!(acked.is_empty());
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let reader = db.reader().unwrap();
    for (id, revs) in acked {
        for rev in revs {
            let got = reader.get(
                id,
                &GetOptions {
                    rev: Some(rev.clone()),
                    ..Default::default()
                },
            );
            assert!(
                got.is_ok(),
                "acknowledged {id} {rev} is missing after SIGKILL: {got:?}"
            );
        }
    }
    // Counts, changes and by-id agree.
    let info = db.info().unwrap();
    let mut by_id = 0u64;
    reader
        .all_docs(&IdRange::default(), false, false, &mut |_| {
            by_id += 1;
            true
        })
        .unwrap();
    assert_eq!(by_id, info.doc_count);
    let mut rows = 0u64;
    let mut max_seq = 0;
    let mut seen = HashSet::new();
    reader
        .changes(0, false, u64::MAX, &mut |row| {
            rows += 1;
            max_seq = max_seq.max(row.seq);
            assert!(seen.insert(row.id.clone()), "one change row per document");
            let tree = reader.rev_tree(&row.id).unwrap().unwrap();
            assert_eq!(
                tree.winner().unwrap().rev,
                *row.winner(),
                "changes and by-id agree on {}",
                row.id
            );
            true
        })
        .unwrap();
    assert_eq!(rows, info.doc_count + info.doc_del_count);
    assert_eq!(max_seq, info.update_seq);
}
