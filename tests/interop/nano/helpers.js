// Shared helpers for the nano interop tests: the server under test
// (SETTEE_URL, e.g. http://admin:pass@127.0.0.1:PORT — set by
// crates/settee/tests/interop_nano.rs; the same suite passes against the
// reference CouchDB 3.4.3 given its URL), nano clients on it, unique
// database names, and assertions on CouchDB's error answers as nano
// reports them (statusCode, error, reason).

import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import Nano from 'nano';

const base = process.env.SETTEE_URL;
if (!base) {
  throw new Error('SETTEE_URL is not set: run these tests through `cargo test --release -p settee --test interop_nano`, or start `settee serve` and set SETTEE_URL=http://user:pass@127.0.0.1:PORT');
}
const parsed = new URL(base);
if (!['127.0.0.1', 'localhost', '[::1]'].includes(parsed.hostname)) {
  throw new Error(`SETTEE_URL must point to loopback, got ${parsed.hostname}`);
}

/** The server root URL with the admin's credentials, no trailing slash. */
export const serverUrl = base.replace(/\/+$/, '');

/** The server root URL without credentials. */
export const plainUrl = `${parsed.protocol}//${parsed.host}`;

/** The admin's name (from SETTEE_URL). */
export const adminName = decodeURIComponent(parsed.username);

// Every request is bounded in time, and never goes through a proxy (axios
// would otherwise honour http_proxy from the environment).
const requestDefaults = { timeout: 30000, proxy: false };

/** A nano client for `url` (the admin's by default). */
export function client(url = serverUrl) {
  return Nano({ url, requestDefaults });
}

/** The admin's nano client. */
export const nano = client();

let counter = 0;
/** A database name no other test (or earlier run on the same server) uses. */
export function uniqueName(label) {
  counter += 1;
  const rand = Math.random().toString(36).slice(2, 8);
  return `nano-${label}-${process.pid}-${counter}-${rand}`;
}

/** Creates a database with a unique name; returns [name, nano db handle]. */
export async function freshDb(label) {
  const name = uniqueName(label);
  assert.deepEqual(await nano.db.create(name), { ok: true });
  return [name, nano.use(name)];
}

/**
 * Asserts that `promise` rejects with CouchDB's error answer: HTTP `status`,
 * `error` and (if given) `reason`, as nano puts them on its Error.
 */
export async function rejectsWith(promise, status, error, reason) {
  await assert.rejects(promise, (e) => {
    assert.equal(e.statusCode, status, `status of ${JSON.stringify({ error: e.error, reason: e.reason, message: e.message })}`);
    assert.equal(e.error, error, `error (reason: ${e.reason})`);
    if (reason !== undefined) assert.equal(e.reason, reason, 'reason');
    return true;
  });
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

/** Polls `check` (async, returns a value or undefined) every `every` ms, at most `ms` in all. */
export async function waitFor(check, ms, what, every = 200) {
  const deadline = Date.now() + ms;
  let last;
  for (let i = 0; i < Math.ceil(ms / every) + 1; i++) {
    last = await check();
    if (last !== undefined) return last;
    if (Date.now() > deadline) break;
    await new Promise((r) => setTimeout(r, every));
  }
  throw new Error(`timed out after ${ms} ms waiting for ${what}`);
}

/** The `md5-…` digest CouchDB gives an attachment's bytes. */
export const md5Digest = (buf) => 'md5-' + crypto.createHash('md5').update(buf).digest('base64');

/** `size` pseudo-random bytes from `seed` (reproducible, incompressible). */
export function bytes(size, seed) {
  const out = Buffer.alloc(size);
  let block = Buffer.from(String(seed));
  for (let off = 0; off < size; off += 32) {
    block = crypto.createHash('sha256').update(block).digest();
    block.copy(out, off, 0, Math.min(32, size - off));
  }
  return out;
}

/** A revision id of generation `pos` made from `label` (32 hex digits, as CouchDB's). */
export const rev = (pos, label) => `${pos}-${crypto.createHash('md5').update(label).digest('hex')}`;

/** `n` documents `d000`…: `n` (the index), `group` (`g0`…`g4`), `tag` (even/odd). */
export function corpus(n) {
  const docs = [];
  for (let i = 0; i < n; i++) {
    docs.push({
      _id: `d${String(i).padStart(3, '0')}`,
      n: i,
      group: `g${i % 5}`,
      tag: i % 2 === 0 ? 'even' : 'odd',
    });
  }
  return docs;
}
