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
