// publish.js: node-q as a feed handler and as a subscriber, through qgate.
// usage: node publish.js PORT publish N   sends a sync "sleep 300", N async messages right
//                                         behind it, and closes at once (q runs them all)
//        node publish.js PORT subscribe    asks "later 200 tick" and waits for the "tick" the
//                                         worker publishes 200 ms later, while idle
"use strict";
const nodeq = require("node-q");
const assert = require("assert");

const [port, mode, nArg] = process.argv.slice(2);
const timer = setTimeout(() => { console.error("FAIL: timed out"); process.exit(1); }, 60000);
function fail(what, e) { console.error("FAIL: node-q " + what + ": " + (e && e.message || e)); process.exit(1); }

nodeq.connect({host: "127.0.0.1", port: Number(port), user: "nq", password: "pw"}, (err, con) => {
  if (err) fail("connect", err);
  con.on("error", (e) => fail("connection", e));
  if (mode === "publish") {
    const n = Number(nArg || 20);
    con.k("sleep 300", () => {});      // the reply comes after the close: nobody reads it
    for (let i = 1; i <= n; i++) con.ks("echo a" + i, (e) => { if (e) fail("ks", e); });
    con.close(() => {
      clearTimeout(timer);
      console.log("ok - node-q published " + n + " async messages behind a running request and closed");
      process.exit(0);
    });
    return;
  }
  con.k("later 200 tick", (e, res) => {
    try {
      assert.ifError(e);
      assert.strictEqual(Number(res), 200);
    } catch (x) { fail("later", x); }
    con.k((e2, msg) => {             // the next message: the worker's publish, while idle
      try {
        assert.ifError(e2);
        assert.strictEqual(msg, "tick");
      } catch (x) { fail("publish while idle", x); }
      clearTimeout(timer);
      console.log("ok - node-q got the publish of the worker it was served by, sent while idle");
      process.exit(0);
    });
  });
});
