// remote.js: node-q as a remote client (another network namespace): a compressible 10 MB string
// and a 1M-row table, however they travel, read back exactly.
// usage: node remote.js HOST PORT ROWS FIRST_ROW
"use strict";
const nodeq = require("node-q");
const [host, port, rows, first] = process.argv.slice(2);
const timer = setTimeout(() => { console.error("FAIL: timed out"); process.exit(1); }, 120000);
function die(m) { console.error("FAIL: " + m); process.exit(1); }
function text(n) { // what qworker's "text N" holds
  let s = "";
  for (let i = 0; s.length < n; i++) s += "qgate " + i + " ";
  return s.slice(0, n);
}

nodeq.connect({host: host, port: Number(port)}, (err, con) => {
  if (err) die("connect: " + err.message);
  con.k("text 10000000", (e, s) => {
    if (e) die("text: " + e.message);
    if (typeof s !== "string" || s.length !== 10000000 || s !== text(10000000))
      die("text 10000000 read back wrong (" + (typeof s) + ", " + (s && s.length) + " chars)");
    console.log("ok - node-q at " + host + ": a 10 MB string read back exactly");
    con.k("rows " + rows, (e2, t) => {
      if (e2) die("rows: " + e2.message);
      if (!Array.isArray(t) || t.length !== Number(rows) || t[0].a !== first)
        die("rows " + rows + ": " + (Array.isArray(t) ? t.length + " rows, first " + JSON.stringify(t[0]) : typeof t));
      console.log("ok - node-q at " + host + ": a " + rows + "-row table read back, first row " + first);
      clearTimeout(timer);
      con.close(() => process.exit(0));
    });
  });
});
