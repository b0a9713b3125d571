/* qnotify.c: a stand-in for systemd's notify socket: prints every sd_notify datagram it gets. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static void usage(void)
{
    fprintf(stderr,
            "usage: qnotify SOCKET\n"
            "  binds a datagram socket at SOCKET (a path, or an abstract name if it starts with\n"
            "  '@'), as systemd does for a Type=notify service's NOTIFY_SOCKET, prints\n"
            "  \"qnotify listening on SOCKET\", then one line per field of every datagram:\n"
            "  \"N pid=PID FIELD\" (N counts datagrams from 1, PID is the sender's, from its\n"
            "  credentials). Runs until killed.\n");
    exit(2);
}

int main(int argc, char **argv)
{
    if (argc != 2 || !argv[1][0] || argv[1][0] == '-') /* (--help: usage, not a socket named so) */
        usage();
    const char *name = argv[1];
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t n = strlen(name);
    if (n >= sizeof sa.sun_path) {
        fprintf(stderr, "qnotify: %s: name too long\n", name);
        return 1;
    }
    memcpy(sa.sun_path, name, n);
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (name[0] != '@'));
    if (name[0] == '@')
        sa.sun_path[0] = '\0';
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0), one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof one) ||
        bind(fd, (struct sockaddr *)&sa, len)) {
        fprintf(stderr, "qnotify: %s: %s\n", name, strerror(errno));
        return 1;
    }
    printf("qnotify listening on %s\n", name);
    fflush(stdout);
    static char buf[65536];
    for (long seq = 1;; seq++) {
        char ctl[CMSG_SPACE(sizeof(struct ucred))];
        struct iovec iov = {.iov_base = buf, .iov_len = sizeof buf - 1};
        struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof ctl};
        ssize_t got = recvmsg(fd, &m, 0);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            fprintf(stderr, "qnotify: recvmsg: %s\n", strerror(errno));
            return 1;
        }
        buf[got] = '\0';
        long pid = 0;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
                struct ucred u;
                memcpy(&u, CMSG_DATA(c), sizeof u);
                pid = u.pid;
            }
        for (char *f = buf, *end; *f; f = end) { /* fields are separated by newlines */
            end = f + strcspn(f, "\n");
            printf("%ld pid=%ld %.*s\n", seq, pid, (int)(end - f), f);
            if (*end)
                end++;
        }
        fflush(stdout);
    }
}
