// PouchDB attachments against the server: standalone attachments
// (putAttachment, getAttachment, removeAttachment) on new and existing
// documents, binary and text (text/plain is stored compressed by CouchDB
// and Settee: the bytes read back must still be identical), stubs and
// `attachments: true` (base64 and binary), inline base64 `_attachments` in
// put and bulkDocs, `bulkGet` with attachments, and replication of
// documents with attachments in both directions and in a live sync, each
// attachment compared byte for byte on both sides. The expected answers
// are CouchDB 3.4.3's.

import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import http from 'node:http';
import zlib from 'node:zlib';
import {
  PouchDB, remoteDb, localDb, dbName, plainUrl, authHeaders, rawGet, snapshot, withTimeout,
} from './helpers.js';

const OCTET = 'application/octet-stream';
const TEXT = 'text/plain';

/** `size` pseudo-random bytes from `seed` (reproducible, incompressible). */
function bytes(size, seed) {
  const out = Buffer.alloc(size);
  let block = Buffer.from(String(seed));
  for (let off = 0; off < size; off += 32) {
    block = crypto.createHash('sha256').update(block).digest();
    block.copy(out, off, 0, Math.min(32, size - off));
  }
  return out;
}

/** A compressible UTF-8 text of about `size` bytes. */
function text(size, label) {
  const line = `${label}: Settee attachment line — ünïcødé ✓ 0123456789 abcdefghijklmnopqrstuvwxyz\n`;
  let s = '';
  for (let i = 0; Buffer.byteLength(s) < size; i++) s += `${i} ${line}`;
  return Buffer.from(s, 'utf8');
}

/** CouchDB's default `[attachments] compressible_types`. */
const compressible = (type) => /^text\/|^application\/(javascript|json|xml)\b/.test(type);

const md5Digest = (buf) => 'md5-' + crypto.createHash('md5').update(buf).digest('base64');

/** Asserts `got` is a Buffer with exactly the bytes of `want`. */
function assertBytes(got, want, what) {
  assert.ok(Buffer.isBuffer(got), `${what}: expected a Buffer, got ${Object.prototype.toString.call(got)}`);
  assert.equal(got.length, want.length, `${what}: length`);
  assert.ok(got.equals(want), `${what}: bytes differ (first difference at ${firstDiff(got, want)})`);
}

function firstDiff(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return n;
}

/** Asserts a stub: stub, content_type, length, revpos, digest `md5-…`. */
function assertStub(att, { type, length, revpos }, what) {
  assert.ok(att, `${what}: no stub`);
  assert.equal(att.stub, true, `${what}: stub ${JSON.stringify(att)}`);
  assert.equal(att.content_type, type, `${what}: content_type`);
  assert.equal(att.length, length, `${what}: length`);
  if (revpos !== undefined) assert.equal(att.revpos, revpos, `${what}: revpos`);
  assert.match(att.digest, /^md5-[A-Za-z0-9+/]{22}==$/, `${what}: digest`);
  assert.equal(att.data, undefined, `${what}: data in a stub`);
}

function assertClean(result, what) {
  assert.equal(result.ok, true, `${what}: ${JSON.stringify(result)}`);
  assert.equal(result.status, 'complete', what);
  assert.equal(result.doc_write_failures, 0, `${what}: ${JSON.stringify(result.errors)}`);
  assert.deepEqual(result.errors, [], what);
}

/** A raw request on the server (no PouchDB); returns the fetch Response. */
function raw(method, path, headers = {}) {
  return fetch(`${plainUrl}${path}`, { method, headers: { ...authHeaders(), ...headers } });
}

/**
 * A raw request with node:http (no transparent decoding, no default
 * Accept-Encoding); resolves to { status, headers, body: Buffer }.
 */
function rawNode(method, path, headers) {
  const url = new URL(plainUrl);
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: url.hostname, port: url.port, method, path, headers: { ...authHeaders(), ...headers } },
      (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }));
        res.on('error', reject);
      },
    );
    req.setTimeout(15000, () => req.destroy(new Error(`${method} ${path} timed out`)));
    req.on('error', reject);
    req.end();
  });
}

function attPath(db, id, name) {
  return `/${encodeURIComponent(dbName(db))}/${encodeURIComponent(id)}/${name.split('/').map(encodeURIComponent).join('/')}`;
}

/**
 * Every attachment of every live document of `a` is in `b` with the same
 * name, content type, length and digest, and getAttachment returns the
 * same bytes on both sides (and `want[id][name]`, when given).
 */
async function assertSameAttachments(a, b, what, want = {}) {
  const [ra, rb] = await Promise.all([a.allDocs(), b.allDocs()]);
  assert.deepEqual(rb.rows.map((r) => [r.id, r.value.rev]), ra.rows.map((r) => [r.id, r.value.rev]), `${what}: documents differ`);
  let count = 0;
  for (const { id } of ra.rows) {
    const [da, dbb] = await Promise.all([a.get(id), b.get(id)]);
    const atts = da._attachments || {};
    assert.deepEqual(Object.keys(dbb._attachments || {}).sort(), Object.keys(atts).sort(), `${what}: ${id}: attachment names`);
    for (const [name, sa] of Object.entries(atts)) {
      const sb = dbb._attachments[name];
      const label = `${what}: ${id}/${name}`;
      assert.equal(sb.content_type, sa.content_type, `${label}: content_type`);
      assert.equal(sb.length, sa.length, `${label}: length`);
      // CouchDB's digest of a compressed attachment (text/*, JSON, …) is the
      // MD5 of its gzip encoding, PouchDB's the MD5 of the bytes: equal
      // digests only for types stored as they are.
      if (!compressible(sa.content_type)) assert.equal(sb.digest, sa.digest, `${label}: digest`);
      for (const s of [sa, sb]) assert.match(s.digest, /^md5-[A-Za-z0-9+/]{22}==$/, `${label}: digest`);
      const [ba, bb] = await Promise.all([a.getAttachment(id, name), b.getAttachment(id, name)]);
      assertBytes(bb, ba, label);
      if (want[id] && want[id][name]) assertBytes(ba, want[id][name], `${label} (expected bytes)`);
      count += 1;
    }
  }
  return count;
}

describe('attachments through PouchDB', () => {
  const dbs = [];
  const remote = (label) => {
    const db = remoteDb(label);
    dbs.push(db);
    return db;
  };
  const local = (label) => {
    const db = localDb(label);
    dbs.push(db);
    return db;
  };

  after(async () => {
    for (const db of dbs) {
      try {
        await db.destroy();
      } catch {
        // already gone
      }
    }
  });

  describe('standalone attachments', () => {
    let db;
    const BIN = bytes(100 * 1024, 'bin');
    const TXT = text(60 * 1024, 'txt');

    before(async () => {
      db = remote('att');
      await db.info();
    });

    test('putAttachment creates a document; getAttachment returns the same bytes', async () => {
      const res = await withTimeout(db.putAttachment('bin', 'data.bin', BIN, OCTET), 15000, 'putAttachment');
      assert.equal(res.ok, true, JSON.stringify(res));
      assert.equal(res.id, 'bin');
      assert.match(res.rev, /^1-[0-9a-f]{32}$/);
      const got = await withTimeout(db.getAttachment('bin', 'data.bin'), 15000, 'getAttachment');
      assertBytes(got, BIN, 'bin/data.bin');
      const doc = await db.get('bin');
      assert.equal(doc._rev, res.rev);
      assertStub(doc._attachments['data.bin'], { type: OCTET, length: BIN.length, revpos: 1 }, 'bin stub');
      assert.equal(doc._attachments['data.bin'].digest, md5Digest(BIN));
    });

    test('putAttachment on an existing document (text/plain, stored compressed) reads back identical', async () => {
      const w = await db.put({ _id: 'txt', title: 'a note' });
      const res = await withTimeout(db.putAttachment('txt', 'note.txt', w.rev, TXT, TEXT), 15000, 'putAttachment');
      assert.equal(res.ok, true);
      assert.match(res.rev, /^2-/);
      const got = await withTimeout(db.getAttachment('txt', 'note.txt'), 15000, 'getAttachment');
      assertBytes(got, TXT, 'txt/note.txt');
      const doc = await db.get('txt');
      assert.equal(doc.title, 'a note');
      assertStub(doc._attachments['note.txt'], { type: TEXT, length: TXT.length, revpos: 2 }, 'txt stub');

      // Raw GET: the identity bytes when the client accepts no encoding,
      // the same bytes (decoded by fetch) when it accepts gzip.
      for (const enc of ['identity', 'gzip']) {
        const r = await raw('GET', attPath(db, 'txt', 'note.txt'), { 'Accept-Encoding': enc });
        assert.equal(r.status, 200, `GET with Accept-Encoding: ${enc}`);
        assert.equal(r.headers.get('content-type'), TEXT, `content-type with Accept-Encoding: ${enc}`);
        assertBytes(Buffer.from(await r.arrayBuffer()), TXT, `raw GET with Accept-Encoding: ${enc}`);
      }
      // A second attachment on the same document keeps the first one.
      const res2 = await db.putAttachment('txt', 'more.bin', res.rev, BIN.subarray(0, 1000), OCTET);
      const doc2 = await db.get('txt');
      assert.equal(doc2._rev, res2.rev);
      assertStub(doc2._attachments['note.txt'], { type: TEXT, length: TXT.length, revpos: 2 }, 'kept stub');
      assertStub(doc2._attachments['more.bin'], { type: OCTET, length: 1000, revpos: 3 }, 'new stub');
      assert.equal(doc2._attachments['note.txt'].digest, doc._attachments['note.txt'].digest, 'digest unchanged');
      assertBytes(await db.getAttachment('txt', 'note.txt'), TXT, 'txt/note.txt after a second attachment');
    });

    test('the digest of a compressed attachment is the MD5 of the bytes served with Content-Encoding', async () => {
      // With Accept-Encoding: gzip a server may send its stored encoding;
      // the stub's digest is the MD5 of exactly the bytes on the wire.
      const { digest } = (await db.get('txt'))._attachments['note.txt'];
      const r = await rawNode('GET', attPath(db, 'txt', 'note.txt'), { 'Accept-Encoding': 'gzip' });
      assert.equal(r.status, 200);
      const enc = r.headers['content-encoding'];
      if (enc === 'gzip') {
        assertBytes(zlib.gunzipSync(r.body), TXT, 'gunzipped body');
        assert.equal(r.headers['content-length'], String(r.body.length));
      } else {
        assert.equal(enc, undefined, `content-encoding ${enc}`);
        assertBytes(r.body, TXT, 'identity body');
      }
      assert.equal(md5Digest(r.body), digest, `digest vs the bytes served (content-encoding ${enc})`);
      // Without Accept-Encoding: the identity bytes.
      const plain = await rawNode('GET', attPath(db, 'txt', 'note.txt'), {});
      assert.equal(plain.headers['content-encoding'], undefined);
      assertBytes(plain.body, TXT, 'body without Accept-Encoding');
      // The ETag is the digest's hash.
      assert.equal(r.headers.etag, `"${digest.slice(4)}"`);
    });

    test('att_encoding_info=true reports the stored encoding', async () => {
      const doc = await rawGet(`/${encodeURIComponent(dbName(db))}/txt?att_encoding_info=true`);
      const att = doc._attachments['note.txt'];
      assert.equal(att.encoding, 'gzip', JSON.stringify(att));
      assert.ok(att.encoded_length > 0 && att.encoded_length < TXT.length, JSON.stringify(att));
      const bin = (await rawGet(`/${encodeURIComponent(dbName(db))}/bin?att_encoding_info=true`))._attachments['data.bin'];
      assert.equal(bin.encoding, undefined, JSON.stringify(bin));
      assert.equal(bin.encoded_length, undefined, JSON.stringify(bin));
    });

    test('an attachment stored as is is served as is, even to a client accepting gzip', async () => {
      // PouchDB in Node (node-fetch) sends `Accept-Encoding: gzip,deflate`
      // with every getAttachment. CouchDB sends a binary attachment's bytes
      // unencoded, with Content-Length and Accept-Ranges: bytes.
      const r = await rawNode('GET', attPath(db, 'bin', 'data.bin'), { 'Accept-Encoding': 'gzip,deflate' });
      assert.equal(r.status, 200);
      const summary = JSON.stringify({
        'content-encoding': r.headers['content-encoding'],
        'content-length': r.headers['content-length'],
        'transfer-encoding': r.headers['transfer-encoding'],
        'accept-ranges': r.headers['accept-ranges'],
        bodyBytes: r.body.length,
      });
      assert.equal(r.headers['content-encoding'], undefined, `re-encoded: ${summary}`);
      assert.equal(r.headers['content-length'], String(BIN.length), summary);
      assert.equal(r.headers['accept-ranges'], 'bytes', summary);
      assertBytes(r.body, BIN, 'body');
    });

    test('HEAD of an attachment', async () => {
      const r = await raw('HEAD', attPath(db, 'bin', 'data.bin'));
      assert.equal(r.status, 200);
      assert.equal(r.headers.get('content-type'), OCTET);
      assert.equal(r.headers.get('content-length'), String(BIN.length));
      assert.equal((await r.arrayBuffer()).byteLength, 0);
      const missing = await raw('HEAD', attPath(db, 'bin', 'nope.bin'));
      assert.equal(missing.status, 404);
    });

    test('get with attachments: true returns base64 data; with binary: true, Buffers', async () => {
      const doc = await db.get('txt', { attachments: true });
      assert.equal(doc._attachments['note.txt'].data, TXT.toString('base64'));
      assert.equal(doc._attachments['note.txt'].content_type, TEXT);
      assert.match(doc._attachments['note.txt'].digest, /^md5-/);
      assert.equal(doc._attachments['note.txt'].stub, undefined);
      assert.equal(doc._attachments['more.bin'].data, BIN.subarray(0, 1000).toString('base64'));

      const bin = await db.get('bin', { attachments: true, binary: true });
      assertBytes(bin._attachments['data.bin'].data, BIN, 'binary: true');
      assert.equal(bin._attachments['data.bin'].content_type, OCTET);
      const txt = await db.get('txt', { attachments: true, binary: true });
      assertBytes(txt._attachments['note.txt'].data, TXT, 'binary: true, text');
    });

    test('raw GET ?attachments=true (JSON) and bulkGet with attachments carry base64 data', async () => {
      const r = await raw('GET', `/${encodeURIComponent(dbName(db))}/txt?attachments=true`, { Accept: 'application/json' });
      assert.equal(r.status, 200);
      assert.match(r.headers.get('content-type'), /^application\/json/);
      const doc = await r.json();
      assert.equal(doc._attachments['note.txt'].data, TXT.toString('base64'));
      assert.equal(doc._attachments['note.txt'].revpos, 2);
      assert.equal(doc._attachments['more.bin'].data, BIN.subarray(0, 1000).toString('base64'));

      const bin = await db.get('bin');
      const res = await db.bulkGet({ docs: [{ id: 'bin', rev: bin._rev }, { id: 'txt' }], attachments: true, revs: true });
      assert.equal(res.results.length, 2);
      const [b, t] = res.results.map((x) => x.docs[0].ok);
      assert.ok(b && t, JSON.stringify(res.results.map((x) => x.docs[0].error)));
      assert.equal(b._attachments['data.bin'].data, BIN.toString('base64'));
      assert.equal(b._attachments['data.bin'].digest, md5Digest(BIN));
      assert.equal(t._attachments['note.txt'].data, TXT.toString('base64'));
      assert.equal(t._revisions.start, 3);

      // open_revs (as JSON) with attachments=true.
      const o = await raw('GET', `/${encodeURIComponent(dbName(db))}/bin?open_revs=all&attachments=true&revs=true`, { Accept: 'application/json' });
      assert.equal(o.status, 200);
      const leaves = await o.json();
      assert.equal(leaves.length, 1, JSON.stringify(leaves).slice(0, 300));
      assert.equal(leaves[0].ok._rev, bin._rev);
      assert.equal(leaves[0].ok._attachments['data.bin'].data, BIN.toString('base64'));
      // And through PouchDB (which fetches each attachment itself).
      const pl = await db.get('bin', { open_revs: 'all', attachments: true, binary: true });
      assertBytes(pl[0].ok._attachments['data.bin'].data, BIN, 'open_revs through PouchDB');
    });

    test('an older revision keeps its attachment', async () => {
      const first = (await db.get('bin'))._rev;
      const other = bytes(5000, 'other');
      const res = await db.putAttachment('bin', 'data.bin', first, other, OCTET);
      assertBytes(await db.getAttachment('bin', 'data.bin'), other, 'new revision');
      assertBytes(await db.getAttachment('bin', 'data.bin', { rev: first }), BIN, 'old revision');
      assertBytes(await db.getAttachment('bin', 'data.bin', { rev: res.rev }), other, 'new revision by rev');
      const doc = await db.get('bin');
      assertStub(doc._attachments['data.bin'], { type: OCTET, length: 5000, revpos: 2 }, 'replaced stub');
      assert.equal(doc._attachments['data.bin'].digest, md5Digest(other));
    });

    test('removeAttachment removes it; getAttachment then rejects with 404', async () => {
      const before = await db.get('txt');
      const res = await db.removeAttachment('txt', 'note.txt', before._rev);
      assert.equal(res.ok, true, JSON.stringify(res));
      assert.match(res.rev, /^4-/);
      await assert.rejects(db.getAttachment('txt', 'note.txt'), (e) => e.status === 404);
      const doc = await db.get('txt');
      assert.deepEqual(Object.keys(doc._attachments || {}), ['more.bin']);
      assert.equal(doc.title, 'a note');
      // The previous revision still has it.
      assertBytes(await db.getAttachment('txt', 'note.txt', { rev: before._rev }), TXT, 'removed, old revision');
      // Removing the last one leaves a document without attachments.
      const res2 = await db.removeAttachment('txt', 'more.bin', res.rev);
      const doc2 = await db.get('txt');
      assert.equal(doc2._rev, res2.rev);
      assert.equal(doc2._attachments, undefined);
      await assert.rejects(db.getAttachment('txt', 'more.bin'), (e) => e.status === 404);
      // A stale rev is a conflict.
      await assert.rejects(db.removeAttachment('txt', 'more.bin', before._rev), (e) => e.status === 409);
    });

    test('getAttachment of a missing document or name rejects with 404', async () => {
      await assert.rejects(db.getAttachment('no-such-doc', 'x.bin'), (e) => e.status === 404);
      await assert.rejects(db.getAttachment('bin', 'no-such-att'), (e) => e.status === 404);
    });
  });

  describe('inline attachments', () => {
    let db;
    const A = text(3000, 'inline-a');
    const B = bytes(20000, 'inline-b');

    before(async () => {
      db = remote('att-inline');
      await db.info();
    });

    test('put with base64 _attachments, read back', async () => {
      const res = await db.put({
        _id: 'inline',
        kind: 'inline',
        _attachments: {
          'a.txt': { content_type: TEXT, data: A.toString('base64') },
          'dir/b.bin': { content_type: OCTET, data: B.toString('base64') },
        },
      });
      assert.equal(res.ok, true);
      const doc = await db.get('inline');
      assert.equal(doc.kind, 'inline');
      assertStub(doc._attachments['a.txt'], { type: TEXT, length: A.length, revpos: 1 }, 'a.txt');
      assertStub(doc._attachments['dir/b.bin'], { type: OCTET, length: B.length, revpos: 1 }, 'dir/b.bin');
      assert.equal(doc._attachments['dir/b.bin'].digest, md5Digest(B));
      assertBytes(await db.getAttachment('inline', 'a.txt'), A, 'a.txt');
      assertBytes(await db.getAttachment('inline', 'dir/b.bin'), B, 'dir/b.bin');
      const full = await db.get('inline', { attachments: true });
      assert.equal(full._attachments['a.txt'].data, A.toString('base64'));
      assert.equal(full._attachments['dir/b.bin'].data, B.toString('base64'));
    });

    test('an update keeping stubs and adding an inline attachment (as a Buffer)', async () => {
      const doc = await db.get('inline');
      const C = bytes(777, 'inline-c');
      doc.kind = 'updated';
      doc._attachments['c.bin'] = { content_type: 'image/png', data: C };
      const res = await db.put(doc);
      assert.match(res.rev, /^2-/);
      const got = await db.get('inline');
      assert.equal(got.kind, 'updated');
      assertStub(got._attachments['a.txt'], { type: TEXT, length: A.length, revpos: 1 }, 'kept a.txt');
      assertStub(got._attachments['dir/b.bin'], { type: OCTET, length: B.length, revpos: 1 }, 'kept b.bin');
      assertStub(got._attachments['c.bin'], { type: 'image/png', length: C.length, revpos: 2 }, 'new c.bin');
      assertBytes(await db.getAttachment('inline', 'c.bin'), C, 'c.bin');
      assertBytes(await db.getAttachment('inline', 'a.txt'), A, 'a.txt after update');
      // Dropping a name from _attachments removes that attachment.
      delete got._attachments['a.txt'];
      await db.put(got);
      const last = await db.get('inline');
      assert.deepEqual(Object.keys(last._attachments).sort(), ['c.bin', 'dir/b.bin']);
      await assert.rejects(db.getAttachment('inline', 'a.txt'), (e) => e.status === 404);
    });

    test('bulkDocs with inline attachments, read back', async () => {
      const docs = Array.from({ length: 5 }, (_, i) => ({
        _id: `bulk-${i}`,
        i,
        _attachments: {
          [`f${i}.txt`]: { content_type: TEXT, data: text(500 + 300 * i, `bulk-${i}`).toString('base64') },
          'blob.bin': { content_type: OCTET, data: bytes(1000 * (i + 1), `bulk-${i}`).toString('base64') },
        },
      }));
      const res = await db.bulkDocs(docs);
      assert.equal(res.length, 5);
      for (const r of res) assert.equal(r.ok, true, JSON.stringify(r));
      const all = await db.allDocs({ include_docs: true, attachments: true, startkey: 'bulk-', endkey: 'bulk-\uffff' });
      assert.equal(all.rows.length, 5);
      for (const [i, row] of all.rows.entries()) {
        const t = text(500 + 300 * i, `bulk-${i}`);
        const b = bytes(1000 * (i + 1), `bulk-${i}`);
        assert.equal(row.doc._attachments[`f${i}.txt`].data, t.toString('base64'), `allDocs ${row.id} text`);
        assert.equal(row.doc._attachments['blob.bin'].data, b.toString('base64'), `allDocs ${row.id} blob`);
        assertBytes(await db.getAttachment(row.id, `f${i}.txt`), t, `${row.id}/f${i}.txt`);
        assertBytes(await db.getAttachment(row.id, 'blob.bin'), b, `${row.id}/blob.bin`);
        const stubbed = await db.get(row.id);
        assertStub(stubbed._attachments['blob.bin'], { type: OCTET, length: b.length, revpos: 1 }, `${row.id} stub`);
        assert.equal(stubbed._attachments['blob.bin'].digest, md5Digest(b));
      }
    });
  });

  describe('replication Settee -> local PouchDB', () => {
    let src;
    let dst;
    const want = {};
    const put = (id, name, buf) => {
      want[id] = want[id] || {};
      want[id][name] = buf;
    };

    before(async () => {
      src = remote('att-pull');
      dst = local('att-pull-local');
      await src.info();
      // Several documents with one small attachment each.
      for (let i = 0; i < 6; i++) {
        const buf = i % 2 ? text(2000 + i, `many-${i}`) : bytes(2000 + i, `many-${i}`);
        await src.putAttachment(`many-${i}`, `a-${i}`, buf, i % 2 ? TEXT : OCTET);
        put(`many-${i}`, `a-${i}`, buf);
      }
      // A 1 MB attachment.
      const big = bytes(1024 * 1024, 'big');
      await src.putAttachment('big', 'big.bin', big, OCTET);
      put('big', 'big.bin', big);
      // Two attachments on one document, with a body.
      const two1 = text(40000, 'two');
      const two2 = bytes(30000, 'two');
      await src.put({
        _id: 'two',
        body: { n: 2 },
        _attachments: {
          'readme.txt': { content_type: TEXT, data: two1.toString('base64') },
          'image.png': { content_type: 'image/png', data: two2.toString('base64') },
        },
      });
      put('two', 'readme.txt', two1);
      put('two', 'image.png', two2);
      // Updated in a later revision, then a body edit keeping the stub.
      const v1 = bytes(10000, 'v1');
      const v2 = bytes(12000, 'v2');
      const u1 = await src.putAttachment('updated', 'file.bin', v1, OCTET);
      await src.putAttachment('updated', 'file.bin', u1.rev, v2, OCTET);
      const ud = await src.get('updated');
      await src.put({ ...ud, edited: true });
      put('updated', 'file.bin', v2);
      // One of two attachments deleted.
      const keep = text(5000, 'keep');
      const d1 = await src.putAttachment('deleted-att', 'keep.txt', keep, TEXT);
      const d2 = await src.putAttachment('deleted-att', 'drop.bin', d1.rev, bytes(8000, 'drop'), OCTET);
      await src.removeAttachment('deleted-att', 'drop.bin', d2.rev);
      put('deleted-att', 'keep.txt', keep);
      // A document without attachments.
      await src.put({ _id: 'plain', x: 1 });
    });

    test('every attachment arrives byte-identical with equal digests', async () => {
      const res = await withTimeout(PouchDB.replicate(src, dst), 60000, 'pull replication');
      assertClean(res, 'pull');
      assert.equal(res.docs_written, 11);
      const n = await assertSameAttachments(src, dst, 'after pull', want);
      assert.equal(n, 11);
      const upd = await dst.get('updated');
      assert.equal(upd.edited, true);
      assert.match(upd._rev, /^3-/);
      const del = await dst.get('deleted-att');
      assert.deepEqual(Object.keys(del._attachments), ['keep.txt']);
      await assert.rejects(dst.getAttachment('deleted-att', 'drop.bin'), (e) => e.status === 404);
      assert.deepEqual((await dst.get('two')).body, { n: 2 });
    });

    test('a later attachment change is pulled incrementally', async () => {
      const doc = await src.get('two');
      const newer = bytes(25000, 'two-newer');
      await src.putAttachment('two', 'image.png', doc._rev, newer, 'image/png');
      put('two', 'image.png', newer);
      const res = await withTimeout(PouchDB.replicate(src, dst), 30000, 'second pull');
      assertClean(res, 'second pull');
      assert.equal(res.docs_written, 1);
      await assertSameAttachments(src, dst, 'after second pull', want);
    });
  });

  describe('replication local PouchDB -> Settee', () => {
    let src;
    let dst;
    const want = {};
    const types = {};
    const put = (id, name, buf, type) => {
      want[id] = want[id] || {};
      want[id][name] = buf;
      types[`${id}/${name}`] = type;
    };

    before(async () => {
      src = local('att-push-local');
      dst = remote('att-push');
      await dst.info();
      // New document by putAttachment.
      const a = bytes(50000, 'push-a');
      await src.putAttachment('new-doc', 'a.bin', a, OCTET);
      put('new-doc', 'a.bin', a, OCTET);
      // Existing document, text and a second attachment.
      const w = await src.put({ _id: 'existing', v: 1 });
      const t = text(30000, 'push-t');
      const w2 = await src.putAttachment('existing', 'notes.txt', w.rev, t, TEXT);
      const j = Buffer.from(JSON.stringify({ hello: 'world', list: [1, 2, 3] }));
      await src.putAttachment('existing', 'data.json', w2.rev, j, 'application/json');
      put('existing', 'notes.txt', t, TEXT);
      put('existing', 'data.json', j, 'application/json');
      // Large-ish and an odd name.
      const big = bytes(500 * 1024, 'push-big');
      await src.putAttachment('big', 'sub dir/ü file.bin', big, OCTET);
      put('big', 'sub dir/ü file.bin', big, OCTET);
      // Inline, then updated, then one removed.
      const i1 = bytes(3000, 'i1');
      const i2 = text(4000, 'i2');
      const r = await src.put({
        _id: 'inline',
        _attachments: {
          'one.bin': { content_type: OCTET, data: i1.toString('base64') },
          'two.txt': { content_type: TEXT, data: i2.toString('base64') },
        },
      });
      const i3 = bytes(3500, 'i3');
      const r2 = await src.putAttachment('inline', 'one.bin', r.rev, i3, OCTET);
      await src.removeAttachment('inline', 'two.txt', r2.rev);
      put('inline', 'one.bin', i3, OCTET);
      // An empty attachment.
      await src.putAttachment('empty', 'empty.txt', Buffer.alloc(0), TEXT);
      put('empty', 'empty.txt', Buffer.alloc(0), TEXT);
    });

    test('pushed attachments read back from the server (raw GET and PouchDB)', async () => {
      const res = await withTimeout(PouchDB.replicate(src, dst), 60000, 'push replication');
      assertClean(res, 'push');
      assert.equal(res.docs_written, 5);
      for (const [id, atts] of Object.entries(want)) {
        for (const [name, buf] of Object.entries(atts)) {
          const r = await raw('GET', attPath(dst, id, name));
          const body = Buffer.from(await r.arrayBuffer());
          assert.equal(r.status, 200, `GET ${id}/${name}: ${body.toString().slice(0, 200)}`);
          assert.equal(r.headers.get('content-type'), types[`${id}/${name}`], `GET ${id}/${name} content-type`);
          assertBytes(body, buf, `raw GET ${id}/${name}`);
        }
      }
      await assertSameAttachments(src, dst, 'after push', want);
      const inline = await dst.get('inline');
      assert.deepEqual(Object.keys(inline._attachments), ['one.bin']);
      assert.equal((await dst.get('existing')).v, 1);
    });

    test('a second push after a local attachment change', async () => {
      const doc = await src.get('existing');
      const t2 = text(31000, 'push-t2');
      await src.putAttachment('existing', 'notes.txt', doc._rev, t2, TEXT);
      want.existing['notes.txt'] = t2;
      const res = await withTimeout(PouchDB.replicate(src, dst), 30000, 'second push');
      assertClean(res, 'second push');
      assert.equal(res.docs_written, 1);
      await assertSameAttachments(src, dst, 'after second push', want);
      // And a fresh local database pulls it all back identically.
      const fresh = local('att-push-fresh');
      assertClean(await withTimeout(PouchDB.replicate(dst, fresh), 30000, 'fresh pull'), 'fresh pull');
      await assertSameAttachments(src, fresh, 'fresh pull', want);
    });
  });

  describe('sync both ways', () => {
    test('live sync: each side adds attachments, both sides end equal', async () => {
      const l = local('att-sync-local');
      const r = remote('att-sync');
      await r.info();
      await l.put({ _id: 'shared', v: 0 });
      const sync = PouchDB.sync(l, r, { live: true, retry: false, heartbeat: 1000 });
      const errors = [];
      sync.on('error', (e) => errors.push(e));
      sync.on('denied', (e) => errors.push(e));

      /** Polls until `db` has `id/name` with `buf`. */
      const arrives = (db, id, name, buf, what) => withTimeout((async () => {
        for (;;) {
          if (errors.length) throw errors[0];
          try {
            const got = await db.getAttachment(id, name);
            if (Buffer.isBuffer(got) && got.equals(buf)) return;
          } catch (e) {
            if (e.status !== 404) throw e;
          }
          await new Promise((res) => setTimeout(res, 100));
        }
      })(), 20000, what);

      try {
        const la = bytes(40000, 'sync-l');
        await l.putAttachment('from-local', 'l.bin', la, OCTET);
        await arrives(r, 'from-local', 'l.bin', la, 'local attachment on the server');

        const ra = text(20000, 'sync-r');
        await r.putAttachment('from-remote', 'r.txt', ra, TEXT);
        await arrives(l, 'from-remote', 'r.txt', ra, 'server attachment locally');

        // The same document, in turn.
        // `shared` reached the server in the initial sync (the paused local
        // rev is the base of the next edit).
        await withTimeout((async () => {
          for (;;) {
            try {
              if ((await r.get('shared'))._rev === (await l.get('shared'))._rev) return;
            } catch (e) {
              if (e.status !== 404) throw e;
            }
            await new Promise((res) => setTimeout(res, 100));
          }
        })(), 20000, 'shared doc on the server');
        const s1 = bytes(7000, 'shared-1');
        await l.putAttachment('shared', 'one.bin', (await l.get('shared'))._rev, s1, OCTET);
        await arrives(r, 'shared', 'one.bin', s1, 'shared/one.bin on the server');
        const s2 = text(9000, 'shared-2');
        await r.putAttachment('shared', 'two.txt', (await r.get('shared'))._rev, s2, TEXT);
        await arrives(l, 'shared', 'two.txt', s2, 'shared/two.txt locally');
        assert.deepEqual(errors, []);
      } finally {
        sync.cancel();
      }
      const n = await assertSameAttachments(l, r, 'after live sync', {
        shared: { 'two.txt': text(9000, 'shared-2'), 'one.bin': bytes(7000, 'shared-1') },
      });
      assert.equal(n, 4);
    });

    test('repeated one-shot syncs with concurrent attachment edits converge', async () => {
      const l = local('att-sync2-local');
      const r = remote('att-sync2');
      await r.info();
      await l.putAttachment('doc', 'base.bin', bytes(5000, 'base'), OCTET);
      assertClean((await withTimeout(PouchDB.sync(l, r), 30000, 'first sync')).push, 'first sync push');
      // Both sides edit the same document: a conflict, each leaf with its own attachments.
      const lrev = (await l.get('doc'))._rev;
      const rrev = (await r.get('doc'))._rev;
      const l1 = await l.putAttachment('doc', 'local.bin', lrev, bytes(6000, 'local-1'), OCTET);
      await l.putAttachment('doc', 'local2.txt', l1.rev, text(3000, 'local-2'), TEXT);
      await r.putAttachment('doc', 'remote.txt', rrev, text(4000, 'remote-1'), TEXT);
      await l.putAttachment('only-local', 'x.bin', bytes(1234, 'only-l'), OCTET);
      await r.putAttachment('only-remote', 'y.txt', text(2345, 'only-r'), TEXT);
      for (let i = 0; i < 2; i++) {
        const res = await withTimeout(PouchDB.sync(l, r), 30000, `sync ${i}`);
        assertClean(res.push, `sync ${i} push`);
        assertClean(res.pull, `sync ${i} pull`);
      }
      await assertSameAttachments(l, r, 'after syncs');
      const [wl, wr] = await Promise.all([l.get('doc', { conflicts: true }), r.get('doc', { conflicts: true })]);
      assert.equal(wl._rev, wr._rev);
      assert.deepEqual(wl._conflicts, wr._conflicts);
      assert.equal(wr._conflicts.length, 1);
      // The losing leaf's attachment is readable by rev on both sides.
      const loser = wr._conflicts[0];
      const loserDoc = await r.get('doc', { rev: loser });
      for (const name of Object.keys(loserDoc._attachments)) {
        const [a, b] = await Promise.all([
          l.getAttachment('doc', name, { rev: loser }),
          r.getAttachment('doc', name, { rev: loser }),
        ]);
        assertBytes(b, a, `loser ${name}`);
      }
      // Both sides hold the same leaves.
      const [sl, sr] = await Promise.all([snapshot(l), snapshot(r)]);
      const leaves = (s) => Object.fromEntries(Object.entries(s.docs).map(([id, d]) => [id, d.leaves.map((x) => x._rev)]));
      assert.deepEqual(leaves(sr), leaves(sl));
    });
  });
});
