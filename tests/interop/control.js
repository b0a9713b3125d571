// control.js: node-q running the operator's commands as a q admin would write them:
// h(".qgate.pause"; `main) (node-q names the function with a string), h(`.qgate.resume; `main),
// .qgate.disable with the address as a string or a symbol, .qgate.pools[] and .qgate.stats[]
// read as tables, and the errors. usage: node control.js PORT WORKER_ADDRESS
"use strict";
const nodeq = require("node-q");
const assert = require("assert");

const [port, addr] = process.argv.slice(2);
const timer = setTimeout(() => { console.error("FAIL: timed out"); process.exit(1); }, 60000);
function fail(what, e) { console.error("FAIL: node-q " + what + ": " + (e && e.message || e)); process.exit(1); }

nodeq.connect({host: "127.0.0.1", port: Number(port), user: "nq", password: "pw"}, (err, con) => {
  if (err) fail("connect", err);
  con.on("error", (e) => fail("connection", e));
  const q = (...args) => new Promise((res) => con.k(...args, (e, r) => res(e ? {err: e.message} : r)));
  (async () => {
    try {
      assert.strictEqual(await q(".qgate.pause", "`main"), true);      // (".qgate.pause"; `main)
      let pools = await q(".qgate.pools[]");
      assert.strictEqual(pools.length, 1);
      assert.strictEqual(pools[0].group, "main");
      assert.strictEqual(pools[0].paused, true);
      assert.strictEqual(pools[0].idle, 1);
      assert.strictEqual(await q("`.qgate.resume", "`main"), true);    // (`.qgate.resume; `main)
      assert.strictEqual(await q(".qgate.disable", addr), true);       // the address as a string
      const stats = await q(".qgate.stats[]");
      assert.strictEqual(stats[0].state, "disabled");
      pools = await q(".qgate.pools[]");
      assert.strictEqual(pools[0].disabled, 1);
      assert.strictEqual(pools[0].paused, false);
      assert.strictEqual(await q(".qgate.enable", "`" + addr), true);  // ... and as a symbol
      assert.strictEqual((await q(".qgate.stats[]"))[0].state, "idle");
      assert.strictEqual(await q("echo served"), "served");
      assert.deepStrictEqual(await q(".qgate.pause", "`nosuch"), {err: "qgate: no group nosuch"});
      assert.deepStrictEqual(await q(".qgate.disable", "`nosuch:1"), {err: "qgate: no worker nosuch:1"});
      // a command's name alone, as node-q sends k(".qgate.ping") (q would show the function): how it runs
      assert.deepStrictEqual(await q(".qgate.ping"),
                             {err: "qgate: bad command: .qgate.ping is run as .qgate.ping[] or (`.qgate.ping; arg)"});
      assert.strictEqual(await q(".qgate.ping[]"), true);
      // sent async (ks), a command runs in the gateway with no reply, in order with what follows
      await new Promise((res) => con.ks(".qgate.pause", "`main", res));
      assert.strictEqual((await q(".qgate.pools[]"))[0].paused, true);
      await new Promise((res) => con.ks("`.qgate.resume", "`main", res));
      assert.strictEqual((await q(".qgate.pools[]"))[0].paused, false);
      assert.strictEqual(await q("echo after"), "after");
    } catch (x) { fail("control", x); }
    clearTimeout(timer);
    console.log("ok - node-q: .qgate.pause/resume/disable/enable named by a string or a symbol, the argument a symbol or a string; .qgate.pools[] and .qgate.stats[] as tables; the errors; pause and resume sent async (ks)");
    con.close(() => process.exit(0));
  })();
});
