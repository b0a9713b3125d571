/* qsend.c: send q text to a kdb+ endpoint and print each reply, like a minimal q console. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kcodec.h"
#include "kfmt.h"
#include "kipc.h"
#include "qconn.h"

static void usage(void)
{
    fprintf(stderr,
            "usage: qsend [-g host:port] [-u user:pass] [--async] [--timeout MS] TEXT...\n"
            "  sends each TEXT as a char vector (sync unless --async) and prints each reply\n"
            "  in q-like form, one line each; errors print as 'text. Exit status 1 when the\n"
            "  connection fails or closes (the reason is printed as 'hop, 'access, 'close).\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *gw = "localhost:8811", *user = NULL;
    int async = 0, timeout = 0, first = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-g") && i + 1 < argc)
            gw = argv[++i];
        else if (!strcmp(argv[i], "-u") && i + 1 < argc)
            user = argv[++i];
        else if (!strcmp(argv[i], "--async"))
            async = 1;
        else if (!strcmp(argv[i], "--timeout") && i + 1 < argc)
            timeout = atoi(argv[++i]);
        else if (argv[i][0] == '-' && argv[i][1] == '-')
            usage();
        else {
            first = i;
            break;
        }
    }
    if (!first)
        usage();
    struct qconn c;
    int rc = qconn_open(&c, gw, user, timeout);
    if (rc) {
        printf("'%s\n", qconn_strerror(rc));
        return 1;
    }
    for (int i = first; i < argc; i++) {
        K q = k_str(argv[i], strlen(argv[i]));
        size_t len;
        uint8_t *m = kcodec_encode_msg(q, async ? KIPC_ASYNC : KIPC_SYNC, &len);
        k_free(q);
        rc = async ? qconn_send(&c, m, len) : qconn_call(&c, m, len, timeout);
        free(m);
        if (rc) {
            printf("'%s\n", qconn_strerror(rc));
            qconn_close(&c);
            return 1;
        }
        if (async)
            continue;
        K x;
        struct kerr e;
        if (kcodec_decode(c.buf + 8, c.len - 8, c.hdr.le, NULL, &x, &e) != QG_OK) {
            printf("'badmsg: %s at %zu\n", e.why, e.off);
            continue;
        }
        char out[4096];
        kfmt(x, out, sizeof out);
        printf("%s\n", out);
        k_free(x);
    }
    fflush(stdout);
    qconn_close(&c);
    return 0;
}
