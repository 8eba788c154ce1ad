/*
 * kvs.h - the public interface of kvs, a parameter store for data-parallel
 * training (the KVStore model: init keys, push gradients that are summed and
 * fed through an updater or optimizer, pull the updated values).
 *
 * Conventions that hold for every call below:
 *
 *  - A call that can fail returns 0 on success or a negative code: a kvs code
 *    (KVS_E*, below, all between -30999 and -30000) or a negated errno value
 *    (-ENOMEM, -EIO, ...). errno is never used to report anything.
 *    kvs_strerror() names any code; kvs_last_error() gives the detail of the
 *    last failure on a handle ("key 7: shape (2,3) does not match stored (4,4)").
 *  - A failed call changes nothing: a list call validates every key and array
 *    before it changes anything, so the store is exactly as it was.
 *  - Arrays (kvs_array_t) are views of caller memory: dense, row-major, with
 *    ndim in [0, KVS_MAX_NDIM] (ndim 0 is a scalar of one element) and every
 *    extent >= 0. kvs never keeps a pointer to caller memory after a call
 *    returns: init and push copy their input.
 *  - Calls are synchronous: when one returns, its inputs may be reused and
 *    its output arrays hold their values. A push returns once the store has
 *    taken its values, never waiting for other workers (in dist_sync its
 *    round completes when the others push; a pull waits for that). The
 *    priority arguments order requests that wait in a store daemon;
 *    in-process stores have nothing waiting and ignore them.
 *  - Threads: one kvs_t may be used from several threads at once.
 *    In-process stores serialise the calls of a handle: each is atomic with
 *    respect to the others. In dist stores calls of several threads run at
 *    once and progress independently: a thread waiting for a round or a
 *    barrier never holds up another thread's call (a push from an autograd
 *    hook while another thread pulls works). Each call is still atomic for
 *    the store (kvsd checks a whole list before any of it takes effect);
 *    calls of different threads on the same key are ordered as kvsd
 *    receives them. kvs_close must not run while another thread uses the
 *    handle. Updater callbacks run on the calling thread with the handle
 *    locked and must not call kvs functions on the same handle.
 *  - Collective calls in dist types, which every worker still in the job
 *    must make (in the same order): kvs_init of a key and kvs_barrier. They
 *    return when every worker has made them; a worker that never does makes
 *    the others fail with KVS_ETIMEDOUT at their deadline. Every other call
 *    is the calling worker's own: kvs_set_optimizer (any one worker may set
 *    the job's optimizer), kvs_save/load_optimizer_states (any one worker),
 *    kvs_set_gradient_compression, push, pull and the rest.
 *
 * Every name this header exports starts with kvs_ or KVS_.
 */
#ifndef KVS_H
#define KVS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && defined(KVS_BUILDING_LIBRARY)
#define KVS_API __attribute__((visibility("default")))
#else
#define KVS_API
#endif

/* KVS_VERSION_MAJOR, _MINOR, _PATCH and KVS_VERSION_STRING
 * ("MAJOR.MINOR.PATCH"): the version of this header, which configure
 * writes from the one version of kvs (AC_INIT in configure.ac). */
#include "kvs-version.h"

/* The library's version at run time: the same version, from the library
 * loaded. Each out-pointer may be NULL. Returns a static string
 * "kvs MAJOR.MINOR.PATCH" ("kvs " KVS_VERSION_STRING). Thread-safe. */
KVS_API const char *kvs_version(int *major, int *minor, int *patch);

/* ---- Errors ---------------------------------------------------------- */

/* XX(name, value, message): the one list the enum, kvs_strerror() and
 * kvs_err_name() are made from. */
#define KVS_ERRNO_MAP(XX)                                                     \
    XX(BADARG,    -30001, "invalid argument")                                 \
    XX(BADTYPE,   -30002, "unknown store type")                               \
    XX(NOKEY,     -30003, "key not initialised")                              \
    XX(KEYEXISTS, -30004, "key already initialised")                          \
    XX(KEYKIND,   -30005, "int and string keys mixed in one store")           \
    XX(SHAPE,     -30006, "shape mismatch")                                   \
    XX(DTYPE,     -30007, "dtype mismatch or unsupported dtype")              \
    XX(SPEC,      -30008, "invalid optimizer or compression spec")            \
    XX(NOTSUP,    -30009, "not supported by this store type")                 \
    XX(UPDATER,   -30010, "updater callback failed")                          \
    XX(NOOPT,     -30011, "no optimizer set")                                 \
    XX(CORRUPT,   -30012, "state file corrupt, truncated or of another format") \
    XX(RANGE,     -30013, "row id out of range")                              \
    XX(DEVICE,    -30014, "device unusable, or not for this store type")     \
    XX(PEERDEAD,  -30015, "a worker of the job died")                         \
    XX(TIMEDOUT,  -30016, "deadline passed")                                  \
    XX(PROTO,     -30017, "protocol or layout version mismatch")              \
    XX(CLOSED,    -30018, "no store daemon serves the job, or it is gone")   \
    XX(RESTART,   -30019, "the job rolled back to its last commit")

typedef enum {
#define KVS_ERR_ENUM_(name, value, msg) KVS_E##name = (value),
    KVS_ERRNO_MAP(KVS_ERR_ENUM_)
#undef KVS_ERR_ENUM_
} kvs_errno_t;

/* A static message for any code: kvs codes, negated errno values, 0
 * ("success"), and unknown codes ("unknown error"). Never NULL. Thread-safe. */
KVS_API const char *kvs_strerror(int err);

/* The symbolic name of a code ("KVS_ESHAPE", "ENOMEM"), or "UNKNOWN".
 * Static, never NULL. Thread-safe. */
KVS_API const char *kvs_err_name(int err);

/* ---- Arrays and keys ------------------------------------------------- */

typedef enum { KVS_FLOAT32, KVS_FLOAT64, KVS_FLOAT16, KVS_BFLOAT16,
               KVS_INT32, KVS_INT64, KVS_UINT8 } kvs_dtype_t;

#define KVS_MAX_NDIM 8

typedef struct {                       /* a view of caller memory */
    void *data;                        /* may be NULL only when it has no elements */
    kvs_dtype_t dtype;
    int ndim;                          /* 0..KVS_MAX_NDIM */
    int64_t shape[KVS_MAX_NDIM];       /* extents, each >= 0; unused ones ignored */
    int device;                        /* KVS_HOST, or KVS_CUDA(i) */
} kvs_array_t;

#define KVS_HOST    0                  /* zero-initialised arrays are host arrays */
#define KVS_CUDA(i) ((i) + 1)          /* CUDA device i (see "Device arrays" below) */

/* A key is an integer (name NULL) or a string (name non-NULL, at most
 * KVS_MAX_KEY_LEN bytes, NUL-terminated). One store holds one kind only. */
typedef struct { int64_t id; const char *name; } kvs_key_t;
#define KVS_INT_KEY(i) ((kvs_key_t){ .id = (i), .name = NULL })
#define KVS_STR_KEY(s) ((kvs_key_t){ .id = 0, .name = (s) })
#define KVS_MAX_KEY_LEN 255

/* Bytes of one element of a dtype, or 0 for a value that is not a dtype. */
KVS_API size_t kvs_dtype_size(kvs_dtype_t dtype);

/* The dtype's name ("float32", "bfloat16", ...), or "invalid". Static. */
KVS_API const char *kvs_dtype_name(kvs_dtype_t dtype);

/* ---- Creating a store ------------------------------------------------ */

typedef struct kvs kvs_t;              /* opaque handle */

/* Creates a store of the given type and stores its handle in *out.
 *   "local"                 the store lives in this process (also accepted by
 *                           MXNet's older names "local_update_cpu" and
 *                           "local_allreduce_cpu"; kvs_type() reports the name
 *                           as given).
 *   "dist_sync"             the store lives in kvsd, the job's host daemon, and
 *                           is shared by the job's workers (processes). A push
 *                           returns once kvsd has taken it; the round of a key
 *                           completes when every worker still in the job has
 *                           pushed it: the update rule then sees the sum over
 *                           workers, once per round. A pull waits for, and
 *                           returns the value of, the round holding this
 *                           worker's last push of the key.
 *   "dist_async"            as dist_sync, but each push is applied on arrival.
 *   "device"                as local, but each key's value lives on a GPU: the
 *                           one with the fewest bytes of values when the key
 *                           is first stored (MXNet's CommDevice); pushes are
 *                           summed and updated there. Without a usable GPU,
 *                           the same as local.
 *   "nccl"                  as device, but the values a call pushes for a key
 *                           from several GPUs, one per GPU and the key's own
 *                           among them, are reduced there with NCCL (loaded at
 *                           first use: KVS_NCCL, default libnccl.so.2), every
 *                           such key of the call in one NCCL group (MXNet's
 *                           KVStoreNCCL); the sums are NCCL's, whose order of
 *                           additions is its own. Other pushes are summed as
 *                           in device.
 *   "dist_device_sync"      MXNet's name for dist_sync with GPU arrays: the
 *                           same as dist_sync.
 * The dist types find their job in the environment: KVS_JOB (default
 * "default"), and the rank and number of workers from KVS_RANK and
 * KVS_NUM_WORKERS (set by kvsrun), else OMPI_COMM_WORLD_RANK/SIZE,
 * PMI_RANK/SIZE or SLURM_PROCID/NTASKS, else rank 0 of 1. In dist types:
 * init stores the value of rank 0 (of the lowest rank still in the job, if
 * rank 0 has left) and returns when every worker has called it; values of
 * another dtype or shape than that one fail the init for every worker
 * (KVS_EDTYPE, KVS_ESHAPE) and store nothing; kvs_barrier returns when
 * every worker reached it; a worker that calls kvs_close leaves the job:
 * its pushes already made still count in their rounds, and later rounds
 * complete without it; a worker that dies fails every round that needed
 * it, and every later call of the others, with KVS_EPEERDEAD. Custom
 * updaters, kvs_reinit and KVS_OPT_INIT_ON_PUSH are KVS_ENOTSUP there.
 * Errors: KVS_EBADARG (type or out NULL, a bad environment variable, e.g.
 * a KVS_TIMEOUT that is not a decimal number of seconds in (0, 31536000],
 * for every type),
 * KVS_EBADTYPE (unknown name), KVS_ENOTSUP, KVS_ECLOSED (no kvsd serves the
 * job), KVS_EPROTO (kvsd speaks another protocol or layout version), -ENOMEM,
 * -errno. On failure *out is set to NULL. Thread-safe. */
KVS_API int kvs_create(const char *type, kvs_t **out);

/* Closes a store and frees everything it holds. NULL is a no-op. No other
 * thread may be using the handle. */
KVS_API void kvs_close(kvs_t *kv);

/* Options, set any time after kvs_create (kvs_set_option) and read back
 * (kvs_get_option). Errors: KVS_EBADARG (NULL kv or value, unknown option,
 * value out of range). */
typedef enum {
    /* 1: a push to a key never initialised initialises it with the (summed)
     * pushed value, as MXNet before 1.0 did; the updater is not called for
     * that first push. 0 (default): such a push is KVS_ENOKEY. In-process
     * stores only: dist stores refuse 1 with KVS_ENOTSUP. */
    KVS_OPT_INIT_ON_PUSH = 1,
    /* Number of threads (the caller included) that sum and copy big arrays;
     * 0 (default) picks the number of online CPUs, at most 8. 1..64. */
    KVS_OPT_THREADS = 2,
    /* Deadline in milliseconds for any one wait of a dist store (a round,
     * a barrier, a pull): past it the call fails with KVS_ETIMEDOUT and the
     * handle is unusable. Default: KVS_TIMEOUT (seconds, a decimal number,
     * fractions allowed, in (0, 31536000]) from the environment, else
     * 120000; any other KVS_TIMEOUT makes kvs_create fail with
     * KVS_EBADARG. 1..one year. In-process stores never wait and ignore
     * it. */
    KVS_OPT_TIMEOUT_MS = 3,
} kvs_option_t;
KVS_API int kvs_set_option(kvs_t *kv, kvs_option_t opt, int64_t value);
KVS_API int kvs_get_option(const kvs_t *kv, kvs_option_t opt, int64_t *value);

/* The type name given to kvs_create. Valid until kvs_close. */
KVS_API const char *kvs_type(const kvs_t *kv);
/* This worker's rank in [0, kvs_num_workers()); 0 for in-process stores, and
 * for a NULL handle. */
KVS_API int kvs_rank(const kvs_t *kv);
/* The number of workers sharing the store; 1 for in-process stores (and for
 * a NULL handle). */
KVS_API int kvs_num_workers(const kvs_t *kv);

/* The detail message of the last call on this handle that failed, from any
 * thread ("" when none has). The pointer is to a copy owned by the calling
 * thread, valid until that thread's next call of kvs_last_error. A NULL
 * handle gives the detail of the last kvs_create, kvs_timeline_start or
 * kvs_timeline_stop that failed on this thread. */
KVS_API const char *kvs_last_error(const kvs_t *kv);

/* ---- Data calls ------------------------------------------------------ */
/* n is the list's length (0 is a no-op); keys[i] goes with values[i]/outs[i].
 * Errors common to all: KVS_EBADARG (NULL kv, n < 0, NULL list with n > 0,
 * an array with NULL data, a bad ndim or extent), KVS_EDTYPE (a dtype that
 * is not one of kvs_dtype_t), KVS_EDEVICE (see "Device arrays"), KVS_EKEYKIND
 * (a string key in an int-key store or the reverse, also within one call; a
 * string key longer than KVS_MAX_KEY_LEN is KVS_EBADARG), -ENOMEM.
 *
 * Device arrays. An array with device KVS_CUDA(i) has its data in memory of
 * CUDA device i (cudaMalloc, or a framework's allocator). The local and
 * device types take them, mixed freely with host arrays in one call. So
 * do the dist types: kvsd reads an init's or a push's device value from
 * this worker's GPU memory through CUDA IPC, and writes a pull's into it,
 * where it can (the allocation registered with kvsd once; the array is
 * the caller's again when the call returns), else it goes through this
 * worker's staging area and kvsd's host memory (views stay in host
 * memory). On one host, kvsd keeps a key first stored from a device array
 * on that GPU, and sums and updates it there. libkvs loads the
 * CUDA runtime at first use (KVS_CUDART names it; default libcudart.so.13)
 * and its kernels from the module libkvs-cuda.so (KVS_CUDA_KERNELS; default
 * the installed one); a device array where either is missing, or whose
 * device does not exist, or whose data the runtime does not know as memory
 * of that device, is KVS_EDEVICE with the reason. In a local store a key's
 * value lives on the device of the array that first stored it; sums and
 * updates run where the value lives (other devices' inputs are copied
 * there first), and give the host's results bit for bit. Device work is
 * queued on a stream of libkvs's own per device, which waits for the work
 * the caller queued on that device's legacy default stream (work on other
 * streams must be synchronised by the caller), and is finished when the call
 * returns; device work not done within KVS_TIMEOUT (read once per
 * process; a handle's KVS_OPT_TIMEOUT does not apply) fails the call with
 * KVS_ETIMEDOUT. The caller's current device is left as it was. A device that
 * fails during a push (a lost GPU) fails the call with KVS_EDEVICE and may
 * leave that push's keys half updated. */

/* Stores a copy of values[i] under keys[i]; the key's dtype and shape are
 * those of the value. Errors: KVS_EKEYEXISTS (a key already initialised, or
 * twice in the list); -ENOMEM, in dist types also when kvsd's arena is
 * full (the detail gives its size, the bytes in use and those the value
 * needs, and names kvsrun --arena and kvsd --arena). */
KVS_API int kvs_init(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values);

/* Like kvs_init, but a key already initialised is re-initialised: its value,
 * dtype and shape are replaced, its optimizer state is dropped. (MXNet has
 * no such call.) Errors: KVS_EKEYEXISTS (a key twice in the list). */
KVS_API int kvs_reinit(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values);

/* Pushes values. Values of one key (a key may repeat) are summed first
 * (float16/bfloat16 are summed in float32 and rounded once, to nearest even;
 * integers wrap). Then, per key in order of first appearance: without
 * updater or optimizer the stored value becomes the sum; with an updater,
 * updater(key, sum, stored); with an optimizer, its update rule.
 * In dist_sync that happens once per round, to the sum over workers: the
 * push returns as soon as kvsd has taken this worker's values (they may be
 * reused at once), whatever the other workers do, so workers may push keys
 * in different orders and in separate calls; a later pull of the key waits
 * for the round. A worker that pushes a key twice before the round closes
 * has its second push counted in the next round. An error of the update
 * itself (found when the round closes) is returned by the pulls of the key
 * that wait for that round.
 * Errors: KVS_ENOKEY, KVS_ESHAPE, KVS_EDTYPE (value does not match the
 * stored key), KVS_UPDATER (a callback returned non-zero: the call has then
 * changed nothing, as updaters work on copies that are kept only when every
 * callback of the call succeeded). */
KVS_API int kvs_push(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                     int priority);

/* Copies the stored value of keys[i] into outs[i]; a key may repeat, every
 * out of it receives the value. The value includes every push this caller
 * made before (in dist_sync: the call waits for the round of this worker's
 * last push of the key). Errors: KVS_ENOKEY, KVS_ESHAPE, KVS_EDTYPE, and
 * the error of a failed update in that round. */
KVS_API int kvs_pull(kvs_t *kv, int n, const kvs_key_t *keys, kvs_array_t *outs,
                     int priority);

/* kvs_push then kvs_pull of the same keys, as one call. outs NULL: the
 * pulled values overwrite values[i].data (in place). Outs may alias the
 * values. Errors: those of push and pull, checked before anything changes.
 * In dist_sync, kvsd may read big values out of the caller's memory and
 * write the sum straight into its outs (doc/zero-copy.md), at any time
 * until the call returns and never after, even when the call fails (a
 * timeout returns once kvsd has said it writes no more, or once kvsd is
 * gone; only a kvsd silent for another whole timeout is not waited for
 * longer): values and outs belong to the call while it runs, and after a
 * failed call an out (or a value summed in place) may hold part of the
 * sum. */
KVS_API int kvs_pushpull(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                         kvs_array_t *outs, int priority);

/* Pulls only some rows (sub-arrays along dimension 0) of keys[i] into
 * outs[i], which has the stored shape: rows named in row_ids[i] (a 1-D
 * KVS_INT64 array; unsorted, repeats allowed; data may be NULL when it has
 * no element: then every row is zero) receive the stored rows, every other
 * row is zero. Stored values must have ndim >= 1.
 * Errors: KVS_ERANGE (a row id < 0 or >= the number of rows), KVS_EDTYPE
 * (row ids not int64), KVS_ESHAPE (row ids not 1-D, or a scalar key), and
 * those of kvs_pull. */
KVS_API int kvs_row_sparse_pull(kvs_t *kv, int n, const kvs_key_t *keys, kvs_array_t *outs,
                                const kvs_array_t *row_ids, int priority);

/* ---- Row-sparse values ----------------------------------------------- */
/* A table too big to move every step (an embedding) is pushed and pulled
 * by rows: a row-sparse value is the rows indices[0..nnz) of a value of
 * full shape `shape` (ndim >= 1), held in `data` as nnz rows of
 * shape[1] x ... x shape[ndim-1] elements each, row j of data being row
 * indices[j] of the full value. In an input, indices may be unsorted and
 * may repeat (repeated rows are summed); nnz 0 is a valid, empty value. */
typedef struct {
    void *data;                        /* nnz rows, contiguous; NULL allowed when nnz is 0 */
    int64_t *indices;                  /* nnz row ids, each in [0, shape[0]); an input's are
                                        * only read */
    int64_t nnz;                       /* rows held; a pull's out: on entry, the rows of room */
    kvs_dtype_t dtype;
    int ndim;                          /* 1..KVS_MAX_NDIM */
    int64_t shape[KVS_MAX_NDIM];       /* the full value's shape */
    int device;                        /* where data and indices are: KVS_HOST, or for an
                                        * input KVS_CUDA(i) (both on GPU i, copied to the
                                        * host first: nnz rows and nnz ids); outs: KVS_HOST */
} kvs_row_sparse_t;

/* kvs_init of row-sparse values: each key's value is the full shape with
 * the rows given (repeats summed) and every other row zero. Errors: those
 * of kvs_init, and KVS_ERANGE (a row id < 0 or >= shape[0], named with
 * its key and position), KVS_ESHAPE (ndim 0), KVS_EBADARG (nnz < 0, NULL
 * indices or data with nnz > 0), KVS_EDEVICE (a value on a GPU whose data
 * or indices are not memory of that GPU, or no usable GPU). */
KVS_API int kvs_init_row_sparse(kvs_t *kv, int n, const kvs_key_t *keys,
                                const kvs_row_sparse_t *values);

/* kvs_push of row-sparse values. The sum of a key's values (of this call,
 * and in dist types of the round's workers) is row-sparse: the union of
 * the rows pushed, each row summed. Then, per key: without updater or
 * optimizer the stored value becomes the sum, so rows absent from it
 * become zero (MXNet's assignment); an updater gets the sum as a dense
 * array (absent rows zero); an optimizer updates lazily by default: only
 * the rows in the sum, and their state, change (weight decay and momentum
 * leave absent rows alone; Adam's step count is the key's, as for dense
 * pushes); with `lazy_update=0` in its spec the sum is treated as a dense
 * gradient, zeros included. Only the rows pushed are read, moved and
 * summed; for a key whose value lives on a GPU (local, device, nccl) only
 * those rows, and for a lazy update their optimizer state, are copied
 * between host and device. A key may be pushed dense in one call and
 * row-sparse in another.
 * The updater's input is that dense array (called once per key per push,
 * as for dense pushes), so an updater written for dense pushes works
 * unchanged. A key not initialised is KVS_ENOKEY, whatever
 * KVS_OPT_INIT_ON_PUSH says (use kvs_init_row_sparse).
 * Errors: those of kvs_push and kvs_init_row_sparse; KVS_ENOTSUP (a store
 * type or gradient compression that does not take row-sparse pushes, or a
 * key that kvsd keeps on a GPU in a dist type, with which in the detail);
 * KVS_EDEVICE when a GPU fails during the push. A failed call changes
 * nothing, but for a GPU that fails while the push writes, which may
 * leave its keys half updated, as for kvs_push. */
KVS_API int kvs_push_row_sparse(kvs_t *kv, int n, const kvs_key_t *keys,
                                const kvs_row_sparse_t *values, int priority);

/* A compact pull: outs[i] receives the stored rows of keys[i] named in
 * row_ids[i] (a 1-D KVS_INT64 array; unsorted, repeats allowed), as a
 * row-sparse value whose indices are the sorted unique ids: outs[i].nnz
 * is set to their number, indices[] and data get them, and dtype, ndim
 * and shape are set to the key's. On entry outs[i].nnz is the room of
 * outs[i].indices and outs[i].data, in rows; outs are host memory, and
 * of a key on a GPU only the rows asked for are copied. Waits as kvs_pull
 * waits.
 * Errors: those of kvs_row_sparse_pull; -ENOSPC when an out has too little
 * room: then every out's nnz is set to the rows it needs and nothing else
 * is written; KVS_EDEVICE when a GPU fails while its rows are copied
 * (the outs before it are written then). */
KVS_API int kvs_pull_rows(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *row_ids,
                          kvs_row_sparse_t *outs, int priority);

/* kvs_push_row_sparse, then kvs_pull_rows of the same keys, as one call:
 * the usual step of a sparse model (push this batch's gradient rows, pull
 * the rows the next batch needs). Errors: those of both, checked before
 * anything changes. */
KVS_API int kvs_pushpull_row_sparse(kvs_t *kv, int n, const kvs_key_t *keys,
                                    const kvs_row_sparse_t *values, const kvs_array_t *row_ids,
                                    kvs_row_sparse_t *outs, int priority);

/* ---- Zero-copy buffers and views --------------------------------------- */
/* A round of push and pull normally copies twice in each worker: the value
 * pushed into memory the store can read, the value pulled out of the
 * store's memory. A buffer allocated here already lives where the store
 * reads pushes from (for dist types: this worker's staging area, which kvsd
 * reads directly), so pushing it copies nothing; a view is the stored value
 * itself, read in place, so pulling one copies nothing. */

/* Allocates a zero-filled array of dtype and shape (ndim extents; shape may
 * be NULL when ndim is 0) in the handle's buffer memory and describes it in
 * *out (data 64-byte aligned, device KVS_HOST). Use it like any array:
 * pushed, pulled into, pushed in place. A push whose value lies wholly in
 * one buffer takes it without a copy (values of a repeated key are still
 * summed into a copy first). The buffer is the caller's until
 * kvs_array_free or kvs_close, which frees every buffer of the handle
 * (unless a hold of kvs_mem_hold keeps them past it).
 * The store reads a pushed buffer until the push has taken effect: in
 * dist_sync, until the push's round closes, which needs the other workers,
 * so the push returns before that. Rule: do not write a buffer you pushed
 * until a call that waits for that round has returned: a pull, pushpull or
 * view of the key, or a barrier after which every worker has pulled it.
 * Nothing waits for the rule, so it cannot deadlock; breaking it changes
 * what the round sums. kvs_array_free of a buffer the store still reads
 * has kvsd copy it first. For dist types buffers take the top of the
 * staging area (kvsrun --staging, 256 MiB by default), and the copies of
 * ordinary calls use what lies below the lowest buffer.
 * Errors: KVS_EBADARG (NULL kv or out, bad ndim or extent, NULL shape with
 * ndim > 0), KVS_EDTYPE, -ENOSPC (no room left in the staging area: the
 * detail gives its size), -ENOMEM. Thread-safe, like every call on kv. */
KVS_API int kvs_array_alloc(kvs_t *kv, kvs_dtype_t dtype, int ndim, const int64_t *shape,
                            kvs_array_t *out);

/* Frees a buffer of kvs_array_alloc: arr->data must be the data pointer
 * that call returned, from this handle, not freed yet; arr->data becomes
 * NULL. Errors: KVS_EBADARG (NULL, or not a live buffer of this handle:
 * nothing is freed). */
KVS_API int kvs_array_free(kvs_t *kv, kvs_array_t *arr);

/* Like kvs_pull, but instead of copying the value into views[i].data it
 * points views[i].data at the stored value itself. views[i] states the
 * dtype and shape the caller expects, as an out of kvs_pull does; its data
 * and device are ignored on entry and set on success only (device: where
 * the value lives, KVS_CUDA(i) for a local key initialised from a device
 * array). A view is read-only (in dist
 * types it is mapped read-only: a write faults) and stays valid and
 * unchanged:
 *   local      until the next call on this handle that changes the key
 *              (push, pushpull, reinit) or kvs_close (but see
 *              kvs_mem_hold);
 *   dist_sync  until this worker pushes the key again (the next round
 *              cannot close without that push; once it is made, the round
 *              may close, and the value change, at any time), or calls
 *              kvs_close (but see kvs_mem_hold).
 * Errors: those of kvs_pull; KVS_ENOTSUP for dist_async, where other
 * workers' pushes rewrite a value at any time (use kvs_pull there). */
KVS_API int kvs_pull_view(kvs_t *kv, int n, const kvs_key_t *keys, kvs_array_t *views,
                          int priority);

/* kvs_push of values, then kvs_pull_view of the same keys, as one call (as
 * kvs_pushpull is push and pull). views[i] must have values[i]'s dtype and
 * shape. Errors: those of kvs_pushpull and kvs_pull_view. */
KVS_API int kvs_pushpull_view(kvs_t *kv, int n, const kvs_key_t *keys,
                              const kvs_array_t *values, kvs_array_t *views, int priority);

/* ---- Memory past kvs_close ------------------------------------------- */
/* Buffers and views belong to their handle, and kvs_close frees them: a
 * pointer kept into one then faults, or reads memory handed out again. A
 * program whose arrays may outlive the handle (a language binding whose
 * arrays are freed when the last reference goes) takes a hold on the
 * handle's memory: while a hold remains, kvs_close leaves in place the
 * memory of the handle's buffers (those not given to kvs_array_free) and
 * of its views, and the last kvs_mem_release frees it. The handle itself
 * goes as always. After kvs_close that memory serves nobody but the
 * holder: a buffer keeps its bytes and may still be written (the writes
 * go nowhere: there is no handle to push them with); a view of an
 * in-process store keeps the key's last value; a view of a dist store
 * keeps reading kvsd's memory of the key, which still holds the last
 * value this worker saw, unless workers still in the job complete later
 * rounds of the key (the memory stays mapped; it is not copied). While the
 * handle is open a hold changes nothing: buffers are still freed by
 * kvs_array_free and views still follow the rules of kvs_pull_view.
 * A dist handle's buffers and views from before a roll back (KVS_ERESTART)
 * to a kvsd whose memory could not take the old one's place are gone
 * whatever the holds. */
typedef struct kvs_mem kvs_mem_t;

/* Takes a hold on kv's memory in *mem (several holds share it). Errors:
 * KVS_EBADARG (NULL kv or mem), -ENOMEM. Thread-safe, but not beside
 * kvs_close of the same handle. */
KVS_API int kvs_mem_hold(kvs_t *kv, kvs_mem_t **mem);

/* Releases a hold of kvs_mem_hold (NULL: nothing). Returns 1 when this
 * was the last reference, the handle closed, and the memory freed; 0
 * otherwise. Thread-safe; any thread may release, before or after
 * kvs_close. */
KVS_API int kvs_mem_release(kvs_mem_t *mem);

/* ---- Update rules ---------------------------------------------------- */

/* An updater: called once per key per push with the summed input, which it
 * may combine into stored (same dtype and shape; both arrays valid only
 * during the call; key.name likewise). Return 0, or non-zero to fail the
 * push (KVS_EUPDATER). */
typedef int (*kvs_updater_t)(kvs_key_t key, const kvs_array_t *input,
                             kvs_array_t *stored, void *ctx);

/* Sets the updater called by later pushes; NULL restores ASSIGN (the stored
 * value becomes the pushed sum). Replaces any optimizer (and drops its
 * state). ctx is passed through. Errors: KVS_EBADARG (NULL kv), KVS_ENOTSUP
 * (store types whose store lives in another process: use kvs_set_optimizer). */
KVS_API int kvs_set_updater(kvs_t *kv, kvs_updater_t fn, void *ctx);

/* Sets a built-in optimizer from a spec: a name, then name=value pairs
 * separated by spaces; values are decimal numbers. Unset parameters take
 * MXNet's defaults.
 *   "sgd  lr=0.01 momentum=0 wd=0 rescale_grad=1 clip_gradient=-1
 *         lazy_update=1"
 *   "adam lr=0.001 beta1=0.9 beta2=0.999 epsilon=1e-8 wd=0 rescale_grad=1
 *         clip_gradient=-1 lazy_update=1"
 * Values are decimal numbers (no hex, inf or nan) in MXNet's ranges: lr > 0,
 * momentum, beta1 and beta2 in [0, 1), wd and epsilon >= 0; clip_gradient
 * <= 0 means no clipping, as MXNet; momentum 0: plain sgd, no momentum
 * state; lazy_update (0 or 1) is how a row-sparse push updates
 * (kvs_push_row_sparse): 1 only its rows and their state, 0 as a dense
 * gradient, zeros included; dense pushes ignore it. The update formulas are MXNet's; adam
 * applies bias correction with a per-key update count. Float keys only;
 * float16/bfloat16 are computed in float32 with float32 state.
 * Replaces any updater or optimizer and drops optimizer state.
 * In dist types the optimizer is the job's, kept by kvsd, and this is not
 * a collective call: any one worker may set it (as MXNet lets any worker
 * send its optimizer to the servers), and it applies to every round that
 * closes after kvsd received it. A later call with another spec, from any
 * worker, replaces it and drops its state (kvsd says so on stderr); a call
 * with the spec already set is a no-op that keeps the state, so every
 * worker may make the same call at start-up.
 * Errors: KVS_EBADARG (NULL), KVS_ESPEC (unknown optimizer or parameter, a
 * value that is not a finite number, a parameter twice; the detail names it).
 * A push with an optimizer to an integer key is KVS_EDTYPE. */
KVS_API int kvs_set_optimizer(kvs_t *kv, const char *spec);

/* Sets gradient compression for values crossing a process or host
 * boundary: "2bit threshold=0.5" (threshold > 0; 0.5 by default) or "none".
 * In dist types, from then on this handle's pushes of float32 values are
 * quantized to -threshold, 0 or +threshold (16 values per 32-bit word,
 * MXNet's codec), each key with this worker's own residual (what was cut
 * off, added to the key's next push; it changes only when kvsd takes the
 * push); kvsd decodes them and sums the decoded values, across hosts at
 * the key's owner (the quantized words cross the wire). Values of other
 * dtypes, pulls and inits are sent as they are. Each worker sets its own:
 * call it on every worker. Pushes from zero-copy buffers are copied, as
 * they must be quantized. "none" stops it (residuals are kept).
 * Errors: KVS_ENOTSUP for in-process stores (as MXNet's 'local'); KVS_ESPEC
 * for a bad spec. Not a collective call. */
KVS_API int kvs_set_gradient_compression(kvs_t *kv, const char *spec);

/* Writes the optimizer's per-key state to path, atomically (a temporary file
 * in the same directory, fsync, rename, fsync of the directory): the file at
 * path is either the old one or the complete new one. With dump_optimizer
 * non-zero the optimizer's spec is saved too, and kvs_load_optimizer_states
 * restores it. The file is versioned and checksummed. In dist types any one
 * worker may call it (not a collective call): kvsd writes the job's state,
 * with the rounds closed so far, to path (relative paths are taken from the
 * caller's working directory). Across hosts the caller's host gathers every
 * key's state from its owner host and writes one file, on its own disk.
 * Errors: KVS_ENOOPT (no optimizer set), KVS_EBADARG, -errno of the system. */
KVS_API int kvs_save_optimizer_states(kvs_t *kv, const char *path, int dump_optimizer);

/* Replaces the optimizer's state with that saved in path (keys absent from
 * the file start afresh); a file saved with dump_optimizer also replaces the
 * optimizer. The whole file is checked before anything changes. In dist
 * types any one worker may call it, for the whole job (not collective);
 * across hosts the caller's host reads the file, checks it, and sends it
 * to every host, each taking the states of the keys it owns; a failure on
 * another host is returned, naming it (the hosts that had taken their
 * part keep it: load again).
 * Errors: KVS_ECORRUPT (bad magic, version, checksum, length), KVS_ENOOPT
 * (no optimizer set and none in the file), KVS_ESPEC (the file's state is
 * for another optimizer), KVS_ENOKEY / KVS_ESHAPE / KVS_EDTYPE (a state for
 * a key not in the store or of another size or dtype), -errno. */
KVS_API int kvs_load_optimizer_states(kvs_t *kv, const char *path);

/* ---- Timeline ---------------------------------------------------------- */
/* A timeline records this process's calls and their phases (copies,
 * waits, the combining of a round) with their keys, bytes and times, and
 * writes them as a Chrome trace-event JSON file (Perfetto,
 * chrome://tracing). KVS_TIMELINE=FILE (or kvsrun --timeline FILE) records
 * the whole job instead, kvsd's phases included: see kvs's doc/timeline.md.
 * kvs_timeline_start turns it on for this process, into path (taken from
 * the working directory at the call); kvs_timeline_stop writes the file
 * (atomically: a temporary file, then rename) and turns it off. Call them
 * while no other thread of the process makes calls. A full buffer drops
 * later events; the file counts them (otherData.dropped_events).
 * Errors: KVS_EBADARG (NULL or too long a path, a start while a timeline
 * is on already, a stop without a start, a bad KVS_TIMELINE_EVENTS),
 * -ENOMEM, -errno writing the file. kvs_last_error(NULL) gives the detail. */
KVS_API int kvs_timeline_start(const char *path);
KVS_API int kvs_timeline_stop(void);

/* Returns when every worker still in the job has reached the barrier (a
 * collective call); a no-op returning 0 for in-process stores.
 * Errors: KVS_EBADARG (NULL), and for dist types those of every wait:
 * KVS_ETIMEDOUT, KVS_EPEERDEAD, KVS_ECLOSED. */
KVS_API int kvs_barrier(kvs_t *kv);

/* ---- Commits and recovery --------------------------------------------- */

/* Records a snapshot of the whole store at a step boundary: every key's
 * value, optimizer state and round count, the optimizer's spec, and step
 * (>= 0). In dist types a collective call: every worker still in the job
 * calls it with the same step (KVS_EBADARG for all of them otherwise), after
 * its pushes and pulls of that step; it returns when kvsd holds the snapshot
 * (in shared memory, so that it outlives kvsd; with kvsrun --checkpoint DIR
 * also written to disk, see doc/recovery.md; across hosts, every host's kvsd
 * holds its own, the same point of the job). A dist job that does not
 * recover (no kvsrun --restarts or --checkpoint) has no use for a snapshot
 * and makes none: its commit is the collective and the step, so that the
 * same program runs under a plain kvsrun. In-process stores keep the
 * last snapshot in the process (nothing rolls them back; kvs_resume_step
 * then reports its step); a failed commit keeps the one before. Errors:
 * KVS_EBADARG (NULL kv, step < 0, steps that differ), KVS_ENOTSUP (a key
 * whose value the store keeps on a GPU, named in the detail), -ENOMEM,
 * -errno writing the snapshot, KVS_ERESTART, and those of every wait. */
KVS_API int kvs_commit(kvs_t *kv, int64_t step);

/* The step of the snapshot this handle's store holds: that of the last
 * commit, or after a roll back (KVS_ERESTART) the step the job rolled back
 * to; -1 when there is none (a fresh job, or a roll back before the first
 * commit, which empties the store). A program calls it after kvs_create and
 * after KVS_ERESTART, then pulls its weights (or inits them at -1) and
 * continues from *step + 1. Errors: KVS_EBADARG (NULL kv or step). */
KVS_API int kvs_resume_step(kvs_t *kv, int64_t *step);

#ifdef __cplusplus
}
#endif
#endif /* KVS_H */
