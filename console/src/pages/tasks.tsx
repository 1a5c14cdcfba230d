// `_active_tasks`, polled every 2 s: compactions, view indexing and
// replications, with their progress.
import { useEffect, useState } from "preact/hooks";
import { api } from "../api";
import { ErrorBox, short } from "../ui";

export function Tasks() {
  const [tasks, setTasks] = useState<any[] | null>(null);
  const [error, setError] = useState<unknown>(null);
  useEffect(() => {
    let live = true;
    const load = () => api("GET", "/_active_tasks").then((t) => live && (setTasks(t), setError(null)), (e) => live && setError(e));
    load();
    const t = setInterval(load, 2000);
    return () => { live = false; clearInterval(t); };
  }, []);
  return (
    <section>
      <h1>Active tasks</h1>
      <ErrorBox error={error} />
      <table class="list" id="tasks-table">
        <thead><tr><th>Type</th><th>Database</th><th>Progress</th><th>Details</th><th>Updated</th></tr></thead>
        <tbody>
          {tasks?.length === 0 && <tr><td colSpan={5}>No task is running.</td></tr>}
          {tasks?.map((t) => {
            const pct = typeof t.progress === "number" ? t.progress
              : t.total_changes ? Math.round((100 * t.changes_done) / t.total_changes) : null;
            const details = t.type === "replication"
              ? `${short(t.source, 40)} → ${short(t.target, 40)}: ${t.docs_written ?? 0} written, ${t.changes_pending ?? 0} pending`
              : t.design_document ? t.design_document : "";
            return (
              <tr>
                <td>{t.type}</td>
                <td>{t.database ?? ""}</td>
                <td>{pct !== null ? <><progress max={100} value={pct} /> {pct}%</> : ""}</td>
                <td class="mono">{details}</td>
                <td>{t.updated_on ? new Date(t.updated_on * 1000).toLocaleTimeString() : ""}</td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </section>
  );
}
