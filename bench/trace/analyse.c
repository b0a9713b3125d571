/* analyse.c: what one request costs the loop thread, in calls across files, from a trace written
 * by bench/trace/tracer.c (bench/trace/run makes the trace and calls this).
 *
 *   analyse [--tree] TRACE QGATE SRCDIR
 *
 * QGATE is the traced binary (addresses are resolved with addr2line -f, in one batch), SRCDIR
 * the tree's src/: a function's module is its file's path under SRCDIR without the extension
 * ("conn" for src/conn.c and src/conn.h, "core/conn" for src/core/conn.c). Nothing here knows
 * a file or function of the gateway: the legs are found from the system calls alone.
 *
 * The loop's iterations are the spans between two returns of the loop's epoll_wait (the epoll
 * fd waited on with a timeout other than 0; the one polled with 0 inside an iteration is not
 * the loop's). The measured client is the accepted connection on which bytes holding the
 * marker (the query's text) were read; the worker is the connected fd to which the marker was
 * written next. The legs:
 *   accept: the iteration of the client's accept through the iteration in which the gateway
 *           writes its first bytes (the handshake's answer) to the client;
 *   query:  the iteration in which the query's bytes are read from the client, through the
 *           iteration in which they are written to the worker;
 *   reply:  the iteration in which the worker's first bytes after that are read (or spliced),
 *           through the iteration in which the client's first bytes after that are written;
 *   accept to reply: the first leg's start to the last's end (the iterations between included).
 * A call is a function entry; its caller is the function on top of the shadow stack; a call is
 * cross-file when the two modules differ. --tree prints each leg's calls as an indented tree. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { K_ENTER = 1, K_EXIT, K_ACCEPT, K_CONNECT, K_READ, K_WRITE, K_SPLICE, K_CLOSE, K_EPOLL_IN, K_EPOLL_OUT };
enum { FD_NONE, FD_CLIENT, FD_WORKER };

struct ev {
    int kind;
    int a;         /* fd (splice: in), epfd, listening fd */
    int c;         /* splice: out; read, write: 1 if the marker was in the bytes */
    long long b;   /* result; epoll_in: timeout */
    uint64_t addr; /* E, X: the function (address less the load base) */
    int fn;        /* E, X: index in fns */
    int caller;    /* E: the function on top of the stack, or -1 */
    int ccaller;   /* E: the nearest function of a .c file on the stack, or -1 */
    int depth;     /* E: stack depth before the entry */
    int st;        /* the state of fd a (read, write, splice in) at this event; for accept, of the new fd */
    int st_out;    /* splice: of fd out */
};

struct fn {
    uint64_t addr;
    char name[128];
    int mod;
    int hdr; /* defined in a header (a static inline function) */
};

static struct ev *evs;
static size_t nev;
static struct fn *fns;
static int nfns, ndistinct;
static char (*mods)[128];
static int nmods;
static char mark[64];

static void die(const char *msg)
{
    fprintf(stderr, "analyse: %s\n", msg);
    exit(1);
}

static void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n);
    if (!p)
        die("out of memory");
    return p;
}

/* src into dst[n], cut to fit */
static void scopy(char *dst, size_t n, const char *src)
{
    size_t l = strlen(src);
    if (l >= n)
        l = n - 1;
    memcpy(dst, src, l);
    dst[l] = 0;
}

static int mod_of(const char *m)
{
    for (int i = 0; i < nmods; i++)
        if (!strcmp(mods[i], m))
            return i;
    mods = xrealloc(mods, (size_t)(nmods + 1) * sizeof *mods);
    scopy(mods[nmods], sizeof mods[nmods], m);
    return nmods++;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int fn_of(uint64_t addr)
{
    int lo = 0, hi = nfns - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (fns[mid].addr == addr)
            return mid;
        if (fns[mid].addr < addr)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

/* "path:line (discriminator n)" -> the module: the path under srcdir without its extension */
static void module_name(const char *loc, const char *srcdir, char *out, size_t outlen)
{
    char path[4096];
    scopy(path, sizeof path, loc);
    char *colon = strrchr(path, ':');
    if (colon)
        *colon = 0;
    const char *rel = NULL;
    size_t sl = strlen(srcdir);
    if (!strncmp(path, srcdir, sl) && path[sl] == '/')
        rel = path + sl + 1;
    else if (!strncmp(path, "src/", 4))
        rel = path + 4;
    else if (!strcmp(path, "??"))
        rel = "(unknown)";
    if (!rel) { /* outside src/: a system header, say, named so */
        const char *slash = strrchr(path, '/');
        char b[4100] = "(";
        scopy(b + 1, sizeof b - 2, slash ? slash + 1 : path);
        strcat(b, ")");
        scopy(out, outlen, b);
        return;
    }
    scopy(out, outlen, rel);
    char *dot = strrchr(out, '.'), *sep = strrchr(out, '/');
    if (dot && (!sep || dot > sep))
        *dot = 0;
}

static void load(const char *path)
{
    FILE *f = fopen(path, "r");
    char line[256], word[32];
    size_t cap = 0;
    unsigned long long dropped = 0;
    if (!f)
        die("cannot open the trace");
    if (!fgets(line, sizeof line, f) || strncmp(line, "# qgate trace 1", 15))
        die("not a trace of bench/trace/tracer.c (format 1)");
    while (fgets(line, sizeof line, f)) {
        struct ev e = {0};
        unsigned long long x;
        long long b;
        int a, c;
        if (line[0] == 'E' || line[0] == 'X') {
            if (sscanf(line + 2, "%llx", &x) != 1)
                die("bad E/X line");
            e.kind = line[0] == 'E' ? K_ENTER : K_EXIT;
            e.addr = x;
        } else if (!strncmp(line, "mark ", 5)) {
            scopy(mark, sizeof mark, line + 5);
            mark[strcspn(mark, "\n")] = 0;
            continue;
        } else if (sscanf(line, "events %*u dropped %llu", &dropped) == 1) {
            continue;
        } else if (!strncmp(line, "base ", 5)) {
            continue;
        } else if (sscanf(line, "%31s %d %lld %d", word, &a, &b, &c) >= 2) {
            e.a = a;
            e.b = b;
            if (!strcmp(word, "splice")) { /* splice IN OUT RES */
                e.kind = K_SPLICE;
                e.c = (int)b;
                e.b = c;
            } else if (!strcmp(word, "read") || !strcmp(word, "write")) {
                e.kind = word[0] == 'r' ? K_READ : K_WRITE;
                e.c = c;
            } else if (!strcmp(word, "accept"))
                e.kind = K_ACCEPT;
            else if (!strcmp(word, "connect"))
                e.kind = K_CONNECT;
            else if (!strcmp(word, "close"))
                e.kind = K_CLOSE;
            else if (!strcmp(word, "epoll_in"))
                e.kind = K_EPOLL_IN;
            else if (!strcmp(word, "epoll_out"))
                e.kind = K_EPOLL_OUT;
            else
                die("unknown event");
        } else {
            die("bad line");
        }
        if (nev == cap) {
            cap = cap ? cap * 2 : 65536;
            evs = xrealloc(evs, cap * sizeof *evs);
        }
        evs[nev++] = e;
    }
    fclose(f);
    if (dropped) {
        fprintf(stderr, "analyse: the tracer's buffer was full: %llu events dropped (QGATE_TRACE_MAX)\n", dropped);
        exit(1);
    }
}

/* every distinct function address, named and placed by one addr2line run */
static void resolve(const char *bin, const char *srcdir)
{
    uint64_t *addrs = NULL;
    size_t n = 0;
    for (size_t i = 0; i < nev; i++)
        if (evs[i].kind == K_ENTER || evs[i].kind == K_EXIT) {
            addrs = xrealloc(addrs, (n + 1) * sizeof *addrs);
            addrs[n++] = evs[i].addr;
        }
    qsort(addrs, n, sizeof *addrs, cmp_u64);
    fns = xrealloc(NULL, (n + 1) * sizeof *fns);
    for (size_t i = 0; i < n; i++)
        if (!nfns || fns[nfns - 1].addr != addrs[i])
            fns[nfns++].addr = addrs[i];
    free(addrs);
    char tmpl[] = "/tmp/qgate-analyse.XXXXXX";
    int fd = mkstemp(tmpl);
    if (fd < 0)
        die("mkstemp");
    FILE *f = fdopen(fd, "w");
    for (int i = 0; i < nfns; i++)
        fprintf(f, "0x%llx\n", (unsigned long long)fns[i].addr);
    fclose(f);
    if (strchr(bin, '\'') || strchr(tmpl, '\''))
        die("a quote in the binary's path");
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "addr2line -f -e '%s' < '%s'", bin, tmpl);
    FILE *p = popen(cmd, "r");
    if (!p)
        die("cannot run addr2line");
    char name[4096], loc[4096], m[256];
    for (int i = 0; i < nfns; i++) {
        if (!fgets(name, sizeof name, p) || !fgets(loc, sizeof loc, p))
            die("addr2line gave fewer lines than addresses");
        name[strcspn(name, "\n")] = 0;
        loc[strcspn(loc, "\n")] = 0;
        scopy(fns[i].name, sizeof fns[i].name, name);
        module_name(loc, srcdir, m, sizeof m);
        fns[i].mod = mod_of(m);
        char *colon = strrchr(loc, ':');
        if (colon)
            *colon = 0;
        size_t ll = strlen(loc);
        fns[i].hdr = ll > 2 && !strcmp(loc + ll - 2, ".h");
    }
    if (pclose(p))
        die("addr2line failed");
    unlink(tmpl);
    /* a header's static inline function has a copy in each file that takes its address (the
     * instrumentation does): one function, counted once, as a reader sees it */
    int *canon = xrealloc(NULL, (size_t)(nfns + 1) * sizeof *canon);
    for (int i = 0; i < nfns; i++) {
        canon[i] = i;
        for (int j = 0; j < i; j++)
            if (canon[j] == j && fns[j].mod == fns[i].mod && !strcmp(fns[j].name, fns[i].name)) {
                canon[i] = j;
                break;
            }
    }
    for (size_t i = 0; i < nev; i++)
        if (evs[i].kind == K_ENTER || evs[i].kind == K_EXIT)
            evs[i].fn = canon[fn_of(evs[i].addr)];
    for (int i = 0; i < nfns; i++)
        ndistinct += canon[i] == i;
    free(canon);
}

/* the shadow stack: each entry's caller and depth */
/* the shadow stack: each entry's caller (and nearest caller of a .c file) and depth */
static void stack_pass(void)
{
    int *stk = NULL, *cstk = NULL, depth = 0, cap = 0, unmatched = 0;
    for (size_t i = 0; i < nev; i++) {
        struct ev *e = &evs[i];
        if (e->kind == K_ENTER) {
            e->caller = depth ? stk[depth - 1] : -1;
            e->ccaller = depth ? cstk[depth - 1] : -1;
            e->depth = depth;
            if (depth == cap) {
                cap = cap ? cap * 2 : 256;
                stk = xrealloc(stk, (size_t)cap * sizeof *stk);
                cstk = xrealloc(cstk, (size_t)cap * sizeof *cstk);
            }
            stk[depth] = e->fn;
            cstk[depth] = fns[e->fn].hdr ? e->ccaller : e->fn;
            depth++;
        } else if (e->kind == K_EXIT) {
            int d = depth;
            while (d > 0 && stk[d - 1] != e->fn)
                d--;
            if (d == 0)
                unmatched++; /* an exit of a function entered before recording began */
            else {
                if (d != depth)
                    unmatched++;
                depth = d - 1;
            }
        }
    }
    if (unmatched > 2) /* main and what it was in at the start may exit unseen: more is a bug */
        fprintf(stderr, "analyse: warning: %d exits did not match the shadow stack\n", unmatched);
    free(stk);
    free(cstk);
}

/* fd states at every event (accepted, connected), over fd numbers reused after a close */
static void fd_pass(void)
{
    enum { MAXFD = 1 << 16 };
    static unsigned char st[MAXFD];
    for (size_t i = 0; i < nev; i++) {
        struct ev *e = &evs[i];
        int a = e->a >= 0 && e->a < MAXFD ? e->a : 0;
        switch (e->kind) {
        case K_ACCEPT:
            if (e->b >= 0 && e->b < MAXFD)
                st[e->b] = FD_CLIENT;
            e->st = e->b >= 0 && e->b < MAXFD ? FD_CLIENT : FD_NONE;
            break;
        case K_CONNECT:
            st[a] = FD_WORKER;
            e->st = FD_WORKER;
            break;
        case K_CLOSE:
            e->st = st[a];
            st[a] = FD_NONE;
            break;
        case K_READ:
        case K_WRITE:
            e->st = st[a];
            break;
        case K_SPLICE:
            e->st = st[a];
            e->st_out = e->c >= 0 && e->c < MAXFD ? st[e->c] : FD_NONE;
            break;
        }
    }
}

/* the loop's epoll fd: the one waited on most often with a timeout other than 0 (a nested
 * one polled with 0 inside an iteration is not the loop's); failing that, the most waited on */
static int loop_epfd(void)
{
    enum { MAXFD = 1 << 16 };
    static int timed[MAXFD], all[MAXFD];
    int best = -1, any = -1;
    for (size_t i = 0; i < nev; i++) {
        const struct ev *e = &evs[i];
        if (e->kind != K_EPOLL_IN || e->a < 0 || e->a >= MAXFD)
            continue;
        timed[e->a] += e->b != 0;
        all[e->a]++;
        if (timed[e->a] && (best < 0 || timed[e->a] > timed[best]))
            best = e->a;
        if (any < 0 || all[e->a] > all[any])
            any = e->a;
    }
    return best >= 0 ? best : any;
}

static int epfd;

/* the first event of the iteration holding event i, and the end (exclusive) */
static size_t iter_start(size_t i)
{
    while (i > 0 && !(evs[i - 1].kind == K_EPOLL_OUT && evs[i - 1].a == epfd))
        i--;
    return i;
}

static size_t iter_end(size_t i)
{
    while (i < nev && !(evs[i].kind == K_EPOLL_IN && evs[i].a == epfd))
        i++;
    return i;
}

/* bytes read from fd (read or spliced out of it) */
static int reads_from(const struct ev *e, int fd)
{
    return (e->kind == K_READ && e->a == fd && e->b > 0) || (e->kind == K_SPLICE && e->a == fd && e->b > 0);
}

static int writes_to(const struct ev *e, int fd)
{
    return (e->kind == K_WRITE && e->a == fd && e->b > 0) || (e->kind == K_SPLICE && e->c == fd && e->b > 0);
}

static int closes(const struct ev *e, int fd) { return e->kind == K_CLOSE && e->a == fd; }

static void describe(const char *what, size_t i)
{
    const struct ev *e = &evs[i];
    const char *held = (e->kind == K_READ || e->kind == K_WRITE) && e->c ? " (held the marker)" : "";
    if (e->kind == K_SPLICE)
        printf("   %s: splice of %lld bytes from fd %d to fd %d (event %zu)\n", what, e->b, e->a, e->c, i);
    else if (e->kind == K_ACCEPT)
        printf("   %s: accept on fd %d gave fd %lld (event %zu)\n", what, e->a, e->b, i);
    else
        printf("   %s: %s of %lld bytes, fd %d%s (event %zu)\n", what, e->kind == K_READ ? "read" : "write", e->b,
               e->a, held, i);
}

/* what a span of the trace costs: all calls (a header's function is its module's), and the
 * calls between functions of .c files only (a header's inline function is not a call: its
 * calls are made by the .c function that used it; issue 22's count) */
struct cost {
    int calls, cross, nfiles;
    char files[4096];
};

struct leg {
    const char *name;
    size_t s, e;
    int iters;
    struct cost all, c_only;
};

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

struct edge {
    int from, to, n;
};

static int cmp_edge(const void *a, const void *b)
{
    const struct edge *x = a, *y = b;
    if (x->n != y->n)
        return y->n - x->n;
    int c = strcmp(mods[x->from], mods[y->from]);
    return c ? c : strcmp(mods[x->to], mods[y->to]);
}

static void print_tree(size_t s, size_t e)
{
    static const char *k[] = {"", "", "", "accept", "connect", "read", "write", "splice", "close", "", "epoll_wait"};
    int base = -1; /* the least depth entered in the span: its indent 0 */
    for (size_t i = s; i < e; i++)
        if (evs[i].kind == K_ENTER && (base < 0 || evs[i].depth < base))
            base = evs[i].depth;
    for (size_t i = s; i < e; i++) {
        const struct ev *v = &evs[i];
        if (v->kind == K_ENTER) {
            int ind = v->depth - base;
            printf("      %*s%s%s [%s]\n", 2 * (ind > 0 ? ind : 0), "",
                   v->caller >= 0 && fns[v->caller].mod != fns[v->fn].mod ? "* " : "", fns[v->fn].name,
                   mods[fns[v->fn].mod]);
        } else if (v->kind == K_SPLICE)
            printf("      -- splice fd %d -> fd %d: %lld\n", v->a, v->c, v->b);
        else if (v->kind == K_CLOSE)
            printf("      -- close fd %d\n", v->a);
        else if (v->kind == K_EPOLL_OUT && v->a == epfd)
            printf("      ==== the loop's epoll_wait returned %lld: the next iteration\n", v->b);
        else if (v->kind >= K_ACCEPT && v->kind != K_EPOLL_IN)
            printf("      -- %s fd %d: %lld%s\n", k[v->kind], v->a, v->b,
                   (v->kind == K_READ || v->kind == K_WRITE) && v->c ? " (held the marker)" : "");
    }
}

/* the files entered, as a sorted list of names */
static int file_list(const int *entered, const char **names, char *out, size_t outlen)
{
    int nn = 0;
    for (int m = 0; m < nmods; m++)
        if (entered[m])
            names[nn++] = mods[m];
    qsort(names, (size_t)nn, sizeof *names, cmp_str);
    out[0] = 0;
    for (int k = 0; k < nn; k++) {
        size_t l = strlen(out);
        snprintf(out + l, outlen - l, "%s%s", k ? " " : "", names[k]);
    }
    return nn;
}

/* count [s, e); detail: print the edges and the functions per file too (and the tree) */
static void measure(struct leg *L, int detail, int tree)
{
    int *entered = calloc((size_t)nmods, sizeof *entered), *centered = calloc((size_t)nmods, sizeof *centered);
    int *fcount = calloc((size_t)nfns, sizeof *fcount);
    int *edges = calloc((size_t)nmods * (size_t)nmods, sizeof *edges);
    int *order = malloc((size_t)nfns * sizeof *order), norder = 0;
    const char **names = malloc((size_t)nmods * sizeof *names);
    struct edge *ed = malloc((size_t)nmods * (size_t)nmods * sizeof *ed);
    if (!entered || !centered || !fcount || !edges || !order || !names || !ed)
        die("out of memory");
    memset(&L->all, 0, sizeof L->all);
    memset(&L->c_only, 0, sizeof L->c_only);
    L->iters = 1;
    for (size_t i = L->s; i < L->e; i++) {
        const struct ev *v = &evs[i];
        if (v->kind == K_EPOLL_OUT && v->a == epfd)
            L->iters++;
        if (v->kind != K_ENTER)
            continue;
        int m = fns[v->fn].mod;
        L->all.calls++;
        entered[m] = 1;
        if (!fcount[v->fn]++)
            order[norder++] = v->fn;
        if (v->caller >= 0 && fns[v->caller].mod != m) {
            L->all.cross++;
            edges[fns[v->caller].mod * nmods + m]++;
        }
        if (!fns[v->fn].hdr) {
            L->c_only.calls++;
            centered[m] = 1;
            L->c_only.cross += v->ccaller >= 0 && fns[v->ccaller].mod != m;
            if (getenv("TRACE_CROSS") && v->ccaller >= 0 && fns[v->ccaller].mod != m) /* which they are */
                printf("   .c cross-file call: %s -> %s\n", fns[v->ccaller].name, fns[v->fn].name);
        }
    }
    L->c_only.nfiles = file_list(centered, names, L->c_only.files, sizeof L->c_only.files);
    L->all.nfiles = file_list(entered, names, L->all.files, sizeof L->all.files);
    printf("   calls %d, cross-file calls %d, in %d loop iteration%s (events %zu..%zu)\n", L->all.calls,
           L->all.cross, L->iters, L->iters == 1 ? "" : "s", L->s, L->e);
    printf("   files entered (%d): %s\n", L->all.nfiles, L->all.files);
    printf("   .c functions only: calls %d, cross-file calls %d, files %d\n", L->c_only.calls, L->c_only.cross,
           L->c_only.nfiles);
    if (detail) {
        int ne = 0;
        for (int a = 0; a < nmods; a++)
            for (int b = 0; b < nmods; b++)
                if (edges[a * nmods + b])
                    ed[ne++] = (struct edge){a, b, edges[a * nmods + b]};
        qsort(ed, (size_t)ne, sizeof *ed, cmp_edge);
        printf("   cross-file edges (caller's file -> callee's file: calls), %d:\n", ne);
        for (int k = 0; k < ne; k++)
            printf("      %-20s -> %-20s %d\n", mods[ed[k].from], mods[ed[k].to], ed[k].n);
        printf("   functions entered, per file (in order of first entry; xN: entered N times; (h): in the header):\n");
        for (int k = 0; k < L->all.nfiles; k++) {
            int m = mod_of(names[k]), col;
            printf("      %s:", names[k]);
            col = 7 + (int)strlen(names[k]);
            for (int j = 0; j < norder; j++) {
                const struct fn *f = &fns[order[j]];
                if (f->mod != m)
                    continue;
                char w[200], n[16] = "";
                if (fcount[order[j]] > 1)
                    snprintf(n, sizeof n, " x%d", fcount[order[j]]);
                snprintf(w, sizeof w, " %s%s%s", f->name, f->hdr ? "(h)" : "", n);
                if (col + (int)strlen(w) > 110) {
                    printf("\n         ");
                    col = 9;
                }
                printf("%s", w);
                col += (int)strlen(w);
            }
            printf("\n");
        }
    }
    if (tree) {
        printf("   the calls (* a cross-file call; [file]):\n");
        print_tree(L->s, L->e);
    }
    free(entered);
    free(centered);
    free(fcount);
    free(edges);
    free(order);
    free(names);
    free(ed);
}

int main(int argc, char **argv)
{
    int tree = 0;
    if (argc > 1 && !strcmp(argv[1], "--tree")) {
        tree = 1;
        argv++;
        argc--;
    }
    if (argc != 4) {
        fprintf(stderr, "usage: analyse [--tree] TRACE QGATE SRCDIR\n");
        return 2;
    }
    char srcdir[4096];
    if (!realpath(argv[3], srcdir))
        die("no such SRCDIR");
    load(argv[1]);
    resolve(argv[2], srcdir);
    stack_pass();
    fd_pass();
    epfd = loop_epfd();
    if (epfd < 0)
        die("no epoll_wait in the trace");

    /* the client: the accepted fd the marker was read on (without a marker: the last accepted) */
    size_t qread = nev, acc = nev;
    int cfd = -1;
    for (size_t i = 0; i < nev; i++)
        if (mark[0] && evs[i].kind == K_READ && evs[i].c && evs[i].st == FD_CLIENT && evs[i].b > 0) {
            qread = i;
            cfd = evs[i].a;
            break;
        }
    if (mark[0] && qread == nev)
        die("the marker was never read on an accepted connection");
    for (size_t i = mark[0] ? qread : nev; i-- > 0;)
        if (evs[i].kind == K_ACCEPT && (mark[0] ? evs[i].b == cfd : evs[i].b >= 0)) {
            acc = i;
            cfd = (int)evs[i].b;
            break;
        }
    if (acc == nev)
        die("no accept of the client");
    size_t hsread = nev, hswrite = nev;
    for (size_t i = acc + 1; i < nev && hswrite == nev && !closes(&evs[i], cfd); i++) {
        if (hsread == nev && reads_from(&evs[i], cfd))
            hsread = i;
        else if (hsread != nev && writes_to(&evs[i], cfd))
            hswrite = i;
    }
    if (hswrite == nev)
        die("no handshake answer to the client");
    if (!mark[0]) {
        for (size_t i = hswrite + 1; i < nev && qread == nev && !closes(&evs[i], cfd); i++)
            if (reads_from(&evs[i], cfd))
                qread = i;
        if (qread == nev)
            die("no query from the client");
    }
    /* the worker: the connected fd the query is written to (the marker's write, else the first) */
    size_t qwrite = nev;
    for (int pass = 0; pass < 2 && qwrite == nev; pass++)
        for (size_t i = qread + 1; i < nev; i++) {
            const struct ev *e = &evs[i];
            if ((e->kind == K_WRITE && e->st == FD_WORKER && e->b > 0 && (pass || e->c)) ||
                (pass && e->kind == K_SPLICE && e->st_out == FD_WORKER && e->b > 0)) {
                qwrite = i;
                break;
            }
        }
    if (qwrite == nev)
        die("the query was never written to a connected fd");
    int wfd = evs[qwrite].kind == K_SPLICE ? evs[qwrite].c : evs[qwrite].a;
    size_t rread = nev, rwrite = nev;
    for (size_t i = qwrite + 1; i < nev && rread == nev && !closes(&evs[i], wfd); i++)
        if (reads_from(&evs[i], wfd))
            rread = i;
    if (rread == nev)
        die("no reply read from the worker");
    for (size_t i = rread; i < nev && rwrite == nev && !closes(&evs[i], cfd); i++)
        if (writes_to(&evs[i], cfd))
            rwrite = i;
    if (rwrite == nev)
        die("the reply was never written to the client");

    int iterations = 0;
    for (size_t i = 0; i < nev; i++)
        iterations += evs[i].kind == K_EPOLL_OUT && evs[i].a == epfd;
    printf("trace: %zu events, %d functions, %d files; the loop's epoll fd %d (%d iterations in all)\n", nev, ndistinct,
           nmods, epfd, iterations);
    printf("client fd %d (accepted; marker \"%s\"), worker fd %d (connected)\n\n", cfd, mark, wfd);

    struct leg legs[4] = {
        {.name = "accept leg", .s = iter_start(acc), .e = iter_end(hswrite)},
        {.name = "query leg", .s = iter_start(qread), .e = iter_end(qwrite)},
        {.name = "reply leg", .s = iter_start(rread), .e = iter_end(rwrite)},
        {.name = "accept to reply", .s = iter_start(acc), .e = iter_end(rwrite)},
    };
    printf("== accept leg: the client's accept through the handshake's answer\n");
    describe("from", acc);
    describe("handshake read", hsread);
    describe("to", hswrite);
    measure(&legs[0], 1, tree);
    printf("\n== query leg: the query read from the client through its write to the worker\n");
    describe("from", qread);
    describe("to", qwrite);
    measure(&legs[1], 1, tree);
    printf("\n== reply leg: the reply read from the worker through its write to the client\n");
    describe("from", rread);
    describe("to", rwrite);
    measure(&legs[2], 1, tree);
    printf("\n== between the legs: the iterations after the accept leg and before the query leg, and after the\n"
           "   query leg and before the reply leg (idle ones among them: their number depends on timing)\n");
    /* a gap: the iterations strictly between two legs (a leg ends at the loop's epoll_wait call,
     * the next begins after the return of one: the events between are that call and its return) */
    for (int g = 0; g < 2; g++) {
        struct leg G = {.name = "", .s = legs[g].e + 2, .e = legs[g + 1].s >= 2 ? legs[g + 1].s - 2 : 0};
        const char *what = g ? "query to reply" : "accept to query";
        if (G.e <= G.s) {
            printf("   %s: no iteration\n", what);
            continue;
        }
        printf("   %s:\n", what);
        measure(&G, 0, 0);
    }
    printf("\n== accept to reply: the accept leg's start through the reply leg's end\n");
    measure(&legs[3], 1, 0);
    for (int k = 0; k < 2; k++) {
        if (!k)
            printf("\n== summary (a function in x.h is file x's, as one in x.c)\n");
        else
            printf("== summary, .c functions only (a header's inline functions not counted, their calls made by the\n"
                   "   .c function that used them: issue 22's count)\n");
        int x = 0, c = 0;
        for (int i = 0; i < 4; i++) {
            const struct cost *C = k ? &legs[i].c_only : &legs[i].all;
            printf("%s: %d cross-file calls, %d files (%d calls, %d iteration%s): %s\n", legs[i].name, C->cross,
                   C->nfiles, C->calls, legs[i].iters, legs[i].iters == 1 ? "" : "s", C->files);
            if (i < 3) {
                x += C->cross;
                c += C->calls;
            }
        }
        printf("the three legs together: %d cross-file calls (%d calls); accept to reply adds the iterations between\n"
               "   them, whose number depends on timing\n", x, c);
    }
    return 0;
}
