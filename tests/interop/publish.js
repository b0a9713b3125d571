// publish.js: node-q as a feed handler and as a subscriber, through qgate.
// usage: node publish.js PORT publish N   sends a sync "sleep 300", N async messages right
//                                         behind it, and closes at once (q runs them all)
//        node publish.js PORT subscribe [N] (pool = session) asks "later 200 tick" and waits for
//                                         the "tick" its session's worker publishes 200 ms later
//                                         (N: a tick of N bytes, "tick tick ...": one a worker
//                                         that takes qgate for remote compresses)
//        node publish.js PORT nobody       (pool = request) asks "later 200 tick"; once the
//                                         gateway counts the publish dropped (.qgate.stats[]),
//                                         the next message it gets is its own next reply
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
  if (mode === "nobody") {
    const q = (...args) => new Promise((res) => con.k(...args, (e, r) => res(e ? {err: e.message} : r)));
    (async () => {
      try {
        assert.strictEqual(Number(await q("later 200 tick")), 200);
        for (let i = 0; i < 600; i++) { // until the gateway has dropped it (an event, not a time)
          const t = await q(".qgate.stats[]");
          assert.ok(Array.isArray(t) || typeof t === "object", "stats: " + JSON.stringify(t));
          const rows = Array.isArray(t) ? t : [t];
          if (rows.some((r) => Number(r.dropped) >= 1)) break;
          await new Promise((res) => setTimeout(res, 50));
          assert.ok(i < 599, "the publish was never counted dropped");
        }
        assert.strictEqual(await q("echo after"), "after"); // not "tick": it reached nobody
      } catch (x) { fail("nobody", x); }
      clearTimeout(timer);
      console.log("ok - node-q in a request pool: the worker's publish while idle reached nobody, counted dropped; its next reply was its own");
      con.close(() => process.exit(0));
    })();
    return;
  }
  const tick = nArg ? "tick ".repeat(Math.ceil(Number(nArg) / 5)).slice(0, Number(nArg)) : "tick";
  con.k("later 200 " + tick, (e, res) => {
    try {
      assert.ifError(e);
      assert.strictEqual(Number(res), 200);
    } catch (x) { fail("later", x); }
    con.k((e2, msg) => {             // the next message: the worker's publish, while idle
      try {
        assert.ifError(e2);
        assert.strictEqual(msg, tick);
      } catch (x) { fail("publish while idle", x); }
      clearTimeout(timer);
      console.log("ok - node-q got the publish of its session's worker, sent between its requests" +
                  (nArg ? " (" + tick.length + " bytes)" : ""));
      process.exit(0);
    });
  });
});
