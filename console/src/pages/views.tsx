// The views of every design document, run with their options
// (GET /db/_design/D/_view/V with limit, skip, keys, reduce, group…).
import { useEffect, useState } from "preact/hooks";
import { api, docPath, path, qs } from "../api";
import { href } from "../route";
import { ErrorBox, short } from "../ui";

export function Views({ db }: { db: string }) {
  const [ddocs, setDdocs] = useState<any[] | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [sel, setSel] = useState("");
  const [o, setO] = useState<Record<string, string>>({ limit: "20" });
  const [flags, setFlags] = useState<Record<string, boolean>>({});
  const [result, setResult] = useState<any>(null);
  useEffect(() => {
    api("GET", path(db, "_design_docs") + qs({ include_docs: true })).then(
      (r) => {
        const list = r.rows.map((row: any) => row.doc).filter((d: any) => d && d.language !== "query" && d.views);
        setDdocs(list);
        const first = list.find((d: any) => Object.keys(d.views).length);
        if (first) setSel(`${first._id}|${Object.keys(first.views)[0]}`);
      },
      setError,
    );
  }, [db]);
  const [ddocId, view] = sel.split("|");
  const hasReduce = !!ddocs?.find((d) => d._id === ddocId)?.views?.[view]?.reduce;
  const run = async (e: Event) => {
    e.preventDefault();
    const opts: Record<string, unknown> = {};
    for (const k of ["limit", "skip", "group_level"]) if (o[k]) opts[k] = o[k];
    // Keys are JSON: passed as they are typed, the server checks them.
    for (const k of ["key", "startkey", "endkey"]) if (o[k]) opts[k] = o[k];
    for (const k of ["descending", "include_docs", "group", "update_seq"]) if (flags[k]) opts[k] = "true";
    if (hasReduce && flags.noreduce) opts.reduce = "false";
    try {
      setResult(await api("GET", docPath(db, ddocId, "_view", view) + qs(opts)));
      setError(null);
    } catch (err) {
      setError(err);
    }
  };
  const field = (k: string, label: string, placeholder = "") => (
    <label>{label} <input value={o[k] ?? ""} placeholder={placeholder}
      onInput={(e) => setO({ ...o, [k]: (e.target as HTMLInputElement).value })} /></label>
  );
  const flag = (k: string, label: string) => (
    <label class="check"><input type="checkbox" id={`view-${k}`} checked={!!flags[k]}
      onChange={(e) => setFlags({ ...flags, [k]: (e.target as HTMLInputElement).checked })} /> {label}</label>
  );
  if (ddocs && ddocs.length === 0) {
    return <section><h2>Views</h2><ErrorBox error={error} /><p>No design document with views in this database.</p></section>;
  }
  return (
    <section>
      <h2>Views</h2>
      <ErrorBox error={error} />
      <form class="card options" onSubmit={run}>
        <label>View{" "}
          <select id="view-select" value={sel} onChange={(e) => setSel((e.target as HTMLSelectElement).value)}>
            {ddocs?.flatMap((d) => Object.keys(d.views).map((v) => <option value={`${d._id}|${v}`}>{d._id.slice(8)}/{v}</option>))}
          </select>
        </label>
        {field("key", "key", '"a"')}
        {field("startkey", "startkey", "JSON")}
        {field("endkey", "endkey", "JSON")}
        {field("limit", "limit")}
        {field("skip", "skip")}
        {hasReduce && field("group_level", "group_level")}
        {flag("descending", "descending")}
        {flag("include_docs", "include_docs")}
        {hasReduce && flag("group", "group")}
        {hasReduce && flag("noreduce", "reduce=false")}
        {flag("update_seq", "update_seq")}
        <button class="primary" id="run-view" type="submit">Run</button>{" "}
        {ddocId && <a class="button" href={href("db", db, "doc", ddocId)}>Edit design document</a>}
      </form>
      {result && (
        <div class="card" id="view-results">
          <p class="muted">
            {result.rows.length} row(s){result.total_rows !== undefined ? ` of ${result.total_rows}` : ""}
            {result.offset !== undefined ? `, offset ${result.offset}` : ""}
          </p>
          <table class="list">
            <thead><tr><th>Id</th><th>Key</th><th>Value</th>{flags.include_docs && <th>Document</th>}</tr></thead>
            <tbody>
              {result.rows.map((r: any) => (
                <tr>
                  <td>{r.id !== undefined ? <a href={href("db", db, "doc", r.id)}>{r.id}</a> : ""}</td>
                  <td class="mono">{short(r.key)}</td>
                  <td class="mono">{short(r.value)}</td>
                  {flags.include_docs && <td class="mono">{short(r.doc, 120)}</td>}
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}
