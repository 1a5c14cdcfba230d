import { test } from "node:test";
import assert from "node:assert/strict";
import { parse, href } from "../src/route";
import { path, docPath, qs, bytes, isDbAdmin, isServerAdmin } from "../src/api";
import { latency, rates } from "../src/metrics";
import { short } from "../src/ui";

test("routes round-trip through the hash, odd names included", () => {
  for (const db of ["db", "a/b", "with space", "ünï", "x%y"]) {
    assert.deepEqual(parse(href("db", db)), { page: "docs", db });
    for (const id of ["doc", "_design/x", "a/b c", "?#&"]) {
      assert.deepEqual(parse(href("db", db, "doc", id)), { page: "doc", db, id });
    }
    assert.deepEqual(parse(href("db", db, "find")), { page: "find", db });
    assert.deepEqual(parse(href("db", db, "security")), { page: "security", db });
  }
  assert.deepEqual(parse(""), { page: "databases" });
  assert.deepEqual(parse("#/"), { page: "databases" });
  for (const p of ["login", "replication", "users", "config", "tasks", "stats", "cluster"]) {
    assert.deepEqual(parse(href(p)), { page: p });
  }
  assert.equal(parse("#/nope/x").page, "notfound");
  assert.equal(parse("#/db/x/bogus").page, "notfound");
});

test("server paths encode every segment; design and local ids keep their slash", () => {
  assert.equal(path("a/b", "c d"), "/a%2Fb/c%20d");
  assert.equal(docPath("db", "a/b"), "/db/a%2Fb");
  assert.equal(docPath("db", "_design/x y"), "/db/_design/x%20y");
  assert.equal(docPath("db", "_local/l"), "/db/_local/l");
  assert.equal(docPath("d b", "_design/v", "att/1.txt"), "/d%20b/_design/v/att%2F1.txt");
});

test("query strings: strings as they are, other values as JSON, empties left out", () => {
  assert.equal(qs({}), "");
  assert.equal(qs({ a: "x y", b: true, c: 3, d: undefined, e: null, f: "" }), "?a=x%20y&b=true&c=3");
  assert.equal(qs({ startkey: JSON.stringify("k") }), "?startkey=%22k%22");
});

test("sizes read as a person reads them", () => {
  assert.equal(bytes(undefined), "–");
  assert.equal(bytes(0), "0 B");
  assert.equal(bytes(1023), "1023 B");
  assert.equal(bytes(1536), "1.5 KiB");
  assert.equal(bytes(5 * 1024 * 1024), "5.0 MiB");
});

test("rights: server admins by role, database admins by name or role", () => {
  const admin = { name: "a", roles: ["_admin"] };
  const bob = { name: "bob", roles: ["ops"] };
  assert.ok(isServerAdmin(admin));
  assert.ok(!isServerAdmin(bob));
  assert.ok(!isServerAdmin(null));
  assert.ok(isDbAdmin(admin, {}));
  assert.ok(!isDbAdmin(bob, {}));
  assert.ok(!isDbAdmin(bob, null));
  assert.ok(isDbAdmin(bob, { admins: { names: ["bob"] } }));
  assert.ok(isDbAdmin(bob, { admins: { roles: ["ops"] } }));
  assert.ok(!isDbAdmin(bob, { members: { names: ["bob"] } }));
});

test("counter samples become per-second rates", () => {
  const s = [
    { t: 0, n: 0 },
    { t: 2, n: 10 },
    { t: 4, n: 10 },
    { t: 5, n: 3 }, // went back (a restart): 0, not negative
    { t: 5, n: 9 }, // no time passed
  ];
  assert.deepEqual(rates(s, (x) => x.n), [5, 0, 0, 0]);
  assert.deepEqual(rates([], (x: { t: number }) => x.t), []);
});

test("table cells are shortened JSON", () => {
  assert.equal(short("abc"), "abc");
  assert.equal(short({ a: 1 }), '{"a":1}');
  assert.equal(short("x".repeat(100), 10), "xxxxxxxxx…");
  assert.equal(short(undefined), "");
});

test("latency percentiles come from request_time's pairs, 0 when absent", () => {
  const pairs = [[50, 1.5], [75, 2], [90, 3], [95, 4.25], [99, 9], [999, 12]];
  assert.deepEqual(latency(pairs), { p50: 1.5, p95: 4.25, p99: 9 });
  assert.deepEqual(latency(undefined), { p50: 0, p95: 0, p99: 0 });
  assert.deepEqual(latency([[50, "x"]]), { p50: 0, p95: 0, p99: 0 });
});
