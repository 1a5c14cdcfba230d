// Builds the console into the directory named by the first argument
// (crates/settee-console/build.rs passes OUT_DIR/dist): one script and one
// stylesheet named by their content's hash, and index.html naming them.
import { build } from "esbuild";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { basename, join } from "node:path";

const out = process.argv[2];
if (!out) {
  console.error("usage: node build.mjs OUT_DIR");
  process.exit(2);
}
mkdirSync(out, { recursive: true });
const result = await build({
  entryPoints: ["src/main.tsx"],
  bundle: true,
  minify: true,
  format: "esm",
  target: ["es2020"],
  jsx: "automatic",
  jsxImportSource: "preact",
  entryNames: "[name]-[hash]",
  outdir: out,
  metafile: true,
  legalComments: "none",
  logLevel: "warning",
});
const outputs = Object.keys(result.metafile.outputs).map((p) => basename(p));
const js = outputs.find((p) => p.endsWith(".js"));
const css = outputs.find((p) => p.endsWith(".css"));
if (!js || !css) {
  console.error("build.mjs: esbuild wrote no script or no stylesheet", outputs);
  process.exit(1);
}
const html = readFileSync("index.html", "utf8")
  .replace("%SCRIPT%", `/_utils/${js}`)
  .replace("%STYLE%", `/_utils/${css}`);
writeFileSync(join(out, "index.html"), html);
