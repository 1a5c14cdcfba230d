// The console's only way to the server: CouchDB's public HTTP API, with the
// browser's own session cookie (same origin). Errors become ApiError with
// the server's `error` and `reason`, which the pages show as they are.

export class ApiError extends Error {
  constructor(
    public status: number,
    public error: string,
    public reason: string,
  ) {
    super(reason ? `${error}: ${reason}` : error);
  }
}

/** A server path from its segments, each percent-encoded. */
export function path(...segs: string[]): string {
  return "/" + segs.map(encodeURIComponent).join("/");
}

/** A document's path: `_design/` and `_local/` ids keep their slash. */
export function docPath(db: string, id: string, ...rest: string[]): string {
  for (const prefix of ["_design/", "_local/"]) {
    if (id.startsWith(prefix)) {
      return path(db) + "/" + prefix + encodeURIComponent(id.slice(prefix.length)) +
        rest.map((r) => "/" + encodeURIComponent(r)).join("");
    }
  }
  return path(db, id, ...rest);
}

/** A query string from options; values other than strings are JSON. */
export function qs(opts: Record<string, unknown>): string {
  const parts: string[] = [];
  for (const [k, v] of Object.entries(opts)) {
    if (v === undefined || v === null || v === "") continue;
    const s = typeof v === "string" ? v : JSON.stringify(v);
    parts.push(`${encodeURIComponent(k)}=${encodeURIComponent(s)}`);
  }
  return parts.length ? "?" + parts.join("&") : "";
}

export interface Options {
  body?: unknown;
  signal?: AbortSignal;
  raw?: BodyInit;
  contentType?: string;
}

/** One request; the JSON answer, or an ApiError for any status >= 400. */
export async function api<T = any>(method: string, url: string, o: Options = {}): Promise<T> {
  const headers: Record<string, string> = { Accept: "application/json" };
  let body: BodyInit | undefined;
  if (o.raw !== undefined) {
    body = o.raw;
    if (o.contentType) headers["Content-Type"] = o.contentType;
  } else if (o.body !== undefined) {
    body = JSON.stringify(o.body);
    headers["Content-Type"] = "application/json";
  }
  let resp: Response;
  try {
    resp = await fetch(url, { method, headers, body, signal: o.signal, credentials: "same-origin" });
  } catch (e) {
    if ((e as Error).name === "AbortError") throw e;
    throw new ApiError(0, "network_error", "The server could not be reached.");
  }
  const text = await resp.text();
  let json: any = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = null;
  }
  if (!resp.ok) {
    throw new ApiError(
      resp.status,
      json?.error ?? `HTTP ${resp.status}`,
      json?.reason ?? (json ? "" : text.slice(0, 200)),
    );
  }
  return json as T;
}

export interface UserCtx {
  name: string | null;
  roles: string[];
}

export const session = {
  async get(): Promise<UserCtx> {
    const s = await api("GET", "/_session");
    return s.userCtx;
  },
  async login(name: string, password: string): Promise<UserCtx> {
    const s = await api("POST", "/_session", { body: { name, password } });
    return { name: s.name, roles: s.roles };
  },
  async logout(): Promise<void> {
    await api("DELETE", "/_session");
  },
};

export function isServerAdmin(u: UserCtx | null): boolean {
  return !!u && u.roles.includes("_admin");
}

/** Whether this server is a cluster member: its `/_cluster/rebalance`
 * exists (a single node answers 404; a member whose etcd is unreachable
 * answers an error, and is still a member). */
export async function clusterMember(): Promise<boolean> {
  try {
    await api("GET", "/_cluster/rebalance");
    return true;
  } catch (e) {
    return e instanceof ApiError && e.status !== 404 && e.status !== 0;
  }
}

/** Whether `u` is an admin of a database with security object `sec`. */
export function isDbAdmin(u: UserCtx | null, sec: any): boolean {
  if (!u) return false;
  if (isServerAdmin(u)) return true;
  const admins = sec?.admins ?? {};
  if (u.name && (admins.names ?? []).includes(u.name)) return true;
  return (admins.roles ?? []).some((r: string) => u.roles.includes(r));
}

/** Upload with progress (fetch has none): PUT `url` with `file`. */
export function upload(
  url: string,
  file: Blob,
  contentType: string,
  onProgress: (fraction: number) => void,
): Promise<any> {
  return new Promise((resolve, reject) => {
    const x = new XMLHttpRequest();
    x.open("PUT", url);
    x.setRequestHeader("Content-Type", contentType || "application/octet-stream");
    x.setRequestHeader("Accept", "application/json");
    x.upload.onprogress = (e) => {
      if (e.lengthComputable) onProgress(e.loaded / e.total);
    };
    x.onload = () => {
      let json: any = null;
      try {
        json = JSON.parse(x.responseText);
      } catch {
        json = null;
      }
      if (x.status >= 400) {
        reject(new ApiError(x.status, json?.error ?? `HTTP ${x.status}`, json?.reason ?? ""));
      } else {
        resolve(json);
      }
    };
    x.onerror = () => reject(new ApiError(0, "network_error", "The upload failed."));
    x.send(file);
  });
}

/** Bytes as a person reads them. */
export function bytes(n: number | undefined): string {
  if (n === undefined || n === null) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${i === 0 ? v : v.toFixed(1)} ${units[i]}`;
}
