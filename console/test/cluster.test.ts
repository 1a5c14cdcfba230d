// The Cluster page's own logic (src/cluster.ts): the cluster API's
// answers turned into the nodes table, the shard grid, the balance and
// the rebalance's progress.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  balance, copiesPerNode, duration, health, nodeNames, nodeRows, progress, shardGrid, sortRanges,
  type Membership, type RebalanceStatus, type ShardsAnswer,
} from "../src/cluster";

const A = "a@127.0.0.1", B = "b@127.0.0.1", C = "c@127.0.0.1";

// q=4, n=2 over a and b; `small` has q=1 and lives on b alone.
const shards: Record<string, ShardsAnswer> = {
  db: {
    shards: {
      "c0000000-ffffffff": [B, A],
      "00000000-3fffffff": [A, B],
      "80000000-bfffffff": [A, B],
      "40000000-7fffffff": [A, B],
    },
  },
  small: { shards: { "00000000-ffffffff": [B] } },
};

test("ranges sort by their start, not as text", () => {
  assert.deepEqual(sortRanges(["c0000000-ffffffff", "00000000-3fffffff", "40000000-7fffffff"]),
    ["00000000-3fffffff", "40000000-7fffffff", "c0000000-ffffffff"]);
});

test("the grid: databases grouped by their ranges, cells listing holders", () => {
  const g = shardGrid(shards, [A, B]);
  assert.equal(g.length, 2);
  assert.deepEqual(g[0].ranges, ["00000000-3fffffff", "40000000-7fffffff", "80000000-bfffffff", "c0000000-ffffffff"]);
  assert.deepEqual(g[0].rows.map((r) => r.db), ["db"]);
  assert.deepEqual(g[0].rows[0].cells[3].nodes, [A, B]); // sorted
  assert.ok(g[0].rows[0].cells.every((c) => !c.under && c.down.length === 0));
  assert.deepEqual(g[1].ranges, ["00000000-ffffffff"]);
  // Two databases with the same ranges share a table.
  const same = shardGrid({ x: shards.db, y: shards.db }, [A, B]);
  assert.equal(same.length, 1);
  assert.deepEqual(same[0].rows.map((r) => r.db), ["x", "y"]);
  assert.deepEqual(shardGrid({}, []), []);
});

test("a cell is under-replicated when a holder is down or the server says so", () => {
  const g = shardGrid(
    { db: { ...shards.db, under_replicated: ["80000000-bfffffff"] } },
    [A], // b is down
  );
  const cells = g[0].rows[0].cells;
  assert.ok(cells.every((c) => c.under));
  assert.deepEqual(cells[0].down, [B]);
  // With b live, only the range the server names.
  const live = shardGrid({ db: { ...shards.db, under_replicated: ["80000000-bfffffff"] } }, [A, B])[0].rows[0].cells;
  assert.deepEqual(live.filter((c) => c.under).map((c) => c.range), ["80000000-bfffffff"]);
});

test("moves in flight show as copies being filled in their cell", () => {
  const cells = shardGrid(shards, [A, B, C], [
    { db: "db", range: "40000000-7fffffff", to: C, from: A },
    { db: "other", range: "40000000-7fffffff", to: C },
  ])[0].rows[0].cells;
  assert.deepEqual(cells.map((c) => c.incoming), [[], [C], [], []]);
});

test("node names come from membership, maps and the decider", () => {
  const m: Membership = { all_nodes: [B], cluster_nodes: [B] };
  const st: RebalanceStatus = { state: "balanced", paused: false, leaving: [C] };
  assert.deepEqual(nodeNames(m, shards, st), [A, B, C]);
  assert.deepEqual(nodeNames(null, {}, null), []);
});

test("health: the lease decides up or down; the leaving mark, leaving or decommissioned", () => {
  const m: Membership = { all_nodes: [A, B], cluster_nodes: [A, B, C] };
  const st: RebalanceStatus = { state: "moving", paused: false, leaving: [B], decommissioned: [] };
  assert.equal(health(A, m, { state: "live", shard_copies: 4 }, st), "up");
  assert.equal(health(C, m, { state: "down", shard_copies: 2 }, st), "down");
  // Live in membership but the node's own answer says down: down.
  assert.equal(health(A, m, { state: "down", shard_copies: 4 }, st), "down");
  assert.equal(health(B, m, { state: "leaving", shard_copies: 1 }, st), "leaving");
  assert.equal(health(B, m, { state: "leaving", shard_copies: 0 }, { ...st, decommissioned: [B] }), "decommissioned");
  assert.equal(health(A, null, undefined, null), "down");
});

test("nodes table: copies from the node's answer, else counted from the maps", () => {
  assert.deepEqual([...copiesPerNode(shards)].sort(), [[A, 4], [B, 5]]);
  const m: Membership = { all_nodes: [A, B, C], cluster_nodes: [A, B, C] };
  const st: RebalanceStatus = { state: "moving", paused: false, in_flight: [{ db: "db", range: "00000000-3fffffff", to: C, from: A }] };
  const rows = nodeRows(m, { [A]: { state: "live", shard_copies: 4 } }, shards, st, B);
  assert.deepEqual(rows.map((r) => [r.name, r.health, r.copies, r.self, r.incoming]), [
    [A, "up", 4, false, 0],
    [B, "up", 5, true, 0],
    [C, "up", 0, false, 1],
  ]);
  // No map read yet: copies unknown, not 0.
  assert.equal(nodeRows(m, {}, {}, null, null)[0].copies, null);
});

test("balance: uneven databases and under-replicated cells", () => {
  // db over a, b: 4/4, even; with c taking copies and holding none: uneven.
  assert.deepEqual(balance({ db: shards.db }, [A, B], [A, B]), { uneven: [], underReplicated: 0, cells: 4 });
  assert.deepEqual(balance({ db: shards.db }, [A, B, C], [A, B, C]).uneven, ["db"]);
  // 3/3/2 is balanced.
  const spread: ShardsAnswer = { shards: {
    "00000000-3fffffff": [A, B], "40000000-7fffffff": [B, C], "80000000-bfffffff": [A, C], "c0000000-ffffffff": [A, B],
  } };
  assert.deepEqual(balance({ db: spread }, [A, B, C], [A, B, C]).uneven, []);
  // b down: every cell holding b is under-replicated.
  assert.equal(balance({ db: spread }, [A, C], [A, C]).underReplicated, 3);
});

test("rebalance progress: sums of the moves in flight, the longest ETA, the report's age", () => {
  assert.equal(progress(null, 0), null);
  const before: RebalanceStatus = { state: "no decider yet", paused: false };
  assert.deepEqual(progress(before, 100), {
    state: "no decider yet", paused: false, done: 0, inFlight: 0, pending: 0,
    bytesDone: null, bytesTotal: null, etaS: null, ageS: null,
  });
  const fig = (bytes_done: number, bytes_total: number, eta_s?: number) =>
    ({ docs_done: 0, docs_total: 0, bytes_done, bytes_total, progress: 0, eta_s });
  const st: RebalanceStatus = {
    state: "moving", paused: false, moves_done: 3, pending: 2, updated: 95,
    in_flight: [
      { db: "db", range: "00000000-3fffffff", to: C, progress: fig(100, 400, 30) },
      { db: "db", range: "40000000-7fffffff", to: C, progress: fig(50, 100) },
      { db: "db", range: "80000000-bfffffff", to: C },
    ],
  };
  assert.deepEqual(progress(st, 100), {
    state: "moving", paused: false, done: 3, inFlight: 3, pending: 2,
    bytesDone: 150, bytesTotal: 500, etaS: 30, ageS: 5,
  });
});

test("durations read as a person reads them", () => {
  assert.equal(duration(0), "0 s");
  assert.equal(duration(59.4), "59 s");
  assert.equal(duration(185), "3 min 5 s");
  assert.equal(duration(7800), "2 h 10 min");
});
