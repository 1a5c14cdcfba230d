// Log in with a `_session` cookie (POST /_session); CouchDB's login
// redirect (/_utils/session.html?return=…&reason=…) lands here too.
import { useState } from "preact/hooks";
import { session, type UserCtx } from "../api";
import { ErrorBox } from "../ui";

export function Login(props: {
  onLogin: (u: UserCtx, returnTo?: string) => void;
  reason?: string;
  returnTo?: string;
  user: UserCtx | null;
}) {
  const [name, setName] = useState("");
  const [password, setPassword] = useState("");
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      props.onLogin(await session.login(name, password), props.returnTo);
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  return (
    <form class="login card" onSubmit={submit}>
      <h1>Log in</h1>
      {props.reason && <p class="notice">{props.reason}</p>}
      {props.user?.name && <p>You are logged in as {props.user.name}.</p>}
      <label>
        Name
        <input id="login-name" autoFocus autocomplete="username" value={name}
          onInput={(e) => setName((e.target as HTMLInputElement).value)} />
      </label>
      <label>
        Password
        <input id="login-password" type="password" autocomplete="current-password" value={password}
          onInput={(e) => setPassword((e.target as HTMLInputElement).value)} />
      </label>
      <ErrorBox error={error} />
      <button id="login-submit" type="submit" class="primary" disabled={busy || !name}>
        Log in
      </button>
    </form>
  );
}
