// nano's replication APIs between two databases of the server under test:
// `nano.db.replicate` (POST /_replicate, one-shot, create_target, then an
// incremental run, then nothing to do, and doc_ids), and
// `nano.db.replication.enable/query/disable` (a document in `_replicator`,
// run by the server's scheduler until `_replication_state` is `completed`).
// Every replicated document is compared with its source, revision and
// history included. The expected answers are CouchDB 3.4.3's.

import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { nano, uniqueName, freshDb, rejectsWith, corpus, waitFor } from './helpers.js';

/** Every document of `db` with its revision history, by id. */
async function image(db) {
  const all = await db.list({ include_docs: true });
  const out = {};
  for (const r of all.rows) {
    const withRevs = await db.get(r.id, { revs: true });
    out[r.id] = withRevs;
  }
  return out;
}

describe('replication', () => {
  let source;
  let src;
  const targets = [];
  before(async () => {
    [source, src] = await freshDb('repl-src');
    const docs = corpus(120);
    await src.bulk({ docs });
    // Some history: updates and a deletion.
    for (const id of ['d001', 'd002']) {
      const doc = await src.get(id);
      await src.insert({ ...doc, updated: true });
    }
    const gone = await src.get('d003');
    await src.destroy('d003', gone._rev);
    await src.attachment.insert('withatt', 'a.bin', Buffer.from([0, 1, 2, 3, 255]), 'application/octet-stream');
  });
  after(async () => {
    await nano.db.destroy(source);
    for (const t of targets) await nano.db.destroy(t).catch(() => {});
  });

  test('nano.db.replicate: one-shot with create_target, incremental, no changes', async () => {
    const target = uniqueName('repl-tgt');
    targets.push(target);
    const res = await nano.db.replicate(source, target, { create_target: true });
    assert.equal(res.ok, true);
    assert.equal(typeof res.session_id, 'string');
    assert.equal(res.replication_id_version, 4);
    assert.ok(Array.isArray(res.history) && res.history.length >= 1);
    const h = res.history[0];
    // 120 documents, one deleted, and the one with an attachment.
    assert.equal(h.docs_written, 121);
    assert.equal(h.docs_read, 121);
    assert.equal(h.missing_checked, 121);
    assert.equal(h.missing_found, 121);
    assert.equal(h.doc_write_failures, 0);

    const tgt = nano.use(target);
    assert.deepEqual(await image(tgt), await image(src));
    const tinfo = await tgt.info();
    assert.equal(tinfo.doc_count, 120);
    assert.equal(tinfo.doc_del_count, 1);
    const att = await tgt.attachment.get('withatt', 'a.bin');
    assert.ok(att.equals(Buffer.from([0, 1, 2, 3, 255])));

    // Incremental: only what changed since the checkpoint.
    const doc = await src.get('d010');
    await src.insert({ ...doc, second: 2 });
    await src.insert({ fresh: true }, 'fresh');
    const again = await nano.db.replicate(source, target);
    assert.equal(again.ok, true);
    // A resumed replication's statistics carry on from its checkpoint.
    assert.equal(again.history[0].docs_written, 121 + 2);
    assert.equal(again.history[0].missing_checked, 121 + 2);
    assert.equal(again.history[0].start_last_seq, h.recorded_seq);
    assert.deepEqual(await tgt.get('d010'), await src.get('d010'));

    // Nothing left to do.
    const idle = await nano.db.replicate(source, target);
    assert.equal(idle.ok, true);
    assert.equal(idle.no_changes, true);
  });

  test('nano.db.replicate with doc_ids, and the errors', async () => {
    const [target, tgt] = await freshDb('repl-ids');
    targets.push(target);
    const res = await nano.db.replicate(source, target, { doc_ids: ['d005', 'd006', 'nope'] });
    assert.equal(res.ok, true);
    const all = await tgt.list();
    assert.deepEqual(all.rows.map((r) => r.id), ['d005', 'd006']);

    // A target that does not exist, without create_target.
    const missing = uniqueName('repl-missing');
    const { port } = new URL(nano.config.url);
    await rejectsWith(nano.db.replicate(source, missing), 500, 'db_not_found',
      `could not open http://127.0.0.1:${port}/${missing}/`);
  });

  test('nano.db.replication.enable: a _replicator job runs to completed', async () => {
    await nano.db.create('_replicator').catch((e) => { if (e.statusCode !== 412) throw e; });
    const target = uniqueName('repl-job');
    targets.push(target);
    const job = await nano.db.replication.enable(source, target, { create_target: true });
    assert.equal(job.ok, true);
    assert.equal(typeof job.id, 'string');
    assert.match(job.rev, /^1-/);

    const done = await waitFor(async () => {
      const doc = await nano.db.replication.query(job.id);
      if (doc._replication_state === 'failed' || doc._replication_state === 'error') {
        throw new Error(`replication failed: ${JSON.stringify(doc)}`);
      }
      return doc._replication_state === 'completed' ? doc : undefined;
    }, 60000, 'the _replicator job to complete', 250);
    assert.equal(done._id, job.id);
    assert.equal(typeof done._replication_state_time, 'string');
    assert.equal(done._replication_stats.docs_written, 122);
    assert.equal(done._replication_stats.doc_write_failures, 0);
    assert.equal(decodeURIComponent(new URL(done.source).pathname), `/${source}`);
    assert.equal(decodeURIComponent(new URL(done.target).pathname), `/${target}`);

    const tgt = nano.use(target);
    assert.deepEqual(await image(tgt), await image(src));

    // The job's document is the user's to remove.
    const removed = await nano.db.replication.disable(done._id, done._rev);
    assert.equal(removed.ok, true);
    await rejectsWith(nano.db.replication.query(done._id), 404, 'not_found', 'deleted');
  });
});
