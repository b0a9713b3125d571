/* qslow.c: a slow subscriber. Opens a connection (q's handshake), sends one sync request
 * (by default "flood 65536", which makes a qworker publish without end), then reads at most R
 * bytes every T ms for S seconds, counting the messages that come, and prints one line. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kcodec.h"
#include "kipc.h"
#include "qconn.h"
#include "util.h"

#define MAX_MESSAGE (1ULL << 34)
#define REPLY_KEEP 256 /* bytes of the response kept to say what it was */

static void usage(void)
{
    fprintf(stderr,
            "usage: qslow -g host:port [-u user:pass] [-q QUERY] [-r BYTES] [-t MS] [-s SECONDS]\n"
            "  a slow subscriber: opens host:port (q's handshake; -u default qslow:qslow), sends\n"
            "  the sync char vector QUERY (default \"flood 65536\": a qworker then publishes\n"
            "  65536-byte async messages as fast as the socket takes them), then reads at most\n"
            "  BYTES (default 16384) every MS (default 10) ms for SECONDS (default 60), or until\n"
            "  the peer closes. Prints one line:\n"
            "    qslow messages=N bytes=B reply=ok|error|none closed=yes|no stopped=yes|no seconds=S\n"
            "  messages: whole async messages received; bytes: everything read (the response\n"
            "  too); reply: the response to QUERY (ok: it came; error: a q error, its text on\n"
            "  stderr; none: it did not come); closed: the peer closed the connection (at\n"
            "  seconds=S after the start); stopped: SIGINT or SIGTERM ended the run early (the\n"
            "  line is printed all the same). Exit 0, 1 if the connection could not be opened,\n"
            "  2 on bad usage.\n");
    exit(2);
}

static void sleep_until_ns(int64_t t)
{
    int64_t left = t - mono_ns();
    if (left <= 0)
        return;
    struct timespec ts = {(time_t)(left / 1000000000LL), (long)(left % 1000000000LL)};
    while (nanosleep(&ts, &ts) && errno == EINTR && !stop_signals) {
    }
}

int main(int argc, char **argv)
{
    const char *gw = NULL, *user = "qslow:qslow", *query = "flood 65536";
    long rbytes = 16384, tick_ms = 10;
    double seconds = 60;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(a, "-g") && more)
            gw = argv[++i];
        else if (!strcmp(a, "-u") && more)
            user = argv[++i];
        else if (!strcmp(a, "-q") && more)
            query = argv[++i];
        else if (!strcmp(a, "-r") && more) {
            if (arg_long(argv[++i], &rbytes) || rbytes < 1 || rbytes > (1L << 30))
                usage();
        } else if (!strcmp(a, "-t") && more) {
            if (arg_long(argv[++i], &tick_ms) || tick_ms < 1 || tick_ms > 3600000)
                usage();
        } else if (!strcmp(a, "-s") && more) {
            if (arg_double(argv[++i], &seconds, 0) || seconds > 1e7)
                usage();
        } else
            usage();
    }
    if (!gw)
        usage();
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = {.sa_handler = stop_signal_count}; /* no SA_RESTART: the sleep ends */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    struct qconn q;
    int rc = qconn_open(&q, gw, user, 5000);
    if (rc) {
        fprintf(stderr, "qslow: cannot open %s: %s\n", gw, qconn_strerror(rc));
        return 1;
    }
    K x = k_str(query, strlen(query));
    size_t len = 0;
    uint8_t *m = x ? kcodec_encode_msg(x, KIPC_SYNC, &len) : NULL;
    k_free(x);
    if (!m || qconn_send(&q, m, len)) {
        fprintf(stderr, "qslow: cannot send the request to %s\n", gw);
        free(m);
        qconn_close(&q);
        return 1;
    }
    free(m);
    int fl = fcntl(q.fd, F_GETFL);
    if (fl < 0 || fcntl(q.fd, F_SETFL, fl | O_NONBLOCK)) {
        fprintf(stderr, "qslow: fcntl: %s\n", strerror(errno));
        return 1;
    }
    uint8_t *buf = malloc((size_t)rbytes);
    if (!buf) {
        fprintf(stderr, "qslow: out of memory\n");
        return 1;
    }
    /* the stream, message by message: the header's 8 bytes, then what is left of the body */
    uint8_t hdr[8], reply[REPLY_KEEP];
    size_t hdr_have = 0, reply_have = 0;
    uint64_t left = 0, bytes = 0, messages = 0;
    int cur_type = -1, got_reply = 0, closed = 0, le = 1;
    int64_t start = mono_ns(), end = start + (int64_t)(seconds * 1e9), next = start, closed_at = 0;
    while (!closed && !stop_signals && mono_ns() < end) {
        ssize_t r = read(q.fd, buf, (size_t)rbytes);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
            closed = 1;
            closed_at = mono_ns();
            break;
        }
        for (ssize_t o = 0; r > 0 && o < r;) {
            if (left == 0 && hdr_have < 8) { /* a header */
                size_t k = QG_MIN((size_t)(r - o), 8 - hdr_have);
                memcpy(hdr + hdr_have, buf + o, k);
                hdr_have += k;
                o += (ssize_t)k;
                if (hdr_have < 8)
                    break;
                struct kipc_hdr h;
                const char *why;
                if (kipc_hdr_parse(hdr, 8, MAX_MESSAGE, &h, &why) != QG_OK) {
                    fprintf(stderr, "qslow: bad message header: %s\n", why);
                    closed_at = mono_ns();
                    goto done;
                }
                cur_type = h.type;
                le = h.le;
                left = h.len - 8;
                reply_have = 0;
            } else {
                size_t k = (size_t)QG_MIN((uint64_t)(r - o), left);
                if (cur_type == KIPC_RESPONSE && reply_have < REPLY_KEEP) {
                    size_t keep = QG_MIN(k, REPLY_KEEP - reply_have);
                    memcpy(reply + reply_have, buf + o, keep);
                    reply_have += keep;
                }
                left -= k;
                o += (ssize_t)k;
            }
            if (hdr_have == 8 && left == 0) { /* a whole message */
                if (cur_type == KIPC_ASYNC) {
                    messages++;
                } else if (cur_type == KIPC_RESPONSE && !got_reply) {
                    const char *et;
                    size_t el;
                    got_reply = 1;
                    if (kcodec_is_error(reply, reply_have, &et, &el)) {
                        got_reply = 2;
                        fprintf(stderr, "qslow: the reply is the q error '%.*s\n", (int)el, et);
                    } else if (reply_have == 9 && reply[0] == (uint8_t)-KT_LONG) {
                        uint64_t v = le ? qg_ld64(reply + 1)
                                        : (uint64_t)qg_ld32be(reply + 1) << 32 | qg_ld32be(reply + 5);
                        fprintf(stderr, "qslow: the reply is %" PRId64 "\n", (int64_t)v);
                    }
                }
                hdr_have = 0;
            }
        }
        if (r > 0)
            bytes += (uint64_t)r;
        next += tick_ms * 1000000LL;
        sleep_until_ns(QG_MIN(next, end));
    }
done:
    if (!closed_at)
        closed_at = mono_ns();
    printf("qslow messages=%" PRIu64 " bytes=%" PRIu64 " reply=%s closed=%s stopped=%s seconds=%.1f\n", messages,
           bytes, got_reply == 1 ? "ok" : got_reply == 2 ? "error" : "none", closed ? "yes" : "no",
           stop_signals ? "yes" : "no", (double)(closed_at - start) / 1e9);
    fflush(stdout);
    free(buf);
    qconn_close(&q);
    return 0;
}
