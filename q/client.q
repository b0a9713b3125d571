/ client.q: the load client used to compare kdb+ gateways.
/ usage: q client.q MODE[:ARG] PERIOD_MS [-g host:port] [-u user:pass]
/ Every PERIOD_MS it times one sync request and prints a line such as
/   fast got :: 1 rows in dur :: 0D00:00:00.000395000
/   big got :: 10000000 in dur :: 0D00:00:03.233967000
/ It keeps one handle to the gateway and reopens it when it was closed.
/ modes: big smallbig med fast slow bigbig bigsmall killer ss throw:ERR ssthrow:ERR
/ bench/qclient is a C stand-in that sends the same bytes (bench/modes.c holds the same text).

a:.z.x;
if[2>count a; -2 "usage: q client.q MODE[:ARG] PERIOD_MS [-g host:port] [-u user:pass]"; exit 1];
spec:":" vs a 0;
mode:`$first spec;
marg:$[1<count spec; ":" sv 1_spec; "oops"];
period:"J"$a 1;
o:.Q.opt 2_a;
gw:$[`g in key o; first o`g; "localhost:8811"];
up:$[`u in key o; ":",first o`u; ""];
target:`$":",gw,up;

/ each mode's function; its source text is what travels on the wire
fns:()!();
fns[`big]:{select from tbl2};
fns[`smallbig]:{select from tbl2};
fns[`med]:{select from tbl2 where i<3000000};
fns[`fast]:{select from tbl2 where i=0};
fns[`slow]:{system "sleep 7"; select from tbl2 where i=0};
fns[`bigbig]:{select from tbl2};
fns[`bigsmall]:{select from tbl2 where i<6};
fns[`killer]:{$[0.1>rand 1.0; exit 0; select from tbl2 where i<3]};
fns[`ss]:{select from tbl2 where i<5};
fns[`throw]:{'x};
fns[`ssthrow]:{'x};
if[not mode in key fns; -2 "unknown mode ",string mode; exit 1];

direct:mode in `throw`ssthrow;
oneshot:mode in `ss`ssthrow;
bigout:mode in `big`smallbig`med`bigbig;
arg:$[direct; `$marg; mode in `bigbig`bigsmall; ([] a:5120000?`7); 0];
req:$[direct; (fns mode; arg); (`.gateway.exec; (fns mode; arg))];

h:0i;
call:{$[oneshot; target req; [if[0i=h; `h set hopen target]; h req]]};

.z.ts:{
  st:.z.p;
  r:@[{(1b;call[])};::;{(0b;x)}];
  dur:.z.p-st;
  $[r 0;
    -1 string[mode]," got :: ",string[count r 1],$[bigout;"";" rows"]," in dur :: ",string dur;
    [-1 string[mode]," error :: ",r[1]," in dur :: ",string dur;
     if[(not oneshot) and not h in key .z.W; `h set 0i]]];
  };

system "t ",string period;
