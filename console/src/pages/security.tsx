// A database's security object: admins and members, by name and by role.
// Editable by the database's admins (PUT /db/_security); read-only for
// the others who may read it.
import { useEffect, useState } from "preact/hooks";
import { api, isDbAdmin, path, type UserCtx } from "../api";
import { ErrorBox } from "../ui";

type Group = "admins" | "members";
type Kind = "names" | "roles";

function clean(sec: any) {
  const out: any = {};
  for (const g of ["admins", "members"] as Group[]) {
    out[g] = { names: [...(sec?.[g]?.names ?? [])], roles: [...(sec?.[g]?.roles ?? [])] };
  }
  return out;
}

export function Security({ db, user }: { db: string; user: UserCtx | null }) {
  const [sec, setSec] = useState<any>(null);
  const [raw, setRaw] = useState<any>(null);
  const [error, setError] = useState<unknown>(null);
  const [notice, setNotice] = useState("");
  useEffect(() => {
    api("GET", path(db, "_security")).then((s) => { setRaw(s); setSec(clean(s)); }, setError);
  }, [db]);
  if (!sec) return <section><h2>Security</h2><ErrorBox error={error} />{!error && <p>Loading…</p>}</section>;
  const admin = isDbAdmin(user, raw);
  const save = async () => {
    try {
      // Members other than admins and members (if any) are kept as they were.
      await api("PUT", path(db, "_security"), { body: { ...raw, ...sec } });
      setRaw({ ...raw, ...sec });
      setNotice("Security saved.");
      setError(null);
    } catch (e) {
      setError(e);
    }
  };
  const list = (g: Group, k: Kind) => (
    <Chips id={`sec-${g}-${k}`} label={`${g === "admins" ? "Admin" : "Member"} ${k}`} items={sec[g][k]} editable={admin}
      onChange={(items) => setSec({ ...sec, [g]: { ...sec[g], [k]: items } })} />
  );
  const open = sec.members.names.length === 0 && sec.members.roles.length === 0;
  return (
    <section>
      <h2>Security</h2>
      <ErrorBox error={error} />
      {notice && <p class="notice" role="status">{notice}</p>}
      <div class="card">
        <h3>Admins</h3>
        <p class="muted">May change design documents and this security object. Server admins always are.</p>
        {list("admins", "names")}
        {list("admins", "roles")}
      </div>
      <div class="card">
        <h3>Members</h3>
        <p class="muted">
          May read and write documents.{" "}
          {open ? "No member is named: the server's default security decides who may." : ""}
        </p>
        {list("members", "names")}
        {list("members", "roles")}
      </div>
      {admin && <button class="primary" id="save-security" onClick={save}>Save security</button>}
    </section>
  );
}

/** A list of strings with add and remove. */
export function Chips(props: {
  id: string;
  label: string;
  items: string[];
  editable: boolean;
  onChange: (items: string[]) => void;
}) {
  const [v, setV] = useState("");
  const add = (e: Event) => {
    e.preventDefault();
    const x = v.trim();
    if (x && !props.items.includes(x)) props.onChange([...props.items, x]);
    setV("");
  };
  return (
    <div class="chips" id={props.id}>
      <span class="chips-label">{props.label}:</span>
      {props.items.length === 0 && <span class="muted">none</span>}
      {props.items.map((x) => (
        <span class="chip">
          {x}
          {props.editable && (
            <button aria-label={`Remove ${x}`} onClick={() => props.onChange(props.items.filter((y) => y !== x))}>×</button>
          )}
        </span>
      ))}
      {props.editable && (
        <form class="inline" onSubmit={add}>
          <input aria-label={`Add to ${props.label}`} value={v} onInput={(e) => setV((e.target as HTMLInputElement).value)} />
          <button type="submit">Add</button>
        </form>
      )}
    </div>
  );
}
