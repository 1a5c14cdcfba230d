"""couchdb3 (PyPI, pinned by requirements.txt) driving a realistic session
against a CouchDB-compatible server: SETTEE_URL, e.g.
http://admin:pass@127.0.0.1:PORT (crates/settee/tests/interop_python.rs
starts the real settee binary and sets it; the same suite passes against
the reference CouchDB 3.4.3 given its URL).

couchdb3's default authentication is a session cookie: every client here
logs in through POST /_session first and then sends only the AuthSession
cookie. Covered: the server (up, info, all_dbs, dbs_info, create, delete),
documents (create, save, get, rev, copy, delete, conflicts), a bulk load of
500 documents, all_docs and bulk_get, purge, design documents and views
(reduce, group, keys, include_docs, ranges, descending), Mango (save_index,
indexes, find with sort, fields and bookmarks, explain, execution_stats,
delete_index), attachments, users and members-only databases with cookie
and basic authentication, new_edits=false conflicts, replication
(_replicate and a _replicator document), the changes feed (normal,
doc_ids, selector, longpoll, continuous) and the async client. Every
expectation is CouchDB 3.4.3's answer.

Run: SETTEE_URL=http://admin:PASS@127.0.0.1:PORT PYTHON -m unittest -v test_couchdb3
(PYTHON from ./ensure-venv), from this directory.
"""

import asyncio
import base64
import hashlib
import json
import os
import random
import string
import time
import unittest
from urllib.parse import quote, urlparse

# httpx honours proxy variables: these requests are for loopback only.
for _k in list(os.environ):
    if _k.lower() in ("http_proxy", "https_proxy", "all_proxy"):
        del os.environ[_k]

import couchdb3  # noqa: E402
from couchdb3 import exceptions  # noqa: E402

BASE = os.environ.get("SETTEE_URL")
if not BASE:
    raise SystemExit(
        "SETTEE_URL is not set: run through `cargo test --release -p settee --test interop_python`, "
        "or set SETTEE_URL=http://user:pass@127.0.0.1:PORT"
    )
BASE = BASE.rstrip("/")
_parsed = urlparse(BASE)
if _parsed.hostname not in ("127.0.0.1", "localhost", "::1"):
    raise SystemExit(f"SETTEE_URL must point to loopback, got {_parsed.hostname}")
PLAIN = f"{_parsed.scheme}://{_parsed.hostname}:{_parsed.port}"
ADMIN = _parsed.username

TIMEOUT = 30  # seconds, every request


def server(url=BASE, **kwargs):
    return couchdb3.Server(url, timeout=TIMEOUT, **kwargs)


ADMIN_CLIENT = server()
IS_SETTEE = ADMIN_CLIENT.info().get("vendor", {}).get("name") == "Settee"


def settee_differs(reason):
    """Skips a test of CouchDB's answer where Settee is known to answer
    otherwise (the cargo driver, interop_python.rs, accepts exactly the
    skips it lists, so each one is a recorded difference)."""
    return unittest.skipIf(IS_SETTEE, f"Settee differs: {reason}")

_counter = 0


def unique(label):
    global _counter
    _counter += 1
    rand = "".join(random.choice(string.ascii_lowercase + string.digits) for _ in range(6))
    return f"py-{label}-{os.getpid()}-{_counter}-{rand}"


def corpus(n):
    return [
        {"_id": f"d{i:03d}", "n": i, "group": f"g{i % 5}", "tag": "even" if i % 2 == 0 else "odd"}
        for i in range(n)
    ]


def rev(pos, label):
    return f"{pos}-{hashlib.md5(label.encode()).hexdigest()}"


def md5_digest(data):
    return "md5-" + base64.b64encode(hashlib.md5(data).digest()).decode()


def error_of(exc):
    """The JSON body of a couchdb3 error (its message is the response text)."""
    return json.loads(str(exc))


def wait_for(check, seconds, what, every=0.25):
    deadline = time.monotonic() + seconds
    for _ in range(int(seconds / every) + 2):
        value = check()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            break
        time.sleep(every)
    raise AssertionError(f"timed out after {seconds} s waiting for {what}")


class Couch(unittest.TestCase):
    def assertCouchError(self, exc_type, error, reason, fn, *args, **kwargs):
        with self.assertRaises(exc_type) as ctx:
            fn(*args, **kwargs)
        body = error_of(ctx.exception)
        self.assertEqual(body["error"], error, body)
        if reason is not None:
            self.assertEqual(body["reason"], reason, body)
        return body

    @classmethod
    def fresh_db(cls, label):
        name = unique(label)
        db = ADMIN_CLIENT.create(name)
        cls.addClassCleanup(ADMIN_CLIENT.delete, name)
        return name, db


class ServerTests(Couch):
    def test_up_and_info(self):
        self.assertTrue(ADMIN_CLIENT.up())
        info = ADMIN_CLIENT.info()
        self.assertEqual(info["couchdb"], "Welcome")
        self.assertRegex(info["version"], r"^\d+\.\d+\.\d+")

    def test_admin_logs_in_with_a_cookie(self):
        # The first request logged in (POST /_session): the cookie is in the
        # client's jar and /_session says so.
        ADMIN_CLIENT.info()
        self.assertIn("AuthSession", [c.name for c in ADMIN_CLIENT.session.cookies.jar])
        s = ADMIN_CLIENT.session.get(f"{PLAIN}/_session", timeout=TIMEOUT).json()
        self.assertEqual(s["userCtx"]["name"], ADMIN)
        self.assertIn("_admin", s["userCtx"]["roles"])
        self.assertEqual(s["info"], {"authentication_handlers": ["cookie", "default"], "authenticated": "cookie"})

    def test_database_life(self):
        name = unique("life")
        self.assertNotIn(name, ADMIN_CLIENT)
        db = ADMIN_CLIENT.create(name)
        self.assertEqual(db.name, name)
        self.assertIn(name, ADMIN_CLIENT)
        self.assertIn(name, ADMIN_CLIENT.all_dbs())
        info = db.info()
        self.assertEqual(info["db_name"], name)
        self.assertEqual(info["doc_count"], 0)
        self.assertCouchError(
            exceptions.PreconditionFailedError, "file_exists",
            "The database could not be created, the file already exists.", ADMIN_CLIENT.create, name,
        )
        missing = unique("missing")
        infos = ADMIN_CLIENT.dbs_info([name, missing])
        self.assertEqual([i["key"] for i in infos], [name, missing])
        self.assertEqual((infos[0]["info"]["db_name"], infos[0]["info"]["doc_count"]), (name, 0))
        self.assertEqual(infos[1], {"key": missing, "error": "not_found"})
        self.assertTrue(ADMIN_CLIENT.delete(name))
        self.assertNotIn(name, ADMIN_CLIENT)
        with self.assertRaises(exceptions.NotFoundError):
            ADMIN_CLIENT.get(name, check=True)
        self.assertCouchError(exceptions.NotFoundError, "not_found", "Database does not exist.", ADMIN_CLIENT.delete, name)

    def test_all_dbs_paging(self):
        names = sorted(unique("page") for _ in range(3))
        for n in names:
            ADMIN_CLIENT.create(n)
            self.addCleanup(ADMIN_CLIENT.delete, n)
        got = ADMIN_CLIENT.all_dbs(startkey=json.dumps(names[0]), endkey=json.dumps(names[-1]))
        self.assertEqual(got, names)
        self.assertEqual(ADMIN_CLIENT.all_dbs(startkey=json.dumps(names[0]), limit=2), names[:2])


class DocumentTests(Couch):
    @classmethod
    def setUpClass(cls):
        cls.name, cls.db = cls.fresh_db("docs")

    def test_create_save_get_copy_delete(self):
        db = self.db
        docid, ok, rev1 = db.create({"kind": "note", "text": "héllo ✓", "nested": {"a": [1, 2.5, None, True]}})
        self.assertTrue(ok)
        self.assertRegex(docid, r"^[0-9a-f]{32}$")
        self.assertRegex(rev1, r"^1-[0-9a-f]{32}$")
        doc = db.get(docid)
        self.assertEqual(dict(doc), {
            "_id": docid, "_rev": rev1, "kind": "note", "text": "héllo ✓", "nested": {"a": [1, 2.5, None, True]},
        })
        self.assertEqual(db.rev(docid), rev1)
        self.assertIn(docid, db)

        doc["text"] = "updated"
        _, _, rev2 = db.save(doc)
        self.assertRegex(rev2, r"^2-")
        stale = dict(doc, _rev=rev1, text="stale")
        self.assertCouchError(exceptions.ConflictError, "conflict", "Document update conflict.", db.save, stale)
        self.assertEqual(db.get(docid, rev=rev1)["text"], "héllo ✓")
        info = db.get(docid, revs_info=True)["_revs_info"]
        self.assertEqual([(r["rev"], r["status"]) for r in info], [(rev2, "available"), (rev1, "available")])

        copy_id, ok, copy_rev = db.copy(docid, "the-copy")
        self.assertEqual((copy_id, ok), ("the-copy", True))
        self.assertRegex(copy_rev, r"^1-")
        self.assertEqual(db.get("the-copy")["text"], "updated")

        self.assertCouchError(exceptions.ConflictError, "conflict", "Document update conflict.", db.delete, docid, rev1)
        self.assertTrue(db.delete(docid, rev2))
        self.assertIsNone(db.get(docid))
        self.assertNotIn(docid, db)
        self.assertCouchError(exceptions.NotFoundError, "not_found", "deleted", db.get, docid, check=True)
        self.assertCouchError(exceptions.NotFoundError, "not_found", "missing", db.get, "never", check=True)
        self.assertIsNone(db.rev("never"))

    def test_save_with_an_id(self):
        # (Not with batch=True: CouchDB's 202 answer to batch=ok has no
        # "rev", which couchdb3's save and create index anyway.)
        docid, ok, r = self.db.save({"_id": "chosen", "v": 1})
        self.assertEqual((docid, ok), ("chosen", True))
        docid, ok, r2 = self.db.save({"_id": "chosen", "_rev": r, "v": 2})
        self.assertRegex(r2, r"^2-")
        self.assertEqual(self.db.get("chosen")["v"], 2)

    def test_bulk_load_all_docs_bulk_get_purge(self):
        name, db = self.fresh_db("bulk")
        docs = corpus(500)
        res = db.bulk_docs(docs)
        self.assertEqual(len(res), 500)
        for r, d in zip(res, docs):
            self.assertEqual((r["id"], r["ok"]), (d["_id"], True))
        self.assertEqual(db.info()["doc_count"], 500)

        all_docs = db.all_docs()
        self.assertEqual(all_docs.total_rows, 500)
        self.assertEqual([r.id for r in all_docs.rows], [d["_id"] for d in docs])
        page = db.all_docs(startkey='"d100"', endkey='"d199"', limit=10, skip=5, include_docs=True)
        self.assertEqual(page.offset, 105)
        self.assertEqual([r.id for r in page.rows], [f"d{i}" for i in range(105, 115)])
        self.assertEqual(page.rows[0].doc["n"], 105)
        keyed = db.all_docs(keys=["d003", "nope", "d001"])
        self.assertEqual([r.get("id") for r in keyed.rows], ["d003", None, "d001"])
        self.assertEqual(keyed.rows[1]["error"], "not_found")
        desc = db.all_docs(descending=True, limit=2)
        self.assertEqual([r.id for r in desc.rows], ["d499", "d498"])

        got = db.bulk_get([{"_id": "d010"}, {"_id": "nope"}], revs=True)
        self.assertEqual([g["id"] for g in got], ["d010", "nope"])
        self.assertEqual(got[0]["docs"][0]["ok"]["n"], 10)
        self.assertEqual(got[0]["docs"][0]["ok"]["_revisions"]["start"], 1)
        self.assertEqual(got[1]["docs"][0]["error"]["error"], "not_found")

        conflict = db.bulk_docs([{"_id": "d000", "n": -1}, {"_id": "new", "n": 1}])
        self.assertEqual(conflict[0], {"id": "d000", "error": "conflict", "reason": "Document update conflict."})
        self.assertTrue(conflict[1]["ok"])

        purged = db.purge({"d001": [res[1]["rev"]], "nope": ["1-abc"]})
        self.assertEqual(purged["purged"], {"d001": [res[1]["rev"]], "nope": []})
        self.assertIsNone(db.get("d001"))
        self.assertEqual(db.info()["doc_count"], 500)  # 500 - d001 + "new"


class ViewTests(Couch):
    @classmethod
    def setUpClass(cls):
        cls.name, cls.db = cls.fresh_db("views")
        cls.docs = corpus(500)
        cls.db.bulk_docs(cls.docs)
        _, ok, _ = cls.db.put_design(
            "stats",
            language="javascript",
            views={
                "by_group": {"map": "function (doc) { if (doc.group) emit(doc.group, doc.n); }", "reduce": "_sum"},
                "by_group_n": {"map": "function (doc) { if (doc.group) emit([doc.group, doc.n], 1); }", "reduce": "_count"},
                "by_n": {"map": "function (doc) { emit(doc.n, doc.group); }"},
            },
        )
        assert ok

    def sum_of(self, group):
        return sum(d["n"] for d in self.docs if group is None or d["group"] == group)

    def test_reduce_group_keys(self):
        db = self.db
        self.assertEqual(db.view("stats", "by_group").rows[0].value, self.sum_of(None))
        grouped = db.view("stats", "by_group", group=True)
        self.assertEqual([(r.key, r.value) for r in grouped.rows], [(f"g{g}", self.sum_of(f"g{g}")) for g in range(5)])
        keyed = db.view("stats", "by_group", group=True, keys=["g3", "g1"])
        self.assertEqual([(r.key, r.value) for r in keyed.rows], [("g3", self.sum_of("g3")), ("g1", self.sum_of("g1"))])
        levels = db.view("stats", "by_group_n", group_level=1)
        self.assertEqual([(r.key, r.value) for r in levels.rows], [([f"g{g}"], 100) for g in range(5)])

    def test_include_docs_ranges_descending(self):
        db = self.db
        res = db.view("stats", "by_group", key='"g4"', reduce=False, include_docs=True, limit=3, skip=2)
        self.assertEqual(res.total_rows, 500)
        self.assertEqual(res.offset, 402)
        self.assertEqual([r.id for r in res.rows], ["d014", "d019", "d024"])
        self.assertEqual([r.doc["n"] for r in res.rows], [14, 19, 24])
        rng = db.view("stats", "by_group_n", startkey='["g2",100]', endkey='["g2",120]', reduce=False)
        self.assertEqual([r.key for r in rng.rows], [["g2", 102], ["g2", 107], ["g2", 112], ["g2", 117]])
        desc = db.view("stats", "by_n", descending=True, limit=2)
        self.assertEqual([(r.id, r.key, r.value) for r in desc.rows], [("d499", 499, "g4"), ("d498", 498, "g3")])
        excl = db.view("stats", "by_n", startkey=10, endkey=13, inclusive_end=False)
        self.assertEqual([r.key for r in excl.rows], [10, 11, 12])

    def test_errors(self):
        db = self.db
        self.assertCouchError(exceptions.BadRequestError, "query_parse_error", "`include_docs` is invalid for reduce",
                              db.view, "stats", "by_group", include_docs=True)
        self.assertCouchError(exceptions.NotFoundError, "not_found", "missing_named_view", db.view, "stats", "nope")
        # couchdb3 passes a string key as it is: unquoted, it is not JSON.
        self.assertCouchError(exceptions.BadRequestError, "bad_request", "invalid UTF-8 JSON",
                              db.view, "stats", "by_group", key="g1")

    def test_design_document_reads_back(self):
        ddoc = self.db.get_design("stats")
        self.assertEqual(ddoc["_id"], "_design/stats")
        self.assertEqual(sorted(ddoc["views"]), ["by_group", "by_group_n", "by_n"])
        names = [r.id for r in self.db.design_docs().rows]
        self.assertEqual(names, ["_design/stats"])


class FindTests(Couch):
    @classmethod
    def setUpClass(cls):
        cls.name, cls.db = cls.fresh_db("find")
        cls.db.bulk_docs(corpus(500))

    def test_index_find_sort_bookmarks_explain(self):
        db = self.db
        self.assertEqual(db.save_index({"fields": ["group", "n"]}, ddoc="mango-group", name="group-n"),
                         ("created", "_design/mango-group", "group-n"))
        self.assertEqual(db.save_index({"fields": ["group", "n"]}, ddoc="mango-group", name="group-n"),
                         ("exists", "_design/mango-group", "group-n"))
        indexes = db.indexes()
        self.assertEqual(indexes["total_rows"], 2)
        self.assertEqual(indexes["indexes"][1]["def"], {"fields": [{"group": "asc"}, {"n": "asc"}]})

        res = db.find({"group": "g3", "n": {"$gt": 100, "$lte": 200}}, fields=["_id", "n"],
                      sort=[{"group": "asc"}, {"n": "asc"}], limit=5)
        self.assertNotIn("warning", res)
        self.assertEqual(res["docs"], [{"_id": f"d{n}", "n": n} for n in (103, 108, 113, 118, 123)])

        # Every page by bookmark: 90 matches, 25 a page.
        seen, bookmark = [], None
        for page in range(10):
            res = db.find({"group": "g1", "n": {"$gte": 50}}, fields=["_id"], sort=[{"group": "asc"}, {"n": "asc"}],
                          limit=25, bookmark=bookmark)
            seen += [d["_id"] for d in res["docs"]]
            self.assertNotEqual(res["bookmark"], bookmark)
            bookmark = res["bookmark"]
            if len(res["docs"]) < 25:
                break
        self.assertEqual(page, 3)
        self.assertEqual(seen, [f"d{n:03d}" for n in range(51, 500, 5)])

        stats = db.find({"group": "g0", "n": {"$lt": 50}}, fields=["n"], execution_stats=True)
        self.assertEqual(sorted(d["n"] for d in stats["docs"]), list(range(0, 50, 5)))
        # The index covers the selector and the fields: no document read.
        self.assertEqual(stats["execution_stats"]["results_returned"], 10)
        # The range's end key [g0, 50] is read, then left out.
        self.assertEqual(stats["execution_stats"]["total_keys_examined"], 11)
        self.assertEqual(stats["execution_stats"]["total_docs_examined"], 0)
        whole = db.find({"group": "g0", "n": {"$lt": 50}}, execution_stats=True)
        self.assertEqual(whole["execution_stats"]["total_docs_examined"], 11)
        self.assertEqual(whole["execution_stats"]["total_quorum_docs_examined"], 0)

        plan = db.explain({"group": "g0", "n": {"$lt": 50}})
        self.assertEqual(plan["index"]["name"], "group-n")
        self.assertEqual(plan["index"]["ddoc"], "_design/mango-group")
        self.assertEqual(plan["limit"], 25)
        self.assertEqual(plan["mrargs"]["start_key"], ["g0"])

        self.assertTrue(db.delete_index("_design/mango-group", "group-n"))
        res = db.find({"group": "g0", "n": {"$lt": 10}})
        self.assertEqual(sorted(d["_id"] for d in res["docs"]), ["d000", "d005"])
        self.assertTrue(res["warning"].startswith("No matching index found, create an index to optimize query time."))

    def test_find_errors(self):
        self.assertCouchError(exceptions.BadRequestError, "no_usable_index",
                              "No index exists for this sort, try indexing by the sort fields.",
                              self.db.find, {"n": {"$gt": 1}}, sort=[{"n": "desc"}])
        self.assertCouchError(exceptions.BadRequestError, "invalid_operator", None,
                              self.db.find, {"n": {"$nope": 1}})


class AttachmentTests(Couch):
    @classmethod
    def setUpClass(cls):
        cls.name, cls.db = cls.fresh_db("att")

    def test_put_get_delete(self):
        db = self.db
        image = bytes(random.Random(7).getrandbits(8) for _ in range(50_000))
        docid, ok, rev1 = db.put_attachment("pic", "photo.png", content=image, content_type="image/png")
        self.assertEqual((docid, ok), ("pic", True))
        att = db.get_attachment("pic", "photo.png")
        self.assertEqual(att.content, image)
        self.assertEqual(att.content_type, "image/png")
        self.assertEqual(att.content_length, len(image))
        # couchdb3 reads the digest from Content-MD5, which CouchDB 3.4 does not send.
        self.assertIsNone(att.digest)
        stub = db.get("pic")["_attachments"]["photo.png"]
        self.assertEqual(stub, {"content_type": "image/png", "revpos": 1, "digest": md5_digest(image),
                                "length": len(image), "stub": True})

        text = "a line of text ✓\n".encode() * 300
        _, _, rev2 = db.put_attachment("pic", "notes/a.txt", content=text, content_type="text/plain", rev=rev1)
        self.assertRegex(rev2, r"^2-")
        self.assertEqual(db.get_attachment("pic", "notes/a.txt").content, text)
        inline = db.get("pic", attachments=True)["_attachments"]
        self.assertEqual(base64.b64decode(inline["photo.png"]["data"]), image)
        self.assertEqual(base64.b64decode(inline["notes/a.txt"]["data"]), text)

        self.assertCouchError(exceptions.ConflictError, "conflict", "Document update conflict.",
                              db.put_attachment, "pic", "x.bin", content=b"x", content_type="application/octet-stream", rev=rev1)
        self.assertTrue(db.delete_attachment("pic", "photo.png", rev=rev2))
        self.assertEqual(list(db.get("pic")["_attachments"]), ["notes/a.txt"])
        with self.assertRaises(exceptions.NotFoundError):
            db.get_attachment("pic", "photo.png")


class SessionTests(Couch):
    @classmethod
    def setUpClass(cls):
        cls.name, cls.db = cls.fresh_db("members")
        cls.member, cls.stranger = unique("member"), unique("stranger")
        cls.users = ADMIN_CLIENT.get("_users")
        for user in (cls.member, cls.stranger):
            ok, uid, urev = ADMIN_CLIENT.save_user(user, password=f"pw-{user}", roles=["reader"])
            assert ok and uid == f"org.couchdb.user:{user}"
            cls.addClassCleanup(lambda uid=uid: cls.users.delete(uid, cls.users.rev(uid)))
        cls.db.update_security(admins={"names": [], "roles": []}, members={"names": [cls.member], "roles": []})
        cls.db.save({"_id": "doc", "secret": 42})

    def test_security_object(self):
        sec = self.db.security()
        self.assertEqual(sec.members.names, [self.member])

    def test_member_with_cookie(self):
        c = server(PLAIN, user=self.member, password=f"pw-{self.member}")
        self.assertEqual(c.auth_method, "cookie")
        db = c.get(self.name)
        self.assertEqual(db.get("doc", check=True)["secret"], 42)
        s = c.session.get(f"{PLAIN}/_session", timeout=TIMEOUT).json()
        self.assertEqual(s["userCtx"], {"name": self.member, "roles": ["reader"]})
        self.assertEqual(s["info"]["authenticated"], "cookie")
        _, ok, _ = db.save({"_id": "by-member", "v": 1})
        self.assertTrue(ok)
        self.assertCouchError(exceptions.ForbiddenError, "forbidden", "You are not a db or server admin.",
                              db.save, {"_id": "_design/x", "views": {}})
        self.assertCouchError(exceptions.UnauthorizedError, "unauthorized", "You are not a server admin.",
                              c.create, unique("nope"))
        self.assertTrue(ADMIN_CLIENT.check_user(self.member, f"pw-{self.member}"))

    def test_member_with_basic_auth(self):
        c = server(PLAIN, user=self.member, password=f"pw-{self.member}", auth_method="basic")
        self.assertEqual(c.get(self.name).get("doc", check=True)["secret"], 42)
        self.assertNotIn("AuthSession", [k.name for k in c.session.cookies.jar])

    def database(self, **kwargs):
        return couchdb3.Database(self.name, url=PLAIN, timeout=TIMEOUT, **kwargs)

    def test_refusals(self):
        stranger = self.database(user=self.stranger, password=f"pw-{self.stranger}")
        self.assertCouchError(exceptions.ForbiddenError, "forbidden", "You are not allowed to access this db.",
                              stranger.get, "doc", check=True)
        # Server.get checks the database with a HEAD: refused too.
        with self.assertRaises(exceptions.ForbiddenError):
            server(PLAIN, user=self.stranger, password=f"pw-{self.stranger}").get(self.name)
        wrong = server(PLAIN, user=self.member, password="wrong")
        self.assertCouchError(exceptions.UnauthorizedError, "unauthorized", "Name or password is incorrect.",
                              wrong.info)
        # Anonymous: basic mode with no credentials sends none. (couchdb3's
        # cookie mode would first POST /_session with a null name and
        # password: CouchDB 3.4.3 crashes on that, 500 badarg, and Settee
        # answers 401; tests/conformance/DIFFERENCES.md, shapes.session.name.)
        anonymous = self.database(auth_method="basic")
        self.assertCouchError(exceptions.UnauthorizedError, "unauthorized", "You are not authorized to access this db.",
                              anonymous.get, "doc", check=True)
        self.assertFalse(ADMIN_CLIENT.check_user(self.member, "wrong"))


class ConflictTests(Couch):
    @classmethod
    def setUpClass(cls):
        cls.name, cls.db = cls.fresh_db("conflicts")

    def test_new_edits_false_and_resolution(self):
        db = self.db
        r1, left, right = rev(1, "root"), rev(2, "left"), rev(2, "right")
        winner, loser = (left, right) if left > right else (right, left)
        side = {left: "left", right: "right"}
        res = db.bulk_docs([
            {"_id": "c", "_rev": left, "_revisions": {"start": 2, "ids": [left[2:], r1[2:]]}, "side": "left"},
            {"_id": "c", "_rev": right, "_revisions": {"start": 2, "ids": [right[2:], r1[2:]]}, "side": "right"},
        ], new_edits=False)
        self.assertEqual(res, [])
        doc = db.get("c", conflicts=True)
        self.assertEqual(dict(doc), {"_id": "c", "_rev": winner, "side": side[winner], "_conflicts": [loser]})
        self.assertEqual(db.get("c", rev=loser)["side"], side[loser])
        got = db.bulk_get([{"_id": "c", "_rev": loser}], revs=True)
        self.assertEqual(got[0]["docs"][0]["ok"]["_revisions"], {"start": 2, "ids": [loser[2:], r1[2:]]})

        # A single document written with new_edits=false through PUT.
        _, ok, r = db.save({"_id": "single", "_rev": rev(5, "single"), "v": 1}, new_edits=False)
        self.assertTrue(ok)
        self.assertEqual(r, rev(5, "single"))

        self.assertTrue(db.delete("c", loser))
        doc = db.get("c", conflicts=True, deleted_conflicts=True)
        self.assertEqual(doc["_rev"], winner)
        self.assertNotIn("_conflicts", doc)
        self.assertEqual(len(doc["_deleted_conflicts"]), 1)
        self.assertRegex(doc["_deleted_conflicts"][0], r"^3-")


class ReplicationTests(Couch):
    @classmethod
    def setUpClass(cls):
        cls.source, cls.src = cls.fresh_db("repl-src")
        cls.src.bulk_docs(corpus(100))
        cls.src.put_attachment("withatt", "a.bin", content=b"\x00\x01\xff", content_type="application/octet-stream")
        doc = cls.src.get("d001")
        cls.src.delete("d001", doc["_rev"])

    def image(self, db):
        out = {}
        for row in db.all_docs().rows:
            out[row.id] = dict(db.get(row.id, revs=True))
        return out

    def url(self, name):
        return f"{BASE}/{quote(name, safe='')}"

    def test_replicate_create_target_then_incremental(self):
        target = unique("repl-tgt")
        self.addCleanup(ADMIN_CLIENT.delete, target)
        res = ADMIN_CLIENT.replicate(self.url(self.source), self.url(target), create_target=True)
        self.assertTrue(res["ok"])
        self.assertEqual(res["history"][0]["docs_written"], 101)
        self.assertEqual(res["history"][0]["doc_write_failures"], 0)
        tgt = ADMIN_CLIENT.get(target)
        self.assertEqual(self.image(tgt), self.image(self.src))
        self.assertEqual(tgt.get_attachment("withatt", "a.bin").content, b"\x00\x01\xff")
        self.assertEqual(tgt.info()["doc_del_count"], 1)

        self.src.save({"_id": "later", "v": 1})
        again = ADMIN_CLIENT.replicate(self.url(self.source), self.url(target))
        self.assertEqual(again["history"][0]["docs_written"], 102)
        self.assertEqual(tgt.get("later")["v"], 1)
        self.assertTrue(ADMIN_CLIENT.replicate(self.url(self.source), self.url(target))["no_changes"])

    def test_replicate_doc_ids_and_selector(self):
        t1, t2 = unique("repl-ids"), unique("repl-sel")
        for t in (t1, t2):
            ADMIN_CLIENT.create(t)
            self.addCleanup(ADMIN_CLIENT.delete, t)
        ADMIN_CLIENT.replicate(self.url(self.source), self.url(t1), doc_ids=["d005", "d006", "nope"])
        self.assertEqual([r.id for r in ADMIN_CLIENT.get(t1).all_docs().rows], ["d005", "d006"])
        ADMIN_CLIENT.replicate(self.url(self.source), self.url(t2), selector={"group": "g2", "n": {"$lt": 20}})
        self.assertEqual([r.id for r in ADMIN_CLIENT.get(t2).all_docs().rows], ["d002", "d007", "d012", "d017"])

    def test_replicator_document(self):
        if "_replicator" not in ADMIN_CLIENT:
            ADMIN_CLIENT.create("_replicator")
        target = unique("repl-job")
        self.addCleanup(ADMIN_CLIENT.delete, target)
        rep = ADMIN_CLIENT.get("_replicator")
        jobid, ok, _ = rep.create({"source": self.url(self.source), "target": self.url(target), "create_target": True})
        self.assertTrue(ok)

        def completed():
            doc = rep.get(jobid, check=True)
            if doc.get("_replication_state") in ("failed", "error"):
                raise AssertionError(f"replication failed: {dict(doc)}")
            return doc if doc.get("_replication_state") == "completed" else None

        done = wait_for(completed, 60, "the _replicator job to complete")
        self.assertEqual(done["_replication_stats"]["doc_write_failures"], 0)
        self.assertEqual(self.image(ADMIN_CLIENT.get(target)), self.image(self.src))
        self.assertTrue(rep.delete(jobid, done["_rev"]))


class ChangesTests(Couch):
    @classmethod
    def setUpClass(cls):
        cls.name, cls.db = cls.fresh_db("changes")
        cls.db.bulk_docs(corpus(150))

    def test_normal_feed(self):
        db = self.db
        all_ = db.changes(since="0")
        self.assertEqual(len(all_["results"]), 150)
        self.assertEqual(all_["pending"], 0)
        self.assertEqual(sorted(r["id"] for r in all_["results"]), [d["_id"] for d in corpus(150)])
        page = db.changes(since="0", limit=10, include_docs=True)
        self.assertEqual(len(page["results"]), 10)
        self.assertEqual(page["pending"], 140)
        for r in page["results"]:
            self.assertEqual(r["doc"]["_id"], r["id"])
        rest = db.changes(since=page["last_seq"])
        self.assertEqual(len(rest["results"]), 140)

    def test_doc_ids_and_selector(self):
        ids = self.db.changes(doc_ids=["d003", "d004", "nope"])
        self.assertEqual(sorted(r["id"] for r in ids["results"]), ["d003", "d004"])
        sel = self.db.changes(selector={"group": "g4", "n": {"$lt": 20}}, include_docs=True)
        self.assertEqual(sorted(r["id"] for r in sel["results"]), ["d004", "d009", "d014", "d019"])
        for r in sel["results"]:
            self.assertEqual(r["doc"]["group"], "g4")

    def test_longpoll_and_continuous(self):
        _, db = self.fresh_db("longpoll")
        db.bulk_docs(corpus(10))
        mark = db.changes(since="now")["last_seq"]
        # Nothing new: a longpoll answers after its timeout, empty.
        started = time.monotonic()
        empty = db.changes(feed="longpoll", since=mark, timeout=500)
        self.assertEqual(empty["results"], [])
        self.assertLess(time.monotonic() - started, 10)
        db.save({"_id": "late", "v": 1})
        res = db.changes(feed="longpoll", since=mark, timeout=10000)
        self.assertEqual([r["id"] for r in res["results"]], ["late"])

        with db.changes_stream(since="0", limit=5) as stream:
            lines = [line for _, line in zip(range(20), stream)]
        self.assertEqual(len([line for line in lines if "id" in line]), 5)
        self.assertIn("last_seq", lines[-1])


class PartitionTests(Couch):
    @classmethod
    def setUpClass(cls):
        cls.name = unique("part")
        cls.db = ADMIN_CLIENT.create(cls.name, partitioned=True)
        cls.addClassCleanup(ADMIN_CLIENT.delete, cls.name)
        cls.db.bulk_docs([
            {"_id": f"{p}:{i:02d}", "owner": p, "i": i} for p in ("alice", "bob") for i in range(20)
        ])

    def test_partition_info_docs_find_view(self):
        self.assertTrue(self.db.info()["props"]["partitioned"])
        alice = self.db.get_partition("alice")
        info = alice.info()
        self.assertEqual((info["partition"], info["doc_count"], info["doc_del_count"]), ("alice", 20, 0))
        self.assertEqual([r.id for r in alice.all_docs(limit=3).rows], ["alice:00", "alice:01", "alice:02"])
        # The partition's documents by their id within it.
        docid, ok, _ = alice.create({"_id": "extra", "i": 99})
        self.assertEqual((docid, ok), ("alice:extra", True))
        self.assertEqual(alice.get("extra")["i"], 99)
        found = alice.find({"i": {"$gte": 18}}, fields=["_id"])
        self.assertEqual(sorted(d["_id"] for d in found["docs"]), ["alice:18", "alice:19", "alice:extra"])
        self.db.put_design("v", views={"by_i": {"map": "function (doc) { emit(doc.i, 1); }", "reduce": "_count"}})
        self.assertEqual(self.db.get_partition("bob").view("v", "by_i").rows[0].value, 20)
        rows = self.db.get_partition("bob").view("v", "by_i", reduce=False, startkey=5, endkey=7).rows
        self.assertEqual([r.id for r in rows], ["bob:05", "bob:06", "bob:07"])
        self.assertCouchError(exceptions.BadRequestError, "illegal_docid", "Doc id must be of form partition:id",
                              self.db.save, {"_id": "nopartition"})


class NodeTests(Couch):
    def test_config_membership_tasks_stats(self):
        section = "interop_" + "".join(random.choice(string.ascii_lowercase) for _ in range(8))
        self.assertEqual(ADMIN_CLIENT.set_node_config(section, "key", "value"), "")
        self.assertEqual(ADMIN_CLIENT.node_config(section=section, key="key"), "value")
        self.assertEqual(ADMIN_CLIENT.node_config(section=section), {"key": "value"})
        self.assertEqual(ADMIN_CLIENT.set_node_config(section, "key", "other"), "value")
        self.assertEqual(ADMIN_CLIENT.delete_node_config(section, "key"), "other")
        self.assertCouchError(exceptions.NotFoundError, "not_found", "unknown_config_value",
                              ADMIN_CLIENT.node_config, section=section, key="key")
        members = ADMIN_CLIENT.membership()
        self.assertEqual(members["all_nodes"], members["cluster_nodes"])
        self.assertEqual(len(members["all_nodes"]), 1)
        self.assertIsInstance(ADMIN_CLIENT.active_tasks(), list)
        stats = ADMIN_CLIENT.node_stats()["couchdb"]
        self.assertEqual(stats["httpd_request_methods"]["GET"]["type"], "counter")
        self.assertGreater(stats["httpd_request_methods"]["GET"]["value"], 0)
        self.assertGreater(stats["httpd_status_codes"]["200"]["value"], 0)
        self.assertEqual(stats["httpd"]["requests"]["desc"], "number of HTTP requests")

    def test_stats_request_time(self):
        rt = ADMIN_CLIENT.node_stats()["couchdb"]["request_time"]
        self.assertEqual(rt["type"], "histogram")
        self.assertEqual(rt["desc"], "length of a request inside CouchDB without MochiWeb")
        self.assertEqual(
            sorted(rt["value"]),
            sorted(["n", "min", "max", "arithmetic_mean", "geometric_mean", "harmonic_mean", "median", "variance",
                    "standard_deviation", "skewness", "kurtosis", "percentile", "histogram"]),
        )
        self.assertEqual([p[0] for p in rt["value"]["percentile"]], [50, 75, 90, 95, 99, 999])
        # The suite's own requests of the last seconds are in it.
        self.assertGreater(rt["value"]["n"], 0)
        self.assertGreaterEqual(rt["value"]["max"], rt["value"]["median"])
        self.assertGreaterEqual(rt["value"]["median"], rt["value"]["min"])


class AsyncClientTests(Couch):
    def test_async_session(self):
        async def session():
            async with couchdb3.AsyncServer(BASE, timeout=TIMEOUT) as client:
                self.assertTrue(await client.up())
                name = unique("async")
                db = await client.create(name)
                try:
                    res = await db.bulk_docs(corpus(50))
                    self.assertEqual(len(res), 50)
                    found = await db.find({"group": "g1"}, fields=["_id"], limit=100)
                    self.assertEqual(sorted(d["_id"] for d in found["docs"]), [f"d{n:03d}" for n in range(1, 50, 5)])
                    docid, ok, r = await db.create({"async": True})
                    self.assertTrue(ok)
                    self.assertEqual((await db.get(docid))["async"], True)
                    self.assertTrue(await db.delete(docid, r))
                finally:
                    await client.delete(name)

        asyncio.run(asyncio.wait_for(session(), 120))


if __name__ == "__main__":
    unittest.main(verbosity=2)
