// The server in charts: `/_node/_local/_stats` and `/_system` polled
// every 2 s; counters become rates between two samples. The last five
// minutes are kept (in this page only: nothing is stored).
import { useEffect, useRef, useState } from "preact/hooks";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import { api, bytes } from "../api";
import { ErrorBox } from "../ui";
import { latency, rates } from "../metrics";

const POLL_MS = 2000;
const KEEP = 150;

interface Sample {
  t: number; // seconds
  requests: number;
  reads: number;
  writes: number;
  s2xx: number;
  s4xx: number;
  s5xx: number;
  mem: Record<string, number>;
  uptime: number;
  // Request time percentiles over the server's last 10 s, in ms.
  p50: number;
  p95: number;
  p99: number;
}

function sample(stats: any, sys: any): Sample {
  const c = stats.couchdb ?? {};
  const codes = c.httpd_status_codes ?? {};
  const sum = (first: string) =>
    Object.entries(codes).reduce((n, [k, v]: [string, any]) => (k.startsWith(first) ? n + (v.value ?? 0) : n), 0);
  return {
    t: Date.now() / 1000,
    requests: c.httpd?.requests?.value ?? 0,
    reads: c.database_reads?.value ?? 0,
    writes: c.database_writes?.value ?? 0,
    s2xx: sum("2"),
    s4xx: sum("4"),
    s5xx: sum("5"),
    mem: sys.memory ?? {},
    uptime: sys.uptime ?? 0,
    ...latency(c.request_time?.value?.percentile),
  };
}

export function Stats() {
  const [samples, setSamples] = useState<Sample[]>([]);
  const [error, setError] = useState<unknown>(null);
  useEffect(() => {
    let live = true;
    const load = async () => {
      try {
        const [st, sys] = await Promise.all([api("GET", "/_node/_local/_stats"), api("GET", "/_node/_local/_system")]);
        if (live) {
          setSamples((old) => [...old, sample(st, sys)].slice(-KEEP));
          setError(null);
        }
      } catch (e) {
        if (live) setError(e);
      }
    };
    load();
    const t = setInterval(load, POLL_MS);
    return () => { live = false; clearInterval(t); };
  }, []);
  const times = samples.slice(1).map((s) => s.t);
  const last = samples[samples.length - 1];
  const memKeys = last ? Object.keys(last.mem) : [];
  return (
    <section>
      <h1>Server stats</h1>
      <ErrorBox error={error} />
      <p class="muted">
        Sampled every {POLL_MS / 1000} s while this page is open{last ? `; up ${Math.round(last.uptime)} s` : ""}.
        Scrapers read the same numbers at{" "}
        <a id="prometheus-link" href="/_node/_local/_prometheus">/_node/_local/_prometheus</a>.
      </p>
      {samples.length < 2 ? (
        <p>Collecting…</p>
      ) : (
        <div class="charts">
          <Chart id="chart-requests" title="HTTP requests per second" unit="/s" x={times}
            series={[["requests", rates(samples, (s) => s.requests)]]} />
          <Chart id="chart-docs" title="Documents read and written per second" unit="/s" x={times}
            series={[["read", rates(samples, (s) => s.reads)], ["written", rates(samples, (s) => s.writes)]]} />
          <Chart id="chart-latency" title="Request time (last 10 s)" unit=" ms" x={samples.map((s) => s.t)}
            series={[["p50", samples.map((s) => s.p50)], ["p95", samples.map((s) => s.p95)], ["p99", samples.map((s) => s.p99)]]} />
          <Chart id="chart-status" title="Responses per second by status" unit="/s" x={times}
            series={[["2xx", rates(samples, (s) => s.s2xx)], ["4xx", rates(samples, (s) => s.s4xx)], ["5xx", rates(samples, (s) => s.s5xx)]]} />
          <Chart id="chart-memory" title="Memory" unit="B" x={samples.map((s) => s.t)}
            series={memKeys.map((k) => [k, samples.map((s) => s.mem[k] ?? 0)] as [string, number[]])} />
        </div>
      )}
    </section>
  );
}

const COLORS = ["#8a4b14", "#1a73e8", "#b3261e", "#2e7d32", "#6a1b9a"];

function Chart(props: { id: string; title: string; unit: string; x: number[]; series: [string, number[]][] }) {
  const host = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const names = props.series.map(([n]) => n).join(",");
  const data = [props.x, ...props.series.map(([, v]) => v)] as uPlot.AlignedData;
  // Milliseconds of fast requests need more than one decimal.
  const digits = props.unit === " ms" ? 2 : 1;
  useEffect(() => {
    const fmt = (v: number | null) => (v === null ? "–" : props.unit === "B" ? bytes(v) : `${v.toFixed(digits)}${props.unit}`);
    const opts: uPlot.Options = {
      width: Math.max(280, host.current!.clientWidth - 8),
      height: 180,
      series: [{}, ...props.series.map(([label], i) => ({ label, stroke: COLORS[i % COLORS.length], width: 2, value: (_u: uPlot, v: number | null) => fmt(v) }))],
      axes: [{}, { values: (_u: uPlot, vs: number[]) => vs.map((v) => fmt(v)), size: 70 }],
      scales: { y: { range: (_u: uPlot, _min: number, max: number) => [0, Math.max(1, max * 1.1)] } },
    };
    plot.current = new uPlot(opts, data, host.current!);
    return () => plot.current?.destroy();
  }, [names]);
  useEffect(() => {
    plot.current?.setData(data);
  });
  const now = props.series.map(([n, v]) => {
    const x = v[v.length - 1] ?? 0;
    return `${n} ${props.unit === "B" ? bytes(x) : x.toFixed(digits) + props.unit}`;
  });
  return (
    <div class="card chart">
      <h3>{props.title}</h3>
      <p class="mono" id={`${props.id}-now`}>{now.join(", ")}</p>
      <div ref={host} id={props.id} />
    </div>
  );
}
