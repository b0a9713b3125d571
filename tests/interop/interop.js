// interop.js: node-q (an independent kdb+ client library) against a kdb+ endpoint.
// usage: node interop.js PORT FIRST_ROW [ROWS] [USER:PASS]
// Runs the fast mode as client.q sends it, a 1,000,000-row query, and error queries, all
// pipelined on one connection, and checks the decoded values.
"use strict";
const nodeq = require("node-q");
const assert = require("assert");

const [port, firstRow, rowsArg, creds] = process.argv.slice(2);
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

nodeq.connect({host: "127.0.0.1", port: Number(port), user, password}, (err, con) => {
  if (err) { console.error("FAIL: connect: " + err.message); process.exit(1); }
  con.on("error", (e) => { console.error("FAIL: connection error: " + e.message); process.exit(1); });

  // fast, as client.q sends it: (`.gateway.exec; (function; 0))
  con.k("`.gateway.exec", ["{select from tbl2 where i=0}", 0], check("fast", (e, res) => {
    assert.ifError(e);
    assert.ok(Array.isArray(res), "table decodes to an array of rows");
    assert.strictEqual(res.length, 1);
    assert.strictEqual(res[0].a, firstRow);
  }));

  // a 1,000,000-row query
  con.k("rows " + rows, check(rows + " rows", (e, res) => {
    assert.ifError(e);
    assert.strictEqual(res.length, rows);
    assert.strictEqual(res[0].a, firstRow);
    for (let i = 0; i < res.length; i++) {
      if (!word.test(res[i].a)) throw new Error("row " + i + " is " + JSON.stringify(res[i].a));
    }
  }));

  // errors: a q error from the text query, and the throw mode's function
  con.k("err boom", check("error query", (e) => {
    assert.ok(e, "an error is reported");
    assert.strictEqual(e.message, "boom");
  }));
  con.k("{'x}", "`ouch", check("throw mode", (e) => {
    assert.ok(e, "an error is reported");
    assert.strictEqual(e.message, "ouch");
  }));

  // a plain value after the errors: responses stay matched to requests
  con.k("echo after errors", check("echo", (e, res) => {
    assert.ifError(e);
    assert.strictEqual(res, "after errors");
  }));
});
