// The changes feed through nano: `changes` (normal feed: since, limit,
// include_docs, descending, style=all_docs, a deletion, longpoll) and the
// ChangesReader of nano 10 (`get`: every change in batches until the feed is
// empty; `start`: live changes by longpoll, then `stop`; `spool`: one
// streamed request; a `selector` filter). The expected answers are
// CouchDB 3.4.3's.

import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { nano, freshDb, corpus, withTimeout } from './helpers.js';

const N = 250;

/**
 * Collects a ChangesReader's events until 'end' (or a `stopWhen` change, then
 * stops it). `finished(ms, what)` waits for the end at most `ms`, and stops
 * the reader whatever happens (so a failing test leaves no poller behind).
 */
function collect(reader, ee, { stopWhen } = {}) {
  const changes = [];
  const batches = [];
  const seqs = [];
  const errors = [];
  const done = new Promise((resolve) => {
    ee.on('change', (c) => {
      changes.push(c);
      if (stopWhen && stopWhen(changes)) reader.stop();
    });
    ee.on('batch', (b) => batches.push(b.length));
    ee.on('seq', (s) => seqs.push(s));
    ee.on('error', (e) => errors.push(e));
    ee.on('end', (since) => resolve(since));
  });
  const finished = (ms, what) => withTimeout(done, ms, what).finally(() => reader.stop());
  return { changes, batches, seqs, errors, done, finished };
}

describe('changes', () => {
  let name;
  let db;
  before(async () => {
    [name, db] = await freshDb('changes');
    const res = await db.bulk({ docs: corpus(N) });
    assert.equal(res.length, N);
  });
  after(async () => { await nano.db.destroy(name); });

  test('normal feed: since 0, limit, include_docs, descending', async () => {
    const all = await db.changes({ since: 0 });
    assert.equal(all.results.length, N);
    assert.equal(all.pending, 0);
    assert.equal(typeof all.last_seq, 'string');
    assert.deepEqual(all.results.map((r) => r.id).sort(), corpus(N).map((d) => d._id));
    for (const r of all.results) {
      assert.equal(typeof r.seq, 'string');
      assert.equal(r.changes.length, 1);
      assert.match(r.changes[0].rev, /^1-/);
    }

    const page = await db.changes({ since: 0, limit: 10, include_docs: true });
    assert.equal(page.results.length, 10);
    assert.equal(page.pending, N - 10);
    for (const r of page.results) assert.equal(r.doc._id, r.id);
    // Resume from the page's last_seq: the rest.
    const rest = await db.changes({ since: page.last_seq });
    assert.equal(rest.results.length, N - 10);
    assert.deepEqual([...page.results, ...rest.results].map((r) => r.id).sort(), all.results.map((r) => r.id).sort());

    // Descending: every change again (CouchDB's order across its shards is
    // its own, so only the set is compared), and limit applies.
    const desc = await db.changes({ descending: true });
    assert.deepEqual(desc.results.map((r) => r.id).sort(), all.results.map((r) => r.id).sort());
    assert.equal((await db.changes({ descending: true, limit: 1 })).results.length, 1);
  });

  test('a deletion and an update show as the latest change of each document', async () => {
    const mark = (await db.changes({ since: 'now' })).last_seq;
    const d5 = await db.get('d005');
    const del = await db.destroy('d005', d5._rev);
    const d6 = await db.get('d006');
    const upd = await db.insert({ ...d6, more: true });
    const res = await db.changes({ since: mark, style: 'all_docs' });
    const byId = res.results.sort((a, b) => (a.id < b.id ? -1 : 1));
    assert.deepEqual(byId.map((r) => [r.id, r.changes.map((c) => c.rev), r.deleted === true]), [
      ['d005', [del.rev], true],
      ['d006', [upd.rev], false],
    ]);
    assert.deepEqual((await db.changes({ since: res.last_seq })).results, []);
  });

  test('longpoll returns as soon as a change comes', async () => {
    const mark = (await db.changes({ since: 'now' })).last_seq;
    const poll = db.changes({ feed: 'longpoll', since: mark, timeout: 20000 });
    await new Promise((r) => setTimeout(r, 300));
    const started = Date.now();
    await db.insert({ late: true }, 'late1');
    const res = await withTimeout(poll, 15000, 'the longpoll answer');
    assert.ok(Date.now() - started < 10000);
    assert.deepEqual(res.results.map((r) => r.id), ['late1']);
  });

  test('ChangesReader.get: every change in batches, then end', async () => {
    const handle = nano.use(name);
    const ee = handle.changesReader.get({ since: '0', batchSize: 100, timeout: 5000 });
    const got = collect(handle.changesReader, ee);
    const since = await got.finished(30000, 'ChangesReader.get to end');
    assert.deepEqual(got.errors, []);
    const ids = new Set(got.changes.map((c) => c.id));
    assert.equal(ids.size, N + 1); // the corpus and late1
    assert.ok(got.batches.length >= 3, `batches of at most 100: ${got.batches}`);
    assert.ok(got.batches.every((n) => n <= 100));
    assert.equal(since, got.seqs[got.seqs.length - 1]);
  });

  test('ChangesReader.start: live changes until stop', async () => {
    const handle = nano.use(name);
    const want = ['live1', 'live2', 'live3'];
    const ee = handle.changesReader.start({ since: 'now', timeout: 5000 });
    const got = collect(handle.changesReader, ee, {
      stopWhen: (changes) => want.every((id) => changes.some((c) => c.id === id)),
    });
    await new Promise((r) => setTimeout(r, 500));
    for (const id of want) await db.insert({ live: true }, id);
    await got.finished(30000, 'the live changes');
    assert.deepEqual(got.errors, []);
    assert.deepEqual(got.changes.map((c) => c.id).sort(), want);
  });

  test('ChangesReader.start with a selector and include_docs', async () => {
    const handle = nano.use(name);
    const ee = handle.changesReader.start({
      since: '0', timeout: 5000, includeDocs: true, selector: { group: 'g3', n: { $lt: 30 } },
    });
    const got = collect(handle.changesReader, ee, { stopWhen: (changes) => changes.length >= 6 });
    await got.finished(30000, 'the filtered changes');
    assert.deepEqual(got.errors, []);
    assert.deepEqual(got.changes.map((c) => c.id).sort(), ['d003', 'd008', 'd013', 'd018', 'd023', 'd028']);
    for (const c of got.changes) assert.equal(c.doc.group, 'g3');
  });

  test('ChangesReader.spool: one streamed request', async () => {
    const handle = nano.use(name);
    const ee = handle.changesReader.spool({ since: '0', batchSize: 50 });
    const got = collect(handle.changesReader, ee);
    const lastSeq = await got.finished(30000, 'the spool to end');
    assert.deepEqual(got.errors, []);
    // The batches carry every change; the reader reports the feed's last_seq.
    const batched = got.batches.reduce((a, b) => a + b, 0);
    assert.equal(batched, (await db.changes({ since: 0 })).results.length);
    assert.equal(typeof lastSeq, 'string');
    assert.equal(lastSeq, (await db.changes({ since: 'now' })).last_seq);
  });
});
