// PouchDB pulling continuously from a Settee database whose tombstones are
// purged after a TTL (issue 41): the replica sees every deletion before the
// purge, keeps the deletions after it (nothing comes back to life), and a
// later pull finds nothing to do.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { remoteDb, localDb, dbName, plainUrl, authHeaders, rawGet, withTimeout } from './helpers.js';

async function put(path, body) {
  const res = await fetch(`${plainUrl}${path}`, {
    method: 'PUT',
    headers: { ...authHeaders(), 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  });
  const out = await res.json();
  assert.ok(res.ok, `PUT ${path}: ${res.status} ${JSON.stringify(out)}`);
  return out;
}

async function until(what, ms, cond) {
  const start = Date.now();
  while (!(await cond())) {
    if (Date.now() - start > ms) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

test('a live pull sees every deletion before the purge, and keeps it after', async () => {
  const remote = remoteDb('auto-purge');
  const local = localDb('auto-purge-local');
  await remote.info();
  const name = encodeURIComponent(dbName(remote));
  await put('/_node/_local/_config/couch_auto_purge_plugin/check_interval_ms', '100');
  const made = await remote.bulkDocs(Array.from({ length: 40 }, (_, i) => ({ _id: `d${String(i).padStart(2, '0')}`, i })));
  const live = local.replicate.from(remote, { live: true, retry: true });
  try {
    await until('the first pull', 20000, async () => (await local.info()).doc_count === 40);
    // Deleted on the server; purged there a second later.
    await put(`/${name}/_auto_purge`, { deleted_document_ttl: '1_sec' });
    const doomed = made.filter((_, i) => i % 2 === 1);
    await remote.bulkDocs(doomed.map((r) => ({ _id: r.id, _rev: r.rev, _deleted: true })));
    await until('the server purged the tombstones', 30000, async () => (await rawGet(`/${name}`)).doc_del_count === 0);
    await until('the replica has every deletion', 30000, async () => (await local.info()).doc_count === 20);
    for (const r of doomed) {
      await assert.rejects(local.get(r.id), (e) => e.status === 404 && e.reason === 'deleted', r.id);
    }
  } finally {
    live.cancel();
  }
  // A fresh pull after the purge: nothing to bring, nothing resurrected.
  const again = await withTimeout(local.replicate.from(remote), 30000, 'pull after the purge');
  assert.equal(again.docs_written, 0);
  assert.equal((await local.info()).doc_count, 20);
  assert.equal((await rawGet(`/${name}`)).doc_count, 20);
  await remote.destroy();
});
