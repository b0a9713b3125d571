/* main.c: the simulation's command line. Each seed runs in a child process (a crash, a
 * sanitizer report or a violation ends only that child); a failing seed is minimised (event
 * kinds turned off while it still fails) and replayed with its trace.
 *
 *   sim [--seed N] [--seeds K | --seconds S] [--steps N] [--disable K1,K2] [--verbose]
 *     --seed N alone     replay seed N in this process (for gdb), trace on failure
 *     --seeds K          seeds N .. N+K-1, each in a child
 *     --seconds S        as many seeds as fit in S seconds, from N (default 1); with --seeds,
 *                        whichever ends first
 *     --steps N          events per seed before the final quiescence (default 3000)
 *     --disable A,B      event kinds never to pick (names as in the trace, e.g. WDIE,RELOAD)
 *     --no-minimize      report a failing seed as it is
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sim.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Run one seed in a child. Returns 0 if it passed; fills *r from the child. */
static int run_child(struct sim_opts o, struct sim_result *r, int quiet)
{
    int p[2];
    if (pipe(p))
        return -1;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        close(p[0]);
        o.quiet = quiet;
        if (quiet) { /* the trial runs of the minimiser say nothing */
            FILE *f = freopen("/dev/null", "w", stderr);
            (void)f;
        }
        struct sim_result res;
        int rc = sim_run(&o, &res);
        ssize_t w = write(p[1], &res, sizeof res);
        (void)w;
        close(p[1]);
        if (rc)
            _exit(1); /* the gateway's state was abandoned: no leak check */
        exit(0);      /* LeakSanitizer looks at what is left */
    }
    close(p[1]);
    memset(r, 0, sizeof *r);
    r->failed_step = -1;
    ssize_t n = read(p[0], r, sizeof *r);
    close(p[0]);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (n != (ssize_t)sizeof *r && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
        snprintf(r->what, sizeof r->what, "the process %s %d (crash or sanitizer report)",
                 WIFSIGNALED(st) ? "died of signal" : "exited", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
    else if (WIFEXITED(st) && WEXITSTATUS(st) != 0 && !r->what[0])
        snprintf(r->what, sizeof r->what, "exited %d after the run (leak report?)", WEXITSTATUS(st));
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}

static void print_disabled(uint32_t mask)
{
    int first = 1;
    for (int k = 0; k < SIM_EV_N; k++)
        if (mask & (1u << k)) {
            fprintf(stderr, "%s%s", first ? "" : ",", sim_event_name(k));
            first = 0;
        }
    if (first)
        fprintf(stderr, "(none)");
}

/* Two violations are the same if they differ only in numbers (client, request, step). */
static int same_violation(const char *a, const char *b)
{
    for (;; a++, b++) {
        while (*a >= '0' && *a <= '9' && a[1] >= '0' && a[1] <= '9')
            a++;
        while (*b >= '0' && *b <= '9' && b[1] >= '0' && b[1] <= '9')
            b++;
        int da = *a >= '0' && *a <= '9', db = *b >= '0' && *b <= '9';
        if (da != db || (!da && *a != *b))
            return 0;
        if (!*a)
            return 1;
    }
}

/* Turn off each event kind in turn, keeping it off while the seed still fails the same way. */
static uint32_t minimise(struct sim_opts o, const char *what)
{
    struct sim_result r;
    for (int k = 0; k < SIM_EV_N; k++) {
        if (o.disabled & (1u << k))
            continue;
        struct sim_opts t = o;
        t.disabled |= 1u << k;
        if (run_child(t, &r, 1) && same_violation(r.what, what))
            o.disabled = t.disabled;
    }
    return o.disabled;
}

static uint32_t parse_disabled(const char *s)
{
    uint32_t m = 0;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
        int found = 0;
        for (int k = 0; k < SIM_EV_N; k++)
            if (!strcmp(t, sim_event_name(k))) {
                m |= 1u << k;
                found = 1;
            }
        if (!found) {
            fprintf(stderr, "sim: no event kind %s\n", t);
            exit(2);
        }
    }
    return m;
}

int main(int argc, char **argv)
{
    struct sim_opts o = {.seed = 1, .steps = 3000};
    long seeds = 0;
    double seconds = 0;
    int have_seed = 0, minimize = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(a, "--seed") && more)
            o.seed = strtoull(argv[++i], NULL, 10), have_seed = 1;
        else if (!strcmp(a, "--seeds") && more)
            seeds = atol(argv[++i]);
        else if (!strcmp(a, "--seconds") && more)
            seconds = atof(argv[++i]);
        else if (!strcmp(a, "--steps") && more)
            o.steps = atol(argv[++i]);
        else if (!strcmp(a, "--disable") && more)
            o.disabled = parse_disabled(argv[++i]);
        else if (!strcmp(a, "--verbose"))
            o.verbose = 1;
        else if (!strcmp(a, "--no-minimize"))
            minimize = 0;
        else {
            fprintf(stderr, "usage: sim [--seed N] [--seeds K | --seconds S] [--steps N] [--disable A,B] "
                            "[--verbose] [--no-minimize]\n");
            return 2;
        }
    }
    if (have_seed && !seeds && seconds <= 0) { /* replay in this process */
        struct sim_result r;
        int rc = sim_run(&o, &r);
        fprintf(stderr, "sim: seed %llu: %s (%ld steps, %ld checks)\n", (unsigned long long)o.seed,
                rc ? "FAILED" : "ok", r.steps, r.checks);
        if (rc)
            _exit(1);
        return 0;
    }
    if (!seeds && seconds <= 0)
        seeds = 100;
    double t0 = now_s();
    long ran = 0, steps = 0, checks = 0, failed = 0, uds = 0, mutes = 0, held = 0, pheld = 0, hlearn = 0, dis = 0, alines = 0, scrapes = 0, ldrop = 0, adrop = 0, afrag = 0, mid = 0, http = 0, hpass = 0, hrefused = 0, pwaits = 0, halfs = 0, halfa = 0, nested = 0, nhere = 0, nwaits = 0, resets = 0, rflips = 0, pflips = 0, ptaken = 0, hends = 0, ahead = 0, aread = 0, tails = 0, abad = 0, abetween = 0, aasync = 0;
    uint64_t first = o.seed;
    for (uint64_t s = first;; s++) {
        if (seeds && (long)(s - first) >= seeds)
            break;
        if (seconds > 0 && now_s() - t0 >= seconds)
            break;
        struct sim_opts t = o;
        t.seed = s;
        struct sim_result r;
        int rc = run_child(t, &r, 1);
        ran++;
        steps += r.steps;
        checks += r.checks;
        uds += r.uds_conns;
        mutes += r.uds_mutes;
        held += r.held;
        pheld += r.paused_held;
        hlearn += r.held_learned;
        dis += r.disabled_seen;
        alines += r.alog_lines;
        scrapes += r.scrapes;
        ldrop += r.log_dropped;
        adrop += r.alog_dropped;
        afrag += r.alog_frags;
        mid += r.mid_events;
        http += r.http_501;
        hpass += r.hold_passed;
        nested += r.nested;
        nhere += r.nested_here;
        nwaits += r.nested_waits;
        resets += r.resets;
        rflips += r.reset_flips;
        pflips += r.pool_flips;
        ptaken += r.pool_taken;
        hends += r.held_ends;
        hrefused += r.hold_refused;
        pwaits += r.pending_waits;
        halfs += r.half_closes;
        ahead += r.answered_ahead;
        aread += r.ahead_read;
        tails += r.tails;
        abad += r.bad_ahead;
        abetween += r.ahead_between;
        aasync += r.ahead_async;
        halfa += r.half_answered;
        if (!rc)
            continue;
        failed++;
        fprintf(stderr, "sim: seed %llu FAILED at step %ld: %s\n", (unsigned long long)s, r.failed_step, r.what);
        if (minimize) {
            t.disabled = minimise(t, r.what);
            fprintf(stderr, "sim: seed %llu still fails with these event kinds off: ", (unsigned long long)s);
            print_disabled(t.disabled);
            fprintf(stderr, "\n");
        }
        run_child(t, &r, 0); /* once more, with its trace */
        fprintf(stderr, "sim: replay with: tests/sim/run --seed %llu --steps %ld", (unsigned long long)s, t.steps);
        if (t.disabled) {
            fprintf(stderr, " --disable ");
            print_disabled(t.disabled);
        }
        fprintf(stderr, "\n");
        break; /* one failure at a time */
    }
    printf("sim: %ld seeds (%llu..%llu), %ld steps, %ld invariant checks, %ld failed, %.1f s; "
           "%ld worker connections over Unix sockets, %ld Unix sockets closed before the handshake, "
           "%ld requests seen sent to a busy worker (pipeline; %ld of them behind runs learned fast), %ld held by a paused group, %ld workers seen disabled, "
           "%ld access-log lines, one per request ended but %ld counted dropped (its file stalled or full; "
           "%ld lines cut by the full disk, ended before the next), %ld metrics pages asked for by scrapers, "
           "%ld log lines dropped while the log's reader was stopped, %ld peers' acts in the middle of an iteration, "
           "%ld HTTP requests for a handshake answered 501, %ld replies sent as they came and %ld refused for hold_max, %ld messages that waited for room under pending_max, "
           "%ld clients that shut their side (%ld answered in full, then closed), %ld messages run nested on the "
           "worker waiting on their client's callback and %ld answered nested by the gateway (%ld checks saw a "
           "worker wait for them, or for another part's callback), %ld reset queries run by session workers (%ld reloads turned reset_query off or on), "
           "%ld reloads made group main a session pool or a request pool (%ld times the gateway made it a session pool; %ld checks saw a session's end held back for a message to it), "
           "%ld callbacks' answers sent before the callback asked (%ld malformed, %ld behind an echo sent between, %ld behind an async message; %ld callbacks came and read them), %ld clients closed with their stream cut (what was queued for them ahead of the cut written first)\n",
           ran, (unsigned long long)first, (unsigned long long)(first + (uint64_t)ran - (ran ? 1 : 0)), steps, checks,
           failed, now_s() - t0, uds, mutes, held, hlearn, pheld, dis, alines, adrop, afrag, scrapes, ldrop, mid, http, hpass, hrefused, pwaits, halfs, halfa, nested, nhere, nwaits, resets, rflips, pflips, ptaken, hends, ahead, abad, abetween, aasync, aread, tails);
    return failed ? 1 : 0;
}
