/* test_net.c: net_listen_tcp's NET_REUSEPORT: two listeners that both set it share a port and
 * the kernel hands connections to both; one that does not set it, on either side, gets
 * EADDRINUSE, as a second qgate without reuseport must. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <poll.h>
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reuseport_shares),
        cmocka_unit_test(test_reuseport_needs_both),
    };
    return cmocka_run_group_tests_name("net", tests, NULL, NULL);
}
