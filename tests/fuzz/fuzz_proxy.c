/* fuzz_proxy.c: libFuzzer target for net_proxy_parse, the PROXY protocol header (HAProxy's v1
 * text and v2 binary) that connections from proxy_from sources start with.
 * The input is the first bytes of such a connection, from a balancer that may be broken or
 * spoofed. Checks: the result is -1 with a reason, 0 (more must come: only while under the
 * 2 KiB cap and only for bytes that still look like a header), or the header's length, within
 * the input and the cap; a header is self-delimited (every shorter prefix wants more, and the
 * header alone parses to the same result); an address comes back as a whole IPv4 or IPv6
 * socket address, and written out again as v1 text and as v2 it parses back to itself. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net.h"
#include "check.h"

static const uint8_t v2sig[12] = {0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a};

static int same(const struct net_proxy *a, const struct net_proxy *b)
{
    return a->local == b->local && a->srclen == b->srclen && !memcmp(&a->src, &b->src, a->srclen);
}

/* The address in pr, written as v1 and as v2 headers, parses back to the same address. */
static void round_trip(const struct net_proxy *pr)
{
    char text[INET6_ADDRSTRLEN], hdr[128];
    uint8_t bin[16 + 36] = {0};
    const char *why = NULL;
    struct net_proxy back;
    size_t blen;
    int hl;
    memcpy(bin, v2sig, 12);
    bin[12] = 0x21; /* version 2, PROXY */
    if (pr->src.ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)&pr->src;
        CHECK(inet_ntop(AF_INET, &a->sin_addr, text, sizeof text));
        hl = snprintf(hdr, sizeof hdr, "PROXY TCP4 %s 127.0.0.1 %u 5000\r\n", text, ntohs(a->sin_port));
        bin[13] = 0x11, bin[15] = 12;
        memcpy(bin + 16, &a->sin_addr, 4);
        memcpy(bin + 24, &a->sin_port, 2);
        blen = 16 + 12;
    } else {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&pr->src;
        CHECK(inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text));
        hl = snprintf(hdr, sizeof hdr, "PROXY TCP6 %s ::1 %u 5000\r\n", text, ntohs(a->sin6_port));
        bin[13] = 0x21, bin[15] = 36;
        memcpy(bin + 16, &a->sin6_addr, 16);
        memcpy(bin + 48, &a->sin6_port, 2);
        blen = 16 + 36;
    }
    CHECK(hl > 0 && hl <= 107);
    CHECK(net_proxy_parse((const uint8_t *)hdr, (size_t)hl, &back, &why) == hl && same(pr, &back));
    CHECK(net_proxy_parse(bin, blen, &back, &why) == (int)blen && same(pr, &back));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct net_proxy pr, again;
    const char *why = NULL;
    memset(&pr, 0xa5, sizeof pr);
    int r = net_proxy_parse(data, size, &pr, &why);
    CHECK(r >= -1);
    if (r < 0) {
        CHECK(why && why[0]);
        return 0;
    }
    if (r == 0) { /* waiting for more: only for what may still become a header, under the cap */
        CHECK(size < NET_PROXY_MAX);
        CHECK(size == 0 || net_proxy_looks(data, size));
        return 0;
    }
    CHECK((size_t)r <= size && r <= NET_PROXY_MAX);
    CHECK(net_proxy_looks(data, size));
    if (pr.local) {
        CHECK(pr.srclen == 0);
    } else {
        CHECK((pr.src.ss_family == AF_INET && pr.srclen == sizeof(struct sockaddr_in)) ||
              (pr.src.ss_family == AF_INET6 && pr.srclen == sizeof(struct sockaddr_in6)));
    }
    /* self-delimited: the header alone gives the same, and no prefix of it is taken as whole */
    CHECK(net_proxy_parse(data, (size_t)r, &again, &why) == r && same(&pr, &again));
    for (int k = 0; k < r; k++)
        CHECK(net_proxy_parse(data, (size_t)k, &again, &why) == 0);
    if (!pr.local)
        round_trip(&pr);
    return 0;
}
