// Partitioned databases through nano: create with `partitioned: true`,
// documents `partition:id`, `partitionInfo`, `partitionedList`,
// `partitionedFind` (with a partitioned index), `partitionedView` (a
// partitioned design document), the streams of each, and CouchDB's errors
// for ids without a partition. The expected answers are CouchDB 3.4.3's.

import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { nano, uniqueName, rejectsWith } from './helpers.js';

async function drain(stream) {
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  return JSON.parse(Buffer.concat(chunks).toString('utf8'));
}

describe('partitioned database', () => {
  const name = uniqueName('part');
  let db;
  before(async () => {
    assert.deepEqual(await nano.db.create(name, { partitioned: true }), { ok: true });
    db = nano.use(name);
    const docs = [];
    for (const p of ['alice', 'bob']) {
      for (let i = 0; i < 30; i++) docs.push({ _id: `${p}:${String(i).padStart(2, '0')}`, owner: p, i, even: i % 2 === 0 });
    }
    const res = await db.bulk({ docs });
    assert.equal(res.filter((r) => r.ok).length, 60);
  });
  after(async () => { await nano.db.destroy(name); });

  test('info says partitioned; partitionInfo counts one partition', async () => {
    const info = await db.info();
    assert.equal(info.props.partitioned, true);
    assert.equal(info.doc_count, 60);
    const part = await db.partitionInfo('alice');
    assert.equal(part.db_name, name);
    assert.equal(part.partition, 'alice');
    assert.equal(part.doc_count, 30);
    assert.equal(part.doc_del_count, 0);
    const d = await db.get('alice:03');
    await db.destroy('alice:03', d._rev);
    const after = await db.partitionInfo('alice');
    assert.equal(after.doc_count, 29);
    assert.equal(after.doc_del_count, 1);
    const none = await db.partitionInfo('nobody');
    assert.equal(none.doc_count, 0);
  });

  test('partitionedList: only the partition, with the usual options', async () => {
    const res = await db.partitionedList('bob', { limit: 3, skip: 1, include_docs: true });
    assert.deepEqual(res.rows.map((r) => r.id), ['bob:01', 'bob:02', 'bob:03']);
    assert.equal(res.rows[0].doc.owner, 'bob');
    const keyed = await db.partitionedList('bob', { startkey: 'bob:25', endkey: 'bob:27' });
    assert.deepEqual(keyed.rows.map((r) => r.id), ['bob:25', 'bob:26', 'bob:27']);
    const streamed = await drain(db.partitionedListAsStream('bob', { limit: 2 }));
    assert.deepEqual(streamed.rows.map((r) => r.id), ['bob:00', 'bob:01']);
  });

  test('partitionedFind with a partitioned index', async () => {
    const idx = await db.createIndex({ index: { fields: ['i'] }, name: 'by-i', ddoc: 'by-i' });
    assert.equal(idx.result, 'created');
    const res = await db.partitionedFind('alice', {
      selector: { i: { $gte: 20 }, even: true }, fields: ['_id', 'i'], sort: [{ i: 'asc' }], limit: 3,
    });
    assert.deepEqual(res.docs, [{ _id: 'alice:20', i: 20 }, { _id: 'alice:22', i: 22 }, { _id: 'alice:24', i: 24 }]);
    const streamed = await drain(db.partitionedFindAsStream('bob', { selector: { i: { $lt: 2 } }, fields: ['_id'] }));
    assert.deepEqual(streamed.docs.map((d) => d._id).sort(), ['bob:00', 'bob:01']);
  });

  test('partitionedView of a partitioned design document', async () => {
    await db.insert({
      views: { by_i: { map: 'function (doc) { emit(doc.i, 1); }', reduce: '_count' } },
    }, '_design/v');
    const reduced = await db.partitionedView('bob', 'v', 'by_i', {});
    assert.deepEqual(reduced.rows, [{ key: null, value: 30 }]);
    const rows = await db.partitionedView('bob', 'v', 'by_i', { reduce: false, startkey: 10, endkey: 12 });
    assert.deepEqual(rows.rows.map((r) => r.id), ['bob:10', 'bob:11', 'bob:12']);
    const streamed = await drain(db.partitionedViewAsStream('alice', 'v', 'by_i', { reduce: false, limit: 1 }));
    assert.deepEqual(streamed.rows.map((r) => r.id), ['alice:00']);
  });

  test('ids without a partition are refused', async () => {
    await rejectsWith(db.insert({ x: 1 }, 'nopartition'), 400, 'illegal_docid', 'Doc id must be of form partition:id');
    await rejectsWith(db.insert({ x: 1 }, '_bad:x'), 400, 'illegal_docid', 'Only reserved document ids may start with underscore.');
  });
});
