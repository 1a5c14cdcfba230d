// Conflicts through PouchDB: bulkDocs with new_edits:false creating sibling
// branches, get with conflicts/deleted_conflicts/open_revs/revs, allDocs and
// changes with conflicts and style=all_docs, the deterministic winner
// (live before deleted, then longest branch, then the greater rev id —
// checked against PouchDB's own in-memory database given the same writes),
// idempotent re-sends, and resolving a conflict by deleting the loser.

import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { remoteDb, localDb, rawGet, dbName } from './helpers.js';

const h = (c) => c.repeat(32); // a 32-hex-digit revision id
const ROOT = h('1');

/** A doc at revision `gen-hash` whose history is `hashes` (newest first). */
function leaf(id, gen, hashes, body = {}, deleted = false) {
  const doc = { _id: id, _rev: `${gen}-${hashes[0]}`, _revisions: { start: gen, ids: hashes }, ...body };
  if (deleted) doc._deleted = true;
  return doc;
}

// Each case: the branches written with new_edits:false, and the winner
// CouchDB's rule picks.
const CASES = {
  // Same generation: the greater revision id wins.
  'same-gen': {
    writes: [leaf('same-gen', 2, [h('a'), ROOT], { side: 'a' }), leaf('same-gen', 2, [h('b'), ROOT], { side: 'b' })],
    winner: `2-${h('b')}`,
    conflicts: [`2-${h('a')}`],
    deletedConflicts: [],
  },
  // A longer branch wins even with a smaller revision id.
  'longer-wins': {
    writes: [
      leaf('longer-wins', 3, [h('0'), h('c'), ROOT], { side: 'long' }),
      leaf('longer-wins', 2, [h('f'), ROOT], { side: 'short' }),
    ],
    winner: `3-${h('0')}`,
    conflicts: [`2-${h('f')}`],
    deletedConflicts: [],
  },
  // A live leaf beats a longer deleted one, which becomes a deleted conflict.
  'live-beats-deleted': {
    writes: [
      leaf('live-beats-deleted', 4, [h('e'), h('d'), h('c'), ROOT], {}, true),
      leaf('live-beats-deleted', 2, [h('2'), ROOT], { side: 'live' }),
    ],
    winner: `2-${h('2')}`,
    conflicts: [],
    deletedConflicts: [`4-${h('e')}`],
  },
  // Three live branches: the winner is the greatest; _conflicts lists the
  // others (CouchDB sorts them by generation then id, descending).
  'three-way': {
    writes: [
      leaf('three-way', 2, [h('7'), ROOT], { n: 7 }),
      leaf('three-way', 2, [h('9'), ROOT], { n: 9 }),
      leaf('three-way', 2, [h('8'), ROOT], { n: 8 }),
    ],
    winner: `2-${h('9')}`,
    conflicts: [`2-${h('8')}`, `2-${h('7')}`],
    deletedConflicts: [],
  },
};

const allWrites = () => Object.values(CASES).flatMap((c) => c.writes.map((d) => structuredClone(d)));

describe('conflicts with new_edits:false', () => {
  let db;
  let local;

  before(async () => {
    db = remoteDb('conflicts');
    local = localDb('conflicts');
    // new_edits:false answers only failures: none here.
    const res = await db.bulkDocs(allWrites(), { new_edits: false });
    assert.deepEqual(res, []);
    await local.bulkDocs(allWrites(), { new_edits: false });
  });
  after(async () => {
    await db.destroy();
    await local.destroy();
  });

  for (const [id, c] of Object.entries(CASES)) {
    test(`${id}: winner, _conflicts and _deleted_conflicts`, async () => {
      const doc = await db.get(id, { conflicts: true });
      assert.equal(doc._rev, c.winner);
      assert.deepEqual(doc._conflicts ?? [], c.conflicts);
      // PouchDB's http adapter does not forward deleted_conflicts: ask directly.
      const meta = await rawGet(`/${dbName(db)}/${id}?deleted_conflicts=true`);
      assert.equal(meta._rev, c.winner);
      assert.deepEqual(meta._deleted_conflicts ?? [], c.deletedConflicts);
      // PouchDB's own engine, given the same writes, picks the same winner
      // and the same conflicts (it lists them in ascending order).
      const mine = await local.get(id, { conflicts: true });
      assert.equal(mine._rev, doc._rev);
      assert.deepEqual([...(mine._conflicts ?? [])].sort(), [...(doc._conflicts ?? [])].sort());
      const { _conflicts: a, ...mineBody } = mine;
      const { _conflicts: b, ...docBody } = doc;
      assert.deepEqual(mineBody, docBody);
    });
  }

  test('open_revs=all returns every leaf with its history', async () => {
    const leaves = await db.get('same-gen', { open_revs: 'all', revs: true });
    const byRev = Object.fromEntries(leaves.map((l) => [l.ok._rev, l.ok]));
    assert.deepEqual(Object.keys(byRev).sort(), [`2-${h('a')}`, `2-${h('b')}`]);
    assert.deepEqual(byRev[`2-${h('a')}`], { ...CASES['same-gen'].writes[0] });
    assert.deepEqual(byRev[`2-${h('b')}`]._revisions, { start: 2, ids: [h('b'), ROOT] });
  });

  test('open_revs with a list reports missing revisions', async () => {
    const res = await db.get('same-gen', { open_revs: [`2-${h('a')}`, `9-${h('9')}`] });
    assert.equal(res.length, 2);
    const ok = res.find((r) => r.ok);
    const missing = res.find((r) => r.missing);
    assert.equal(ok.ok.side, 'a');
    assert.equal(missing.missing, `9-${h('9')}`);
  });

  test('a losing leaf can be read by rev; the shared ancestor body is gone', async () => {
    const loser = await db.get('longer-wins', { rev: `2-${h('f')}` });
    assert.equal(loser.side, 'short');
    // The root was only ever sent as history, never with a body.
    await assert.rejects(db.get('longer-wins', { rev: `1-${ROOT}` }), (e) => e.status === 404);
  });

  test('re-sending the same revisions changes nothing', async () => {
    const before = await db.info();
    const res = await db.bulkDocs(allWrites(), { new_edits: false });
    assert.deepEqual(res, []);
    const after = await db.info();
    assert.equal(after.doc_count, before.doc_count);
    const doc = await db.get('three-way', { conflicts: true });
    assert.deepEqual(doc._conflicts, CASES['three-way'].conflicts);
  });

  test('allDocs with conflicts shows _conflicts on the winner', async () => {
    const res = await db.allDocs({ include_docs: true, conflicts: true, keys: ['same-gen', 'live-beats-deleted'] });
    assert.equal(res.rows[0].value.rev, CASES['same-gen'].winner);
    assert.deepEqual(res.rows[0].doc._conflicts, CASES['same-gen'].conflicts);
    assert.equal(res.rows[1].doc._conflicts, undefined);
  });

  test('changes with include_docs and conflicts carries _conflicts', async () => {
    const res = await db.changes({ since: 0, include_docs: true, conflicts: true, doc_ids: ['same-gen'] });
    assert.equal(res.results.length, 1);
    assert.equal(res.results[0].doc._rev, CASES['same-gen'].winner);
    assert.deepEqual(res.results[0].doc._conflicts, CASES['same-gen'].conflicts);
  });

  test('changes: winner only by default, every leaf with style=all_docs', async () => {
    const main = await db.changes({ since: 0 });
    const row = main.results.find((r) => r.id === 'three-way');
    assert.deepEqual(row.changes, [{ rev: CASES['three-way'].winner }]);

    const all = await db.changes({ since: 0, style: 'all_docs' });
    const rowAll = all.results.find((r) => r.id === 'three-way');
    assert.deepEqual(rowAll.changes.map((c) => c.rev).sort(), [`2-${h('7')}`, `2-${h('8')}`, `2-${h('9')}`]);
    const withDeleted = all.results.find((r) => r.id === 'live-beats-deleted');
    assert.equal(withDeleted.changes.length, 2);
    assert.equal(withDeleted.deleted, undefined, 'the winner is live');
  });

  test('deleting the losers resolves the conflict', async () => {
    const id = 'three-way';
    for (const rev of CASES[id].conflicts) {
      const r = await db.remove(id, rev);
      assert.match(r.rev, /^3-/);
    }
    const doc = await rawGet(`/${dbName(db)}/${id}?conflicts=true&deleted_conflicts=true`);
    assert.equal(doc._rev, CASES[id].winner);
    assert.equal(doc._conflicts, undefined);
    assert.equal(doc._deleted_conflicts.length, 2);
    assert.ok(doc._deleted_conflicts.every((r) => r.startsWith('3-')));
    // Deleted leaves are 3-…, longer than the live 2-… winner, yet it stays.
    const leaves = await db.get(id, { open_revs: 'all' });
    assert.equal(leaves.length, 3);
    assert.equal(leaves.filter((l) => l.ok._deleted).length, 2);
  });

  test('deleting the winner promotes the next branch', async () => {
    const id = 'same-gen';
    await db.remove(id, CASES[id].winner);
    const doc = await db.get(id, { conflicts: true });
    assert.equal(doc._rev, `2-${h('a')}`);
    assert.equal(doc.side, 'a');
    assert.equal(doc._conflicts, undefined);
  });

  test('new_edits:false without _rev refuses the whole request (400, as CouchDB)', async () => {
    await assert.rejects(
      db.bulkDocs([{ _id: 'no-rev', x: 1 }], { new_edits: false }),
      (e) => e.status === 400,
    );
  });
});
