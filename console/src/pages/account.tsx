// Your own account: your roles, and your password changed in your `_users`
// document where the users database lets its users keep their own (an
// admin opened it; CouchDB 3's default is admins only, which the page
// says). The session cookie is signed with the password's salt, so the
// page logs in again afterwards.
import { useEffect, useState } from "preact/hooks";
import { api, path, session, ApiError, type UserCtx } from "../api";
import { ErrorBox } from "../ui";

export function Account({ user, onLogin }: { user: UserCtx | null; onLogin: (u: UserCtx) => void }) {
  const name = user?.name ?? "";
  const [doc, setDoc] = useState<any>(null);
  const [missing, setMissing] = useState(false);
  const [closed, setClosed] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const [notice, setNotice] = useState("");
  const [pw, setPw] = useState("");
  const [pw2, setPw2] = useState("");
  const id = "org.couchdb.user:" + name;
  useEffect(() => {
    if (!name) return;
    api("GET", path("_users", id)).then(setDoc, (e) => {
      if (e instanceof ApiError && e.status === 404) setMissing(true);
      // CouchDB 3's users database is admin-only until an admin opens it.
      else if (e instanceof ApiError && (e.status === 401 || e.status === 403)) setClosed(true);
      else setError(e);
    });
  }, [name]);
  if (!name) return <p>Log in to see your account.</p>;
  const change = async (e: Event) => {
    e.preventDefault();
    if (pw !== pw2) {
      setError(new Error("The two passwords differ."));
      return;
    }
    try {
      const r = await api("PUT", path("_users", id), { body: { ...doc, password: pw } });
      setDoc({ ...doc, _rev: r.rev });
      onLogin(await session.login(name, pw));
      setPw(""); setPw2(""); setError(null);
      setNotice("Password changed.");
    } catch (err) {
      setError(err);
    }
  };
  return (
    <section>
      <h1>Your account</h1>
      <p>Name: <b>{name}</b>; roles: {user!.roles.length ? user!.roles.join(", ") : "none"}.</p>
      <ErrorBox error={error} />
      {notice && <p class="notice" role="status">{notice}</p>}
      {closed && (
        <p class="notice" id="account-closed">
          The users database is open to admins only on this server, so a server admin changes your password
          (CouchDB 3's default; an admin may open it to its users).
        </p>
      )}
      {missing ? (
        <p class="muted">You are a server admin from the configuration, not a user of <code>_users</code>: your password is set in the Users page's server admins.</p>
      ) : doc && (
        <form class="card" id="change-password" onSubmit={change}>
          <h2>Change your password</h2>
          <label>New password <input id="my-password" type="password" autocomplete="new-password" value={pw} onInput={(e) => setPw((e.target as HTMLInputElement).value)} /></label>
          <label>Again <input id="my-password2" type="password" autocomplete="new-password" value={pw2} onInput={(e) => setPw2((e.target as HTMLInputElement).value)} /></label>
          <button class="primary" type="submit" id="my-password-submit" disabled={!pw}>Change password</button>
        </form>
      )}
    </section>
  );
}
