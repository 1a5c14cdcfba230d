// The console's shell: who is logged in (`/_session`), the route from the
// hash, the header and a database's tabs. Each page is its own module.
import "./style.css";
import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import { ApiError, session, type UserCtx, isServerAdmin, clusterMember } from "./api";
import { parse, href, type Route } from "./route";
import { ErrorBox } from "./ui";
import { Login } from "./pages/login";
import { Databases } from "./pages/databases";
import { Docs } from "./pages/docs";
import { DocPage } from "./pages/doc";
import { Find } from "./pages/find";
import { Views } from "./pages/views";
import { Changes } from "./pages/changes";
import { Security } from "./pages/security";
import { Replication } from "./pages/replication";
import { Users } from "./pages/users";
import { Config } from "./pages/config";
import { Tasks } from "./pages/tasks";
import { Stats } from "./pages/stats";
import { Account } from "./pages/account";
import { Cluster } from "./pages/cluster";

/** The server-wide pages, for server admins (CouchDB lets no one else
 * read them). The Cluster page joins them on a cluster member (see
 * `clusterMember`). */
const SERVER_PAGES: [string, string][] = [
  ["replication", "Replication"],
  ["users", "Users"],
  ["config", "Configuration"],
  ["tasks", "Active tasks"],
  ["stats", "Stats"],
];

/** CouchDB's login redirect: /_utils/session.html?return=PATH&reason=… */
function loginRedirect(): Route | null {
  if (!location.pathname.endsWith("/session.html")) return null;
  const q = new URLSearchParams(location.search);
  return { page: "login", returnTo: q.get("return") ?? undefined, reason: q.get("reason") ?? undefined };
}

function App() {
  const [route, setRoute] = useState<Route>(() => loginRedirect() ?? parse(location.hash));
  const [user, setUser] = useState<UserCtx | null>(null);
  const [loaded, setLoaded] = useState(false);
  const [error, setError] = useState<unknown>(null);

  useEffect(() => {
    const on = () => setRoute(parse(location.hash));
    addEventListener("hashchange", on);
    return () => removeEventListener("hashchange", on);
  }, []);
  // Whether the Cluster page is linked: a server admin on a member.
  const [clustered, setClustered] = useState(false);
  useEffect(() => {
    if (isServerAdmin(user)) clusterMember().then(setClustered);
    else setClustered(false);
  }, [user]);
  useEffect(() => {
    session
      .get()
      .then((u) => setUser(u))
      // Under require_valid_user even /_session refuses the anonymous: log in.
      .catch((e) => (e instanceof ApiError && e.status === 401 ? setUser({ name: null, roles: [] }) : setError(e)))
      .finally(() => setLoaded(true));
  }, []);

  if (!loaded) return <p class="loading">Loading…</p>;
  const loggedIn = !!user?.name;
  const onLogin = (u: UserCtx, returnTo?: string) => {
    setUser(u);
    // Only a path of this server (never another origin).
    if (returnTo && returnTo.startsWith("/") && !returnTo.startsWith("//")) {
      location.href = returnTo;
    } else {
      if (location.pathname !== "/_utils/") history.replaceState(null, "", "/_utils/");
      location.hash = href();
      setRoute({ page: "databases" });
    }
  };
  const logout = async () => {
    try {
      await session.logout();
    } catch (e) {
      setError(e);
    }
    setUser({ name: null, roles: [] });
    location.hash = href("login");
  };

  let body;
  if (route.page === "login" || (!loggedIn && route.page === "databases")) {
    const r = route.page === "login" ? route : { page: "login" as const };
    body = <Login onLogin={onLogin} reason={r.reason} returnTo={r.returnTo} user={user} />;
  } else {
    body = route.page === "account"
      ? <Account user={user} onLogin={setUser} />
      : <Page route={route} user={user} />;
  }
  return (
    <>
      <header>
        <a class="brand" href={href()}>
          Settee
        </a>
        <nav aria-label="Main">
          <a href={href()}>Databases</a>
          {isServerAdmin(user) && SERVER_PAGES.map(([p, label]) => <a href={href(p)}>{label}</a>)}
          {clustered && <a id="nav-cluster" href={href("cluster")}>Cluster</a>}
        </nav>
        <span class="who">
          {loggedIn ? (
            <>
              <a id="whoami" href={href("account")} title="Your account">
                {user!.name}
                {isServerAdmin(user) ? " (server admin)" : ""}
              </a>{" "}
              <button id="logout" onClick={logout}>
                Log out
              </button>
            </>
          ) : (
            <a href={href("login")}>Log in</a>
          )}
        </span>
      </header>
      <main>
        <ErrorBox error={error} />
        {body}
      </main>
    </>
  );
}

function Page({ route, user }: { route: Route; user: UserCtx | null }) {
  switch (route.page) {
    case "databases":
      return <Databases user={user} />;
    case "replication":
      return <Replication />;
    case "users":
      return <Users />;
    case "config":
      return <Config />;
    case "tasks":
      return <Tasks />;
    case "stats":
      return <Stats />;
    case "cluster":
      return <Cluster user={user} />;
    case "notfound":
    case "login":
    case "account":
      return <p>No such page. <a href={href()}>Databases</a></p>;
  }
  const db = route.db;
  const tabs: [string, string, string][] = [
    ["docs", "Documents", href("db", db)],
    ["find", "Mango query", href("db", db, "find")],
    ["views", "Views", href("db", db, "views")],
    ["changes", "Changes", href("db", db, "changes")],
    ["security", "Security", href("db", db, "security")],
  ];
  let page;
  switch (route.page) {
    case "docs":
      page = <Docs db={db} user={user} />;
      break;
    case "doc":
      page = <DocPage key={route.id} db={db} id={route.id} user={user} />;
      break;
    case "newdoc":
      page = <DocPage key="" db={db} id={null} user={user} />;
      break;
    case "find":
      page = <Find db={db} user={user} />;
      break;
    case "views":
      page = <Views db={db} />;
      break;
    case "changes":
      page = <Changes key={db} db={db} />;
      break;
    case "security":
      page = <Security key={db} db={db} user={user} />;
      break;
  }
  const current = route.page === "doc" || route.page === "newdoc" ? "docs" : route.page;
  return (
    <>
      <h1 class="dbname">
        <a href={href("db", db)}>{db}</a>
      </h1>
      <nav class="tabs" aria-label="Database">
        {tabs.map(([k, label, h]) => (
          <a href={h} class={k === current ? "current" : ""} aria-current={k === current ? "page" : undefined}>
            {label}
          </a>
        ))}
      </nav>
      {page}
    </>
  );
}

render(<App />, document.getElementById("app")!);
