// Replication: start a job (one-shot or continuous, through _replicate,
// or as a persistent _replicator document), local names or remote URLs
// with credentials; the running jobs (_scheduler/jobs) and the
// _replicator documents' states (_scheduler/docs), polled every 2 s.
import { useEffect, useState } from "preact/hooks";
import { api, path, qs } from "../api";
import { ConfirmButton, ErrorBox, short } from "../ui";

const POLL_MS = 2000;

interface End {
  where: string; // a local database name or a URL
  user: string;
  password: string;
}

/** A local name stays a name (the server reaches it with our
 * credentials); a URL takes the credentials as `auth.basic`. */
function endpoint(e: End): unknown {
  if (!/^https?:\/\//.test(e.where)) return e.where;
  if (!e.user) return e.where;
  return { url: e.where, auth: { basic: { username: e.user, password: e.password } } };
}

export function Replication() {
  const [src, setSrc] = useState<End>({ where: "", user: "", password: "" });
  const [dst, setDst] = useState<End>({ where: "", user: "", password: "" });
  const [continuous, setContinuous] = useState(false);
  const [createTarget, setCreateTarget] = useState(false);
  const [persistent, setPersistent] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const [result, setResult] = useState<any>(null);
  const [busy, setBusy] = useState(false);
  const [tick, setTick] = useState(0);

  const start = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setResult(null);
    const body: any = { source: endpoint(src), target: endpoint(dst) };
    if (continuous) body.continuous = true;
    if (createTarget) body.create_target = true;
    try {
      if (persistent) {
        // _replicator documents name URLs (CouchDB 3): a local name is this server.
        const here = (x: unknown) => (typeof x === "string" ? `${location.origin}/${encodeURIComponent(x)}` : x);
        const r = await api("POST", path("_replicator"), { body: { ...body, source: here(body.source), target: here(body.target) } });
        setResult({ ok: true, _replicator: r.id });
      } else {
        setResult(await api("POST", "/_replicate", { body }));
      }
      setError(null);
      setTick((t) => t + 1);
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  const endFields = (label: string, v: End, set: (e: End) => void, id: string) => (
    <fieldset>
      <legend>{label}</legend>
      <label>Database name or URL <input id={`${id}-where`} value={v.where} onInput={(e) => set({ ...v, where: (e.target as HTMLInputElement).value })} /></label>
      {/^https?:\/\//.test(v.where) && (
        <>
          <label>User <input value={v.user} autocomplete="off" onInput={(e) => set({ ...v, user: (e.target as HTMLInputElement).value })} /></label>
          <label>Password <input type="password" autocomplete="off" value={v.password} onInput={(e) => set({ ...v, password: (e.target as HTMLInputElement).value })} /></label>
        </>
      )}
    </fieldset>
  );
  return (
    <section>
      <h1>Replication</h1>
      <form class="card" id="replicate-form" onSubmit={start}>
        <h2>New replication</h2>
        {endFields("Source", src, setSrc, "rep-source")}
        {endFields("Target", dst, setDst, "rep-target")}
        <label class="check"><input type="checkbox" id="rep-continuous" checked={continuous} onChange={(e) => setContinuous((e.target as HTMLInputElement).checked)} /> Continuous</label>
        <label class="check"><input type="checkbox" id="rep-create-target" checked={createTarget} onChange={(e) => setCreateTarget((e.target as HTMLInputElement).checked)} /> Create the target</label>
        <label class="check"><input type="checkbox" id="rep-persistent" checked={persistent} onChange={(e) => setPersistent((e.target as HTMLInputElement).checked)} /> Keep it as a _replicator document</label>
        <ErrorBox error={error} />
        <button class="primary" type="submit" id="rep-start" disabled={busy || !src.where || !dst.where}>
          {busy ? "Replicating…" : "Start"}
        </button>
        {result && <Result r={result} />}
      </form>
      <Jobs tick={tick} />
      <Docs tick={tick} />
    </section>
  );
}

function Result({ r }: { r: any }) {
  if (r._replicator) return <p class="notice" id="rep-result">Saved as _replicator document {r._replicator}.</p>;
  if (r._local_id) return <p class="notice" id="rep-result">Continuous replication {r._local_id} started.</p>;
  const h = r.history?.[0];
  return (
    <p class="notice" id="rep-result">
      Replication complete{h ? `: ${h.docs_written} document(s) written, ${h.docs_read} read, ${h.doc_write_failures} failure(s)` : ""}.
    </p>
  );
}

function usePoll<T>(url: string, tick: number): [T | null, unknown, () => void] {
  const [v, setV] = useState<T | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [n, setN] = useState(0);
  useEffect(() => {
    let live = true;
    const load = () => api("GET", url).then((x) => live && (setV(x), setError(null)), (e) => live && setError(e));
    load();
    const t = setInterval(load, POLL_MS);
    return () => { live = false; clearInterval(t); };
  }, [url, tick, n]);
  return [v, error, () => setN((x) => x + 1)];
}

function Jobs({ tick }: { tick: number }) {
  const [r, error, reload] = usePoll<any>("/_scheduler/jobs", tick);
  const [cancelError, setCancelError] = useState<unknown>(null);
  return (
    <div class="card" id="rep-jobs">
      <h2>Running jobs</h2>
      <ErrorBox error={error || cancelError} />
      <table class="list">
        <thead><tr><th>Source</th><th>Target</th><th>State</th><th>Progress</th><th>Started</th><th></th></tr></thead>
        <tbody>
          {r?.jobs.length === 0 && <tr><td colSpan={6}>No job is running.</td></tr>}
          {r?.jobs.map((j: any) => {
            const last = j.history?.[0];
            const info = j.info ?? {};
            return (
              <tr data-job={j.id}>
                <td class="mono">{short(j.source, 50)}</td>
                <td class="mono">{short(j.target, 50)}</td>
                <td>{last?.type ?? j.state ?? ""}</td>
                <td>{info.docs_written !== undefined ? `${info.docs_written} written, ${info.docs_read} read, ${info.changes_pending ?? 0} pending` : ""}</td>
                <td>{j.start_time ?? ""}</td>
                <td>
                  {!j.doc_id && (
                    <ConfirmButton label="Cancel" danger question="Cancel this replication?" onConfirm={async () => {
                      try {
                        await api("POST", "/_replicate", { body: { replication_id: j.id, cancel: true } });
                        setCancelError(null);
                        reload();
                      } catch (e) {
                        setCancelError(e);
                      }
                    }} />
                  )}
                </td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </div>
  );
}

function Docs({ tick }: { tick: number }) {
  const [r, error, reload] = usePoll<any>("/_scheduler/docs", tick);
  const [delError, setDelError] = useState<unknown>(null);
  return (
    <div class="card" id="rep-docs">
      <h2>_replicator documents</h2>
      <ErrorBox error={error || delError} />
      <table class="list">
        <thead><tr><th>Document</th><th>Source</th><th>Target</th><th>State</th><th>Info</th><th></th></tr></thead>
        <tbody>
          {r?.docs.length === 0 && <tr><td colSpan={6}>None.</td></tr>}
          {r?.docs.map((d: any) => (
            <tr data-doc={d.doc_id}>
              <td class="mono">{d.doc_id}</td>
              <td class="mono">{short(d.source, 50)}</td>
              <td class="mono">{short(d.target, 50)}</td>
              <td>{d.state}</td>
              <td class="mono">{short(d.info, 80)}</td>
              <td>
                <ConfirmButton label="Delete" danger question="Delete this _replicator document (stops its job)?" onConfirm={async () => {
                  try {
                    const doc = await api("GET", path(d.database ?? "_replicator", d.doc_id));
                    await api("DELETE", path(d.database ?? "_replicator", d.doc_id) + qs({ rev: doc._rev }));
                    setDelError(null);
                    reload();
                  } catch (e) {
                    setDelError(e);
                  }
                }} />
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
