/*
 * test_auth.c - the job's secret file and the proofs of the handshake
 * between hosts (daemon/net/auth.c), and the whole handshake through the
 * frames of proto/wire_handshake.c: hosts with the same secret accept each other; a wrong
 * secret, a replayed or reflected proof, another job or another pair of
 * hosts is refused. The per-job secret of a job without a secret file:
 * made once, 0600, read by every host of the job (also when they come at
 * once), refused when anything about it or its directory is loose, and
 * removed only while it is still the same.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "auth.h"
#include "proto/wire.h"

static char dir[] = "/tmp/kvs_test_auth_XXXXXX";

static const char *write_file(const char *name, const char *text, mode_t mode)
{
    static char path[256];
    FILE *f;

    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    assert_int_equal(chmod(path, mode), 0);
    return path;
}

static void load_fails(const char *path, int code, const char *says)
{
    struct kvs__secret s;
    struct kvs__err e = { 0, "" };

    assert_int_equal(kvs__secret_load(path, &s, &e), code);
    if (!strstr(e.msg, says))
        fail_msg("detail \"%s\" does not say \"%s\"", e.msg, says);
}

static void test_secret_file_rules(void **state)
{
    struct kvs__secret a, b;
    struct kvs__err e = { 0, "" };
    char link[300];
    const char *p;

    (void)state;
    p = write_file("ok", "0123456789abcdef0123\n", 0600);
    assert_int_equal(kvs__secret_load(p, &a, &e), 0);
    p = write_file("ok2", "0123456789abcdef0123", 0400);    /* no newline: the same key */
    assert_int_equal(kvs__secret_load(p, &b, &e), 0);
    assert_memory_equal(a.key, b.key, sizeof a.key);
    p = write_file("other", "0123456789abcdef0124", 0600);
    assert_int_equal(kvs__secret_load(p, &b, &e), 0);
    assert_memory_not_equal(a.key, b.key, sizeof a.key);

    p = write_file("loose", "0123456789abcdef0123", 0644);
    load_fails(p, KVS_EBADARG, "mode 0644): chmod 600");
    p = write_file("group", "0123456789abcdef0123", 0620);
    load_fails(p, KVS_EBADARG, "group or others");
    p = write_file("short", "too short\n", 0600);
    load_fails(p, KVS_EBADARG, "fewer than 16 bytes");
    snprintf(link, sizeof link, "%s/link", dir);
    unlink(link);
    assert_int_equal(symlink("ok", link), 0);
    load_fails(link, KVS_EBADARG, "symbolic link");
    load_fails(dir, KVS_EBADARG, "not a regular file");
    snprintf(link, sizeof link, "%s/none", dir);
    load_fails(link, -ENOENT, "No such file");
    load_fails(NULL, KVS_EBADARG, "no path");
}

struct host {
    struct kvs__secret secret;
    uint32_t rank;
    const char *job;
};

static struct host host_with(const char *secret_text, uint32_t rank, const char *job)
{
    struct host h = { .rank = rank, .job = job };
    struct kvs__err e = { 0, "" };

    assert_int_equal(kvs__secret_load(write_file("s", secret_text, 0600), &h.secret, &e), 0);
    return h;
}

/* The whole handshake between a client and a server host, every message
 * through its frame. Returns 0 when both accept each other, else the side
 * that refused: 1 the client (the server's proof), 2 the server. */
static int handshake(const struct host *client, const struct host *server)
{
    unsigned char head[KVS__WIRE_HEAD], body[256], client_nonce[KVS__NONCE_BYTES];
    struct kvs__frame_head fh;
    struct kvs__wire_hello hello = { .nhosts = 4, .nworkers = 2 }, got_hello;
    struct kvs__wire_challenge ch, got_ch;
    struct kvs__wire_proof pr, got_pr;
    struct kvs__err e = { 0, "" };

    /* client -> server: hello */
    assert_int_equal(kvs__auth_nonce(hello.nonce), 0);
    memcpy(client_nonce, hello.nonce, sizeof client_nonce);
    strcpy(hello.job, client->job);
    fh = (struct kvs__frame_head){ KVS__FRAME_HELLO, client->rank,
                                   kvs__frame_payload_bytes(KVS__FRAME_HELLO) };
    kvs__frame_head_encode(&fh, head);
    kvs__wire_hello_encode(&hello, body);
    assert_int_equal(kvs__frame_head_decode(head, sizeof head, 4, &fh, &e), 0);
    assert_int_equal(kvs__wire_hello_decode(body, fh.len, &got_hello, &e), 0);

    /* server -> client: its nonce and its proof, for the job it serves */
    assert_int_equal(kvs__auth_nonce(ch.nonce), 0);
    kvs__auth_proof(&server->secret, KVS__AUTH_SERVER, got_hello.nonce, ch.nonce, fh.host,
                    server->rank, server->job, ch.proof);
    kvs__wire_challenge_encode(&ch, body);
    assert_int_equal(kvs__wire_challenge_decode(body, 64, &got_ch, &e), 0);
    if (kvs__auth_check(&client->secret, KVS__AUTH_SERVER, client_nonce, got_ch.nonce,
                        client->rank, server->rank, client->job, got_ch.proof, &e) != 0) {
        assert_non_null(strstr(e.msg, "server host's proof is wrong"));
        return 1;
    }

    /* client -> server: its proof */
    kvs__auth_proof(&client->secret, KVS__AUTH_CLIENT, client_nonce, got_ch.nonce,
                    client->rank, server->rank, client->job, pr.proof);
    kvs__wire_proof_encode(&pr, body);
    assert_int_equal(kvs__wire_proof_decode(body, 32, &got_pr, &e), 0);
    if (kvs__auth_check(&server->secret, KVS__AUTH_CLIENT, got_hello.nonce, ch.nonce, fh.host,
                        server->rank, server->job, got_pr.proof, &e) != 0) {
        assert_non_null(strstr(e.msg, "client host's proof is wrong"));
        return 2;
    }
    return 0;
}

static void test_handshake(void **state)
{
    struct host server = host_with("the job's secret, 32 bytes long\n", 0, "job-a");
    struct host client = host_with("the job's secret, 32 bytes long\n", 1, "job-a");
    struct host stranger = host_with("another secret of 32 bytes long\n", 1, "job-a");
    struct host other_job = host_with("the job's secret, 32 bytes long\n", 1, "job-b");

    (void)state;
    assert_int_equal(handshake(&client, &server), 0);
    assert_int_equal(handshake(&stranger, &server), 1);    /* the client sees it first */
    assert_int_equal(handshake(&other_job, &server), 1);
}

/* A proof is good for one side, one pair of nonces, one pair of hosts and
 * one job: a recorded proof cannot be replayed or reflected. */
static void test_proofs_bind_everything(void **state)
{
    struct host h = host_with("0123456789abcdef0123456789abcdef", 0, "job-a");
    unsigned char cn[KVS__NONCE_BYTES], sn[KVS__NONCE_BYTES], proof[KVS__PROOF_BYTES];
    struct kvs__err e = { 0, "" };

    (void)state;
    assert_int_equal(kvs__auth_nonce(cn), 0);
    assert_int_equal(kvs__auth_nonce(sn), 0);
    assert_memory_not_equal(cn, sn, sizeof cn);
    kvs__auth_proof(&h.secret, KVS__AUTH_CLIENT, cn, sn, 1, 0, "job-a", proof);
    assert_int_equal(kvs__auth_check(&h.secret, KVS__AUTH_CLIENT, cn, sn, 1, 0, "job-a",
                                     proof, &e), 0);
    assert_int_equal(kvs__auth_check(&h.secret, KVS__AUTH_SERVER, cn, sn, 1, 0, "job-a",
                                     proof, &e), KVS_EPROTO);     /* reflected */
    assert_int_equal(kvs__auth_check(&h.secret, KVS__AUTH_CLIENT, sn, cn, 1, 0, "job-a",
                                     proof, &e), KVS_EPROTO);     /* nonces swapped */
    assert_int_equal(kvs__auth_check(&h.secret, KVS__AUTH_CLIENT, cn, sn, 2, 0, "job-a",
                                     proof, &e), KVS_EPROTO);     /* another host */
    assert_int_equal(kvs__auth_check(&h.secret, KVS__AUTH_CLIENT, cn, sn, 1, 0, "job-b",
                                     proof, &e), KVS_EPROTO);     /* another job */
    sn[0] ^= 1;
    assert_int_equal(kvs__auth_check(&h.secret, KVS__AUTH_CLIENT, cn, sn, 1, 0, "job-a",
                                     proof, &e), KVS_EPROTO);     /* another handshake */
    kvs__secret_wipe(&h.secret);
}

/* ---- the per-job secret ------------------------------------------------ */

static void job_fails(const char *coord, int code, const char *says)
{
    struct kvs__secret s;
    struct kvs__err e = { 0, "" };
    char path[4096];
    int made = -1;

    assert_int_equal(kvs__secret_job("job-a", coord, &s, path, sizeof path, &made, &e), code);
    if (!strstr(e.msg, says))
        fail_msg("detail \"%s\" does not say \"%s\"", e.msg, says);
    assert_int_equal(made, 0);
}

/* Writes text to path, mode 0600. */
static void put(const char *path, const char *text)
{
    FILE *f;

    unlink(path);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    assert_int_equal(chmod(path, 0600), 0);
}

static void test_job_secret(void **state)
{
    struct kvs__secret a, b, c;
    struct kvs__err e = { 0, "" };
    char rt[300], kd[320], path[4096], again[4096], want[400], link[4096];
    struct stat st;
    int made = -1, n = 0;
    FILE *ls;

    (void)state;
    snprintf(rt, sizeof rt, "%s/rt", dir);
    snprintf(kd, sizeof kd, "%s/kvs", rt);
    assert_int_equal(mkdir(rt, 0700), 0);
    assert_int_equal(setenv("XDG_RUNTIME_DIR", rt, 1), 0);

    /* The first host makes it, 0600 and whole; the next reads the same. */
    assert_int_equal(kvs__secret_job("job-a", "127.0.0.1:5000", &a, path, sizeof path, &made,
                                     &e), 0);
    assert_int_equal(made, 1);
    snprintf(want, sizeof want, "%s/job-a@127.0.0.1:5000.secret", kd);
    assert_string_equal(path, want);
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal(st.st_mode & 07777, 0600);
    assert_int_equal(st.st_uid, geteuid());
    assert_int_equal(st.st_size, KVS__JOB_SECRET_BYTES + 1);
    assert_int_equal(lstat(kd, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0700);
    assert_int_equal(kvs__secret_job("job-a", "127.0.0.1:5000", &b, again, sizeof again, &made,
                                     &e), 0);
    assert_int_equal(made, 0);
    assert_string_equal(again, path);
    assert_memory_equal(a.key, b.key, sizeof a.key);
    /* The same key as the file given with --secret-file. */
    assert_int_equal(kvs__secret_load(path, &b, &e), 0);
    assert_memory_equal(a.key, b.key, sizeof a.key);
    /* Another coordinator, another job: another secret. */
    assert_int_equal(kvs__secret_job("job-a", "[::1]:5000", &b, again, sizeof again, &made, &e),
                     0);
    assert_int_equal(made, 1);
    assert_memory_not_equal(a.key, b.key, sizeof a.key);
    assert_int_equal(kvs__secret_job("job-b", "127.0.0.1:5000", &b, again, sizeof again, &made,
                                     &e), 0);
    assert_memory_not_equal(a.key, b.key, sizeof a.key);
    /* No temporary file is left: the directory holds the three secrets. */
    snprintf(want, sizeof want, "ls -A '%s'", kd);
    ls = popen(want, "r");
    assert_non_null(ls);
    while (fgets(link, sizeof link, ls)) {
        assert_non_null(strstr(link, ".secret\n"));
        n++;
    }
    pclose(ls);
    assert_int_equal(n, 3);

    /* Anything loose is refused, with the fix, and left as it is. */
    assert_int_equal(chmod(path, 0644), 0);
    job_fails("127.0.0.1:5000", KVS_EBADARG, "has mode 0644, not 0600: another user may read it");
    job_fails("127.0.0.1:5000", KVS_EBADARG, "remove it (rm ");
    assert_int_equal(chmod(path, 0400), 0);
    job_fails("127.0.0.1:5000", KVS_EBADARG, "has mode 0400, not 0600");
    assert_int_equal(chmod(path, 0600), 0);
    assert_int_equal(kvs__secret_job("job-a", "127.0.0.1:5000", &b, again, sizeof again, &made,
                                     &e), 0);
    assert_memory_equal(a.key, b.key, sizeof a.key);
    if (geteuid() == 0) {
        assert_int_equal(chown(path, 65534, 65534), 0);
        job_fails("127.0.0.1:5000", KVS_EBADARG, "is owned by uid 65534, not 0");
        assert_int_equal(chown(path, 0, 0), 0);
    }
    put(path, "0123456789\n");
    job_fails("127.0.0.1:5000", KVS_EBADARG, "holds 11 bytes, not 65");
    put(path, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdeZ\n");
    job_fails("127.0.0.1:5000", KVS_EBADARG, "holds byte 0x5a, not a hex digit");
    put(path, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef ");
    job_fails("127.0.0.1:5000", KVS_EBADARG, "does not end in a newline");
    unlink(path);
    snprintf(link, sizeof link, "%s/elsewhere", dir);
    put(link, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n");
    assert_int_equal(symlink(link, path), 0);
    job_fails("127.0.0.1:5000", KVS_EBADARG, "is a symbolic link");
    unlink(path);
    assert_int_equal(mkdir(path, 0700), 0);
    job_fails("127.0.0.1:5000", KVS_EBADARG, "is not a regular file");
    rmdir(path);
    job_fails("10.0.0.1/8:5000", KVS_EBADARG, "holds byte 0x2f");
    job_fails("", KVS_EBADARG, "no coordinator");

    /* The directory: another user's or open to others is refused. */
    assert_int_equal(chmod(kd, 0755), 0);
    job_fails("127.0.0.1:5000", -EPERM, "has mode 0755: group or others have access");
    assert_int_equal(chmod(kd, 0700), 0);
    if (geteuid() == 0) {
        assert_int_equal(chown(kd, 65534, 65534), 0);
        job_fails("127.0.0.1:5000", -EPERM, "is owned by uid 65534, not 0");
        assert_int_equal(chown(kd, 0, 0), 0);
    }
    snprintf(link, sizeof link, "%s/kvs-aside", rt);
    assert_int_equal(rename(kd, link), 0);
    assert_int_equal(symlink(link, kd), 0);
    job_fails("127.0.0.1:5000", -EPERM, "is a symbolic link");
    assert_int_equal(unlink(kd), 0);
    assert_int_equal(rename(link, kd), 0);

    /* Removed only while it holds the secret read. */
    assert_int_equal(kvs__secret_job("job-c", "127.0.0.1:5000", &a, path, sizeof path, &made,
                                     &e), 0);
    assert_int_equal(made, 1);
    memcpy(&c, &a, sizeof c);
    c.key[0] ^= 1;
    kvs__secret_job_remove(path, &c);
    assert_int_equal(lstat(path, &st), 0);
    kvs__secret_job_remove(path, &a);
    assert_int_equal(lstat(path, &st), -1);
    assert_int_equal(errno, ENOENT);
    kvs__secret_wipe(&a);
    unsetenv("XDG_RUNTIME_DIR");
}

/* Hosts that come at once: one makes the secret, each reads the same. */
static void test_job_secret_race(void **state)
{
    enum { HOSTS = 8 };
    struct kvs__secret k[HOSTS];
    char rt[300];
    int fds[HOSTS][2], made = 0;

    (void)state;
    snprintf(rt, sizeof rt, "%s/race", dir);
    assert_int_equal(mkdir(rt, 0700), 0);
    assert_int_equal(setenv("XDG_RUNTIME_DIR", rt, 1), 0);
    for (int i = 0; i < HOSTS; i++) {
        assert_int_equal(pipe(fds[i]), 0);
        if (fork() == 0) {
            struct kvs__secret s;
            struct kvs__err e = { 0, "" };
            char path[4096];
            unsigned char out[1 + sizeof s.key];
            int m = 0;

            memset(out, 0xff, sizeof out);
            if (kvs__secret_job("race", "127.0.0.1:7000", &s, path, sizeof path, &m, &e) == 0) {
                out[0] = (unsigned char)m;
                memcpy(out + 1, s.key, sizeof s.key);
            } else
                fprintf(stderr, "# %s\n", e.msg);
            _exit(write(fds[i][1], out, sizeof out) == (ssize_t)sizeof out ? 0 : 1);
        }
        close(fds[i][1]);
    }
    for (int i = 0; i < HOSTS; i++) {
        unsigned char in[1 + sizeof k[i].key];
        int status;

        assert_int_equal(read(fds[i][0], in, sizeof in), (ssize_t)sizeof in);
        close(fds[i][0]);
        assert_true(in[0] <= 1);
        made += in[0];
        memcpy(k[i].key, in + 1, sizeof k[i].key);
        assert_memory_equal(k[i].key, k[0].key, sizeof k[0].key);
        assert_true(wait(&status) > 0);
        assert_int_equal(status, 0);
    }
    assert_int_equal(made, 1);
    unsetenv("XDG_RUNTIME_DIR");
}

static int setup(void **state)
{
    (void)state;
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    char cmd[300];

    (void)state;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_secret_file_rules),
        cmocka_unit_test(test_handshake),
        cmocka_unit_test(test_proofs_bind_everything),
        cmocka_unit_test(test_job_secret),
        cmocka_unit_test(test_job_secret_race),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
