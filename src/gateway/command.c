/* command.c: the gateway's own commands (.qgate.*), a row each: who may run it, what it does on
 * the loop, and how its answer is made. A reader has parsed the request (job_parse_command: the
 * command and its argument) and its completion comes here; the answer is a table or dictionary
 * made on the writer pool from a snapshot the loop takes now, or 1b once the command is done.
 * Adding a command is a name in jobs.h's GWCMDS and a row here (test_command checks there is
 * one for every name). */
#include "command.h"

#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "control.h"
#include "jobs.h"
#include "kipc.h"
#include "log.h"
#include "net.h"
#include "query.h"
#include "metrics.h"
#include "reload.h"
#include "report.h"
#include "stats.h"

/* .qgate.reload[]: answered when the reload is done. */
static int reload_command(struct gw *g, struct client *cl, struct req *r, const struct job *j)
{
    (void)j;
    log_info(cl->c.name, ".qgate.reload[] by admin %s", cl->user);
    if (reload_start_loop(g, &cl->c, r->seq))
        request_error_loop(g, cl, r, "qgate: reload: out of memory");
    return 1;
}

/* Is cl an admin? (Without a users file nobody is: a user is only a name then.) */
static int is_admin(const struct client *cl) { return cl->us && cl->us->admin; }

/* The snapshots the answers are made from, and the tables made of them. */
static void *stats_snap(struct gw *g, int admin)
{
    struct stats_snapshot *s = report_stats_loop(g);
    if (s && g->auth && !admin) /* with a users file, only admins see where the workers are (a user who
                                 * knows cannot go around the gateway's limits and log) */
        for (int i = 0, k = 0; i < s->n; i++) {
            struct stats_row *r = &s->rows[i];
            k = i && !strcmp(r->group, r[-1].group) ? k + 1 : 1; /* its place in its group */
            char name[sizeof r->addr];
            snprintf(name, sizeof name, "%.*s#%d", (int)(sizeof name - 16), r->group, k);
            memcpy(r->addr, name, sizeof name);
        }
    return s;
}
static void *clients_snap(struct gw *g, int admin)
{
    (void)admin;
    return client_snapshot_loop(g);
}
static void *totals_snap(struct gw *g, int admin)
{
    (void)admin;
    return report_totals_loop(g);
}
static void *pools_snap(struct gw *g, int admin)
{
    (void)admin;
    return control_pools_snapshot_loop(g);
}
static void *queries_snap(struct gw *g, int admin)
{
    (void)admin;
    return report_queries_loop(g);
}
static K queries_k(const void *s) { return stats_queries_table(s); }

/* .qgate.queries[] (the table) and .qgate.queries[`reset] (every group's totals forgotten: 1b). */
static int queries_command(struct gw *g, struct client *cl, struct req *r, const struct job *j)
{
    const struct job_cmd *a = &job_args_c(j)->cmd;
    if (a->arg_kind == GWARG_NONE)
        return 0; /* the table */
    if (a->arg_kind != GWARG_NAME || strcmp((const char *)j->out, "reset")) {
        request_error_loop(g, cl, r, "qgate: .qgate.queries takes nothing (the table) or `reset");
        return 1;
    }
    for (int i = 0; i < g->ngroups; i++)
        query_reset_loop(g->groups[i].queries);
    log_info(cl->c.name, ".qgate.queries[`reset] by admin %s", cl->user);
    struct job *w = job_new(job_encode_command, JK_REPLY);
    if (!w) {
        conn_close_loop(g, &cl->c, "out of memory answering a gateway command");
        return 1;
    }
    job_args(w)->answer = (struct job_answer){.cmd = GWCMD_QUERIES}; /* 1b */
    conn_submit_loop(g->writers, w, &cl->c, r->seq);
    return 1;
}
static K stats_k(const void *s) { return stats_table(s); }
static K clients_k(const void *s) { return stats_clients_table(s); }
static K totals_k(const void *s) { return metrics_totals(s); }
static K pools_k(const void *s) { return stats_pools_table(s); }

static const struct command commands[GWCMD_N] = {
    [GWCMD_PING] = {.name = "ping"},
    [GWCMD_STATS] = {.name = "stats", .snapshot = stats_snap, .snap_free = free, .encode = stats_k},
    [GWCMD_CLIENTS] = {.name = "clients", .admin = 1, .snapshot = clients_snap, .snap_free = free, .encode = clients_k},
    [GWCMD_TOTALS] = {.name = "totals", .snapshot = totals_snap, .snap_free = metrics_snap_free, .encode = totals_k},
    [GWCMD_POOLS] = {.name = "pools", .snapshot = pools_snap, .snap_free = free, .encode = pools_k},
    [GWCMD_QUERIES] = {.name = "queries", .admin = 1, .run = queries_command, .snapshot = queries_snap, .snap_free = free,
                       .encode = queries_k},
    [GWCMD_RELOAD] = {.name = "reload", .admin = 1, .run = reload_command},
    [GWCMD_DISCONNECT] = {.name = "disconnect", .admin = 1, .run = control_kill_loop},
    [GWCMD_KILL] = {.name = "kill", .admin = 1, .run = control_kill_loop},
    [GWCMD_PAUSE] = {.name = "pause", .admin = 1, .run = control_pause_command_loop},
    [GWCMD_RESUME] = {.name = "resume", .admin = 1, .run = control_pause_command_loop},
    [GWCMD_DISABLE] = {.name = "disable", .admin = 1, .run = control_disable_command_loop},
    [GWCMD_ENABLE] = {.name = "enable", .admin = 1, .run = control_disable_command_loop},
    [GWCMD_SHUTDOWN] = {.name = "shutdown", .admin = 1, .run = control_shutdown_loop},
};

const struct command *command_row(int id) { return id > 0 && id < GWCMD_N && commands[id].name ? &commands[id] : NULL; }

void command_done_loop(struct gw *g, struct job *j)
{
    struct client *cl = client_of_job_loop(g, j);
    struct req *r = cl ? request_of_seq_loop(cl, j->seq) : NULL; /* (the head, or one sent nested) */
    if (!r || r->state != RS_LOCAL)
        return;
    const struct command *cmd = command_row(j->result);
    if (!cmd) {
        request_error_loop(g, cl, r, job_args(j)->cmd.said ? "qgate: %s" : "qgate: unknown command %s", j->text);
        return;
    }
    if (cmd->admin && !r->admin) { /* (as the users file said when it came, or since, if a reload
                                    * took the right away: client_users_reloaded_loop) */
        log_limited(&g->lim.not_admin, g->loop.now_ms, LOG_WARN, cl->c.name, "refused %s: not an admin", j->text);
        request_error_loop(g, cl, r, "qgate: access (admin only): %s", j->text);
        return;
    }
    if (cmd->admin && g->cfg.admin_from[0] &&
        !net_addr_listed(g->cfg.admin_from, (const struct sockaddr *)&cl->from, sizeof cl->from, cl->from_uds)) {
        log_limited(&g->lim.not_admin, g->loop.now_ms, LOG_WARN, cl->c.name, "refused %s: %s is not in admin_from",
                    j->text, cl->peer);
        request_error_loop(g, cl, r, "qgate: access (admin commands are accepted only from %s): %s", g->cfg.admin_from,
                           j->text);
        return;
    }
    if (cmd->run && cmd->run(g, cl, r, j)) /* it answered, or will */
        return;
    command_answer_loop(g, cl, j->seq, j->result);
}

void command_answer_loop(struct gw *g, struct client *cl, uint64_t seq, int id)
{
    struct conn *c = &cl->c;
    const struct req *r = request_of_seq_loop(cl, seq);
    if (r && r->type == KIPC_ASYNC) { /* nobody waits for its answer: none made */
        request_reply_loop(g, cl, seq, NULL, 0);
        return;
    }
    const struct command *cmd = command_row(id);
    struct job *w = job_new(job_encode_command, JK_REPLY);
    if (!w || !cmd) { /* no reply can be made: as q out of memory, the connection goes */
        job_free(w);
        conn_close_loop(g, c, "out of memory answering a gateway command");
        return;
    }
    job_args(w)->answer = (struct job_answer){.cmd = id, .encode = cmd->encode, .cap = cl->cap,
                                              .compress = (uint8_t)client_compressed_for(g, cl)};
    if (cmd->snapshot) {
        w->ctx = cmd->snapshot(g, r ? r->admin : is_admin(cl)); /* (as the users file said when it came,
                                                                  * as its admin check was: round 18) */
        w->ctx_free = cmd->snap_free;
    }
    conn_submit_loop(g->writers, w, c, seq);
}
