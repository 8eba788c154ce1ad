/*
 * nccl_reduce.c - NCCL for the "nccl" store type (nccl_reduce.h). Like
 * cuda.c, built without the library's headers: the entry points are
 * declared by their documented signatures (ncclResult_t and
 * ncclDataType_t are enums, passed as ints; communicators and streams are
 * opaque pointers).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "device/mem.h"
#include "store/nccl_reduce.h"

enum { NCCL_SUM = 0 };

static struct {
    pthread_once_t once;
    int ok;
    struct kvs__err why;
    int (*comm_init_all)(void **comms, int ndev, const int *devlist);
    int (*comm_destroy)(void *comm);
    int (*reduce)(const void *send, void *recv, size_t count, int dtype, int op, int root,
                  void *comm, void *stream);
    int (*group_start)(void);
    int (*group_end)(void);
    const char *(*error_string)(int res);
} lib = { .once = PTHREAD_ONCE_INIT };

static void load(void)
{
    const char *path = getenv("KVS_NCCL");
    static const char *const names[] = { "ncclCommInitAll", "ncclCommDestroy", "ncclReduce",
                                         "ncclGroupStart", "ncclGroupEnd",
                                         "ncclGetErrorString" };
    void *fn[6];
    void *h;

    if (!path || !*path)
        path = KVS__NCCL_DEFAULT;
    if (!(h = dlopen(path, RTLD_NOW | RTLD_LOCAL))) {
        kvs__fail(&lib.why, KVS_EDEVICE, "libnccl not found: %s cannot be loaded (%s)", path,
                  dlerror());
        return;
    }
    for (int i = 0; i < 6; i++) {
        if (!(fn[i] = dlsym(h, names[i]))) {
            kvs__fail(&lib.why, KVS_EDEVICE, "%s is not NCCL: it has no %s", path, names[i]);
            dlclose(h);
            return;
        }
    }
    *(void **)&lib.comm_init_all = fn[0];
    *(void **)&lib.comm_destroy = fn[1];
    *(void **)&lib.reduce = fn[2];
    *(void **)&lib.group_start = fn[3];
    *(void **)&lib.group_end = fn[4];
    *(void **)&lib.error_string = fn[5];
    lib.ok = 1;
}

/* NCCL's data type for a kvs dtype. */
static int nccl_dtype(kvs_dtype_t dt)
{
    static const int map[] = {
        [KVS_FLOAT32] = 7, [KVS_FLOAT64] = 8, [KVS_FLOAT16] = 6, [KVS_BFLOAT16] = 9,
        [KVS_INT32] = 2, [KVS_INT64] = 4, [KVS_UINT8] = 1,
    };

    return map[dt];
}

/* The communicators of one set of devices, rank r on the set's rth
 * device in ascending order. */
struct clique {
    uint64_t devices;                  /* bit i: CUDA device i */
    int n;
    void *comm[KVS__MAX_DEVICES];
};

struct kvs__nccl {
    struct clique *cliques;
    int n, cap;
};

int kvs__nccl_new(struct kvs__nccl **out, struct kvs__err *e)
{
    if (!(*out = calloc(1, sizeof **out)))
        return kvs__fail(e, -ENOMEM, "out of memory");
    return 0;
}

void kvs__nccl_free(struct kvs__nccl *nc)
{
    if (!nc)
        return;
    for (int i = 0; i < nc->n; i++)
        for (int r = 0; r < nc->cliques[i].n; r++)
            lib.comm_destroy(nc->cliques[i].comm[r]);
    free(nc->cliques);
    free(nc);
}

/* The clique of the devices in mask, made if it is not yet. */
static int clique_of(struct kvs__nccl *nc, uint64_t mask, struct clique **out,
                     struct kvs__err *e)
{
    int devlist[KVS__MAX_DEVICES], n = 0, rc;
    struct clique *q;

    for (int i = 0; i < nc->n; i++) {
        if (nc->cliques[i].devices == mask) {
            *out = &nc->cliques[i];
            return 0;
        }
    }
    if (nc->n == nc->cap) {
        int cap = nc->cap ? 2 * nc->cap : 4;
        struct clique *grown = realloc(nc->cliques, sizeof *grown * (size_t)cap);

        if (!grown)
            return kvs__fail(e, -ENOMEM, "out of memory for NCCL communicators");
        nc->cliques = grown;
        nc->cap = cap;
    }
    for (uint64_t m = mask; m; m &= m - 1)
        devlist[n++] = __builtin_ctzll(m);
    q = &nc->cliques[nc->n];
    q->devices = mask;
    q->n = n;
    if ((rc = lib.comm_init_all(q->comm, n, devlist)) != 0)
        return kvs__fail(e, KVS_EDEVICE, "ncclCommInitAll over %d devices failed (%s)", n,
                         lib.error_string(rc));
    nc->n++;
    *out = q;
    return 0;
}

/* The rank of CUDA device dev in q. */
static int rank_of(const struct clique *q, int dev)
{
    return __builtin_popcountll(q->devices & (((uint64_t)1 << dev) - 1));
}

int kvs__nccl_reduce(void *ctx, const struct kvs__reduce_item *items, int m,
                     struct kvs__err *e)
{
    struct kvs__nccl *nc = ctx;
    struct clique **of;
    int rc = 0, grc;

    pthread_once(&lib.once, load);
    if (!lib.ok)
        return kvs__fail(e, lib.why.code, "%s", lib.why.msg);
    if (!(of = malloc(sizeof *of * (size_t)(m ? m : 1))))
        return kvs__fail(e, -ENOMEM, "out of memory for %d reductions", m);
    /* Communicators are made before the group: ncclCommInitAll is not a
     * call to group. */
    for (int i = 0; i < m && rc == 0; i++) {
        uint64_t mask = 0;

        for (int j = 0; j < items[i].k; j++)
            mask |= (uint64_t)1 << (items[i].dev[j] - 1);
        rc = clique_of(nc, mask, &of[i], e);
    }
    if (rc != 0)
        goto out;
    lib.group_start();
    for (int i = 0; i < m && rc == 0; i++) {
        const struct kvs__reduce_item *it = &items[i];
        int root = rank_of(of[i], it->home - 1);

        for (int j = 0; j < it->k && rc == 0; j++) {
            int r = rank_of(of[i], it->dev[j] - 1);
            void *stream;

            if ((rc = kvs__mem_stream(it->dev[j], &stream, e)) != 0)
                break;
            /* A rank other than the root receives nothing: its recvbuff is
             * not read, and its own sendbuff is a valid address of its device. */
            if ((rc = lib.reduce(it->in[j], r == root ? it->out : (void *)it->in[j], it->n,
                                 nccl_dtype(it->dtype), NCCL_SUM, root, of[i]->comm[r],
                                 stream)) != 0)
                rc = kvs__fail(e, KVS_EDEVICE, "ncclReduce on KVS_CUDA(%d) failed (%s)",
                               it->dev[j] - 1, lib.error_string(rc));
        }
    }
    /* The group ends even after a failure: NCCL needs the call. */
    if ((grc = lib.group_end()) != 0 && rc == 0)
        rc = kvs__fail(e, KVS_EDEVICE, "ncclGroupEnd failed (%s)", lib.error_string(grc));
out:
    free(of);
    return rc;
}
