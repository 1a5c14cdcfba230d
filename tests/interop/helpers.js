// Shared helpers for the PouchDB interop tests: the Settee server under test
// (SETTEE_URL, e.g. http://admin:pass@127.0.0.1:PORT — set by
// crates/settee/tests/interop_pouchdb.rs), PouchDB with the in-memory
// adapter for local databases, unique database names, and a snapshot of a
// database (every document's leaves with their revision histories) so two
// databases can be compared exactly after replication.

import PouchDB from 'pouchdb';
import MemoryAdapter from 'pouchdb-adapter-memory';

PouchDB.plugin(MemoryAdapter);

export { PouchDB };

const base = process.env.SETTEE_URL;
if (!base) {
  throw new Error('SETTEE_URL is not set: run these tests through `cargo test --release -p settee --test interop_pouchdb`, or start `settee serve` and set SETTEE_URL=http://user:pass@127.0.0.1:PORT');
}
const loopback = new URL(base);
if (!['127.0.0.1', 'localhost', '[::1]'].includes(loopback.hostname)) {
  throw new Error(`SETTEE_URL must point to loopback, got ${loopback.hostname}`);
}

/** The server root URL with credentials and no trailing slash. */
export const serverUrl = base.replace(/\/+$/, '');

/** Authorization header for raw fetch calls (fetch refuses credentials in URLs). */
export function authHeaders() {
  const user = decodeURIComponent(loopback.username);
  const pass = decodeURIComponent(loopback.password);
  return { Authorization: 'Basic ' + Buffer.from(`${user}:${pass}`).toString('base64') };
}

/** The server root URL without credentials (for raw fetch). */
export const plainUrl = `${loopback.protocol}//${loopback.host}`;

/**
 * GET a path on the server with raw fetch, for options PouchDB's http
 * adapter does not forward (e.g. deleted_conflicts); returns parsed JSON.
 */
export async function rawGet(path) {
  const res = await fetch(`${plainUrl}${path}`, { headers: { ...authHeaders(), Accept: 'application/json' } });
  const body = await res.json();
  if (!res.ok) {
    throw Object.assign(new Error(`GET ${path}: ${res.status} ${JSON.stringify(body)}`), { status: res.status });
  }
  return body;
}

/** The database name of a PouchDB handle on the server. */
export function dbName(db) {
  return decodeURIComponent(new URL(db.name).pathname.replace(/^\/+|\/+$/g, ''));
}

let counter = 0;
/** A database name no other test (or earlier run on the same server) uses. */
export function uniqueName(label) {
  counter += 1;
  const rand = Math.random().toString(36).slice(2, 8);
  return `interop-${label}-${process.pid}-${counter}-${rand}`;
}

/** A PouchDB handle on a new database on Settee. */
export function remoteDb(label) {
  return new PouchDB(`${serverUrl}/${uniqueName(label)}`);
}

/** A PouchDB handle on a new in-memory local database. */
export function localDb(label) {
  return new PouchDB(uniqueName(label), { adapter: 'memory' });
}

/**
 * Every document id ever written (including deleted documents), from the
 * changes feed with all leaves.
 */
export async function allIds(db) {
  const changes = await db.changes({ style: 'all_docs', since: 0 });
  return [...new Set(changes.results.map((c) => c.id))].sort();
}

/**
 * A comparable image of a database: allDocs with conflicts and bodies, plus
 * for every id (deleted ones too) all leaves (open_revs=all) with their
 * `_revisions`, sorted by rev, and the winner with `_revisions` and
 * `_conflicts` (as a sorted set: CouchDB lists conflicts in descending
 * winner order, PouchDB ascending).
 */
export async function snapshot(db) {
  const all = await db.allDocs({ include_docs: true, conflicts: true });
  const rows = all.rows.map((r) => {
    if (r.doc._conflicts) r.doc._conflicts.sort();
    return { id: r.id, rev: r.value.rev, doc: r.doc };
  });
  const docs = {};
  for (const id of await allIds(db)) {
    const leaves = await db.get(id, { open_revs: 'all', revs: true });
    const sorted = leaves
      .map((l) => l.ok)
      .sort((a, b) => (a._rev < b._rev ? -1 : a._rev > b._rev ? 1 : 0));
    let winner;
    try {
      winner = await db.get(id, { conflicts: true, revs: true });
      if (winner._conflicts) winner._conflicts.sort();
    } catch (e) {
      if (e.status !== 404) throw e;
      winner = { status: 404 };
    }
    docs[id] = { leaves: sorted, winner };
  }
  return { total_rows: all.total_rows, rows, docs };
}

/** Rejects if `promise` does not settle within `ms`; clears its timer either way. */
export function withTimeout(promise, ms, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}
