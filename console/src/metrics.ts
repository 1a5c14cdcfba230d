// Pure helpers of the stats page (no DOM): counters sampled over time
// become per-second rates.

/** Per-second rates of `field` between consecutive samples (one fewer
 * than the samples; a counter that went back, as after a restart, is 0). */
export function rates<S extends { t: number }>(samples: S[], field: (s: S) => number): number[] {
  return samples.slice(1).map((s, i) => {
    const dt = s.t - samples[i].t;
    return dt > 0 ? Math.max(0, (field(s) - field(samples[i])) / dt) : 0;
  });
}

/** p50/p95/p99 from a `request_time` histogram's `percentile` pairs. */
export function latency(pairs: unknown): { p50: number; p95: number; p99: number } {
  const at = (p: number) => {
    const hit = Array.isArray(pairs) ? pairs.find((x) => Array.isArray(x) && x[0] === p) : undefined;
    return typeof hit?.[1] === "number" ? hit[1] : 0;
  };
  return { p50: at(50), p95: at(95), p99: at(99) };
}
