/* test_net.c: net_listen_tcp's NET_REUSEPORT: two listeners that both set it share a port and
 * the kernel hands connections to both; one that does not set it, on either side, gets
 * EADDRINUSE, as a second qgate without reuseport must. net_keepalive: the socket options it
 * sets, as the kernel reads them back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net.h"

/* A free loopback port: bound by a listener that is then closed. */
static int free_port(void)
{
    int port = 0, fd = net_listen_tcp("127.0.0.1", 0, 1, 0, &port);
    assert_true(fd >= 0);
    close(fd);
    return port;
}

static void test_reuseport_shares(void **state)
{
    (void)state;
    int port = free_port(), p1 = 0, p2 = 0;
    int a = net_listen_tcp("127.0.0.1", port, 64, NET_NONBLOCK | NET_REUSEPORT, &p1);
    int b = net_listen_tcp("127.0.0.1", port, 64, NET_NONBLOCK | NET_REUSEPORT, &p2);
    assert_true(a >= 0);
    assert_true(b >= 0);
    assert_int_equal(p1, port);
    assert_int_equal(p2, port);
    /* the kernel picks a listener by a hash of the connection's addresses: among 64
     * connections both get some (all on one: 2^-63) */
    int conns[64], got_a = 0, got_b = 0;
    for (int i = 0; i < 64; i++) {
        conns[i] = net_connect_tcp("127.0.0.1", port, 0);
        assert_true(conns[i] >= 0);
    }
    for (int n = 0; n < 64;) {
        struct pollfd pf[2] = {{.fd = a, .events = POLLIN}, {.fd = b, .events = POLLIN}};
        assert_true(poll(pf, 2, 5000) > 0);
        for (int k = 0; k < 2; k++) {
            int fd;
            while ((pf[k].revents & POLLIN) && (fd = accept(pf[k].fd, NULL, NULL)) >= 0) {
                close(fd);
                n++;
                if (k)
                    got_b++;
                else
                    got_a++;
            }
        }
    }
    assert_true(got_a > 0);
    assert_true(got_b > 0);
    for (int i = 0; i < 64; i++)
        close(conns[i]);
    close(a);
    close(b);
}

static void test_reuseport_needs_both(void **state)
{
    (void)state;
    int port = free_port();
    int plain = net_listen_tcp("127.0.0.1", port, 64, NET_NONBLOCK, NULL);
    assert_true(plain >= 0);
    errno = 0;
    assert_int_equal(net_listen_tcp("127.0.0.1", port, 64, NET_NONBLOCK | NET_REUSEPORT, NULL), -1);
    assert_int_equal(errno, EADDRINUSE);
    errno = 0;
    assert_int_equal(net_listen_tcp("127.0.0.1", port, 64, NET_NONBLOCK, NULL), -1);
    assert_int_equal(errno, EADDRINUSE);
    close(plain);

    int shared = net_listen_tcp("127.0.0.1", port, 64, NET_NONBLOCK | NET_REUSEPORT, NULL);
    assert_true(shared >= 0);
    errno = 0;
    assert_int_equal(net_listen_tcp("127.0.0.1", port, 64, NET_NONBLOCK, NULL), -1);
    assert_int_equal(errno, EADDRINUSE);
    close(shared);
}

static struct sockaddr_storage v4(const char *ip)
{
    struct sockaddr_storage ss = {0};
    struct sockaddr_in *a = (struct sockaddr_in *)&ss;
    a->sin_family = AF_INET;
    assert_int_equal(inet_pton(AF_INET, ip, &a->sin_addr), 1);
    return ss;
}

static struct sockaddr_storage v6(const char *ip)
{
    struct sockaddr_storage ss = {0};
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
    a->sin6_family = AF_INET6;
    assert_int_equal(inet_pton(AF_INET6, ip, &a->sin6_addr), 1);
    return ss;
}

static int listed(const char *list, struct sockaddr_storage ss) { return net_addr_listed(list, (struct sockaddr *)&ss, sizeof ss, 0); }

/* admin_from, proxy_from: unix, loopback, addresses, ranges; IPv4 in its mapped IPv6 form. */
static void test_addr_lists(void **state)
{
    (void)state;
    char why[200];
    assert_int_equal(net_addr_list_check("unix, loopback, 10.0.0.0/8 192.168.1.5,fd00::/8 ::1", why, sizeof why), 0);
    assert_int_equal(net_addr_list_check("", why, sizeof why), 0);
    static const char *const bad[] = {"localhost", "10.0.0.0/33", "10.0.0.0/", "10.1", "fd00::/129", "unix2", "1.2.3.4/x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(net_addr_list_check(bad[i], why, sizeof why), -1);
        assert_non_null(strstr(why, bad[i]));
    }
    struct sockaddr_storage un = {.ss_family = AF_UNIX};
    assert_true(net_addr_listed("unix", (struct sockaddr *)&un, sizeof un, 1));
    assert_false(net_addr_listed("loopback", (struct sockaddr *)&un, sizeof un, 1));
    assert_false(net_addr_listed("", (struct sockaddr *)&un, sizeof un, 1));
    assert_true(listed("loopback", v4("127.0.0.1")));
    assert_true(listed("loopback", v4("127.8.9.10")));
    assert_true(listed("loopback", v6("::1")));
    assert_true(listed("loopback", v6("::ffff:127.0.0.1")));
    assert_false(listed("loopback", v4("10.0.0.1")));
    assert_false(listed("unix", v4("127.0.0.1")));
    assert_true(listed("10.0.0.0/8", v4("10.200.3.4")));
    assert_false(listed("10.0.0.0/8", v4("11.0.0.1")));
    assert_true(listed("10.77.0.16/28", v4("10.77.0.31")));
    assert_false(listed("10.77.0.16/28", v4("10.77.0.32")));
    assert_true(listed("10.0.0.0/8", v6("::ffff:10.1.2.3"))); /* mapped: as the IPv4 address */
    assert_true(listed("192.168.1.5", v4("192.168.1.5")));
    assert_false(listed("192.168.1.5", v4("192.168.1.6")));
    assert_true(listed("fd00::/8", v6("fd12::1")));
    assert_false(listed("fd00::/8", v6("fe80::1")));
    assert_true(listed("0.0.0.0/0", v4("8.8.8.8")));
    assert_true(listed("unix, 10.0.0.1 loopback", v4("10.0.0.1")));
}

/* A PROXY header as HAProxy sends one (v1 text, v2 binary), cut anywhere: more is awaited; one
 * that is not: refused with a reason; what follows it is left for the q handshake. */
static void test_proxy_parse(void **state)
{
    (void)state;
    struct net_proxy px;
    const char *why = NULL;
    char name[64];
    static const char v1[] = "PROXY TCP4 10.77.0.10 10.77.0.30 40000 8811\r\nbob:pw\3";
    size_t hl = strlen("PROXY TCP4 10.77.0.10 10.77.0.30 40000 8811\r\n");
    for (size_t n = 0; n < hl; n++) /* cut anywhere: more is awaited */
        assert_int_equal(net_proxy_parse((const uint8_t *)v1, n, &px, &why), 0);
    assert_int_equal(net_proxy_parse((const uint8_t *)v1, sizeof v1 - 1, &px, &why), (int)hl);
    assert_false(px.local);
    assert_string_equal(net_addr_name((struct sockaddr *)&px.src, name, sizeof name), "10.77.0.10:40000");
    static const char v1six[] = "PROXY TCP6 fd00::10 fd00::30 40001 8811\r\n";
    assert_int_equal(net_proxy_parse((const uint8_t *)v1six, sizeof v1six - 1, &px, &why), (int)sizeof v1six - 1);
    assert_string_equal(net_addr_name((struct sockaddr *)&px.src, name, sizeof name), "[fd00::10]:40001");
    static const char unknown[] = "PROXY UNKNOWN\r\n";
    assert_int_equal(net_proxy_parse((const uint8_t *)unknown, sizeof unknown - 1, &px, &why), (int)sizeof unknown - 1);
    assert_true(px.local);
    /* v2: PROXY, TCP over IPv4, 12 bytes of addresses, a TLV of 3 bytes after them */
    uint8_t b[64] = {0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a, 0x21, 0x11, 0, 15,
                     10, 77, 0, 10, 10, 77, 0, 30, 0x9c, 0x40, 0x22, 0x6b, 0x04, 0, 0, 'b', 'o', 'b'};
    for (size_t n = 0; n < 31; n++)
        assert_int_equal(net_proxy_parse(b, n, &px, &why), 0);
    assert_int_equal(net_proxy_parse(b, 34, &px, &why), 31);
    assert_false(px.local);
    assert_string_equal(net_addr_name((struct sockaddr *)&px.src, name, sizeof name), "10.77.0.10:40000");
    b[12] = 0x20; /* LOCAL: HAProxy's own check */
    assert_int_equal(net_proxy_parse(b, 34, &px, &why), 31);
    assert_true(px.local);
    uint8_t six[16 + 36] = {0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a, 0x21, 0x21, 0, 36};
    six[16 + 15] = 1; /* ::1 */
    six[48] = 0x1f;
    six[49] = 0x90;
    assert_int_equal(net_proxy_parse(six, sizeof six, &px, &why), (int)sizeof six);
    assert_string_equal(net_addr_name((struct sockaddr *)&px.src, name, sizeof name), "[::1]:8080");
    /* refused */
    static const char *const bad[] = {"PROXY TCP4 10.77.0.10 10.77.0.30 40000\r\n", "PROXY TCP4 x y 1 2\r\n",
                                      "PROXY UDP4 10.0.0.1 10.0.0.2 1 2\r\n", "PROXY TCP4 10.0.0.1 10.0.0.2 1 2\n",
                                      "PROXY TCP4 10.0.0.1 10.0.0.2 1 99999\r\n", "bob:pw\3"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why = NULL;
        assert_int_equal(net_proxy_parse((const uint8_t *)bad[i], strlen(bad[i]) + 1, &px, &why), -1);
        assert_non_null(why);
    }
    char longer[200];
    memset(longer, '1', sizeof longer);
    memcpy(longer, "PROXY TCP4 ", 11);
    assert_int_equal(net_proxy_parse((const uint8_t *)longer, sizeof longer, &px, &why), -1); /* no CRLF in 107 */
    b[12] = 0x11; /* version 1 in the v2 form */
    assert_int_equal(net_proxy_parse(b, 34, &px, &why), -1);
    b[12] = 0x21;
    b[14] = 0x10; /* 4096 bytes said to follow */
    assert_int_equal(net_proxy_parse(b, 34, &px, &why), -1);
    assert_true(net_proxy_looks((const uint8_t *)"PROX", 4));
    assert_false(net_proxy_looks((const uint8_t *)"PROXI", 5));
    assert_false(net_proxy_looks((const uint8_t *)"alice:pw", 8));
}

static int opt(int fd, int level, int name)
{
    int v = -1;
    socklen_t l = sizeof v;
    assert_int_equal(getsockopt(fd, level, name, &v, &l), 0);
    return v;
}

/* Probe times in whole seconds, rounded up; the count; the user timeout in ms or none; idle 0
 * turns the probes off; a reload's second call changes each; a Unix socket is left alone. */
static void test_keepalive(void **state)
{
    (void)state;
    int port = 0, l = net_listen_tcp("127.0.0.1", 0, 4, 0, &port);
    assert_true(l >= 0);
    int fd = net_connect_tcp("127.0.0.1", port, 0);
    assert_true(fd >= 0);
    struct net_keepalive ka = {.idle_ms = 1500, .interval_ms = 2000, .count = 5, .user_timeout_ms = 2500};
    assert_int_equal(net_keepalive(fd, &ka), 0);
    assert_int_equal(opt(fd, SOL_SOCKET, SO_KEEPALIVE), 1);
    assert_int_equal(opt(fd, IPPROTO_TCP, TCP_KEEPIDLE), 2);
    assert_int_equal(opt(fd, IPPROTO_TCP, TCP_KEEPINTVL), 2);
    assert_int_equal(opt(fd, IPPROTO_TCP, TCP_KEEPCNT), 5);
    assert_int_equal(opt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT), 2500);
    ka = (struct net_keepalive){.idle_ms = 60000, .interval_ms = 10000, .count = 3, .user_timeout_ms = 0};
    assert_int_equal(net_keepalive(fd, &ka), 0);
    assert_int_equal(opt(fd, IPPROTO_TCP, TCP_KEEPIDLE), 60);
    assert_int_equal(opt(fd, IPPROTO_TCP, TCP_KEEPINTVL), 10);
    assert_int_equal(opt(fd, IPPROTO_TCP, TCP_KEEPCNT), 3);
    assert_int_equal(opt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT), 0);
    ka.idle_ms = 0;
    assert_int_equal(net_keepalive(fd, &ka), 0);
    assert_int_equal(opt(fd, SOL_SOCKET, SO_KEEPALIVE), 0);
    close(fd);
    close(l);
    int sp[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
    ka.idle_ms = 1000;
    assert_int_equal(net_keepalive(sp[0], &ka), 0);
    assert_int_equal(opt(sp[0], SOL_SOCKET, SO_KEEPALIVE), 0);
    close(sp[0]);
    close(sp[1]);
}

/* Which worker addresses a q listening on every interface answers, so that its Unix socket
 * (local_workers = unix) is the same q: not 127.0.0.2, where another process may listen (before:
 * every 127/8 address, and a worker at 127.0.0.2:P was reached through 127.0.0.1:P's q socket) */
static int is_local(const char *text)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, text, &a4->sin_addr) == 1)
        a4->sin_family = AF_INET;
    else if (inet_pton(AF_INET6, text, &a6->sin6_addr) == 1)
        a6->sin6_family = AF_INET6;
    else
        fail_msg("%s: not an address", text);
    return net_addr_is_local((const struct sockaddr *)&ss);
}

static void test_addr_is_local(void **state)
{
    (void)state;
    assert_true(is_local("127.0.0.1"));
    assert_true(is_local("0.0.0.0"));
    assert_true(is_local("::1"));
    assert_true(is_local("::"));
    assert_true(is_local("::ffff:127.0.0.1"));
    assert_false(is_local("127.0.0.2"));
    assert_false(is_local("127.1.0.1"));
    assert_false(is_local("::ffff:127.0.0.9"));
    assert_false(is_local("192.0.2.1")); /* (TEST-NET-1: no interface of ours) */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reuseport_shares),
        cmocka_unit_test(test_reuseport_needs_both),
        cmocka_unit_test(test_addr_lists),
        cmocka_unit_test(test_proxy_parse),
        cmocka_unit_test(test_keepalive),
        cmocka_unit_test(test_addr_is_local),
    };
    return cmocka_run_group_tests_name("net", tests, NULL, NULL);
}
