"""torch's DistributedDataParallel through kvs: a communication hook, and a
process group for what DDP does besides its gradients.

    kv = kvs.create('dist_sync')                     # each worker, under kvsrun
    kvs.torch.init_process_group(kv)                 # torch.distributed's default group
    model = DDP(net)
    model.register_comm_hook(kvs.torch.hook_state(kv), kvs.torch.allreduce_hook)

The hook pushes each gradient bucket (its flat tensor, divided by the
number of workers, as DDP's own allreduce does) to a key of its own and
returns a torch.futures.Future that one thread of the hook's state
completes with the bucket's pull: the push returns at once, so backward
goes on computing the next buckets while the rounds run, and DDP waits for
the futures at its end. A CPU bucket is divided into a store buffer of its
own (kv.alloc), which its push sends without a copy. Keys are named after
the bucket's index, dtype and size, and initialised at their first use:
DDP rebuilds its buckets after the first iteration (the same on every
worker), and a bucket of a new size gets a new key.

The process group (ProcessGroup, or init_process_group to make it the
default one) serves DDP's construction (checking the parameters' shapes
across workers: allgather; broadcasting rank 0's state: broadcast), the
broadcast of buffers before each forward and of the rebuilt buckets, and
allreduce and barrier, over keys of their own. Every collective runs to its
end in the call; the Work returned is complete.

The store must have no optimizer: keys take the sum of the round (kvs's
default assignment), which is what both need.
"""

import atexit
import datetime
import os
import queue
import tempfile
import threading
import weakref

import torch
import torch.distributed as dist
from torch.futures import Future

from ._lib import KVSError
from .kvstore import KVStore

__all__ = ['HookState', 'ProcessGroup', 'allreduce_hook', 'hook_state', 'init_process_group']

# kvs's dtypes, by torch's; bool travels as uint8.
_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32,
           torch.int64, torch.uint8)


def _check_store(kv):
    if not isinstance(kv, KVStore):
        raise TypeError('kv must be a kvs.KVStore, not %s' % type(kv).__name__)
    kind = kv.type
    if kind == 'dist_async':
        raise ValueError('dist_async applies each push alone: DDP needs the sums of rounds '
                         '(dist_sync, or a local store)')


class HookState:
    """The state of allreduce_hook: the store, the keys of the buckets made
    so far, and the thread that completes the buckets' futures with their
    pulls. .error is the first exception a push or pull raised (a
    kvs.KVSError, e.g. with code kvs.EPEERDEAD when a worker died): DDP
    raises it from backward as a RuntimeError that names it, and every
    later bucket fails with it at once. close() ends the thread (it ends by
    itself when the state is collected)."""

    def __init__(self, kv, prefix='ddp'):
        _check_store(kv)
        self.kv = kv
        self.prefix = prefix
        self.error = None
        self._keys = {}               # key -> its buffer of kv.alloc, or None
        self._of_index = {}           # bucket index -> its key now
        self._staging = True          # False once a buffer found no room
        self._queue = queue.SimpleQueue()
        self._thread = None

    def _key(self, index, buf):
        """The key of bucket index as buf is now, and the store buffer its
        pushes go from (None: from buf itself)."""
        key = '%s:%d:%s:%d' % (self.prefix, index, str(buf.dtype)[6:], buf.numel())
        old = self._of_index.get(index)
        if old == key:
            return key, self._keys[key]
        if old is not None:
            self._keys[old] = None             # a rebuilt bucket's buffer goes first
        if key not in self._keys:
            self.kv.init(key, torch.zeros(buf.numel(), dtype=buf.dtype, device=buf.device))
        self._keys[key] = self._stage(buf)
        self._of_index[index] = key
        return key, self._keys[key]

    def _stage(self, buf):
        """A store buffer (kv.alloc) for a CPU bucket: the division by the
        number of workers writes into it, and its push copies nothing.
        None for a bucket on a GPU. When one finds no room in the store,
        every bucket's buffer goes (the room is left to the copies of
        ordinary pushes), and from then on every push copies."""
        if buf.device.type != 'cpu' or not self._staging:
            return None
        try:
            arr = self.kv.alloc(buf.numel(), buf.dtype)
        except KVSError:
            self._staging = False
            for key in self._keys:
                self._keys[key] = None
            return None
        return arr if isinstance(arr, torch.Tensor) else torch.from_numpy(arr)

    def _fail(self, fut, exc):
        if self.error is None:
            self.error = exc
        fut.set_exception(exc)

    def submit(self, bucket):
        """Pushes the bucket and returns the Future its pull completes."""
        buf = bucket.buffer()
        fut = Future()                # completed here; DDP gets its then()
        done = fut.then(_value)
        try:
            if self.error is not None:
                raise self.error
            key, stage = self._key(bucket.index(), buf)
            n = self.kv.num_workers
            if stage is None:
                if n > 1:
                    buf.div_(n)
                self.kv.push(key, buf)
            else:
                # Written again only after the key's pull has returned: DDP
                # waits for every bucket before the next backward.
                if n > 1:
                    torch.div(buf, n, out=stage)
                else:
                    stage.copy_(buf)
                self.kv.push(key, stage)
        except Exception as exc:   # noqa: B902 -- handed to DDP through the future
            self._fail(fut, exc)
            return done
        if self._thread is None:
            self._thread = threading.Thread(target=_complete, name='kvs-ddp-hook', daemon=True,
                                            args=(weakref.ref(self), self._queue))
            self._thread.start()
        self._queue.put((key, buf, fut))
        return done

    def _pull(self, key, buf, fut):
        try:
            if self.error is not None:
                raise self.error
            self.kv.pull(key, out=buf)
        except Exception as exc:   # noqa: B902
            self._fail(fut, exc)
            return
        fut.set_result(buf)

    def close(self):
        """Ends the thread, once the buckets pushed so far are pulled."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    def __del__(self):
        if getattr(self, '_thread', None) is not None:
            self._queue.put(None)


def _value(fut):
    """The value of fut, or its exception raised: a then() of it carries
    the exception as an error that DDP raises from backward as it is
    (set_exception alone makes it a value DDP fails to read)."""
    return fut.value()


def _complete(state_ref, q):
    """The hook's thread: pulls the buckets in the order they were pushed,
    completing their futures. It holds the state only while it works."""
    while True:
        item = q.get()
        if item is None:
            return
        state = state_ref()
        if state is None:
            return
        state._pull(*item)
        del state


def hook_state(kv, prefix='ddp'):
    """The state to register allreduce_hook with: model.register_comm_hook(
    kvs.torch.hook_state(kv), kvs.torch.allreduce_hook). prefix names the
    buckets' keys (prefix:index:dtype:size): give two DDP models on one
    store different prefixes."""
    return HookState(kv, prefix)


def allreduce_hook(state, bucket):
    """DDP's communication hook through kvs: the bucket's gradients
    averaged over the workers, as DDP's default hook leaves them."""
    return state.submit(bucket)


# ---- the process group ------------------------------------------------------

def _done(result):
    fut = Future()
    fut.set_result(result)
    return torch._C._distributed_c10d._create_work_from_future(fut)


class ProcessGroup(dist.ProcessGroup):
    """torch.distributed's collectives over kvs: broadcast, allreduce (sum,
    and DDP's average), allgather and barrier, on the store's workers.
    Each runs in the call, through keys named pg:op:dtype:size initialised
    at first use (every worker makes the same collectives in the same
    order, as torch requires). Other collectives raise RuntimeError."""

    def __init__(self, kv):
        _check_store(kv)
        super().__init__(kv.rank, kv.num_workers)
        self.kv = kv
        self._keys = set()

    def getBackendName(self):
        return 'kvs'

    def _round(self, op, value):
        """The sum over the workers of value (a tensor), into it."""
        work = value if value.is_contiguous() else value.contiguous()
        flat = work.view(-1)
        wire = flat.view(torch.uint8) if flat.dtype == torch.bool else flat
        if wire.dtype not in _DTYPES:
            raise TypeError('kvs process group: dtype %s has no kvs dtype' % value.dtype)
        key = 'pg:%s:%s:%d' % (op, str(wire.dtype)[6:], wire.numel())
        if key not in self._keys:
            self.kv.init(key, torch.zeros_like(wire))
            self._keys.add(key)
        self.kv.pushpull(key, wire)
        if work is not value:         # a copy: the sum goes back into value
            value.copy_(work)
        return value

    def broadcast(self, tensors, opts):
        root = opts.rootRank
        for t in tensors:
            if self.kv.rank != root:
                t.zero_()
            self._round('broadcast', t)
        return _done(tensors)

    def allreduce(self, tensors, opts=None):
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        if op not in (dist.ReduceOp.SUM, dist.ReduceOp.AVG):
            raise RuntimeError('kvs process group: allreduce takes SUM and AVG, not %s' % op)
        for t in tensors:
            self._round('allreduce', t)
            if op == dist.ReduceOp.AVG:
                t.div_(self.kv.num_workers)
        return _done(tensors)

    def allgather(self, output_lists, inputs, opts=None):
        n, r = self.kv.num_workers, self.kv.rank
        for outs, t in zip(output_lists, inputs):
            if len(outs) != n:
                raise RuntimeError('kvs process group: allgather wants %d outputs per input' % n)
            whole = torch.zeros((n,) + tuple(t.shape), dtype=t.dtype, device=t.device)
            whole[r].copy_(t)
            self._round('allgather', whole)
            for i, o in enumerate(outs):
                o.copy_(whole[i])
        return _done(output_lists)

    def barrier(self, opts=None):
        self.kv.barrier()
        return _done(None)


_pending = []                  # the store init_process_group hands the backend


def _create(store, rank, size, timeout):
    """The backend 'kvs' of torch.distributed: the ProcessGroup of the store
    that kvs.torch.init_process_group gave."""
    if not _pending:
        raise RuntimeError("the backend 'kvs' needs a store: call "
                           "kvs.torch.init_process_group(kv) instead of "
                           "torch.distributed.init_process_group('kvs')")
    kv = _pending[-1]
    if (rank, size) != (kv.rank, kv.num_workers):
        raise RuntimeError('rank %d of %d given, but the store is rank %d of %d'
                           % (rank, size, kv.rank, kv.num_workers))
    return ProcessGroup(kv)


def init_process_group(kv, timeout=datetime.timedelta(minutes=30)):
    """Makes torch.distributed's default process group a ProcessGroup of kv
    (backend 'kvs'), with rank and world size from the store: DDP then
    needs no gloo. torch's own rendezvous store, which init_process_group
    waits on once, is a file in the temporary directory whose name rank 0
    gives the others through kv (removed at exit). The group is destroyed
    at exit, if the program has not done it (dist.destroy_process_group())
    before."""
    _check_store(kv)
    if 'KVS' not in dist.Backend._plugins:
        dist.Backend.register_backend('kvs', _create)
    name = torch.zeros(256, dtype=torch.uint8)
    if kv.rank == 0:
        fd, path = tempfile.mkstemp(prefix='kvs-pg-')
        os.close(fd)
        os.unlink(path)                # FileStore makes it
        raw = os.fsencode(path)
        if len(raw) >= 256:
            raise ValueError('the temporary directory\'s path is too long: %r' % path)
        name[:len(raw)] = torch.tensor(list(raw), dtype=torch.uint8)
    ProcessGroup(kv)._round('rendezvous', name)
    path = os.fsdecode(bytes(name[:int((name != 0).sum())].tolist()))
    store = dist.FileStore(path, kv.num_workers)
    _pending.append(kv)
    try:
        dist.init_process_group('kvs', store=store, rank=kv.rank, world_size=kv.num_workers,
                                timeout=timeout)
    finally:
        _pending.pop()
    atexit.register(_destroy, path)


def _destroy(path):
    """At exit, before the interpreter goes (a process group of Python
    destroyed after that aborts the process); then the rendezvous file
    goes, which torch leaves when a worker died or a group kept it."""
    if dist.is_initialized() and dist.get_backend() == 'kvs':
        dist.destroy_process_group()
    try:
        os.unlink(path)
    except OSError:
        pass

