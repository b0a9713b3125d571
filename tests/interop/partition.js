// partition.js: node-q through a qgate whose one worker is on a host that the test cuts off
// (tests/net/test_partition.sh). A query running at the cut gets qgate's error for a lost
// worker as a q error; the same connection then asks again once the test says the worker is
// back (a line on stdin) and gets its answer.
// usage: node partition.js HOST PORT WORKER (WORKER: host:port as qgate names it)
"use strict";
const nodeq = require("node-q");
const readline = require("readline");
const [host, port, worker] = process.argv.slice(2);
const timer = setTimeout(() => { console.error("FAIL: timed out"); process.exit(1); }, 120000);
function die(m) { console.error("FAIL: " + m); process.exit(1); }

nodeq.connect({host: host, port: Number(port)}, (err, con) => {
  if (err) die("connect: " + err.message);
  con.k("hold n1", (e, r) => {
    const want = "qgate: worker " + worker + " lost";
    if (!e) die("hold n1 answered " + JSON.stringify(r) + " across the cut");
    if (e.message !== want) die("hold n1: error <" + e.message + ">, not <" + want + ">");
    console.log("ok - node-q: a query running at the cut fails with '" + e.message);
    const rl = readline.createInterface({input: process.stdin});
    rl.once("line", () => {
      rl.close();
      con.k("echo after", (e2, s) => {
        if (e2) die("echo after: " + e2.message);
        if (s !== "after") die("echo after: " + JSON.stringify(s));
        console.log("ok - node-q: the same connection asks again once the worker is back: " + s);
        clearTimeout(timer);
        con.close(() => process.exit(0));
      });
    });
  });
});
