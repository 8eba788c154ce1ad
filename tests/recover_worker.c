/*
 * recover_worker.c - a worker of test_recover_run.sh's jobs: it joins a
 * dist_sync job and calls kvs_barrier; the rank named by argv[1] stops
 * itself (SIGSTOP) before the barrier, so that the others wait on it.
 * Exits 0 when the barrier returned, 1 with a message when it failed.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include <kvs.h>

int main(int argc, char **argv)
{
    const char *rank = getenv("KVS_RANK");
    kvs_t *kv = NULL;
    int rc;

    if ((rc = kvs_create("dist_sync", &kv)) != 0) {
        fprintf(stderr, "recover_worker: kvs_create: %s: %s\n", kvs_strerror(rc),
                kvs_last_error(NULL));
        return 1;
    }
    if (argc > 1 && rank && atoi(rank) == atoi(argv[1]))
        raise(SIGSTOP);
    if ((rc = kvs_barrier(kv)) != 0) {
        fprintf(stderr, "recover_worker: kvs_barrier: %s: %s\n", kvs_strerror(rc),
                kvs_last_error(kv));
        kvs_close(kv);
        return 1;
    }
    kvs_close(kv);
    return 0;
}
