// auth.js: node-q against a gateway with a users file: good credentials work, bad ones are
// refused the way q refuses them (the connection closes without a capability byte).
// usage: node auth.js PORT GOOD_USER:PASS BAD_USER:PASS
"use strict";
const nodeq = require("node-q");
const [port, good, bad] = process.argv.slice(2);
const timer = setTimeout(() => { console.error("FAIL: timed out"); process.exit(1); }, 60000);
function creds(s) { const i = s.indexOf(":"); return {user: s.slice(0, i), password: s.slice(i + 1)}; }

nodeq.connect(Object.assign({host: "127.0.0.1", port: Number(port)}, creds(good)), (err, con) => {
  if (err) { console.error("FAIL: good credentials refused: " + err.message); process.exit(1); }
  con.k("echo welcome", (e, res) => {
    if (e || res !== "welcome") { console.error("FAIL: query after login: " + (e ? e.message : res)); process.exit(1); }
    console.log("ok - node-q logs in with good credentials");
    con.close(() => {
      let settled = false;
      nodeq.connect(Object.assign({host: "127.0.0.1", port: Number(port)}, creds(bad)), (err2, con2) => {
        if (settled) return;
        settled = true;
        if (!err2) { console.error("FAIL: bad credentials accepted"); con2.close(); process.exit(1); }
        console.log("ok - node-q with bad credentials is refused: " + err2.message);
        clearTimeout(timer);
        process.exit(0);
      });
    });
  });
});
