/ worker.q: a back-end q process behind qgate or the -30! gateway (q/30gw.q).
/ usage: q worker.q -p 8833 [-rows 10000000]
/ Holds tbl2, evaluates whatever it is sent (sync or async) with value, logging each message
/ first, and logs when a handle closes. bench/qworker is a C stand-in for this script.

o:.Q.opt .z.x;
nrows:$[`rows in key o; "J"$first o`rows; 10000000];

/ tbl2: one column a, each value a random string of 8, 9 or 10 lower-case letters
system "S 42";
lens:8+nrows?3;
tbl2:([] a:(0,-1_sums lens) _ (sum lens)?.Q.a);
delete lens from `.;

/ pass-through gateways forward (`.gateway.exec; (f; x)) unchanged: evaluate it here
.gateway.exec:{value x};

/ test helpers that bench/qworker also answers: "rows N", "sleep MS", "echo X", "err X"
rows:{select from tbl2 where i<x};
sleep:{system "sleep ",string x%1000; x};
.w.text:{$[x like "echo *"; 5_x; x like "err *"; {'x} 4_x; value x]};

.w.desc:{$[10h=type x; 100 sublist x; 0h=type x; 100 sublist -3!first x; "type ",string type x]};
.w.log:{[kind;x] -1 " " sv (string .z.p; kind; "handle"; string .z.w; .w.desc x);};
.z.pg:{.w.log["sync";x]; $[10h=type x; .w.text x; value x]};
.z.ps:{.w.log["async";x]; $[10h=type x; .w.text x; value x];};
.z.pc:{-1 string[.z.p]," handle ",string[x]," closed";};

-1 "worker.q listening on ",string[system "p"]," with ",string[count tbl2]," rows";
