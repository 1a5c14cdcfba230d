// PouchDB with a session cookie: a user logs in through `POST /_session`
// (CouchDB's AuthSession cookie), then PouchDB replicates a members-only
// database both ways with that cookie as its only credential; a user who is
// not a member is refused (403), and so is the anonymous client (401). The
// users and databases are created by the server admin (SETTEE_URL) and
// removed afterwards. The expected answers are CouchDB 3.4.3's.

import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { PouchDB, plainUrl, authHeaders, uniqueName, localDb, withTimeout } from './helpers.js';

/** An admin request with raw fetch; returns [status, body]. */
async function admin(method, path, body) {
  const res = await fetch(`${plainUrl}${path}`, {
    method,
    headers: { ...authHeaders(), 'Content-Type': 'application/json', Accept: 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return [res.status, await res.json()];
}

/** Logs `name` in; returns the `AuthSession=…` pair of the answer. */
async function login(name, password) {
  const res = await fetch(`${plainUrl}/_session`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
    body: JSON.stringify({ name, password }),
  });
  assert.equal(res.status, 200, await res.text());
  const cookie = res.headers.get('set-cookie');
  assert.match(cookie, /^AuthSession=[^;]+;/);
  return cookie.split(';')[0];
}

/** A PouchDB handle on a server database that sends only `cookie`. */
function withCookie(db, cookie) {
  return new PouchDB(`${plainUrl}/${db}`, {
    skip_setup: true,
    fetch: (url, opts) => {
      if (cookie) opts.headers.set('Cookie', cookie);
      return PouchDB.fetch(url, opts);
    },
  });
}

describe('sessions', () => {
  const db = uniqueName('session');
  const member = uniqueName('member');
  const stranger = uniqueName('stranger');
  const users = [];

  before(async () => {
    for (const name of [member, stranger]) {
      const [status, res] = await admin('PUT', `/_users/org.couchdb.user:${name}`, {
        name, password: `pw-${name}`, roles: [], type: 'user',
      });
      assert.equal(status, 201, JSON.stringify(res));
      users.push([name, res.rev]);
    }
    assert.equal((await admin('PUT', `/${db}`))[0], 201);
    const [status] = await admin('PUT', `/${db}/_security`, {
      admins: { names: [], roles: [] },
      members: { names: [member], roles: [] },
    });
    assert.equal(status, 200);
    const [bulk] = await admin('POST', `/${db}/_bulk_docs`, {
      docs: [{ _id: 'a', n: 1 }, { _id: 'b', n: 2 }],
    });
    assert.equal(bulk, 201);
  });

  after(async () => {
    await admin('DELETE', `/${db}`);
    for (const [name, rev] of users) {
      await admin('DELETE', `/_users/org.couchdb.user:${name}?rev=${rev}`);
    }
  });

  test('a member replicates a members-only database both ways with its session cookie', async () => {
    const cookie = await login(member, `pw-${member}`);
    const remote = withCookie(db, cookie);
    const session = await (await fetch(`${plainUrl}/_session`, { headers: { Cookie: cookie } })).json();
    assert.equal(session.userCtx.name, member);
    assert.equal(session.info.authenticated, 'cookie');

    const local = localDb('session-local');
    const pulled = await withTimeout(local.replicate.from(remote), 30000, 'pull');
    assert.equal(pulled.ok, true);
    assert.equal(pulled.docs_written, 2);
    assert.deepEqual((await local.allDocs()).rows.map((r) => r.id), ['a', 'b']);

    await local.put({ _id: 'c', n: 3 });
    const pushed = await withTimeout(local.replicate.to(remote), 30000, 'push');
    assert.equal(pushed.ok, true);
    assert.equal(pushed.docs_written, 1);
    const [status, c] = await admin('GET', `/${db}/c`);
    assert.equal(status, 200);
    assert.equal(c.n, 3);
    await local.destroy();
  });

  test('a user who is not a member, and the anonymous client, are refused', async () => {
    const cookie = await login(stranger, `pw-${stranger}`);
    for (const [who, c, status] of [['stranger', cookie, 403], ['anonymous', null, 401]]) {
      const local = localDb('session-refused');
      await assert.rejects(
        withTimeout(local.replicate.from(withCookie(db, c)), 30000, `${who} pull`),
        (err) => err.status === status,
        who,
      );
      await local.destroy();
    }
  });

  test('a wrong password gets no session (an emptied cookie)', async () => {
    const res = await fetch(`${plainUrl}/_session`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ name: member, password: 'not-it' }),
    });
    assert.equal(res.status, 401);
    assert.match(res.headers.get('set-cookie'), /^AuthSession=;/);
  });
});
