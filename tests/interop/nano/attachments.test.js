// nano's attachment API against the server: attachment.insert on a new
// and on an existing document (binary and text), attachment.get back byte
// for byte, the stub with its digest, getAsStream, multipart.insert (a
// document and two attachments in one multipart/related PUT) and
// multipart.get, attachment.destroy, and CouchDB's errors for a missing
// attachment and a stale revision. The expected answers are CouchDB 3.4.3's.

import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import zlib from 'node:zlib';
import { nano, freshDb, rejectsWith, md5Digest, bytes, plainUrl, serverUrl } from './helpers.js';

const PNG = 'image/png';
const TEXT = 'text/plain';

function assertBytes(got, want, what) {
  assert.ok(Buffer.isBuffer(got), `${what}: expected a Buffer, got ${Object.prototype.toString.call(got)}`);
  assert.equal(got.length, want.length, `${what}: length`);
  assert.ok(got.equals(want), `${what}: bytes differ`);
}

/**
 * The attachment's bytes as the server stores them, asked for with
 * `Accept-Encoding: gzip` (nano decodes them): [content-encoding, bytes].
 */
function rawAttachment(db, id, name) {
  const { username, password } = new URL(serverUrl);
  const auth = Buffer.from(`${decodeURIComponent(username)}:${decodeURIComponent(password)}`).toString('base64');
  const url = `${plainUrl}/${encodeURIComponent(db)}/${encodeURIComponent(id)}/${name.split('/').map(encodeURIComponent).join('/')}`;
  return new Promise((resolve, reject) => {
    const req = http.get(url, { headers: { Authorization: `Basic ${auth}`, 'Accept-Encoding': 'gzip' }, timeout: 30000 }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        if (res.statusCode !== 200) reject(new Error(`GET ${url}: ${res.statusCode}`));
        else resolve([res.headers['content-encoding'], Buffer.concat(chunks)]);
      });
    });
    req.on('timeout', () => req.destroy(new Error(`GET ${url}: timed out`)));
    req.on('error', reject);
  });
}

/**
 * CouchDB stores compressible types (text/*, JSON…) gzip-encoded, and their
 * digest is the MD5 of that encoding (its bytes depend on the deflate
 * implementation, so they are checked against what the server sends):
 * the stub's digest and encoding info match the encoded bytes, which
 * decode to `want`.
 */
async function assertGzipStored(db, dbName, id, name, want) {
  const doc = await db.get(id, { att_encoding_info: true });
  const stub = doc._attachments[name];
  assert.equal(stub.encoding, 'gzip', `${name}: encoding`);
  const [encoding, raw] = await rawAttachment(dbName, id, name);
  assert.equal(encoding, 'gzip', `${name}: Content-Encoding`);
  assert.equal(stub.encoded_length, raw.length, `${name}: encoded_length`);
  assert.equal(stub.digest, md5Digest(raw), `${name}: digest of the gzip encoding`);
  assert.ok(zlib.gunzipSync(raw).equals(want), `${name}: the encoding decodes to the bytes`);
  assert.equal(stub.length, want.length, `${name}: length`);
}

describe('attachments', () => {
  let name;
  let db;
  before(async () => { [name, db] = await freshDb('att'); });
  after(async () => { await nano.db.destroy(name); });

  const image = bytes(100 * 1024 + 7, 'image');
  const note = Buffer.from('hello, attachment ✓\n'.repeat(200), 'utf8');

  test('insert on a new document, get the bytes back, the stub', async () => {
    const res = await db.attachment.insert('pic', 'photo.png', image, PNG);
    assert.equal(res.ok, true);
    assert.equal(res.id, 'pic');
    assert.match(res.rev, /^1-/);

    assertBytes(await db.attachment.get('pic', 'photo.png'), image, 'photo.png');

    const doc = await db.get('pic');
    assert.deepEqual(doc, {
      _id: 'pic',
      _rev: res.rev,
      _attachments: {
        'photo.png': { content_type: PNG, revpos: 1, digest: md5Digest(image), length: image.length, stub: true },
      },
    });

    // A second, compressible one on the existing document, by revision.
    const second = await db.attachment.insert('pic', 'notes/readme.txt', note, TEXT, { rev: res.rev });
    assert.match(second.rev, /^2-/);
    assertBytes(await db.attachment.get('pic', 'notes/readme.txt'), note, 'notes/readme.txt');
    const both = await db.get('pic');
    assert.deepEqual(Object.keys(both._attachments).sort(), ['notes/readme.txt', 'photo.png']);
    assert.equal(both._attachments['notes/readme.txt'].revpos, 2);
    assert.equal(both._attachments['notes/readme.txt'].length, note.length);
    await assertGzipStored(db, name, 'pic', 'notes/readme.txt', note);
    // An image is stored as it is: no encoding, the digest of its bytes.
    const info = await db.get('pic', { att_encoding_info: true });
    assert.equal(info._attachments['photo.png'].encoding, undefined);
    assert.equal(info._attachments['photo.png'].digest, md5Digest(image));
    assert.equal(both._attachments['photo.png'].revpos, 1);

    // attachments=true: inline base64.
    const inline = await db.get('pic', { attachments: true });
    assert.equal(Buffer.from(inline._attachments['photo.png'].data, 'base64').equals(image), true);
    assert.equal(inline._attachments['photo.png'].stub, undefined);

    // As a stream.
    const chunks = [];
    for await (const c of db.attachment.getAsStream('pic', 'photo.png')) chunks.push(c);
    assertBytes(Buffer.concat(chunks), image, 'stream');

    // Stale revision and missing attachment.
    await rejectsWith(db.attachment.insert('pic', 'x.bin', image, PNG, { rev: res.rev }), 409, 'conflict', 'Document update conflict.');
    // (nano reads attachments as bytes, errors too: only the status reaches its Error.)
    await rejectsWith(db.attachment.get('pic', 'nope.txt'), 404);
    await rejectsWith(db.attachment.get('nodoc', 'nope.txt'), 404);

    // Destroy one; the other stays.
    const removed = await db.attachment.destroy('pic', 'photo.png', { rev: second.rev });
    assert.equal(removed.ok, true);
    assert.match(removed.rev, /^3-/);
    const left = await db.get('pic');
    assert.deepEqual(Object.keys(left._attachments), ['notes/readme.txt']);
    await rejectsWith(db.attachment.get('pic', 'photo.png'), 404);
  });

  test('an update that keeps the stub keeps the attachment', async () => {
    const res = await db.attachment.insert('keep', 'a.bin', image.subarray(0, 1000), 'application/octet-stream');
    const doc = await db.get('keep');
    const updated = await db.insert({ ...doc, title: 'kept' });
    assert.match(updated.rev, /^2-/);
    assertBytes(await db.attachment.get('keep', 'a.bin'), image.subarray(0, 1000), 'a.bin');
    const after = await db.get('keep');
    assert.equal(after.title, 'kept');
    assert.equal(after._attachments['a.bin'].revpos, 1);
    assert.notEqual(res.rev, updated.rev);
  });

  test('multipart insert with two attachments, multipart get', async () => {
    const small = Buffer.from('first part body');
    const res = await db.multipart.insert({ title: 'multi', tags: ['a', 'b'] }, [
      { name: 'one.txt', data: small, content_type: TEXT },
      { name: 'two.png', data: image, content_type: PNG },
    ], 'multi');
    assert.equal(res.ok, true);
    assert.equal(res.id, 'multi');
    assert.match(res.rev, /^1-/);

    const doc = await db.get('multi');
    assert.equal(doc.title, 'multi');
    assert.deepEqual(doc.tags, ['a', 'b']);
    assert.deepEqual(Object.keys(doc._attachments['one.txt']).sort(), ['content_type', 'digest', 'length', 'revpos', 'stub']);
    assert.equal(doc._attachments['one.txt'].length, small.length);
    await assertGzipStored(db, name, 'multi', 'one.txt', small);
    assert.deepEqual(doc._attachments['two.png'], {
      content_type: PNG, revpos: 1, digest: md5Digest(image), length: image.length, stub: true,
    });
    assertBytes(await db.attachment.get('multi', 'one.txt'), small, 'one.txt');
    assertBytes(await db.attachment.get('multi', 'two.png'), image, 'two.png');

    // multipart.get asks for multipart/related (nano hands back the body as
    // text): the document part with `follows` stubs, then each attachment
    // as a part, the text one gzip-encoded as stored (nano accepts gzip).
    const body = await db.multipart.get('multi');
    const text = Buffer.isBuffer(body) ? body.toString('latin1') : String(body);
    const parts = text.split(/\r\n--[0-9a-f]+(?:--)?(?:\r\n)?/i).filter((p) => p.trim() !== '');
    assert.equal(parts.length, 3, 'a document part and two attachment parts');
    const [head, json] = parts[0].replace(/^--[0-9a-f]+\r\n/i, '').split('\r\n\r\n');
    assert.match(head, /^content-type: application\/json$/im);
    const sent = JSON.parse(json);
    assert.equal(sent._id, 'multi');
    assert.equal(sent._attachments['one.txt'].follows, true);
    assert.equal(sent._attachments['one.txt'].encoding, 'gzip');
    assert.equal(sent._attachments['two.png'].follows, true);
    assert.equal(sent._attachments['two.png'].length, image.length);
    const partHeads = parts.slice(1).map((p) => p.split('\r\n\r\n')[0]);
    assert.match(partHeads[0], /^content-disposition: attachment; filename="one\.txt"$/im);
    assert.match(partHeads[0], /^content-encoding: gzip$/im);
    assert.match(partHeads[0], new RegExp(`^content-length: ${sent._attachments['one.txt'].encoded_length}$`, 'im'));
    assert.match(partHeads[1], /^content-disposition: attachment; filename="two\.png"$/im);
    assert.match(partHeads[1], new RegExp(`^content-length: ${image.length}$`, 'im'));
    assert.doesNotMatch(partHeads[1], /content-encoding/i);
  });

  test('an attachment on a design document', async () => {
    const ddoc = await db.insert({ views: {} }, '_design/app');
    const res = await db.attachment.insert('_design/app', 'index.html', Buffer.from('<h1>hi</h1>'), 'text/html', { rev: ddoc.rev });
    assert.match(res.rev, /^2-/);
    assertBytes(await db.attachment.get('_design/app', 'index.html'), Buffer.from('<h1>hi</h1>'), 'index.html');
  });
});
