//! What the decider should move next in one database's shard map, pure:
//! heal first (a copy on a node gone for good is replaced on a live node
//! that lacks the range), then balance (a copy moves from the node holding
//! most of the database's copies to the one holding fewest, until they
//! differ by at most one).
//!
//! Invariants: a planned move never puts two copies of a range on one node
//! and never targets a node outside `eligible`; at most one move per range
//! is in flight (ranges with a recorded move are left alone); at most
//! `budget` moves are planned; a balanced map with no gone copy plans
//! nothing, so the decider converges.

use std::collections::{BTreeMap, BTreeSet};

use crate::layout::{Move, Range, ShardMap};

/// The next moves for `map`: nodes in `eligible` may receive copies (live,
/// taking data), copies on nodes in `gone` are replaced.
pub fn next_moves(
    map: &ShardMap,
    eligible: &BTreeSet<String>,
    gone: &BTreeSet<String>,
    budget: usize,
) -> Vec<Move> {
    let mut out = Vec::new();
    if eligible.is_empty() || budget == 0 {
        return out;
    }
    let mut busy: BTreeSet<Range> = map.moves.iter().map(|m| m.range).collect();
    let mut holders: BTreeMap<Range, BTreeSet<String>> = map
        .by_range
        .iter()
        .map(|(r, ns)| (*r, ns.iter().cloned().collect()))
        .collect();
    for m in &map.moves {
        holders.entry(m.range).or_default().insert(m.to.clone());
    }
    let mut count: BTreeMap<String, usize> = eligible.iter().map(|n| (n.clone(), 0)).collect();
    for ns in holders.values() {
        for n in ns {
            if let Some(c) = count.get_mut(n) {
                *c += 1;
            }
        }
    }
    // Heal: replace copies on gone nodes.
    for (range, nodes) in &map.by_range {
        if out.len() >= budget || busy.contains(range) {
            continue;
        }
        let Some(dead) = nodes.iter().find(|n| gone.contains(*n)) else {
            continue;
        };
        let held = &holders[range];
        let target = count
            .iter()
            .filter(|(n, _)| !held.contains(*n))
            .min_by_key(|(n, c)| (**c, (*n).clone()))
            .map(|(n, _)| n.clone());
        if let Some(to) = target {
            *count.get_mut(&to).expect("an eligible node") += 1;
            holders.get_mut(range).expect("a range").insert(to.clone());
            busy.insert(*range);
            out.push(Move {
                range: *range,
                to,
                from: Some(dead.clone()),
            });
        }
    }
    // Balance: from the fullest eligible node to the emptiest.
    while out.len() < budget {
        let Some((max_node, max)) = count
            .iter()
            .max_by_key(|(n, c)| (**c, std::cmp::Reverse((*n).clone())))
            .map(|(n, c)| (n.clone(), *c))
        else {
            break;
        };
        let mut found = None;
        let mut by_fewest: Vec<(&String, &usize)> = count.iter().collect();
        by_fewest.sort_by_key(|(n, c)| (**c, (*n).clone()));
        for (to, c) in by_fewest {
            if *c + 1 >= max {
                break;
            }
            let range = map.by_range.iter().find(|(r, ns)| {
                !busy.contains(*r) && ns.contains(&max_node) && !holders[*r].contains(to)
            });
            if let Some((r, _)) = range {
                found = Some((*r, to.clone()));
                break;
            }
        }
        let Some((range, to)) = found else {
            break;
        };
        *count.get_mut(&to).expect("an eligible node") += 1;
        *count.get_mut(&max_node).expect("an eligible node") -= 1;
        holders.get_mut(&range).expect("a range").insert(to.clone());
        busy.insert(range);
        out.push(Move {
            range,
            to,
            from: Some(max_node),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> BTreeSet<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    /// Applies moves until none is planned; returns how many rounds.
    fn converge(map: &mut ShardMap, eligible: &BTreeSet<String>, gone: &BTreeSet<String>) -> usize {
        for round in 0..100 {
            let moves = next_moves(map, eligible, gone, 2);
            if moves.is_empty() {
                return round;
            }
            for m in moves {
                map.moves.push(m.clone());
                map.validate().expect("a valid map with the move");
                map.complete(&m).expect("completed");
            }
        }
        panic!("no convergence");
    }

    fn counts(map: &ShardMap) -> Vec<usize> {
        map.by_node.values().map(Vec::len).collect()
    }

    #[test]
    fn a_new_node_gets_its_share() {
        let three: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        for q in [1, 2, 4, 8] {
            let mut map = ShardMap::new("db", q, 3, &three, 0, false).expect("map");
            let all = names(&["a", "b", "c", "d"]);
            converge(&mut map, &all, &BTreeSet::new());
            let c = counts(&map);
            assert_eq!(c.iter().sum::<usize>(), q as usize * 3);
            assert!(
                c.iter().max().unwrap() - c.iter().min().unwrap() <= 1,
                "{q}: {c:?}"
            );
            assert_eq!(map.by_node.len(), if q == 1 { 3 } else { 4 });
        }
    }

    #[test]
    fn a_gone_node_is_replaced_and_copies_stay_distinct() {
        let four: Vec<String> = ["a", "b", "c", "d"].map(String::from).to_vec();
        let mut map = ShardMap::new("db", 8, 3, &four, 0, false).expect("map");
        converge(&mut map, &names(&["a", "b", "c"]), &names(&["d"]));
        assert!(!map.by_node.contains_key("d"), "{map:?}");
        for nodes in map.by_range.values() {
            assert_eq!(nodes.len(), 3);
        }
        // Fewer live nodes than n: as many as possible, never a node twice.
        let three: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let mut map = ShardMap::new("db", 4, 3, &three, 0, false).expect("map");
        converge(&mut map, &names(&["a", "b"]), &names(&["c"]));
        assert!(map.by_node.contains_key("c"), "nothing to replace it with");
    }

    #[test]
    fn a_range_in_flight_is_left_alone() {
        let three: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let mut map = ShardMap::new("db", 1, 2, &three, 0, false).expect("map");
        let r = map.ranges()[0];
        let to = names(&["a", "b", "c"])
            .into_iter()
            .find(|n| !map.by_range[&r].contains(n))
            .expect("a free node");
        map.moves.push(Move {
            range: r,
            to,
            from: None,
        });
        assert!(next_moves(&map, &names(&["a", "b", "c"]), &BTreeSet::new(), 4).is_empty());
    }
}
