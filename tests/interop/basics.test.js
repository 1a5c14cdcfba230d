// PouchDB's HTTP adapter against Settee: server info, database creation,
// single and bulk writes, reads, allDocs (include_docs, keys, ranges,
// descending, limit/skip), deletes, and the changes feed (normal, since,
// limit, style=all_docs, a live PouchDB listener seeing a later write, and
// a raw feed=continuous stream with heartbeats).

import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { PouchDB, remoteDb, serverUrl, plainUrl, authHeaders, withTimeout } from './helpers.js';

describe('server and database', () => {
  test('GET / welcomes like CouchDB', async () => {
    const res = await fetch(`${plainUrl}/`);
    assert.equal(res.status, 200);
    const body = await res.json();
    assert.equal(body.couchdb, 'Welcome');
    assert.equal(typeof body.version, 'string');
    assert.equal(body.vendor.name, 'Settee');
  });

  test('PouchDB creates the database on first use and destroys it', async () => {
    const db = remoteDb('create');
    const info = await db.info();
    assert.equal(info.doc_count, 0);
    assert.equal(info.db_name, db.name.split('/').pop());
    // The database now exists on the server.
    const res = await fetch(`${plainUrl}/${info.db_name}`, { headers: authHeaders() });
    assert.equal(res.status, 200);
    await db.destroy();
    const gone = await fetch(`${plainUrl}/${info.db_name}`, { headers: authHeaders() });
    assert.equal(gone.status, 404);
  });

  test('skip_setup on a missing database reports not found', async () => {
    const db = new PouchDB(`${serverUrl}/interop-never-created-${process.pid}`, { skip_setup: true });
    // PouchDB's http adapter resolves info() with the server's error body.
    const info = await db.info();
    assert.equal(info.error, 'not_found');
    await assert.rejects(
      db.get('anything'),
      (e) => e.status === 404 && e.reason === 'Database does not exist.',
    );
  });
});

describe('documents', () => {
  let db;
  before(async () => {
    db = remoteDb('docs');
    await db.info();
  });
  after(async () => {
    await db.destroy();
  });

  test('put, get, update, conflict, remove', async () => {
    const put = await db.put({ _id: 'alpha', n: 1, nested: { list: [1, 'two', null], s: 'ünïcødé ✓' } });
    assert.equal(put.ok, true);
    assert.match(put.rev, /^1-[0-9a-f]{32}$/);
    const got = await db.get('alpha');
    assert.deepEqual(got, { _id: 'alpha', _rev: put.rev, n: 1, nested: { list: [1, 'two', null], s: 'ünïcødé ✓' } });

    const upd = await db.put({ ...got, n: 2 });
    assert.match(upd.rev, /^2-/);
    await assert.rejects(db.put({ ...got, n: 3 }), (e) => e.status === 409 && e.name === 'conflict');

    const withRevs = await db.get('alpha', { revs: true, revs_info: true });
    assert.equal(withRevs._revisions.start, 2);
    assert.deepEqual(withRevs._revisions.ids, [upd.rev.slice(2), put.rev.slice(2)]);
    assert.deepEqual(withRevs._revs_info.map((r) => r.status), ['available', 'available']);

    const old = await db.get('alpha', { rev: put.rev });
    assert.equal(old.n, 1);

    const rm = await db.remove('alpha', upd.rev);
    assert.match(rm.rev, /^3-/);
    await assert.rejects(db.get('alpha'), (e) => e.status === 404);
    const tomb = await db.get('alpha', { rev: rm.rev });
    assert.equal(tomb._deleted, true);
  });

  test('post assigns an id; ids needing URL encoding round-trip', async () => {
    const posted = await db.post({ kind: 'posted' });
    assert.ok(posted.id.length > 0);
    assert.equal((await db.get(posted.id)).kind, 'posted');

    for (const id of ['with space', 'a/b', 'q?x=1&y', 'percent%20', 'é+ü#frag', '_design/dd one']) {
      const r = await db.put({ _id: id, id });
      const doc = await db.get(id);
      assert.equal(doc._rev, r.rev, id);
      assert.equal(doc.id, id);
    }
  });

  test('_local documents (used for replication checkpoints)', async () => {
    const r1 = await db.put({ _id: '_local/cp', seq: 1 });
    assert.equal(r1.rev, '0-1');
    const got = await db.get('_local/cp');
    assert.equal(got.seq, 1);
    const r2 = await db.put({ ...got, seq: 2 });
    assert.equal(r2.rev, '0-2');
    // As in CouchDB 3.4, _local documents have no revision checks: a write
    // without a rev overwrites (its rev restarts at 0-1).
    const r3 = await db.put({ _id: '_local/cp', seq: 3 });
    assert.equal(r3.rev, '0-1');
    assert.equal((await db.get('_local/cp')).seq, 3);
    await db.remove('_local/cp', r3.rev);
    await assert.rejects(db.get('_local/cp'), (e) => e.status === 404);
  });
});

describe('bulk writes and allDocs', () => {
  let db;
  const ids = Array.from({ length: 30 }, (_, i) => `doc-${String(i).padStart(3, '0')}`);
  let revs;

  before(async () => {
    db = remoteDb('alldocs');
    const res = await db.bulkDocs(ids.map((id, i) => ({ _id: id, i, even: i % 2 === 0 })));
    assert.equal(res.length, ids.length);
    for (const r of res) assert.equal(r.ok, true, JSON.stringify(r));
    revs = Object.fromEntries(res.map((r) => [r.id, r.rev]));
    // One deleted document, to see how allDocs reports it.
    const del = await db.remove('doc-005', revs['doc-005']);
    revs['doc-005'] = del.rev;
  });
  after(async () => {
    await db.destroy();
  });

  test('bulkDocs reports per-document conflicts', async () => {
    const res = await db.bulkDocs([
      { _id: 'doc-000', i: 'stale' },
      { _id: 'doc-001', _rev: revs['doc-001'], i: 1, touched: true },
    ]);
    assert.equal(res[0].status, 409);
    assert.equal(res[0].name, 'conflict');
    assert.equal(res[1].ok, true);
    assert.match(res[1].rev, /^2-/);
    revs['doc-001'] = res[1].rev;
  });

  test('allDocs counts and orders every live document', async () => {
    const all = await db.allDocs();
    assert.equal(all.total_rows, 29);
    assert.deepEqual(all.rows.map((r) => r.id), ids.filter((id) => id !== 'doc-005'));
    for (const r of all.rows) assert.equal(r.value.rev, revs[r.id]);
  });

  test('include_docs returns the bodies', async () => {
    const all = await db.allDocs({ include_docs: true, limit: 3 });
    assert.deepEqual(all.rows.map((r) => r.doc), [
      { _id: 'doc-000', _rev: revs['doc-000'], i: 0, even: true },
      { _id: 'doc-001', _rev: revs['doc-001'], i: 1, touched: true },
      { _id: 'doc-002', _rev: revs['doc-002'], i: 2, even: true },
    ]);
  });

  test('keys: order kept, missing and deleted rows reported', async () => {
    const res = await db.allDocs({ keys: ['doc-010', 'nope', 'doc-005', 'doc-002'], include_docs: true });
    assert.equal(res.rows.length, 4);
    assert.equal(res.rows[0].id, 'doc-010');
    assert.equal(res.rows[0].doc.i, 10);
    assert.deepEqual(res.rows[1], { key: 'nope', error: 'not_found' });
    assert.equal(res.rows[2].id, 'doc-005');
    assert.deepEqual(res.rows[2].value, { rev: revs['doc-005'], deleted: true });
    assert.equal(res.rows[2].doc, null);
    assert.equal(res.rows[3].doc.i, 2);
  });

  test('ranges: startkey/endkey, inclusive_end, descending, skip, limit', async () => {
    const range = await db.allDocs({ startkey: 'doc-010', endkey: 'doc-014' });
    assert.deepEqual(range.rows.map((r) => r.id), ['doc-010', 'doc-011', 'doc-012', 'doc-013', 'doc-014']);

    const exclusive = await db.allDocs({ startkey: 'doc-010', endkey: 'doc-014', inclusive_end: false });
    assert.deepEqual(exclusive.rows.map((r) => r.id), ['doc-010', 'doc-011', 'doc-012', 'doc-013']);

    const desc = await db.allDocs({ startkey: 'doc-014', endkey: 'doc-010', descending: true, skip: 1, limit: 2 });
    assert.deepEqual(desc.rows.map((r) => r.id), ['doc-013', 'doc-012']);

    const prefix = await db.allDocs({ startkey: 'doc-02', endkey: 'doc-02\uffff' });
    assert.deepEqual(prefix.rows.map((r) => r.id), ids.slice(20, 30));

    const page = await db.allDocs({ startkey: 'doc-020', skip: 1, limit: 3 });
    assert.deepEqual(page.rows.map((r) => r.id), ['doc-021', 'doc-022', 'doc-023']);
  });

  test('update_seq and get with latest', async () => {
    const info = await db.info();
    const res = await db.allDocs({ update_seq: true, limit: 1 });
    assert.equal(res.update_seq, info.update_seq);
    // doc-001 was updated: asking for its first revision with latest gives the leaf.
    const first = (await db.get('doc-001', { revs: true }))._revisions.ids[1];
    const latest = await db.get('doc-001', { rev: `1-${first}`, latest: true });
    assert.equal(latest._rev, revs['doc-001']);
  });

  test('compaction through PouchDB keeps every live document', async () => {
    const res = await db.compact();
    assert.equal(res.ok, true);
    const info = await db.info();
    assert.equal(info.doc_count, 29);
    assert.equal(info.doc_del_count, 1);
    assert.equal((await db.get('doc-001')).touched, true);
  });

  test('bulkGet returns the requested revisions', async () => {
    const res = await db.bulkGet({
      docs: [{ id: 'doc-001', rev: revs['doc-001'] }, { id: 'doc-003' }, { id: 'missing-doc' }],
      revs: true,
    });
    assert.equal(res.results.length, 3);
    const first = res.results[0].docs[0].ok;
    assert.equal(first._rev, revs['doc-001']);
    assert.equal(first._revisions.start, 2);
    assert.equal(res.results[1].docs[0].ok.i, 3);
    assert.equal(res.results[2].docs[0].error.error, 'not_found');
  });
});

describe('changes', () => {
  let db;
  before(async () => {
    db = remoteDb('changes');
    await db.bulkDocs([{ _id: 'a' }, { _id: 'b' }, { _id: 'c' }]);
    const b = await db.get('b');
    await db.put({ ...b, v: 2 });
  });
  after(async () => {
    await db.destroy();
  });

  test('normal feed: one row per document, latest rev, since and limit', async () => {
    const all = await db.changes({ since: 0 });
    assert.deepEqual(all.results.map((r) => r.id), ['a', 'c', 'b']);
    const b = all.results[2];
    assert.match(b.changes[0].rev, /^2-/);

    const after = await db.changes({ since: all.results[0].seq });
    assert.deepEqual(after.results.map((r) => r.id), ['c', 'b']);
    assert.deepEqual(after.last_seq, all.last_seq);

    const limited = await db.changes({ since: 0, limit: 2, include_docs: true });
    assert.deepEqual(limited.results.map((r) => r.id), ['a', 'c']);
    assert.equal(limited.results[1].doc._id, 'c');
  });

  test('descending', async () => {
    const res = await db.changes({ descending: true });
    assert.deepEqual(res.results.map((r) => r.id), ['b', 'c', 'a']);
    assert.ok(res.results[0].seq > res.results[2].seq);
  });

  test('doc_ids filter', async () => {
    const res = await db.changes({ since: 0, doc_ids: ['b', 'zzz'] });
    assert.deepEqual(res.results.map((r) => r.id), ['b']);
  });

  test('live listener sees a document written after it started', async () => {
    const seen = [];
    // Start from the current update_seq (not since=now, which the server
    // evaluates when the request arrives and could race with the write).
    const { update_seq: since } = await db.info();
    const feed = db.changes({ live: true, since, include_docs: true, heartbeat: 1000 });
    const got = new Promise((resolve, reject) => {
      feed.on('change', (c) => {
        seen.push(c);
        if (c.id === 'late') resolve(c);
      });
      feed.on('error', reject);
    });
    try {
      // Let the longpoll reach the server, so the write wakes a waiting feed.
      await new Promise((r) => setTimeout(r, 300));
      const w = await db.put({ _id: 'late', when: 'after' });
      const change = await withTimeout(got, 15000, 'live change for "late"');
      assert.equal(change.doc.when, 'after');
      assert.equal(change.changes[0].rev, w.rev);
      // A second write is delivered on the same listener.
      const second = new Promise((resolve) => feed.on('change', (c) => c.id === 'later' && resolve(c)));
      await db.put({ _id: 'later' });
      assert.equal((await withTimeout(second, 15000, 'live change for "later"')).id, 'later');
      assert.ok(!seen.some((c) => ['a', 'b', 'c'].includes(c.id)), 'since must skip older changes');
    } finally {
      feed.cancel();
    }
  });

  test('live listener without heartbeats re-polls after empty timeouts', async () => {
    const { update_seq: since } = await db.info();
    const feed = db.changes({ live: true, since, heartbeat: false, timeout: 300 });
    const got = new Promise((resolve, reject) => {
      feed.on('change', (c) => c.id === 'after-timeouts' && resolve(c));
      feed.on('error', reject);
    });
    try {
      // Several longpolls end empty (timeout=300 ms) before the write.
      await new Promise((r) => setTimeout(r, 1000));
      const w = await db.put({ _id: 'after-timeouts' });
      const change = await withTimeout(got, 15000, 'live change after timeouts');
      assert.equal(change.changes[0].rev, w.rev);
    } finally {
      feed.cancel();
    }
  });

  // since=now is covered here: the write happens only after the first
  // heartbeat, so the server has certainly evaluated `now` before it.
  test('raw feed=continuous since=now streams a later write and heartbeats', async () => {
    const controller = new AbortController();
    const info = await db.info();
    const res = await fetch(
      `${plainUrl}/${info.db_name}/_changes?feed=continuous&since=now&heartbeat=200&include_docs=true`,
      { headers: authHeaders(), signal: controller.signal },
    );
    assert.equal(res.status, 200);
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let text = '';
    let written = false;
    try {
      const deadline = Date.now() + 15000;
      while (Date.now() < deadline) {
        const { value, done } = await withTimeout(reader.read(), 15000, 'continuous chunk');
        if (done) break;
        text += decoder.decode(value, { stream: true });
        // The first heartbeat (a bare newline) proves the stream is live.
        if (!written && text.includes('\n')) {
          written = true;
          await db.put({ _id: 'streamed', x: 1 });
        }
        const lines = text.split('\n').filter((l) => l.trim() !== '');
        const row = lines.map((l) => JSON.parse(l)).find((r) => r.id === 'streamed');
        if (row) {
          assert.equal(row.doc.x, 1);
          assert.match(row.changes[0].rev, /^1-/);
          return;
        }
      }
      assert.fail(`no continuous row for "streamed"; got ${JSON.stringify(text)}`);
    } finally {
      controller.abort();
    }
  });
});
