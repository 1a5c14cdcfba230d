// One document: edit it as JSON (checked before saving), create one,
// delete it, its conflicts (shown side by side, resolved by keeping one:
// the other leaves are deleted in one _bulk_docs), its revision history
// and its attachments (listed, downloaded, uploaded with progress by
// picking or dropping files, deleted).
import { useEffect, useRef, useState } from "preact/hooks";
import { api, docPath, path, qs, bytes, upload, type UserCtx } from "../api";
import { go, href } from "../route";
import { JsonEditor, parseJson, type EditorHandle } from "../editor";
import { ConfirmButton, ErrorBox } from "../ui";

/** The document as the editor shows it (without what we asked to see). */
function editable(doc: any): string {
  const { _revs_info, _conflicts, ...rest } = doc;
  return JSON.stringify(rest, null, 2);
}

export function DocPage({ db, id }: { db: string; id: string | null; user: UserCtx | null }) {
  const [doc, setDoc] = useState<any>(null);
  const [error, setError] = useState<unknown>(null);
  const [notice, setNotice] = useState("");
  const [tick, setTick] = useState(0);
  const [other, setOther] = useState<any>(null); // another revision, read-only
  const editor = useRef<EditorHandle | null>(null);

  useEffect(() => {
    if (id === null) return;
    let live = true;
    api("GET", docPath(db, id) + qs({ conflicts: true, revs_info: true })).then(
      (d) => live && (setDoc(d), setError(null)),
      (e) => live && setError(e),
    );
    return () => {
      live = false;
    };
  }, [db, id, tick]);
  const reload = () => setTick((t) => t + 1);

  const save = async () => {
    setNotice("");
    const parsed = parseJson(editor.current!.get());
    if (!parsed.ok) {
      setError(new Error(`Not valid JSON: ${parsed.message}`));
      return;
    }
    const v = parsed.value;
    if (typeof v !== "object" || v === null || Array.isArray(v)) {
      setError(new Error("A document must be a JSON object."));
      return;
    }
    try {
      const r =
        typeof v._id === "string" && v._id !== ""
          ? await api("PUT", docPath(db, v._id), { body: v })
          : await api("POST", path(db), { body: v });
      setError(null);
      if (r.id !== id) go("db", db, "doc", r.id);
      else {
        setNotice(`Saved as revision ${r.rev}.`);
        reload();
      }
    } catch (e) {
      setError(e);
    }
  };

  if (id === null) {
    return (
      <section>
        <h2>New document</h2>
        <ErrorBox error={error} />
        <JsonEditor id="doc-editor" label="New document JSON" value={'{\n  "_id": ""\n}'} handle={editor} />
        <div class="toolbar">
          <button class="primary" id="save-doc" onClick={save}>Create document</button>
        </div>
      </section>
    );
  }
  if (!doc) return <section><ErrorBox error={error} />{!error && <p>Loading…</p>}</section>;

  const conflicts: string[] = doc._conflicts ?? [];
  const keep = async (winner: string) => {
    const losers = [doc._rev, ...conflicts].filter((r) => r !== winner);
    try {
      const res: any[] = await api("POST", path(db, "_bulk_docs"), {
        body: { docs: losers.map((r) => ({ _id: id, _rev: r, _deleted: true })) },
      });
      const failed = res.filter((r) => r.error);
      if (failed.length) setError(new Error(failed.map((f) => `${f.rev ?? ""} ${f.reason}`).join("; ")));
      else setNotice(`Kept ${winner}; ${losers.length} other revision(s) deleted.`);
      setOther(null);
      reload();
    } catch (e) {
      setError(e);
    }
  };
  const show = async (rev: string) => {
    try {
      setOther(await api("GET", docPath(db, id) + qs({ rev })));
    } catch (e) {
      setError(e);
    }
  };

  return (
    <section>
      <h2 class="docid">{id}</h2>
      <p class="mono muted" id="doc-rev">{doc._rev}</p>
      <ErrorBox error={error} />
      {notice && <p class="notice" role="status">{notice}</p>}
      {conflicts.length > 0 && (
        <div class="card conflicts" id="conflicts">
          <h3>{conflicts.length} conflicting revision(s)</h3>
          <p>The current winner is {doc._rev}. Keep one revision: the others are deleted.</p>
          <ul>
            {[doc._rev, ...conflicts].map((r) => (
              <li class="mono">
                {r}{" "}
                {r !== doc._rev && <button onClick={() => show(r)}>Show</button>}{" "}
                <button onClick={() => keep(r)}>Keep this one</button>
              </li>
            ))}
          </ul>
        </div>
      )}
      <div class={other ? "split" : ""}>
        <JsonEditor id="doc-editor" label="Document JSON" value={editable(doc)} handle={editor} />
        {other && (
          <div>
            <p>
              Revision <span class="mono">{other._rev}</span> (read only){" "}
              <button onClick={() => setOther(null)}>Close</button>
            </p>
            <JsonEditor label="Other revision" value={JSON.stringify(other, null, 2)} readOnly />
          </div>
        )}
      </div>
      <div class="toolbar">
        <button class="primary" id="save-doc" onClick={save}>Save</button>
        <ConfirmButton id="delete-doc" label="Delete" danger question="Delete this document?"
          onConfirm={async () => {
            try {
              await api("DELETE", docPath(db, id) + qs({ rev: doc._rev }));
              go("db", db);
            } catch (e) {
              setError(e);
            }
          }} />
        <a class="button" href={href("db", db)}>Back to documents</a>
      </div>
      <Attachments db={db} id={id} doc={doc} onChanged={reload} onError={setError} />
      <details class="card">
        <summary>Revision history ({(doc._revs_info ?? []).length})</summary>
        <ol id="rev-history">
          {(doc._revs_info ?? []).map((r: any) => (
            <li class="mono">
              {r.rev} <span class="muted">{r.status}</span>{" "}
              {r.status === "available" && r.rev !== doc._rev && <button onClick={() => show(r.rev)}>Show</button>}
            </li>
          ))}
        </ol>
      </details>
    </section>
  );
}

function Attachments(props: {
  db: string;
  id: string;
  doc: any;
  onChanged: () => void;
  onError: (e: unknown) => void;
}) {
  const { db, id, doc } = props;
  const [progress, setProgress] = useState<string>("");
  const [over, setOver] = useState(false);
  const atts = Object.entries(doc._attachments ?? {}) as [string, any][];
  const send = async (files: FileList | null) => {
    if (!files || files.length === 0) return;
    let rev = doc._rev;
    try {
      for (const f of Array.from(files)) {
        setProgress(`${f.name}: 0%`);
        const r = await upload(docPath(db, id, f.name) + qs({ rev }), f, f.type, (x) =>
          setProgress(`${f.name}: ${Math.round(x * 100)}%`),
        );
        rev = r.rev;
      }
      setProgress("");
      props.onChanged();
    } catch (e) {
      setProgress("");
      props.onError(e);
    }
  };
  return (
    <div class="card">
      <h3>Attachments</h3>
      {atts.length === 0 ? (
        <p class="muted">None.</p>
      ) : (
        <table class="list" id="attachments">
          <thead><tr><th>Name</th><th>Type</th><th>Size</th><th></th></tr></thead>
          <tbody>
            {atts.map(([name, a]) => (
              <tr data-att={name}>
                <td><a href={docPath(db, id, name)} download={name}>{name}</a></td>
                <td>{a.content_type}</td>
                <td class="num">{bytes(a.length)}</td>
                <td>
                  <ConfirmButton label="Delete" danger question={`Delete ${name}?`}
                    onConfirm={async () => {
                      try {
                        await api("DELETE", docPath(db, id, name) + qs({ rev: doc._rev }));
                        props.onChanged();
                      } catch (e) {
                        props.onError(e);
                      }
                    }} />
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <label
        class={"dropzone" + (over ? " over" : "")}
        onDragOver={(e) => { e.preventDefault(); setOver(true); }}
        onDragLeave={() => setOver(false)}
        onDrop={(e) => { e.preventDefault(); setOver(false); send(e.dataTransfer?.files ?? null); }}
      >
        Drop files here or pick them:{" "}
        <input type="file" id="att-file" multiple onChange={(e) => send((e.target as HTMLInputElement).files)} />
      </label>
      {progress && <p role="status" id="upload-progress">Uploading {progress}</p>}
    </div>
  );
}
