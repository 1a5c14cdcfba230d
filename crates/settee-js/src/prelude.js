// The query-server environment of one design document, evaluated once in a
// fresh QuickJS context of its own (see runtime.rs). Written for this crate,
// after CouchDB's documented behaviour; no CouchDB source is copied.
//
// This file is a single function expression. runtime.rs calls it with
//   (ddocJson, tick, reduceLimit, logLinesMax)
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
(function (ddocJson, tick, reduceLimit, logLinesMax) {
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
    compilingSource = source;
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
      throw ["error", "compilation_error", errstr(firstError) + " (" + source + ")"];
    }
    if (typeof fn !== "function") {
      throw ["error", "compilation_error", "Expression does not eval to a function. (" + source + ")"];
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

  function docId(doc) {
    return doc !== null && typeof doc === "object" ? doc._id : undefined;
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
      var docs = parse(docsJson);
      var out = new Array(docs.length);
      for (var d = 0; d < docs.length; d++) {
        tick();
        var doc = docs[d];
        docs[d] = undefined;
        currentId = docId(doc);
        deepFreeze(doc);
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
          out[d] = stringify(perView);
        } catch (err) {
          if (isFatal(err)) throw err;
          out[d] = stringify({ error: String(err && err.name || "Error"), reason: errstr(err) });
        }
      }
      currentId = null;
      return header() + "\n" + out.join("\n");
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
