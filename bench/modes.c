/* modes.c: the requests of q/client.q, by their exact q text (see q/client.q). */
#include "modes.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

/* Keep these texts identical to q/client.q: tests/integration/test_modes.sh checks it. */
#define FN_ALL "{select from tbl2}"
#define FN_THROW "{'x}"

const struct qmode qmodes[] = {
    {.name = "big", .fn = FN_ALL, .rows = QMODE_ALL_ROWS, .big_print = 1},
    {.name = "smallbig", .fn = FN_ALL, .rows = QMODE_ALL_ROWS, .big_print = 1},
    {.name = "med", .fn = "{select from tbl2 where i<3000000}", .rows = 3000000, .big_print = 1},
    {.name = "fast", .fn = "{select from tbl2 where i=0}", .rows = 1},
    {.name = "slow", .fn = "{system \"sleep 7\"; select from tbl2 where i=0}", .rows = 1, .sleep_ms = 7000},
    {.name = "bigbig", .fn = FN_ALL, .rows = QMODE_ALL_ROWS, .big_arg = 1, .big_print = 1},
    {.name = "bigsmall", .fn = "{select from tbl2 where i<6}", .rows = 6, .big_arg = 1},
    {.name = "killer", .fn = "{$[0.1>rand 1.0; exit 0; select from tbl2 where i<3]}", .rows = 3, .exit_per_mille = 100},
    {.name = "ss", .fn = "{select from tbl2 where i<5}", .rows = 5, .oneshot = 1},
    {.name = "throw", .fn = FN_THROW, .direct = 1, .throws = 1},
    {.name = "ssthrow", .fn = FN_THROW, .direct = 1, .throws = 1, .oneshot = 1},
};
const int qmodes_count = (int)(sizeof qmodes / sizeof qmodes[0]);

const struct qmode *qmode_find(const char *name)
{
    size_t l = strcspn(name, ":");
    for (int i = 0; i < qmodes_count; i++)
        if (strlen(qmodes[i].name) == l && !strncmp(qmodes[i].name, name, l))
            return &qmodes[i];
    return NULL;
}

const struct qmode *qmode_by_fn(const char *s, size_t len)
{
    for (int i = 0; i < qmodes_count; i++)
        if (strlen(qmodes[i].fn) == len && !memcmp(qmodes[i].fn, s, len))
            return &qmodes[i];
    return NULL;
}

K qmode_big_arg(int64_t rows, uint64_t seed)
{
    /* One allocation: pointers, then 8 bytes of text per symbol. */
    K col = calloc(1, sizeof(struct k0) + (size_t)rows * (sizeof(char *) + 8));
    if (!col)
        return NULL;
    col->t = KT_SYM;
    col->n = rows;
    char *text = (char *)col->data + (size_t)rows * sizeof(char *);
    uint64_t s = seed ? seed : 1;
    for (int64_t r = 0; r < rows; r++) {
        char *p = text + r * 8;
        uint64_t v = xorshift64(&s);
        for (int k = 0; k < 7; k++, v >>= 4)
            p[k] = (char)('a' + (v & 15)); /* q's n?`7 draws from a..p */
        p[7] = 0;
        kS(col)[r] = p;
    }
    const char *name = "a";
    K cols = k_list(1);
    if (!cols) {
        k_free(col);
        return NULL;
    }
    kK(cols)[0] = col;
    return k_table(k_dict(k_symv(1, &name), cols));
}

K qmode_request(const struct qmode *m, const char *arg, uint64_t seed)
{
    K a;
    if (m->throws)
        a = k_sym(arg && *arg ? arg : "oops");
    else if (m->big_arg)
        a = qmode_big_arg(QMODE_BIGARG_ROWS, seed);
    else if ((a = k_atom(-KT_LONG)))
        a->j = 0;
    K call = k_list(2);
    if (!a || !call) {
        k_free(a);
        k_free(call);
        return NULL;
    }
    kK(call)[0] = k_lambda("", m->fn);
    kK(call)[1] = a;
    if (!kK(call)[0]) {
        k_free(call);
        return NULL;
    }
    if (m->direct)
        return call;
    K req = k_list(2);
    if (!req) {
        k_free(call);
        return NULL;
    }
    kK(req)[0] = k_sym(".gateway.exec");
    kK(req)[1] = call;
    if (!kK(req)[0]) {
        k_free(req);
        return NULL;
    }
    return req;
}
