// The cluster, polled every 1.5 s (one round at a time, so a slow server
// is never asked twice at once): the nodes with their health (the lease in
// `/_membership`, the node's state in `/_node/_local/_nodes/{name}`) and
// copies; the shard map of every clustered database drawn as a grid
// (`/{db}/_shards`, under-replicated cells marked, copies being filled
// shown); the rebalance (`/_cluster/rebalance`) with its moves, bytes and
// ETA as the decider reports them; add a node, decommission one (asked
// in the page first), pause and resume the rebalance. The cluster's
// endpoints are server admins' (CouchDB's too): nobody else sees them. A
// single node answers 404 to `/_cluster/rebalance`: the page says it is
// not clustered.
import { useEffect, useState } from "preact/hooks";
import { api, path, bytes, ApiError, isServerAdmin, type UserCtx } from "../api";
import { ConfirmButton, ErrorBox } from "../ui";
import {
  balance, duration, nodeNames, nodeRows, progress, shardGrid,
  type Membership, type NodeRow, type NodeState, type RebalanceStatus, type ShardsAnswer, type GridGroup,
} from "../cluster";

const POLL_MS = 1500;
/** Databases whose maps are drawn (each is one request a round). */
const MAX_DBS = 50;

interface Snapshot {
  membership: Membership;
  status: RebalanceStatus;
  /** This node's lease: `null` alive, else the server's reason. */
  lease: string | null;
  shards: Record<string, ShardsAnswer>;
  states: Record<string, NodeState | undefined>;
  dbCount: number;
  at: number;
}

/** A GET that answers `undefined` for 404 (gone between two requests). */
async function getOr404<T>(url: string): Promise<T | undefined> {
  try {
    return await api<T>("GET", url);
  } catch (e) {
    if (e instanceof ApiError && e.status === 404) return undefined;
    throw e;
  }
}

async function snapshot(): Promise<Snapshot | "single"> {
  const status = await getOr404<RebalanceStatus>("/_cluster/rebalance");
  if (!status) return "single";
  const [membership, lease, names] = await Promise.all([
    api<Membership>("GET", "/_membership"),
    api("GET", "/_up").then(
      () => null,
      (e) => (e instanceof ApiError ? `${e.error}: ${e.reason}` : String(e)),
    ),
    api<string[]>("GET", "/_all_dbs"),
  ]);
  const dbs = names.filter((n) => !n.startsWith("_"));
  const shards: Record<string, ShardsAnswer> = {};
  await Promise.all(
    dbs.slice(0, MAX_DBS).map(async (db) => {
      const a = await getOr404<ShardsAnswer>(path(db, "_shards"));
      if (a) shards[db] = a;
    }),
  );
  const states: Record<string, NodeState | undefined> = {};
  await Promise.all(
    nodeNames(membership, shards, status).map(async (n) => {
      states[n] = await getOr404<NodeState>(path("_node", "_local", "_nodes", n));
    }),
  );
  return { membership, status, lease, shards, states, dbCount: dbs.length, at: Date.now() };
}

export function Cluster({ user }: { user: UserCtx | null }) {
  const admin = isServerAdmin(user);
  const [snap, setSnap] = useState<Snapshot | null>(null);
  const [single, setSingle] = useState(false);
  const [self, setSelf] = useState<string | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [actionError, setActionError] = useState<unknown>(null);
  const [notice, setNotice] = useState("");
  const [tick, setTick] = useState(0);

  useEffect(() => {
    if (!admin) return;
    let live = true;
    let timer: ReturnType<typeof setTimeout> | undefined;
    api("GET", "/_node/_local").then((n) => live && setSelf(n.name), () => {});
    const round = async () => {
      try {
        const s = await snapshot();
        if (!live) return;
        if (s === "single") {
          setSingle(true);
          return; // nothing to poll
        }
        setSnap(s);
        setError(null);
      } catch (e) {
        if (live) setError(e);
      }
      if (live) timer = setTimeout(round, POLL_MS);
    };
    round();
    return () => {
      live = false;
      clearTimeout(timer);
    };
  }, [admin, tick]);

  if (!admin) {
    return (
      <section>
        <h1>Cluster</h1>
        <p id="cluster-forbidden">Only server admins see the cluster: its endpoints are theirs.</p>
      </section>
    );
  }
  if (single) {
    return (
      <section>
        <h1>Cluster</h1>
        <p id="not-clustered">
          This server is a single node, not a member of a cluster. A cluster's members start with{" "}
          <code>settee serve --cluster-etcd URLS --node NAME</code>.
        </p>
      </section>
    );
  }
  const act: Act = async (what, f) => {
    setNotice("");
    setActionError(null);
    try {
      const said = await f();
      setNotice(typeof said === "string" ? said : what);
    } catch (e) {
      setActionError(e);
    }
    setTick((t) => t + 1); // show the change now, not at the next round
  };
  return (
    <section>
      <h1>Cluster</h1>
      <ErrorBox error={error} />
      <ErrorBox error={actionError} />
      {notice && <p class="notice" role="status">{notice}</p>}
      {!snap ? (
        <p>Loading…</p>
      ) : (
        <Body snap={snap} self={self} act={act} />
      )}
    </section>
  );
}

/** Runs an action; the notice is `what`, or the string it answers. */
type Act = (what: string, f: () => Promise<unknown>) => Promise<void>;

function Body({ snap, self, act }: { snap: Snapshot; self: string | null; act: Act }) {
  const { membership, status } = snap;
  const rows = nodeRows(membership, snap.states, snap.shards, status, self);
  const eligible = rows.filter((r) => r.health === "up").map((r) => r.name);
  const grid = shardGrid(snap.shards, membership.all_nodes, status.in_flight);
  const bal = balance(snap.shards, eligible, membership.all_nodes);
  const down = rows.filter((r) => r.health === "down").length;
  return (
    <>
      <p class="muted" id="cluster-summary" role="status">
        {rows.length} node(s), {rows.length - down} up, {down} down · seen through {self ?? "this node"}
        {snap.lease ? ` (its lease is not alive: ${snap.lease})` : ""} · updated{" "}
        {new Date(snap.at).toLocaleTimeString()}
      </p>
      <h2>Nodes</h2>
      <div class="scroll">
        <table class="list" id="nodes-table">
          <thead>
            <tr><th>Node</th><th>Health</th><th>Copies</th><th>Being filled</th><th>Actions</th></tr>
          </thead>
          <tbody>
            {rows.map((r) => <NodeLine key={r.name} r={r} act={act} />)}
          </tbody>
        </table>
      </div>
      <AddNode act={act} />
      <h2>Shard map</h2>
      <p id="balance" class={bal.uneven.length || bal.underReplicated ? "warn" : "muted"}>
        {bal.cells === 0
          ? "No clustered database yet."
          : `${bal.underReplicated} of ${bal.cells} shard(s) under-replicated; ` +
            (bal.uneven.length
              ? `uneven across the nodes that take copies: ${bal.uneven.join(", ")}.`
              : "copies within one of each other on every node that takes copies.")}
        {snap.dbCount > MAX_DBS ? ` Showing the first ${MAX_DBS} of ${snap.dbCount} databases.` : ""}
      </p>
      {grid.map((g) => <Grid g={g} />)}
      <Rebalance status={status} act={act} />
    </>
  );
}

function NodeLine({ r, act }: { r: NodeRow; act: Act }) {
  const label = { up: "up", down: "down", leaving: "leaving (copies moving off)", decommissioned: "decommissioned (holds no copy; may be stopped)" }[r.health];
  const url = path("_node", "_local", "_nodes", r.name);
  return (
    <tr data-node={r.name} data-health={r.health}>
      <td><span class="node-name">{r.name}</span>{r.self && <span class="muted"> (this node)</span>}</td>
      <td><span class={`health health-${r.health}`}>{label}</span></td>
      <td class="num">{r.copies ?? "–"}</td>
      <td class="num">{r.incoming || ""}</td>
      <td class="actions">
        {r.health === "leaving" || r.health === "decommissioned" ? (
          <button class="keep-node" onClick={() => act(`${r.name} takes copies again.`, () => api("PUT", url, { body: {} }))}>
            Keep in the cluster
          </button>
        ) : (
          <ConfirmButton label="Decommission" danger
            question={`Move every copy off ${r.name}?`}
            onConfirm={() => act(`${r.name} is being decommissioned: its copies move to the other nodes.`, () => api("DELETE", url))} />
        )}
      </td>
    </tr>
  );
}

function AddNode({ act }: { act: Act }) {
  const [name, setName] = useState("");
  const submit = (e: Event) => {
    e.preventDefault();
    const n = name.trim();
    if (!n) return;
    const url = path("_node", "_local", "_nodes", n);
    act("", async () => {
      await api("PUT", url, { body: {} });
      setName("");
      // What the server says the node is now, not what was hoped.
      const st = await getOr404<NodeState>(url);
      return st?.state === "live"
        ? `${n} is a member and takes copies.`
        : `${n} has not joined yet: start it with --cluster-etcd and --node ${n}; it takes copies once it joins.`;
    });
  };
  return (
    <form class="toolbar" id="add-node-form" onSubmit={submit}>
      <label>
        Add a node{" "}
        <input id="add-node-name" placeholder="settee@10.0.0.4" value={name} aria-describedby="add-node-help"
          onInput={(e) => setName((e.target as HTMLInputElement).value)} />
      </label>
      <button type="submit" class="primary" id="add-node-submit" disabled={!name.trim()}>Add node</button>
      <span class="muted" id="add-node-help">
        A node joins when it starts with this cluster's etcd endpoints; added, it takes copies (a decommission
        mark comes off) and the rebalance moves its share to it unless paused.
      </span>
    </form>
  );
}

function Rebalance({ status, act }: { status: RebalanceStatus; act: Act }) {
  const p = progress(status, Date.now() / 1000)!;
  const post = (action: string) => () => api("POST", "/_cluster/rebalance", { body: { action } });
  const moves = status.in_flight ?? [];
  return (
    <div class="card" id="rebalance">
      <h2>Rebalance</h2>
      <p id="rebalance-state">
        <strong>{p.state}</strong>
        {status.decider ? ` · decided by ${status.decider}` : ""}
        {p.ageS !== null ? ` · reported ${p.ageS} s ago` : ""}
      </p>
      <p id="rebalance-figures">
        {p.done} move(s) done, {p.inFlight} in flight, {p.pending} pending
        {p.bytesTotal !== null ? ` · ${bytes(p.bytesDone!)} of ${bytes(p.bytesTotal)} copied` : ""}
        {p.etaS !== null ? ` · about ${duration(p.etaS)} left for the moves in flight` : ""}
      </p>
      <div class="toolbar">
        {p.paused ? (
          <button id="rebalance-resume" class="primary" onClick={() => act("Rebalancing resumed.", post("resume"))}>
            Resume rebalancing
          </button>
        ) : (
          <button id="rebalance-pause" onClick={() => act("Rebalancing paused: moves in flight finish, no new ones start.", post("pause"))}>
            Pause rebalancing
          </button>
        )}
      </div>
      {!!status.gone?.length && <p>Copies being replaced (down too long): {status.gone.join(", ")}</p>}
      {moves.length > 0 && (
        <div class="scroll">
          <table class="list" id="moves-table">
            <thead><tr><th>Database</th><th>Range</th><th>From → to</th><th>Progress</th><th>ETA</th></tr></thead>
            <tbody>
              {moves.map((m) => (
                <tr>
                  <td>{m.db}</td>
                  <td class="mono">{m.range}</td>
                  <td class="mono">{m.from ?? "(new copy)"} → {m.to}</td>
                  <td>
                    {m.progress ? (
                      <><progress max={100} value={m.progress.progress} /> {m.progress.progress}%{" "}
                        ({bytes(m.progress.bytes_done)} of {bytes(m.progress.bytes_total)})</>
                    ) : "starting"}
                  </td>
                  <td>{m.progress?.eta_s !== undefined ? duration(m.progress.eta_s) : ""}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {!!status.history?.length && (
        <details>
          <summary>Last moves ({status.history.length})</summary>
          <ul class="mono">
            {status.history.slice(-10).reverse().map((m) => (
              <li>{m.db} {m.range} {m.from ?? ""} → {m.to}: {m.result ?? ""}</li>
            ))}
          </ul>
        </details>
      )}
    </div>
  );
}

function Grid({ g }: { g: GridGroup }) {
  return (
    <div class="scroll">
      <table class="list shard-grid">
        <thead>
          <tr>
            <th>Database</th>
            {g.ranges.map((r) => <th class="mono">{r}</th>)}
          </tr>
        </thead>
        <tbody>
          {g.rows.map((row) => (
            <tr data-db={row.db}>
              <th scope="row">{row.db}</th>
              {row.cells.map((c) => (
                <td data-range={c.range} class={c.under ? "under" : ""}
                  title={c.under ? "under-replicated: fewer live copies than the map lists" : undefined}>
                  {c.nodes.map((n) => (
                    <span class={c.down.includes(n) ? "holder down" : "holder"}>
                      {n}{c.down.includes(n) ? " (down)" : ""}
                    </span>
                  ))}
                  {c.incoming.map((n) => <span class="holder incoming">+ {n} (filling)</span>)}
                  {c.under && <span class="badge">under-replicated</span>}
                </td>
              ))}
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
