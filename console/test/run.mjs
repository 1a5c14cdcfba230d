// Unit tests of the console's own logic (the modules that need no DOM):
// each test/*.test.ts is bundled by esbuild into a temporary directory
// and run by Node's test runner. `npm test`; crates/settee-console's
// tests/ui_unit.rs runs it under `cargo test`.
import { build } from "esbuild";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { spawnSync } from "node:child_process";

const dir = mkdtempSync(join(tmpdir(), "settee-console-test-"));
try {
  const tests = readdirSync("test").filter((f) => f.endsWith(".test.ts"));
  await build({
    entryPoints: tests.map((f) => join("test", f)),
    bundle: true,
    platform: "node",
    format: "esm",
    outdir: dir,
    outExtension: { ".js": ".mjs" },
    jsx: "automatic",
    jsxImportSource: "preact",
    logLevel: "warning",
  });
  const files = readdirSync(dir).map((f) => join(dir, f));
  const r = spawnSync(process.execPath, ["--test", ...files], { stdio: "inherit" });
  process.exitCode = r.status ?? 1;
} finally {
  rmSync(dir, { recursive: true, force: true });
}
