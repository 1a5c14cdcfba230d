// nano against the server: the server root and uuids, a database's life
// (create, info, list, destroy, and the errors on each), single documents
// (insert, get, head, update, destroy, conflicts, revs_info) and a bulk load
// of 500 documents read back through `list` and `fetch`. The expected
// answers are CouchDB 3.4.3's.

import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { nano, uniqueName, freshDb, rejectsWith, corpus } from './helpers.js';

const REV = /^\d+-[0-9a-f]{32}$/;

test('server root and uuids', async () => {
  const info = await nano.info();
  assert.equal(info.couchdb, 'Welcome');
  assert.match(info.version, /^\d+\.\d+\.\d+/);
  assert.equal(typeof info.uuid, 'string');
  const { uuids } = await nano.uuids(3);
  assert.equal(uuids.length, 3);
  for (const u of uuids) assert.match(u, /^[0-9a-f]{32}$/);
  assert.equal(new Set(uuids).size, 3);
});

describe('database life', () => {
  const name = uniqueName('life');

  test('create, info, list, create again, destroy', async () => {
    assert.deepEqual(await nano.db.create(name), { ok: true });
    const info = await nano.db.get(name);
    assert.equal(info.db_name, name);
    assert.equal(info.doc_count, 0);
    assert.equal(info.doc_del_count, 0);
    assert.equal(typeof info.update_seq, 'string');
    assert.equal(typeof info.sizes.active, 'number');
    assert.ok((await nano.db.list()).includes(name));
    await rejectsWith(nano.db.create(name), 412, 'file_exists',
      'The database could not be created, the file already exists.');
    assert.deepEqual(await nano.db.destroy(name), { ok: true });
    await rejectsWith(nano.db.get(name), 404, 'not_found', 'Database does not exist.');
    await rejectsWith(nano.db.destroy(name), 404, 'not_found', 'Database does not exist.');
    assert.ok(!(await nano.db.list()).includes(name));
  });

  test('an illegal database name is refused', async () => {
    await rejectsWith(nano.db.create('Bad_Name'), 400, 'illegal_database_name',
      "Name: 'Bad_Name'. Only lowercase characters (a-z), digits (0-9), and any of the characters _, $, (, ), +, -, and / are allowed. Must begin with a letter.");
  });

  test('a document of a missing database', async () => {
    await rejectsWith(nano.use(uniqueName('nowhere')).get('x'), 404, 'not_found', 'Database does not exist.');
  });
});

describe('documents', () => {
  let name;
  let db;
  before(async () => { [name, db] = await freshDb('docs'); });
  after(async () => { await nano.db.destroy(name); });

  test('insert, get, update, head, destroy', async () => {
    const created = await db.insert({ kind: 'note', text: 'héllo ✓', nested: { a: [1, 2.5, null, true] } }, 'note1');
    assert.equal(created.ok, true);
    assert.equal(created.id, 'note1');
    assert.match(created.rev, /^1-/);

    const got = await db.get('note1');
    assert.deepEqual(got, {
      _id: 'note1', _rev: created.rev, kind: 'note', text: 'héllo ✓', nested: { a: [1, 2.5, null, true] },
    });

    // The same id without a revision conflicts.
    await rejectsWith(db.insert({ kind: 'other' }, 'note1'), 409, 'conflict', 'Document update conflict.');
    // A stale revision too, by _rev in the body.
    const updated = await db.insert({ ...got, text: 'updated' });
    assert.equal(updated.id, 'note1');
    assert.match(updated.rev, /^2-/);
    await rejectsWith(db.insert({ ...got, text: 'stale' }), 409, 'conflict', 'Document update conflict.');

    const headers = await db.head('note1');
    assert.equal(headers.statusCode, 200);
    assert.equal(headers.etag, `"${updated.rev}"`);

    const withInfo = await db.get('note1', { revs_info: true });
    // Before a compaction the first revision's body is still there.
    assert.deepEqual(withInfo._revs_info.map((r) => [r.rev, r.status]),
      [[updated.rev, 'available'], [created.rev, 'available']]);
    const withRevs = await db.get('note1', { revs: true });
    assert.equal(withRevs._revisions.start, 2);
    assert.deepEqual(withRevs._revisions.ids, [updated.rev.slice(2), created.rev.slice(2)]);
    assert.deepEqual(await db.get('note1', { rev: created.rev }), got);

    await rejectsWith(db.destroy('note1', created.rev), 409, 'conflict', 'Document update conflict.');
    const gone = await db.destroy('note1', updated.rev);
    assert.equal(gone.ok, true);
    assert.equal(gone.id, 'note1');
    assert.match(gone.rev, /^3-/);
    await rejectsWith(db.get('note1'), 404, 'not_found', 'deleted');
    await rejectsWith(db.get('never-was'), 404, 'not_found', 'missing');
    await rejectsWith(db.head('never-was'), 404);

    // A deleted document's tombstone is readable by revision.
    const tomb = await db.get('note1', { rev: gone.rev });
    assert.deepEqual(tomb, { _id: 'note1', _rev: gone.rev, _deleted: true });
    // And it can be recreated on top of the tombstone without a revision.
    const again = await db.insert({ kind: 'reborn' }, 'note1');
    assert.match(again.rev, /^4-/);
  });

  test('POST without an id gets a server uuid', async () => {
    const res = await db.insert({ kind: 'auto' });
    assert.equal(res.ok, true);
    assert.match(res.id, /^[0-9a-f]{32}$/);
    assert.match(res.rev, REV);
    assert.equal((await db.get(res.id)).kind, 'auto');
  });

  test('a document id starting with an underscore is refused', async () => {
    await rejectsWith(db.insert({ a: 1 }, '_bad'), 400, 'illegal_docid', 'Only reserved document ids may start with underscore.');
  });

  test('_local documents', async () => {
    const res = await db.insert({ checkpoint: 7 }, '_local/cp');
    assert.deepEqual(res, { ok: true, id: '_local/cp', rev: '0-1' });
    const got = await db.get('_local/cp');
    assert.deepEqual(got, { _id: '_local/cp', _rev: '0-1', checkpoint: 7 });
    const next = await db.insert({ ...got, checkpoint: 8 });
    assert.deepEqual(next, { ok: true, id: '_local/cp', rev: '0-2' });
    // _local documents are not in _all_docs.
    const all = await db.list();
    assert.ok(!all.rows.some((r) => r.id.startsWith('_local/')));
  });
});

describe('bulk load of 500 documents', () => {
  let name;
  let db;
  const docs = corpus(500);
  let results;
  before(async () => {
    [name, db] = await freshDb('bulk');
    results = await db.bulk({ docs });
  });
  after(async () => { await nano.db.destroy(name); });

  test('every document is written, in order', async () => {
    assert.equal(results.length, 500);
    results.forEach((r, i) => {
      assert.equal(r.ok, true, JSON.stringify(r));
      assert.equal(r.id, docs[i]._id);
      assert.match(r.rev, /^1-[0-9a-f]{32}$/);
    });
    const info = await db.info();
    assert.equal(info.doc_count, 500);
  });

  test('list: total_rows, limit, skip, ranges, descending, include_docs', async () => {
    const all = await db.list();
    assert.equal(all.total_rows, 500);
    assert.equal(all.offset, 0);
    assert.equal(all.rows.length, 500);
    assert.deepEqual(all.rows[0], { id: 'd000', key: 'd000', value: { rev: results[0].rev } });
    assert.deepEqual(all.rows.map((r) => r.id), docs.map((d) => d._id));

    const page = await db.list({ startkey: 'd100', endkey: 'd199', limit: 10, skip: 5, include_docs: true });
    assert.equal(page.total_rows, 500);
    assert.equal(page.offset, 105);
    assert.deepEqual(page.rows.map((r) => r.id), docs.slice(105, 115).map((d) => d._id));
    assert.deepEqual(page.rows[0].doc, { ...docs[105], _rev: results[105].rev });

    const desc = await db.list({ descending: true, limit: 3 });
    assert.deepEqual(desc.rows.map((r) => r.id), ['d499', 'd498', 'd497']);
    assert.equal(desc.offset, 0);

    const exclusive = await db.list({ start_key: 'd010', end_key: 'd013', inclusive_end: false });
    assert.deepEqual(exclusive.rows.map((r) => r.id), ['d010', 'd011', 'd012']);
  });

  test('fetch by keys, with a missing and a deleted key', async () => {
    const deleted = await db.destroy('d007', results[7].rev);
    const res = await db.fetch({ keys: ['d003', 'nope', 'd007', 'd001'] });
    assert.equal(res.total_rows, 499);
    assert.equal(res.rows.length, 4);
    assert.deepEqual(res.rows[0], { id: 'd003', key: 'd003', value: { rev: results[3].rev }, doc: { ...docs[3], _rev: results[3].rev } });
    assert.deepEqual(res.rows[1], { key: 'nope', error: 'not_found' });
    assert.deepEqual(res.rows[2], { id: 'd007', key: 'd007', value: { rev: deleted.rev, deleted: true }, doc: null });
    assert.equal(res.rows[3].id, 'd001');

    const revs = await db.fetchRevs({ keys: ['d001', 'nope'] });
    assert.deepEqual(revs.rows, [
      { id: 'd001', key: 'd001', value: { rev: results[1].rev } },
      { key: 'nope', error: 'not_found' },
    ]);
  });

  test('a second bulk write reports a conflict per document, and writes the rest', async () => {
    const res = await db.bulk({
      docs: [
        { _id: 'd000', n: -1 }, // no _rev: conflict
        { _id: 'd001', _rev: results[1].rev, n: 1001 },
        { _id: 'new1', n: 'fresh' },
      ],
    });
    assert.equal(res.length, 3);
    assert.deepEqual(res[0], { id: 'd000', error: 'conflict', reason: 'Document update conflict.' });
    assert.equal(res[1].ok, true);
    assert.match(res[1].rev, /^2-/);
    assert.equal(res[2].ok, true);
    assert.equal((await db.get('d001')).n, 1001);
    assert.equal((await db.get('d000')).n, 0);
  });
});
