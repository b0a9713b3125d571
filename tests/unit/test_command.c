/* test_command: the gateway's command table (src/gateway/command.c) against the names a reader
 * parses (jobs.h's GWCMDS): a row for every name, found by the name it parses as; who may run
 * what; which commands answer with a table and which with 1b. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "command.h"
#include "jobs.h"
#include "kcodec.h"
#include "kipc.h"

/* The command a reader finds in .qgate.<name>[] (text, as a q session sends it). */
static int parsed_id(const char *name)
{
    char text[64];
    snprintf(text, sizeof text, ".qgate.%s[]", name);
    K x = k_str(text, strlen(text));
    struct job *j = job_new(job_parse_command, 0);
    j->in = kcodec_encode_msg(x, KIPC_SYNC, &j->in_len);
    k_free(x);
    job_parse_command(j);
    int id = j->result;
    job_free(j);
    return id;
}

/* Every command a reader can name has a row, and a row's name parses as its own command. */
static void test_every_name_has_its_row(void **state)
{
    (void)state;
    assert_null(command_row(GWCMD_UNKNOWN));
    assert_null(command_row(GWCMD_N));
    for (int id = 1; id < GWCMD_N; id++) {
        const struct command *c = command_row(id);
        assert_non_null(c);
        assert_int_equal(parsed_id(c->name), id);
    }
    assert_int_equal(parsed_id("nosuch"), GWCMD_UNKNOWN);
}

/* Anyone may run the commands that only read the gateway's own state; admins the rest (which
 * change state, or show other users). Those that read answer with a table made from a snapshot;
 * the others with 1b once done (run). */
static void test_who_and_how(void **state)
{
    (void)state;
    static const int anyone[] = {GWCMD_PING, GWCMD_STATS, GWCMD_TOTALS, GWCMD_POOLS};
    for (size_t i = 0; i < sizeof anyone / sizeof anyone[0]; i++)
        assert_false(command_row(anyone[i])->admin);
    static const int admin[] = {GWCMD_CLIENTS, GWCMD_QUERIES, GWCMD_RELOAD, GWCMD_DISCONNECT, GWCMD_KILL, GWCMD_PAUSE,
                                GWCMD_RESUME, GWCMD_DISABLE, GWCMD_ENABLE, GWCMD_SHUTDOWN};
    for (size_t i = 0; i < sizeof admin / sizeof admin[0]; i++)
        assert_true(command_row(admin[i])->admin);
    static const int tables[] = {GWCMD_STATS, GWCMD_CLIENTS, GWCMD_TOTALS, GWCMD_POOLS};
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
        const struct command *c = command_row(tables[i]);
        assert_non_null(c->snapshot);
        assert_non_null(c->snap_free);
        assert_non_null(c->encode);
        assert_null(c->run);
    }
    for (int id = 1; id < GWCMD_N; id++) { /* a command reads (a table) or does (1b), or is ping */
        const struct command *c = command_row(id);
        assert_true(!c->encode == !c->snapshot);
        assert_true(!(c->run && c->encode) || id == GWCMD_QUERIES); /* (its `reset does; without, it reads) */
        assert_true(c->run || c->encode || id == GWCMD_PING);
    }
    assert_true(command_row(GWCMD_QUERIES)->admin); /* other users' query texts */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_name_has_its_row),
        cmocka_unit_test(test_who_and_how),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
