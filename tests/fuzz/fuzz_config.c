/* fuzz_config.c: libFuzzer target for the configuration loader.
 * The input is INI text (any bytes): config_defaults, config_parse from memory, then
 * config_validate. Nothing may crash or overrun; a rejection must come with a message, and
 * what was accepted must stay within the table's bounds (group count, NUL-terminated strings,
 * address lists that parse, numbers inside their key's range). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "net.h"
#include "check.h"

/* Every key's value lies in its declared range or length. */
static void check_bounds(const void *base, const char *section)
{
    for (int i = 0; i < cfg_nkeys; i++) {
        const struct cfg_key *k = &cfg_keys[i];
        if (strcmp(k->section, section))
            continue;
        const char *f = (const char *)base + k->offset;
        int64_t v;
        switch (k->type) {
        case CFG_STR:
        case CFG_ADDRS: { /* (a string too: an address list, which must still parse) */
            CHECK(memchr(f, 0, k->size) != NULL);
            CHECK((int64_t)strlen(f) <= k->max);
            char why[128];
            CHECK(k->type != CFG_ADDRS || net_addr_list_check(f, why, sizeof why) == 0);
            break;
        }
        case CFG_ENUM: {
            int e;
            memcpy(&e, f, sizeof e);
            int nch = 0;
            while (k->choices[nch])
                nch++;
            CHECK(e >= 0 && e < nch);
            break;
        }
        default:
            if (k->size == sizeof(int)) {
                int iv;
                memcpy(&iv, f, sizeof iv);
                v = iv;
            } else {
                memcpy(&v, f, sizeof v);
            }
            CHECK(v >= k->min && v <= k->max);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct config *c = malloc(sizeof *c);
    CHECK(c);
    config_defaults(c);
    check_bounds(c, "gateway");

    /* the text in its own exact-size buffer, not NUL-terminated, so an over-read is caught */
    char *text = malloc(size ? size : 1);
    CHECK(text);
    if (size)
        memcpy(text, data, size);
    char err[256];
    err[0] = 0;
    int rc = config_parse(c, text, size, "fuzz.conf", err, sizeof err);
    if (rc != 0) {
        CHECK(rc == -1 && err[0] && memchr(err, 0, sizeof err));
    }
    /* whatever was set before a failure is still in bounds */
    CHECK(c->ngroups >= 0 && c->ngroups <= CFG_MAX_GROUPS);
    check_bounds(c, "gateway");
    for (int g = 0; g < c->ngroups; g++) {
        CHECK(memchr(c->groups[g].name, 0, sizeof c->groups[g].name) && c->groups[g].name[0]);
        check_bounds(&c->groups[g], "group");
    }
    err[0] = 0;
    rc = config_validate(c, err, sizeof err);
    CHECK(rc == 0 || (rc == -1 && err[0]));
    if (rc == 0)
        CHECK(c->ngroups > 0 && c->client_low_water < c->client_high_water &&
              c->reconnect_min <= c->reconnect_max);
    free(text);
    free(c);
    return 0;
}
