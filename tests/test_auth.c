/*
 * test_auth.c - the job's secret file and the proofs of the handshake
 * between hosts (daemon/net/auth.c), and the whole handshake through the
 * frames of proto/wire_handshake.c: hosts with the same secret accept each other; a wrong
 * secret, a replayed or reflected proof, another job or another pair of
 * hosts is refused.
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
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
