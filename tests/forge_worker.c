/*
 * forge_worker.c - the worker of test_hosts_forged.sh: on host 0 of a job
 * whose host 1 is tests/forge_host, it inits key 3 (1,024 float32, 4,096
 * bytes) and key 5 (16,384 float32), then pushes key 3 and pulls it. The
 * round can never close (the forged host sends no sum): the push or the
 * pull must fail once kvsd refuses the forged frame and fails the job.
 * Prints the failure and exits 0 when that is how it ended, 1 otherwise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvs.h"

static float v3[1024], v5[16384];

int main(void)
{
    kvs_key_t keys[2] = { KVS_INT_KEY(3), KVS_INT_KEY(5) };
    kvs_array_t vals[2] = {
        { .data = v3, .dtype = KVS_FLOAT32, .ndim = 1, .shape = { 1024 }, .device = KVS_HOST },
        { .data = v5, .dtype = KVS_FLOAT32, .ndim = 1, .shape = { 16384 },
          .device = KVS_HOST },
    };
    kvs_t *kv;
    int rc;

    if ((rc = kvs_create("dist_sync", &kv)) != 0) {
        fprintf(stderr, "forge_worker: kvs_create: %s\n", kvs_strerror(rc));
        return 1;
    }
    if ((rc = kvs_init(kv, 2, keys, vals)) != 0) {
        printf("forge_worker: init failed: %s: %s\n", kvs_err_name(rc), kvs_last_error(kv));
        kvs_close(kv);
        return 0;
    }
    printf("forge_worker: keys 3 and 5 inited\n");
    fflush(stdout);
    if ((rc = kvs_push(kv, 1, keys, vals, 0)) == 0)
        rc = kvs_pull(kv, 1, keys, vals, 0);
    if (rc == 0) {
        printf("forge_worker: a round closed without host 1's sum\n");
        kvs_close(kv);
        return 1;
    }
    printf("forge_worker: the job failed: %s: %s\n", kvs_err_name(rc), kvs_last_error(kv));
    kvs_close(kv);
    return 0;
}
