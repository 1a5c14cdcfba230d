// PouchDB's query() against Settee's views: map, built-in and JavaScript
// reduce, group and group_level, keys, include_docs (with linked
// documents), ranges, descending, limit/skip, reduce=false, stale queries.
// The expected answers are CouchDB 3.4.3's (this file passes unchanged with
// SETTEE_URL pointing at the reference CouchDB).

import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { remoteDb } from './helpers.js';

describe('query()', () => {
  let db;
  const docs = [];
  for (let i = 0; i < 30; i++) {
    docs.push({ _id: `d${String(i).padStart(2, '0')}`, n: i, type: ['a', 'b', 'c'][i % 3], tags: [`t${i % 2}`] });
  }
  docs.push({ _id: 'link', n: 100, type: 'z', ref: 'd05' });

  before(async () => {
    db = remoteDb('views');
    await db.bulkDocs(docs);
    await db.put({
      _id: '_design/app',
      views: {
        by_n: { map: 'function (doc) { emit(doc.n, doc.type); }' },
        by_type_n: { map: 'function (doc) { emit([doc.type, doc.n], doc.n); }', reduce: '_sum' },
        count: { map: 'function (doc) { emit(doc.type, null); }', reduce: '_count' },
        stats: { map: 'function (doc) { emit(doc.type, doc.n); }', reduce: '_stats' },
        js: {
          map: 'function (doc) { doc.tags && doc.tags.forEach(function (t) { emit(t, doc.n); }); }',
          reduce: 'function (keys, values, rereduce) { return sum(values); }',
        },
        linked: { map: 'function (doc) { if (doc.ref) emit(doc._id, { _id: doc.ref }); }' },
      },
    });
  });

  after(async () => {
    await db.destroy();
  });

  const sumOf = (pred) => docs.filter(pred).reduce((s, d) => s + d.n, 0);

  test('a map view with a range, descending, limit and skip', async () => {
    const res = await db.query('app/by_n', { startkey: 25, endkey: 10, descending: true, limit: 3, skip: 1 });
    assert.equal(res.total_rows, 31);
    assert.equal(res.offset, 6);
    assert.deepEqual(res.rows.map((r) => [r.id, r.key, r.value]), [
      ['d24', 24, 'a'], ['d23', 23, 'c'], ['d22', 22, 'b'],
    ]);
  });

  test('keys keep their order and repeat', async () => {
    const res = await db.query('app/by_n', { keys: [7, 3, 7, 1000] });
    assert.deepEqual(res.rows.map((r) => r.id), ['d07', 'd03', 'd07']);
  });

  test('include_docs and linked documents', async () => {
    const res = await db.query('app/by_n', { key: 4, include_docs: true });
    assert.equal(res.rows[0].doc._id, 'd04');
    assert.equal(res.rows[0].doc.n, 4);
    const linked = await db.query('app/linked', { include_docs: true });
    assert.equal(linked.rows[0].id, 'link');
    assert.equal(linked.rows[0].doc._id, 'd05');
  });

  test('built-in reduces, whole and grouped', async () => {
    const all = await db.query('app/by_type_n');
    assert.deepEqual(all.rows, [{ key: null, value: sumOf(() => true) }]);
    const grouped = await db.query('app/by_type_n', { group_level: 1 });
    assert.deepEqual(grouped.rows, ['a', 'b', 'c', 'z'].map((t) => ({ key: [t], value: sumOf((d) => d.type === t) })));
    const count = await db.query('app/count', { group: true, keys: ['c', 'a'] });
    assert.deepEqual(count.rows, [{ key: 'c', value: 10 }, { key: 'a', value: 10 }]);
    const stats = await db.query('app/stats', { key: 'b' });
    const b = docs.filter((d) => d.type === 'b').map((d) => d.n);
    assert.deepEqual(stats.rows[0].value, {
      sum: b.reduce((s, n) => s + n, 0),
      count: b.length,
      min: Math.min(...b),
      max: Math.max(...b),
      sumsqr: b.reduce((s, n) => s + n * n, 0),
    });
  });

  test('a JavaScript reduce, grouped, and reduce=false', async () => {
    const grouped = await db.query('app/js', { group: true });
    assert.deepEqual(grouped.rows, [
      { key: 't0', value: sumOf((d) => d.tags && d.tags[0] === 't0') },
      { key: 't1', value: sumOf((d) => d.tags && d.tags[0] === 't1') },
    ]);
    const rows = await db.query('app/js', { reduce: false, key: 't1', limit: 2 });
    assert.deepEqual(rows.rows.map((r) => r.id), ['d01', 'd03']);
  });

  test('stale queries answer from the index as built, then it catches up', async () => {
    await db.query('app/by_n', { limit: 1 });
    await db.put({ _id: 'late', n: 1000, type: 'a' });
    const stale = await db.query('app/by_n', { stale: 'ok', key: 1000 });
    assert.equal(stale.rows.length, 0);
    const fresh = await db.query('app/by_n', { key: 1000 });
    assert.deepEqual(fresh.rows.map((r) => r.id), ['late']);
  });

  test('a missing view is a 404 with CouchDB\'s reason', async () => {
    await assert.rejects(db.query('app/nope'), (err) => {
      assert.equal(err.status, 404);
      assert.equal(err.reason, 'missing_named_view');
      return true;
    });
  });
});
