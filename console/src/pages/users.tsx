// Users (`_users` documents: create, change password, roles, delete) and
// server admins (`_config/admins`: names only, add, remove). Server
// admins only; passwords are sent once and hashed by the server.
import { useEffect, useState } from "preact/hooks";
import { api, path, qs } from "../api";
import { ConfirmButton, ErrorBox } from "../ui";

const PREFIX = "org.couchdb.user:";

export function Users() {
  const [users, setUsers] = useState<any[] | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [notice, setNotice] = useState("");
  const [tick, setTick] = useState(0);
  useEffect(() => {
    api("GET", path("_users", "_all_docs") + qs({ include_docs: true, startkey: JSON.stringify(PREFIX), endkey: JSON.stringify(PREFIX + "\ufff0") }))
      .then((r) => setUsers(r.rows.map((x: any) => x.doc)), setError);
  }, [tick]);
  const done = (msg: string) => { setNotice(msg); setError(null); setTick((t) => t + 1); };
  return (
    <section>
      <h1>Users</h1>
      <ErrorBox error={error} />
      {notice && <p class="notice" role="status">{notice}</p>}
      <NewUser onDone={done} onError={setError} />
      <table class="list" id="users-table">
        <thead><tr><th>Name</th><th>Roles</th><th>Password</th><th></th></tr></thead>
        <tbody>
          {users?.length === 0 && <tr><td colSpan={4}>No users.</td></tr>}
          {users?.map((u) => <UserRow key={u._id} u={u} onDone={done} onError={setError} />)}
        </tbody>
      </table>
      <Admins />
    </section>
  );
}

function NewUser(props: { onDone: (m: string) => void; onError: (e: unknown) => void }) {
  const [name, setName] = useState("");
  const [password, setPassword] = useState("");
  const [roles, setRoles] = useState("");
  const submit = async (e: Event) => {
    e.preventDefault();
    try {
      const doc = { _id: PREFIX + name, name, password, type: "user", roles: splitRoles(roles) };
      await api("PUT", path("_users", doc._id), { body: doc });
      setName(""); setPassword(""); setRoles("");
      props.onDone(`User ${name} created.`);
    } catch (err) {
      props.onError(err);
    }
  };
  return (
    <form class="card" id="new-user" onSubmit={submit}>
      <h2>New user</h2>
      <label>Name <input id="new-user-name" value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} /></label>
      <label>Password <input id="new-user-password" type="password" autocomplete="new-password" value={password} onInput={(e) => setPassword((e.target as HTMLInputElement).value)} /></label>
      <label>Roles <input id="new-user-roles" placeholder="comma separated" value={roles} onInput={(e) => setRoles((e.target as HTMLInputElement).value)} /></label>
      <button class="primary" type="submit" id="new-user-submit" disabled={!name || !password}>Create user</button>
    </form>
  );
}

function splitRoles(s: string): string[] {
  return s.split(",").map((r) => r.trim()).filter((r) => r);
}

function UserRow({ u, onDone, onError }: { u: any; onDone: (m: string) => void; onError: (e: unknown) => void }) {
  const [roles, setRoles] = useState((u.roles ?? []).join(", "));
  const [password, setPassword] = useState("");
  const put = async (doc: any, msg: string) => {
    try {
      await api("PUT", path("_users", u._id), { body: doc });
      setPassword("");
      onDone(msg);
    } catch (e) {
      onError(e);
    }
  };
  return (
    <tr data-user={u.name}>
      <td>{u.name}</td>
      <td>
        <form class="inline" onSubmit={(e) => { e.preventDefault(); put({ ...u, roles: splitRoles(roles) }, `Roles of ${u.name} saved.`); }}>
          <input aria-label={`Roles of ${u.name}`} value={roles} onInput={(e) => setRoles((e.target as HTMLInputElement).value)} />{" "}
          <button type="submit">Save roles</button>
        </form>
      </td>
      <td>
        <form class="inline" onSubmit={(e) => { e.preventDefault(); put({ ...u, password }, `Password of ${u.name} changed.`); }}>
          <input type="password" autocomplete="new-password" aria-label={`New password of ${u.name}`} value={password} onInput={(e) => setPassword((e.target as HTMLInputElement).value)} />{" "}
          <button type="submit" disabled={!password}>Change password</button>
        </form>
      </td>
      <td>
        <ConfirmButton label="Delete" danger question={`Delete user ${u.name}?`} onConfirm={async () => {
          try {
            await api("DELETE", path("_users", u._id) + qs({ rev: u._rev }));
            onDone(`User ${u.name} deleted.`);
          } catch (e) {
            onError(e);
          }
        }} />
      </td>
    </tr>
  );
}

function Admins() {
  const [names, setNames] = useState<string[] | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [name, setName] = useState("");
  const [password, setPassword] = useState("");
  const [tick, setTick] = useState(0);
  useEffect(() => {
    api("GET", "/_node/_local/_config/admins").then((a) => setNames(Object.keys(a)), setError);
  }, [tick]);
  const add = async (e: Event) => {
    e.preventDefault();
    try {
      await api("PUT", "/_node/_local/_config/admins/" + encodeURIComponent(name), { body: password });
      setName(""); setPassword(""); setError(null); setTick((t) => t + 1);
    } catch (err) {
      setError(err);
    }
  };
  return (
    <div class="card" id="server-admins">
      <h2>Server admins</h2>
      <ErrorBox error={error} />
      <ul>
        {names?.map((n) => (
          <li data-admin={n}>
            {n}{" "}
            <ConfirmButton label="Remove" danger question={`Remove server admin ${n}?`} onConfirm={async () => {
              try {
                await api("DELETE", "/_node/_local/_config/admins/" + encodeURIComponent(n));
                setTick((t) => t + 1);
              } catch (err) {
                setError(err);
              }
            }} />
          </li>
        ))}
      </ul>
      <form class="inline" onSubmit={add}>
        <label>Name <input id="new-admin-name" value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} /></label>
        <label>Password <input id="new-admin-password" type="password" autocomplete="new-password" value={password} onInput={(e) => setPassword((e.target as HTMLInputElement).value)} /></label>
        <button type="submit" disabled={!name || !password}>Add server admin</button>
      </form>
    </div>
  );
}
