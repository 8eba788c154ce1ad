"""kvs: a parameter store for data-parallel training, with MXNet's kv API.

    import numpy as np, kvs
    kv = kvs.create('local')          # or 'dist_sync', 'dist_async' under kvsrun
    kv.init(3, np.ones((2, 3)))
    kv.push(3, [np.ones((2, 3))] * 4)  # values of one key are summed
    print(kv.pull(3))                  # [[4. 4. 4.] [4. 4. 4.]]

kvs.create and KVStore follow mxnet.kvstore; kvs.RowSparse is a
row-sparse value (some rows of a table; torch sparse COO tensors are
taken as well); kvs.optimizer has SGD and Adam; kvs.torch has a Trainer
for PyTorch models. C failures raise KVSError,
which carries the code (kvs.ESHAPE, ...), its name and the detail;
kvs.Restart, a KVSError, says that the job rolled back to its last commit
(kv.commit(step), kv.resume_step(): see doc/python.md); kvs.PeerDead, one
too, that a worker died and the job cannot go on.
kvs.timeline(path) records this process's calls for a trace viewer.
kvs.__version__ is the package's version, kvs.version() the library's.
"""

import contextlib
import os

from . import _package, optimizer
from ._lib import ERRORS as _ERRORS
from ._lib import KVSError, PeerDead, Restart, fail, lib, version
from ._rows import RowSparse
from .kvstore import KVStore

__all__ = ['create', 'KVStore', 'KVSError', 'PeerDead', 'Restart', 'RowSparse', 'optimizer',
           'timeline', 'version']

__version__ = _package.version()

# The error codes of kvs.h: kvs.EBADARG, kvs.ESHAPE, ...
globals().update({_name[4:]: _code for _code, _name in _ERRORS.items()})


def create(name='local'):
    """Creates a store: 'local' (in this process; also MXNet's
    'local_update_cpu', 'local_allreduce_cpu'), 'device' and 'nccl' (in
    this process, values on GPUs where there are any), 'dist_sync',
    'dist_device_sync' (MXNet's name for it) or 'dist_async' (shared by the
    workers of a job that kvsrun started). Arrays are numpy arrays or torch
    tensors, CPU or CUDA."""
    return KVStore(name)


@contextlib.contextmanager
def timeline(path):
    """Records this process's calls, and their phases (copies, waits for the
    other workers, sums), while the block runs, and writes them to path when
    it ends, as a Chrome trace-event JSON file (open it in Perfetto or
    chrome://tracing):

        with kvs.timeline('step.json'):
            for batch in loader:
                ...

    The file is written even when the block raises. For a whole job, kvsd's
    phases and every worker in one file, run it with KVS_TIMELINE=FILE (or
    kvsrun --timeline FILE) instead: the library reads that variable itself,
    in Python as in C, and then a kvs.timeline block raises KVSError
    (EBADARG), as does one inside another."""
    rc = lib.kvs_timeline_start(os.fsencode(os.fspath(path)))
    if rc:
        fail(None, rc)
    ok = False
    try:
        yield path
        ok = True
    finally:
        rc = lib.kvs_timeline_stop()
        if rc and ok:
            fail(None, rc)
