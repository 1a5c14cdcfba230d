// Mango: a `_find` body edited as JSON, run with execution stats (results
// as a table), or explained (`_explain` shown as the plan: the index, the
// range read, the options); the database's indexes listed, created and
// deleted (db admins: indexes are design documents).
import { useEffect, useRef, useState } from "preact/hooks";
import { api, isDbAdmin, path, type UserCtx } from "../api";
import { href } from "../route";
import { JsonEditor, parseJson, type EditorHandle } from "../editor";
import { ConfirmButton, ErrorBox, short } from "../ui";

const DEFAULT_QUERY = '{\n  "selector": {},\n  "limit": 25\n}';
const DEFAULT_INDEX = '{\n  "index": { "fields": ["name"] },\n  "name": "by-name",\n  "type": "json"\n}';

export function Find({ db, user }: { db: string; user: UserCtx | null }) {
  const editor = useRef<EditorHandle | null>(null);
  const [result, setResult] = useState<any>(null);
  const [plan, setPlan] = useState<any>(null);
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const [sec, setSec] = useState<any>(null);
  useEffect(() => {
    api("GET", path(db, "_security")).then(setSec, () => setSec(null));
  }, [db]);

  const body = () => {
    const p = parseJson(editor.current!.get());
    if (!p.ok) {
      setError(new Error(`Not valid JSON: ${p.message}`));
      return null;
    }
    return p.value;
  };
  const run = async () => {
    const b = body();
    if (!b) return;
    setBusy(true);
    try {
      setResult(await api("POST", path(db, "_find"), { body: { ...b, execution_stats: true } }));
      setPlan(null);
      setError(null);
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };
  const explain = async () => {
    const b = body();
    if (!b) return;
    setPlan(null);
    try {
      setPlan(await api("POST", path(db, "_explain"), { body: b }));
      setResult(null);
      setError(null);
    } catch (e) {
      setError(e);
    }
  };
  return (
    <section>
      <h2>Mango query</h2>
      <JsonEditor id="find-editor" label="Mango query JSON" value={DEFAULT_QUERY} handle={editor} />
      <div class="toolbar">
        <button class="primary" id="run-find" onClick={run} disabled={busy}>Run query</button>
        <button id="run-explain" onClick={explain}>Explain</button>
      </div>
      <ErrorBox error={error} />
      {result && <Results db={db} r={result} />}
      {plan && <Plan p={plan} />}
      <Indexes db={db} admin={isDbAdmin(user, sec)} />
    </section>
  );
}

function Results({ db, r }: { db: string; r: any }) {
  const docs: any[] = r.docs ?? [];
  const cols: string[] = [];
  for (const d of docs.slice(0, 50)) {
    for (const k of Object.keys(d)) if (!cols.includes(k) && cols.length < 12) cols.push(k);
  }
  const st = r.execution_stats;
  return (
    <div class="card" id="find-results">
      <h3>{docs.length} document(s)</h3>
      {r.warning && <p class="notice">{r.warning}</p>}
      {st && (
        <p class="muted" id="find-stats">
          Examined {st.total_docs_examined} document(s), {st.total_keys_examined} key(s);
          {" "}{st.results_returned} returned in {Number(st.execution_time_ms).toFixed(1)} ms
        </p>
      )}
      {docs.length > 0 && (
        <div class="scroll">
          <table class="list">
            <thead><tr>{cols.map((c) => <th>{c}</th>)}</tr></thead>
            <tbody>
              {docs.map((d) => (
                <tr>
                  {cols.map((c) => (
                    <td class="mono">
                      {c === "_id" && typeof d._id === "string" ? <a href={href("db", db, "doc", d._id)}>{d._id}</a> : short(d[c])}
                    </td>
                  ))}
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {r.bookmark && <p class="muted mono">bookmark: {short(r.bookmark, 60)}</p>}
    </div>
  );
}

function Plan({ p }: { p: any }) {
  const ix = p.index ?? {};
  const m = p.mrargs ?? {};
  return (
    <div class="card" id="find-plan">
      <h3>Plan</h3>
      <dl class="plan">
        <dt>Index</dt>
        <dd id="plan-index">
          {ix.type === "special" ? "_all_docs (no index: every document is read)" : `${ix.ddoc ?? ""} ${ix.name ?? ""} (${ix.type})`}
        </dd>
        {ix.def?.fields && (<><dt>Indexed fields</dt><dd class="mono">{short(ix.def.fields, 200)}</dd></>)}
        <dt>Range read</dt>
        <dd class="mono">from {short(m.start_key, 100)} to {short(m.end_key, 100)}{m.direction ? ` (${m.direction})` : ""}</dd>
        <dt>Selector</dt>
        <dd class="mono">{short(p.selector, 300)}</dd>
        <dt>Options</dt>
        <dd>limit {p.limit}, skip {p.skip}{p.fields && p.fields !== "all_fields" ? `, fields ${short(p.fields)}` : ""}
          {m.include_docs !== undefined ? `, include_docs ${m.include_docs}` : ""}</dd>
        {p.covering !== undefined && (<><dt>Covering</dt><dd>{String(p.covering)}</dd></>)}
      </dl>
      <details><summary>Raw _explain</summary><pre>{JSON.stringify(p, null, 2)}</pre></details>
    </div>
  );
}

function Indexes({ db, admin }: { db: string; admin: boolean }) {
  const [list, setList] = useState<any[] | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [creating, setCreating] = useState(false);
  const [tick, setTick] = useState(0);
  const editor = useRef<EditorHandle | null>(null);
  useEffect(() => {
    api("GET", path(db, "_index")).then((r) => setList(r.indexes), setError);
  }, [db, tick]);
  const create = async () => {
    const p = parseJson(editor.current!.get());
    if (!p.ok) {
      setError(new Error(`Not valid JSON: ${p.message}`));
      return;
    }
    try {
      await api("POST", path(db, "_index"), { body: p.value });
      setCreating(false);
      setError(null);
      setTick((t) => t + 1);
    } catch (e) {
      setError(e);
    }
  };
  return (
    <div class="card" id="indexes">
      <h3>Indexes</h3>
      <ErrorBox error={error} />
      <table class="list">
        <thead><tr><th>Name</th><th>Design document</th><th>Type</th><th>Fields</th>{admin && <th></th>}</tr></thead>
        <tbody>
          {list?.map((ix) => (
            <tr data-index={ix.name}>
              <td>{ix.name}</td><td class="mono">{ix.ddoc ?? "–"}</td><td>{ix.type}</td>
              <td class="mono">{short(ix.def?.fields)}</td>
              {admin && (
                <td>
                  {ix.ddoc && (
                    <ConfirmButton label="Delete" danger question={`Delete index ${ix.name}?`}
                      onConfirm={async () => {
                        try {
                          await api("DELETE", path(db, "_index") + "/" + ix.ddoc.split("/").map(encodeURIComponent).join("/") + "/" + encodeURIComponent(ix.type) + "/" + encodeURIComponent(ix.name));
                          setTick((t) => t + 1);
                        } catch (e) {
                          setError(e);
                        }
                      }} />
                  )}
                </td>
              )}
            </tr>
          ))}
        </tbody>
      </table>
      {admin && !creating && <button id="new-index" onClick={() => setCreating(true)}>New index</button>}
      {admin && creating && (
        <>
          <JsonEditor id="index-editor" label="Index definition JSON" value={DEFAULT_INDEX} handle={editor} />
          <button class="primary" id="create-index" onClick={create}>Create index</button>{" "}
          <button onClick={() => setCreating(false)}>Cancel</button>
        </>
      )}
    </div>
  );
}
