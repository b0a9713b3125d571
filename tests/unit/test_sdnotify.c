/* test_sdnotify.c: the datagrams sdnotify sends, received on a socket bound here: at a path and
 * at an abstract name, byte for byte, with the sender's pid; nothing at all when NOTIFY_SOCKET
 * is unset; never blocking on a receiver that does not read. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "sdnotify.h"

/* ---- a receiver ------------------------------------------------------------------------------ */

struct rx {
    int fd;
    char dir[64];  /* the temporary directory of a path socket, else "" */
    char name[160]; /* what NOTIFY_SOCKET says */
};

/* Bind a datagram socket: at DIR/notify (abstract = 0) or at @qgate-test-PID-N, with SO_PASSCRED
 * so that each datagram carries its sender's pid. Sets NOTIFY_SOCKET to it. */
static void rx_open(struct rx *r, int abstract)
{
    static int seq;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    socklen_t len;
    memset(r, 0, sizeof *r);
    if (abstract) {
        snprintf(r->name, sizeof r->name, "@qgate-test-%ld-%d", (long)getpid(), seq++);
        size_t n = strlen(r->name);
        memcpy(sa.sun_path, r->name, n);
        sa.sun_path[0] = '\0';
        len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    } else {
        strcpy(r->dir, "/tmp/qgate-sdnotify.XXXXXX");
        assert_non_null(mkdtemp(r->dir));
        snprintf(r->name, sizeof r->name, "%s/notify", r->dir);
        strcpy(sa.sun_path, r->name);
        len = (socklen_t)sizeof sa;
    }
    r->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(r->fd >= 0);
    int one = 1;
    assert_int_equal(setsockopt(r->fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof one), 0);
    assert_int_equal(bind(r->fd, (struct sockaddr *)&sa, len), 0);
    assert_int_equal(setenv("NOTIFY_SOCKET", r->name, 1), 0);
}

static void rx_close(struct rx *r)
{
    close(r->fd);
    if (r->dir[0]) {
        unlink(r->name);
        rmdir(r->dir);
    }
    unsetenv("NOTIFY_SOCKET");
}

/* The next datagram, already queued (sdnotify_send returned after queueing it): its length,
 * its bytes NUL-terminated in buf, its sender's pid in *pid. -1 if none is waiting. */
static ssize_t rx_next(struct rx *r, char *buf, size_t cap, pid_t *pid)
{
    char ctl[CMSG_SPACE(sizeof(struct ucred))];
    struct iovec iov = {.iov_base = buf, .iov_len = cap - 1};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof ctl};
    ssize_t n = recvmsg(r->fd, &m, MSG_DONTWAIT);
    if (n < 0)
        return -1;
    buf[n] = '\0';
    *pid = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
            struct ucred u;
            memcpy(&u, CMSG_DATA(c), sizeof u);
            *pid = u.pid;
        }
    return n;
}

static void expect_datagram(struct rx *r, const char *want)
{
    char buf[8192];
    pid_t pid;
    ssize_t n = rx_next(r, buf, sizeof buf, &pid);
    if (n < 0)
        fail_msg("no datagram at %s (want \"%s\")", r->name, want);
    assert_string_equal(buf, want);
    assert_int_equal((size_t)n, strlen(want)); /* no terminator sent */
    assert_int_equal(pid, getpid());
}

static void expect_none(struct rx *r)
{
    char buf[64];
    pid_t pid;
    assert_int_equal(rx_next(r, buf, sizeof buf, &pid), -1);
}

static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    assert_non_null(d);
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* ---- the tests ------------------------------------------------------------------------------- */

static void check_sends(int abstract)
{
    struct rx r;
    rx_open(&r, abstract);
    assert_int_equal(sdnotify_send("READY=1\nSTATUS=listening on 0.0.0.0:8811"), 1);
    expect_datagram(&r, "READY=1\nSTATUS=listening on 0.0.0.0:8811");
    assert_int_equal(sdnotify_printf("READY=1\nMAINPID=%ld", (long)getpid()), 1);
    char want[64];
    snprintf(want, sizeof want, "READY=1\nMAINPID=%ld", (long)getpid());
    expect_datagram(&r, want);
    assert_int_equal(sdnotify_send("STOPPING=1"), 1);
    expect_datagram(&r, "STOPPING=1");
    expect_none(&r);
    rx_close(&r);
}

static void test_path(void **state)
{
    (void)state;
    check_sends(0);
}

static void test_abstract(void **state)
{
    (void)state;
    check_sends(1);
}

/* Unset or empty: nothing sent, no socket made (no fd opened, none left). */
static void test_unset_is_noop(void **state)
{
    (void)state;
    struct rx r;
    rx_open(&r, 1); /* a receiver, so that a datagram sent anyway would show */
    unsetenv("NOTIFY_SOCKET");
    int fds = open_fds();
    assert_int_equal(sdnotify_send("READY=1"), 0);
    assert_int_equal(sdnotify_printf("STATUS=%d", 1), 0);
    assert_int_equal(sdnotify_reloading(), 0);
    setenv("NOTIFY_SOCKET", "", 1);
    assert_int_equal(sdnotify_send("READY=1"), 0);
    assert_int_equal(open_fds(), fds);
    expect_none(&r);
    rx_close(&r);
}

static uint64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000;
}

/* RELOADING=1 carries CLOCK_MONOTONIC in microseconds, taken when it is sent. */
static void test_reloading(void **state)
{
    (void)state;
    struct rx r;
    rx_open(&r, 0);
    uint64_t before = mono_us();
    assert_int_equal(sdnotify_reloading(), 1);
    uint64_t after = mono_us();
    char buf[256];
    pid_t pid;
    assert_true(rx_next(&r, buf, sizeof buf, &pid) > 0);
    unsigned long long us;
    char end;
    assert_int_equal(sscanf(buf, "RELOADING=1\nMONOTONIC_USEC=%llu%c", &us, &end), 1);
    assert_true(us >= before && us <= after);
    rx_close(&r);
}

/* A receiver that never reads: once its queue is full a send fails with EAGAIN at once instead
 * of waiting (the alarm ends the test if it ever blocks). */
static void test_never_blocks(void **state)
{
    (void)state;
    struct rx r;
    rx_open(&r, 1);
    alarm(20);
    int rc = 1, i;
    for (i = 0; i < 100000 && rc == 1; i++)
        rc = sdnotify_send("STATUS=filling the queue");
    alarm(0);
    assert_int_equal(rc, -1);
    assert_int_equal(errno, EAGAIN);
    assert_true(i > 1);
    rx_close(&r);
}

/* A state over 4 KiB is cut, its first fields kept. */
static void test_long_state_cut(void **state)
{
    (void)state;
    struct rx r;
    rx_open(&r, 0);
    char *big = malloc(10000);
    assert_non_null(big);
    memset(big, 'x', 9999);
    big[9999] = '\0';
    assert_int_equal(sdnotify_printf("READY=1\nSTATUS=%s", big), 1);
    char buf[8192];
    pid_t pid;
    ssize_t n = rx_next(&r, buf, sizeof buf, &pid);
    assert_int_equal(n, 4095);
    assert_memory_equal(buf, "READY=1\nSTATUS=xxx", 18);
    free(big);
    rx_close(&r);
}

/* Nobody listening, a name too long, an address family not ours: -1 and errno, at once. */
static void test_errors(void **state)
{
    (void)state;
    setenv("NOTIFY_SOCKET", "/nonexistent/qgate/notify", 1);
    assert_int_equal(sdnotify_send("READY=1"), -1);
    assert_int_equal(errno, ENOENT);
    setenv("NOTIFY_SOCKET", "@qgate-test-nobody-listens-here", 1);
    assert_int_equal(sdnotify_send("READY=1"), -1);
    assert_int_equal(errno, ECONNREFUSED);
    char longname[200];
    memset(longname, 'a', sizeof longname - 1);
    longname[0] = '/';
    longname[sizeof longname - 1] = '\0';
    setenv("NOTIFY_SOCKET", longname, 1);
    assert_int_equal(sdnotify_send("READY=1"), -1);
    assert_int_equal(errno, ENAMETOOLONG);
    setenv("NOTIFY_SOCKET", "vsock:2:1234", 1);
    assert_int_equal(sdnotify_send("READY=1"), -1);
    assert_int_equal(errno, EAFNOSUPPORT);
    unsetenv("NOTIFY_SOCKET");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_path),
        cmocka_unit_test(test_abstract),
        cmocka_unit_test(test_unset_is_noop),
        cmocka_unit_test(test_reloading),
        cmocka_unit_test(test_never_blocks),
        cmocka_unit_test(test_long_state_cut),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests_name("sdnotify", tests, NULL, NULL);
}
