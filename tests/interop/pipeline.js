// pipeline.js: node-q clients through a gateway that pipelines (pipeline = 3, pipeline_wait),
// as a q user sees it: each of N connections asks its own query, over and over, each waiting
// for its reply; every reply must be its own connection's, none lost. Then .qgate.totals[]
// must say some requests went behind a run of another (the queries were learned fast).
// usage: node pipeline.js PORT CONNS ROUNDS
"use strict";
const nodeq = require("node-q");
const assert = require("assert");

const [port, conns, rounds] = process.argv.slice(2).map(Number);
const timer = setTimeout(() => { console.error("FAIL: timed out"); process.exit(1); }, 120000);
function fail(what, e) { console.error("FAIL: node-q " + what + ": " + (e && e.message || e)); process.exit(1); }
function open() {
  return new Promise((res) => nodeq.connect({host: "127.0.0.1", port: port, user: "nq", password: "pw"}, (err, con) => {
    if (err) fail("connect", err);
    con.on("error", (e) => fail("connection", e));
    res(con);
  }));
}
function q(con, text) {
  return new Promise((res) => con.k(text, (e, r) => e ? fail(text, e) : res(r)));
}

(async () => {
  const cs = [];
  for (let i = 0; i < conns; i++) cs.push(await open());
  let replies = 0;
  await Promise.all(cs.map(async (con, i) => {
    for (let n = 0; n < rounds; n++) {
      const r = await q(con, "echo c" + i);
      try { assert.strictEqual(r, "c" + i); } catch (x) { fail("connection " + i + " got another's reply", x); }
      replies++;
    }
  }));
  const t = await q(cs[0], ".qgate.totals[]");
  const pipelined = Number(t.pipelined);
  if (!(pipelined > 0)) fail("pipelining", ".qgate.totals[] pipelined is " + t.pipelined);
  clearTimeout(timer);
  console.log("ok - node-q: " + conns + " connections, " + replies + " replies each to its own connection; "
              + pipelined + " requests went to a busy worker running a query learned fast (on another of its connections)");
  for (const c of cs) c.close();
  process.exit(0);
})().catch((e) => fail("pipeline", e));
