// The databases: `_all_dbs` paged by name (a prefix filter is its
// startkey/endkey) with each page's `_dbs_info`; create (q, n,
// partitioned), delete (typing the name), compact, view cleanup. Users
// who may not list databases (admin_only_all_dbs) open one by name.
import { useEffect, useState } from "preact/hooks";
import { api, path, qs, bytes, isServerAdmin, ApiError, type UserCtx } from "../api";
import { href, go } from "../route";
import { ErrorBox, Pager } from "../ui";

interface Info {
  key: string;
  info?: any;
  error?: string;
}

export function Databases({ user }: { user: UserCtx | null }) {
  const admin = isServerAdmin(user);
  const [filter, setFilter] = useState("");
  const [perPage, setPerPage] = useState(20);
  const [starts, setStarts] = useState<string[]>([""]); // first name of each page seen
  const [rows, setRows] = useState<Info[] | null>(null);
  const [hasNext, setHasNext] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const [forbidden, setForbidden] = useState(false);
  const [notice, setNotice] = useState("");
  const [tick, setTick] = useState(0);
  const [nextStart, setNextStart] = useState("");
  const page = starts.length - 1;

  useEffect(() => {
    let live = true;
    const start = starts[page] || filter;
    const opts: Record<string, unknown> = { limit: perPage + 1 };
    // Keys are JSON (strings quoted), as CouchDB reads them.
    if (start) opts.startkey = JSON.stringify(start);
    if (filter) opts.endkey = JSON.stringify(filter + "\ufff0");
    (async () => {
      try {
        const names: string[] = await api("GET", "/_all_dbs" + qs(opts));
        const shown = names.slice(0, perPage);
        const infos: Info[] = shown.length
          ? await api("POST", "/_dbs_info", { body: { keys: shown } })
          : [];
        if (!live) return;
        setRows(infos);
        setHasNext(names.length > perPage);
        if (names.length > perPage) setNextStart(names[perPage]);
        setError(null);
      } catch (e) {
        if (!live) return;
        if (e instanceof ApiError && (e.status === 401 || e.status === 403)) setForbidden(true);
        else setError(e);
        setRows([]);
      }
    })();
    return () => {
      live = false;
    };
  }, [starts, filter, perPage, tick]);
  const reset = () => setStarts([""]);
  const refresh = () => setTick((t) => t + 1);

  return (
    <section>
      <h1>Databases</h1>
      <ErrorBox error={error} />
      {notice && <p class="notice" role="status">{notice}</p>}
      <OpenByName />
      {admin && <CreateDb onCreated={(name) => go("db", name)} />}
      {forbidden ? (
        <p>Only server admins may list the databases. Open one by its name above.</p>
      ) : (
        <>
          <div class="toolbar">
            <label>
              Filter by prefix{" "}
              <input id="db-filter" value={filter}
                onInput={(e) => { setFilter((e.target as HTMLInputElement).value); reset(); }} />
            </label>
          </div>
          <table class="list" id="db-table">
            <thead>
              <tr>
                <th>Name</th><th>Documents</th><th>Deleted</th><th>Size (active / file)</th>
                <th>Partitioned</th>{admin && <th>Actions</th>}
              </tr>
            </thead>
            <tbody>
              {rows === null && <tr><td colSpan={6}>Loading…</td></tr>}
              {rows?.length === 0 && <tr><td colSpan={6}>No databases{filter ? " with this prefix" : ""}.</td></tr>}
              {rows?.map((r) => (
                <DbRow key={r.key} r={r} admin={admin} onChanged={refresh} onNotice={setNotice} onError={setError} />
              ))}
            </tbody>
          </table>
          <Pager page={page} hasNext={hasNext} perPage={perPage}
            onPerPage={(n) => { setPerPage(n); reset(); }}
            onPrev={() => setStarts(starts.slice(0, -1))}
            onNext={() => setStarts([...starts, nextStart])} />
        </>
      )}
    </section>
  );
}

function DbRow(props: {
  r: Info;
  admin: boolean;
  onChanged: () => void;
  onNotice: (s: string) => void;
  onError: (e: unknown) => void;
}) {
  const { r, admin } = props;
  const [deleting, setDeleting] = useState(false);
  const [typed, setTyped] = useState("");
  const i = r.info;
  const act = async (what: string, f: () => Promise<unknown>) => {
    try {
      await f();
      props.onNotice(what);
      props.onChanged();
    } catch (e) {
      props.onError(e);
    }
  };
  return (
    <tr data-db={r.key}>
      <td><a href={href("db", r.key)}>{r.key}</a></td>
      {i ? (
        <>
          <td class="num">{i.doc_count}</td>
          <td class="num">{i.doc_del_count}</td>
          <td class="num">{bytes(i.sizes?.active)} / {bytes(i.sizes?.file)}</td>
          <td>{i.props?.partitioned ? "yes" : "no"}</td>
        </>
      ) : (
        <td colSpan={4}>{r.error ?? "not available"}</td>
      )}
      {admin && (
        <td class="actions">
          {deleting ? (
            <span class="confirm">
              Type the name to delete it:{" "}
              <input aria-label="Database name to confirm" value={typed} autoFocus
                onInput={(e) => setTyped((e.target as HTMLInputElement).value)} />{" "}
              <button class="danger" disabled={typed !== r.key}
                onClick={() => act(`Deleted ${r.key}.`, () => api("DELETE", path(r.key)))}>
                Delete
              </button>{" "}
              <button onClick={() => { setDeleting(false); setTyped(""); }}>Cancel</button>
            </span>
          ) : (
            <>
              <button onClick={() => act(`Compaction of ${r.key} started.`, () => api("POST", path(r.key, "_compact"), { body: {} }))}>
                Compact
              </button>{" "}
              <button onClick={() => act(`View cleanup of ${r.key} started.`, () => api("POST", path(r.key, "_view_cleanup"), { body: {} }))}>
                View cleanup
              </button>{" "}
              <button class="danger" onClick={() => setDeleting(true)}>Delete…</button>
            </>
          )}
        </td>
      )}
    </tr>
  );
}

function CreateDb({ onCreated }: { onCreated: (name: string) => void }) {
  const [open, setOpen] = useState(false);
  const [name, setName] = useState("");
  const [q, setQ] = useState("");
  const [n, setN] = useState("");
  const [partitioned, setPartitioned] = useState(false);
  const [error, setError] = useState<unknown>(null);
  if (!open) return <button id="create-db" class="primary" onClick={() => setOpen(true)}>Create database</button>;
  const submit = async (e: Event) => {
    e.preventDefault();
    try {
      await api("PUT", path(name) + qs({ q, n, partitioned: partitioned ? "true" : undefined }));
      onCreated(name);
    } catch (err) {
      setError(err);
    }
  };
  return (
    <form class="card" onSubmit={submit} id="create-db-form">
      <h2>Create a database</h2>
      <label>Name <input id="new-db-name" autoFocus value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} /></label>
      <label>Shards (q) <input type="number" min="1" placeholder="default" value={q} onInput={(e) => setQ((e.target as HTMLInputElement).value)} /></label>
      <label>Copies (n) <input type="number" min="1" placeholder="default" value={n} onInput={(e) => setN((e.target as HTMLInputElement).value)} /></label>
      <label class="check"><input type="checkbox" checked={partitioned} onChange={(e) => setPartitioned((e.target as HTMLInputElement).checked)} /> Partitioned</label>
      <ErrorBox error={error} />
      <button type="submit" class="primary" id="new-db-submit" disabled={!name}>Create</button>{" "}
      <button type="button" onClick={() => setOpen(false)}>Cancel</button>
    </form>
  );
}

function OpenByName() {
  const [name, setName] = useState("");
  return (
    <form class="inline" onSubmit={(e) => { e.preventDefault(); if (name) go("db", name); }}>
      <label>Open database <input id="open-db" value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} /></label>{" "}
      <button type="submit">Open</button>
    </form>
  );
}
