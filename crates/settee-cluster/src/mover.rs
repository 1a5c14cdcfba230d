//! Shard moves, online (issue 39), and the drain of a copy a map no
//! longer names.
//!
//! A move ([`crate::layout::Move`]) is recorded in the map first (the new
//! copy then receives the range's writes from every coordinator that has
//! seen the map), then [`run`] fills it: the new copy's node creates it
//! (its shard keeper follows the map), every live full copy is replicated
//! into it, and one compare-and-swap makes it a full copy and drops the
//! replaced one. Every step is idempotent: a decider that takes over
//! resumes a recorded move from the start (replication resumes from its
//! checkpoints).
//!
//! [`spawn_drain`]: a node whose copy a map stopped naming (moved away, or
//! replaced while the node was down) pushes it to every live full copy of
//! the range before deleting it, so a write only that copy took (`w=1`, or
//! a coordinator that had not seen the move) is not lost. A copy is
//! deleted only after every push succeeded; otherwise it is kept and the
//! next map change or sweep tries again.
//!
//! Fills are held to the node's move bandwidth
//! ([`crate::decider::DeciderConfig::max_bytes_per_s`], one limit shared by
//! every fill this node runs), so foreground requests keep their latency.
//!
//! Invariants: a copy is made full only after every live full copy was
//! replicated into it after the move was recorded; a replaced copy's data
//! is pushed to the remaining copies before it is deleted; each wait is
//! bounded ([`FILL_TIMEOUT`], [`CREATE_WAIT`]).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::coordinator::Coordinator;
use crate::error::{ClusterError, Result};
use crate::layout::{parse_shard_name, Move, ShardMap};
use crate::sync::Job;

/// The longest the fill of one copy may take.
pub const FILL_TIMEOUT: Duration = Duration::from_secs(1800);
/// How long the new copy's node has to create it.
pub const CREATE_WAIT: Duration = Duration::from_secs(30);
/// Attempts at the final compare-and-swap after losing a race.
const SWAP_ATTEMPTS: usize = 5;

/// Fills `mv`'s copy of `db` and makes it full (see the module doc);
/// writes are guarded by the decider's election key `guard`.
pub async fn run(c: &Arc<Coordinator>, db: &str, mv: &Move, guard: (&[u8], i64)) -> Result<()> {
    let Some(map) = c.shard_map(db).await? else {
        return Err(ClusterError::NoShardMap(db.to_string()));
    };
    if !map.moves.contains(mv) {
        return Ok(()); // done (or withdrawn) already
    }
    let shard = map.shard_name(mv.range);
    let Some(to) = c.view().member(&mv.to) else {
        return Err(ClusterError::Local(format!("{} is not live", mv.to)));
    };
    // The new copy's node creates it as its keeper sees the map.
    let deadline = Instant::now() + CREATE_WAIT;
    loop {
        let get = crate::fabric::call::Call::get(&[]);
        let admin = crate::fabric::User::internal();
        match c.call_copy(&to, &shard, &get, &admin).await {
            Some(a) if a.ok() => break,
            _ if Instant::now() > deadline => {
                return Err(ClusterError::Local(format!(
                    "{} did not create {shard} within {CREATE_WAIT:?}",
                    mv.to
                )))
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let sources: Vec<String> = c
        .live_copies(&map, mv.range)
        .into_iter()
        .map(|n| n.name)
        .collect();
    if sources.is_empty() {
        return Err(ClusterError::Local(format!(
            "no live copy of {shard} to fill from"
        )));
    }
    let (docs_total, bytes_total) = source_totals(c, &sources[0], &shard).await;
    let tracked = c.moves().start(db, mv, docs_total, bytes_total);
    for from in sources {
        let job = Job {
            shard: shard.clone(),
            from,
            to: mv.to.clone(),
        };
        let status = tracked.next_source();
        // A document copied with its attachments counts as the source's
        // average document.
        let limit = settee_replicator::job::Limit {
            throttle: c.move_throttle(),
            streamed_doc_bytes: bytes_total.checked_div(docs_total).unwrap_or(0),
        };
        let fill = crate::sync::run_tracked(c, &job, &status, Some(limit));
        match tokio::time::timeout(FILL_TIMEOUT, fill).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(ClusterError::Local(format!("filling {shard}: {e}"))),
            Err(_) => return Err(ClusterError::Local(format!("filling {shard} timed out"))),
        }
    }
    for _ in 0..SWAP_ATTEMPTS {
        let Some(current) = c.maps().get(db).await? else {
            return Err(ClusterError::NoShardMap(db.to_string()));
        };
        if !current.value.moves.contains(mv) {
            return Ok(());
        }
        let mut next = current.value.clone();
        next.complete(mv)?;
        match c
            .maps()
            .update_guarded(&next, current.revision, guard)
            .await
        {
            Ok(_) => {
                tracing::info!(db, range = %mv.range, to = %mv.to, from = ?mv.from, "shard copy moved");
                c.view().put_map(next);
                return Ok(());
            }
            Err(ClusterError::ShardMapConflict { .. }) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(ClusterError::Local(format!(
        "the map of {db} kept changing"
    )))
}

/// A source copy's documents (live and deleted) and external size; zeros
/// when it does not answer (the figures are then unknown, not wrong).
async fn source_totals(c: &Coordinator, from: &str, shard: &str) -> (u64, u64) {
    let Some(node) = c.view().member(from) else {
        return (0, 0);
    };
    let get = crate::fabric::call::Call::get(&[]);
    match c
        .call_copy(&node, shard, &get, &crate::fabric::User::internal())
        .await
    {
        Some(a) if a.ok() => {
            let v = a.json();
            let n = |k: &str| v[k].as_u64().unwrap_or(0);
            (
                n("doc_count") + n("doc_del_count"),
                v["sizes"]["external"].as_u64().unwrap_or(0),
            )
        }
        _ => (0, 0),
    }
}

/// Copies being drained now (one drain per copy at a time).
fn draining() -> &'static Mutex<HashSet<String>> {
    static D: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    D.get_or_init(|| Mutex::new(HashSet::new()))
}

/// Drains and deletes, in the background, this node's copies of `map`'s
/// database (same suffix) that `map` no longer has it hold.
pub fn spawn_drain(c: &Arc<Coordinator>, map: ShardMap) {
    let c = Arc::clone(c);
    tokio::spawn(async move {
        if let Err(e) = drain(&c, &map).await {
            tracing::warn!(db = %map.db, error = %e, "a copy no longer in the map was kept");
        }
    });
}

async fn drain(c: &Arc<Coordinator>, map: &ShardMap) -> Result<()> {
    let me = c.node_name().to_string();
    let held = map.held_by(&me);
    for shard in c.local_copies_of(&map.db).await? {
        let Some((range, _, suffix)) = parse_shard_name(&shard) else {
            continue;
        };
        if suffix != map.shard_suffix || held.contains(&range) || !map.by_range.contains_key(&range)
        {
            continue;
        }
        if !draining()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(shard.clone())
        {
            continue;
        }
        let pushed = push_all(c, map, range, &shard, &me).await;
        draining()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&shard);
        match pushed {
            Ok(()) => {
                c.delete_local(vec![shard.clone()]).await?;
                tracing::info!(shard, "copy drained to the others and deleted");
            }
            Err(e) => tracing::warn!(shard, error = %e, "copy not drained; kept"),
        }
    }
    Ok(())
}

async fn push_all(
    c: &Arc<Coordinator>,
    map: &ShardMap,
    range: crate::layout::Range,
    shard: &str,
    me: &str,
) -> std::result::Result<(), String> {
    let peers: Vec<String> = c
        .live_copies(map, range)
        .into_iter()
        .map(|n| n.name)
        .filter(|n| n != me)
        .collect();
    if peers.is_empty() {
        return Err("no live copy to drain to".into());
    }
    for to in peers {
        let job = Job {
            shard: shard.to_string(),
            from: me.to_string(),
            to,
        };
        tokio::time::timeout(FILL_TIMEOUT, crate::sync::run(c, &job))
            .await
            .map_err(|_| "drain timed out".to_string())??;
    }
    Ok(())
}
