/*
 * nccl.c - the NCCL half of the stand-in: communicators and the
 * collectives libkvs uses (all-reduce, broadcast, reduce), computed on the
 * host over the device memory of cudamem.c.
 *
 * A clique is the set of communicators made together: by one
 * ncclCommInitAll, or by the ncclCommInitRank calls sharing a unique id.
 * InitRank works among the threads of one process only: a unique id used
 * in another process (after fork, say) fails with ncclInvalidUsage rather
 * than waiting forever for ranks that cannot arrive.
 *
 * Each rank's nth collective is matched with every other rank's nth. Once
 * all ranks have launched it, it is checked and queued on every rank's
 * stream (cudart.c): it runs when one of them is synchronised with, after
 * the work queued before it on all of them, as a GPU's collective kernels
 * wait for each other. A call outside a group launches at once and
 * returns when every rank has launched, so ranks on separate threads meet
 * there. Inside ncclGroupStart/End a call only posts; ncclGroupEnd
 * launches the group's collectives and returns when each is queued or
 * refused.
 * Communicators from ncclCommInitAll must be driven inside a group (one
 * thread cannot otherwise call every rank): a call outside one fails with
 * ncclInvalidUsage, and a group that leaves one of their collectives short
 * of a rank fails with ncclInvalidUsage and leaves the clique unusable.
 *
 * Supported: ncclSum, ncclProd, ncclMax, ncclMin over int8, uint8, int32,
 * uint32, int64, uint64, float16, bfloat16, float32, float64. Half types
 * are combined in float32 in rank order and rounded once to nearest even,
 * with libkvs's own conversions, as a host kernel does; integers wrap.
 * ncclAvg, user ops and the float8 types fail with ncclInvalidArgument.
 * Buffers must be device memory of the communicator's device, the stream
 * one of its device (or a default stream: the device's legacy stream).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/array.h"
#include "standin.h"

#define UID_MAGIC 0x4b56534eu /* "KVSN" */

struct unique_id {
    uint32_t magic;
    int32_t pid;
    uint64_t serial;
};
_Static_assert(sizeof(struct unique_id) <= sizeof(ncclUniqueId), "unique id too small");

enum kind { ALLREDUCE, BROADCAST, REDUCE };

/* One rank's side of a collective. */
struct args {
    enum kind kind;
    const void *send;
    void *recv;
    size_t count;
    ncclDataType_t dtype;
    ncclRedOp_t op;
    int root;
    cudaStream_t stream;
    int device;                        /* the communicator's */
};

/* A collective queued on its ranks' streams: the first rank's stream to
 * reach it runs it; the last frees it (under cudart.c's queue lock). */
struct job {
    int nranks, left, ran;
    struct args args[];                /* by rank */
};

/* The nth collective of a clique, from posting to the last rank seeing it done. */
struct coll {
    struct coll *next;
    uint64_t seq;
    int posted, launched, seen, done;
    ncclResult_t result;
    struct args args[]; /* by rank */
};

struct clique {
    struct clique *next; /* in `joining` until every rank has arrived */
    int nranks, joined, alive;
    int from_init_all, broken;
    struct unique_id id;
    struct coll *colls;
    unsigned char taken[]; /* by rank */
};

struct ncclComm {
    struct clique *clique;
    int rank, device;
    uint64_t posted;
};

/* A collective this thread posted inside the current group. */
struct pending {
    struct ncclComm *comm;
    struct coll *coll;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static struct clique *joining; /* under lock */
static uint64_t next_serial;   /* under lock */

static _Thread_local int group_depth;
static _Thread_local struct pending *group;
static _Thread_local size_t group_len, group_cap;
static _Thread_local char last_error[256];

static ncclResult_t fail(ncclResult_t result, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static ncclResult_t fail(ncclResult_t result, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return result;
}

const char *ncclGetErrorString(ncclResult_t result)
{
    switch (result) {
    case ncclSuccess:
        return "no error";
    case ncclUnhandledCudaError:
        return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
        return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
        return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
        return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
        return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
        return "remote process exited or there was a network error";
    case ncclInProgress:
        return "NCCL operation in progress";
    default:
        return "unknown result code";
    }
}

const char *ncclGetLastError(ncclComm_t comm)
{
    return last_error;
}

ncclResult_t ncclGetVersion(int *version)
{
    if (!version)
        return fail(ncclInvalidArgument, "ncclGetVersion: version is NULL");
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

/* ---- element arithmetic --------------------------------------------------- */

/* A value being combined: float for float32 and the half types, double,
 * or 64-bit integers (sum and product on .u serve both signednesses). */
union acc {
    float f;
    double d;
    int64_t i;
    uint64_t u;
};

static size_t dtype_size(ncclDataType_t dtype)
{
    switch (dtype) {
    case ncclInt8:
    case ncclUint8:
        return 1;
    case ncclFloat16:
    case ncclBfloat16:
        return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
        return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
        return 8;
    default:
        return 0;
    }
}

static union acc load(ncclDataType_t dtype, const void *base, size_t i)
{
    const char *p = (const char *)base + i * dtype_size(dtype);
    union acc v = {.u = 0};
    int8_t i8;
    int32_t i32;
    uint16_t h;
    uint32_t u32;

    switch (dtype) {
    case ncclInt8:
        memcpy(&i8, p, 1);
        v.i = i8;
        break;
    case ncclUint8:
        memcpy(&v.u, p, 1); /* little-endian: the low byte */
        break;
    case ncclInt32:
        memcpy(&i32, p, 4);
        v.i = i32;
        break;
    case ncclUint32:
        memcpy(&u32, p, 4);
        v.u = u32;
        break;
    case ncclFloat16:
    case ncclBfloat16:
        memcpy(&h, p, 2);
        v.f = dtype == ncclFloat16 ? kvs__f16_to_f32(h) : kvs__bf16_to_f32(h);
        break;
    default: /* float32 and the 8-byte types: the bits as they are */
        memcpy(&v, p, dtype_size(dtype));
        break;
    }
    return v;
}

static void store(ncclDataType_t dtype, void *base, size_t i, union acc v)
{
    char *p = (char *)base + i * dtype_size(dtype);
    uint16_t h;

    if (dtype == ncclFloat16 || dtype == ncclBfloat16) {
        h = dtype == ncclFloat16 ? kvs__f32_to_f16(v.f) : kvs__f32_to_bf16(v.f);
        memcpy(p, &h, 2);
    } else {
        memcpy(p, &v, dtype_size(dtype)); /* little-endian: integers truncate */
    }
}

#define COMBINE(field, a, b, op)                                                          \
    do {                                                                                  \
        if ((op) == ncclMax)                                                              \
            (a).field = (b).field > (a).field ? (b).field : (a).field;                    \
        else if ((op) == ncclMin)                                                         \
            (a).field = (b).field < (a).field ? (b).field : (a).field;                    \
    } while (0)

static union acc combine(ncclDataType_t dtype, ncclRedOp_t op, union acc a, union acc b)
{
    switch (dtype) {
    case ncclFloat16:
    case ncclBfloat16:
    case ncclFloat32:
        if (op == ncclSum)
            a.f += b.f;
        else if (op == ncclProd)
            a.f *= b.f;
        COMBINE(f, a, b, op);
        break;
    case ncclFloat64:
        if (op == ncclSum)
            a.d += b.d;
        else if (op == ncclProd)
            a.d *= b.d;
        COMBINE(d, a, b, op);
        break;
    default:
        if (op == ncclSum)
            a.u += b.u;
        else if (op == ncclProd)
            a.u *= b.u;
        else if (dtype == ncclInt8 || dtype == ncclInt32 || dtype == ncclInt64)
            COMBINE(i, a, b, op);
        else
            COMBINE(u, a, b, op);
        break;
    }
    return a;
}

/* ---- running a collective --------------------------------------------------- */

/* Combines element i over the ranks, in rank order. */
static union acc reduce_element(const struct args *args, int nranks, size_t i)
{
    union acc v = load(args[0].dtype, args[0].send, i);

    for (int r = 1; r < nranks; r++)
        v = combine(args[0].dtype, args[0].op, v, load(args[0].dtype, args[r].send, i));
    return v;
}

static int args_match(const struct args *a, const struct args *b)
{
    return a->kind == b->kind && a->count == b->count && a->dtype == b->dtype &&
           (a->kind == BROADCAST || a->op == b->op) && (a->kind == ALLREDUCE || a->root == b->root);
}

/* Element by element, every rank's input read before any output is
 * written, so in-place collectives need no copy. The buffers are reached
 * through the runtime's own mapping of device memory; those a rank's part
 * does not touch stay NULL. */
static void compute(struct job *j)
{
    const struct args *a = &j->args[0];
    size_t bytes = a->count * dtype_size(a->dtype);
    union acc v;

    if (bytes == 0)
        return;
    for (int r = 0; r < j->nranks; r++) {
        struct args *ar = &j->args[r];
        int root = r == a->root;

        ar->send = a->kind == BROADCAST && !root ? NULL : kvs_standin_host(ar->send, bytes);
        ar->recv = a->kind == REDUCE && !root ? NULL : kvs_standin_host(ar->recv, bytes);
    }
    for (size_t i = 0; i < a->count && a->kind != BROADCAST; i++) {
        v = reduce_element(j->args, j->nranks, i);
        for (int r = 0; r < j->nranks; r++)
            if (a->kind == ALLREDUCE || r == a->root)
                store(a->dtype, j->args[r].recv, i, v);
    }
    for (int r = 0; r < j->nranks && a->kind == BROADCAST; r++)
        if (j->args[r].recv != j->args[a->root].send)
            memcpy(j->args[r].recv, j->args[a->root].send, bytes);
}

static void job_run(void *arg)
{
    struct job *j = arg;

    if (!j->ran)
        compute(j);
    j->ran = 1;
    if (--j->left == 0)
        free(j);
}

/* Checks that the ranks' calls agree, and queues the collective on every
 * rank's stream. */
static void queue(struct coll *c, int nranks)
{
    cudaStream_t streams[nranks];
    int devices[nranks];
    struct job *j;

    for (int r = 1; r < nranks; r++) {
        if (!args_match(&c->args[0], &c->args[r])) {
            c->result = fail(ncclInvalidUsage,
                             "collective %llu: rank %d's call differs from rank 0's",
                             (unsigned long long)c->seq, r);
            return;
        }
    }
    j = malloc(sizeof *j + (size_t)nranks * sizeof j->args[0]);
    if (!j) {
        c->result = fail(ncclSystemError, "out of memory");
        return;
    }
    j->nranks = j->left = nranks;
    j->ran = 0;
    for (int r = 0; r < nranks; r++) {
        j->args[r] = c->args[r];
        streams[r] = c->args[r].stream;
        devices[r] = c->args[r].device;
    }
    if (standin__enqueue_all(nranks, streams, devices, job_run, j) != cudaSuccess) {
        free(j);
        c->result = fail(ncclUnhandledCudaError, "collective %llu: cannot be queued",
                         (unsigned long long)c->seq);
        return;
    }
    c->result = ncclSuccess;
}

/* The clique's collective number seq, made if no rank has posted it yet. */
static struct coll *coll_locked(struct clique *q, uint64_t seq)
{
    struct coll **link, *c;

    for (link = &q->colls; *link; link = &(*link)->next)
        if ((*link)->seq == seq)
            return *link;
    c = calloc(1, sizeof *c + (size_t)q->nranks * sizeof c->args[0]);
    if (c) {
        c->seq = seq;
        *link = c;
    }
    return c;
}

static void launch_locked(struct clique *q, struct coll *c)
{
    if (++c->launched == q->nranks) {
        queue(c, q->nranks);
        c->done = 1;
        pthread_cond_broadcast(&changed);
    }
}

/* This rank is done with c; the last rank to be done frees it. */
static void retire_locked(struct clique *q, struct coll *c)
{
    struct coll **link;

    if (++c->seen < q->nranks)
        return;
    for (link = &q->colls; *link != c; link = &(*link)->next)
        ;
    *link = c->next;
    free(c);
}

static ncclResult_t check_buffer(const struct ncclComm *comm, const void *ptr, size_t bytes,
                                 const char *what)
{
    int device;

    if (bytes == 0)
        return ncclSuccess;
    if (!standin__device_range(ptr, bytes, &device))
        return fail(ncclInvalidArgument, "%s %p is not %zu bytes of device memory", what, ptr,
                    bytes);
    if (device != comm->device)
        return fail(ncclInvalidArgument, "%s is on device %d, the communicator on device %d",
                    what, device, comm->device);
    return ncclSuccess;
}

static ncclResult_t check_args(const struct ncclComm *comm, const struct args *a)
{
    size_t size = dtype_size(a->dtype), bytes;
    int root_here = comm && a->root == comm->rank;
    ncclResult_t res;

    if (!comm)
        return fail(ncclInvalidArgument, "communicator is NULL");
    if (size == 0)
        return fail(ncclInvalidArgument, "data type %d is not supported", (int)a->dtype);
    if (a->kind != BROADCAST && (a->op < ncclSum || a->op > ncclMin))
        return fail(ncclInvalidArgument, "reduction operation %d is not supported", (int)a->op);
    if (a->kind != ALLREDUCE && (a->root < 0 || a->root >= comm->clique->nranks))
        return fail(ncclInvalidArgument, "root %d is not a rank", a->root);
    if (__builtin_mul_overflow(a->count, size, &bytes))
        return fail(ncclInvalidArgument, "count %zu is too large", a->count);
    if (standin__check_device(comm->device) != cudaSuccess)
        return fail(ncclUnhandledCudaError, "device %d is unavailable", comm->device);
    if (standin__check_stream(a->stream, comm->device) != cudaSuccess)
        return fail(ncclInvalidArgument, "the stream is not one of device %d", comm->device);
    res = check_buffer(comm, a->send, a->kind == BROADCAST && !root_here ? 0 : bytes, "sendbuff");
    if (res == ncclSuccess)
        res = check_buffer(comm, a->recv, a->kind == REDUCE && !root_here ? 0 : bytes, "recvbuff");
    return res;
}

static ncclResult_t group_add(struct ncclComm *comm, struct coll *c)
{
    struct pending *grown;

    if (group_len == group_cap) {
        grown = realloc(group, (group_cap ? 2 * group_cap : 8) * sizeof *group);
        if (!grown)
            return fail(ncclSystemError, "out of memory");
        group = grown;
        group_cap = group_cap ? 2 * group_cap : 8;
    }
    group[group_len++] = (struct pending){comm, c};
    return ncclSuccess;
}

static ncclResult_t post(struct ncclComm *comm, const struct args *a)
{
    ncclResult_t res = check_args(comm, a);
    struct clique *q;
    struct coll *c;

    if (res != ncclSuccess)
        return res;
    q = comm->clique;
    if (q->from_init_all && group_depth == 0)
        return fail(ncclInvalidUsage, "communicators from ncclCommInitAll need ncclGroupStart");
    pthread_mutex_lock(&lock);
    c = q->broken ? NULL : coll_locked(q, comm->posted);
    if (!c) {
        pthread_mutex_unlock(&lock);
        return q->broken ? fail(ncclInvalidUsage, "an earlier group left this clique unusable")
                         : fail(ncclSystemError, "out of memory");
    }
    res = group_depth ? group_add(comm, c) : ncclSuccess;
    if (res == ncclSuccess) {
        comm->posted++;
        c->args[comm->rank] = *a;
        c->posted++;
    }
    if (res == ncclSuccess && group_depth == 0) {
        launch_locked(q, c);
        while (!c->done)
            pthread_cond_wait(&changed, &lock);
        res = c->result;
        retire_locked(q, c);
    }
    pthread_mutex_unlock(&lock);
    return res;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream)
{
    struct args a = {ALLREDUCE, sendbuff, recvbuff, count, datatype, op, 0,
                     stream, comm ? comm->device : 0};

    return post(comm, &a);
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
{
    struct args a = {BROADCAST, sendbuff, recvbuff, count, datatype, ncclSum, root,
                     stream, comm ? comm->device : 0};

    return post(comm, &a);
}

ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                        ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                        cudaStream_t stream)
{
    struct args a = {REDUCE, sendbuff, recvbuff, count, datatype, op, root,
                     stream, comm ? comm->device : 0};

    return post(comm, &a);
}

ncclResult_t ncclGroupStart(void)
{
    group_depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
    ncclResult_t res = ncclSuccess;
    struct clique *q;
    struct coll *c;

    if (group_depth == 0)
        return fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    if (--group_depth > 0)
        return ncclSuccess;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < group_len; i++)
        launch_locked(group[i].comm->clique, group[i].coll);
    for (size_t i = 0; i < group_len; i++) {
        q = group[i].comm->clique;
        c = group[i].coll;
        if (!c->done && q->from_init_all) {
            q->broken = 1;
            res = fail(ncclInvalidUsage, "collective %llu: not every rank was called in the group",
                       (unsigned long long)c->seq);
            continue;
        }
        while (!c->done)
            pthread_cond_wait(&changed, &lock);
        if (res == ncclSuccess)
            res = c->result;
        retire_locked(q, c);
    }
    pthread_mutex_unlock(&lock);
    group_len = 0;
    return res;
}

/* ---- communicators ---------------------------------------------------------- */

static struct clique *clique_new(int nranks)
{
    return calloc(1, sizeof(struct clique) + (size_t)nranks);
}

static struct ncclComm *comm_new(struct clique *q, int rank, int device)
{
    struct ncclComm *comm = calloc(1, sizeof *comm);

    if (comm) {
        comm->clique = q;
        comm->rank = rank;
        comm->device = device;
        q->taken[rank] = 1;
        q->alive++;
    }
    return comm;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *unique_id)
{
    struct unique_id id = {.magic = UID_MAGIC, .pid = getpid()};

    if (!unique_id)
        return fail(ncclInvalidArgument, "uniqueId is NULL");
    pthread_mutex_lock(&lock);
    id.serial = next_serial++;
    pthread_mutex_unlock(&lock);
    memset(unique_id, 0, sizeof *unique_id);
    memcpy(unique_id->internal, &id, sizeof id);
    return ncclSuccess;
}

ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist)
{
    struct clique *q;
    int device;

    if (!comms || ndev < 1)
        return fail(ncclInvalidArgument, "ncclCommInitAll: no communicators asked for");
    for (int r = 0; r < ndev; r++) {
        device = devlist ? devlist[r] : r;
        if (standin__check_device(device) != cudaSuccess)
            return fail(ncclUnhandledCudaError, "device %d is unavailable", device);
    }
    q = clique_new(ndev);
    if (!q)
        return fail(ncclSystemError, "out of memory");
    q->nranks = q->joined = ndev;
    q->from_init_all = 1;
    for (int r = 0; r < ndev; r++) {
        comms[r] = comm_new(q, r, devlist ? devlist[r] : r);
        if (!comms[r]) {
            while (r-- > 0)
                free(comms[r]);
            free(q);
            return fail(ncclSystemError, "out of memory");
        }
    }
    return ncclSuccess;
}

/* The clique still gathering for this id, made if this rank is the first. */
static struct clique *rendezvous_locked(const struct unique_id *id, int nranks)
{
    struct clique *q;

    for (q = joining; q; q = q->next)
        if (q->id.serial == id->serial)
            return q;
    q = clique_new(nranks);
    if (q) {
        q->nranks = nranks;
        q->id = *id;
        q->next = joining;
        joining = q;
    }
    return q;
}

static void unlink_joining_locked(struct clique *q)
{
    struct clique **link;

    for (link = &joining; *link != q; link = &(*link)->next)
        ;
    *link = q->next;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId comm_id, int rank)
{
    struct unique_id id;
    struct clique *q;
    ncclResult_t res = ncclSuccess;
    int device;

    memcpy(&id, comm_id.internal, sizeof id);
    if (!comm || nranks < 1 || rank < 0 || rank >= nranks || id.magic != UID_MAGIC)
        return fail(ncclInvalidArgument, "ncclCommInitRank: bad arguments or unique id");
    if (id.pid != getpid())
        return fail(ncclInvalidUsage, "the stand-in joins ranks of one process only");
    cudaGetDevice(&device);
    if (standin__check_device(device) != cudaSuccess)
        return fail(ncclUnhandledCudaError, "device %d is unavailable", device);
    pthread_mutex_lock(&lock);
    q = rendezvous_locked(&id, nranks);
    if (!q)
        res = fail(ncclSystemError, "out of memory");
    else if (q->nranks != nranks)
        res = fail(ncclInvalidArgument, "nranks %d, but an earlier rank said %d", nranks,
                   q->nranks);
    else if (q->taken[rank])
        res = fail(ncclInvalidUsage, "rank %d has already joined", rank);
    else if (!(*comm = comm_new(q, rank, device)))
        res = fail(ncclSystemError, "out of memory");
    if (res == ncclSuccess && ++q->joined == nranks) {
        unlink_joining_locked(q);
        pthread_cond_broadcast(&changed);
    }
    while (res == ncclSuccess && q->joined < nranks)
        pthread_cond_wait(&changed, &lock);
    pthread_mutex_unlock(&lock);
    return res;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    struct clique *q;
    struct coll *c;

    if (!comm)
        return ncclSuccess;
    q = comm->clique;
    pthread_mutex_lock(&lock);
    if (--q->alive == 0) {
        while ((c = q->colls)) {
            q->colls = c->next;
            free(c);
        }
        free(q);
    }
    pthread_mutex_unlock(&lock);
    free(comm);
    return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
    if (!comm || !count)
        return fail(ncclInvalidArgument, "ncclCommCount: NULL argument");
    *count = comm->clique->nranks;
    return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device)
{
    if (!comm || !device)
        return fail(ncclInvalidArgument, "ncclCommCuDevice: NULL argument");
    *device = comm->device;
    return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
    if (!comm || !rank)
        return fail(ncclInvalidArgument, "ncclCommUserRank: NULL argument");
    *rank = comm->rank;
    return ncclSuccess;
}
