/* test_config.c: the key table against the docs, defaults, the INI loader, errors, validation,
 * command-line overrides and the printed reference. Runs from the project root. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "reload.h"
#include "tutil.h"

#define EXAMPLE "gateway.conf.example"
#define README "docs/configuration.md" /* the reference the README points to */
#define MANPAGE "pkg/qgate.1"

/* ---- helpers ------------------------------------------------------------------------------ */

static const struct cfg_key *key_named(const char *section, const char *name)
{
    for (int i = 0; i < cfg_nkeys; i++)
        if (!strcmp(cfg_keys[i].section, section) && !strcmp(cfg_keys[i].name, name))
            return &cfg_keys[i];
    return NULL;
}

/* A numeric field (int or int64_t) through the key's offset and size. */
static int64_t field_num(const void *base, const struct cfg_key *k)
{
    const char *p = (const char *)base + k->offset;
    if (k->size == sizeof(int)) {
        int v;
        memcpy(&v, p, sizeof v);
        return v;
    }
    assert_int_equal(k->size, sizeof(int64_t));
    int64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static const char *field_str(const void *base, const struct cfg_key *k)
{
    return (const char *)base + k->offset;
}

/* Whole file into a malloc'd NUL-terminated buffer; NULL if it cannot be opened. */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    assert_non_null(b);
    size_t r;
    while ((r = fread(b + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (cap - n < 2) {
            cap *= 2;
            b = realloc(b, cap);
            assert_non_null(b);
        }
    }
    b[n] = 0;
    fclose(f);
    return b;
}

/* Write text to a new temporary file; the path goes in path[] (remove it with unlink). */
static void write_temp(char *path, size_t pathlen, const char *text)
{
    snprintf(path, pathlen, "/tmp/qgate-test-config-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t n = strlen(text);
    assert_int_equal(write(fd, text, n), (ssize_t)n);
    close(fd);
}

/* Defaults, then load text from a temp file. Returns config_load's result. */
static int load_text(struct config *c, const char *text, char *err, size_t errlen, char *path, size_t pathlen)
{
    config_defaults(c);
    write_temp(path, pathlen, text);
    err[0] = 0;
    return config_load(c, path, err, errlen);
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

/* Does the INI text have an uncommented "name = ..." line in a section of this kind? Kinds:
 * "gateway" for [gateway], "group" for [group NAME]. */
static int ini_has_key(const char *text, const char *kind, const char *name)
{
    char *copy = strdup(text);
    assert_non_null(copy);
    const char *cur = "";
    int found = 0;
    char *save = NULL;
    for (char *line = strtok_r(copy, "\n", &save); line && !found; line = strtok_r(NULL, "\n", &save)) {
        char *s = trim(line);
        if (*s == '[') {
            char *e = strchr(s, ']');
            if (!e)
                cur = "";
            else {
                *e = 0;
                char *sec = trim(s + 1);
                if (!strcmp(sec, "gateway"))
                    cur = "gateway";
                else if (!strncmp(sec, "group", 5) && isspace((unsigned char)sec[5]))
                    cur = "group";
                else
                    cur = "";
            }
            continue;
        }
        if (strcmp(cur, kind))
            continue;
        size_t l = strlen(name);
        if (!strncmp(s, name, l)) {
            const char *t = s + l;
            while (*t == ' ' || *t == '\t')
                t++;
            if (*t == '=')
                found = 1;
        }
    }
    free(copy);
    return found;
}

/* err must be exactly "path:line: " followed by text containing why. */
static void assert_file_err(const char *err, const char *path, int line, const char *why)
{
    char prefix[512];
    snprintf(prefix, sizeof prefix, "%s:%d: ", path, line);
    if (strncmp(err, prefix, strlen(prefix)) || !strstr(err + strlen(prefix), why))
        fail_msg("error '%s' is not '%s...%s...'", err, prefix, why);
}

/* Load text that must fail on the given line with a reason containing why. */
static void expect_load_err(const char *text, int line, const char *why)
{
    struct config c;
    char err[1024], path[64];
    int rc = load_text(&c, text, err, sizeof err, path, sizeof path);
    if (rc != -1)
        fail_msg("loading <<%s>> succeeded; expected line %d: %s", text, line, why);
    assert_file_err(err, path, line, why);
    unlink(path);
}

/* text loads, then config_build's validation fails at that line of the file, saying why */
static void expect_build_err(const char *text, int line, const char *why)
{
    struct config *c = malloc(sizeof *c);
    char err[1024], path[64];
    assert_non_null(c);
    write_temp(path, sizeof path, text);
    if (config_build(c, path, NULL, err, sizeof err) != -1)
        fail_msg("building <<%s>> succeeded; expected line %d: %s", text, line, why);
    assert_file_err(err, path, line, why);
    unlink(path);
    free(c);
}

/* ---- the table against the documentation ----------------------------------------------------- */

static void test_keys_in_example(void **state)
{
    (void)state;
    char *text = slurp(EXAMPLE);
    if (!text)
        fail_msg("%s is missing (tests run from the project root)", EXAMPLE);
    int missing = 0;
    for (int i = 0; i < cfg_nkeys; i++) {
        const struct cfg_key *k = &cfg_keys[i];
        if (!ini_has_key(text, k->section, k->name)) {
            print_error("%s: no uncommented '%s = ...' line under a [%s] section\n", EXAMPLE, k->name,
                        strcmp(k->section, "group") ? k->section : "group NAME");
            missing++;
        }
    }
    free(text);
    assert_int_equal(missing, 0);
}

/* The text of path between the line starting begin and the line starting end is what print
 * makes of cfg_keys: a key added, removed or re-helped in src/base/config.c fails here until
 * `make docs` writes it. */
static void check_generated(const char *path, const char *begin, const char *end_mark, void (*print)(void *))
{
    char *text = slurp(path);
    if (!text)
        fail_msg("%s is missing (tests run from the project root)", path);
    const char *b = strstr(text, begin);
    const char *e = b ? strstr(b, end_mark) : NULL;
    if (!b || !e)
        fail_msg("%s: the markers of make docs around the keys are missing", path);
    b = strchr(b, '\n') + 1;
    char *made = NULL;
    size_t made_len = 0;
    FILE *f = open_memstream(&made, &made_len);
    assert_non_null(f);
    print(f);
    fclose(f);
    if ((size_t)(e - b) != made_len || memcmp(b, made, made_len))
        fail_msg("%s: the keys are not what src/base/config.c makes: run make docs", path);
    free(made);
    free(text);
}

/* docs/configuration.md's table of keys is the one cfg_keys makes (config_print_markdown). */
static void test_keys_table_generated(void **state)
{
    (void)state;
    check_generated(README, "<!-- the table below is made by `make docs`", "<!-- end of the table made by make docs -->",
                    config_print_markdown);
}

/* qgate.1's CONFIGURATION lists the keys cfg_keys makes (config_print_man). */
static void test_keys_man_generated(void **state)
{
    (void)state;
    check_generated(MANPAGE, ".\\\" the key list below is made by `make docs`", ".\\\" end of the key list made by make docs",
                    config_print_man);
}

/* Output of a printer, malloc'd. */
static char *printed(void (*print)(void *))
{
    char *made = NULL;
    size_t made_len = 0;
    FILE *f = open_memstream(&made, &made_len);
    assert_non_null(f);
    print(f);
    fclose(f);
    return made;
}

/* A key added in one place, cfg_keys, is in every form of the reference: --print-config (and
 * gateway.conf.example, its copy), docs/configuration.md's table, qgate.1's CONFIGURATION, each
 * with its default, values and what a reload does with it. */
static void test_keys_everywhere(void **state)
{
    (void)state;
    char *ref = printed(config_print_reference), *md = slurp(README), *man = slurp(MANPAGE), *ex = slurp(EXAMPLE);
    assert_non_null(md);
    assert_non_null(man);
    assert_non_null(ex);
    for (int i = 0; i < cfg_nkeys; i++) {
        const struct cfg_key *k = &cfg_keys[i];
        char want[1024], values[256];
        config_key_values(k, values, sizeof values);
        snprintf(want, sizeof want, "\n# %s\n# %s; on reload: %s\n%s = %s\n", k->help, values, config_key_reload(k),
                 k->name, k->def);
        if (!strstr(ref, want))
            fail_msg("--print-config lacks %s as <<%s>>", k->name, want);
        if (strcmp(k->name, "workers") && !strstr(ex, want)) /* the example names its workers */
            fail_msg("%s: %s is not as --print-config prints it: <<%s>>", EXAMPLE, k->name, want);
        snprintf(want, sizeof want, "| `%s` | [%s] | `%s` | %s | %s | ", k->name, k->section, k->def, values,
                 config_key_reload(k));
        if (!strstr(md, want))
            fail_msg("%s lacks the row of %s: <<%s>>", README, k->name, want);
        snprintf(want, sizeof want, ".TP\n\\fB%s\\fR = ", k->name);
        const char *entry = strstr(man, want), *next = entry ? strstr(entry + 1, ".TP\n") : NULL;
        if (!entry)
            fail_msg("%s lacks the entry of %s: <<%s>>", MANPAGE, k->name, want);
        snprintf(want, sizeof want, "; on reload: %s.\n", config_key_reload(k));
        const char *says = strstr(entry, want);
        if (!says || (next && says > next))
            fail_msg("%s: the entry of %s does not say '%s'", MANPAGE, k->name, want);
    }
    free(ref);
    free(md);
    free(man);
    free(ex);
}

/* The table itself is coherent: names unique per section, fields inside their structs, sizes
 * that match the type, enum defaults among the choices. */
static void test_table_shape(void **state)
{
    (void)state;
    assert_true(cfg_nkeys > 0);
    for (int i = 0; i < cfg_nkeys; i++) {
        const struct cfg_key *k = &cfg_keys[i];
        int grp = !strcmp(k->section, "group");
        assert_true(grp || !strcmp(k->section, "gateway"));
        for (int j = i + 1; j < cfg_nkeys; j++)
            if (!strcmp(k->section, cfg_keys[j].section))
                assert_string_not_equal(k->name, cfg_keys[j].name);
        size_t whole = grp ? sizeof(struct group_cfg) : sizeof(struct config);
        assert_true(k->offset + k->size <= whole);
        assert_non_null(k->def);
        assert_non_null(k->help);
        if (k->type == CFG_STR || k->type == CFG_ADDRS)
            assert_true(k->max < (int64_t)k->size);
        else
            assert_true(k->size == sizeof(int) || k->size == sizeof(int64_t));
        if (k->type == CFG_ENUM)
            assert_non_null(k->choices);
        assert_true(k->reload == CFG_LIVE || k->reload == CFG_RESTART);
        if (grp && k->reload != CFG_LIVE) /* reload.c applies a group's keys whole (reload_group) */
            fail_msg("[group] key %s needs a restart: config_take_live and reload_group keep none", k->name);
    }
}

/* ---- defaults -------------------------------------------------------------------------------- */

/* The default of k, parsed independently of config.c, compared with the field. */
static void check_default(const void *base, const struct cfg_key *k)
{
    switch (k->type) {
    case CFG_INT:
    case CFG_MS:
    case CFG_SIZE: {
        char *end;
        long long v = strtoll(k->def, &end, 10);
        assert_true(end != k->def && *end == 0); /* defaults are written as plain numbers */
        if (field_num(base, k) != v)
            fail_msg("%s: default %s, field holds %lld", k->name, k->def, (long long)field_num(base, k));
        assert_true(v >= k->min && v <= k->max);
        break;
    }
    case CFG_BOOL: {
        int v = !strcmp(k->def, "1") || !strcmp(k->def, "yes") || !strcmp(k->def, "true") || !strcmp(k->def, "on");
        int f = !strcmp(k->def, "0") || !strcmp(k->def, "no") || !strcmp(k->def, "false") || !strcmp(k->def, "off");
        assert_true(v != f);
        if (field_num(base, k) != v)
            fail_msg("%s: default %s, field holds %lld", k->name, k->def, (long long)field_num(base, k));
        break;
    }
    case CFG_ENUM: {
        int idx = -1;
        for (int i = 0; k->choices[i]; i++)
            if (!strcmp(k->choices[i], k->def))
                idx = i;
        assert_true(idx >= 0);
        if (field_num(base, k) != idx)
            fail_msg("%s: default %s (choice %d), field holds %lld", k->name, k->def, idx,
                     (long long)field_num(base, k));
        break;
    }
    case CFG_STR:
    case CFG_ADDRS:
        assert_string_equal(field_str(base, k), k->def);
        break;
    default:
        fail_msg("%s: unknown type %d", k->name, (int)k->type);
    }
}

static void test_defaults(void **state)
{
    (void)state;
    struct config *c = malloc(sizeof *c);
    assert_non_null(c);
    memset(c, 0x5a, sizeof *c); /* garbage: config_defaults must set everything it owns */
    config_defaults(c);
    assert_int_equal(c->ngroups, 0);
    for (int i = 0; i < cfg_nkeys; i++)
        if (!strcmp(cfg_keys[i].section, "gateway"))
            check_default(c, &cfg_keys[i]);
    /* a new group gets the group defaults */
    int g = config_group(c, "main");
    assert_int_equal(g, 0);
    assert_int_equal(c->ngroups, 1);
    assert_string_equal(c->groups[0].name, "main");
    for (int i = 0; i < cfg_nkeys; i++)
        if (!strcmp(cfg_keys[i].section, "group"))
            check_default(&c->groups[0], &cfg_keys[i]);
    /* the documented values, spelled out */
    assert_int_equal(c->port, 8811);
    assert_int_equal(c->max_message, 2147483647);
    assert_int_equal(c->loglevel, 2); /* error warn info debug */
    assert_string_equal(c->bind, "0.0.0.0");
    assert_int_equal(c->unix_socket, 1);
    assert_int_equal(c->compress, 1);
    assert_int_equal(c->handshake_timeout, 5000);
    assert_int_equal(c->client_high_water, 8388608);
    assert_int_equal(c->client_low_water, 2097152);
    assert_string_equal(c->users_file, "");
    assert_int_equal(c->groups[0].async_mode, CFG_ASYNC_ONE);
    assert_string_equal(c->groups[0].workers, "");
    /* the table points at the right fields */
    assert_int_equal(key_named("gateway", "port")->offset, offsetof(struct config, port));
    assert_int_equal(key_named("gateway", "max_message")->offset, offsetof(struct config, max_message));
    assert_int_equal(key_named("gateway", "reconnect_max")->offset, offsetof(struct config, reconnect_max));
    assert_int_equal(key_named("group", "async")->offset, offsetof(struct group_cfg, async_mode));
    assert_int_equal(key_named("group", "workers")->size, sizeof c->groups[0].workers);
    assert_null(key_named("group", "port"));
    /* asking again for the same name finds it */
    assert_int_equal(config_group(c, "main"), 0);
    assert_int_equal(config_group(c, "other"), 1);
    assert_int_equal(c->ngroups, 2);
    free(c);
}

/* The example's [gateway] values are the defaults it claims to document. */
static void test_example_loads_as_defaults(void **state)
{
    (void)state;
    struct config *d = malloc(sizeof *d), *c = malloc(sizeof *c);
    assert_non_null(d);
    assert_non_null(c);
    config_defaults(d);
    config_defaults(c);
    char err[1024] = "";
    if (config_load(c, EXAMPLE, err, sizeof err))
        fail_msg("%s does not load: %s", EXAMPLE, err);
    assert_true(c->ngroups >= 1);
    if (config_validate(c, err, sizeof err))
        fail_msg("%s does not validate: %s", EXAMPLE, err);
    for (int i = 0; i < cfg_nkeys; i++) {
        const struct cfg_key *k = &cfg_keys[i];
        if (strcmp(k->section, "gateway"))
            continue;
        if (memcmp((char *)c + k->offset, (char *)d + k->offset, k->size))
            fail_msg("%s: %s is not its default %s", EXAMPLE, k->name, k->def);
    }
    free(d);
    free(c);
}

/* ---- loading --------------------------------------------------------------------------------- */

static void test_load_full(void **state)
{
    (void)state;
    struct config *c = malloc(sizeof *c);
    assert_non_null(c);
    char err[1024], path[64];
    static const char good[] =
        "# qgate test configuration\n"
        "; semicolon comment\n"
        "\n"
        "[gateway]\n"
        "  # indented comment\n"
        "port=9000\n"
        "  bind   =   127.0.0.1  \n"
        "# port = 1\n"
        "; port = 2\n"
        "max_clients = 42\n"
        "max_message = 16m\n"
        "chunk_size = 8k\n"
        "read_budget = 1G\n"
        "write_budget = 5000\n"
        "client_high_water = 3M\n"
        "client_low_water = 4K\n"
        "compress_max = 2g\n"
        "queue_timeout = 250ms\n"
        "query_timeout = 3s\n"
        "handshake_timeout = 700\n"
        "drain_timeout = 0s\n"
        "reconnect_min = 5ms\n"
        "reconnect_max = 60s\n"
        "unix_socket = no\n"
        "compress = off\n"
        "loglevel = debug\n"
        "users_file = /etc/qgate/users\n"
        "\n"
        "[group main]\n"
        "workers = a:5001, b:5002\n"
        "user = svc\n"
        "password = p=w:d\n"
        "[ group  rdb ]\n"
        "workers = rdb1:5010\n"
        "async = broadcast\n"
        "users = trader1,trader2\n";
    assert_int_equal(load_text(c, good, err, sizeof err, path, sizeof path), 0);
    unlink(path);
    assert_int_equal(c->port, 9000);
    assert_string_equal(c->bind, "127.0.0.1");
    assert_int_equal(c->max_clients, 42);
    assert_int_equal(c->max_message, 16 * 1024 * 1024);
    assert_int_equal(c->chunk_size, 8 * 1024);
    assert_int_equal(c->read_budget, 1024 * 1024 * 1024);
    assert_int_equal(c->write_budget, 5000);
    assert_int_equal(c->client_high_water, 3 * 1024 * 1024);
    assert_int_equal(c->client_low_water, 4 * 1024);
    assert_true(c->compress_max == 2LL * 1024 * 1024 * 1024);
    assert_int_equal(c->queue_timeout, 250);
    assert_int_equal(c->query_timeout, 3000);
    assert_int_equal(c->handshake_timeout, 700);
    assert_int_equal(c->drain_timeout, 0);
    assert_int_equal(c->reconnect_min, 5);
    assert_int_equal(c->reconnect_max, 60000);
    assert_int_equal(c->unix_socket, 0);
    assert_int_equal(c->compress, 0);
    assert_int_equal(c->loglevel, 3);
    assert_string_equal(c->users_file, "/etc/qgate/users");
    /* untouched keys keep their defaults */
    assert_int_equal(c->max_queue, 1000);
    assert_int_equal(c->reader_threads, 2);
    assert_int_equal(c->frames_budget, 64);
    assert_int_equal(c->ngroups, 2);
    assert_string_equal(c->groups[0].name, "main");
    assert_string_equal(c->groups[0].workers, "a:5001, b:5002");
    assert_string_equal(c->groups[0].user, "svc");
    assert_string_equal(c->groups[0].password, "p=w:d"); /* split at the first '=' only */
    assert_int_equal(c->groups[0].async_mode, CFG_ASYNC_ONE);
    assert_string_equal(c->groups[0].users, "");
    assert_string_equal(c->groups[1].name, "rdb");
    assert_string_equal(c->groups[1].workers, "rdb1:5010");
    assert_int_equal(c->groups[1].async_mode, CFG_ASYNC_BROADCAST);
    assert_string_equal(c->groups[1].users, "trader1,trader2");
    assert_int_equal(config_validate(c, err, sizeof err), 0);

    /* keys before any section header are [gateway] keys, as are those of a [gateway] after them */
    static const char top[] = "port = 1\n[group a]\nworkers = x:1\n[gateway]\nbind = 127.0.0.1\n[group b]\nuser = u\n";
    assert_int_equal(load_text(c, top, err, sizeof err, path, sizeof path), 0);
    unlink(path);
    assert_int_equal(c->port, 1);
    assert_string_equal(c->bind, "127.0.0.1");
    assert_int_equal(c->ngroups, 2);
    assert_string_equal(c->groups[0].workers, "x:1");
    assert_string_equal(c->groups[1].user, "u");
    /* the loader notes where each [gateway] key was, for messages */
    assert_int_equal(c->key_line[key_named("gateway", "port") - cfg_keys], 1);
    assert_int_equal(c->key_line[key_named("gateway", "bind") - cfg_keys], 5);
    assert_int_equal(c->key_line[key_named("gateway", "max_queue") - cfg_keys], 0);
    free(c);
}

/* A section or a key given twice is refused, naming both lines: the second [group main] used to
 * replace the first one's keys, and a second key to win silently. */
static void test_load_duplicates(void **state)
{
    (void)state;
    expect_load_err("[gateway]\nport = 1\n[group main]\nworkers = a:1\n[gateway]\n", 5,
                    "[gateway] again (first at line 1)");
    expect_load_err("# two groups of one name\n\n[group main]\nworkers = a:1\n[group other]\nworkers = b:1\n"
                    "[group main]\nworkers = c:1\n", 7, "[group main] again (first at line 3)");
    expect_load_err("[group main]\nworkers = a:1\n[ group  main ]\n", 3, "[group main] again (first at line 1)");
    expect_load_err("[gateway]\n\n\nport = 9000\nbind = 127.0.0.1\n\n\n\nport = 9001\n", 9,
                    "port again (first at line 4)");
    expect_load_err("port = 9000\n[gateway]\nport = 9001\n", 3, "port again (first at line 1)");
    expect_load_err("[group main]\nworkers = a:1\nuser = u\nworkers = b:1\n", 4, "workers again (first at line 2)");
    expect_load_err("[gateway]\nloglevel=info\n  loglevel   =   debug\n", 3, "loglevel again (first at line 2)");
    /* a value the first line refuses is reported as such; one refused the second time too */
    expect_load_err("[gateway]\nport = x\nport = 1\n", 2, "port: 'x' is not a number");
    expect_load_err("[gateway]\nport = 1\nport = x\n", 3, "port again (first at line 2)");

    /* one key in several sections, each once, is fine; so are comments that repeat one */
    struct config *c = malloc(sizeof *c);
    char err[1024], path[64];
    assert_non_null(c);
    static const char ok[] = "[gateway]\nport = 9000\n# port = 1\n; port = 2\n[group a]\nworkers = a:1\nuser = u\n"
                             "[group b]\nworkers = b:1\nuser = u\n";
    if (load_text(c, ok, err, sizeof err, path, sizeof path))
        fail_msg("%s", err);
    unlink(path);
    assert_int_equal(c->port, 9000);
    assert_int_equal(c->ngroups, 2);
    /* each load is a file of its own: loading it again over the result is no duplicate */
    write_temp(path, sizeof path, ok);
    if (config_load(c, path, err, sizeof err))
        fail_msg("a second load: %s", err);
    unlink(path);
    assert_int_equal(c->ngroups, 2);
    /* config_build refuses it too: startup, --check and a reload read files with it */
    expect_build_err("[group main]\nworkers = a:1\n[group main]\nworkers = b:1\n", 3, "[group main] again (first at line 1)");
    free(c);
}

static void test_load_booleans_and_enums(void **state)
{
    (void)state;
    static const struct {
        const char *v;
        int want;
    } bools[] = {{"yes", 1}, {"no", 0}, {"1", 1}, {"0", 0}, {"on", 1}, {"off", 0}, {"true", 1}, {"false", 0}};
    struct config *c = malloc(sizeof *c);
    assert_non_null(c);
    char err[1024], path[64], text[256];
    for (size_t i = 0; i < sizeof bools / sizeof bools[0]; i++) {
        /* start from the opposite value so that a no-op would be caught */
        snprintf(text, sizeof text, "[gateway]\nunix_socket = %s\ncompress = %s\n", bools[i].v, bools[i].v);
        config_defaults(c);
        write_temp(path, sizeof path, text);
        c->unix_socket = c->compress = !bools[i].want;
        assert_int_equal(config_load(c, path, err, sizeof err), 0);
        unlink(path);
        if (c->unix_socket != bools[i].want || c->compress != bools[i].want)
            fail_msg("boolean '%s' gave %d/%d", bools[i].v, c->unix_socket, c->compress);
    }
    static const char *const levels[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++) {
        snprintf(text, sizeof text, "loglevel = %s\n", levels[i]);
        config_defaults(c);
        write_temp(path, sizeof path, text);
        c->loglevel = -1;
        assert_int_equal(config_load(c, path, err, sizeof err), 0);
        unlink(path);
        assert_int_equal(c->loglevel, i);
    }
    static const char *const modes[] = {"one", "broadcast"};
    for (int i = 0; i < 2; i++) {
        snprintf(text, sizeof text, "[group g]\nasync = %s\n", modes[i]);
        config_defaults(c);
        write_temp(path, sizeof path, text);
        assert_int_equal(config_load(c, path, err, sizeof err), 0);
        unlink(path);
        assert_int_equal(c->ngroups, 1);
        assert_int_equal(c->groups[0].async_mode, i);
    }
    static const char *const pools[] = {"request", "session"};
    for (int i = 0; i < 2; i++) {
        snprintf(text, sizeof text, "[group g]\npool = %s\nreset_query = delete a from `.\n", pools[i]);
        config_defaults(c);
        write_temp(path, sizeof path, text);
        assert_int_equal(config_load(c, path, err, sizeof err), 0);
        unlink(path);
        assert_int_equal(c->groups[0].pool_mode, i);
        assert_string_equal(c->groups[0].reset_query, "delete a from `.");
    }
    static const char *const locals[] = {"unix", "tcp"};
    for (int i = 0; i < 2; i++) {
        snprintf(text, sizeof text, "[gateway]\nlocal_workers = %s\n", locals[i]);
        config_defaults(c);
        c->local_workers = -1;
        write_temp(path, sizeof path, text);
        assert_int_equal(config_load(c, path, err, sizeof err), 0);
        unlink(path);
        assert_int_equal(c->local_workers, i == 0 ? CFG_LOCAL_UNIX : CFG_LOCAL_TCP);
    }
    config_defaults(c);
    assert_int_equal(c->local_workers, CFG_LOCAL_UNIX); /* the default */
    write_temp(path, sizeof path, "[group g]\npipeline = 9\n"); /* 1..8 */
    assert_int_equal(config_load(c, path, err, sizeof err), -1);
    unlink(path);
    config_defaults(c);
    write_temp(path, sizeof path, "[group g]\npipeline = 3\n");
    assert_int_equal(config_load(c, path, err, sizeof err), 0);
    unlink(path);
    assert_int_equal(c->groups[0].pipeline, 3);
    write_temp(path, sizeof path, "[gateway]\nlocal_workers = udp\n");
    assert_int_equal(config_load(c, path, err, sizeof err), -1);
    unlink(path);
    config_defaults(c);
    write_temp(path, sizeof path, "[group g]\npool = sessions\n");
    assert_int_equal(config_load(c, path, err, sizeof err), -1);
    unlink(path);
    /* config_set directly: bounds are inclusive */
    config_defaults(c);
    assert_int_equal(config_set(c, -1, "port", "65535", err, sizeof err), 0);
    assert_int_equal(c->port, 65535);
    assert_int_equal(config_set(c, -1, "port", "0", err, sizeof err), 0);
    assert_int_equal(c->port, 0);
    assert_int_equal(config_set(c, -1, "max_message", "64", err, sizeof err), 0);
    assert_int_equal(c->max_message, 64);
    assert_int_equal(config_set(c, -1, "max_message", "63", err, sizeof err), -1);
    assert_int_equal(c->max_message, 64); /* a refused value leaves the field alone */
    assert_int_equal(config_set(c, -1, "max_message", "1024g", err, sizeof err), 0);
    assert_true(c->max_message == (int64_t)1 << 40);
    assert_int_equal(config_set(c, -1, "max_message", "1025g", err, sizeof err), -1);
    /* a time takes ms or s, not a size suffix; a size takes no time suffix */
    assert_int_equal(config_set(c, -1, "query_timeout", "5m", err, sizeof err), -1);
    assert_non_null(strstr(err, "not a number"));
    assert_int_equal(config_set(c, -1, "chunk_size", "8ms", err, sizeof err), -1);
    assert_non_null(strstr(err, "not a number"));
    /* a [gateway] key is not a [group] key and vice versa */
    assert_int_equal(config_group(c, "g"), 0);
    assert_int_equal(config_set(c, 0, "port", "1", err, sizeof err), -1);
    assert_non_null(strstr(err, "unknown key 'port'"));
    assert_int_equal(config_set(c, -1, "workers", "a:1", err, sizeof err), -1);
    assert_non_null(strstr(err, "unknown key 'workers'"));
    free(c);
}

/* ---- errors ---------------------------------------------------------------------------------- */

static void test_load_errors(void **state)
{
    (void)state;
    /* the line number counts comments and blank lines */
    expect_load_err("# c\n\n[gateway]\nportt = 1\n", 4, "unknown key 'portt'");
    expect_load_err("[gateway]\nworkers = a:1\n", 2, "unknown key 'workers'");
    expect_load_err("[group g]\nport = 1\n", 2, "unknown key 'port' in [group g]");
    /* what validation finds names the file and the line too */
    expect_build_err("[gateway]\n\n[group g]\nuser = u\n", 3, "group g: no workers key");
    expect_build_err("[group g]\nuser = u\nworkers = a:1,b:0\n", 3, "group g: bad worker address 'b:0'");
    expect_build_err("[group g]\nworkers =\n", 2, "group g: workers is empty");
    expect_build_err("# x\n[group g]\nworkers = a:1\npool = session\nasync = broadcast\n", 2,
                     "group g: pool = session");
    expect_load_err("; c\n[gateways]\n", 2, "unknown section [gateways]");
    expect_load_err("[group]\n", 1, "unknown section");
    expect_load_err("[gateway]\nport = 70000\n", 2, "port: 70000 is outside 0..65535");
    expect_load_err("[gateway]\nport = -1\n", 2, "outside");
    expect_load_err("[gateway]\nport = 65536\n", 2, "port: 65536 is outside 0..65535");
    expect_load_err("[gateway]\nreader_threads = 257\n", 2, "reader_threads: 257 is outside 1..256");
    expect_load_err("[gateway]\nmax_clients = 0\n", 2, "max_clients: 0 is outside");
    expect_load_err("[gateway]\nport = eighty\n", 2, "port: 'eighty' is not a number");
    expect_load_err("[gateway]\nport = 80x\n", 2, "is not a number");
    expect_load_err("[gateway]\nport =\n", 2, "is not a number");
    expect_load_err("[gateway]\nchunk_size = 4t\n", 2, "chunk_size: '4t' is not a number");
    expect_load_err("[gateway]\nport = 99999999999999999999\n", 2, "is not a number");
    expect_load_err("[gateway]\ncompress = maybe\n", 2, "compress: 'maybe' is not a boolean");
    expect_load_err("[gateway]\ncompress = Yes2\n", 2, "is not a boolean");
    expect_load_err("[gateway]\nloglevel = verbose\n", 2, "loglevel: 'verbose' is not one of the choices (error, warn, info, debug)");
    expect_load_err("[group g]\nasync = all\n", 2, "async: 'all' is not one of the choices (");
    expect_load_err("[gateway]\nport 8811\n", 2, "expected key = value");
    expect_load_err("[gateway\nport = 1\n", 1, "bad section header");
    expect_load_err("[gateway] port = 1\n", 1, "bad section header");

    char text[2048];
    memset(text, 0, sizeof text);
    strcpy(text, "[gateway]\nbind = ");
    memset(text + strlen(text), 'h', 256); /* bind holds at most 255 */
    strcat(text, "\n");
    expect_load_err(text, 2, "bind: value too long");
    text[strlen(text) - 2] = '\n'; /* 255 characters: fine */
    text[strlen(text) - 1] = 0;
    {
        struct config c;
        char err[1024], path[64];
        assert_int_equal(load_text(&c, text, err, sizeof err, path, sizeof path), 0);
        unlink(path);
        assert_int_equal(strlen(c.bind), 255);
    }

    /* too many groups */
    char *many = malloc(CFG_MAX_GROUPS * 64 + 64);
    assert_non_null(many);
    many[0] = 0;
    for (int i = 0; i <= CFG_MAX_GROUPS; i++)
        sprintf(many + strlen(many), "[group g%d]\n", i);
    expect_load_err(many, CFG_MAX_GROUPS + 1, "too many groups");
    free(many);

    /* a missing file: "path: reason" */
    struct config c;
    char err[1024] = "";
    const char *path = "/nonexistent/qgate-test/none.conf";
    config_defaults(&c);
    assert_int_equal(config_load(&c, path, err, sizeof err), -1);
    assert_true(!strncmp(err, path, strlen(path)));
    assert_true(!strncmp(err + strlen(path), ": ", 2));
    assert_non_null(strstr(err, "No such file"));

    /* an error stops the load: lines after it are not applied */
    char p2[64];
    assert_int_equal(load_text(&c, "port = 1\nbogus = 2\nmax_clients = 3\n", err, sizeof err, p2, sizeof p2), -1);
    unlink(p2);
    assert_int_equal(c.port, 1);
    assert_int_equal(c.max_clients, 10000);
}

/* A file that starts with a UTF-8 byte order mark (some editors write one) is read as without it;
 * one elsewhere is no key. */
static void test_load_bom(void **state)
{
    (void)state;
    struct config c;
    char err[256], path[64];
    assert_int_equal(load_text(&c, "\xef\xbb\xbf[gateway]\nport = 7\n[group main]\nworkers = a:1\n", err, sizeof err,
                               path, sizeof path),
                     0);
    unlink(path);
    assert_int_equal(c.port, 7);
    assert_int_equal(load_text(&c, "[gateway]\n\xef\xbb\xbfport = 7\n", err, sizeof err, path, sizeof path), -1);
    unlink(path);
    assert_non_null(strstr(err, ":2: "));
}

/* A size with a suffix that overflows int64 must be refused, not wrapped into range.
 * 17179869185g = 2^64 + 2^30 bytes. */
static void test_load_size_overflow(void **state)
{
    (void)state;
    struct config c;
    char err[256] = "";
    config_defaults(&c);
    int rc = config_set(&c, -1, "max_message", "17179869185g", err, sizeof err);
    if (rc == 0)
        fail_msg("max_message = 17179869185g accepted as %lld", (long long)c.max_message);
    assert_int_equal(c.max_message, 2147483647);
}

/* A configuration file that is neither a regular file nor a pipe is refused at once: a device
 * that never ends (/dev/zero), a directory; so is a FIFO nobody writes (a reload read from it for
 * ever); a regular one is read whole, and a pipe (a shell's <(...)) its writer fills. */
static void test_load_regular_only(void **state)
{
    (void)state;
    struct config c;
    char err[256] = "";
    config_defaults(&c);
    assert_int_equal(config_load(&c, "/dev/zero", err, sizeof err), -1);
    assert_string_equal(err, "/dev/zero: not a regular file or a pipe");
    char fifo[] = "/tmp/qg_conf_fifo.XXXXXX";
    assert_int_equal(tutil_mkfifo(fifo), 0);
    assert_int_equal(config_load(&c, fifo, err, sizeof err), -1);
    assert_non_null(strstr(err, ": a pipe nothing was written to"));
    unlink(fifo);
    assert_int_equal(config_load(&c, "/tmp", err, sizeof err), -1);
    assert_string_equal(err, "/tmp: not a regular file or a pipe");
    size_t len = 0;
    char path[] = "/tmp/qg_conf_read.XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    char big[100000]; /* over the first read's 64 KiB */
    memset(big, '#', sizeof big);
    assert_int_equal(write(fd, big, sizeof big), (ssize_t)sizeof big);
    close(fd);
    char *text = config_read_file(path, &len, err, sizeof err);
    unlink(path);
    assert_non_null(text);
    assert_int_equal(len, sizeof big);
    assert_int_equal(text[len], 0);
    free(text);
    /* at most 64 MiB: exactly that is read, a byte more is refused */
    char huge[] = "/tmp/qg_conf_huge.XXXXXX";
    fd = mkstemp(huge);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, CONFIG_FILE_MAX), 0); /* (sparse: zeros) */
    text = config_read_file(huge, &len, err, sizeof err);
    assert_non_null(text);
    assert_int_equal(len, CONFIG_FILE_MAX);
    free(text);
    assert_int_equal(ftruncate(fd, (off_t)CONFIG_FILE_MAX + 1), 0);
    close(fd);
    assert_null(config_read_file(huge, &len, err, sizeof err));
    unlink(huge);
    assert_non_null(strstr(err, ": file too large (over 64 MiB)"));
    int p[2];
    assert_int_equal(pipe(p), 0);
    assert_int_equal(write(p[1], "[gateway]\nport = 7001\n", 22), 22);
    close(p[1]);
    char dev[64];
    snprintf(dev, sizeof dev, "/dev/fd/%d", p[0]);
    assert_int_equal(config_load(&c, dev, err, sizeof err), 0);
    assert_int_equal(c.port, 7001);
    close(p[0]);
}

/* ---- validation ------------------------------------------------------------------------------ */

static void good_config(struct config *c)
{
    config_defaults(c);
    int g = config_group(c, "main");
    assert_int_equal(g, 0);
    strcpy(c->groups[0].workers, "localhost:5001, 10.0.0.2:5002,:5003");
}

static void expect_invalid(const struct config *c, const char *why)
{
    char err[512] = "";
    assert_int_equal(config_validate(c, err, sizeof err), -1);
    if (!strstr(err, why))
        fail_msg("validate said '%s', expected '%s'", err, why);
}

static void test_validate(void **state)
{
    (void)state;
    struct config *c = malloc(sizeof *c);
    assert_non_null(c);
    char err[512] = "";

    good_config(c);
    if (config_validate(c, err, sizeof err))
        fail_msg("a good config fails: %s", err);

    config_defaults(c);
    expect_invalid(c, "no worker group");

    good_config(c);
    assert_int_equal(config_group(c, "empty"), 1);
    expect_invalid(c, "group empty: no workers key");

    static const char *const bad[] = {"nohost", "h:0", "h:99999", "h:", "h:12x", "unix://", "unix://0",
                                      "unix://70000", "unix://12x", "unix://-5", "unix:// 5"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        good_config(c);
        assert_int_equal(config_group(c, "second"), 1);
        snprintf(c->groups[1].workers, sizeof c->groups[1].workers, "ok:1,%s", bad[i]);
        char why[128];
        snprintf(why, sizeof why, "group second: bad worker address '%s'", bad[i]);
        expect_invalid(c, why);
    }

    good_config(c); /* q's Unix socket for a port, a socket file, beside TCP */
    snprintf(c->groups[0].workers, sizeof c->groups[0].workers, "unix://5001,unix:///run/q/w1.sock,h:5002");
    if (config_validate(c, err, sizeof err))
        fail_msg("Unix-socket workers refused: %s", err);
    char longpath[200] = "unix:///";
    memset(longpath + 8, 'x', 150); /* past sun_path's 108 */
    snprintf(c->groups[0].workers, sizeof c->groups[0].workers, "%s", longpath);
    expect_invalid(c, "bad worker address 'unix:///xxx");

    good_config(c);
    c->client_low_water = c->client_high_water;
    expect_invalid(c, "must be below client_high_water");
    c->client_low_water = c->client_high_water + 1;
    expect_invalid(c, "must be below client_high_water");
    c->client_low_water = c->client_high_water - 1;
    assert_int_equal(config_validate(c, err, sizeof err), 0);

    good_config(c);
    c->groups[0].pool_mode = CFG_POOL_SESSION;
    assert_int_equal(config_validate(c, err, sizeof err), 0);
    c->groups[0].async_mode = CFG_ASYNC_BROADCAST;
    expect_invalid(c, "pool = session sends a client's messages to its one worker");

    good_config(c); /* pipeline: any pool = request group; not a session one, when given */
    c->groups[0].pipeline = 8;
    assert_int_equal(config_validate(c, err, sizeof err), 0);
    c->groups[0].pool_mode = CFG_POOL_SESSION;
    assert_int_equal(config_validate(c, err, sizeof err), 0); /* the default's: not given */
    c->groups[0].pipeline_set = 1;
    expect_invalid(c, "pool = session gives a client its own worker: pipeline does not apply");
    c->groups[0].pipeline = 1; /* given as 1: nothing to refuse */
    assert_int_equal(config_validate(c, err, sizeof err), 0);

    good_config(c);
    c->reconnect_min = c->reconnect_max + 1;
    expect_invalid(c, "must not exceed reconnect_max");
    c->reconnect_min = c->reconnect_max; /* equal is fine: a constant back-off */
    assert_int_equal(config_validate(c, err, sizeof err), 0);
    /* keys that contradict each other: said at the line of the one given last, the other's line
     * in brackets (before: the file's name alone, though --check names a line) */
    expect_build_err("[gateway]\nclient_high_water = 65536\nclient_low_water = 1m\n[group main]\nworkers = w:1\n", 3,
                     "client_low_water 1048576 must be below client_high_water 65536 (line 2)");
    expect_build_err("[gateway]\nclient_low_water = 1m\nclient_high_water = 65536\n[group main]\nworkers = w:1\n", 3,
                     "client_low_water 1048576 (line 2) must be below client_high_water 65536");
    expect_build_err("[gateway]\nreconnect_min = 20000\nreconnect_max = 1000\n[group main]\nworkers = w:1\n", 3,
                     "reconnect_min 20000 (line 2) must not exceed reconnect_max 1000");
    expect_build_err("[gateway]\nreconnect_min = 90000\n[group main]\nworkers = w:1\n", 2,
                     "reconnect_min 90000 must not exceed reconnect_max 10000");
    free(c);
}

/* Ports that clash: metrics_port where port listens, a worker that is this gateway. */
static void test_validate_ports(void **state)
{
    (void)state;
    struct config *c = malloc(sizeof *c);
    assert_non_null(c);
    char err[512] = "";

    good_config(c); /* metrics_port = port, both on every interface */
    c->metrics_port = c->port;
    expect_invalid(c, "metrics_port 8811 clashes with port: both would listen on 0.0.0.0:8811; give metrics_port a port of its own");
    strcpy(c->metrics_bind, "127.0.0.1"); /* 0.0.0.0 holds 127.0.0.1's port too */
    expect_invalid(c, "both would listen on port 8811 (bind 0.0.0.0, metrics_bind 127.0.0.1)");
    strcpy(c->bind, "127.0.0.1"); /* the same address */
    expect_invalid(c, "both would listen on 127.0.0.1:8811;");
    strcpy(c->metrics_bind, ""); /* as bind */
    expect_invalid(c, "metrics_port 8811 clashes with port:");
    strcpy(c->metrics_bind, "0.0.0.0");
    expect_invalid(c, "metrics_port 8811 clashes with port:");
    strcpy(c->metrics_bind, "10.0.0.1"); /* two addresses: two listeners */
    assert_int_equal(config_validate(c, err, sizeof err), 0);
    c->metrics_port = 8812; /* two ports */
    strcpy(c->metrics_bind, "");
    assert_int_equal(config_validate(c, err, sizeof err), 0);
    c->metrics_port = 0; /* off */
    assert_int_equal(config_validate(c, err, sizeof err), 0);
    c->port = 0; /* a free port, whatever it is */
    assert_int_equal(config_validate(c, err, sizeof err), 0);

    /* from a file: the line of metrics_port, and where port came from */
    expect_build_err("[gateway]\nport = 9811\nbind = 127.0.0.1\nmetrics_port = 9811\n[group g]\nworkers = w:1\n", 4,
                     "metrics_port 9811 clashes with port (line 2): both would listen on 127.0.0.1:9811");
    expect_build_err("[gateway]\nmetrics_port = 8811\n[group g]\nworkers = w:1\n", 2, "metrics_port 8811 clashes with port:");
    struct cfg_overrides *ov = calloc(1, sizeof *ov);
    assert_non_null(ov);
    char path[64];
    write_temp(path, sizeof path, "[gateway]\nmetrics_port = 9000\n[group g]\nworkers = w:1\n");
    assert_int_equal(config_override(ov, 0, "port", "9000"), 0);
    assert_int_equal(config_build(c, path, ov, err, sizeof err), -1);
    assert_file_err(err, path, 2, "metrics_port 9000 clashes with port (command line): both would listen on 0.0.0.0:9000");
    unlink(path);
    free(ov);

    /* a worker that is this gateway: its port over TCP or q's Unix socket, its metrics port */
    static const struct {
        const char *gateway, *workers, *why; /* why NULL: valid */
    } cases[] = {
        {"", "localhost:8811", "group main: worker 'localhost:8811' is this gateway's own port: it would send its clients' queries to itself"},
        {"", "w:1, 127.0.0.1:8811", "worker '127.0.0.1:8811' is this gateway's own port"},
        {"", "[::1]:8811", "worker '[::1]:8811' is this gateway's own port"},
        {"", ":8811", "worker ':8811' is this gateway's own port"},
        {"", "unix://8811", "worker 'unix://8811' is this gateway's own port"},
        {"unix_socket = 0\n", "unix://8811", NULL},          /* no such socket of ours */
        {"", "localhost:8812", NULL},
        {"", "otherhost:8811", NULL},                       /* another host's 8811 */
        {"bind = 10.0.0.5\n", "10.0.0.5:8811", "worker '10.0.0.5:8811' is this gateway's own port"},
        /* loopback while listening on one address only: q's Unix socket for the port is ours */
        {"bind = 10.0.0.5\n", "localhost:8811", "is this gateway's own port"},
        {"bind = 10.0.0.5\nunix_socket = 0\n", "localhost:8811", NULL},
        {"bind = 10.0.0.5\nlocal_workers = tcp\n", "localhost:8811", NULL},
        {"port = 0\n", "localhost:8811", NULL},
        {"port = 9000\n", "localhost:8811", NULL},
        {"port = 9000\n", "localhost:9000", "worker 'localhost:9000' is this gateway's own port (line 2)"},
        {"metrics_port = 9811\n", "127.0.0.1:9811", "worker '127.0.0.1:9811' is this gateway's own metrics_port (line 2): that serves HTTP, not q"},
        {"metrics_port = 9811\nmetrics_bind = 10.0.0.5\n", "127.0.0.1:9811", NULL},
        {"metrics_port = 9811\nmetrics_bind = 10.0.0.5\n", "10.0.0.5:9811", "own metrics_port"},
        /* a listener on one loopback address takes no connection to another */
        {"metrics_port = 9811\nmetrics_bind = 127.0.0.1\n", "127.0.0.9:9811", NULL},
        {"metrics_port = 9811\nmetrics_bind = 127.0.0.1\n", "localhost:9811", "own metrics_port"},
        {"metrics_port = 9811\nmetrics_bind = 127.0.0.9\n", "127.0.0.9:9811", "own metrics_port"},
        {"metrics_port = 9811\nmetrics_bind = 0.0.0.0\n", "127.0.0.9:9811", "own metrics_port"},
        {"bind = 127.0.0.1\nunix_socket = 0\n", "127.0.0.2:8811", NULL},
        {"bind = 127.0.0.1\nunix_socket = 0\n", "[::1]:8811", NULL},
        {"bind = ::1\nunix_socket = 0\n", "localhost:8811", "own port"},
        /* one worker twice: one q process taken for two workers */
        {"", "w:1, v:2, w:1", "group main: worker 'w:1' listed twice (first as 'w:1'): one q process, not two workers; "
                              "for more connections to one worker, pipeline = N"},
        {"", "W:1, w:1", "worker 'w:1' listed twice (first as 'W:1')"},
        {"", "localhost:5001, 127.0.0.1:5001", "worker '127.0.0.1:5001' listed twice (first as 'localhost:5001')"},
        {"", "unix://5001, unix://5001", "worker 'unix://5001' listed twice"},
        {"", "w:1, w:2, v:1", NULL},
        /* an empty item: a worker's name left out (it ran with one worker fewer) */
        {"", "w:1,,v:2", "group main: an empty worker address in 'w:1,,v:2' (two commas, or one at an end)"},
        {"", "w:1, , v:2", "an empty worker address"},
        {"", "w:1,", "an empty worker address"},
        {"", ",w:1", "an empty worker address"},
        {"", " w:1 ,\tv:2 ", NULL},
        /* over TCP and over its Unix socket: one q (q -p 5001 listens on both; before: not compared) */
        {"", "localhost:5001, unix://5001", "worker 'unix://5001' listed twice (first as 'localhost:5001')"},
        {"", "unix://5001, 127.0.0.1:5001", "worker '127.0.0.1:5001' listed twice (first as 'unix://5001')"},
        {"", "127.0.0.2:5001, unix://5001", NULL}, /* (another address: maybe another q) */
        {"", "127.0.0.1:5001, 127.0.0.2:5001", NULL},
        {"", "w:5001, unix://5001", NULL},
        {"", "unix://5001, unix:///tmp/q5001", NULL},
        /* another loopback address is not this gateway's Unix socket (local_workers = unix) */
        {"", "127.0.0.9:8811", "own port"}, /* (bind 0.0.0.0: it is ours over TCP) */
        {"bind = 127.0.0.1\n", "127.0.0.9:8811", NULL},
        {"bind = 127.0.0.1\n", "localhost:8811", "own port"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[512];
        snprintf(text, sizeof text, "[gateway]\n%s[group main]\nworkers = %s\n", cases[i].gateway, cases[i].workers);
        int wline = 3;
        for (const char *p = cases[i].gateway; *p; p++)
            wline += *p == '\n';
        if (cases[i].why) {
            expect_build_err(text, wline, cases[i].why);
            continue;
        }
        write_temp(path, sizeof path, text);
        if (config_build(c, path, NULL, err, sizeof err))
            fail_msg("<<%s>> refused: %s", text, err);
        unlink(path);
    }
    free(c);
}

/* A group's users list: no empty name, and no comment after a value (at 01bef40 'bob ; x' was one
 * user's name, so bob went to another group, unsaid). */
static void test_group_users_list(void **state)
{
    (void)state;
    expect_build_err("[group a]\nworkers = w:1\nusers = bob ; x\n", 3,
                     "group a: users: 'bob ; x' holds a comment: a comment (# or ;) is a line of its own, not after a value");
    expect_build_err("[group a]\nworkers = w:1\nusers = bob,\tann # traders\n", 3, "'ann # traders' holds a comment");
    expect_build_err("[group a]\nusers = bob,,ann\nworkers = w:1\n", 2,
                     "group a: an empty user name in users 'bob,,ann' (two commas, or one at an end)");
    expect_build_err("[group a]\nworkers = w:1\nusers = bob,\n", 3, "an empty user name");
    struct config *c = malloc(sizeof *c);
    char err[1024], path[64];
    assert_non_null(c);
    write_temp(path, sizeof path, "[group a]\nworkers = w:1\nusers = bob, a#b, c;d\n[group b]\nworkers = v:1\n");
    if (config_build(c, path, NULL, err, sizeof err)) /* (a # or ; inside a name: a name) */
        fail_msg("refused: %s", err);
    assert_string_equal(c->groups[0].users, "bob, a#b, c;d");
    unlink(path);
    free(c);
}

/* config_check_files on the file at path, loaded: 0 if it refuses it at line, with why in its
 * error (no cmocka: a child running as another user calls it). */
static int refuses_files(struct config *c, const char *path, int line, const char *why, char *err, size_t errlen)
{
    config_defaults(c);
    if (config_load(c, path, err, errlen) || config_check_files(c, err, errlen) != -1)
        return -1;
    char prefix[512];
    snprintf(prefix, sizeof prefix, "%s:%d: ", path, line);
    return strncmp(err, prefix, strlen(prefix)) || !strstr(err + strlen(prefix), why) ? -1 : 0;
}

/* --check: the access log's file as the user running it would open it. */
static void test_check_files(void **state)
{
    (void)state;
    struct config *c = malloc(sizeof *c);
    assert_non_null(c);
    char err[2048], path[64], dir[64], text[1024];
    config_defaults(c);
    assert_int_equal(config_check_files(c, err, sizeof err), 0); /* off */

    snprintf(dir, sizeof dir, "/tmp/qgate-test-files-XXXXXX");
    assert_non_null(mkdtemp(dir));
    /* text loads; config_check_files refuses it at line, saying why */
#define EXPECT_FILES(line, why)                                                                      \
    do {                                                                                            \
        write_temp(path, sizeof path, text);                                                        \
        config_defaults(c);                                                                          \
        if (config_load(c, path, err, sizeof err))                                                  \
            fail_msg("%s", err);                                                                    \
        assert_int_equal(config_check_files(c, err, sizeof err), -1);                               \
        assert_file_err(err, path, line, why);                                                      \
        unlink(path);                                                                                \
    } while (0)
    char why[1024];
    snprintf(text, sizeof text, "[gateway]\nport = 1\naccess_log = %s/nope/x.log\n", dir);
    snprintf(why, sizeof why, "access_log %s/nope/x.log: directory %s/nope does not exist", dir, dir);
    EXPECT_FILES(3, why);
    snprintf(text, sizeof text, "access_log = %s\n", dir); /* a directory, not a file */
    snprintf(why, sizeof why, "access_log %s: is a directory", dir);
    EXPECT_FILES(1, why);
    char file[128];
    snprintf(file, sizeof file, "%s/plain", dir);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(text, sizeof text, "access_log = %s/x.log\n", file); /* its directory is a file */
    snprintf(why, sizeof why, "access_log %s/x.log: %s is not a directory", file, file);
    EXPECT_FILES(1, why);
    /* what the user checking may not write: as root (who writes anywhere), as nobody, in a child */
    char ro[128], p1[64], p2[64], w1[512], w2[512];
    snprintf(ro, sizeof ro, "%s/ro", dir);
    assert_int_equal(mkdir(ro, 0555), 0);
    assert_int_equal(chmod(file, 0444), 0);
    snprintf(text, sizeof text, "access_log = %s/x.log\n", ro);
    write_temp(p1, sizeof p1, text);
    snprintf(w1, sizeof w1, "access_log %s/x.log: directory %s is not writable by ", ro, ro);
    snprintf(text, sizeof text, "access_log = %s\n", file);
    write_temp(p2, sizeof p2, text);
    snprintf(w2, sizeof w2, "access_log %s: not writable by ", file);
    int root = geteuid() == 0;
    assert_int_equal(chmod(p1, 0644) | chmod(p2, 0644) | (root ? chmod(dir, 0755) : 0), 0);
    pid_t pid = root ? fork() : 0;
    assert_true(pid >= 0);
    if (!pid) {
        int bad = root && (setgid(65534) || setuid(65534)) ? 3
                  : refuses_files(c, p1, 1, w1, err, sizeof err) ? 1
                  : refuses_files(c, p2, 1, w2, err, sizeof err) ? 2 : 0;
        if (!root && bad)
            fail_msg("case %d: %s", bad, err);
        if (root) {
            if (bad)
                fprintf(stderr, "test_check_files as nobody: case %d: %s\n", bad, bad == 3 ? strerror(errno) : err);
            _exit(bad);
        }
    } else {
        int st = 0;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
        assert_int_equal(chmod(dir, 0700), 0);
    }
    unlink(p1);
    unlink(p2);
    rmdir(ro);
#undef EXPECT_FILES
    /* a new file in a directory that is there, an existing file: fine, and nothing is made */
    config_defaults(c);
    snprintf(c->access_log, sizeof c->access_log, "%s/new.log", dir);
    if (config_check_files(c, err, sizeof err))
        fail_msg("%s", err);
    assert_int_equal(access(c->access_log, F_OK), -1);
    chmod(file, 0644);
    snprintf(c->access_log, sizeof c->access_log, "%s", file);
    if (config_check_files(c, err, sizeof err))
        fail_msg("%s", err);
    /* a relative name is in the working directory; given on the command line it says so */
    snprintf(c->access_log, sizeof c->access_log, "qgate-test-no-such-dir-here/x.log");
    c->key_line[key_named("gateway", "access_log") - cfg_keys] = -1;
    assert_int_equal(config_check_files(c, err, sizeof err), -1);
    assert_string_equal(err, "command line: access_log qgate-test-no-such-dir-here/x.log: directory "
                             "qgate-test-no-such-dir-here does not exist");
    unlink(file);
    rmdir(dir);
    free(c);
}

/* --print-config -c FILE: every key as it would run, in --print-config's form. */
static void test_print_effective(void **state)
{
    (void)state;
    struct config *c = malloc(sizeof *c), *back = malloc(sizeof *back);
    struct cfg_overrides *ov = calloc(1, sizeof *ov);
    assert_non_null(c);
    assert_non_null(back);
    assert_non_null(ov);
    char err[1024], path[64];
    /* the defaults and one group of defaults print as the reference does, byte for byte */
    config_defaults(c);
    assert_int_equal(config_group(c, "NAME"), 0);
    char *ref = printed(config_print_reference), *eff = NULL;
    size_t efflen = 0;
    FILE *f = open_memstream(&eff, &efflen);
    assert_non_null(f);
    config_print_effective(c, f);
    fclose(f);
    assert_string_equal(eff, ref);
    free(eff);
    free(ref);

    /* defaults, then the file, then the command line */
    write_temp(path, sizeof path,
               "[gateway]\nport = 9000\nmax_message = 16m\nqueue_timeout = 2s\ncompress = no\nloglevel = warn\n"
               "[group main]\nworkers = a:1, b:2\nuser = svc\npassword = Hunter2pw\npool = session\n"
               "[group rdb]\nworkers = r:1\nasync = broadcast\n");
    assert_int_equal(config_override(ov, 0, "port", "7000"), 0);
    assert_int_equal(config_override(ov, 0, "loglevel", "debug"), 0);
    if (config_assemble(c, path, ov, err, sizeof err))
        fail_msg("%s", err);
    f = open_memstream(&eff, &efflen);
    assert_non_null(f);
    config_print_effective(c, f);
    fclose(f);
    static const char *const want[] = {
        "\n[gateway]\n# ", "\nport = 7000\n", "\nmax_message = 16777216\n", "\nqueue_timeout = 2000\n",
        "\ncompress = 0\n", "\nloglevel = debug\n", "\nmax_queue = 1000\n", "\nbind = 0.0.0.0\n", "\nusers_file = \n",
        "\n[group main]\n# ", "\nworkers = a:1, b:2\n", "\nuser = svc\n", "\n# password = (set, not shown)\n",
        "\npool = session\n", "\n[group rdb]\n# ", "\nworkers = r:1\n", "\nasync = broadcast\n", "\npassword = \n",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(eff, want[i]))
            fail_msg("--print-config -c lacks <<%s>>:\n%s", want[i], eff);
    assert_null(strstr(eff, "Hunter2pw"));
    assert_null(strstr(eff, "[group NAME]"));
    assert_true(strstr(eff, "[group main]") < strstr(eff, "[group rdb]"));
    /* it loads back as the same configuration, but for the password it does not show */
    char path2[64];
    write_temp(path2, sizeof path2, eff);
    config_defaults(back);
    if (config_load(back, path2, err, sizeof err))
        fail_msg("the printed configuration does not load: %s", err);
    unlink(path2);
    assert_int_equal(back->ngroups, c->ngroups);
    for (int i = 0; i < cfg_nkeys; i++) {
        const struct cfg_key *k = &cfg_keys[i];
        for (int g = 0; g < (strcmp(k->section, "group") ? 1 : c->ngroups); g++) {
            const char *cb = strcmp(k->section, "group") ? (const char *)c : (const char *)&c->groups[g];
            const char *bb = strcmp(k->section, "group") ? (const char *)back : (const char *)&back->groups[g];
            int same = k->type == CFG_STR ? !strcmp(cb + k->offset, bb + k->offset)
                                          : !memcmp(cb + k->offset, bb + k->offset, k->size);
            if (!same && strcmp(k->name, "password"))
                fail_msg("%s does not load back as it ran", k->name);
        }
    }
    assert_string_equal(back->groups[0].password, "");
    /* config_assemble does not validate (config_build does): a file without workers prints */
    write_temp(path2, sizeof path2, "[group g]\nuser = u\n");
    assert_int_equal(config_assemble(c, path2, NULL, err, sizeof err), 0);
    assert_int_equal(config_build(c, path2, NULL, err, sizeof err), -1);
    unlink(path2);
    unlink(path);
    free(eff);
    free(ov);
    free(back);
    free(c);
}

/* ---- overrides and config_build -------------------------------------------------------------- */

static void test_override_build(void **state)
{
    (void)state;
    struct config *c = malloc(sizeof *c);
    struct cfg_overrides *ov = calloc(1, sizeof *ov);
    assert_non_null(c);
    assert_non_null(ov);
    char err[1024] = "", path[64];

    /* no file, --workers: the default group is created */
    assert_int_equal(config_override(ov, 1, "workers", "h1:5001,h2:5002"), 0);
    if (config_build(c, "", ov, err, sizeof err))
        fail_msg("build failed: %s", err);
    assert_int_equal(c->ngroups, 1);
    assert_string_equal(c->groups[0].name, "default");
    assert_string_equal(c->groups[0].workers, "h1:5001,h2:5002");
    assert_int_equal(c->port, 8811);

    /* no file, no overrides: no group */
    assert_int_equal(config_build(c, "", NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "no worker group"));
    assert_int_equal(config_build(c, NULL, NULL, err, sizeof err), -1);

    /* a file with one group: --workers replaces its workers; --port beats the file */
    write_temp(path, sizeof path, "[gateway]\nport = 9000\nmax_clients = 7\n[group main]\nworkers = f:1\n");
    memset(ov, 0, sizeof *ov);
    assert_int_equal(config_override(ov, 0, "port", "7000"), 0);
    assert_int_equal(config_override(ov, 1, "workers", "o:2"), 0);
    if (config_build(c, path, ov, err, sizeof err))
        fail_msg("build failed: %s", err);
    assert_int_equal(c->port, 7000);
    assert_int_equal(c->max_clients, 7);
    assert_int_equal(c->ngroups, 1);
    assert_string_equal(c->groups[0].name, "main");
    assert_string_equal(c->groups[0].workers, "o:2");
    /* the same file without overrides keeps its values; building starts from the defaults */
    c->max_queue = 5;
    assert_int_equal(config_build(c, path, NULL, err, sizeof err), 0);
    assert_int_equal(c->port, 9000);
    assert_string_equal(c->groups[0].workers, "f:1");
    assert_int_equal(c->max_queue, 1000);
    unlink(path);

    /* a bad override value, a bad key, a bad file, a build that fails validation */
    memset(ov, 0, sizeof *ov);
    assert_int_equal(config_override(ov, 1, "workers", "a:1"), 0);
    assert_int_equal(config_override(ov, 0, "port", "70000"), 0);
    assert_int_equal(config_build(c, "", ov, err, sizeof err), -1);
    assert_non_null(strstr(err, "command line: port: 70000 is outside"));
    memset(ov, 0, sizeof *ov);
    assert_int_equal(config_override(ov, 0, "nosuch", "1"), 0);
    assert_int_equal(config_build(c, "", ov, err, sizeof err), -1);
    assert_non_null(strstr(err, "command line: unknown key 'nosuch'"));
    assert_int_equal(config_build(c, "/nonexistent/qgate.conf", NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "/nonexistent/qgate.conf: "));
    memset(ov, 0, sizeof *ov);
    assert_int_equal(config_override(ov, 1, "workers", "h:0"), 0);
    assert_int_equal(config_build(c, "", ov, err, sizeof err), -1);
    assert_non_null(strstr(err, "bad worker address 'h:0'"));

    /* the override table holds 16; the 17th is refused; so is a value that does not fit */
    memset(ov, 0, sizeof *ov);
    int cap = (int)(sizeof ov->o / sizeof ov->o[0]);
    for (int i = 0; i < cap; i++)
        assert_int_equal(config_override(ov, 0, "max_queue", "1"), 0);
    assert_int_equal(ov->n, cap);
    assert_int_equal(config_override(ov, 0, "max_queue", "2"), -1);
    assert_int_equal(ov->n, cap);
    memset(ov, 0, sizeof *ov);
    char *longv = malloc(sizeof ov->o[0].value + 1);
    assert_non_null(longv);
    memset(longv, 'a', sizeof ov->o[0].value);
    longv[sizeof ov->o[0].value] = 0;
    assert_int_equal(config_override(ov, 1, "workers", longv), -1);
    assert_int_equal(ov->n, 0);
    free(longv);
    free(ov);
    free(c);
}

/* admin_from and proxy_from take lists of sources; a list with an item that is none is refused. */
static void test_address_keys(void **state)
{
    (void)state;
    struct config *c = calloc(1, sizeof *c);
    char err[256];
    config_defaults(c);
    static const char good[] = "[gateway]\nadmin_from = unix, loopback, 10.0.0.0/8\nproxy_from = 10.77.0.30\n";
    assert_int_equal(config_parse(c, good, sizeof good - 1, "t.conf", err, sizeof err), 0);
    assert_string_equal(c->admin_from, "unix, loopback, 10.0.0.0/8");
    assert_string_equal(c->proxy_from, "10.77.0.30");
    static const char bad[] = "[gateway]\nadmin_from = unix, localhost\n";
    assert_int_equal(config_parse(c, bad, sizeof bad - 1, "t.conf", err, sizeof err), -1);
    assert_non_null(strstr(err, "t.conf:2"));
    assert_non_null(strstr(err, "admin_from"));
    assert_non_null(strstr(err, "'localhost'"));
    free(c);
}

/* ---- what a reload does with each key ------------------------------------------------------ */

/* A valid value of k other than its default, as it would be written in the file. */
static void other_value(const struct cfg_key *k, char *out, size_t len)
{
    switch (k->type) {
    case CFG_INT:
    case CFG_MS:
    case CFG_SIZE: {
        long long d = strtoll(k->def, NULL, 10);
        snprintf(out, len, "%lld", d < k->max ? d + 1 : d - 1);
        return;
    }
    case CFG_BOOL:
        snprintf(out, len, "%s", !strcmp(k->def, "1") ? "0" : "1");
        return;
    case CFG_ENUM:
        snprintf(out, len, "%s", strcmp(k->choices[0], k->def) ? k->choices[0] : k->choices[1]);
        return;
    case CFG_STR:
        snprintf(out, len, "%s", !strcmp(k->name, "workers") ? "otherhost:5009" : "changed-by-the-reload");
        return;
    case CFG_ADDRS:
        snprintf(out, len, "%s", "10.9.8.0/24");
        return;
    }
    fail_msg("%s: unknown type", k->name);
}

/* Does text name name as a word of its list ("a, b and c change...")? */
static int names_word(const char *text, const char *name)
{
    size_t l = strlen(name);
    for (const char *p = strstr(text, name); p; p = strstr(p + 1, name))
        if ((p == text || p[-1] == ' ') && (p[l] == ',' || p[l] == ' ' || !p[l]))
            return 1;
    return 0;
}

/* The flags of cfg_keys are what a reload does (reload.c's reload_apply: config_restart_changed
 * for its warning, config_take_live for the values): for each key, a file that changes only it
 * either has the new value taken (CFG_LIVE) or has it reported as needing a restart, the running
 * value kept (CFG_RESTART); nothing else changes, and nothing else is reported. The warning
 * reload.c logs names every key that needs a restart. */
static void test_reload_flags(void **state)
{
    (void)state;
    struct config *run = malloc(sizeof *run), *nw = malloc(sizeof *nw), *before = malloc(sizeof *before);
    assert_non_null(run);
    assert_non_null(nw);
    assert_non_null(before);
    int nrestart = 0;
    for (int i = 0; i < cfg_nkeys; i++) {
        const struct cfg_key *k = &cfg_keys[i];
        int grp = !strcmp(k->section, "group");
        char v[256], err[512], names[512];
        config_defaults(run);
        assert_int_equal(config_group(run, "main"), 0);
        assert_int_equal(config_set(run, 0, "workers", "localhost:5001", err, sizeof err), 0);
        *nw = *run;
        other_value(k, v, sizeof v);
        if (config_set(nw, grp ? 0 : -1, k->name, v, err, sizeof err))
            fail_msg("%s = %s: %s", k->name, v, err);
        const void *rb = grp ? (const void *)&run->groups[0] : run, *nb = grp ? (const void *)&nw->groups[0] : nw;
        assert_true(memcmp((const char *)rb + k->offset, (const char *)nb + k->offset, k->size)); /* it changed */
        *before = *run;
        int n = config_restart_changed(run, nw, names, sizeof names);
        config_take_live(run, nw);
        const void *ab = grp ? (const void *)&run->groups[0] : run;
        if (k->reload == CFG_RESTART) {
            nrestart++;
            if (n != 1 || strcmp(names, k->name))
                fail_msg("%s needs a restart: a reload reported %d keys (%s)", k->name, n, names);
            if (memcmp(before, run, sizeof *run))
                fail_msg("%s needs a restart: a reload changed the running configuration", k->name);
            if (!names_word(RELOAD_RESTART_WARNING, k->name) &&
                !(strstr(k->name, "_threads") && strstr(RELOAD_RESTART_WARNING, "thread counts")))
                fail_msg("%s needs a restart: reload.c's warning does not name it: %s", k->name, RELOAD_RESTART_WARNING);
        } else {
            if (n != 0)
                fail_msg("%s is applied by a reload, which reported keys needing a restart: %s", k->name, names);
            if (memcmp((const char *)ab + k->offset, (const char *)nb + k->offset, k->size))
                fail_msg("%s is applied by a reload, which did not take its new value %s", k->name, v);
            if (memcmp(nw, run, sizeof *run))
                fail_msg("%s is applied by a reload: the running configuration is not the new one", k->name);
        }
    }
    assert_true(nrestart > 0);
    /* and the warning names no key that a reload applies */
    for (int i = 0; i < cfg_nkeys; i++) {
        const struct cfg_key *k = &cfg_keys[i];
        if (k->reload == CFG_LIVE &&
            (names_word(RELOAD_RESTART_WARNING, k->name) ||
             (strstr(k->name, "_threads") && strstr(RELOAD_RESTART_WARNING, "thread counts"))))
            fail_msg("reload.c's warning says %s changes only on restart, but a reload applies it", k->name);
    }
    /* several at once: all reported, in the table's order; the live one taken all the same */
    config_defaults(run);
    *nw = *run;
    char err[512], names[512];
    assert_int_equal(config_set(nw, -1, "metrics_port", "9811", err, sizeof err), 0);
    assert_int_equal(config_set(nw, -1, "port", "9000", err, sizeof err), 0);
    assert_int_equal(config_set(nw, -1, "max_queue", "7", err, sizeof err), 0);
    assert_int_equal(config_restart_changed(run, nw, names, sizeof names), 2);
    assert_string_equal(names, "port, metrics_port");
    config_take_live(run, nw);
    assert_int_equal(run->port, 8811);
    assert_int_equal(run->metrics_port, 0);
    assert_int_equal(run->max_queue, 7);
    /* a string that reads the same is the same, whatever the field held beyond its NUL */
    config_defaults(run);
    *nw = *run;
    assert_int_equal(config_set(nw, -1, "bind", "127.0.0.1.and.more", err, sizeof err), 0);
    assert_int_equal(config_set(nw, -1, "bind", "0.0.0.0", err, sizeof err), 0);
    assert_true(memcmp(run->bind, nw->bind, sizeof run->bind));
    assert_int_equal(config_restart_changed(run, nw, NULL, 0), 0);
    free(run);
    free(nw);
    free(before);
}

/* ---- the printed reference ------------------------------------------------------------------- */

static void test_print_reference(void **state)
{
    (void)state;
    char path[64];
    write_temp(path, sizeof path, "");
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    config_print_reference(f);
    fclose(f);
    char *text = slurp(path);
    assert_non_null(text);
    for (int i = 0; i < cfg_nkeys; i++) {
        const struct cfg_key *k = &cfg_keys[i];
        if (!ini_has_key(text, k->section, k->name))
            fail_msg("reference lacks '%s = ...' under a [%s] section", k->name, k->section);
        char line[512];
        snprintf(line, sizeof line, "\n%s = %s\n", k->name, k->def);
        if (!strstr(text, line))
            fail_msg("reference lacks the line '%s = %s'", k->name, k->def);
        if (!strstr(text, k->help))
            fail_msg("reference lacks the help of %s", k->name);
    }
    free(text);
    /* it loads back as the defaults plus one group with default values */
    struct config *d = malloc(sizeof *d), *c = malloc(sizeof *c);
    assert_non_null(d);
    assert_non_null(c);
    config_defaults(d);
    config_group(d, "NAME");
    config_defaults(c);
    char err[1024] = "";
    if (config_load(c, path, err, sizeof err))
        fail_msg("the reference does not load: %s", err);
    unlink(path);
    assert_int_equal(c->ngroups, 1);
    assert_string_equal(c->groups[0].name, "NAME");
    for (int i = 0; i < cfg_nkeys; i++) {
        const struct cfg_key *k = &cfg_keys[i];
        const char *cb = strcmp(k->section, "group") ? (const char *)c : (const char *)&c->groups[0];
        const char *db = strcmp(k->section, "group") ? (const char *)d : (const char *)&d->groups[0];
        if (memcmp(cb + k->offset, db + k->offset, k->size))
            fail_msg("reference value of %s does not load as its default", k->name);
    }
    free(d);
    free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keys_in_example),
        cmocka_unit_test(test_keys_table_generated),
        cmocka_unit_test(test_keys_man_generated),
        cmocka_unit_test(test_keys_everywhere),
        cmocka_unit_test(test_reload_flags),
        cmocka_unit_test(test_table_shape),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_address_keys),
        cmocka_unit_test(test_example_loads_as_defaults),
        cmocka_unit_test(test_load_full),
        cmocka_unit_test(test_load_booleans_and_enums),
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_load_duplicates),
        cmocka_unit_test(test_validate),
        cmocka_unit_test(test_validate_ports),
        cmocka_unit_test(test_check_files),
        cmocka_unit_test(test_print_effective),
        cmocka_unit_test(test_override_build),
        cmocka_unit_test(test_print_reference),
        cmocka_unit_test(test_load_size_overflow),
        cmocka_unit_test(test_load_bom),
        cmocka_unit_test(test_group_users_list),
        cmocka_unit_test(test_load_regular_only),
    };
    return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
