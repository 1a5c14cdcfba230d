// nano's Mango API against the server: createIndex (created, then exists),
// the index listed by `_index`, `find` with a selector, fields, a sort the
// index serves, limit, and every page walked with bookmarks, the warning for
// a query no index serves, the error for a sort no index serves, and
// findAsStream. The expected answers are CouchDB 3.4.3's.

import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { nano, freshDb, rejectsWith, corpus } from './helpers.js';

const N = 500;
const docs = corpus(N);

describe('Mango find', () => {
  let name;
  let db;
  before(async () => {
    [name, db] = await freshDb('find');
    await db.bulk({ docs });
  });
  after(async () => { await nano.db.destroy(name); });

  test('createIndex: created, then exists; listed by _index', async () => {
    const created = await db.createIndex({ index: { fields: ['group', 'n'] }, name: 'group-n', ddoc: 'mango-group' });
    assert.deepEqual(created, { result: 'created', id: '_design/mango-group', name: 'group-n' });
    const again = await db.createIndex({ index: { fields: ['group', 'n'] }, name: 'group-n', ddoc: 'mango-group' });
    assert.deepEqual(again, { result: 'exists', id: '_design/mango-group', name: 'group-n' });

    const unnamed = await db.createIndex({ index: { fields: ['tag'] } });
    assert.equal(unnamed.result, 'created');
    assert.match(unnamed.id, /^_design\/[0-9a-f]+$/);
    assert.match(unnamed.name, /^[0-9a-f]+$/);

    const list = await nano.request({ db: name, path: '_index' });
    assert.equal(list.total_rows, 3);
    assert.deepEqual(list.indexes[0], {
      ddoc: null, name: '_all_docs', type: 'special', def: { fields: [{ _id: 'asc' }] },
    });
    const mine = list.indexes.find((i) => i.name === 'group-n');
    assert.deepEqual(mine, {
      ddoc: '_design/mango-group', name: 'group-n', type: 'json', partitioned: false,
      def: { fields: [{ group: 'asc' }, { n: 'asc' }] },
    });
  });

  test('a selector with a sort the index serves, fields and limit', async () => {
    const res = await db.find({
      selector: { group: 'g3', n: { $gt: 100, $lte: 200 } },
      fields: ['_id', 'n'],
      sort: [{ group: 'asc' }, { n: 'asc' }],
      limit: 5,
    });
    assert.equal(res.warning, undefined);
    assert.deepEqual(res.docs, [103, 108, 113, 118, 123].map((n) => ({ _id: `d${n}`, n })));
    assert.equal(typeof res.bookmark, 'string');

    const desc = await db.find({
      selector: { group: 'g3', n: { $gt: 100 } },
      fields: ['n'],
      sort: [{ group: 'desc' }, { n: 'desc' }],
      limit: 3,
      use_index: ['mango-group', 'group-n'],
    });
    assert.deepEqual(desc.docs, [{ n: 498 }, { n: 493 }, { n: 488 }]);
  });

  test('every page by bookmark', async () => {
    const want = docs.filter((d) => d.group === 'g1' && d.n >= 50).map((d) => d._id);
    const seen = [];
    let bookmark;
    let pages = 0;
    // 90 matches, 25 a page: 4 pages, then an empty one.
    for (; pages < 20; pages++) {
      const res = await db.find({
        selector: { group: 'g1', n: { $gte: 50 } },
        sort: [{ group: 'asc' }, { n: 'asc' }],
        fields: ['_id'],
        limit: 25,
        ...(bookmark ? { bookmark } : {}),
      });
      seen.push(...res.docs.map((d) => d._id));
      assert.notEqual(res.bookmark, bookmark, 'the bookmark moves on');
      bookmark = res.bookmark;
      if (res.docs.length < 25) break;
    }
    assert.equal(pages, 3);
    assert.deepEqual(seen, want);
  });

  test('whole documents, $or, $in, $regex, $exists', async () => {
    const res = await db.find({
      selector: {
        $or: [{ n: { $in: [1, 2, 3] } }, { _id: { $regex: '^d49[89]$' } }],
        tag: { $exists: true },
      },
    });
    const byId = res.docs.sort((a, b) => (a._id < b._id ? -1 : 1));
    assert.deepEqual(byId.map((d) => d._id), ['d001', 'd002', 'd003', 'd498', 'd499']);
    assert.equal(byId[0].group, 'g1');
    assert.match(byId[0]._rev, /^1-/);
    // A sort on _id cannot be served with that $or (no index covers it).
    await rejectsWith(db.find({ selector: { $or: [{ n: 1 }, { n: 2 }] }, sort: [{ _id: 'asc' }] }), 400,
      'no_usable_index', 'No index exists for this sort, try indexing by the sort fields.');
  });

  test('no index serves the query: a warning, and the answer still right', async () => {
    const res = await db.find({ selector: { n: { $lt: 3 } } });
    assert.equal(res.warning, 'No matching index found, create an index to optimize query time.\n'
      + 'The number of documents examined is high in proportion to the number of results returned. Consider adding a more specific index to improve this.');
    assert.deepEqual(res.docs.map((d) => d._id).sort(), ['d000', 'd001', 'd002']);
  });

  test('a sort no index serves is refused; use_index naming no index warns', async () => {
    await rejectsWith(db.find({ selector: { n: { $gt: 0 } }, sort: [{ n: 'desc' }] }), 400, 'no_usable_index',
      'No index exists for this sort, try indexing by the sort fields.');
    // use_index naming no index is a warning, not an error.
    const res = await db.find({ selector: { n: 1 }, use_index: 'nosuch', fields: ['_id'] });
    assert.deepEqual(res.docs, [{ _id: 'd001' }]);
    assert.equal(res.warning, '_design/nosuch was not used because it does not contain a valid index for this query.\n'
      + 'No matching index found, create an index to optimize query time.\n'
      + 'The number of documents examined is high in proportion to the number of results returned. Consider adding a more specific index to improve this.');
  });

  test('findAsStream gives the same documents', async () => {
    const stream = db.findAsStream({ selector: { group: 'g0', n: { $lt: 20 } }, fields: ['_id'], sort: [{ group: 'asc' }, { n: 'asc' }] });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    const body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    assert.deepEqual(body.docs, [{ _id: 'd000' }, { _id: 'd005' }, { _id: 'd010' }, { _id: 'd015' }]);
  });
});
