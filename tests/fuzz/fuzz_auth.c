/* fuzz_auth.c: libFuzzer target for auth_load, the q -U style users file (users_file).
 * The input is the file's text, put in a memory file that auth_load opens by path. Checks:
 * a refusal names the file and says why; a file taken has one user per line that is neither
 * blank nor a comment, in order, each as the users file promises (a name of 1..63 bytes with no
 * ':', TAB, NUL or space at either end, not a comment's '#'; a secret of at most 255 bytes,
 * MD5 and SHA-1 digests as lowercase hex of their length; not admin and monitor both; limits
 * >= 0), each found by its name and no other; a plain password passes auth_check and the same
 * password with one byte changed does not; and the users written back as a file of our own
 * (name:secret TAB every option) load to exactly the same users. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "auth.h"
#include "check.h"

static int in_fd = -1, out_fd = -1;
static char in_path[64], out_path[64];

static int mem_file(const char *name, char *path, size_t len)
{
    int fd = memfd_create(name, 0);
    CHECK(fd >= 0);
    snprintf(path, len, "/proc/self/fd/%d", fd);
    return fd;
}

static void put(int fd, const void *p, size_t n)
{
    CHECK(ftruncate(fd, 0) == 0);
    CHECK(pwrite(fd, p, n, 0) == (ssize_t)n);
}

/* The lines auth_load must take as users: split on '\n', one trailing '\r' dropped, neither
 * empty nor starting with '#'. */
static int user_lines(const uint8_t *d, size_t n)
{
    int users = 0;
    for (size_t i = 0, end; i < n; i = end + 1) {
        const uint8_t *nl = memchr(d + i, '\n', n - i);
        end = nl ? (size_t)(nl - d) : n;
        size_t len = end - i;
        if (len && d[end - 1] == '\r')
            len--;
        if (len && d[i] != '#')
            users++;
    }
    return users;
}

static int lower_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

static void check_user(const struct auth_db *db, int i)
{
    const struct auth_user *u = &db->users[i];
    size_t nl = strnlen(u->name, sizeof u->name), sl = strnlen(u->secret, sizeof u->secret);
    CHECK(nl >= 1 && nl <= AUTH_NAME_MAX);
    CHECK(sl <= AUTH_PASS_MAX);
    CHECK(!strpbrk(u->name, ":\t") && u->name[0] != ' ' && u->name[nl - 1] != ' ' && u->name[0] != '#');
    CHECK(!strchr(u->secret, '\t'));
    CHECK(auth_find(db, u->name, nl) == u);
    CHECK(!(u->admin && u->monitor) && u->admin <= 1 && u->monitor <= 1);
    CHECK(u->max_conns >= 0 && u->max_inflight >= 0);
    switch (u->kind) {
    case AUTH_MD5:
        CHECK(sl == 32 && lower_hex(u->secret, sl));
        break;
    case AUTH_SHA1:
        CHECK(sl == 40 && lower_hex(u->secret, sl));
        break;
    case AUTH_PLAIN: {
        CHECK(auth_check(u, u->secret, sl) == 1);
        char other[AUTH_PASS_MAX + 2];
        memcpy(other, u->secret, sl);
        if (sl) {
            other[0] ^= 1;
            CHECK(auth_check(u, other, sl) == 0);
            other[0] ^= 1;
        }
        other[sl] = 'x';
        CHECK(auth_check(u, other, sl + 1) == 0);
        break;
    }
    default:
        CHECK(!"a kind that is none of plain, MD5, SHA-1");
    }
}

/* db written back as a users file of our own, every option given, loads to the same users. */
static void round_trip(const struct auth_db *db)
{
    size_t cap = (size_t)db->n * (AUTH_NAME_MAX + AUTH_PASS_MAX + 96) + 1, len = 0;
    char *text = malloc(cap), err[512] = "";
    CHECK(text);
    for (int i = 0; i < db->n; i++) {
        const struct auth_user *u = &db->users[i];
        int k = snprintf(text + len, cap - len, "%s:%s\tadmin=%d,monitor=%d,max_conns=%d,max_inflight=%d\n", u->name,
                         u->secret, u->admin, u->monitor, u->max_conns, u->max_inflight);
        CHECK(k > 0 && (size_t)k < cap - len);
        len += (size_t)k;
    }
    put(out_fd, text, len);
    free(text);
    struct auth_db *back = auth_load(out_path, err, sizeof err);
    if (!back)
        fprintf(stderr, "fuzz_auth: written back, refused: %s\n", err);
    CHECK(back && back->n == db->n);
    for (int i = 0; i < db->n; i++) {
        const struct auth_user *a = &db->users[i], *b = &back->users[i];
        CHECK(!strcmp(a->name, b->name) && !strcmp(a->secret, b->secret) && a->kind == b->kind);
        CHECK(a->admin == b->admin && a->monitor == b->monitor);
        CHECK(a->max_conns == b->max_conns && a->max_inflight == b->max_inflight);
    }
    auth_free(back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (in_fd < 0) {
        in_fd = mem_file("users", in_path, sizeof in_path);
        out_fd = mem_file("users-back", out_path, sizeof out_path);
    }
    put(in_fd, data, size);
    char err[512] = "";
    struct auth_db *db = auth_load(in_path, err, sizeof err);
    if (!db) {
        /* refused: the file named, a reason after it */
        CHECK(!strncmp(err, in_path, strlen(in_path)) && strlen(err) > strlen(in_path) + 2);
        return 0;
    }
    CHECK(db->n == user_lines(data, size));
    for (int i = 0; i < db->n; i++)
        check_user(db, i);
    round_trip(db);
    auth_free(db);
    return 0;
}
