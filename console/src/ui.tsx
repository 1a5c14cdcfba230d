// Small shared pieces: errors shown as the server's reason, a
// confirmation that asks in the page (never a blocking dialog), paging.
import { useState } from "preact/hooks";
import type { ComponentChildren } from "preact";
import { ApiError } from "./api";

export function ErrorBox({ error }: { error: unknown }) {
  if (!error) return null;
  const text =
    error instanceof ApiError
      ? error.reason
        ? `${error.reason} (${error.error})`
        : error.error
      : String((error as Error)?.message ?? error);
  return (
    <p class="error" role="alert">
      {text}
    </p>
  );
}

/** A button that asks "are you sure" in place before it acts. */
export function ConfirmButton(props: {
  label: string;
  question: string;
  onConfirm: () => void | Promise<void>;
  danger?: boolean;
  id?: string;
}) {
  const [asking, setAsking] = useState(false);
  if (!asking) {
    return (
      <button id={props.id} class={props.danger ? "danger" : ""} onClick={() => setAsking(true)}>
        {props.label}
      </button>
    );
  }
  return (
    <span class="confirm">
      {props.question}{" "}
      <button
        class="danger"
        autoFocus
        onClick={async () => {
          setAsking(false);
          await props.onConfirm();
        }}
      >
        Yes, {props.label.toLowerCase()}
      </button>{" "}
      <button onClick={() => setAsking(false)}>Cancel</button>
    </span>
  );
}

export function Pager(props: {
  page: number;
  hasNext: boolean;
  onPrev: () => void;
  onNext: () => void;
  perPage: number;
  onPerPage: (n: number) => void;
  children?: ComponentChildren;
}) {
  return (
    <div class="pager">
      <button disabled={props.page === 0} onClick={props.onPrev} aria-label="Previous page">
        ‹ Previous
      </button>
      <span>Page {props.page + 1}</span>
      <button disabled={!props.hasNext} onClick={props.onNext} aria-label="Next page">
        Next ›
      </button>
      <label>
        Per page{" "}
        <select
          value={String(props.perPage)}
          onChange={(e) => props.onPerPage(Number((e.target as HTMLSelectElement).value))}
        >
          {[10, 20, 50, 100].map((n) => (
            <option value={String(n)}>{n}</option>
          ))}
        </select>
      </label>
      {props.children}
    </div>
  );
}

/** A short JSON rendering of any value, for table cells. */
export function short(v: unknown, max = 80): string {
  const s = typeof v === "string" ? v : JSON.stringify(v);
  if (s === undefined) return "";
  return s.length > max ? s.slice(0, max - 1) + "…" : s;
}
