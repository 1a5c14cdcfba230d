// nano views against the server: a design document with map and reduce
// functions (JavaScript map, built-in `_sum`, `_count` and `_stats`, and a
// JavaScript reduce) over 500 documents, queried as nano sends them
// (GET with JSON-encoded keys, POST for `keys`): reduce, group,
// group_level, keys, include_docs, startkey/endkey on simple and complex
// keys, descending, limit/skip, inclusive_end, a view updated after a
// write, and CouchDB's errors. The expected answers are CouchDB 3.4.3's.

import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { nano, freshDb, rejectsWith, corpus } from './helpers.js';

const N = 500;
const docs = corpus(N);
const sumOf = (pred) => docs.filter(pred).reduce((s, d) => s + d.n, 0);

const ddoc = {
  _id: '_design/stats',
  language: 'javascript',
  views: {
    by_group: {
      map: 'function (doc) { if (doc.group) emit(doc.group, doc.n); }',
      reduce: '_sum',
    },
    by_group_n: {
      map: 'function (doc) { if (doc.group) emit([doc.group, doc.n], null); }',
      reduce: '_count',
    },
    by_tag: {
      map: 'function (doc) { if (doc.tag) emit(doc.tag, doc.n); }',
      reduce: '_stats',
    },
    max_n: {
      map: 'function (doc) { if (doc.group) emit(doc.group, doc.n); }',
      reduce: 'function (keys, values, rereduce) { return Math.max.apply(null, values); }',
    },
    by_n: {
      map: 'function (doc) { if (typeof doc.n === "number") emit(doc.n, doc.group); }',
    },
  },
};

describe('views', () => {
  let name;
  let db;
  before(async () => {
    [name, db] = await freshDb('views');
    const res = await db.bulk({ docs });
    assert.equal(res.filter((r) => r.ok).length, N);
    const saved = await db.insert(ddoc);
    assert.equal(saved.ok, true);
    assert.equal(saved.id, '_design/stats');
  });
  after(async () => { await nano.db.destroy(name); });

  test('reduce over everything, and grouped', async () => {
    const total = await db.view('stats', 'by_group');
    assert.deepEqual(total, { rows: [{ key: null, value: sumOf(() => true) }] });

    const grouped = await db.view('stats', 'by_group', { group: true });
    assert.deepEqual(grouped.rows, [0, 1, 2, 3, 4].map((g) => ({
      key: `g${g}`, value: sumOf((d) => d.group === `g${g}`),
    })));

    const max = await db.view('stats', 'max_n', { group: true });
    assert.deepEqual(max.rows, [0, 1, 2, 3, 4].map((g) => ({ key: `g${g}`, value: 495 + g })));
  });

  test('_stats and _count', async () => {
    const even = docs.filter((d) => d.tag === 'even').map((d) => d.n);
    const stats = await db.view('stats', 'by_tag', { key: 'even' });
    assert.deepEqual(stats.rows, [{
      key: null,
      value: {
        sum: even.reduce((a, b) => a + b, 0),
        count: even.length,
        min: Math.min(...even),
        max: Math.max(...even),
        sumsqr: even.reduce((a, b) => a + b * b, 0),
      },
    }]);
    const count = await db.view('stats', 'by_group_n', { group_level: 1 });
    assert.deepEqual(count.rows, [0, 1, 2, 3, 4].map((g) => ({ key: [`g${g}`], value: N / 5 })));
  });

  test('keys (POST), with reduce and without', async () => {
    const reduced = await db.view('stats', 'by_group', { keys: ['g3', 'g1', 'none'], group: true });
    assert.deepEqual(reduced.rows, [
      { key: 'g3', value: sumOf((d) => d.group === 'g3') },
      { key: 'g1', value: sumOf((d) => d.group === 'g1') },
    ]);

    const rows = await db.view('stats', 'by_n', { keys: [42, 7, 1000, 7] });
    assert.equal(rows.total_rows, N);
    assert.deepEqual(rows.rows, [
      { id: 'd042', key: 42, value: 'g2' },
      { id: 'd007', key: 7, value: 'g2' },
      { id: 'd007', key: 7, value: 'g2' },
    ]);
  });

  test('include_docs with reduce=false, limit and skip', async () => {
    const res = await db.view('stats', 'by_group', { key: 'g4', reduce: false, include_docs: true, limit: 3, skip: 2 });
    assert.equal(res.total_rows, N);
    assert.equal(res.offset, 400 + 2);
    assert.deepEqual(res.rows.map((r) => r.id), ['d014', 'd019', 'd024']);
    for (const r of res.rows) {
      assert.equal(r.key, 'g4');
      assert.equal(r.value, r.doc.n);
      assert.equal(r.doc._id, r.id);
      assert.match(r.doc._rev, /^1-/);
    }
  });

  test('startkey/endkey on complex keys, descending, inclusive_end', async () => {
    const range = await db.view('stats', 'by_group_n', { startkey: ['g2', 100], endkey: ['g2', 130], reduce: false });
    assert.deepEqual(range.rows.map((r) => r.key), [[ 'g2', 102 ], ['g2', 107], ['g2', 112], ['g2', 117], ['g2', 122], ['g2', 127]]);
    assert.deepEqual(range.rows[0], { id: 'd102', key: ['g2', 102], value: null });

    const desc = await db.view('stats', 'by_group_n', { startkey: ['g2', 130], endkey: ['g2', 100], descending: true, reduce: false });
    assert.deepEqual(desc.rows.map((r) => r.id), ['d127', 'd122', 'd117', 'd112', 'd107', 'd102']);

    // `{}` sorts after every number: the whole group.
    const group = await db.view('stats', 'by_group_n', { startkey: ['g1'], endkey: ['g1', {}] });
    assert.deepEqual(group.rows, [{ key: null, value: N / 5 }]);

    const exclusive = await db.view('stats', 'by_n', { startkey: 10, endkey: 13, inclusive_end: false });
    assert.deepEqual(exclusive.rows.map((r) => r.key), [10, 11, 12]);

    const descLimit = await db.view('stats', 'by_n', { descending: true, limit: 2 });
    assert.deepEqual(descLimit.rows, [{ id: 'd499', key: 499, value: 'g4' }, { id: 'd498', key: 498, value: 'g3' }]);
    assert.equal(descLimit.offset, 0);
  });

  test('a write shows in the next query', async () => {
    const before = await db.view('stats', 'by_group', { key: 'g0' });
    const doc = await db.get('d000');
    await db.insert({ ...doc, n: 1000 });
    const after = await db.view('stats', 'by_group', { key: 'g0' });
    assert.equal(after.rows[0].value, before.rows[0].value + 1000);
    const byN = await db.view('stats', 'by_n', { key: 1000 });
    assert.deepEqual(byN.rows, [{ id: 'd000', key: 1000, value: 'g0' }]);
  });

  test("CouchDB's errors", async () => {
    await rejectsWith(db.view('stats', 'nope'), 404, 'not_found', 'missing_named_view');
    await rejectsWith(db.view('nodesign', 'by_group'), 404, 'not_found', 'missing');
    await rejectsWith(db.view('stats', 'by_group', { include_docs: true }), 400, 'query_parse_error',
      '`include_docs` is invalid for reduce');
    await rejectsWith(db.view('stats', 'by_n', { group: true }), 400, 'query_parse_error',
      'Invalid use of grouping on a map view.');
    await rejectsWith(db.view('stats', 'by_n', { startkey: 20, endkey: 10 }), 400, 'query_parse_error',
      'No rows can match your key range, reverse your start_key and end_key or set descending=true');
  });

  test('the design document reads back as saved', async () => {
    const got = await db.get('_design/stats');
    assert.deepEqual(got.views, ddoc.views);
    assert.equal(got.language, 'javascript');
    const info = await db.list({ startkey: '_design/', endkey: '_design0' });
    assert.deepEqual(info.rows.map((r) => r.id), ['_design/stats']);
  });
});
