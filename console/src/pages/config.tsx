// The node's configuration (`/_node/_local/_config`): every section and
// key, values edited in place (PUT a JSON string), keys added and deleted.
// The admins section is shown by name only (its values are hashes; the
// Users page manages it).
import { useEffect, useState } from "preact/hooks";
import { api } from "../api";
import { ConfirmButton, ErrorBox } from "../ui";

const BASE = "/_node/_local/_config";
const keyUrl = (s: string, k: string) => `${BASE}/${encodeURIComponent(s)}/${encodeURIComponent(k)}`;

export function Config() {
  const [cfg, setCfg] = useState<Record<string, Record<string, string>> | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [notice, setNotice] = useState("");
  const [tick, setTick] = useState(0);
  const [filter, setFilter] = useState("");
  useEffect(() => {
    api("GET", BASE).then(setCfg, setError);
  }, [tick]);
  const done = (m: string) => { setNotice(m); setError(null); setTick((t) => t + 1); };
  const f = filter.toLowerCase();
  return (
    <section>
      <h1>Configuration</h1>
      <ErrorBox error={error} />
      {notice && <p class="notice" role="status">{notice}</p>}
      <AddKey onDone={done} onError={setError} />
      <label>Filter <input id="config-filter" value={filter} onInput={(e) => setFilter((e.target as HTMLInputElement).value)} /></label>
      <table class="list" id="config-table">
        <thead><tr><th>Section</th><th>Key</th><th>Value</th><th></th></tr></thead>
        <tbody>
          {cfg && Object.entries(cfg).flatMap(([s, keys]) =>
            Object.entries(keys)
              .filter(([k]) => !f || s.toLowerCase().includes(f) || k.toLowerCase().includes(f))
              .map(([k, v]) => <Row key={`${s}/${k}`} s={s} k={k} v={v} onDone={done} onError={setError} />),
          )}
        </tbody>
      </table>
    </section>
  );
}

function Row(props: { s: string; k: string; v: string; onDone: (m: string) => void; onError: (e: unknown) => void }) {
  const { s, k } = props;
  const [v, setV] = useState(props.v);
  const secret = s === "admins";
  const save = async (e: Event) => {
    e.preventDefault();
    try {
      await api("PUT", keyUrl(s, k), { body: v });
      props.onDone(`${s}/${k} set.`);
    } catch (err) {
      props.onError(err);
    }
  };
  return (
    <tr data-key={`${s}/${k}`}>
      <td>{s}</td>
      <td>{k}</td>
      <td>
        {secret ? (
          <span class="muted">(password hash: see Users)</span>
        ) : (
          <form class="inline" onSubmit={save}>
            <input aria-label={`Value of ${s}/${k}`} value={v} onInput={(e) => setV((e.target as HTMLInputElement).value)} />{" "}
            <button type="submit" disabled={v === props.v}>Save</button>
          </form>
        )}
      </td>
      <td>
        {!secret && (
          <ConfirmButton label="Delete" danger question={`Delete ${s}/${k}?`} onConfirm={async () => {
            try {
              await api("DELETE", keyUrl(s, k));
              props.onDone(`${s}/${k} deleted.`);
            } catch (err) {
              props.onError(err);
            }
          }} />
        )}
      </td>
    </tr>
  );
}

function AddKey(props: { onDone: (m: string) => void; onError: (e: unknown) => void }) {
  const [s, setS] = useState("");
  const [k, setK] = useState("");
  const [v, setV] = useState("");
  const submit = async (e: Event) => {
    e.preventDefault();
    try {
      await api("PUT", keyUrl(s, k), { body: v });
      setS(""); setK(""); setV("");
      props.onDone(`${s}/${k} set.`);
    } catch (err) {
      props.onError(err);
    }
  };
  return (
    <form class="card" id="config-add" onSubmit={submit}>
      <h2>Set a value</h2>
      <label>Section <input id="config-section" value={s} onInput={(e) => setS((e.target as HTMLInputElement).value)} /></label>
      <label>Key <input id="config-key" value={k} onInput={(e) => setK((e.target as HTMLInputElement).value)} /></label>
      <label>Value <input id="config-value" value={v} onInput={(e) => setV((e.target as HTMLInputElement).value)} /></label>
      <button class="primary" type="submit" id="config-set" disabled={!s || !k}>Set</button>
    </form>
  );
}
