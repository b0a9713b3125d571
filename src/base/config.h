/* config.h: gateway configuration: one declarative table of keys, an INI loader, overrides. */
#ifndef CONFIG_H
#define CONFIG_H

#include <stddef.h>
#include <stdint.h>

#define CFG_MAX_GROUPS 16
#define CFG_NAME_MAX 64
#define CFG_MAX_KEYS 64 /* entries of cfg_keys, both sections (config.c asserts it) */

struct group_cfg {
    char name[CFG_NAME_MAX];
    char workers[4096];   /* host:port, unix://PORT or unix:///path, comma-separated */
    char user[256];       /* credentials qgate presents to these workers */
    char password[256];
    int async_mode;       /* enum cfg_async */
    char users[1024];     /* client users routed to this group; empty = the default route */
    int pool_mode;        /* enum cfg_pool */
    int pipeline;         /* requests a worker may hold at once (1: only the one it runs) */
    int pipeline_set;     /* pipeline was given (pool = session refuses it then, else ignores it) */
    int64_t pipeline_wait; /* ms: hold only behind runs learned to end within it; 0 = any */
    char reset_query[1024]; /* pool = session: sent to a worker when its session ends; empty = none */
    int line;             /* of its [group] header in the file; 0 = made by --workers */
    int workers_line;     /* of its workers key; 0 = not in the file (--workers, or missing) */
    int users_line;       /* of its users key; 0 = not in the file */
};

enum cfg_async { CFG_ASYNC_ONE = 0, CFG_ASYNC_BROADCAST = 1 };
enum cfg_pool { CFG_POOL_REQUEST = 0, CFG_POOL_SESSION = 1 };
enum cfg_alog_query { CFG_AQ_NONE, CFG_AQ_HASH, CFG_AQ_TEXT };
enum cfg_local { CFG_LOCAL_UNIX = 0, CFG_LOCAL_TCP = 1 };

struct config {
    int port;
    char bind[256];
    int unix_socket;
    int reuseport;        /* SO_REUSEPORT on the client listener: several processes on one port */
    int max_clients;
    int64_t max_message;
    int max_queue;
    int64_t queue_timeout, query_timeout, handshake_timeout, drain_timeout, client_stall_timeout;
    int reader_threads, writer_threads;
    int64_t chunk_size, read_budget, write_budget;
    int frames_budget;
    int64_t client_high_water, client_low_water, client_max_pending;
    int64_t worker_connect_timeout, reconnect_min, reconnect_max;
    int64_t keepalive_idle, keepalive_interval; /* TCP keepalive probes (ms); idle 0 = none */
    int keepalive_count;
    int64_t tcp_user_timeout; /* ms data sent may stay unacknowledged (TCP_USER_TIMEOUT); 0 = the system's */
    int compress;
    int64_t compress_max;
    int64_t merge_max;
    int64_t hold_max;
    int64_t pending_max;
    int splice;
    int local_workers;    /* enum cfg_local */
    int loglevel;
    char users_file[1024];
    char access_log[1024]; /* empty = off */
    int access_log_monitors; /* monitor users' requests (health checks) in it too */
    int access_log_query; /* enum cfg_alog_query: a field naming each request's query */
    char admin_from[512]; /* sources admin commands are accepted from (net_addr_listed); empty = any */
    char proxy_from[512]; /* sources whose connections start with a PROXY header; empty = none */
    int metrics_port;     /* 0 = off */
    char metrics_bind[256]; /* empty = as bind */
    int64_t stats_period; /* ms; 0 = off */
    struct group_cfg groups[CFG_MAX_GROUPS];
    int ngroups;
    char file[256];       /* the file it was loaded from, for messages; empty = none */
    int key_line[CFG_MAX_KEYS]; /* of each [gateway] key (by its index in cfg_keys) in the file, for
                                 * messages; 0 = not in it, -1 = given on the command line */
};

enum cfg_type { CFG_INT, CFG_MS, CFG_SIZE, CFG_BOOL, CFG_STR, CFG_ENUM, CFG_ADDRS };

/* What a reload (SIGHUP, .qgate.reload[]) does with a key whose value the file now changes. */
enum cfg_reload {
    CFG_LIVE = 0,    /* applied: the running gateway takes the new value (config_take_live) */
    CFG_RESTART = 1, /* kept as it runs, with a warning: only a restart changes it (the listeners,
                      * the pools' threads). [gateway] keys only: a group's keys are all live */
};

/* One configuration key: where it lives, its type, whether a reload applies it, default,
 * bounds and help text. The one place a key is documented: --print-config, gateway.conf.example's
 * comments, docs/configuration.md's table and qgate.1's CONFIGURATION are made from it. */
struct cfg_key {
    const char *section; /* "gateway" or "group" */
    const char *name;
    enum cfg_type type;
    enum cfg_reload reload;
    const char *def;     /* default, as written in the file */
    int64_t min, max;    /* bounds for numbers; max length for strings */
    size_t offset;       /* in struct config or struct group_cfg */
    size_t size;         /* field size */
    const char *const *choices; /* CFG_ENUM names, NULL-terminated */
    const char *help;
};

extern const struct cfg_key cfg_keys[];
extern const int cfg_nkeys;

/* Every key set to its default; no groups. */
void config_defaults(struct config *c);

/* Parse INI text (len bytes, any content) over the current values; name is used in messages.
 * A section header or a key that the text has already given in that section is refused
 * ("name:12: [group main] again (first at line 3)", "name:9: port again (first at line 4)"):
 * keys before any header are [gateway]'s, and so are those under a later [gateway] header.
 * 0, or -1 with "name:line: reason" in err. */
int config_parse(struct config *c, const char *text, size_t len, const char *name, char *err, size_t errlen);

/* A configuration file's bytes (the config, the users file), NUL-terminated after *len, or NULL
 * with "file: reason" in err: a regular file, or a pipe (a shell's <(...)) whose writer sends it
 * all with no wait of CONFIG_PIPE_WAIT_MS between reads, of at most CONFIG_FILE_MAX bytes (a
 * device, such as /dev/zero that never ends, is refused; so is a FIFO nobody writes, which
 * reads as nothing: never waited on for ever). */
#define CONFIG_FILE_MAX (64u << 20)
#define CONFIG_PIPE_WAIT_MS 5000
#define CONFIG_PIPE_WAIT_TEXT "5 s"
char *config_read_file(const char *path, size_t *len, char *err, size_t errlen);
/* From now on a read waiting on a pipe's writer stops at once, and one that would wait fails
 * ("the gateway is exiting"): a reload's read on a pool thread, of a pipe a writer trickles into
 * (each byte restarting the 5 s), held the exit for as long as the writer went on. Any thread. */
void config_read_stop(void);

/* Load an INI file over the current values. 0, or -1 with "file:line: reason" in err. */
int config_load(struct config *c, const char *path, char *err, size_t errlen);

/* Set one key. group < 0 means [gateway]; else the index of a [group] section.
 * 0, or -1 with a reason in err. */
int config_set(struct config *c, int group, const char *key, const char *value, char *err, size_t errlen);

/* Add (or find) a group by name; its index, or -1 if there are too many. */
int config_group(struct config *c, const char *name);

/* Cross-key checks (workers present and well formed, water marks, back-off bounds, ports that
 * clash: metrics_port on port's address, a worker that is this gateway's own port or metrics
 * port). 0, or -1 with a reason in err. */
int config_validate(const struct config *c, char *err, size_t errlen);

/* Where a group's workers were given, for messages: "FILE:LINE: ", "FILE: " or "--workers: ". */
const char *config_where(const struct config *c, const struct group_cfg *g, int line, char *buf, size_t len);
/* Where the [gateway] key name was given, for messages: "FILE:LINE: ", "command line: ",
 * "FILE: " (not in the file: its default) or "" (no file). */
const char *config_key_where(const struct config *c, const char *name, char *buf, size_t len);

/* The files qgate writes (access_log) as the user running this: an existing one is no directory
 * and is writable; a new one's directory exists and is writable. Touches nothing. For --check
 * (starting fails on them anyway). 0, or -1 with "FILE:LINE: access_log PATH: why" in err. */
int config_check_files(const struct config *c, char *err, size_t errlen);

/* Command-line overrides, kept so that a reload applies them again. */
struct cfg_overrides {
    int n;
    struct {
        int default_group; /* 1: the key is a [group] key of the default group */
        char key[64];
        char value[4096];
    } o[16];
};

/* Record an override. 0, or -1 if there are too many or the value is too long. */
int config_override(struct cfg_overrides *ov, int default_group, const char *key, const char *value);

/* Defaults, then the file (if path is non-empty), then the overrides (the default group is
 * the first group, created as "default" when the file has none). 0, or -1 with a reason in err. */
int config_assemble(struct config *c, const char *path, const struct cfg_overrides *ov, char *err, size_t errlen);
/* config_assemble, then config_validate. 0, or -1 with a reason in err. */
int config_build(struct config *c, const char *path, const struct cfg_overrides *ov, char *err, size_t errlen);

/* The next item of a comma list ("a, b,c"), trimmed, into out; *p advances past it. 1, or 0
 * at the end of the list. Items longer than len - 1 are cut. */
int config_list_next(const char **p, char *out, size_t len);

/* The keys that need a restart (CFG_RESTART) whose value nw changes from run's: how many, and
 * their names, comma-separated, in names (len bytes; names may be NULL). */
int config_restart_changed(const struct config *run, const struct config *nw, char *names, size_t len);
/* A reloaded configuration nw taken as the running one, run: every key a reload applies and
 * nw's groups, the keys that need a restart kept as run has them. */
void config_take_live(struct config *run, const struct config *nw);

/* What a key takes, for the docs: "integer 0..65535", "bytes 4k..64m", "unix or tcp", ... */
void config_key_values(const struct cfg_key *k, char *out, size_t len);
/* What a reload does with it: "applied" or "needs a restart". */
const char *config_key_reload(const struct cfg_key *k);

/* Print every key with its default, values, reload and help, in gateway.conf.example form
 * (qgate --print-config). */
void config_print_reference(void *file);
/* The same form with c's values: [gateway], then a [group NAME] per group (none if c has none);
 * a group's password, when set, as a comment that does not show it (qgate --print-config -c FILE). */
void config_print_effective(const struct config *c, void *file);
/* The same as a Markdown table (docs/configuration.md's, which `make docs` writes): a header, then
 * a row per key, config_markdown_row's (qgate --print-config=markdown). */
void config_print_markdown(void *file);
void config_markdown_row(const struct cfg_key *k, char *out, size_t len);
/* The same in roff for man(7): a .SS per section, a .TP per key (qgate.1's CONFIGURATION, between
 * its markers, which `make docs` writes; qgate --print-config=man). */
void config_print_man(void *file);

#endif
