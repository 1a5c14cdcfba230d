// Conflicts made with nano: `bulk` with `new_edits: false` writes two
// branches of one document (as a replicator would), CouchDB's rule picks the
// winner, `get` with `conflicts`, `open_revs=all`, `revs` and
// `deleted_conflicts` shows every leaf, a conflict in `list` and the view,
// and the conflict is resolved by destroying the loser. The expected
// answers are CouchDB 3.4.3's.

import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { nano, freshDb, rev } from './helpers.js';

describe('conflicts with new_edits: false', () => {
  let name;
  let db;
  const r1 = rev(1, 'root');
  const left = rev(2, 'left');
  const right = rev(2, 'right');
  const [winner, loser] = left > right ? [left, right] : [right, left];
  const body = { [left]: 'left', [right]: 'right' };

  before(async () => {
    [name, db] = await freshDb('conflicts');
    const res = await db.bulk({
      new_edits: false,
      docs: [
        { _id: 'c', _rev: left, _revisions: { start: 2, ids: [left.slice(2), r1.slice(2)] }, side: 'left' },
        { _id: 'c', _rev: right, _revisions: { start: 2, ids: [right.slice(2), r1.slice(2)] }, side: 'right' },
        { _id: 'single', _rev: rev(3, 'single'), v: 1 },
      ],
    });
    // new_edits=false answers no per-document results.
    assert.deepEqual(res, []);
  });
  after(async () => { await nano.db.destroy(name); });

  test('the winner and _conflicts', async () => {
    const doc = await db.get('c', { conflicts: true });
    assert.deepEqual(doc, { _id: 'c', _rev: winner, side: body[winner], _conflicts: [loser] });
    const plain = await db.get('c');
    assert.equal(plain._conflicts, undefined);
    const single = await db.get('single', { revs: true });
    assert.deepEqual(single._revisions, { start: 3, ids: [rev(3, 'single').slice(2)] });
  });

  test('open_revs=all and each leaf by rev', async () => {
    const leaves = await db.get('c', { open_revs: 'all', revs: true });
    assert.ok(Array.isArray(leaves));
    const got = leaves.map((l) => l.ok).sort((a, b) => (a._rev < b._rev ? -1 : 1));
    assert.deepEqual(got, [left, right].sort().map((r) => ({
      _id: 'c', _rev: r, side: body[r], _revisions: { start: 2, ids: [r.slice(2), r1.slice(2)] },
    })));
    assert.equal((await db.get('c', { rev: loser })).side, body[loser]);
    const missing = await db.get('c', { open_revs: JSON.stringify([loser, '9-nope']) });
    assert.deepEqual(missing.map((l) => (l.ok ? l.ok._rev : l.missing)), [loser, '9-nope']);
  });

  test('conflicts in list and in a view', async () => {
    const all = await db.list({ include_docs: true, conflicts: true, keys: ['c'] });
    assert.deepEqual(all.rows[0].doc._conflicts, [loser]);
    assert.equal(all.rows[0].value.rev, winner);
    await db.insert({
      views: { conflicted: { map: 'function (doc) { if (doc._conflicts) emit(doc._id, doc._conflicts); }' } },
    }, '_design/c');
    const view = await db.view('c', 'conflicted');
    assert.deepEqual(view.rows, [{ id: 'c', key: 'c', value: [loser] }]);
  });

  test('re-sending the same revisions changes nothing', async () => {
    const before = await db.info();
    await db.bulk({ new_edits: false, docs: [{ _id: 'c', _rev: left, side: 'changed?' }] });
    const after = await db.info();
    assert.equal(after.doc_count, before.doc_count);
    assert.equal((await db.get('c', { rev: left })).side, 'left');
  });

  test('destroying the loser resolves the conflict', async () => {
    const res = await db.destroy('c', loser);
    assert.equal(res.ok, true);
    assert.match(res.rev, /^3-/);
    const doc = await db.get('c', { conflicts: true, deleted_conflicts: true });
    assert.equal(doc._rev, winner);
    assert.equal(doc._conflicts, undefined);
    assert.deepEqual(doc._deleted_conflicts, [res.rev]);
    const view = await db.view('c', 'conflicted');
    assert.deepEqual(view.rows, []);
  });

  test('a deleted winner leaves the other branch winning', async () => {
    const a = rev(1, 'a');
    const b = rev(1, 'b');
    const [hi, lo] = a > b ? [a, b] : [b, a];
    await db.bulk({ new_edits: false, docs: [{ _id: 'dw', _rev: a, n: 'a' }, { _id: 'dw', _rev: b, n: 'b' }] });
    const del = await db.destroy('dw', hi);
    const doc = await db.get('dw', { conflicts: true, deleted_conflicts: true });
    assert.deepEqual(doc, { _id: 'dw', _rev: lo, n: lo === a ? 'a' : 'b', _deleted_conflicts: [del.rev] });
  });
});
