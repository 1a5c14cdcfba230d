// Cookie authentication with nano: the admin creates a user in `_users`
// and a database only that user may read; a nano client without
// credentials logs in with `nano.auth` (POST /_session, a form body), keeps
// the AuthSession cookie in its jar and reads with it alone; `nano.session`
// tells who it is and how it was authenticated. A wrong password, an
// anonymous client and a user who is not a member are refused. The
// expected answers are CouchDB 3.4.3's.

import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { nano, client, plainUrl, adminName, uniqueName, rejectsWith } from './helpers.js';

describe('session login with cookie auth', () => {
  const db = uniqueName('members');
  const member = uniqueName('member');
  const stranger = uniqueName('stranger');
  const users = nano.use('_users');
  const revs = {};

  before(async () => {
    for (const name of [member, stranger]) {
      const res = await users.insert({ name, password: `pw-${name}`, roles: ['reader'], type: 'user' }, `org.couchdb.user:${name}`);
      assert.equal(res.ok, true);
      revs[name] = res.rev;
    }
    await nano.db.create(db);
    const sec = await nano.request({
      db, path: '_security', method: 'PUT',
      body: { admins: { names: [], roles: [] }, members: { names: [member], roles: [] } },
    });
    assert.deepEqual(sec, { ok: true });
    await nano.use(db).insert({ secret: 42 }, 'doc');
  });

  after(async () => {
    await nano.db.destroy(db);
    for (const [name, rev] of Object.entries(revs)) await users.destroy(`org.couchdb.user:${name}`, rev);
  });

  test('the admin session (basic auth)', async () => {
    const s = await nano.session();
    assert.equal(s.ok, true);
    assert.equal(s.userCtx.name, adminName);
    assert.ok(s.userCtx.roles.includes('_admin'));
    assert.deepEqual(s.info, { authentication_handlers: ['cookie', 'default'], authenticated: 'default' });
  });

  test('a member logs in and reads with the cookie alone', async () => {
    const c = client(plainUrl);
    const login = await c.auth(member, `pw-${member}`);
    assert.deepEqual(login, { ok: true, name: member, roles: ['reader'] });
    assert.ok(c.config.cookieJar.getCookieString(plainUrl).startsWith('AuthSession='), 'the cookie is in the jar');

    const s = await c.session();
    assert.deepEqual(s.userCtx, { name: member, roles: ['reader'] });
    assert.deepEqual(s.info, { authentication_handlers: ['cookie', 'default'], authenticated: 'cookie' });

    const doc = await c.use(db).get('doc');
    assert.equal(doc.secret, 42);
    const res = await c.use(db).insert({ by: member }, 'written');
    assert.equal(res.ok, true);
    // A member is not a database admin: no design documents.
    await rejectsWith(c.use(db).insert({ views: {} }, '_design/x'), 403, 'forbidden',
      'You are not a db or server admin.');
    // Nor a server admin.
    await rejectsWith(c.db.create(uniqueName('nope')), 401, 'unauthorized',
      'You are not a server admin.');
  });

  test('a user who is not a member is refused with 403', async () => {
    const c = client(plainUrl);
    await c.auth(stranger, `pw-${stranger}`);
    assert.equal((await c.session()).userCtx.name, stranger);
    await rejectsWith(c.use(db).get('doc'), 403, 'forbidden', 'You are not allowed to access this db.');
  });

  test('a wrong password, and the anonymous client', async () => {
    const c = client(plainUrl);
    await rejectsWith(c.auth(member, 'wrong'), 401, 'unauthorized', 'Name or password is incorrect.');
    const s = await c.session();
    assert.deepEqual(s.userCtx, { name: null, roles: [] });
    assert.deepEqual(s.info, { authentication_handlers: ['cookie', 'default'] });
    await rejectsWith(c.use(db).get('doc'), 401, 'unauthorized', 'You are not authorized to access this db.');
  });

  test('logging out (DELETE /_session) drops the session', async () => {
    const c = client(plainUrl);
    await c.auth(member, `pw-${member}`);
    assert.equal((await c.session()).userCtx.name, member);
    const out = await c.request({ db: '_session', method: 'DELETE' });
    assert.deepEqual(out, { ok: true });
    // The server cleared the cookie; nano's jar took the empty value.
    assert.deepEqual((await c.session()).userCtx, { name: null, roles: [] });
    await rejectsWith(c.use(db).get('doc'), 401, 'unauthorized');
  });
});
