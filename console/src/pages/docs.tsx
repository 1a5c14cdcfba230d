// A database's documents: `_all_docs` paged by startkey (one row more than
// the page tells whether there is a next), optionally with include_docs;
// the database's info above it.
import { useEffect, useState } from "preact/hooks";
import { api, path, qs, bytes, type UserCtx } from "../api";
import { href } from "../route";
import { ErrorBox, Pager, short } from "../ui";

export function Docs({ db }: { db: string; user: UserCtx | null }) {
  const [info, setInfo] = useState<any>(null);
  const [perPage, setPerPage] = useState(20);
  const [starts, setStarts] = useState<(string | null)[]>([null]);
  const [includeDocs, setIncludeDocs] = useState(false);
  const [result, setResult] = useState<any>(null);
  const [error, setError] = useState<unknown>(null);
  const page = starts.length - 1;

  useEffect(() => {
    api("GET", path(db)).then(setInfo, setError);
  }, [db]);
  useEffect(() => {
    let live = true;
    const start = starts[page];
    const opts: Record<string, unknown> = { limit: perPage + 1, include_docs: includeDocs || undefined };
    if (start !== null) opts.startkey = JSON.stringify(start);
    api("GET", path(db, "_all_docs") + qs(opts)).then(
      (r) => live && (setResult(r), setError(null)),
      (e) => live && setError(e),
    );
    return () => {
      live = false;
    };
  }, [db, starts, perPage, includeDocs]);

  const rows: any[] = result?.rows ?? [];
  const shown = rows.slice(0, perPage);
  return (
    <section>
      {info && (
        <p class="dbinfo" id="db-info">
          {info.doc_count} documents, {info.doc_del_count} deleted, {bytes(info.sizes?.active)} active
          {info.props?.partitioned ? ", partitioned" : ""}, update seq {short(info.update_seq, 24)}
        </p>
      )}
      <div class="toolbar">
        <a class="button primary" id="new-doc" href={href("db", db, "new")}>New document</a>
        <label class="check">
          <input type="checkbox" id="include-docs" checked={includeDocs}
            onChange={(e) => setIncludeDocs((e.target as HTMLInputElement).checked)} /> Include documents
        </label>
      </div>
      <ErrorBox error={error} />
      <table class="list" id="docs-table">
        <thead>
          <tr><th>Id</th><th>Revision</th>{includeDocs && <th>Document</th>}</tr>
        </thead>
        <tbody>
          {result && shown.length === 0 && <tr><td colSpan={3}>No documents.</td></tr>}
          {shown.map((r) => (
            <tr data-id={r.id}>
              <td><a href={href("db", db, "doc", r.id)}>{r.id}</a></td>
              <td class="mono">{r.value?.rev}</td>
              {includeDocs && <td class="mono">{short(r.doc, 120)}</td>}
            </tr>
          ))}
        </tbody>
      </table>
      <Pager page={page} hasNext={rows.length > perPage} perPage={perPage}
        onPerPage={(n) => { setPerPage(n); setStarts([null]); }}
        onPrev={() => setStarts(starts.slice(0, -1))}
        onNext={() => setStarts([...starts, rows[perPage].id])}>
        {result && <span class="muted">{result.total_rows} in all</span>}
      </Pager>
    </section>
  );
}
