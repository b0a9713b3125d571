// longquery.js: an admin on a bad day, from node-q (issue 23): another user's query is hurting
// everyone. From .qgate.queries[] the slowest query of the last minute; from .qgate.clients[]
// the client running it now (its worker, since when); .qgate.kill of that client, whose
// connection closes. usage: node longquery.js PORT
"use strict";
const nodeq = require("node-q");
const assert = require("assert");

const port = Number(process.argv[2]);
const timer = setTimeout(() => { console.error("FAIL: timed out"); process.exit(1); }, 60000);
function fail(what, e) { console.error("FAIL: node-q " + what + ": " + (e && e.message || e)); process.exit(1); }
const open = (user) => new Promise((res) => nodeq.connect({host: "127.0.0.1", port, user, password: "pw"},
                                                         (err, con) => err ? fail("connect " + user, err) : res(con)));
const ask = (con, ...args) => new Promise((res) => con.k(...args, (e, r) => res(e ? {err: e.message} : r)));
const pause = (ms) => new Promise((res) => setTimeout(res, ms));

(async () => {
  try {
    const admin = await open("nq");
    const bob = await open("bob");
    admin.on("error", (e) => fail("admin's connection", e));
    for (let i = 0; i < 5; i++)
      assert.strictEqual(await ask(bob, "echo fast"), "fast");
    assert.strictEqual(await ask(bob, "sleep 300"), 300);           // once: it shows as slow
    let closed = false;
    bob.on("close", () => { closed = true; });
    bob.on("error", () => { closed = true; });
    bob.k("sleep 30000", () => {});                                  // and again: it runs now

    // the slowest query of the last minute
    const queries = await ask(admin, ".qgate.queries[]");
    assert.ok(Array.isArray(queries), JSON.stringify(queries));
    const recent = queries.filter((r) => Date.now() - r.last.getTime() < 60000);
    recent.sort((a, b) => b.run_max_us - a.run_max_us);
    const worst = recent[0];
    assert.strictEqual(worst.query, "sleep 300");
    assert.ok(worst.run_max_us >= 300000, "sleep 300 ran " + worst.run_max_us + " us");
    assert.strictEqual(recent.find((r) => r.query === "echo fast").calls, 5);

    // the client running a query of that kind now: wait for its row to show it
    let row;
    for (let i = 0; i < 200 && !row; i++) {
      const clients = await ask(admin, ".qgate.clients[]");
      row = clients.find((c) => c.user === "bob" && c.running === 1 && c.query.startsWith("sleep "));
      if (!row)
        await pause(10);
    }
    assert.ok(row, "no client of bob's running a sleep");
    assert.ok(row.worker.length > 0 && row.since instanceof Date, JSON.stringify(row));
    const stats = await ask(admin, ".qgate.stats[]");
    assert.strictEqual(stats.find((s) => s.address === row.worker).client, row.id);

    // and kill it
    assert.strictEqual(await ask(admin, ".qgate.kill", row.id), true);
    for (let i = 0; i < 200 && !closed; i++)
      await pause(10);
    assert.ok(closed, "bob's connection still open");
    const after = await ask(admin, ".qgate.clients[]");
    assert.ok(!after.find((c) => c.id === row.id), "the killed client is still listed");
    clearTimeout(timer);
    console.log("ok - node-q as an admin: the slowest query of the last minute (" + worst.query + ", " +
                worst.run_max_us + " us) from .qgate.queries[], the client running it now (id " + row.id +
                ", on " + row.worker + ") from .qgate.clients[] and .qgate.stats[], killed with .qgate.kill");
    admin.close(() => process.exit(0));
  } catch (x) { fail("long query", x); }
})();
