/ 30gw.q: a deferred-response (-30!) kdb+ gateway: the design qgate is compared with.
/ usage: q 30gw.q -p 8811 -workers host:port[,host:port...]
/ Clients call .gateway.exec[query] synchronously. The gateway queues the request, sends it
/ asynchronously to a free worker wrapped in .gw.run, and defers its own reply with -30!(::).
/ The worker posts (`.gateway.reply; id; (isError; result)) back asynchronously, and the
/ gateway answers the waiting client with -30!. Everything runs on this one q thread, so
/ every result is deserialised here and serialised again for the client.
/ bench/gw30 is a C model of this script.

o:.Q.opt .z.x;
if[not `workers in key o; -2 "usage: q 30gw.q -p PORT -workers host:port[,host:port]"; exit 1];
W:`$":",/:"," vs first o`workers;
H:hopen each W;               / worker handles, opened once (reconnecting is left to the operator)
busy:H!count[H]#0b;           / worker handle -> in use
P:(`long$())!();              / pending request id -> (client handle; query)
Q:`long$();                   / ids waiting for a free worker, oldest first
nid:0;

/ what a worker runs: the query under protected evaluation, the result posted back async
.gw.run:{[id;q] neg[.z.w] (`.gateway.reply; id; @[{(0b;value x)}; q; {(1b;x)}])};

.gw.dispatch:{
  while[(count Q) and any not value busy;
    w:first where not busy;
    id:first Q;
    `Q set 1_Q;
    @[`busy; w; :; 1b];
    neg[w] (.gw.run; id; P[id] 1)];
  };

.qgate.ping:{1b};  / the gateway's own cheap call, as qgate has (for the mix benchmark)

.gateway.exec:{[q]
  `nid set nid+1;
  @[`P; nid; :; (.z.w; q)];
  `Q set Q,nid;
  .gw.dispatch[];
  -30!(::)};

.gateway.reply:{[id;res]
  c:P[id] 0;
  `P set (key[P] except id)#P;
  @[`busy; .z.w; :; 0b];
  @[{-30!x}; (c; res 0; res 1); {-1 "client gone: ",x}];
  .gw.dispatch[];
  };

/ a client that disconnects loses its queued requests; a worker that disconnects is dropped
.z.pc:{[h]
  if[h in key busy; -1 "worker handle ",string[h]," closed"; `busy set (key[busy] except h)#busy];
  gone:Q inter where h=first each P;
  `Q set Q except gone;
  `P set (key[P] except gone)#P;
  };

-1 "30gw.q on port ",string[system "p"],", workers: ",", " sv string W;
