// Pure helpers of the Cluster page (no DOM): the answers of the cluster
// API (`/_membership`, `/_node/_local/_nodes/{name}`, `/{db}/_shards`,
// `/_cluster/rebalance`) turned into what the page draws — the nodes with
// their health and copies, the shard grid (databases × ranges, grouped by
// databases with the same ranges), the balance and the rebalance's
// progress. Nothing here invents a figure: what the server did not say is
// absent.

/** `GET /_membership`: live members (`all_nodes`), every member that
 * joined (`cluster_nodes`). */
export interface Membership {
  all_nodes: string[];
  cluster_nodes: string[];
}

/** `GET /{db}/_shards`: range -> nodes holding a full copy; Settee adds
 * the ranges with fewer live copies than listed. */
export interface ShardsAnswer {
  shards: Record<string, string[]>;
  under_replicated?: string[];
}

/** A move's figures, as `GET /_cluster/rebalance` gives them. */
export interface MoveProgress {
  docs_done: number;
  docs_total: number;
  bytes_done: number;
  bytes_total: number;
  progress: number;
  eta_s?: number;
}

export interface MoveStatus {
  db: string;
  range: string;
  to: string;
  from?: string;
  result?: string;
  progress?: MoveProgress;
}

/** `GET /_cluster/rebalance` (before a decider ran: only `state` and
 * `paused`). */
export interface RebalanceStatus {
  state: string;
  paused: boolean;
  decider?: string;
  moves_done?: number;
  in_flight?: MoveStatus[];
  pending?: number;
  gone?: string[];
  leaving?: string[];
  decommissioned?: string[];
  under_replicated?: string[];
  history?: MoveStatus[];
  updated?: number;
}

/** `GET /_node/_local/_nodes/{name}`. */
export interface NodeState {
  state: string; // live | down | leaving
  shard_copies: number;
}

export type Health = "up" | "down" | "leaving" | "decommissioned";

export interface NodeRow {
  name: string;
  health: Health;
  /** Full copies it holds, by the databases' maps (`null`: not known). */
  copies: number | null;
  /** Whether the page is served by this node. */
  self: boolean;
  /** Copies being filled on it now. */
  incoming: number;
}

/** The node names any answer mentions, sorted. */
export function nodeNames(
  m: Membership | null,
  shards: Record<string, ShardsAnswer>,
  status: RebalanceStatus | null,
): string[] {
  const names = new Set<string>([...(m?.all_nodes ?? []), ...(m?.cluster_nodes ?? [])]);
  for (const a of Object.values(shards)) for (const ns of Object.values(a.shards)) ns.forEach((n) => names.add(n));
  for (const n of [...(status?.leaving ?? []), ...(status?.gone ?? [])]) names.add(n);
  return [...names].sort();
}

/** A node's health: down unless its lease is live in `/_membership`;
 * leaving (or decommissioned, once it holds nothing) while marked so. */
export function health(name: string, m: Membership | null, state: NodeState | undefined, status: RebalanceStatus | null): Health {
  const live = !!m?.all_nodes.includes(name) && state?.state !== "down";
  if (!live) return "down";
  if (state?.state === "leaving" || status?.leaving?.includes(name)) {
    return status?.decommissioned?.includes(name) ? "decommissioned" : "leaving";
  }
  return "up";
}

/** How many full copies each node holds across `shards`. */
export function copiesPerNode(shards: Record<string, ShardsAnswer>): Map<string, number> {
  const out = new Map<string, number>();
  for (const a of Object.values(shards)) {
    for (const ns of Object.values(a.shards)) for (const n of ns) out.set(n, (out.get(n) ?? 0) + 1);
  }
  return out;
}

/** The nodes table: every node named anywhere, with its health and
 * copies (the node's own answer, else the count from the maps read). */
export function nodeRows(
  m: Membership | null,
  states: Record<string, NodeState | undefined>,
  shards: Record<string, ShardsAnswer>,
  status: RebalanceStatus | null,
  self: string | null,
): NodeRow[] {
  const counted = copiesPerNode(shards);
  return nodeNames(m, shards, status).map((name) => ({
    name,
    health: health(name, m, states[name], status),
    copies: states[name]?.shard_copies ?? counted.get(name) ?? (Object.keys(shards).length ? 0 : null),
    self: name === self,
    incoming: (status?.in_flight ?? []).filter((mv) => mv.to === name).length,
  }));
}

/** One cell of the grid: a database's range. */
export interface Cell {
  range: string;
  /** Nodes holding a full copy. */
  nodes: string[];
  /** Those of them that are down. */
  down: string[];
  /** Nodes a copy is being filled on (moves in flight). */
  incoming: string[];
  /** Fewer live copies than the map lists. */
  under: boolean;
}

export interface GridRow {
  db: string;
  cells: Cell[];
}

/** Databases with the same ranges, drawn as one table. */
export interface GridGroup {
  ranges: string[];
  rows: GridRow[];
}

/** A range's start, for sorting (`00000000-7fffffff`). */
function rangeStart(r: string): number {
  const n = parseInt(r.split("-")[0], 16);
  return Number.isNaN(n) ? 0 : n;
}

export function sortRanges(ranges: string[]): string[] {
  return [...ranges].sort((a, b) => rangeStart(a) - rangeStart(b) || (a < b ? -1 : a > b ? 1 : 0));
}

/** The shard grid: databases (sorted) grouped by their ranges; a cell is
 * under-replicated when the server says so or one of its holders is not
 * live now. */
export function shardGrid(
  shards: Record<string, ShardsAnswer>,
  live: string[],
  inFlight: MoveStatus[] = [],
): GridGroup[] {
  const alive = new Set(live);
  const groups = new Map<string, GridGroup>();
  for (const db of Object.keys(shards).sort()) {
    const a = shards[db];
    const ranges = sortRanges(Object.keys(a.shards));
    const key = ranges.join(",");
    let g = groups.get(key);
    if (!g) {
      g = { ranges, rows: [] };
      groups.set(key, g);
    }
    const under = new Set(a.under_replicated ?? []);
    g.rows.push({
      db,
      cells: ranges.map((range) => {
        const nodes = [...a.shards[range]].sort();
        const down = nodes.filter((n) => !alive.has(n));
        return {
          range,
          nodes,
          down,
          incoming: inFlight.filter((mv) => mv.db === db && mv.range === range).map((mv) => mv.to).sort(),
          under: under.has(range) || down.length > 0,
        };
      }),
    });
  }
  return [...groups.values()];
}

/** How evenly copies are spread: per database the planner keeps the
 * nodes that take copies within one of each other. */
export interface Balance {
  /** Databases whose copies differ by more than one between such nodes. */
  uneven: string[];
  /** Cells with fewer live copies than listed. */
  underReplicated: number;
  cells: number;
}

/** `eligible`: the nodes that take copies (up, not leaving). */
export function balance(shards: Record<string, ShardsAnswer>, eligible: string[], live: string[]): Balance {
  const uneven: string[] = [];
  let underReplicated = 0;
  let cells = 0;
  for (const g of shardGrid(shards, live)) {
    for (const row of g.rows) {
      const count = new Map(eligible.map((n) => [n, 0]));
      for (const c of row.cells) {
        cells++;
        if (c.under) underReplicated++;
        for (const n of c.nodes) if (count.has(n)) count.set(n, count.get(n)! + 1);
      }
      const vs = [...count.values()];
      if (vs.length > 1 && Math.max(...vs) - Math.min(...vs) > 1) uneven.push(row.db);
    }
  }
  return { uneven, underReplicated, cells };
}

/** The rebalance as the page states it. */
export interface Progress {
  state: string;
  paused: boolean;
  done: number;
  inFlight: number;
  pending: number;
  /** Bytes of the moves in flight (`null`: no figures yet). */
  bytesDone: number | null;
  bytesTotal: number | null;
  /** The longest ETA of the moves in flight (they run at once). */
  etaS: number | null;
  /** Seconds since the decider wrote the status (`null`: never). */
  ageS: number | null;
}

export function progress(s: RebalanceStatus | null, nowS: number): Progress | null {
  if (!s) return null;
  const moves = s.in_flight ?? [];
  const figs = moves.map((m) => m.progress).filter((p): p is MoveProgress => !!p);
  const etas = figs.map((p) => p.eta_s).filter((e): e is number => typeof e === "number");
  return {
    state: s.state,
    paused: s.paused,
    done: s.moves_done ?? 0,
    inFlight: moves.length,
    pending: s.pending ?? 0,
    bytesDone: figs.length ? figs.reduce((n, p) => n + p.bytes_done, 0) : null,
    bytesTotal: figs.length ? figs.reduce((n, p) => n + p.bytes_total, 0) : null,
    etaS: etas.length ? Math.max(...etas) : null,
    ageS: typeof s.updated === "number" && s.updated > 0 ? Math.max(0, Math.round(nowS - s.updated)) : null,
  };
}

/** Seconds as a person reads them: `45 s`, `3 min 5 s`, `2 h 10 min`. */
export function duration(s: number): string {
  const t = Math.round(s);
  if (t < 60) return `${t} s`;
  if (t < 3600) return `${Math.floor(t / 60)} min ${t % 60} s`;
  return `${Math.floor(t / 3600)} h ${Math.floor((t % 3600) / 60)} min`;
}
