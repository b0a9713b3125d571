// route.js: node-q routing requests to a group by name, as a q user would write
// h(`.qgate.on; `hdb; "k:7"), and fanning one out to every worker of a group,
// h(`.qgate.all; `both; "q"). usage: node route.js PORT
//   the name as a symbol ("`.qgate.on") and as a string (".qgate.on", node-q's way to name a
//   function: q's value takes either); async with ks; an unknown group's error.
"use strict";
const nodeq = require("node-q");
const assert = require("assert");

const port = Number(process.argv[2]);
const timer = setTimeout(() => { console.error("FAIL: timed out"); process.exit(1); }, 60000);
function fail(what, e) { console.error("FAIL: node-q " + what + ": " + (e && e.message || e)); process.exit(1); }

nodeq.connect({host: "127.0.0.1", port: port, user: "nq", password: "pw"}, (err, con) => {
  if (err) fail("connect", err);
  con.on("error", (e) => fail("connection", e));
  const q = (...args) => new Promise((res) => con.k(...args, (e, r) => res(e ? {err: e.message} : r)));
  (async () => {
    try {
      assert.strictEqual(await q("`.qgate.on", "`hdb", "k:7"), "7");
      assert.deepStrictEqual(await q("k"), {err: "k"});                 // main's worker: no k
      assert.strictEqual(await q(".qgate.on", "`hdb", "k"), "7");       // the name as a string
      await new Promise((res) => con.ks("`.qgate.on", "`hdb", "j:8", res));
      assert.strictEqual(await q("`.qgate.on", "`hdb", "j"), "8");      // the async one ran first
      assert.deepStrictEqual(await q("`.qgate.on", "`nosuch", "k"), {err: "qgate: no group nosuch"});
      // fan-out over the two workers of group both: joined, and as a list
      assert.strictEqual(await q("`.qgate.all", "`both", "echo ab"), "abab");
      assert.deepStrictEqual(await q("`.qgate.all", "`both", "echo ab", "`list"), ["ab", "ab"]);
      assert.deepStrictEqual(await q("`.qgate.all", "`both", "err boom"), {err: "boom"});
      assert.deepStrictEqual(await q("`.qgate.all", "`both", "err boom", "`list"), {err: "boom"});
      // what each worker publishes while it runs its part reaches the client before the merged
      // reply (node-q takes a message that is not an upd as the next reply: on a connection of
      // its own, the two publishes answer the first two calls, the merged reply the third)
      const pubs = await new Promise((res) => nodeq.connect({host: "127.0.0.1", port: port, user: "nq", password: "pw"}, (e, c2) => {
        if (e) fail("connect", e);
        const q2 = (...args) => new Promise((r) => c2.k(...args, (e2, v) => r(e2 ? {err: e2.message} : v)));
        Promise.all([q2("`.qgate.all", "`both", "notify 1 pub"), q2("echo x"), q2("echo y")]).then((v) => c2.close(() => res(v)));
      }));
      assert.deepStrictEqual(pubs, ["pub", "pub", [1, 1]]);
      // `partial: the answer names the workers it came from
      const part = await q("`.qgate.all", "`both", "echo ab", "`partial");
      assert.deepStrictEqual(Object.keys(part), ["workers", "result"]);
      assert.strictEqual(part.workers.length, 2);
      assert.ok(part.workers.every((w) => /^127\.0\.0\.1:[0-9]+$/.test(w)), "workers: " + part.workers);
      assert.strictEqual(part.result, "abab");
      // a route of any size: a 40 KB query, sync, and async then read back
      const big = "x".repeat(40000);
      assert.strictEqual(await q("`.qgate.on", "`hdb", "echo " + big), big);
      await new Promise((res) => con.ks("`.qgate.on", "`hdb", "big:" + big, res));
      assert.strictEqual((await q("`.qgate.on", "`hdb", "big")).length, 40000);
      assert.strictEqual((await q("`.qgate.all", "`both", "echo " + big)).length, 80000);
      // a malformed 4th item is refused, and the workers stay up
      assert.deepStrictEqual(Object.keys(await q("`.qgate.all", "`both", "echo x", "`lost")), ["err"]);
      assert.strictEqual(await q("`.qgate.all", "`both", "echo ab"), "abab");
    } catch (x) { fail("route", x); }
    clearTimeout(timer);
    console.log("ok - node-q: (`.qgate.on; `hdb; query) sync and async, the name as symbol or string, of 40 KB too; an unknown group's error; (`.qgate.all; `both; query[; `list | `partial]) razed, listed, naming its workers, and its q error (`list too); its workers' publishes before its reply; a bad 4th item refused");
    con.close(() => process.exit(0));
  })();
});
