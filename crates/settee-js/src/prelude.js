// The query-server environment of one design document, evaluated once in a
// fresh QuickJS context of its own (see runtime.rs). Written for this crate,
// after CouchDB's documented behaviour; no CouchDB source is copied.
//
// This file is a single function expression. runtime.rs calls it with
//   (ddocJson, tick, reduceLimit, logLinesMax, coffeeCompile)
// where coffeeCompile is CoffeeScript's compile function for a design
// document whose language is "coffeescript" (null otherwise): every function
// source is then CoffeeScript, translated to JavaScript before compiling.
// and keeps the object it returns: the *driver*. User code never sees the
// driver, the compiled-function table or the log buffer: they live in this
// closure. What user code does see is what CouchDB's sandbox offers: the
// globals emit, log, sum, toJSON, isArray, JSON, and `require` (bound per
// compiled function).
//
// Every driver method returns one string: a header line, "\n", then a body.
// The header is JSON: [functionsCompiledSinceLastHeader, logLines, logLinesDropped].
// Errors leave as exceptions; an error CouchDB names is thrown as the array
// ["error", name, reason] (the query-server protocol's form), anything else
// is the JavaScript exception itself.
//
// Deliberately sloppy mode (no "use strict"): CouchDB runs design functions
// in sloppy mode, where writing to a sealed document is silently ignored.
(function (ddocJson, tick, reduceLimit, logLinesMax, coffeeCompile) {
  var global = globalThis;
  // Built-ins captured before any user code runs, so a design function that
  // replaces JSON.stringify or Array.prototype.push cannot change how the
  // driver reads its inputs or writes its results.
  var parse = JSON.parse;
  var stringify = JSON.stringify;
  var freeze = Object.freeze;
  var ownKeys = Reflect.ownKeys;
  var hasOwn = Function.prototype.call.bind(Object.prototype.hasOwnProperty);
  var objectToString = Function.prototype.call.bind(Object.prototype.toString);
  var apply = Reflect.apply;
  var InternalErrorCtor = global.InternalError;
  // Indirect eval: compiles at global scope, seeing only globals.
  var globalEval = global.eval;

  var ddoc = parse(ddocJson);
  var ddocId = typeof ddoc._id === "string" ? ddoc._id : "";

  // --- Log buffer -----------------------------------------------------------
  var logs = [];
  var logsDropped = 0;
  var compiledCount = 0;
  function pushLog(line) {
    if (logs.length < logLinesMax) logs[logs.length] = line;
    else logsDropped++;
  }
  function header() {
    var h = stringify([compiledCount, logs, logsDropped]);
    compiledCount = 0;
    logs = [];
    logsDropped = 0;
    return h;
  }

  // --- Helpers CouchDB gives design functions --------------------------------
  // An Error does not serialise to anything useful; CouchDB turns one into
  // {error: name, message: message} when it is emitted or logged.
  function errorToJson(e) {
    if (typeof e === "object" && e !== null && "stack" in e && "name" in e && "message" in e) {
      return { error: e.name, message: e.message };
    }
    return e;
  }
  function errstr(e) {
    if (typeof e === "object" && e !== null && "name" in e && "message" in e) {
      return String(e.name) + ": " + String(e.message);
    }
    if (typeof e === "string") return e;
    try {
      var s = stringify(e);
      if (typeof s === "string") return s;
    } catch (_) {}
    return String(e);
  }

  // emit's behaviour depends on what the driver is doing: collecting rows
  // for a map (emitRows), or only noting that something was emitted, for a
  // view used as a changes filter (emitFlag). Outside both it does nothing.
  var emitRows = null;
  var emitFlag = false;
  // The _id of the document being worked on, reported with a timeout.
  var currentId = null;
  var emitted = false;
  function emit(key, value) {
    if (emitRows !== null) emitRows[emitRows.length] = [key, errorToJson(value)];
    else if (emitFlag) emitted = true;
  }
  function log(message) {
    if (typeof message !== "string") message = stringify(errorToJson(message));
    pushLog(String(message));
  }
  function sum(values) {
    var total = 0;
    for (var i in values) total += values[i];
    return total;
  }
  function isArray(obj) {
    return objectToString(obj) === "[object Array]";
  }
  global.emit = emit;
  global.log = log;
  global.sum = sum;
  global.toJSON = stringify;
  global.isArray = isArray;

  // index(...) of search index functions (Nouveau's index(type, name,
  // value, options), Clouseau's index(name, value, options)): the calls
  // are collected as they were made, arguments and all, for the engine's
  // caller to check; outside an index call it does nothing.
  var indexCalls = null;
  function index() {
    if (indexCalls === null) return;
    var args = new Array(arguments.length);
    for (var i = 0; i < arguments.length; i++) args[i] = arguments[i];
    indexCalls[indexCalls.length] = args;
  }
  global.index = index;

  // Seal a document, and everything in it, before map functions see it, so
  // that no map function can change what the next one gets. Documents come
  // from JSON.parse: a tree of plain objects and arrays, no cycles, no
  // shared parts, no functions, so no "already frozen" check is needed.
  // (Sealing costs about as much as parsing; see the ADR.)
  function deepFreeze(o) {
    freeze(o);
    var keys = ownKeys(o);
    for (var i = 0; i < keys.length; i++) {
      var v = o[keys[i]];
      if (typeof v === "object" && v !== null) deepFreeze(v);
    }
  }

  // --- CommonJS modules ------------------------------------------------------
  // require(path) resolves `path` against `root` (the design document, or for
  // map functions only {views: {lib: ddoc.views.lib}}), evaluates the string
  // found there as a module body once, and returns its exports. Paths may use
  // "." and ".." relative to the requiring module. A module required again
  // while it is still being evaluated (a cycle) gets the empty object that
  // stands in for it meanwhile, as in CouchDB.
  function requireError(reason) {
    return ["error", "invalid_require_path", reason];
  }
  function resolve(names, mod, root) {
    if (names.length === 0) {
      if (typeof mod.current !== "string") {
        throw requireError("Must require a JavaScript string, not: " + typeof mod.current);
      }
      return { current: mod.current, parent: mod.parent, id: mod.id, exports: {} };
    }
    var n = names.shift();
    if (n === "..") {
      if (!(mod && mod.parent && mod.parent.parent)) {
        throw requireError("Object has no parent " + stringify(mod ? mod.current : undefined));
      }
      return resolve(names, {
        id: mod.id.slice(0, mod.id.lastIndexOf("/")),
        parent: mod.parent.parent,
        current: mod.parent.current,
      });
    }
    if (n === ".") {
      if (!(mod && mod.parent)) {
        throw requireError("Object has no parent " + stringify(mod ? mod.current : undefined));
      }
      return resolve(names, { parent: mod.parent, current: mod.current, id: mod.id });
    }
    if (root) mod = { current: root };
    var here = mod.current;
    if (here === null || typeof here !== "object" || here[n] === undefined) {
      throw requireError('Object has no property "' + n + '". ' + stringify(here));
    }
    return resolve(names, { current: here[n], parent: mod, id: mod.id ? mod.id + "/" + n : n });
  }
  function makeRequire(root, cache) {
    function requireFrom(name, requiring) {
      var target = resolve(String(name).split("/"), requiring ? requiring.parent : undefined, root);
      var id = target.id;
      if (!hasOwn(cache, id)) {
        cache[id] = {};
        try {
          var body = globalEval("(function (module, exports, require) { " + target.current + "\n })");
          body.call(global, target, target.exports, function require(n) {
            return requireFrom(n, target);
          });
        } catch (e) {
          // Unlike CouchDB, a module that failed is not remembered as {}:
          // the next require evaluates it again and reports the error again.
          delete cache[id];
          throw ["error", "compilation_error", "Module require('" + name + "') raised error " + errstr(e)];
        }
        cache[id] = target.exports;
      }
      return cache[id];
    }
    return function require(name) {
      return requireFrom(name, undefined);
    };
  }

  // --- Compiling design functions -------------------------------------------
  // CouchDB evaluates a function's source as an expression. Accepted here:
  // an expression (`function (doc) {...}`, named or not, with comments or
  // whitespace around it), the same followed by semicolons, and a program
  // whose completion value is a function (`var x = 1; (function (doc) {...})`).
  var compileIn = globalEval(
    "(function (source, require) { return eval(source); })"
  );
  // A source whose evaluation was stopped by the call's deadline (it runs
  // an endless loop at the top level, `"while(true){}"`) is remembered, so
  // compiling it again fails at once with the same timeout instead of
  // spending the whole deadline again (a client retrying such a design
  // document would otherwise hold a worker for the deadline each time).
  // The deadline cannot be caught, so the mark set before evaluating is
  // still set at the next compilation when the last one was stopped.
  var compilingSource = null;
  var hangingSources = new Set();
  var HANGING_SOURCES_MAX = 64;
  function compileSource(source, require) {
    if (compilingSource !== null) {
      if (hangingSources.size < HANGING_SOURCES_MAX) hangingSources.add(compilingSource);
      compilingSource = null;
    }
    if (typeof source !== "string") {
      throw ["error", "compilation_error", "A design function must be a string of JavaScript source, not: " + typeof source];
    }
    if (hangingSources.has(source)) {
      var stopped = new Error("interrupted");
      stopped.name = "InternalError";
      throw stopped;
    }
    var written = source;
    if (coffeeCompile !== null) {
      // `bare`: no wrapper function, so the translation of `(doc) -> …`
      // is the function expression itself.
      try {
        source = coffeeCompile(written, { bare: true });
      } catch (e) {
        throw ["error", "compilation_error", errstr(e) + " (" + written + ")"];
      }
    }
    compilingSource = written;
    var fn;
    var firstError = null;
    var attempts = ["(" + source + "\n)", "(" + source.replace(/[\s;]+$/, "") + "\n)", source];
    for (var i = 0; i < attempts.length; i++) {
      try {
        fn = compileIn(attempts[i], require);
        firstError = null;
        break;
      } catch (e) {
        if (firstError === null) firstError = e;
        if (!(e instanceof SyntaxError)) break;
      }
    }
    compilingSource = null;
    if (firstError !== null) {
      throw ["error", "compilation_error", errstr(firstError) + " (" + written + ")"];
    }
    if (typeof fn !== "function") {
      throw ["error", "compilation_error", "Expression does not eval to a function. (" + written + ")"];
    }
    compiledCount++;
    return fn;
  }

  var ddocModules = {};
  var ddocRequire = makeRequire(ddoc, ddocModules);
  var compiled = new Map();
  function missing(kind, name) {
    return ["error", "not_found", "missing " + kind + " function " + name + " on design doc " + ddocId];
  }
  function viewOf(name) {
    var views = ddoc.views;
    var view = views !== null && typeof views === "object" && hasOwn(views, name) ? views[name] : undefined;
    return view !== null && typeof view === "object" ? view : undefined;
  }
  // key: what the function is for; lookup finds its source; require: the
  // require it gets (or undefined for reduce functions, which have none).
  function fun(key, lookup, kind, name, requireFor) {
    var f = compiled.get(key);
    if (f !== undefined) return f;
    var source = lookup();
    if (source === undefined || source === null || source === "") throw missing(kind, name);
    f = compileSource(source, requireFor ? requireFor() : undefined);
    compiled.set(key, f);
    return f;
  }
  // Map functions get their own module cache and see only views.lib, as in CouchDB.
  function mapRequire() {
    var lib = ddoc.views && ddoc.views.lib;
    return makeRequire({ views: { lib: lib } }, {});
  }
  function mapFun(name) {
    return fun("map\u0000" + name, function () {
      var v = viewOf(name);
      return v && v.map;
    }, "views", name, mapRequire);
  }
  // Search index functions: ddoc[section][name].index (section "nouveau"
  // or "indexes"); they see the whole design document's require, as
  // CouchDB's search index functions do.
  function indexFun(section, name) {
    return fun("index\u0000" + section + "\u0000" + name, function () {
      var all = ddoc[section];
      var def = all !== null && typeof all === "object" && hasOwn(all, name) ? all[name] : undefined;
      return def !== null && typeof def === "object" ? def.index : undefined;
    }, section, name, function () { return ddocRequire; });
  }
  function reduceFun(name) {
    return fun("reduce\u0000" + name, function () {
      var v = viewOf(name);
      return v && v.reduce;
    }, "reduce", name, null);
  }
  function filterViewFun(name) {
    return fun("filter_view\u0000" + name, function () {
      var v = viewOf(name);
      return v && v.map;
    }, "views", name, function () { return ddocRequire; });
  }
  function filterFun(name) {
    return fun("filters\u0000" + name, function () {
      var f = ddoc.filters;
      return f !== null && typeof f === "object" && hasOwn(f, name) ? f[name] : undefined;
    }, "filters", name, function () { return ddocRequire; });
  }
  function validateFun() {
    return fun("validate_doc_update", function () {
      return ddoc.validate_doc_update;
    }, "validate_doc_update", "validate_doc_update", function () { return ddocRequire; });
  }

  // Errors that stop a whole map or reduce call, as they stop CouchDB's
  // indexer: the "fatal_error" string, a ["fatal", ...] array, and engine
  // failures (out of memory, stack overflow; an interrupt cannot be caught).
  function isFatal(err) {
    if (err === "fatal_error") return true;
    if (isArray(err) && err[0] === "fatal") return true;
    if (InternalErrorCtor !== undefined && err instanceof InternalErrorCtor) return true;
    if (err instanceof RangeError && err.message === "Maximum call stack size exceeded") return true;
    return false;
  }
  function rethrowFatal(err) {
    if (err === "fatal_error") throw ["error", "map_runtime_error", "function raised 'fatal_error'"];
    if (isArray(err)) throw ["error", String(err[1]), String(err[2])];
    throw err;
  }

  // The driver's loop over a call's documents (map, index): each one
  // sealed before `perDoc` sees it, its deadline renewed, its id kept for
  // a timeout's report; `perDoc` returns the document's line.
  function eachDoc(docsJson, perDoc) {
    var docs = parse(docsJson);
    var out = new Array(docs.length);
    for (var d = 0; d < docs.length; d++) {
      tick();
      var doc = docs[d];
      docs[d] = undefined;
      currentId = docId(doc);
      deepFreeze(doc);
      var line = perDoc(doc);
      out[d] = typeof line === "string" ? line : "[]";
    }
    currentId = null;
    return header() + "\n" + out.join("\n");
  }

  function docId(doc) {
    return doc !== null && typeof doc === "object" ? doc._id : undefined;
  }

  // --- Rendering: show functions ---------------------------------------------
  // Formats by name and their MIME types, as CouchDB registers them;
  // registerType() adds more (they stay for the context's life, as in a
  // CouchDB query server process).
  var slice = Function.prototype.call.bind(Array.prototype.slice);
  var mimesByKey = {};
  var keysByMime = {};
  function registerType(key) {
    var mimes = slice(arguments, 1);
    mimesByKey[key] = mimes;
    for (var i = 0; i < mimes.length; i++) keysByMime[mimes[i]] = key;
  }
  registerType("all", "*/*");
  registerType("text", "text/plain; charset=utf-8", "txt");
  registerType("html", "text/html; charset=utf-8");
  registerType("xhtml", "application/xhtml+xml", "xhtml");
  registerType("xml", "application/xml", "text/xml", "application/x-xml");
  registerType("js", "text/javascript", "application/javascript", "application/x-javascript");
  registerType("css", "text/css");
  registerType("ics", "text/calendar");
  registerType("csv", "text/csv");
  registerType("rss", "application/rss+xml");
  registerType("atom", "application/atom+xml");
  registerType("yaml", "application/x-yaml", "text/yaml");
  registerType("multipart_form", "multipart/form-data");
  registerType("url_encoded_form", "application/x-www-form-urlencoded");
  registerType("json", "application/json", "text/x-json");

  // What a render function set up with provides(), send() and start().
  var providers = [];
  var chunks = [];
  var startResp = null;
  function provides(type, fun) {
    providers[providers.length] = [type, fun];
  }
  function send(chunk) {
    chunks[chunks.length] = String(chunk);
  }
  function start(resp) {
    startResp = resp || {};
  }
  function resetRender() {
    providers = [];
    chunks = [];
    startResp = null;
  }
  global.registerType = registerType;
  global.provides = provides;
  global.send = send;
  global.start = start;
  global.getRow = function () { return null; };

  // A media range "type/sub; p=v; q=0.5" as [type, sub, params].
  function mediaRange(text) {
    var parts = String(text).split(";");
    var params = {};
    for (var i = 1; i < parts.length; i++) {
      var eq = parts[i].indexOf("=");
      if (eq > 0) params[parts[i].slice(0, eq).trim()] = parts[i].slice(eq + 1).trim();
    }
    var full = parts[0].trim();
    if (full === "*") full = "*/*";
    var slash = full.indexOf("/");
    var q = parseFloat(params.q);
    if (!(q >= 0 && q <= 1)) params.q = "1";
    return slash < 0 ? [full, "", params] : [full.slice(0, slash), full.slice(slash + 1), params];
  }
  // How well `mime` fits the ranges of an Accept header: [fitness, q]
  // (fitness: 100 for the type, 10 for the subtype, 1 per parameter).
  function fitness(mime, ranges) {
    var target = mediaRange(mime);
    var best = -1;
    var bestQ = 0;
    for (var i = 0; i < ranges.length; i++) {
      var r = ranges[i];
      var typeOk = r[0] === target[0] || r[0] === "*" || target[0] === "*";
      var subOk = r[1] === target[1] || r[1] === "*" || target[1] === "*";
      if (!typeOk || !subOk) continue;
      var f = (r[0] === target[0] ? 100 : 0) + (r[1] === target[1] ? 10 : 0);
      for (var p in target[2]) {
        if (p !== "q" && hasOwn(r[2], p) && r[2][p] === target[2][p]) f += 1;
      }
      if (f > best) {
        best = f;
        bestQ = parseFloat(r[2].q);
      }
    }
    return [best, bestQ];
  }
  // The provider a request wants: by ?format=, else by Accept (the best
  // fitness, then quality, as CouchDB ranks them), else the first provided.
  function chooseProvider(req) {
    var query = req.query || {};
    var accept = req.headers ? req.headers.Accept : undefined;
    var key = null;
    var contentType = null;
    var supported = [];
    if (query.format) {
      key = query.format;
      contentType = mimesByKey[key][0];
    } else if (accept) {
      var ranges = String(accept).split(",");
      for (var i = 0; i < ranges.length; i++) ranges[i] = mediaRange(ranges[i]);
      // CouchDB lists the types of the formats provided last first, and of
      // equally good matches takes the last one listed.
      var best = null;
      for (var k = providers.length - 1; k >= 0; k--) {
        var mimes = mimesByKey[providers[k][0]];
        if (!mimes) continue;
        for (var m = 0; m < mimes.length; m++) {
          supported[supported.length] = mimes[m];
          var fq = fitness(mimes[m], ranges);
          if (best === null || fq[0] > best[0] || (fq[0] === best[0] && fq[1] >= best[1])) {
            best = fq;
            contentType = mimes[m];
          }
        }
      }
      if (best !== null && best[1] > 0) key = keysByMime[contentType];
      else contentType = null;
    } else if (providers.length > 0) {
      key = providers[0][0];
      contentType = mimesByKey[key] ? mimesByKey[key][0] : null;
    }
    for (var j = 0; j < providers.length; j++) {
      if (providers[j][0] === key) return [providers[j][1], contentType];
    }
    throw ["error", "not_acceptable", "Content-Type " + (accept || key) +
      " not supported, try one of: " + supported.join(", ")];
  }
  function wrapResponse(resp) {
    return typeof resp === "string" ? { body: resp } : resp;
  }
  // A thrown value as SpiderMonkey's toSource() writes it (CouchDB's
  // render errors quote it so).
  function source(v, nested) {
    if (typeof v === "string") return nested ? stringify(v) : "(new String(" + stringify(v) + "))";
    if (typeof v === "number" || typeof v === "boolean") {
      return nested ? String(v) : "(new " + (typeof v === "number" ? "Number" : "Boolean") + "(" + String(v) + "))";
    }
    if (v === null) return "null";
    if (v === undefined) return "(void 0)";
    if (typeof v === "function") return "(function)";
    if (isArray(v)) {
      var items = [];
      for (var i = 0; i < v.length; i++) items[i] = source(v[i], true);
      return "[" + items.join(", ") + "]";
    }
    if (v instanceof Error) return "(new " + v.name + "(" + stringify(String(v.message)) + "))";
    var parts = [];
    var keys = ownKeys(v);
    for (var k = 0; k < keys.length; k++) {
      var key = String(keys[k]);
      var name = /^[A-Za-z_$][A-Za-z0-9_$]*$/.test(key) ? key : stringify(key);
      parts[parts.length] = name + ":" + source(v[key], true);
    }
    var text = "{" + parts.join(", ") + "}";
    return nested ? text : "(" + text + ")";
  }
  // What a render function threw, as the query server reports it: arrays
  // ["error", name, reason] as they are, engine failures as they are,
  // anything else as a render_error.
  function renderError(err) {
    if (isArray(err) && err[0] === "error") return err;
    if (InternalErrorCtor !== undefined && err instanceof InternalErrorCtor) return err;
    var stack = err !== null && typeof err === "object" && typeof err.stack === "string" ? err.stack : "undefined";
    return ["error", "render_error", "function raised error: " + source(err, false) + " \nstacktrace: " + stack];
  }
  function updateFun(name) {
    return fun("updates\u0000" + name, function () {
      var updates = ddoc.updates;
      return updates !== null && typeof updates === "object" && hasOwn(updates, name) ? updates[name] : undefined;
    }, "updates", name, function () { return ddocRequire; });
  }
  function rewriteFun() {
    return fun("rewrites", function () {
      return ddoc.rewrites;
    }, "rewrites", "rewrites", function () { return ddocRequire; });
  }
  function listFun(name) {
    return fun("lists\u0000" + name, function () {
      var lists = ddoc.lists;
      return lists !== null && typeof lists === "object" && hasOwn(lists, name) ? lists[name] : undefined;
    }, "lists", name, function () { return ddocRequire; });
  }
  function showFun(name) {
    return fun("shows\u0000" + name, function () {
      var shows = ddoc.shows;
      return shows !== null && typeof shows === "object" && hasOwn(shows, name) ? shows[name] : undefined;
    }, "shows", name, function () { return ddocRequire; });
  }

  // --- The driver --------------------------------------------------------------
  return {
    // The source being compiled when the last call was stopped (null when
    // none was): the engine remembers it beyond this context.
    hanging: function () {
      return compilingSource;
    },
    // Sources the engine knows to loop when compiled (a JSON array), from
    // other contexts and earlier runtimes.
    rememberHanging: function (listJson) {
      var list = parse(listJson);
      for (var i = 0; i < list.length; i++) {
        if (hangingSources.size >= HANGING_SOURCES_MAX) {
          hangingSources.delete(hangingSources.values().next().value);
        }
        hangingSources.add(list[i]);
      }
    },
    // Compiles the named map functions (a ["error", "compilation_error"|"not_found", ...]
    // is thrown for the first that fails) so that a call fails before any document.
    map: function (namesJson, docsJson) {
      var names = parse(namesJson);
      var funs = new Array(names.length);
      for (var i = 0; i < names.length; i++) funs[i] = mapFun(names[i]);
      return eachDoc(docsJson, function (doc) {
        var perView = new Array(funs.length);
        for (var f = 0; f < funs.length; f++) {
          var rows = [];
          emitRows = rows;
          try {
            funs[f](doc);
          } catch (err) {
            emitRows = null;
            if (isFatal(err)) rethrowFatal(err);
            pushLog("function raised exception " + errstr(err) + " with doc._id " + docId(doc) + " (view " + names[f] + ")");
            rows = [];
          }
          emitRows = null;
          perView[f] = rows;
        }
        try {
          return stringify(perView);
        } catch (err) {
          if (isFatal(err)) throw err;
          return stringify({ error: String(err && err.name || "Error"), reason: errstr(err) });
        }
      });
    },

    // Runs the search index function `name` of `section` over each
    // document: one line per document, the JSON array of the index()
    // calls it made ([[arg, ...], ...]), or {"error", "reason"} when it
    // threw (logged; that document is indexed with nothing).
    index: function (section, name, docsJson) {
      var f = indexFun(section, name);
      return eachDoc(docsJson, function (doc) {
        var calls = [];
        indexCalls = calls;
        try {
          f(doc);
          indexCalls = null;
          return stringify(calls);
        } catch (err) {
          indexCalls = null;
          if (isFatal(err)) rethrowFatal(err);
          pushLog("function raised exception " + errstr(err) + " with doc._id " + docId(doc) + " (index " + name + ")");
          return stringify({ error: String(err && err.name || "Error"), reason: errstr(err) });
        }
      });
    },

    // reduce(name, kvsJson, inputLength) and rereduce(name, valuesJson, inputLength):
    // the body is the JSON of [reduction]. inputLength is what CouchDB measures the
    // output against for reduce_limit (its command line less the function source).
    reduce: function (name, kvsJson, inputLength) {
      var f = reduceFun(name);
      var kvs = parse(kvsJson);
      var keys = new Array(kvs.length);
      var values = new Array(kvs.length);
      for (var i = 0; i < kvs.length; i++) {
        keys[i] = kvs[i][0];
        values[i] = kvs[i][1];
      }
      return runReduce(f, keys, values, false, inputLength);
    },
    rereduce: function (name, valuesJson, inputLength) {
      var f = reduceFun(name);
      return runReduce(f, null, parse(valuesJson), true, inputLength);
    },

    // The body is "1" when the update is allowed, else the JSON of
    // {thrown: value} for whatever non-Error value the function threw.
    // A thrown Error (with name and stack) leaves as an exception.
    validate: function (newDocJson, oldDocJson, userCtxJson, secObjJson) {
      var f = validateFun();
      var args = [parse(newDocJson), parse(oldDocJson), parse(userCtxJson), parse(secObjJson)];
      try {
        apply(f, ddoc, args);
        return header() + "\n1";
      } catch (error) {
        if (error && error.name && error.stack) throw error;
        var body;
        try {
          body = stringify({ thrown: error });
        } catch (_) {
          body = stringify({ thrown: String(error) });
        }
        return header() + "\n" + body;
      }
    },

    // The body has one character per document: "1" passes, "0" does not.
    filter: function (name, docsJson, reqJson) {
      var f = filterFun(name);
      var docs = parse(docsJson);
      var req = parse(reqJson);
      var out = "";
      for (var i = 0; i < docs.length; i++) {
        tick();
        currentId = docId(docs[i]);
        out += apply(f, ddoc, [docs[i], req]) ? "1" : "0";
      }
      currentId = null;
      return header() + "\n" + out;
    },
    filterView: function (name, docsJson) {
      var f = filterViewFun(name);
      var docs = parse(docsJson);
      var out = "";
      for (var i = 0; i < docs.length; i++) {
        tick();
        currentId = docId(docs[i]);
        emitted = false;
        emitFlag = true;
        try {
          f(docs[i]);
        } finally {
          emitFlag = false;
        }
        out += emitted ? "1" : "0";
      }
      currentId = null;
      return header() + "\n" + out;
    },

    // shows.NAME(doc, req) with provides()/send()/start(); the body is the
    // JSON of the response object ({code, headers, body|json|base64}).
    show: function (name, docJson, reqJson) {
      var f = showFun(name);
      var doc = parse(docJson);
      var req = parse(reqJson);
      resetRender();
      try {
        var resp = apply(f, ddoc, [doc, req]) || {};
        resp = wrapResponse(resp);
        if (chunks.length > 0) {
          resp.headers = resp.headers || {};
          for (var h in startResp || {}) resp.headers[h] = startResp[h];
          resp.body = chunks.join("") + (resp.body || "");
          chunks = [];
        }
        if (providers.length > 0) {
          var chosen = chooseProvider(req);
          var provided = wrapResponse(chosen[0]() || {});
          resp.body = (resp.body || "") + chunks.join("");
          resp.body += provided.body || "";
          resp.headers = resp.headers || {};
          if (chosen[1] && !resp.headers["Content-Type"]) resp.headers["Content-Type"] = chosen[1];
        }
        var kind = typeof resp;
        if (resp === null || (kind !== "object" && kind !== "string") || isArray(resp)) {
          throw ["error", "render_error", "undefined response from show function"];
        }
        return header() + "\n" + stringify(resp);
      } catch (err) {
        throw renderError(err);
      } finally {
        resetRender();
      }
    },

    // updates.NAME(doc, req) returning [doc, response]; the body is the JSON
    // of ["up", doc, response] (a string response wrapped as {body}).
    update: function (name, docJson, reqJson) {
      var f = updateFun(name);
      var doc = parse(docJson);
      var req = parse(reqJson);
      resetRender();
      try {
        var result = apply(f, ddoc, [doc, req]);
        if (result === undefined || result === null) {
          throw new TypeError("result is " + result);
        }
        var resp = result[1];
        var kind = typeof resp;
        if (kind !== "object" && kind !== "string") {
          throw ["error", "render_error", "undefined response from update function"];
        }
        var out = stringify(["up", result[0] === undefined ? null : result[0], wrapResponse(resp)]);
        return header() + "\n" + out;
      } catch (err) {
        throw renderError(err);
      } finally {
        resetRender();
      }
    },

    // The function form of rewrites: rewrites(req); the body is the JSON of
    // [result] (undefined as null).
    rewrite: function (reqJson) {
      var f = rewriteFun();
      var req = parse(reqJson);
      try {
        var result = apply(f, ddoc, [req]);
        return header() + "\n" + stringify([result === undefined ? null : result]);
      } catch (err) {
        var e = renderError(err);
        if (isArray(e) && e[1] === "render_error") e[1] = "rewrite_error";
        throw e;
      }
    },

    // lists.NAME(head, req), streamed: getRow() takes each row from
    // nextRow() (JSON text, null at the end) as the function asks. The
    // first getRow() commits the response: emit("start", {code, headers,
    // contentType}); each later one first emits what send() collected
    // (emit("chunk", text)), as CouchDB's query server flushes on getRow.
    // A false from emit (nobody reads) ends the rows. The body is the JSON
    // of {code, headers, body, contentType, committed}: the output not yet
    // emitted; a throw after the start is appended to it as CouchDB's
    // {"code":500,…} line.
    list: function (name, headJson, reqJson, nextRow, emit) {
      var f = listFun(name);
      var head = parse(headJson);
      var req = parse(reqJson);
      var committed = false;
      var open = true;
      var contentType = null;
      function flush() {
        if (chunks.length > 0) {
          var text = chunks.join("");
          chunks = [];
          if (open && !emit("chunk", text)) open = false;
        }
      }
      resetRender();
      global.getRow = function () {
        tick();
        if (!committed) {
          committed = true;
          var resp = startResp || {};
          open = emit("start", stringify({code: resp.code, headers: resp.headers || {},
            contentType: contentType}));
        }
        flush();
        if (!open) return null;
        var row = nextRow();
        tick();
        return row === null || row === undefined ? null : parse(row);
      };
      try {
        var tail = apply(f, ddoc, [head, req]);
        if (providers.length > 0) {
          var chosen = chooseProvider(req);
          contentType = chosen[1];
          tail = chosen[0]();
        }
        if (tail !== undefined && tail !== null) send(tail);
        var resp = startResp || {};
        return header() + "\n" + stringify({code: resp.code, headers: resp.headers || {},
          body: chunks.join(""), contentType: contentType, committed: committed});
      } catch (err) {
        var e = renderError(err);
        if (!committed || !isArray(e)) throw e;
        var partial = startResp || {};
        return header() + "\n" + stringify({code: partial.code, headers: partial.headers || {},
          body: chunks.join("") + "\n" + stringify({code: 500, error: e[1], reason: e[2]}) + "\n",
          contentType: contentType, committed: true});
      } finally {
        global.getRow = function () { return null; };
        resetRender();
      }
    },

    // Compiles a view's map function (and with withReduce its reduce
    // function) without running either: CouchDB's check of a design
    // document when it is saved. Throws what compiling throws.
    compile_view: function (name, withReduce) {
      mapFun(name);
      if (withReduce) reduceFun(name);
      return header() + "\nnull";
    },

    // The header alone: for the logs of a call that ended in an exception.
    header: header,
    // The _id of the document the last call stopped on (or null), then forgets it.
    current: function () {
      var id = currentId;
      currentId = null;
      return typeof id === "string" ? id : null;
    },
  };

  function runReduce(f, keys, values, rereduce, inputLength) {
    var result;
    try {
      result = f(keys, values, rereduce);
    } catch (err) {
      if (isFatal(err)) rethrowFatal(err);
      pushLog("function raised exception " + errstr(err));
      result = null;
    }
    var line = stringify([result]);
    if (reduceLimit && line.length > 4096 && line.length * 2 > inputLength) {
      throw ["error", "reduce_overflow_error",
        "Reduce output must shrink more rapidly: input size: " + inputLength + " output size: " + line.length];
    }
    return header() + "\n" + line;
  }
})
