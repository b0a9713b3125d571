/* tracer.c: a call and byte tracer for the loop thread of a qgate built with
 * -finstrument-functions (bench/trace/run links it into build/trace/qgate).
 *
 * It records, on the process's main thread only (qgate's loop thread), into a buffer mapped at
 * start (nothing is allocated in a hook):
 *   - every entry and exit of an instrumented function (its address less the load base);
 *   - the system calls that move bytes or make connections, defined here so that the
 *     executable's own calls come to these definitions first and are forwarded with syscall():
 *     accept, accept4, connect, read, write, readv, writev, recv, send, recvfrom, sendto,
 *     recvmsg, sendmsg, splice, close, and epoll_wait and epoll_pwait (the iterations): fd
 *     and result, and for the calls that carry bytes whether they held the marker
 *     ($QGATE_TRACE_MARK, e.g. "echo x"), so that the analysis can tell which connection is
 *     the measured client without knowing a function of the gateway.
 * Other threads go straight to the system call. At exit (a destructor: qgate returns from main
 * after SIGTERM) the events are written as text to the file $QGATE_TRACE; without QGATE_TRACE
 * nothing is recorded. QGATE_TRACE_MAX: the buffer's size in events (default 4M, 24 bytes each,
 * mapped lazily). bench/trace/analyse.c reads the file; its format is at trace_write below.
 *
 * Nothing here is instrumented (run compiles it without -finstrument-functions; the attribute
 * says it again), and it does not include the gateway's headers: it depends on no file or
 * function name of the gateway. Linux x86_64 and aarch64 system call numbers (sys/syscall.h). */
#define _DEFAULT_SOURCE /* syscall, MAP_ANONYMOUS; not _GNU_SOURCE (below) */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>
#include <errno.h>

#define NOI __attribute__((no_instrument_function))
#define API __attribute__((no_instrument_function, visibility("default")))

/* declared by glibc only under _GNU_SOURCE, which this file does not define (with it, glibc's
 * socket prototypes take a transparent union) */
struct epoll_event;
int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags);
ssize_t splice(int fd_in, int64_t *off_in, int fd_out, int64_t *off_out, size_t len, unsigned flags);
int epoll_wait(int epfd, struct epoll_event *evs, int max, int timeout);
int epoll_pwait(int epfd, struct epoll_event *evs, int max, int timeout, const void *sigmask);
/* link.h's, under _GNU_SOURCE only: dlpi_addr, the object's load base, is its first member */
struct dl_phdr_info {
    uintptr_t dlpi_addr;
};
int dl_iterate_phdr(int (*cb)(struct dl_phdr_info *info, size_t size, void *arg), void *arg);
void __cyg_profile_func_enter(void *fn, void *site);
void __cyg_profile_func_exit(void *fn, void *site);

enum ev_kind {
    EV_ENTER = 1, EV_EXIT, EV_ACCEPT, EV_CONNECT, EV_READ, EV_WRITE, EV_SPLICE, EV_CLOSE, EV_EPOLL_IN, EV_EPOLL_OUT
};

/* one event: kind, then a, b, c as the kind says (trace_write) */
struct ev {
    uint16_t kind;
    uint16_t flags; /* EV_READ, EV_WRITE: 1 if the bytes moved held the marker */
    int32_t a;
    int64_t b;
    uint64_t c;
};

static struct ev *evs;
static size_t nev, maxev, dropped;
static int on;        /* recording */
static pid_t main_tid;
static uintptr_t base; /* the executable's load base (PIE) */
static char mark[64];
static size_t marklen;
static char out_path[4096];
static const char *names[] = {"?", "accept", "connect", "read", "write", "splice", "close", "epoll_in", "epoll_out"};

/* 1 on the main thread, 0 elsewhere; the thread's answer is kept */
static __thread signed char tl_main = -1;
static NOI int is_main(void)
{
    if (tl_main < 0)
        tl_main = (pid_t)syscall(SYS_gettid) == main_tid;
    return tl_main;
}

static NOI void rec(int kind, int flags, int32_t a, int64_t b, uint64_t c)
{
    if (!on || !is_main())
        return;
    if (nev == maxev) {
        dropped++;
        return;
    }
    evs[nev++] = (struct ev){.kind = (uint16_t)kind, .flags = (uint16_t)flags, .a = a, .b = b, .c = c};
}

/* does p[0..n) hold the marker? (no libc search: memmem needs _GNU_SOURCE) */
static NOI int has_mark(const void *p, ssize_t n)
{
    const char *s = p;
    if (!marklen || n < (ssize_t)marklen || !p)
        return 0;
    for (ssize_t i = 0; i + (ssize_t)marklen <= n; i++)
        if (s[i] == mark[0] && !memcmp(s + i, mark, marklen))
            return 1;
    return 0;
}

static NOI int iov_mark(const struct iovec *iov, int cnt, ssize_t n)
{
    for (int i = 0; i < cnt && n > 0; i++) {
        ssize_t len = (ssize_t)iov[i].iov_len < n ? (ssize_t)iov[i].iov_len : n;
        if (has_mark(iov[i].iov_base, len))
            return 1;
        n -= len;
    }
    return 0;
}

/* a system call's result as libc gives it (-1 and errno), recorded as the result or -errno */
static NOI int64_t res(long r) { return r < 0 ? -(int64_t)errno : r; }

static NOI int find_base(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    (void)arg;
    base = (uintptr_t)info->dlpi_addr; /* the first object is the executable */
    return 1;
}

__attribute__((constructor, no_instrument_function)) static void trace_start(void)
{
    const char *path = getenv("QGATE_TRACE"), *m = getenv("QGATE_TRACE_MARK"), *mx = getenv("QGATE_TRACE_MAX");
    if (!path || !*path || strlen(path) >= sizeof out_path)
        return;
    strcpy(out_path, path);
    if (m && strlen(m) < sizeof mark) {
        strcpy(mark, m);
        marklen = strlen(m);
    }
    maxev = mx && atol(mx) > 0 ? (size_t)atol(mx) : (size_t)4 << 20;
    void *p = mmap(NULL, maxev * sizeof *evs, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "tracer: cannot map %zu events: %s\n", maxev, strerror(errno));
        return;
    }
    evs = p;
    dl_iterate_phdr(find_base, NULL);
    main_tid = (pid_t)syscall(SYS_gettid);
    on = 1;
}

/* The file: a header, then one event a line:
 *   # qgate trace 1
 *   base HEX          the load base subtracted from every address below
 *   mark TEXT         the marker (may be empty)
 *   events N dropped D
 *   E HEX             entry of the function at HEX (address less base)
 *   X HEX             its exit
 *   accept LFD RES    accept/accept4 on listening fd LFD: the new fd, or -errno
 *   connect FD RES    0 or -errno (-115: EINPROGRESS)
 *   read FD RES M     read, readv, recv, recvfrom, recvmsg: bytes or -errno; M 1 if they held the marker
 *   write FD RES M    write, writev, send, sendto, sendmsg
 *   splice IN OUT RES
 *   close FD
 *   epoll_in EPFD TIMEOUT    epoll_wait or epoll_pwait called
 *   epoll_out EPFD RES       ... returned */
__attribute__((destructor, no_instrument_function)) static void trace_write(void)
{
    if (!evs)
        return;
    on = 0;
    FILE *f = fopen(out_path, "w");
    if (!f) {
        fprintf(stderr, "tracer: cannot write %s: %s\n", out_path, strerror(errno));
        return;
    }
    fprintf(f, "# qgate trace 1\nbase %llx\nmark %s\nevents %zu dropped %zu\n", (unsigned long long)base, mark,
            nev, dropped);
    for (size_t i = 0; i < nev; i++) {
        const struct ev *e = &evs[i];
        switch (e->kind) {
        case EV_ENTER:
        case EV_EXIT:
            fprintf(f, "%c %llx\n", e->kind == EV_ENTER ? 'E' : 'X', (unsigned long long)(e->c - base));
            break;
        case EV_READ:
        case EV_WRITE:
            fprintf(f, "%s %d %lld %d\n", names[e->kind - EV_EXIT], e->a, (long long)e->b, e->flags);
            break;
        case EV_SPLICE:
            fprintf(f, "splice %d %d %lld\n", e->a, (int)e->c, (long long)e->b);
            break;
        case EV_CLOSE:
            fprintf(f, "close %d\n", e->a);
            break;
        default:
            fprintf(f, "%s %d %lld\n", names[e->kind - EV_EXIT], e->a, (long long)e->b);
        }
    }
    if (fclose(f))
        fprintf(stderr, "tracer: writing %s: %s\n", out_path, strerror(errno));
    munmap(evs, maxev * sizeof *evs);
    evs = NULL;
}

API void __cyg_profile_func_enter(void *fn, void *site)
{
    (void)site;
    rec(EV_ENTER, 0, 0, 0, (uint64_t)(uintptr_t)fn);
}

API void __cyg_profile_func_exit(void *fn, void *site)
{
    (void)site;
    rec(EV_EXIT, 0, 0, 0, (uint64_t)(uintptr_t)fn);
}

/* ---- the system calls, forwarded -------------------------------------------------------- */

API int accept(int fd, struct sockaddr *addr, socklen_t *len)
{
    long r = syscall(SYS_accept4, fd, addr, len, 0);
    rec(EV_ACCEPT, 0, fd, res(r), 0);
    return (int)r;
}

API int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
    long r = syscall(SYS_accept4, fd, addr, len, flags);
    rec(EV_ACCEPT, 0, fd, res(r), 0);
    return (int)r;
}

API int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
    long r = syscall(SYS_connect, fd, addr, len);
    rec(EV_CONNECT, 0, fd, res(r), 0);
    return (int)r;
}

API ssize_t read(int fd, void *buf, size_t n)
{
    long r = syscall(SYS_read, fd, buf, n);
    rec(EV_READ, on && r > 0 && is_main() && has_mark(buf, r), fd, res(r), 0);
    return r;
}

API ssize_t write(int fd, const void *buf, size_t n)
{
    long r = syscall(SYS_write, fd, buf, n);
    rec(EV_WRITE, on && r > 0 && is_main() && has_mark(buf, r), fd, res(r), 0);
    return r;
}

API ssize_t readv(int fd, const struct iovec *iov, int cnt)
{
    long r = syscall(SYS_readv, fd, iov, cnt);
    rec(EV_READ, on && r > 0 && is_main() && iov_mark(iov, cnt, r), fd, res(r), 0);
    return r;
}

API ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
    long r = syscall(SYS_writev, fd, iov, cnt);
    rec(EV_WRITE, on && r > 0 && is_main() && iov_mark(iov, cnt, r), fd, res(r), 0);
    return r;
}

API ssize_t recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *addr, socklen_t *len)
{
    long r = syscall(SYS_recvfrom, fd, buf, n, flags, addr, len);
    rec(EV_READ, on && r > 0 && is_main() && has_mark(buf, r), fd, res(r), 0);
    return r;
}

API ssize_t recv(int fd, void *buf, size_t n, int flags) { return recvfrom(fd, buf, n, flags, NULL, NULL); }

API ssize_t sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *addr, socklen_t len)
{
    long r = syscall(SYS_sendto, fd, buf, n, flags, addr, len);
    rec(EV_WRITE, on && r > 0 && is_main() && has_mark(buf, r), fd, res(r), 0);
    return r;
}

API ssize_t send(int fd, const void *buf, size_t n, int flags) { return sendto(fd, buf, n, flags, NULL, 0); }

API ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
    long r = syscall(SYS_recvmsg, fd, msg, flags);
    rec(EV_READ, on && r > 0 && is_main() && iov_mark(msg->msg_iov, (int)msg->msg_iovlen, r), fd, res(r), 0);
    return r;
}

API ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
    long r = syscall(SYS_sendmsg, fd, msg, flags);
    rec(EV_WRITE, on && r > 0 && is_main() && iov_mark(msg->msg_iov, (int)msg->msg_iovlen, r), fd, res(r), 0);
    return r;
}

API ssize_t splice(int fd_in, int64_t *off_in, int fd_out, int64_t *off_out, size_t len, unsigned flags)
{
    long r = syscall(SYS_splice, fd_in, off_in, fd_out, off_out, len, flags);
    rec(EV_SPLICE, 0, fd_in, res(r), (uint64_t)(uint32_t)fd_out);
    return r;
}

API int close(int fd)
{
    rec(EV_CLOSE, 0, fd, 0, 0); /* before: after it, the number may be another thread's */
    return (int)syscall(SYS_close, fd);
}

API int epoll_pwait(int epfd, struct epoll_event *evs_, int max, int timeout, const void *sigmask)
{
    rec(EV_EPOLL_IN, 0, epfd, timeout, 0);
    long r = syscall(SYS_epoll_pwait, epfd, evs_, max, timeout, sigmask, (size_t)8);
    rec(EV_EPOLL_OUT, 0, epfd, res(r), 0);
    return (int)r;
}

API int epoll_wait(int epfd, struct epoll_event *evs_, int max, int timeout)
{
    return epoll_pwait(epfd, evs_, max, timeout, NULL);
}
