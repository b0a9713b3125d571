// interop.js: node-q (an independent kdb+ client library) against a kdb+ endpoint.
// usage: node interop.js [--host HOST] [--ca CA.pem] [--conns N] PORT FIRST_ROW [ROWS] [USER:PASS]
// Runs the fast mode as client.q sends it, a 1,000,000-row query, and error queries, all
// pipelined on one connection, and checks the decoded values. --host: the endpoint's address
// (default 127.0.0.1); --ca: over TLS (node-q's useTLS), the server's certificate verified
// against CA.pem, name included; --conns N: the same checks on N connections at once (through
// a balancer, spread over its servers).
"use strict";
const nodeq = require("node-q");
const assert = require("assert");
const fs = require("fs");

const argv = process.argv.slice(2);
let host = "127.0.0.1", ca = null, conns = 1;
while (argv.length && argv[0].startsWith("--")) {
  const [opt, val] = argv.splice(0, 2);
  if (val === undefined) { console.error("FAIL: " + opt + " needs a value"); process.exit(2); }
  if (opt === "--host") host = val;
  else if (opt === "--ca") ca = fs.readFileSync(val);
  else if (opt === "--conns") conns = Number(val);
  else { console.error("FAIL: unknown option " + opt); process.exit(2); }
}
const [port, firstRow, rowsArg, creds] = argv;
const rows = Number(rowsArg || 1000000);
const [user, password] = (creds || "interop:pw").split(":");
const timer = setTimeout(() => { console.error("FAIL: timed out"); process.exit(1); }, 120000);
const word = /^[a-z]{8,10}$/;

let pending = 0;
const results = [];
function done(name) {
  results.push(name);
  console.log("ok - node-q " + name);
  if (--pending === 0) {
    clearTimeout(timer);
    process.exit(0);
  }
}
function check(name, fn) {
  pending++;
  return (err, res) => {
    try { fn(err, res); } catch (e) { console.error("FAIL: node-q " + name + ": " + e.message); process.exit(1); }
    done(name);
  };
}

function run(n) {
  const tag = conns > 1 ? " (connection " + n + ")" : "";
  const params = {host, port: Number(port), user, password};
  if (ca) { params.useTLS = true; params.ca = ca; }
  pending++; // the connection itself, until its checks are queued
  nodeq.connect(params, (err, con) => {
    if (err) { console.error("FAIL: connect" + tag + ": " + err.message); process.exit(1); }
    con.on("error", (e) => { console.error("FAIL: connection error" + tag + ": " + e.message); process.exit(1); });
    if (ca) {
      const s = con.socket;
      if (!s.encrypted || !s.authorized) { console.error("FAIL: not a verified TLS connection" + tag); process.exit(1); }
      console.log("ok - node-q " + s.getProtocol() + " to " + host + ":" + port + ", certificate verified (" +
                  s.getPeerCertificate().subjectaltname + ")" + tag);
    }
    checks(con, tag);
    done("connected" + tag);
  });
}

function checks(con, tag) {
  // fast, as client.q sends it: (`.gateway.exec; (function; 0))
  con.k("`.gateway.exec", ["{select from tbl2 where i=0}", 0], check("fast" + tag, (e, res) => {
    assert.ifError(e);
    assert.ok(Array.isArray(res), "table decodes to an array of rows");
    assert.strictEqual(res.length, 1);
    assert.strictEqual(res[0].a, firstRow);
  }));

  // a 1,000,000-row query
  con.k("rows " + rows, check(rows + " rows" + tag, (e, res) => {
    assert.ifError(e);
    assert.strictEqual(res.length, rows);
    assert.strictEqual(res[0].a, firstRow);
    for (let i = 0; i < res.length; i++) {
      if (!word.test(res[i].a)) throw new Error("row " + i + " is " + JSON.stringify(res[i].a));
    }
  }));

  // errors: a q error from the text query, and the throw mode's function
  con.k("err boom", check("error query" + tag, (e) => {
    assert.ok(e, "an error is reported");
    assert.strictEqual(e.message, "boom");
  }));
  con.k("{'x}", "`ouch", check("throw mode" + tag, (e) => {
    assert.ok(e, "an error is reported");
    assert.strictEqual(e.message, "ouch");
  }));

  // a plain value after the errors: responses stay matched to requests
  con.k("echo after errors", check("echo" + tag, (e, res) => {
    assert.ifError(e);
    assert.strictEqual(res, "after errors");
  }));
}

for (let n = 1; n <= conns; n++) run(n);
