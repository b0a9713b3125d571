/* auth.h: client authentication against a q -U style users file, with MD5 and SHA-1. */
#ifndef AUTH_H
#define AUTH_H

#include "qg.h"

#define AUTH_NAME_MAX 63  /* longest user name, bytes */
#define AUTH_PASS_MAX 255 /* longest password field (plain text or hex digest), bytes */

/* How an entry's secret is stored. */
enum { AUTH_PLAIN = 0, AUTH_MD5 = 1, AUTH_SHA1 = 2 };

struct auth_user {
    char name[AUTH_NAME_MAX + 1];
    uint8_t kind;                    /* AUTH_PLAIN, AUTH_MD5, AUTH_SHA1 */
    char secret[AUTH_PASS_MAX + 1];  /* plain text, or the hex digest lowercased */
    uint8_t admin;                   /* option admin=0/1 */
    uint8_t monitor;                 /* option monitor=0/1: gateway commands only (health checks,
                                      * dashboards), never a worker */
    int max_conns;                   /* option max_conns; 0 = unlimited */
    int max_inflight;                /* option max_inflight; 0 = unlimited */
};

struct auth_db {
    int n;
    struct auth_user *users;
    int *slot;       /* by name's hash: index + 1 into users, 0 empty (open addressing); the loop
                      * looks a user up per connected user at a reload: never a scan */
    unsigned mask;   /* slots - 1 (a power of two, at least twice n) */
};

/* MD5 (RFC 1321) of p[0..n) into out. p may be NULL when n is 0. */
void auth_md5(const void *p, size_t n, uint8_t out[16]);

/* SHA-1 (FIPS 180-1) of p[0..n) into out. p may be NULL when n is 0. */
void auth_sha1(const void *p, size_t n, uint8_t out[20]);

/* Lowercase hex of d[0..n) into out, NUL-terminated; out must hold 2n+1 bytes. */
void auth_hex(const uint8_t *d, size_t n, char *out);

/* Load a users file: lines "user:password[<TAB>key=value,...]", '#' comments, blank lines.
 * The password is plain, or 32 hex digits (MD5) or 40 (SHA-1). Options: admin, monitor,
 * max_conns, max_inflight (admin and monitor not both). A line that does not read exactly so is
 * refused, whole file: no ':', an empty user name or one beginning or ending with a space, a
 * field too long, an unknown option, one given twice, a bad value, a user given twice, and a
 * password with a space before what reads as options (" admin=", " max_...=", or " word=N,..."
 * to its end: a space typed for the TAB).
 * Returns NULL with "path:line: reason" (or "path: reason") in err on failure. */
struct auth_db *auth_load(const char *path, char *err, size_t errlen);

/* Free a database from auth_load; NULL is ignored. */
void auth_free(struct auth_db *db);

/* The entry for the user name user[0..ulen) (not NUL-terminated), or NULL. */
const struct auth_user *auth_find(const struct auth_db *db, const char *user, size_t ulen);

/* 1 if the plain password pass[0..plen) the client sent matches u (compared as plain text, or
 * hashed with MD5 / SHA-1 first, as q does), else 0; the final comparison is constant-time.
 * u NULL gives 0. */
int auth_check(const struct auth_user *u, const char *pass, size_t plen);

/* A database shared by the loop and the reader pool jobs that check credentials: freed when
 * the last holder lets go (a reload replaces the loop's reference while checks are running). */
struct auth_shared;

/* Wrap db with one reference; NULL on ENOMEM (db is then freed). */
struct auth_shared *auth_share(struct auth_db *db);
/* Take another reference; returns s. */
struct auth_shared *auth_ref(struct auth_shared *s);
/* Drop a reference (a void * so it can be a job's ctx_free); frees at the last one. */
void auth_unref(void *s);
const struct auth_db *auth_db_of(const struct auth_shared *s);

#endif
