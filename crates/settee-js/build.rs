//! Bundles the CoffeeScript compiler (the npm package pinned by
//! `coffee/package-lock.json`) into `OUT_DIR/coffee.js`: one JavaScript
//! expression whose value is the compiler's module object
//! (`{compile, VERSION, …}`), for the contexts of design documents whose
//! `language` is `coffeescript` (see `src/runtime.rs`).
//!
//! - `npm ci` runs in `coffee/` only when its `node_modules` was not
//!   installed from this very lockfile (a copy of the lockfile in it is the
//!   stamp), so builds are made from exactly the pinned package and a
//!   rebuild costs no network.
//! - The bundle is the package's CommonJS modules (`lib/coffee-script/`)
//!   each wrapped in a function, with a `require` that resolves them by
//!   name; Node's own modules (`fs`, `vm`, `path`, `module`), which only the
//!   compiler's command-line and `require` hooks use, are empty objects.
//!   `compile` needs none of them.
//!
//! Nothing it writes is committed: `OUT_DIR` is cargo's, `node_modules` is
//! ignored by git.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The compiler's modules `compile` reaches (the others are the command
/// line, the REPL, Node's `require` hook and the grammar's generator; one
/// of them asked for answers "no module").
const MODULES: &[&str] = &[
    "coffee-script",
    "lexer",
    "parser",
    "rewriter",
    "nodes",
    "scope",
    "helpers",
    "sourcemap",
];

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let coffee = manifest.join("coffee");
    for p in ["package.json", "package-lock.json"] {
        println!("cargo:rerun-if-changed={}", coffee.join(p).display());
    }
    install(&coffee);
    let package = coffee.join("node_modules/coffee-script");
    let version = package_version(&package);
    let mut out = String::from("(function () {\n  var defs = {};\n");
    for m in MODULES {
        let path = package.join("lib/coffee-script").join(format!("{m}.js"));
        let source = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!("{}: {e} (coffee/node_modules incomplete?)", path.display())
        });
        out.push_str(&format!(
            "  defs[{m:?}] = function (exports, require, module) {{\n{source}\n}};\n"
        ));
    }
    out.push_str(&format!(
        r#"  var cache = {{}};
  var node = {{ fs: {{}}, vm: {{}}, path: {{}}, module: {{}} }};
  function load(name) {{
    if (name === "../../package.json") return {{ version: {version:?} }};
    if (Object.prototype.hasOwnProperty.call(node, name)) return node[name];
    var key = name.replace(/^\.\//, "");
    if (Object.prototype.hasOwnProperty.call(cache, key)) return cache[key].exports;
    if (!Object.prototype.hasOwnProperty.call(defs, key)) throw new Error("no module " + name);
    var module = {{ exports: {{}} }};
    cache[key] = module;
    defs[key].call(module.exports, module.exports, load, module);
    return module.exports;
  }}
  return load("./coffee-script");
}})()
"#
    ));
    let dest = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("coffee.js");
    std::fs::write(&dest, out).expect("write coffee.js");
}

/// `npm ci` unless `node_modules` was installed from this very lockfile.
fn install(dir: &Path) {
    let lock = std::fs::read(dir.join("package-lock.json"))
        .expect("coffee/package-lock.json (the pinned CoffeeScript compiler)");
    let stamp = dir.join("node_modules/.settee-lock");
    if std::fs::read(&stamp).is_ok_and(|s| s == lock) {
        return;
    }
    let status = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(dir)
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("npm ci in crates/settee-js/coffee failed: {s}"),
        Err(e) => {
            panic!("npm ci could not start (node and npm come from scripts/ensure-deps): {e}")
        }
    }
    std::fs::write(&stamp, lock).expect("write node_modules/.settee-lock");
}

/// The installed package's version, from its package.json.
fn package_version(package: &Path) -> String {
    let text = std::fs::read_to_string(package.join("package.json")).expect("package.json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("package.json is JSON");
    v["version"].as_str().expect("a version").to_string()
}
