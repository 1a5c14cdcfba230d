// PouchDB's find() (the pouchdb-find plugin, pinned by package-lock.json)
// against Settee's Mango endpoints: createIndex (created, then exists),
// getIndexes, find with selectors ($eq, ranges, $in, $or, $regex, $exists,
// nested fields), fields, sort with an index (asc and desc), limit/skip,
// paging with bookmarks, a sort no index serves (no_usable_index), explain,
// deleteIndex and use_index. Each test gets a fresh database, destroyed
// after it. The expected answers are CouchDB 3.4.3's (this file passes
// unchanged with SETTEE_URL pointing at the reference CouchDB).

import { test, describe, beforeEach, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import PouchFind from 'pouchdb-find';
import { PouchDB, remoteDb, dbName } from './helpers.js';

PouchDB.plugin(PouchFind);

const people = [
  { _id: 'p01', name: 'Alice', age: 31, address: { city: 'Paris', zip: '75001' }, email: 'alice@example.com', tags: ['a', 'b'] },
  { _id: 'p02', name: 'Bob', age: 25, address: { city: 'Berlin', zip: '10115' } },
  { _id: 'p03', name: 'Carol', age: 42, address: { city: 'Paris', zip: '75002' }, email: 'carol@example.com' },
  { _id: 'p04', name: 'Dave', age: 19, address: { city: 'Lyon', zip: '69001' }, tags: ['b'] },
  { _id: 'p05', name: 'Erin', age: 37, address: { city: 'Berlin', zip: '10117' }, email: 'erin@example.com' },
  { _id: 'p06', name: 'Frank', age: 25, address: { city: 'Madrid', zip: '28001' } },
  { _id: 'p07', name: 'Grace', age: 55, address: { city: 'Paris', zip: '75003' } },
  { _id: 'p08', name: 'Heidi', age: 28, address: { city: 'Rome', zip: '00118' }, email: null },
  { _id: 'p09', name: 'Ivan', address: { city: 'Oslo', zip: '0150' } },
];

const ids = (res) => res.docs.map((d) => d._id);

const ALL_DOCS_INDEX = { ddoc: null, name: '_all_docs', type: 'special', def: { fields: [{ _id: 'asc' }] } };
const NO_INDEX_WARNING = 'No matching index found, create an index to optimize query time.';

describe('find()', () => {
  let db;

  beforeEach(async () => {
    db = remoteDb('find');
    const res = await db.bulkDocs(people);
    assert.ok(res.every((r) => r.ok), JSON.stringify(res));
  });

  afterEach(async () => {
    await db.destroy();
  });

  /** The age index most tests use: ddoc `by-age`, name `age`. */
  const ageIndex = () => db.createIndex({ index: { fields: ['age'] }, ddoc: 'by-age', name: 'age' });

  test('createIndex creates an index, and the same index again exists', async () => {
    assert.deepEqual(await ageIndex(), { result: 'created', id: '_design/by-age', name: 'age' });
    assert.deepEqual(await ageIndex(), { result: 'exists', id: '_design/by-age', name: 'age' });

    // Without ddoc and name the server names both after the definition.
    const auto = await db.createIndex({ index: { fields: ['name'] } });
    assert.equal(auto.result, 'created');
    assert.match(auto.name, /^[0-9a-f]{40}$/);
    assert.equal(auto.id, `_design/${auto.name}`);
    assert.deepEqual(await db.createIndex({ index: { fields: ['name'] } }), { ...auto, result: 'exists' });
    const ddoc = await db.get(auto.id);
    assert.equal(ddoc.language, 'query');
  });

  test('getIndexes lists _all_docs and every index, by design document id', async () => {
    await db.createIndex({ index: { fields: ['address.city', 'age'] }, ddoc: 'city-age', name: 'city-age' });
    await ageIndex();
    const res = await db.getIndexes();
    assert.deepEqual(res, {
      total_rows: 3,
      indexes: [
        ALL_DOCS_INDEX,
        { ddoc: '_design/by-age', name: 'age', type: 'json', partitioned: false, def: { fields: [{ age: 'asc' }] } },
        {
          ddoc: '_design/city-age',
          name: 'city-age',
          type: 'json',
          partitioned: false,
          def: { fields: [{ 'address.city': 'asc' }, { age: 'asc' }] },
        },
      ],
    });
  });

  test('implicit $eq, on top-level and nested fields, without an index', async () => {
    const bob = await db.find({ selector: { name: 'Bob' } });
    assert.deepEqual(ids(bob), ['p02']);
    assert.equal(bob.warning, NO_INDEX_WARNING);
    assert.deepEqual(bob.docs[0], { ...people[1], _rev: bob.docs[0]._rev });
    assert.match(bob.docs[0]._rev, /^1-[0-9a-f]{32}$/);

    const dotted = await db.find({ selector: { 'address.city': 'Paris' } });
    assert.deepEqual(ids(dotted), ['p01', 'p03', 'p07']);
    const nested = await db.find({ selector: { address: { city: 'Paris', zip: { $gt: '75001' } } } });
    assert.deepEqual(ids(nested), ['p03', 'p07']);
    const none = await db.find({ selector: { name: 'Nobody' } });
    assert.deepEqual(none.docs, []);
  });

  test('$gt/$lt ranges answered from an index, in index order', async () => {
    await ageIndex();
    const res = await db.find({ selector: { age: { $gt: 20, $lt: 40 } } });
    assert.deepEqual(ids(res), ['p02', 'p06', 'p08', 'p01', 'p05']);
    assert.equal(res.warning, undefined);
    const inclusive = await db.find({ selector: { age: { $gte: 25, $lte: 31 } } });
    assert.deepEqual(ids(inclusive), ['p02', 'p06', 'p08', 'p01']);
    // Ivan has no age: no index row, and no match for any range either.
    const all = await db.find({ selector: { age: { $gt: null } } });
    assert.deepEqual(ids(all), ['p04', 'p02', 'p06', 'p08', 'p01', 'p05', 'p03', 'p07']);
  });

  test('$in, $or and $and', async () => {
    const inCity = await db.find({ selector: { 'address.city': { $in: ['Berlin', 'Rome'] } } });
    assert.deepEqual(ids(inCity), ['p02', 'p05', 'p08']);
    const either = await db.find({ selector: { $or: [{ name: 'Dave' }, { age: { $gte: 50 } }, { tags: { $in: ['a'] } }] } });
    assert.deepEqual(ids(either), ['p01', 'p04', 'p07']);
    const both = await db.find({ selector: { $and: [{ 'address.city': 'Paris' }, { age: { $lt: 50 } }] } });
    assert.deepEqual(ids(both), ['p01', 'p03']);
  });

  test('$regex and $exists', async () => {
    const regex = await db.find({ selector: { name: { $regex: '^[A-C]' } } });
    assert.deepEqual(ids(regex), ['p01', 'p02', 'p03']);
    const zip = await db.find({ selector: { 'address.zip': { $regex: '^750' } } });
    assert.deepEqual(ids(zip), ['p01', 'p03', 'p07']);
    // A field holding null exists.
    const withEmail = await db.find({ selector: { email: { $exists: true } } });
    assert.deepEqual(ids(withEmail), ['p01', 'p03', 'p05', 'p08']);
    const withoutEmail = await db.find({ selector: { email: { $exists: false } } });
    assert.deepEqual(ids(withoutEmail), ['p02', 'p04', 'p06', 'p07', 'p09']);
    const withTags = await db.find({ selector: { tags: { $exists: true }, name: { $regex: 'a' } } });
    assert.deepEqual(ids(withTags), ['p04']);
  });

  test('fields projects top-level and nested fields', async () => {
    const res = await db.find({
      selector: { 'address.city': 'Paris' },
      fields: ['_id', 'name', 'address.city', 'email'],
    });
    assert.deepEqual(res.docs, [
      { _id: 'p01', name: 'Alice', address: { city: 'Paris' }, email: 'alice@example.com' },
      { _id: 'p03', name: 'Carol', address: { city: 'Paris' }, email: 'carol@example.com' },
      { _id: 'p07', name: 'Grace', address: { city: 'Paris' } },
    ]);
  });

  test('sort ascending and descending with an index', async () => {
    await ageIndex();
    const asc = await db.find({ selector: { age: { $gte: 25 } }, sort: ['age'], fields: ['_id', 'age'] });
    assert.deepEqual(asc.docs, [
      { _id: 'p02', age: 25 }, { _id: 'p06', age: 25 }, { _id: 'p08', age: 28 }, { _id: 'p01', age: 31 },
      { _id: 'p05', age: 37 }, { _id: 'p03', age: 42 }, { _id: 'p07', age: 55 },
    ]);
    const desc = await db.find({ selector: { age: { $gte: 25 } }, sort: [{ age: 'desc' }] });
    assert.deepEqual(ids(desc), ['p07', 'p03', 'p05', 'p01', 'p08', 'p06', 'p02']);

    // A two-field index serves an equality on its first field and a sort on both.
    await db.createIndex({ index: { fields: ['address.city', 'age'] }, ddoc: 'city-age', name: 'city-age' });
    const paris = await db.find({
      selector: { 'address.city': 'Paris', age: { $gt: 0 } },
      sort: [{ 'address.city': 'desc' }, { age: 'desc' }],
    });
    assert.deepEqual(ids(paris), ['p07', 'p03', 'p01']);
  });

  test('limit and skip', async () => {
    await ageIndex();
    const page = await db.find({ selector: { age: { $gt: 0 } }, sort: ['age'], limit: 3, skip: 2 });
    assert.deepEqual(ids(page), ['p06', 'p08', 'p01']);
    const tail = await db.find({ selector: { age: { $gt: 0 } }, sort: ['age'], limit: 5, skip: 6 });
    assert.deepEqual(ids(tail), ['p03', 'p07']);
    const past = await db.find({ selector: { age: { $gt: 0 } }, skip: 20 });
    assert.deepEqual(past.docs, []);
    const noIndex = await db.find({ selector: { 'address.city': { $gt: 'B' } }, limit: 2, skip: 1 });
    assert.deepEqual(ids(noIndex), ['p02', 'p03']);
  });

  test('paging with bookmark, with and without an index', async () => {
    await ageIndex();
    const page = async (request) => {
      const pages = [];
      let bookmark;
      for (let i = 0; i < 10; i++) {
        const res = await db.find({ ...request, limit: 3, ...(bookmark ? { bookmark } : {}) });
        assert.equal(typeof res.bookmark, 'string');
        pages.push(ids(res));
        if (res.docs.length === 0) return pages;
        bookmark = res.bookmark;
      }
      assert.fail(`no empty page after 10 pages: ${JSON.stringify(pages)}`);
    };
    assert.deepEqual(await page({ selector: { age: { $gt: 0 } }, sort: ['age'] }), [
      ['p04', 'p02', 'p06'], ['p08', 'p01', 'p05'], ['p03', 'p07'], [],
    ]);
    assert.deepEqual(await page({ selector: { age: { $gt: 0 } }, sort: [{ age: 'desc' }] }), [
      ['p07', 'p03', 'p05'], ['p01', 'p08', 'p06'], ['p02', 'p04'], [],
    ]);
    assert.deepEqual(await page({ selector: { name: { $gt: 'B' } } }), [
      ['p02', 'p03', 'p04'], ['p05', 'p06', 'p07'], ['p08', 'p09'], [],
    ]);
  });

  test('a sort no index serves is no_usable_index (400)', async () => {
    await ageIndex();
    await assert.rejects(db.find({ selector: { name: { $gt: null } }, sort: ['name'] }), (err) => {
      assert.equal(err.status, 400);
      assert.equal(err.error, 'no_usable_index');
      assert.equal(err.reason, 'No index exists for this sort, try indexing by the sort fields.');
      return true;
    });
    // Indexes are sorted one way as a whole: a sort mixing directions is refused.
    await db.createIndex({ index: { fields: ['address.city', 'age'] }, ddoc: 'city-age', name: 'city-age' });
    await assert.rejects(
      db.find({ selector: { 'address.city': 'Paris', age: { $gt: 0 } }, sort: [{ 'address.city': 'asc' }, { age: 'desc' }] }),
      (err) => {
        assert.equal(err.status, 400);
        assert.equal(err.error, 'unsupported_mixed_sort');
        assert.equal(err.reason, 'Sorts currently only support a single direction for all fields.');
        return true;
      },
    );
  });

  test('explain names the index and the range it scans', async () => {
    await ageIndex();
    await db.createIndex({ index: { fields: ['name'] }, ddoc: 'by-name', name: 'name' });
    const res = await db.explain({ selector: { age: { $gt: 26 } }, fields: ['_id'], limit: 2, skip: 1 });
    const ageDef = { ddoc: '_design/by-age', name: 'age', type: 'json', partitioned: false, def: { fields: [{ age: 'asc' }] } };
    const nameDef = { ddoc: '_design/by-name', name: 'name', type: 'json', partitioned: false, def: { fields: [{ name: 'asc' }] } };
    assert.deepEqual(res, {
      dbname: dbName(db),
      index: ageDef,
      partitioned: false,
      selector: { age: { $gt: 26 } },
      opts: {
        use_index: [],
        bookmark: 'nil',
        limit: 2,
        skip: 1,
        sort: {},
        fields: ['_id'],
        partition: '',
        r: 1,
        conflicts: false,
        stale: false,
        update: true,
        stable: false,
        execution_stats: false,
        allow_fallback: true,
      },
      limit: 2,
      skip: 1,
      fields: ['_id'],
      index_candidates: [
        { index: nameDef, analysis: { usable: false, reasons: [{ name: 'field_mismatch' }], ranking: 2, covering: true } },
        { index: ALL_DOCS_INDEX, analysis: { usable: true, reasons: [{ name: 'unfavored_type' }], ranking: 1, covering: null } },
      ],
      selector_hints: [{ type: 'json', indexable_fields: ['age'], unindexable_fields: [] }],
      mrargs: {
        include_docs: false,
        view_type: 'map',
        reduce: false,
        partition: null,
        start_key: [26],
        end_key: ['<MAX>'],
        direction: 'fwd',
        stable: false,
        update: true,
        conflicts: 'undefined',
      },
      covering: true,
    });

    const none = await db.explain({ selector: { 'address.city': 'Paris' } });
    assert.deepEqual(none.index, ALL_DOCS_INDEX);
    assert.equal(none.covering, false);
    assert.deepEqual(none.mrargs.start_key, null);
    assert.deepEqual(none.mrargs.end_key, '<MAX>');
    assert.equal(none.mrargs.include_docs, true);
  });

  test('execution_stats counts every row a full scan examines, design documents too', async () => {
    await ageIndex();
    await db.createIndex({ index: { fields: ['name'] }, ddoc: 'by-name', name: 'name' });
    // 9 documents and 2 design documents examined for 1 result: over
    // CouchDB's default ratio of 10, so a second warning is added.
    const res = await db.find({ selector: { 'address.zip': '00118' }, execution_stats: true });
    assert.deepEqual(ids(res), ['p08']);
    const { execution_time_ms: ms, ...stats } = res.execution_stats;
    assert.equal(typeof ms, 'number');
    assert.deepEqual(stats, {
      total_keys_examined: 11,
      total_docs_examined: 11,
      total_quorum_docs_examined: 0,
      results_returned: 1,
    });
    assert.equal(res.warning, [
      NO_INDEX_WARNING,
      'The number of documents examined is high in proportion to the number of results returned. Consider adding a more specific index to improve this.',
    ].join('\n'));
  });

  test('deleteIndex removes the index; deleting it again is 404', async () => {
    await ageIndex();
    await db.createIndex({ index: { fields: ['name'] }, ddoc: 'by-name', name: 'name' });
    assert.deepEqual(await db.deleteIndex({ ddoc: '_design/by-age', name: 'age' }), { ok: true });
    const res = await db.getIndexes();
    assert.deepEqual(res.indexes.map((i) => [i.ddoc, i.name]), [[null, '_all_docs'], ['_design/by-name', 'name']]);
    await assert.rejects(db.get('_design/by-age'), (err) => err.status === 404);
    await assert.rejects(db.find({ selector: { age: { $gt: 0 } }, sort: ['age'] }), (err) => {
      assert.equal(err.status, 400);
      assert.equal(err.error, 'no_usable_index');
      return true;
    });
    await assert.rejects(db.deleteIndex({ ddoc: '_design/by-age', name: 'age' }), (err) => {
      assert.equal(err.status, 404);
      assert.equal(err.error, 'not_found');
      return true;
    });
    // The design document's name without the prefix works too.
    assert.deepEqual(await db.deleteIndex({ ddoc: 'by-name', name: 'name' }), { ok: true });
    assert.deepEqual((await db.getIndexes()).indexes, [ALL_DOCS_INDEX]);
  });

  test('use_index picks the named index, or warns and falls back', async () => {
    await ageIndex();
    await db.createIndex({ index: { fields: ['age', 'name'] }, ddoc: 'by-age-name', name: 'age-name' });
    await db.createIndex({ index: { fields: ['name'] }, ddoc: 'by-name', name: 'name' });
    const selector = { age: { $gte: 25 }, name: { $gt: 'C' } };

    const plan = await db.explain({ selector, use_index: ['by-age-name', 'age-name'] });
    assert.equal(plan.index.ddoc, '_design/by-age-name');
    assert.equal(plan.index.name, 'age-name');
    const viaPair = await db.find({ selector, use_index: ['by-age-name', 'age-name'] });
    assert.deepEqual(ids(viaPair), ['p06', 'p08', 'p05', 'p03', 'p07']);
    assert.equal(viaPair.warning, undefined);

    const byName = await db.find({ selector, use_index: '_design/by-name' });
    assert.deepEqual(ids(byName), ['p03', 'p05', 'p06', 'p07', 'p08']);
    assert.equal(byName.warning, undefined);
    assert.equal((await db.explain({ selector, use_index: 'by-name' })).index.name, 'name');

    // An index that cannot serve the query: CouchDB warns and uses another.
    const unusable = await db.find({ selector: { 'address.city': 'Paris' }, use_index: 'by-age' });
    assert.deepEqual(ids(unusable), ['p01', 'p03', 'p07']);
    assert.equal(unusable.warning, [
      '_design/by-age was not used because it does not contain a valid index for this query.',
      NO_INDEX_WARNING,
    ].join('\n'));
  });
});
