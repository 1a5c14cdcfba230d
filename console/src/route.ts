// Hash routes (`#/db/NAME/doc/ID`…): the server serves one page, the
// console picks what to show from the hash. Segments are percent-encoded.

export type Route =
  | { page: "databases" }
  | { page: "login"; returnTo?: string; reason?: string }
  | { page: "docs"; db: string }
  | { page: "doc"; db: string; id: string }
  | { page: "newdoc"; db: string }
  | { page: "find"; db: string }
  | { page: "views"; db: string }
  | { page: "changes"; db: string }
  | { page: "security"; db: string }
  | { page: "replication" }
  | { page: "users" }
  | { page: "config" }
  | { page: "tasks" }
  | { page: "stats" }
  | { page: "cluster" }
  | { page: "account" }
  | { page: "notfound"; hash: string };

export function parse(hash: string): Route {
  const h = hash.replace(/^#\/?/, "");
  const segs = h === "" ? [] : h.split("/").map((s) => decodeURIComponent(s));
  if (segs.length === 0) return { page: "databases" };
  if (segs.length === 1) {
    switch (segs[0]) {
      case "login":
      case "replication":
      case "users":
      case "config":
      case "tasks":
      case "stats":
      case "cluster":
      case "account":
        return { page: segs[0] };
    }
  }
  if (segs[0] === "db" && segs.length >= 2) {
    const db = segs[1];
    if (segs.length === 2) return { page: "docs", db };
    if (segs[2] === "doc" && segs.length === 4) return { page: "doc", db, id: segs[3] };
    if (segs.length === 3) {
      switch (segs[2]) {
        case "new":
          return { page: "newdoc", db };
        case "find":
          return { page: "find", db };
        case "views":
          return { page: "views", db };
        case "changes":
          return { page: "changes", db };
        case "security":
          return { page: "security", db };
      }
    }
  }
  return { page: "notfound", hash };
}

/** The hash of a route given by its segments. */
export function href(...segs: string[]): string {
  return "#/" + segs.map(encodeURIComponent).join("/");
}

export function go(...segs: string[]): void {
  location.hash = href(...segs);
}
