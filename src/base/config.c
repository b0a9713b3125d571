/* config.c: the declarative table of configuration keys and its INI loader. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pwd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "net.h"
#include "qg.h"

static const char *const async_choices[] = {"one", "broadcast", NULL};
static const char *const pool_choices[] = {"request", "session", NULL};
static const char *const level_choices[] = {"error", "warn", "info", "debug", NULL};
static const char *const local_choices[] = {"unix", "tcp", NULL};
static const char *const aq_choices[] = {"none", "hash", "text", NULL};

#define G(field) offsetof(struct config, field), sizeof(((struct config *)0)->field)
#define W(field) offsetof(struct group_cfg, field), sizeof(((struct group_cfg *)0)->field)
#define KMAX ((int64_t)1 << 40)

const struct cfg_key cfg_keys[] = {
    {"gateway", "port", CFG_INT, CFG_RESTART, "8811", 0, 65535, G(port), NULL,
     "TCP port q clients connect to (q's -p); 0 picks a free one"},
    {"gateway", "bind", CFG_STR, CFG_RESTART, "0.0.0.0", 0, 255, G(bind), NULL,
     "address to listen on (0.0.0.0 = every interface, as q does)"},
    {"gateway", "unix_socket", CFG_BOOL, CFG_RESTART, "1", 0, 1, G(unix_socket), NULL,
     "also listen on q's abstract Unix socket for the port (hopen `:unix://PORT)"},
    {"gateway", "reuseport", CFG_BOOL, CFG_RESTART, "0", 0, 1, G(reuseport), NULL,
     "share the port with other qgate processes of this host and user that set it too (SO_REUSEPORT): the kernel spreads new connections over them; each has its own workers and queue; q's Unix socket for the port is served by one of them at a time"},
    {"gateway", "max_clients", CFG_INT, CFG_LIVE, "10000", 1, 1000000, G(max_clients), NULL,
     "client connections accepted at once; more get the q error 'qgate: too many connections after their handshake, then the close (the last 64 are kept to be told: an older one still waiting gives way to a new one, closed untold)"},
    {"gateway", "max_message", CFG_SIZE, CFG_LIVE, "2147483647", 64, KMAX, G(max_message), NULL,
     "longest message (bytes, header included) accepted from a client or a worker (a worker's reply over it is "
     "refused to its client, its connection kept)"},
    {"gateway", "max_queue", CFG_INT, CFG_LIVE, "1000", 0, 10000000, G(max_queue), NULL,
     "clients waiting for a worker in one group before requests get 'qgate: busy"},
    {"gateway", "queue_timeout", CFG_MS, CFG_LIVE, "0", 0, KMAX, G(queue_timeout), NULL,
     "ms a request may wait for a worker before 'qgate: timeout (queued ...); 0 = no limit"},
    {"gateway", "query_timeout", CFG_MS, CFG_LIVE, "0", 0, KMAX, G(query_timeout), NULL,
     "ms a worker may go without sending a byte of the reply before 'qgate: timeout (the clock runs while it waits for its client's answer to a callback from when the client has received the callback: while it waits behind what the client is still reading, in qgate's output or its TCP socket's send buffer, the clock waits (not for a client whose kernel took no byte for query_timeout); the client's own kernel may still hold what it has not read ahead of it); in an async = one group a client's async messages are not timed out while the worker runs them, so that those sent after them never run first; with pipeline, until a request begins, the time from its send to the reply that ends a run on another of the group's connections to its q is that run's, for as many as may go first, as q runs one at a time); 0 = no limit"},
    {"gateway", "handshake_timeout", CFG_MS, CFG_LIVE, "5000", 1, KMAX, G(handshake_timeout), NULL,
     "ms a client has to complete q's handshake before it is closed"},
    {"gateway", "client_stall_timeout", CFG_MS, CFG_LIVE, "60000", 0, KMAX, G(client_stall_timeout), NULL,
     "ms a client may accept no byte of its output, or keep more than client_high_water of it waiting without taking client_high_water bytes of it (a reply held whole, read on), before it is closed (its worker freed); 0 = no limit"},
    {"gateway", "drain_timeout", CFG_MS, CFG_LIVE, "10000", 0, KMAX, G(drain_timeout), NULL,
     "ms SIGTERM waits for in-flight and queued requests before exiting"},
    {"gateway", "reader_threads", CFG_INT, CFG_RESTART, "2", 1, 256, G(reader_threads), NULL,
     "threads decoding: gateway commands, checks of replies for old clients"},
    {"gateway", "writer_threads", CFG_INT, CFG_RESTART, "2", 1, 256, G(writer_threads), NULL,
     "threads encoding: gateway-made replies, compression for remote clients"},
    {"gateway", "chunk_size", CFG_SIZE, CFG_LIVE, "262144", 4096, 64 << 20, G(chunk_size), NULL,
     "bytes read from a worker at a time while streaming a reply"},
    {"gateway", "read_budget", CFG_SIZE, CFG_LIVE, "1048576", 4096, 1 << 30, G(read_budget), NULL,
     "bytes read from one connection per loop iteration (fairness)"},
    {"gateway", "write_budget", CFG_SIZE, CFG_LIVE, "1048576", 4096, 1 << 30, G(write_budget), NULL,
     "bytes written to one connection per loop iteration (fairness)"},
    {"gateway", "frames_budget", CFG_INT, CFG_LIVE, "64", 1, 1 << 20, G(frames_budget), NULL,
     "messages taken from one client per loop iteration (fairness)"},
    {"gateway", "client_high_water", CFG_SIZE, CFG_LIVE, "8388608", 65536, KMAX, G(client_high_water), NULL,
     "a client's unsent bytes (replies, publishes, gateway-made replies) above which qgate stops reading from the worker feeding it"},
    {"gateway", "client_low_water", CFG_SIZE, CFG_LIVE, "2097152", 0, KMAX, G(client_low_water), NULL,
     "unsent bytes below which reading from that worker resumes"},
    {"gateway", "client_max_pending", CFG_SIZE, CFG_LIVE, "67108864", 65536, KMAX, G(client_max_pending), NULL,
     "bytes of a client's requests waiting their turn above which qgate stops reading from it (each counted with about 240 bytes of bookkeeping, so that a flood of tiny ones is bounded too; one that owes a worker a callback's answer: twice that, then the worker is told no answer comes)"},
    {"gateway", "pending_max", CFG_SIZE, CFG_LIVE, "1073741824", 0, KMAX, G(pending_max), NULL,
     "bytes of requests read whole and not yet written to a worker's socket or answered, all clients together (a message counts from its header, for all its bytes, while it waits for its worker and while it waits on that worker's queue: a worker that reads nothing holds it); a message over 64 KiB that would pass it waits, unread, in turn, until it fits or no other message over 64 KiB is held (so one larger than the bound is read alone); smaller ones never wait, nor do clients that owe a worker a callback's answer or hold a session's worker; a client that keeps room for a message it stopped sending, or sends less than 64 KiB of it in a client_stall_timeout, is closed while others wait; 0 = no limit"},
    {"gateway", "worker_connect_timeout", CFG_MS, CFG_LIVE, "3000", 1, KMAX, G(worker_connect_timeout), NULL,
     "ms to connect to a worker and complete its handshake"},
    {"gateway", "reconnect_min", CFG_MS, CFG_LIVE, "100", 1, KMAX, G(reconnect_min), NULL,
     "first back-off (ms) before reconnecting a lost worker; doubles on each failed attempt, and on each connection that closes before it has answered anything or lived reconnect_max (a q that closes what it accepts)"},
    {"gateway", "reconnect_max", CFG_MS, CFG_LIVE, "10000", 1, KMAX, G(reconnect_max), NULL,
     "longest back-off (ms) between reconnection attempts"},
    {"gateway", "keepalive_idle", CFG_MS, CFG_LIVE, "60000", 0, 32767000, G(keepalive_idle), NULL,
     "ms a TCP connection (client or worker) may carry nothing before qgate's kernel probes its peer (TCP keepalive, whole seconds); a peer gone without a word (a host down, a network cut) is then found in keepalive_idle + keepalive_interval x keepalive_count, a worker marked lost and reconnected; 0 = no probes"},
    {"gateway", "keepalive_interval", CFG_MS, CFG_LIVE, "10000", 1000, 32767000, G(keepalive_interval), NULL,
     "ms between keepalive probes that go unanswered (whole seconds)"},
    {"gateway", "keepalive_count", CFG_INT, CFG_LIVE, "3", 1, 127, G(keepalive_count), NULL,
     "keepalive probes unanswered before the connection is given up"},
    {"gateway", "tcp_user_timeout", CFG_MS, CFG_LIVE, "0", 0, 2147483647, G(tcp_user_timeout), NULL,
     "ms bytes sent on a TCP connection may stay unacknowledged before it is given up (TCP_USER_TIMEOUT): finds a worker cut off while it holds a request, however long queries run; but a peer that stops reading (a busy worker sent a large message, a stalled client) is given up after it too; 0 = the system's (about 15 minutes of retransmission)"},
    {"gateway", "compress", CFG_BOOL, CFG_LIVE, "1", 0, 1, G(compress), NULL,
     "compress replies to remote clients as q does (over 2000 bytes, when under half)"},
    {"gateway", "compress_max", CFG_SIZE, CFG_LIVE, "67108864", 0, KMAX, G(compress_max), NULL,
     "largest reply held whole to change it, at its own size (a worker's compressed reply at its size decompressed): compressed for remote clients (larger go plain), decompressed for clients on this host (larger go as they came), checked for old clients (capability below 3: larger get 'qgate: reply too large)"},
    {"gateway", "merge_max", CFG_SIZE, CFG_LIVE, "268435456", 0, KMAX, G(merge_max), NULL,
     "bytes of the replies a .qgate.all collects to merge (a compressed one at its size decompressed); beyond, the client gets 'qgate: merge too large"},
    {"gateway", "hold_max", CFG_SIZE, CFG_LIVE, "1073741824", 0, KMAX, G(hold_max), NULL,
     "bytes held whole for clients at once, all together: replies collected to change them (decompressed, compressed, checked, merged) and the replies made from them until written; past it a reply goes as the worker sent it (compressed to a client on this host, plain to a remote one), and an old client's (capability below 3; one of 64 KiB or less is always held) or a .qgate.all's gets 'qgate: busy ('qgate: too large to hold whole when over hold_max by itself), as does a compressed route (held inflated until sent) that would pass it; a worker's message held whole to go in between two of another's (a broadcast's or a .qgate.all part's publish or callback) counts while collected, and past it is dropped (a callback's worker told busy); 0 = no limit"},
    {"gateway", "splice", CFG_BOOL, CFG_LIVE, "1", 0, 1, G(splice), NULL,
     "move reply bytes that need no change from worker to client inside the kernel (splice)"},
    {"gateway", "local_workers", CFG_ENUM, CFG_LIVE, "unix", 0, 0, G(local_workers), local_choices,
     "a worker at localhost, 127.0.0.1 or this host's own address: unix (over its Unix socket when that answers q's handshake, else TCP) or tcp"},
    {"gateway", "loglevel", CFG_ENUM, CFG_LIVE, "info", 0, 0, G(loglevel), level_choices,
     "the least severe lines logged: debug (every state change and message), info (connections, reloads, workers up and down), warn (a peer or a request gone wrong: a worker lost, a timeout, a client closed at a limit) or error (what the gateway itself could not do: listen, reload, write the access log, get memory)"},
    {"gateway", "users_file", CFG_STR, CFG_LIVE, "", 0, 1023, G(users_file), NULL,
     "q -U style users file (user:password, MD5 or SHA-1 hex; a regular file or a pipe, at most 64 MiB); empty = any credentials; a reload may change it; one that empties it is refused whole, the running configuration kept (turning authentication off takes a restart)"},
    {"gateway", "access_log", CFG_STR, CFG_LIVE, "", 0, 1023, G(access_log), NULL,
     "file getting one logfmt line per request (time, client, user, peer, group, worker, type, bytes, queued and run us, outcome); reopened on SIGHUP and SIGUSR1; empty = off"},
    {"gateway", "access_log_monitors", CFG_BOOL, CFG_LIVE, "1", 0, 1, G(access_log_monitors), NULL,
     "the requests of users-file monitors (monitor=1: health checks, dashboards) in the access log too; 0 = left out"},
    {"gateway", "access_log_query", CFG_ENUM, CFG_LIVE, "none", 0, 0, G(access_log_query), aq_choices,
     "a field of each access-log line naming the request's query: hash (its key, as .qgate.queries[] shows it) or text (its first bytes); none = no field"},
    {"gateway", "admin_from", CFG_ADDRS, CFG_LIVE, "", 0, 511, G(admin_from), NULL,
     "where admin commands are accepted from (an admin's commands from elsewhere get 'qgate: access): unix (q's Unix socket), loopback, addresses, address/prefix ranges, comma-separated; empty = from anywhere"},
    {"gateway", "proxy_from", CFG_ADDRS, CFG_LIVE, "", 0, 511, G(proxy_from), NULL,
     "sources (a load balancer: HAProxy's send-proxy or send-proxy-v2) whose connections start with a PROXY protocol header, v1 or v2: the client address it carries is the client's in the log, the access log, admin_from and .qgate.clients[]; a connection from one of them without a header, or a header from anywhere else, is closed; empty = none"},
    {"gateway", "metrics_port", CFG_INT, CFG_RESTART, "0", 0, 65535, G(metrics_port), NULL,
     "TCP port serving Prometheus metrics over HTTP (GET /metrics); 0 = off"},
    {"gateway", "metrics_bind", CFG_STR, CFG_RESTART, "", 0, 255, G(metrics_bind), NULL,
     "address the metrics port listens on; empty = as bind"},
    {"gateway", "stats_period", CFG_MS, CFG_LIVE, "60000", 0, KMAX, G(stats_period), NULL,
     "ms between one-line summaries in the log (requests, errors, rejects, clients, queue); 0 = off"},
    {"group", "workers", CFG_STR, CFG_LIVE, "", 0, 4095, W(workers), NULL,
     "the group's workers (required): host:port, unix://PORT (q's Unix socket for PORT) or unix:///path, comma-separated, each once (for more connections to one worker: pipeline)"},
    {"group", "user", CFG_STR, CFG_LIVE, "", 0, 255, W(user), NULL,
     "user name qgate presents to these workers"},
    {"group", "password", CFG_STR, CFG_LIVE, "", 0, 255, W(password), NULL,
     "password qgate presents to these workers (never logged)"},
    {"group", "async", CFG_ENUM, CFG_LIVE, "one", 0, 0, W(async_mode), async_choices,
     "async messages: one (a worker runs them, busy until done) or broadcast (every worker, in order)"},
    {"group", "users", CFG_STR, CFG_LIVE, "", 0, 1023, W(users), NULL,
     "client users routed to this group (comma list); others use the first group without users"},
    {"group", "pool", CFG_ENUM, CFG_LIVE, "request", 0, 0, W(pool_mode), pool_choices,
     "request (each request to any idle worker) or session (a client keeps one worker from its first request until it goes)"},
    {"group", "pipeline", CFG_INT, CFG_LIVE, "1", 1, 8, W(pipeline), NULL,
     "connections to each worker, one request on each at a time: 1 = a request waits for a worker with nothing to run; 2..8 = while every worker is busy, a sync request may go to a busy one's free connection, as pipeline_wait allows (more throughput for small requests; a query learned fast that turns slow holds it: the trade)"},
    {"group", "pipeline_wait", CFG_MS, CFG_LIVE, "1", 0, KMAX, W(pipeline_wait), NULL,
     "pipeline > 1, ms: a request goes to a busy worker only if what it runs on its other connections are queries learned to take, together, less than this (each query's slowest recent run), none has run that long yet, and none calls back; 0 = to a busy worker whatever it runs (a request may wait behind a slow query)"},
    {"group", "reset_query", CFG_STR, CFG_LIVE, "", 0, 1023, W(reset_query), NULL,
     "pool = session: q sent to the worker when its client goes (its reply dropped), before the worker's connection is renewed for the next session (its q runs .z.pc for the old handle); also on the worker's first connection, on the next when qgate dropped one before it ran (query_timeout), and after a reload that makes the group a session pool or sets this key, before any session has it; empty = none"},
};
const int cfg_nkeys = (int)(sizeof cfg_keys / sizeof cfg_keys[0]);
_Static_assert(sizeof cfg_keys / sizeof cfg_keys[0] <= CFG_MAX_KEYS, "cfg_keys outgrew CFG_MAX_KEYS");

static const struct cfg_key *find_key(int group, const char *name)
{
    const char *sec = group < 0 ? "gateway" : "group";
    for (int i = 0; i < cfg_nkeys; i++)
        if (!strcmp(cfg_keys[i].section, sec) && !strcmp(cfg_keys[i].name, name))
            return &cfg_keys[i];
    return NULL;
}

/* Numbers: decimal; sizes may end in k, m or g (KiB, MiB, GiB); times may end in ms or s. */
static int parse_num(const struct cfg_key *k, const char *v, int64_t *out)
{
    errno = 0;
    char *end;
    long long n = strtoll(v, &end, 10);
    if (end == v || errno)
        return -1;
    int64_t mul = 1;
    if (k->type == CFG_SIZE) {
        if (*end == 'k' || *end == 'K') mul = 1024, end++;
        else if (*end == 'm' || *end == 'M') mul = 1024 * 1024, end++;
        else if (*end == 'g' || *end == 'G') mul = 1024LL * 1024 * 1024, end++;
    } else if (k->type == CFG_MS) {
        if (!strcmp(end, "ms")) end += 2;
        else if (!strcmp(end, "s")) mul = 1000, end++;
    }
    if (*end || (n > 0 && n > INT64_MAX / mul) || (n < 0 && n < INT64_MIN / mul))
        return -1;
    *out = (int64_t)n * mul;
    return 0;
}

static void store_int(void *field, size_t size, int64_t v)
{
    if (size == sizeof(int))
        *(int *)field = (int)v;
    else
        *(int64_t *)field = v;
}

static int set_key(void *base, const struct cfg_key *k, const char *v, char *err, size_t errlen)
{
    void *field = (char *)base + k->offset;
    int64_t n;
    switch (k->type) {
    case CFG_INT:
    case CFG_MS:
    case CFG_SIZE:
        if (parse_num(k, v, &n)) {
            snprintf(err, errlen, "%s: '%s' is not a number", k->name, v);
            return -1;
        }
        if (n < k->min || n > k->max) {
            snprintf(err, errlen, "%s: %lld is outside %lld..%lld", k->name, (long long)n,
                     (long long)k->min, (long long)k->max);
            return -1;
        }
        store_int(field, k->size, n);
        return 0;
    case CFG_BOOL:
        if (!strcmp(v, "1") || !strcmp(v, "yes") || !strcmp(v, "true") || !strcmp(v, "on"))
            n = 1;
        else if (!strcmp(v, "0") || !strcmp(v, "no") || !strcmp(v, "false") || !strcmp(v, "off"))
            n = 0;
        else {
            snprintf(err, errlen, "%s: '%s' is not a boolean (1/0, yes/no)", k->name, v);
            return -1;
        }
        store_int(field, k->size, n);
        return 0;
    case CFG_ENUM:
        for (int i = 0; k->choices[i]; i++)
            if (!strcmp(v, k->choices[i])) {
                store_int(field, k->size, i);
                return 0;
            }
        int at = snprintf(err, errlen, "%s: '%s' is not one of the choices (", k->name, v);
        for (int i = 0; k->choices[i] && at >= 0 && (size_t)at < errlen; i++)
            at += snprintf(err + at, errlen - (size_t)at, "%s%s", i ? ", " : "", k->choices[i]);
        if (at >= 0 && (size_t)at < errlen)
            snprintf(err + at, errlen - (size_t)at, ")");
        return -1;
    case CFG_STR:
    case CFG_ADDRS:
        if (strlen(v) >= k->size || (int64_t)strlen(v) > k->max) {
            snprintf(err, errlen, "%s: value too long", k->name);
            return -1;
        }
        char why[200];
        if (k->type == CFG_ADDRS && net_addr_list_check(v, why, sizeof why)) {
            snprintf(err, errlen, "%s: %s", k->name, why);
            return -1;
        }
        strcpy(field, v);
        return 0;
    }
    return -1;
}

int config_group(struct config *c, const char *name)
{
    for (int i = 0; i < c->ngroups; i++)
        if (!strcmp(c->groups[i].name, name))
            return i;
    if (c->ngroups == CFG_MAX_GROUPS || strlen(name) >= CFG_NAME_MAX)
        return -1;
    struct group_cfg *g = &c->groups[c->ngroups];
    memset(g, 0, sizeof *g);
    strcpy(g->name, name);
    char err[64];
    for (int i = 0; i < cfg_nkeys; i++)
        if (!strcmp(cfg_keys[i].section, "group"))
            set_key(g, &cfg_keys[i], cfg_keys[i].def, err, sizeof err);
    return c->ngroups++;
}

void config_defaults(struct config *c)
{
    memset(c, 0, sizeof *c);
    char err[64];
    for (int i = 0; i < cfg_nkeys; i++)
        if (!strcmp(cfg_keys[i].section, "gateway"))
            set_key(c, &cfg_keys[i], cfg_keys[i].def, err, sizeof err);
}

int config_set(struct config *c, int group, const char *key, const char *value, char *err, size_t errlen)
{
    const struct cfg_key *k = find_key(group, key);
    if (!k) {
        if (group < 0)
            snprintf(err, errlen, "unknown key '%s' in [gateway]", key);
        else
            snprintf(err, errlen, "unknown key '%s' in [group %s]", key, c->groups[group].name);
        return -1;
    }
    if (set_key(group < 0 ? (void *)c : (void *)&c->groups[group], k, value, err, errlen))
        return -1;
    if (group >= 0 && !strcmp(key, "pipeline"))
        c->groups[group].pipeline_set = 1;
    return 0;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = 0;
    return s;
}

/* What one parse has seen, to refuse a second of anything: the line of each section's header
 * and of each key in each section. Index 0 is [gateway]; group i is i + 1. */
struct seen {
    int section[CFG_MAX_GROUPS + 1];
    int key[CFG_MAX_GROUPS + 1][CFG_MAX_KEYS];
};

/* One line of the file: a section header, a key, a comment. group is the current section. */
static int parse_line(struct config *c, struct seen *seen, char *s, int *group, const char *name, int lineno,
                      char *err, size_t errlen)
{
    char why[512];
    s = trim(s);
    if (!*s || *s == '#' || *s == ';')
        return 0;
    if (*s == '[') {
        char *e = strchr(s, ']');
        if (!e || e[1]) {
            snprintf(err, errlen, "%s:%d: bad section header", name, lineno);
            return -1;
        }
        *e = 0;
        char *sec = trim(s + 1);
        if (!strcmp(sec, "gateway")) {
            *group = -1;
        } else if (!strncmp(sec, "group", 5) && isspace((unsigned char)sec[5])) {
            char *gname = trim(sec + 5);
            if (!*gname || (*group = config_group(c, gname)) < 0) {
                if (*gname && strlen(gname) >= CFG_NAME_MAX)
                    snprintf(err, errlen, "%s:%d: a group's name is at most %d bytes", name, lineno, CFG_NAME_MAX - 1);
                else if (*gname)
                    snprintf(err, errlen, "%s:%d: [group %.64s]: too many groups (at most %d)", name, lineno, gname,
                             CFG_MAX_GROUPS);
                else
                    snprintf(err, errlen, "%s:%d: a group needs a name: [group NAME]", name, lineno);
                return -1;
            }
            if (!c->groups[*group].line)
                c->groups[*group].line = lineno;
        } else {
            snprintf(err, errlen, "%s:%d: unknown section [%s]", name, lineno, sec);
            return -1;
        }
        int *first = &seen->section[*group + 1];
        if (*first) { /* a second [group main] would have replaced the first one's keys */
            if (*group < 0)
                snprintf(err, errlen, "%s:%d: [gateway] again (first at line %d)", name, lineno, *first);
            else
                snprintf(err, errlen, "%s:%d: [group %s] again (first at line %d)", name, lineno,
                         c->groups[*group].name, *first);
            return -1;
        }
        *first = lineno;
        return 0;
    }
    char *eq = strchr(s, '=');
    if (!eq) {
        snprintf(err, errlen, "%s:%d: expected key = value", name, lineno);
        return -1;
    }
    *eq = 0;
    char *key = trim(s);
    const struct cfg_key *k = find_key(*group, key);
    int *first = k ? &seen->key[*group + 1][k - cfg_keys] : NULL;
    if (first && *first) { /* the last one would win, silently */
        snprintf(err, errlen, "%s:%d: %s again (first at line %d)", name, lineno, key, *first);
        return -1;
    }
    if (config_set(c, *group, key, trim(eq + 1), why, sizeof why)) {
        snprintf(err, errlen, "%s:%d: %s", name, lineno, why);
        return -1;
    }
    *first = lineno; /* config_set knew the key: k is not NULL */
    if (*group < 0)
        c->key_line[k - cfg_keys] = lineno;
    else if (!strcmp(key, "workers"))
        c->groups[*group].workers_line = lineno;
    else if (!strcmp(key, "users"))
        c->groups[*group].users_line = lineno;
    return 0;
}

int config_parse(struct config *c, const char *text, size_t len, const char *name, char *err, size_t errlen)
{
    char line[8192];
    int lineno = 0, group = -1;
    size_t off = len >= 3 && !memcmp(text, "\xef\xbb\xbf", 3) ? 3 : 0; /* a UTF-8 byte order mark, as
                                     * some editors write, is no key: skipped (helper round 15) */
    struct seen *seen = calloc(1, sizeof *seen);
    if (!seen) {
        snprintf(err, errlen, "%s: out of memory", name);
        return -1;
    }
    int rc = 0;
    while (off < len && !rc) {
        const char *nl = memchr(text + off, '\n', len - off);
        size_t l = nl ? (size_t)(nl - text - off) : len - off;
        lineno++;
        if (l >= sizeof line) {
            snprintf(err, errlen, "%s:%d: line too long", name, lineno);
            rc = -1;
            break;
        }
        memcpy(line, text + off, l);
        line[l] = 0;
        if (memchr(line, 0, l)) {
            snprintf(err, errlen, "%s:%d: NUL byte in line", name, lineno);
            rc = -1;
            break;
        }
        rc = parse_line(c, seen, line, &group, name, lineno, err, errlen);
        off += l + (nl ? 1 : 0);
    }
    free(seen);
    return rc;
}

/* ms on CLOCK_MONOTONIC */
static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#define PIPE_POLL_MS 100 /* a wait on a pipe looks at config_read_stop this often */
static atomic_int reads_stopped;

void config_read_stop(void) { atomic_store(&reads_stopped, 1); }

char *config_read_file(const char *path, size_t *len, char *err, size_t errlen)
{
    /* (not blocking: a FIFO nobody writes is not waited on for ever) */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    int fifo = S_ISFIFO(st.st_mode); /* (a shell's <(...) too) */
    if (!S_ISREG(st.st_mode) && !fifo) { /* a device (/dev/zero never ends), a directory, a socket */
        close(fd);
        snprintf(err, errlen, "%s: not a regular file or a pipe", path);
        return NULL;
    }
    const char *why = NULL;
    int64_t until = mono_ms() + CONFIG_PIPE_WAIT_MS;
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap + 1);
    while (buf && !why) {
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0 && errno == EAGAIN && fifo) { /* its writer has not written yet */
            int64_t left = until - mono_ms();
            struct pollfd pf = {.fd = fd, .events = POLLIN};
            if (atomic_load(&reads_stopped))
                why = "the gateway is exiting";
            else if (left <= 0)
                why = "a pipe whose writer sent nothing more for " CONFIG_PIPE_WAIT_TEXT;
            else
                poll(&pf, 1, (int)QG_MIN(left, PIPE_POLL_MS));
            continue;
        }
        if (got < 0) {
            why = strerror(errno);
            continue;
        }
        n += (size_t)got;
        if (got == 0)
            break;
        if (fifo) /* (5 s between its writes, not for all of it) */
            until = mono_ms() + CONFIG_PIPE_WAIT_MS;
        if (n > CONFIG_FILE_MAX) { /* no configuration is this big (one that grows meanwhile) */
            why = "file too large (over 64 MiB)";
            continue;
        }
        if (n < cap)
            continue;
        cap = cap * 2 < (size_t)CONFIG_FILE_MAX + 1 ? cap * 2 : (size_t)CONFIG_FILE_MAX + 1; /* (a byte past the
                                                                            * bound: one more says it is over) */
        char *nb = realloc(buf, cap + 1);
        if (!nb)
            free(buf);
        buf = nb;
    }
    close(fd);
    if (!why && !buf)
        why = "out of memory";
    if (!why && fifo && !n) /* a FIFO nobody writes reads as nothing at once */
        why = "a pipe nothing was written to";
    if (why) {
        snprintf(err, errlen, "%s: %s", path, why);
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

int config_load(struct config *c, const char *path, char *err, size_t errlen)
{
    snprintf(c->file, sizeof c->file, "%s", path);
    size_t len;
    char *buf = config_read_file(path, &len, err, errlen);
    if (!buf)
        return -1;
    int rc = config_parse(c, buf, len, path, err, errlen);
    free(buf);
    return rc;
}

int config_list_next(const char **p, char *out, size_t len)
{
    const char *s = *p;
    while (*s == ' ' || *s == '\t' || *s == ',')
        s++;
    if (!*s)
        return 0;
    const char *e = s;
    while (*e && *e != ',')
        e++;
    const char *t = e;
    while (t > s && (t[-1] == ' ' || t[-1] == '\t'))
        t--;
    snprintf(out, len, "%.*s", (int)(t - s), s);
    *p = e;
    return 1;
}

/* 1 if a comma-separated list has an item of nothing but blanks ("a,,b", "a,", ",a"). */
static int list_has_empty(const char *s)
{
    for (;;) {
        while (*s == ' ' || *s == '\t')
            s++;
        if (*s == ',' || !*s)
            return 1;
        while (*s && *s != ',')
            s++;
        if (!*s++)
            return 0;
    }
}

const char *config_where(const struct config *c, const struct group_cfg *g, int line, char *buf, size_t len)
{
    if (g->workers[0] && !g->workers_line)
        snprintf(buf, len, "--workers: ");
    else if (c->file[0] && line)
        snprintf(buf, len, "%s:%d: ", c->file, line);
    else if (c->file[0])
        snprintf(buf, len, "%s: ", c->file);
    else
        buf[0] = 0;
    return buf;
}

const char *config_key_where(const struct config *c, const char *name, char *buf, size_t len)
{
    const struct cfg_key *k = find_key(-1, name);
    int line = k ? c->key_line[k - cfg_keys] : 0;
    if (line < 0)
        snprintf(buf, len, "command line: ");
    else if (c->file[0] && line)
        snprintf(buf, len, "%s:%d: ", c->file, line);
    else if (c->file[0])
        snprintf(buf, len, "%s: ", c->file);
    else
        buf[0] = 0;
    return buf;
}

/* Where a [gateway] key other than the one a message is about was given: " (line 4)",
 * " (command line)" or "" (its default, or set by the program). */
static const char *key_origin(const struct config *c, const char *name, char *buf, size_t len)
{
    const struct cfg_key *k = find_key(-1, name);
    int line = k ? c->key_line[k - cfg_keys] : 0;
    if (line < 0)
        snprintf(buf, len, " (command line)");
    else if (line)
        snprintf(buf, len, " (line %d)", line);
    else
        buf[0] = 0;
    return buf;
}

/* ---- ports that clash ------------------------------------------------------------------------ */

/* An address to listen on that is every interface: "0.0.0.0", "::", "*" or empty. */
static int any_address(const char *h) { return !*h || !strcmp(h, "0.0.0.0") || !strcmp(h, "::") || !strcmp(h, "*"); }

/* A name for this host's loopback, as a worker's host is written (or the wildcard, which a
 * connect takes as this host). */
static int loopback(const char *h)
{
    return !strcasecmp(h, "localhost") || !strncmp(h, "127.", 4) || !strcmp(h, "::1") || !strcmp(h, "[::1]") ||
           any_address(h);
}

/* A name for the IPv4 (v6 0) loopback address "localhost" stands for, or the wildcard, which a
 * connect takes as it; not 127.0.0.9, which is an address of its own. */
static int localhost(const char *h, int v4)
{
    return !strcasecmp(h, "localhost") || any_address(h) ||
           (v4 ? !strcmp(h, "127.0.0.1") : !strcmp(h, "::1") || !strcmp(h, "[::1]"));
}

/* A name for localhost, either family: where q's Unix socket for a port is the same q. */
static int this_host(const char *h) { return localhost(h, 1) || localhost(h, 0); }

/* Does a listener of ours on bind:lport take connections to host:port? Only what the text
 * shows: the same address, a loopback address while we listen on every interface, or two names
 * for localhost (a listener on 127.0.0.1 takes none for 127.0.0.9). */
static int reaches(const char *host, int port, const char *bind, int lport)
{
    if (lport == 0 || port != lport)
        return 0;
    return !strcasecmp(host, bind) || (loopback(host) && any_address(bind)) ||
           (localhost(host, 1) && localhost(bind, 1)) || (localhost(host, 0) && localhost(bind, 0));
}

/* metrics_port on an address port's listener holds too: one of them could not listen. */
static int check_metrics_port(const struct config *c, char *err, size_t errlen)
{
    const char *mb = c->metrics_bind[0] ? c->metrics_bind : c->bind;
    if (!c->metrics_port || !c->port || c->metrics_port != c->port)
        return 0;
    if (!any_address(c->bind) && !any_address(mb) && strcasecmp(c->bind, mb))
        return 0; /* two addresses: two listeners */
    char at[300], from[64], on[600];
    if (!strcasecmp(c->bind, mb))
        snprintf(on, sizeof on, "%s:%d", c->bind, c->port);
    else
        snprintf(on, sizeof on, "port %d (bind %s, metrics_bind %s)", c->port, c->bind, mb);
    snprintf(err, errlen, "%smetrics_port %d clashes with port%s: both would listen on %s; give metrics_port a port "
             "of its own", config_key_where(c, "metrics_port", at, sizeof at), c->metrics_port,
             key_origin(c, "port", from, sizeof from), on);
    return -1;
}

/* A worker address that is this gateway: its port (over TCP, or q's Unix socket for the port,
 * which a local worker is tried on first), or its metrics port. Only what the text shows: a
 * name that resolves to this host is not looked up. */
static int check_worker_self(const struct config *c, const struct group_cfg *g, const struct net_target *t,
                             const char *addr, char *err, size_t errlen)
{
    const char *mb = c->metrics_bind[0] ? c->metrics_bind : c->bind, *what;
    const char *key;
    if ((t->kind == NET_UNIX_PORT && c->unix_socket && c->port && t->port == c->port) ||
        (t->kind == NET_TCP && reaches(t->host, t->port, c->bind, c->port)) ||
        (t->kind == NET_TCP && c->unix_socket && c->local_workers == CFG_LOCAL_UNIX &&
         this_host(t->host) && c->port && t->port == c->port)) {
        key = "port";
        what = "it would send its clients' queries to itself";
    } else if (t->kind == NET_TCP && reaches(t->host, t->port, mb, c->metrics_port)) {
        key = "metrics_port";
        what = "that serves HTTP, not q";
    } else {
        return 0;
    }
    char at[300], from[64];
    snprintf(err, errlen, "%sgroup %s: worker '%s' is this gateway's own %s%s: %s",
             config_where(c, g, g->workers_line, at, sizeof at), g->name, addr, key,
             key_origin(c, key, from, sizeof from), what);
    return -1;
}

/* The same worker twice in one group (t, the list's nth, against those before it): one q process
 * that would be taken for two workers, each given its own requests, which it would run one
 * after the other. Only what the text shows: the names of localhost are one host (127.0.0.2 is
 * not), no name is looked up; unix://P is the q at localhost:P (q -p P listens on both). */
static int check_worker_twice(const struct config *c, const struct group_cfg *g, const struct net_target *t,
                              const char *addr, int nth, char *err, size_t errlen)
{
    char a[300];
    const char *p = g->workers;
    for (int i = 0; i < nth && config_list_next(&p, a, sizeof a); i++) {
        struct net_target u;
        if (net_parse_target(a, "localhost", &u) || u.port != t->port)
            continue;
        if (u.kind != t->kind) { /* over TCP and over q's Unix socket for its port */
            const struct net_target *tcp = t->kind == NET_TCP ? t : &u, *uds = t->kind == NET_TCP ? &u : t;
            if (tcp->kind != NET_TCP || uds->kind != NET_UNIX_PORT || !this_host(tcp->host))
                continue;
        } else if (strcasecmp(u.host, t->host) && !(t->kind == NET_TCP && this_host(u.host) && this_host(t->host))) {
            continue;
        }
        char at[300];
        snprintf(err, errlen, "%sgroup %s: worker '%s' listed twice (first as '%s'): one q process, not two workers; "
                              "for more connections to one worker, pipeline = N",
                 config_where(c, g, g->workers_line, at, sizeof at), g->name, addr, a);
        return -1;
    }
    return 0;
}

/* Two [gateway] keys that contradict each other, said at the line of the one given last (the
 * command line after the file), the other's line in brackets: -1. */
static int contradiction(const struct config *c, const char *a, int64_t av, const char *rel, const char *b, int64_t bv,
                         char *err, size_t errlen)
{
    const struct cfg_key *ka = find_key(-1, a), *kb = find_key(-1, b);
    int la = ka ? c->key_line[ka - cfg_keys] : 0, lb = kb ? c->key_line[kb - cfg_keys] : 0;
    int b_last = (lb < 0 ? INT_MAX : lb) > (la < 0 ? INT_MAX : la);
    char at[300], oa[64] = "", ob[64] = "";
    if (b_last)
        key_origin(c, a, oa, sizeof oa);
    else
        key_origin(c, b, ob, sizeof ob);
    snprintf(err, errlen, "%s%s %lld%s %s %s %lld%s", config_key_where(c, b_last ? b : a, at, sizeof at), a,
             (long long)av, oa, rel, b, (long long)bv, ob);
    return -1;
}

int config_validate(const struct config *c, char *err, size_t errlen)
{
    if (c->ngroups == 0) {
        snprintf(err, errlen, "%s%sno worker group: add [group NAME] with workers = host:port, or --workers", c->file,
                 c->file[0] ? ": " : "");
        return -1;
    }
    for (int i = 0; i < c->ngroups; i++) {
        const struct group_cfg *g = &c->groups[i];
        char at[300];
        if (!g->workers[0]) {
            snprintf(err, errlen, "%sgroup %s: %s", config_where(c, g, g->workers_line ? g->workers_line : g->line, at, sizeof at),
                     g->name, g->workers_line ? "workers is empty" : "no workers key (workers = host:port,...)");
            return -1;
        }
        if (g->pool_mode == CFG_POOL_SESSION && g->async_mode == CFG_ASYNC_BROADCAST) {
            snprintf(err, errlen, "%sgroup %s: pool = session sends a client's messages to its one worker: "
                                  "async = broadcast does not apply", config_where(c, g, g->line, at, sizeof at), g->name);
            return -1;
        }
        if (g->pool_mode == CFG_POOL_SESSION && g->pipeline_set && g->pipeline > 1) {
            snprintf(err, errlen, "%sgroup %s: pool = session gives a client its own worker: pipeline does not apply",
                     config_where(c, g, g->line, at, sizeof at), g->name);
            return -1;
        }
        if (list_has_empty(g->workers)) { /* (a name left out: it ran with one worker fewer, unsaid) */
            snprintf(err, errlen, "%sgroup %s: an empty worker address in '%s' (two commas, or one at an end)",
                     config_where(c, g, g->workers_line, at, sizeof at), g->name, g->workers);
            return -1;
        }
        if (g->users[0] && list_has_empty(g->users)) {
            snprintf(err, errlen, "%sgroup %s: an empty user name in users '%s' (two commas, or one at an end)",
                     config_where(c, g, g->users_line, at, sizeof at), g->name, g->users);
            return -1;
        }
        char a[300];
        for (const char *p = g->users; config_list_next(&p, a, sizeof a);) {
            const char *k = strpbrk(a, "#;"); /* (at 01bef40 'bob ; x' was one user's name: bob not routed here) */
            if (k && k > a && (k[-1] == ' ' || k[-1] == '\t')) {
                snprintf(err, errlen, "%sgroup %s: users: '%s' holds a comment: a comment (# or ;) is a line of its "
                                      "own, not after a value",
                         config_where(c, g, g->users_line, at, sizeof at), g->name, a);
                return -1;
            }
        }
        int nth = 0;
        for (const char *p = g->workers; config_list_next(&p, a, sizeof a); nth++) {
            struct net_target t;
            if (net_parse_target(a, "localhost", &t)) {
                snprintf(err, errlen, "%sgroup %s: bad worker address '%s'",
                         config_where(c, g, g->workers_line, at, sizeof at), g->name, a);
                return -1;
            }
            if (check_worker_self(c, g, &t, a, err, errlen))
                return -1;
            if (check_worker_twice(c, g, &t, a, nth, err, errlen))
                return -1;
        }
    }
    if (check_metrics_port(c, err, errlen))
        return -1;
    if (c->client_low_water >= c->client_high_water)
        return contradiction(c, "client_low_water", c->client_low_water, "must be below", "client_high_water",
                             c->client_high_water, err, errlen);
    if (c->reconnect_min > c->reconnect_max)
        return contradiction(c, "reconnect_min", c->reconnect_min, "must not exceed", "reconnect_max", c->reconnect_max,
                             err, errlen);
    return 0;
}

/* ---- the files qgate writes, for --check -------------------------------------------------------- */

/* "user NAME (uid N)": who runs this, for messages about what it may write. */
static const char *who(char *buf, size_t len)
{
    uid_t uid = geteuid();
    struct passwd pw, *res = NULL;
    char pwbuf[1024];
    if (getpwuid_r(uid, &pw, pwbuf, sizeof pwbuf, &res) == 0 && res)
        snprintf(buf, len, "user %s (uid %u)", res->pw_name, (unsigned)uid);
    else
        snprintf(buf, len, "uid %u", (unsigned)uid);
    return buf;
}

/* The file at path as open(O_WRONLY | O_APPEND | O_CREAT) would need it (alog_open). 0, or -1
 * with the reason ("directory /x does not exist", ...) in why. */
static int writable_file(const char *path, char *why, size_t len)
{
    char user[128];
    struct stat st;
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            snprintf(why, len, "is a directory");
            return -1;
        }
        if (access(path, W_OK)) {
            snprintf(why, len, "not writable by %s: %s", who(user, sizeof user), strerror(errno));
            return -1;
        }
        return 0; /* a file, a FIFO, a device: opened as it is */
    }
    if (errno != ENOENT && errno != ENOTDIR) {
        snprintf(why, len, "%s", strerror(errno));
        return -1;
    }
    char dir[1024];
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    if (stat(dir, &st)) {
        if (errno == ENOENT)
            snprintf(why, len, "directory %s does not exist", dir);
        else
            snprintf(why, len, "directory %s: %s", dir, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(why, len, "%s is not a directory", dir);
        return -1;
    }
    if (access(dir, W_OK | X_OK)) {
        snprintf(why, len, "directory %s is not writable by %s: %s", dir, who(user, sizeof user), strerror(errno));
        return -1;
    }
    return 0;
}

int config_check_files(const struct config *c, char *err, size_t errlen)
{
    static const char *const written[] = {"access_log"}; /* [gateway] keys naming a file qgate writes */
    for (size_t i = 0; i < sizeof written / sizeof written[0]; i++) {
        const struct cfg_key *k = find_key(-1, written[i]);
        const char *path = (const char *)c + k->offset;
        char why[1200], at[300];
        if (path[0] && writable_file(path, why, sizeof why)) {
            snprintf(err, errlen, "%s%s %s: %s", config_key_where(c, k->name, at, sizeof at), k->name, path, why);
            return -1;
        }
    }
    return 0;
}

/* ---- what a reload does with each key ------------------------------------------------------- */

/* Does key k hold the same value in a and b (the struct config or struct group_cfg of each)? A
 * string is compared up to its NUL: what follows it in the field is whatever was there before. */
static int same_value(const struct cfg_key *k, const void *a, const void *b)
{
    const char *x = (const char *)a + k->offset, *y = (const char *)b + k->offset;
    return k->type == CFG_STR || k->type == CFG_ADDRS ? !strncmp(x, y, k->size) : !memcmp(x, y, k->size);
}

int config_restart_changed(const struct config *run, const struct config *nw, char *names, size_t len)
{
    int n = 0;
    size_t o = 0;
    if (names && len)
        names[0] = 0;
    for (int i = 0; i < cfg_nkeys; i++) {
        const struct cfg_key *k = &cfg_keys[i];
        if (k->reload != CFG_RESTART || strcmp(k->section, "gateway") || same_value(k, run, nw))
            continue;
        if (names && o < len)
            o += (size_t)snprintf(names + o, len - o, "%s%s", n ? ", " : "", k->name);
        n++;
    }
    return n;
}

void config_take_live(struct config *run, const struct config *nw)
{
    struct config keep = *run;
    *run = *nw;
    for (int i = 0; i < cfg_nkeys; i++) {
        const struct cfg_key *k = &cfg_keys[i];
        if (k->reload == CFG_RESTART && !strcmp(k->section, "gateway"))
            memcpy((char *)run + k->offset, (const char *)&keep + k->offset, k->size);
    }
}

/* ---- the key table printed: --print-config, its Markdown and roff forms ------------------------- */

/* A bound as it is written in the file: sizes with k, m or g when exact; 2^40 for no real limit. */
static void bound_text(const struct cfg_key *k, int64_t v, char *out, size_t len)
{
    static const char unit[] = "gmk";
    if (k->type == CFG_SIZE && v > 0)
        for (int u = 0; u < 3; u++) {
            int64_t m = (int64_t)1 << (10 * (3 - u));
            if (v % m == 0) {
                snprintf(out, len, "%lld%c", (long long)(v / m), unit[u]);
                return;
            }
        }
    if (v == KMAX)
        snprintf(out, len, "2^40");
    else
        snprintf(out, len, "%lld", (long long)v);
}

void config_key_values(const struct cfg_key *k, char *out, size_t len)
{
    char lo[32], hi[32];
    bound_text(k, k->min, lo, sizeof lo);
    bound_text(k, k->max, hi, sizeof hi);
    switch (k->type) {
    case CFG_INT:
        snprintf(out, len, "integer %s..%s", lo, hi);
        return;
    case CFG_MS:
        snprintf(out, len, "ms %s..%s", lo, hi);
        return;
    case CFG_SIZE:
        snprintf(out, len, "bytes %s..%s", lo, hi);
        return;
    case CFG_BOOL:
        snprintf(out, len, "boolean");
        return;
    case CFG_STR:
        snprintf(out, len, "text, up to %lld bytes", (long long)k->max);
        return;
    case CFG_ADDRS:
        snprintf(out, len, "sources: unix, loopback, addresses, address/prefix");
        return;
    case CFG_ENUM: {
        size_t o = 0;
        out[0] = 0;
        for (int i = 0; k->choices[i] && o < len; i++)
            o += (size_t)snprintf(out + o, len - o, "%s%s", i == 0 ? "" : k->choices[i + 1] ? ", " : " or ",
                                  k->choices[i]);
        return;
    }
    }
    snprintf(out, len, "?");
}

const char *config_key_reload(const struct cfg_key *k) { return k->reload == CFG_RESTART ? "needs a restart" : "applied"; }

/* One key in the file's form: its help, its values and what a reload does, then key = value. */
static void print_key(FILE *f, const struct cfg_key *k, const char *value)
{
    char values[256];
    config_key_values(k, values, sizeof values);
    fprintf(f, "# %s\n# %s; on reload: %s\n%s = %s\n", k->help, values, config_key_reload(k), k->name, value);
}

void config_print_reference(void *file)
{
    FILE *f = file;
    const char *sec = "";
    for (int i = 0; i < cfg_nkeys; i++) {
        const struct cfg_key *k = &cfg_keys[i];
        if (strcmp(sec, k->section)) {
            sec = k->section;
            fprintf(f, "\n[%s]\n", strcmp(sec, "group") ? sec : "group NAME");
        }
        print_key(f, k, k->def);
    }
}

/* A key's value in base (struct config or struct group_cfg) as the file writes it: numbers in
 * their unit (bytes, ms), booleans 1 or 0, an enum its name. */
static void value_text(const struct cfg_key *k, const void *base, char *out, size_t len)
{
    const char *p = (const char *)base + k->offset;
    int64_t n = 0;
    if (k->type != CFG_STR && k->type != CFG_ADDRS) {
        if (k->size == sizeof(int)) {
            int v;
            memcpy(&v, p, sizeof v);
            n = v;
        } else {
            memcpy(&n, p, sizeof n);
        }
    }
    switch (k->type) {
    case CFG_INT:
    case CFG_MS:
    case CFG_SIZE:
    case CFG_BOOL:
        snprintf(out, len, "%lld", (long long)n);
        return;
    case CFG_ENUM: {
        int nc = 0;
        while (k->choices[nc])
            nc++;
        snprintf(out, len, "%s", n >= 0 && n < nc ? k->choices[n] : "?");
        return;
    }
    case CFG_STR:
    case CFG_ADDRS:
        snprintf(out, len, "%.*s", (int)k->size, p);
        return;
    }
    snprintf(out, len, "?");
}

void config_print_effective(const struct config *c, void *file)
{
    FILE *f = file;
    char value[4096];
    fprintf(f, "\n[gateway]\n");
    for (int i = 0; i < cfg_nkeys; i++)
        if (!strcmp(cfg_keys[i].section, "gateway")) {
            value_text(&cfg_keys[i], c, value, sizeof value);
            print_key(f, &cfg_keys[i], value);
        }
    for (int g = 0; g < c->ngroups; g++) {
        fprintf(f, "\n[group %s]\n", c->groups[g].name);
        for (int i = 0; i < cfg_nkeys; i++) {
            const struct cfg_key *k = &cfg_keys[i];
            if (strcmp(k->section, "group"))
                continue;
            if (!strcmp(k->name, "password") && c->groups[g].password[0]) { /* never shown */
                char values[256];
                config_key_values(k, values, sizeof values);
                fprintf(f, "# %s\n# %s; on reload: %s\n# %s = (set, not shown)\n", k->help, values,
                        config_key_reload(k), k->name);
                continue;
            }
            value_text(k, &c->groups[g], value, sizeof value);
            print_key(f, k, value);
        }
    }
}

void config_markdown_row(const struct cfg_key *k, char *out, size_t len)
{
    char values[256];
    config_key_values(k, values, sizeof values);
    size_t o = (size_t)snprintf(out, len, "| `%s` | [%s] | `%s` | %s | %s | ", k->name, k->section, k->def, values,
                                config_key_reload(k));
    for (const char *h = k->help; *h && o + 3 < len; h++) { /* a | in the text would end the cell */
        if (*h == '|')
            out[o++] = '\\';
        out[o++] = *h;
    }
    snprintf(out + (o < len ? o : len - 1), len - (o < len ? o : len - 1), " |");
}

void config_print_markdown(void *file)
{
    FILE *f = file;
    char row[2048];
    fprintf(f, "| key | section | default | values | on reload | meaning |\n|---|---|---|---|---|---|\n");
    for (int i = 0; i < cfg_nkeys; i++) {
        config_markdown_row(&cfg_keys[i], row, sizeof row);
        fprintf(f, "%s\n", row);
    }
}

/* Text for a roff text line: backslashes, minus signs and quotes escaped, and a leading . or '
 * made harmless. */
static void man_text(FILE *f, const char *s)
{
    if (*s == '.' || *s == '\'')
        fputs("\\&", f);
    for (; *s; s++) {
        switch (*s) {
        case '\\': fputs("\\e", f); break;
        case '-': fputs("\\-", f); break;
        case '\'': fputs("\\(aq", f); break;
        case '`': fputs("\\(ga", f); break;
        default: fputc(*s, f);
        }
    }
}

void config_print_man(void *file)
{
    FILE *f = file;
    const char *sec = "";
    char values[256];
    for (int i = 0; i < cfg_nkeys; i++) {
        const struct cfg_key *k = &cfg_keys[i];
        if (strcmp(sec, k->section)) {
            sec = k->section;
            fprintf(f, strcmp(sec, "group") ? ".SS \"[%s]\"\n" : ".SS \"[%s \\fINAME\\fP]\"\n", sec);
        }
        fprintf(f, ".TP\n\\fB");
        man_text(f, k->name);
        fprintf(f, "\\fR = ");
        if (k->def[0]) {
            fprintf(f, "\\fI");
            man_text(f, k->def);
            fprintf(f, "\\fR\n");
        } else {
            fprintf(f, "(empty)\n");
        }
        man_text(f, k->help);
        fprintf(f, "%s\n.br\nValues: ", k->help[0] && k->help[strlen(k->help) - 1] == '.' ? "" : ".");
        config_key_values(k, values, sizeof values);
        man_text(f, values);
        fprintf(f, "; on reload: %s.\n", config_key_reload(k));
    }
}

int config_override(struct cfg_overrides *ov, int default_group, const char *key, const char *value)
{
    if (ov->n == (int)(sizeof ov->o / sizeof ov->o[0]) || strlen(key) >= sizeof ov->o[0].key ||
        strlen(value) >= sizeof ov->o[0].value)
        return -1;
    ov->o[ov->n].default_group = default_group;
    strcpy(ov->o[ov->n].key, key);
    strcpy(ov->o[ov->n].value, value);
    ov->n++;
    return 0;
}

int config_assemble(struct config *c, const char *path, const struct cfg_overrides *ov, char *err, size_t errlen)
{
    config_defaults(c);
    if (path && *path && config_load(c, path, err, errlen))
        return -1;
    for (int i = 0; ov && i < ov->n; i++) {
        int grp = -1;
        if (ov->o[i].default_group && (grp = c->ngroups ? 0 : config_group(c, "default")) < 0) {
            snprintf(err, errlen, "cannot create the default group");
            return -1;
        }
        char why[256];
        if (config_set(c, grp, ov->o[i].key, ov->o[i].value, why, sizeof why)) {
            snprintf(err, errlen, "command line: %s", why);
            return -1;
        }
        if (grp >= 0 && !strcmp(ov->o[i].key, "workers"))
            c->groups[grp].workers_line = 0; /* given on the command line */
        const struct cfg_key *k = grp < 0 ? find_key(-1, ov->o[i].key) : NULL;
        if (k)
            c->key_line[k - cfg_keys] = -1;
    }
    return 0;
}

int config_build(struct config *c, const char *path, const struct cfg_overrides *ov, char *err, size_t errlen)
{
    return config_assemble(c, path, ov, err, errlen) ? -1 : config_validate(c, err, errlen);
}
