// session_end.js: node-q through a pool = session group of one worker, one session after another.
// usage: node session_end.js PORT
//   The first connection sets x, asks the worker to publish "FIRST-ONLY" 300 ms later on its
//   handle, and closes. The second then has the worker: it sees x (globals stay, as in q), keeps
//   the worker busy past the moment the publish was due ("sleep 600"), and its replies are its own
//   (node-q takes any message that is not an upd for the next reply: the first session's publish
//   would have answered one of its queries).
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
function q(con, text) {
  return new Promise((res) => con.k(text, (e, r) => res(e ? {err: e.message} : r)));
}

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
