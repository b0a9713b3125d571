/* qclient.c: a stand-in for q/client.q: one timed sync request per period, printing what
 * client.q prints, reconnecting as it does; optionally every latency to CSV. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kcodec.h"
#include "kipc.h"
#include "modes.h"
#include "qconn.h"
#include "util.h"

/* q's timespan text: 0D00:00:00.000395000 */
static const char *timespan(int64_t ns, char *buf, size_t len)
{
    int64_t d = ns / 86400000000000LL;
    ns -= d * 86400000000000LL;
    int64_t h = ns / 3600000000000LL;
    ns -= h * 3600000000000LL;
    int64_t m = ns / 60000000000LL;
    ns -= m * 60000000000LL;
    int64_t s = ns / 1000000000LL;
    ns -= s * 1000000000LL;
    snprintf(buf, len, "%lldD%02lld:%02lld:%02lld.%09lld", (long long)d, (long long)h, (long long)m,
             (long long)s, (long long)ns);
    return buf;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: qclient [-g host:port] [-u user:pass] MODE[:ARG] PERIOD_MS [--count N]\n"
            "               [--seconds S] [--csv FILE] [--dump FILE] [--timeout MS] [--quiet]\n"
            "       qclient --modes   (each mode and its function's q text)\n"
            "  a stand-in for q/client.q. MODE: big smallbig med fast slow bigbig bigsmall\n"
            "  killer ss throw:ERR ssthrow:ERR. -g defaults to localhost:8811; host \"unix\"\n"
            "  uses q's Unix socket for the port. A summary goes to stderr at the end.\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *gw = "localhost:8811", *user = NULL, *spec = NULL, *csv_path = NULL, *dump = NULL;
    long period = -1, count = -1, timeout = 0;
    double seconds = -1;
    int quiet = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-g") && i + 1 < argc)
            gw = argv[++i];
        else if (!strcmp(a, "-u") && i + 1 < argc)
            user = argv[++i];
        else if (!strcmp(a, "--count") && i + 1 < argc)
            count = atol(argv[++i]);
        else if (!strcmp(a, "--seconds") && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (!strcmp(a, "--csv") && i + 1 < argc)
            csv_path = argv[++i];
        else if (!strcmp(a, "--dump") && i + 1 < argc)
            dump = argv[++i];
        else if (!strcmp(a, "--timeout") && i + 1 < argc)
            timeout = atol(argv[++i]);
        else if (!strcmp(a, "--quiet"))
            quiet = 1;
        else if (!strcmp(a, "--modes")) {
            for (int k = 0; k < qmodes_count; k++)
                printf("%s\t%s\n", qmodes[k].name, qmodes[k].fn);
            return 0;
        }
        else if (a[0] == '-' && a[1])
            usage();
        else if (!spec)
            spec = a;
        else if (period < 0)
            period = atol(a);
        else
            usage();
    }
    if (!spec || period < 0)
        usage();
    const struct qmode *m = qmode_find(spec);
    if (!m) {
        fprintf(stderr, "qclient: unknown mode %s\n", spec);
        return 2;
    }
    const char *arg = strchr(spec, ':');
    arg = arg ? arg + 1 : NULL;
    signal(SIGPIPE, SIG_IGN);
    signal(SIGINT, stop_signal_count);
    signal(SIGTERM, stop_signal_count);

    K req = qmode_request(m, arg, 7);
    size_t req_len;
    uint8_t *msg = req ? kcodec_encode_msg(req, KIPC_SYNC, &req_len) : NULL;
    k_free(req);
    if (!msg) {
        fprintf(stderr, "qclient: out of memory\n");
        return 1;
    }
    FILE *csv = NULL;
    if (csv_path) {
        csv = fopen(csv_path, "w");
        if (!csv) {
            fprintf(stderr, "qclient: %s: %s\n", csv_path, strerror(errno));
            return 1;
        }
        fprintf(csv, "ts_us,mode,status,rows,dur_us\n");
    }
    size_t cap_lat = 1024, nlat = 0;
    int64_t *lat = malloc(cap_lat * sizeof *lat);
    long ok = 0, errs = 0, fails = 0;
    struct qconn c = {.fd = -1};
    int64_t start = mono_ns(), next = start;
    for (long k = 0; !stop_signals && (count < 0 || k < count); k++) {
        int64_t t = mono_ns();
        if (seconds >= 0 && t - start >= (int64_t)(seconds * 1e9))
            break;
        if (next > t) {
            int64_t d = next - t;
            struct timespec ts = {d / 1000000000LL, d % 1000000000LL};
            nanosleep(&ts, NULL);
            if (stop_signals)
                break;
        }
        next += period * 1000000LL;
        if (next < mono_ns())
            next = mono_ns();

        int64_t wall = clock_ns(CLOCK_REALTIME) / 1000;
        int64_t t0 = mono_ns();
        int rc = QCONN_OK;
        if (c.fd < 0)
            rc = qconn_open(&c, gw, user, timeout > 0 ? (int)timeout : 0);
        if (rc != QCONN_OK) {
            fails++;
            if (!quiet)
                printf("%s hopen failed :: %s\n", m->name, qconn_strerror(rc));
            if (csv)
                fprintf(csv, "%lld,%s,hopen,,\n", (long long)wall, m->name);
            fflush(stdout);
            continue;
        }
        rc = qconn_call(&c, msg, req_len, (int)timeout);
        int64_t dur = mono_ns() - t0;
        char ts[96];
        const char *status = "ok";
        int64_t rows = -1;
        if (rc != QCONN_OK) {
            fails++;
            status = qconn_strerror(rc);
            if (!quiet)
                printf("%s error :: %s in dur :: %s\n", m->name, status, timespan(dur, ts, sizeof ts));
            qconn_close(&c);
        } else {
            if (dump) { /* the first reply, byte for byte, for comparing gateways */
                FILE *f = fopen(dump, "w");
                if (f) {
                    fwrite(c.buf, 1, c.len, f);
                    fclose(f);
                }
                dump = NULL;
            }
            const uint8_t *body = c.buf + 8;
            size_t blen = c.len - 8;
            const char *etext;
            size_t elen;
            struct kerr e;
            if (kvalidate_check(body, blen, c.hdr.le, NULL, &e) != QG_OK) {
                fails++;
                status = "badmsg";
                if (!quiet)
                    printf("%s error :: badmsg (%s at %zu) in dur :: %s\n", m->name, e.why, e.off,
                           timespan(dur, ts, sizeof ts));
            } else if (kcodec_is_error(body, blen, &etext, &elen)) {
                errs++;
                status = "error";
                if (!quiet)
                    printf("%s error :: %.*s in dur :: %s\n", m->name, (int)elen, etext,
                           timespan(dur, ts, sizeof ts));
            } else {
                ok++;
                rows = qmsg_count(body, blen, c.hdr.le);
                if (!quiet)
                    printf("%s got :: %lld%s in dur :: %s\n", m->name, (long long)rows,
                           m->big_print ? "" : " rows", timespan(dur, ts, sizeof ts));
            }
            if (m->oneshot)
                qconn_close(&c);
        }
        fflush(stdout);
        if (csv)
            fprintf(csv, "%lld,%s,%s,%lld,%.1f\n", (long long)wall, m->name, status,
                    (long long)rows, (double)dur / 1e3);
        if (nlat == cap_lat)
            lat = realloc(lat, (cap_lat *= 2) * sizeof *lat);
        lat[nlat++] = dur;
    }
    qconn_close(&c);
    if (csv)
        fclose(csv);
    double p50, p99, mx;
    lat_summary(lat, nlat, NAN, &p50, &p99, &mx);
    fprintf(stderr, "qclient %s: requests=%zu ok=%ld qerrors=%ld failed=%ld p50_us=%.0f p99_us=%.0f max_us=%.0f\n",
            m->name, nlat, ok, errs, fails, p50, p99, mx);
    free(lat);
    free(msg);
    return 0;
}
