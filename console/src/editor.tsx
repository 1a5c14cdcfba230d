// The JSON editor (CodeMirror 6): syntax highlighting, JSON parse errors
// marked as you type, undo history. The text is read back with `get`.
import { useEffect, useRef } from "preact/hooks";
import { EditorState } from "@codemirror/state";
import { EditorView, keymap, lineNumbers, highlightActiveLine } from "@codemirror/view";
import { defaultKeymap, history, historyKeymap, indentWithTab } from "@codemirror/commands";
import { bracketMatching, syntaxHighlighting, defaultHighlightStyle } from "@codemirror/language";
import { json, jsonParseLinter } from "@codemirror/lang-json";
import { linter, lintGutter } from "@codemirror/lint";

export interface EditorHandle {
  get(): string;
  set(text: string): void;
}

export function JsonEditor(props: {
  value: string;
  readOnly?: boolean;
  handle?: { current: EditorHandle | null };
  id?: string;
  label: string;
}) {
  const host = useRef<HTMLDivElement>(null);
  useEffect(() => {
    const view = new EditorView({
      parent: host.current!,
      state: EditorState.create({
        doc: props.value,
        extensions: [
          lineNumbers(),
          highlightActiveLine(),
          history(),
          bracketMatching(),
          syntaxHighlighting(defaultHighlightStyle),
          json(),
          linter(jsonParseLinter(), { delay: 300 }),
          lintGutter(),
          keymap.of([...defaultKeymap, ...historyKeymap, indentWithTab]),
          EditorView.lineWrapping,
          EditorState.readOnly.of(!!props.readOnly),
          EditorView.contentAttributes.of({ "aria-label": props.label }),
        ],
      }),
    });
    if (props.handle) {
      props.handle.current = {
        get: () => view.state.doc.toString(),
        set: (text) => view.dispatch({ changes: { from: 0, to: view.state.doc.length, insert: text } }),
      };
    }
    return () => view.destroy();
  }, [props.value, props.readOnly]);
  return <div class="editor" id={props.id} ref={host} />;
}

/** The text parsed as JSON, or the parse error's message. */
export function parseJson(text: string): { ok: true; value: any } | { ok: false; message: string } {
  try {
    return { ok: true, value: JSON.parse(text) };
  } catch (e) {
    return { ok: false, message: (e as Error).message };
  }
}
