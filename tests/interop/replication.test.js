// PouchDB replication between a local in-memory PouchDB and Settee, both
// directions: documents with several revisions, deleted documents, design
// documents, conflicts (made with new_edits:false and by concurrent edits
// on both sides), resumption from checkpoints, a fresh pull of everything,
// and a live replication. After each round both sides must hold identical
// documents and revisions (allDocs with conflicts and bodies, and every
// document's leaves with their histories).

import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { PouchDB, remoteDb, localDb, snapshot, allIds, withTimeout } from './helpers.js';

const h = (c) => c.repeat(32);
const PLAIN = 250;

async function update(db, id, fn, times = 1) {
  let last;
  for (let i = 0; i < times; i++) {
    const doc = await db.get(id);
    last = await db.put(fn(doc, i));
  }
  return last;
}

function assertClean(result, what) {
  assert.equal(result.ok, true, `${what}: ${JSON.stringify(result)}`);
  assert.equal(result.status, 'complete', what);
  assert.equal(result.doc_write_failures, 0, `${what}: ${JSON.stringify(result.errors)}`);
  assert.deepEqual(result.errors, [], what);
}

async function assertSame(a, b, what) {
  const [sa, sb] = await Promise.all([snapshot(a), snapshot(b)]);
  assert.deepEqual(sb, sa, `${what}: databases differ`);
  return sa;
}

describe('replication local PouchDB <-> Settee', () => {
  let local;
  let remote;

  before(async () => {
    local = localDb('repl-local');
    remote = remoteDb('repl');
    await remote.info(); // creates the database

    // Plain documents: enough for several replication batches (100 docs each)
    // and checkpoints.
    await local.bulkDocs(Array.from({ length: PLAIN }, (_, i) => ({ _id: `p-${String(i).padStart(2, '0')}`, i })));
    // A document with five revisions.
    await local.put({ _id: 'multi', v: 0 });
    await update(local, 'multi', (d, i) => ({ ...d, v: i + 1 }), 4);
    // A document created, updated and deleted.
    await local.put({ _id: 'gone', v: 0 });
    await update(local, 'gone', (d) => ({ ...d, v: 1 }));
    await local.remove(await local.get('gone'));
    // Deleted with a body (a tombstone that keeps fields).
    const tb = await local.put({ _id: 'tombstone-body', v: 0 });
    await local.put({ _id: 'tombstone-body', _rev: tb.rev, _deleted: true, reason: 'kept' });
    // A conflict: two live branches from a shared root with a body.
    await local.bulkDocs(
      [
        { _id: 'conf', _rev: `1-${h('1')}`, root: true, _revisions: { start: 1, ids: [h('1')] } },
        { _id: 'conf', _rev: `2-${h('a')}`, side: 'a', _revisions: { start: 2, ids: [h('a'), h('1')] } },
        { _id: 'conf', _rev: `3-${h('b')}`, side: 'b', _revisions: { start: 3, ids: [h('b'), h('c'), h('1')] } },
      ],
      { new_edits: false },
    );
    // A conflict between a live branch and a deleted one.
    await local.bulkDocs(
      [
        { _id: 'conf-del', _rev: `2-${h('d')}`, side: 'live', _revisions: { start: 2, ids: [h('d'), h('1')] } },
        { _id: 'conf-del', _rev: `2-${h('e')}`, _deleted: true, _revisions: { start: 2, ids: [h('e'), h('1')] } },
      ],
      { new_edits: false },
    );
    // A design document, awkward ids, and a _local document (never replicated).
    await local.put({ _id: '_design/app', views: { by_i: { map: 'function (doc) { emit(doc.i); }' } } });
    await local.put({ _id: 'ünïcødé/with space?&#', nested: { a: [1, { b: null }] } });
    await local.put({ _id: '_local/private', secret: true });
  });

  after(async () => {
    await remote.destroy();
    await local.destroy();
  });

  test('push: local -> Settee', async () => {
    const res = await PouchDB.replicate(local, remote);
    assertClean(res, 'push');
    // Every document (live or deleted) once; conflicted ones once per leaf.
    assert.ok(res.docs_written >= PLAIN + 7, `docs_written ${res.docs_written}`);
    const snap = await assertSame(local, remote, 'after push');
    assert.equal(snap.total_rows, PLAIN + 5); // p-*, multi, conf, conf-del, design, unicode
    assert.equal(snap.docs.multi.winner._revisions.ids.length, 5);
    assert.deepEqual(snap.docs.conf.winner._conflicts, [`2-${h('a')}`]);
    assert.deepEqual(snap.docs.gone.winner, { status: 404 });
    assert.equal(snap.docs['tombstone-body'].leaves[0].reason, 'kept');
    await assert.rejects(remote.get('_local/private'), (e) => e.status === 404);
  });

  test('push again: resumes from the checkpoint and writes nothing', async () => {
    const res = await PouchDB.replicate(local, remote);
    assertClean(res, 'second push');
    assert.equal(res.docs_written, 0);
    assert.equal(res.docs_read, 0);
  });

  test('edits on both sides, then pull and push: identical, with new conflicts', async () => {
    // On Settee: more revisions, a deletion, a new document, a new
    // new_edits:false branch, and a resolved conflict.
    await update(remote, 'multi', (d, i) => ({ ...d, v: 10 + i }), 2);
    await remote.remove(await remote.get('p-03'));
    await remote.put({ _id: 'r-new', from: 'settee' });
    const p4 = await remote.get('p-04');
    await remote.put({ ...p4, branch: 'normal edit' });
    // A sibling of that edit (same parent), as a replicator would write it.
    const res4 = await remote.bulkDocs(
      [{ _id: 'p-04', _rev: `2-${h('f')}`, branch: 'remote', _revisions: { start: 2, ids: [h('f'), p4._rev.slice(2)] } }],
      { new_edits: false },
    );
    assert.deepEqual(res4, []);
    await remote.remove('conf', `2-${h('a')}`);
    // Concurrent edits of the same document on both sides.
    await update(remote, 'p-05', (d) => ({ ...d, edited: 'remote' }));
    await update(local, 'p-05', (d) => ({ ...d, edited: 'local' }), 2);
    await update(local, 'p-06', (d) => ({ ...d, edited: 'local' }));

    const pull = await PouchDB.replicate(remote, local);
    assertClean(pull, 'pull');
    const push = await PouchDB.replicate(local, remote);
    assertClean(push, 'push back');
    const snap = await assertSame(local, remote, 'after both directions');

    // The concurrent edit is a conflict; the longer local branch (3-) wins
    // on both sides, the remote edit (2-) is the conflict.
    const p5 = snap.docs['p-05'];
    assert.equal(p5.winner.edited, 'local');
    assert.equal(p5.winner._conflicts.length, 1);
    assert.match(p5.winner._conflicts[0], /^2-/);
    assert.equal(p5.leaves.length, 2);
    assert.equal(snap.docs['p-04'].leaves.length, 2);
    assert.equal(snap.docs['p-04'].winner._conflicts.length, 1);
    assert.equal(snap.docs['p-06'].winner.edited, 'local');
    assert.equal(snap.docs.multi.winner.v, 11);
    assert.equal(snap.docs.multi.winner._revisions.ids.length, 7);
    assert.deepEqual(snap.docs['p-03'].winner, { status: 404 });
    assert.equal(snap.docs.conf.winner._conflicts, undefined);
    assert.equal(snap.docs.conf.leaves.length, 2); // the live winner and the deleted branch
    assert.equal((await local.get('r-new')).from, 'settee');
  });

  test('a fresh local database pulls everything identically', async () => {
    const fresh = localDb('repl-fresh');
    try {
      const res = await PouchDB.replicate(remote, fresh);
      assertClean(res, 'fresh pull');
      await assertSame(remote, fresh, 'fresh pull');
      assert.deepEqual(await allIds(fresh), await allIds(remote));
    } finally {
      await fresh.destroy();
    }
  });

  test('filtered pulls: doc_ids and a Mango selector', async () => {
    const byIds = localDb('repl-ids');
    const bySelector = localDb('repl-selector');
    try {
      const ids = ['p-10', 'multi', 'p-03', 'no-such-doc'];
      const r1 = await PouchDB.replicate(remote, byIds, { doc_ids: ids });
      assertClean(r1, 'doc_ids pull');
      assert.deepEqual(await allIds(byIds), ['multi', 'p-03', 'p-10']);
      assert.equal((await byIds.get('multi')).v, 11);
      await assert.rejects(byIds.get('p-03'), (e) => e.status === 404); // deleted on Settee

      const r2 = await PouchDB.replicate(remote, bySelector, { selector: { i: { $gte: PLAIN - 5 } } });
      assertClean(r2, 'selector pull');
      const want = Array.from({ length: 5 }, (_, k) => `p-${PLAIN - 5 + k}`);
      assert.deepEqual(await allIds(bySelector), want);
    } finally {
      await byIds.destroy();
      await bySelector.destroy();
    }
  });

  test('sync (both directions at once) converges after a conflict is resolved on one side', async () => {
    const p5 = await local.get('p-05', { conflicts: true });
    for (const rev of p5._conflicts) await local.remove('p-05', rev);
    await local.put({ _id: 'after-sync', x: 1 });
    await remote.put({ _id: 'after-sync-remote', x: 2 });
    const res = await PouchDB.sync(local, remote);
    assertClean(res.push, 'sync push');
    assertClean(res.pull, 'sync pull');
    const snap = await assertSame(local, remote, 'after sync');
    assert.equal(snap.docs['p-05'].winner._conflicts, undefined);
    assert.ok(snap.docs['after-sync'] && snap.docs['after-sync-remote']);
  });

  test('two PouchDB clients editing the same documents converge through Settee', async () => {
    const hub = remoteDb('repl-hub');
    const alice = localDb('repl-alice');
    const bob = localDb('repl-bob');
    try {
      await alice.bulkDocs(Array.from({ length: 10 }, (_, i) => ({ _id: `s-${i}`, n: i })));
      assertClean(await PouchDB.replicate(alice, hub), 'alice push');
      assertClean(await PouchDB.replicate(hub, bob), 'bob pull');
      // Both edit s-0 (a conflict), each deletes a different document, and
      // each creates one.
      await update(alice, 's-0', (d) => ({ ...d, by: 'alice' }));
      await update(bob, 's-0', (d) => ({ ...d, by: 'bob' }), 2);
      await alice.remove(await alice.get('s-1'));
      await bob.remove(await bob.get('s-2'));
      await alice.put({ _id: 'from-alice' });
      await bob.put({ _id: 'from-bob' });
      for (const client of [alice, bob, alice]) {
        const res = await PouchDB.sync(client, hub);
        assertClean(res.push, 'sync push');
        assertClean(res.pull, 'sync pull');
      }
      const snapHub = await assertSame(alice, hub, 'alice vs hub');
      await assertSame(bob, hub, 'bob vs hub');
      assert.equal(snapHub.docs['s-0'].winner.by, 'bob'); // the longer branch
      assert.equal(snapHub.docs['s-0'].leaves.length, 2);
      assert.deepEqual(snapHub.docs['s-1'].winner, { status: 404 });
      assert.deepEqual(snapHub.docs['s-2'].winner, { status: 404 });
      assert.ok(snapHub.docs['from-alice'] && snapHub.docs['from-bob']);
    } finally {
      await Promise.all([hub.destroy(), alice.destroy(), bob.destroy()]);
    }
  });

  test('live replication from Settee delivers a later write', async () => {
    const target = localDb('repl-live');
    const rep = PouchDB.replicate(remote, target, { live: true, retry: false, heartbeat: 1000 });
    try {
      const seen = new Promise((resolve, reject) => {
        rep.on('change', (info) => {
          if (info.docs.some((d) => d._id === 'live-doc')) resolve(info);
        });
        rep.on('error', reject);
        rep.on('denied', reject);
      });
      // Let the initial catch-up finish before the write.
      await withTimeout(
        new Promise((resolve, reject) => {
          rep.on('paused', (err) => (err ? reject(err) : resolve()));
        }),
        15000,
        'live replication to catch up',
      );
      const w = await remote.put({ _id: 'live-doc', live: true });
      await withTimeout(seen, 15000, 'live replication of live-doc');
      const got = await target.get('live-doc');
      assert.equal(got._rev, w.rev);
    } finally {
      rep.cancel();
      await target.destroy();
    }
  });
});
