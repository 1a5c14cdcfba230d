// A live `_changes` feed: the latest changes first, then long polls from
// the last sequence, one at a time, until the page is left (aborted).
import { useEffect, useState } from "preact/hooks";
import { api, path, qs } from "../api";
import { href } from "../route";
import { ErrorBox, short } from "../ui";

const KEEP = 200;

export function Changes({ db }: { db: string }) {
  const [rows, setRows] = useState<any[]>([]);
  const [error, setError] = useState<unknown>(null);
  const [live, setLive] = useState(true);
  useEffect(() => {
    if (!live) return;
    const stop = new AbortController();
    (async () => {
      try {
        const first = await api("GET", path(db, "_changes") + qs({ descending: true, limit: 25 }), { signal: stop.signal });
        setRows(first.results);
        let since = first.last_seq;
        // The newest first in the descending read; its seq starts the feed.
        if (first.results.length) since = first.results[0].seq;
        for (;;) {
          const r = await api("GET", path(db, "_changes") + qs({ feed: "longpoll", since, timeout: 25000 }), { signal: stop.signal });
          since = r.last_seq;
          if (r.results.length) setRows((old) => [...r.results.reverse(), ...old].slice(0, KEEP));
          setError(null);
        }
      } catch (e) {
        if ((e as Error).name !== "AbortError") setError(e);
      }
    })();
    return () => stop.abort();
  }, [db, live]);
  return (
    <section>
      <h2>Changes</h2>
      <label class="check">
        <input type="checkbox" id="changes-live" checked={live} onChange={(e) => setLive((e.target as HTMLInputElement).checked)} /> Follow live
      </label>
      <ErrorBox error={error} />
      <table class="list" id="changes-table">
        <thead><tr><th>Seq</th><th>Id</th><th>Revisions</th><th>Deleted</th></tr></thead>
        <tbody>
          {rows.map((c) => (
            <tr data-id={c.id}>
              <td class="mono">{short(c.seq, 20)}</td>
              <td><a href={href("db", db, "doc", c.id)}>{c.id}</a></td>
              <td class="mono">{c.changes.map((x: any) => x.rev).join(", ")}</td>
              <td>{c.deleted ? "yes" : ""}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}
