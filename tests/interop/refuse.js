// refuse.js: node-q against a gateway at max_clients (PORT holds max_clients connections
// already): the extra client connects (q's handshake completes) and its first query gets the
// q error 'qgate: too many connections, then the connection closes.
// usage: node refuse.js PORT
"use strict";
const nodeq = require("node-q");
const [port] = process.argv.slice(2);
const timer = setTimeout(() => { console.error("FAIL: timed out"); process.exit(1); }, 60000);

nodeq.connect({host: "127.0.0.1", port: Number(port)}, (err, con) => {
  if (err) { console.error("FAIL: no handshake: " + err.message); process.exit(1); }
  con.on("error", () => {});
  con.k("echo hi", (e, res) => {
    if (!e || e.message !== "qgate: too many connections") {
      console.error("FAIL: want the q error 'qgate: too many connections, got " + (e ? e.message : JSON.stringify(res)));
      process.exit(1);
    }
    console.log("ok - node-q over max_clients: 'qgate: too many connections");
    clearTimeout(timer);
    process.exit(0);
  });
});
