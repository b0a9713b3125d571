// session.js: node-q through a gateway with pool = session and two workers, as a q user sees it.
// usage: node session.js PORT [after]
//   one connection: h"a:1"; neg[h]"b:2"; h"a"; h"b" (state kept across sync and async, on one
//   worker); then "later 100 tick": the worker's publish after the reply reaches this session.
//   A second connection at once: its own worker, without the first one's a ('a).
// With "after" (a group of one worker), one session after another: the first sets x, asks the
//   worker to publish "FIRST-ONLY" 300 ms later on its handle, and closes. The second then has
//   the worker: it sees x (globals stay, as in q), keeps the worker busy past the moment the
//   publish was due ("sleep 600"), and its replies are its own (node-q takes any message that is
//   not an upd for the next reply: the first session's publish would have answered one of them).
"use strict";
const nodeq = require("node-q");
const assert = require("assert");

const port = Number(process.argv[2]);
const timer = setTimeout(() => { console.error("FAIL: timed out"); process.exit(1); }, 60000);
function fail(what, e) { console.error("FAIL: node-q " + what + ": " + (e && e.message || e)); process.exit(1); }
function open(user, cb) {
  nodeq.connect({host: "127.0.0.1", port: port, user: user, password: "pw"}, (err, con) => {
    if (err) fail("connect", err);
    con.on("error", (e) => fail("connection", e));
    cb(con);
  });
}
// q(con, text): a promise of the reply (or of the q error's text, as {err})
function q(con, text) {
  return new Promise((res) => con.k(text, (e, r) => res(e ? {err: e.message} : r)));
}

if (process.argv[3] === "after") {
  open("first", async (c1) => {
    try {
      assert.strictEqual(await q(c1, "x:42"), "42");
      assert.strictEqual(Number(await q(c1, "later 300 FIRST-ONLY")), 300);
    } catch (x) { fail("first session", x); }
    c1.close(() => open("second", async (c2) => {
      try {
        assert.strictEqual(await q(c2, "x"), "42");
        assert.strictEqual(Number(await q(c2, "sleep 600")), 600);
        assert.strictEqual(await q(c2, "echo second"), "second");
      } catch (x) { fail("the next session got the first one's publish", x); }
      clearTimeout(timer);
      console.log("ok - node-q: one session after another on one worker: globals stay, the first session's publish for later never reaches the second (a new handle: its q ran .z.pc)");
      c2.close(() => process.exit(0));
    }));
  });
} else open("nq1", (c1) => {
  open("nq2", async (c2) => {
    try {
      assert.strictEqual(await q(c1, "a:1"), "1");
      c1.ks("b:2", (e) => { if (e) fail("ks", e); });
      assert.strictEqual(await q(c1, "a"), "1");
      assert.strictEqual(await q(c1, "b"), "2");
      assert.deepStrictEqual(await q(c2, "a"), {err: "a"}); // the other session: another worker
      assert.strictEqual(Number(await q(c1, "later 100 tick")), 100);
    } catch (x) { fail("session", x); }
    c1.k((e, msg) => {                // the next message: the session's worker publishes
      try {
        assert.ifError(e);
        assert.strictEqual(msg, "tick");
      } catch (x) { fail("publish to the session", x); }
      clearTimeout(timer);
      console.log("ok - node-q: a session keeps its worker (state across sync and async), another session has its own, the worker's later publish reaches its session");
      c1.close(() => c2.close(() => process.exit(0)));
    });
  });
});
