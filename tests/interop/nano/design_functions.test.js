// Design functions through nano: `show` (a document through a show
// function, its JSON answer), `viewWithList` (a list function over a view,
// with view options), `updateWithHandler`/`atomic` (an update function
// changing a document in place, and creating one), `validate_doc_update`
// refusing a write (403 forbidden with the function's message), streams of
// views and `_all_docs`, and compaction requests. The expected answers are
// CouchDB 3.4.3's.

import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { nano, freshDb, rejectsWith } from './helpers.js';

async function drain(stream) {
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  return JSON.parse(Buffer.concat(chunks).toString('utf8'));
}

describe('design functions', () => {
  let name;
  let db;
  before(async () => {
    [name, db] = await freshDb('ddoc');
    const docs = [];
    for (let i = 0; i < 20; i++) docs.push({ _id: `item${String(i).padStart(2, '0')}`, title: `Item ${i}`, price: i * 10, count: 0 });
    await db.bulk({ docs });
    const res = await db.insert({
      language: 'javascript',
      views: {
        by_price: { map: 'function (doc) { if (doc.price !== undefined) emit(doc.price, doc.title); }' },
      },
      shows: {
        card: `function (doc, req) {
          if (!doc) return { code: 404, json: { missing: req.id || null } };
          return { json: { title: doc.title, price: doc.price, q: req.query.q || null } };
        }`,
      },
      lists: {
        titles: `function (head, req) {
          start({ headers: { 'Content-Type': 'application/json' } });
          var out = [];
          var row;
          while ((row = getRow())) out.push(row.value);
          send(JSON.stringify({ total: head.total_rows, titles: out }));
        }`,
      },
      updates: {
        bump: `function (doc, req) {
          if (!doc) {
            return [{ _id: req.id || req.uuid, count: 1, created: true }, JSON.stringify({ created: true })];
          }
          var by = req.body ? JSON.parse(req.body).by : 1;
          doc.count = (doc.count || 0) + by;
          return [doc, JSON.stringify({ count: doc.count })];
        }`,
      },
      validate_doc_update: `function (newDoc, oldDoc, userCtx) {
        if (newDoc.price !== undefined && typeof newDoc.price !== 'number') {
          throw({ forbidden: 'price must be a number' });
        }
      }`,
    }, '_design/shop');
    assert.equal(res.ok, true);
  });
  after(async () => { await nano.db.destroy(name); });

  test('show', async () => {
    const card = await db.show('shop', 'card', 'item03', { q: 'x' });
    assert.deepEqual(card, { title: 'Item 3', price: 30, q: 'x' });
  });

  test('list over a view', async () => {
    const res = await db.viewWithList('shop', 'by_price', 'titles', { startkey: 50, endkey: 80 });
    assert.deepEqual(res, { total: 20, titles: ['Item 5', 'Item 6', 'Item 7', 'Item 8'] });
    const desc = await db.viewWithList('shop', 'by_price', 'titles', { descending: true, limit: 2 });
    assert.deepEqual(desc.titles, ['Item 19', 'Item 18']);
  });

  test('update handler: in place and creating', async () => {
    const res = await db.updateWithHandler('shop', 'bump', 'item01', { by: 5 });
    assert.deepEqual(res, { count: 5 });
    const doc = await db.get('item01');
    assert.equal(doc.count, 5);
    assert.match(doc._rev, /^2-/);
    const again = await db.atomic('shop', 'bump', 'item01', { by: 2 });
    assert.deepEqual(again, { count: 7 });
    const created = await db.updateWithHandler('shop', 'bump', 'fresh-one');
    assert.deepEqual(created, { created: true });
    assert.deepEqual((await db.get('fresh-one')).created, true);
  });

  test('validate_doc_update refuses a write', async () => {
    await rejectsWith(db.insert({ title: 'bad', price: 'ten' }, 'bad'), 403, 'forbidden', 'price must be a number');
    const res = await db.bulk({ docs: [{ _id: 'bad2', price: 'x' }, { _id: 'good', price: 1 }] });
    assert.deepEqual(res[0], { id: 'bad2', error: 'forbidden', reason: 'price must be a number' });
    assert.equal(res[1].ok, true);
  });

  test('streams of a view and of _all_docs', async () => {
    const view = await drain(db.viewAsStream('shop', 'by_price', { limit: 2 }));
    assert.deepEqual(view.rows.map((r) => r.key), [0, 1]);
    assert.equal(view.total_rows, 21); // the 20 items and `good` (`fresh-one` has no price)
    const all = await drain(db.listAsStream({ limit: 3 }));
    // The tests before made `fresh-one` and `good`; ids in raw order.
    assert.deepEqual(all.rows.map((r) => r.id), ['_design/shop', 'fresh-one', 'good']);
  });

  test('compaction requests are accepted', async () => {
    assert.deepEqual(await db.compact(), { ok: true });
    assert.deepEqual(await db.view.compact('shop'), { ok: true });
    await rejectsWith(db.view.compact('nope'), 404, 'not_found', 'missing');
  });
});
