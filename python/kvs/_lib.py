"""libkvs through ctypes: loading the library, its structures, its errors.

Everything here mirrors include/kvs.h; nothing holds store logic. The
library is found, in order, at $KVS_LIBRARY, in the package itself (a
wheel's, kvs/lib/libkvs.so.0: _package.py), at the path `make install`
recorded in _paths.py, then wherever the dynamic linker finds libkvs.so.0.
ctypes.CDLL releases the GIL during every foreign call.
"""

import ctypes
import ctypes.util
import os
import struct

from . import _package

MAX_NDIM = 8
MAX_KEY_LEN = 255

# kvs_dtype_t, in the order of the enum.
FLOAT32, FLOAT64, FLOAT16, BFLOAT16, INT32, INT64, UINT8 = range(7)
HOST = 0                      # kvs_array_t.device: KVS_HOST, or KVS_CUDA(i) = i + 1


def cuda(index):
    """KVS_CUDA(index): the device code of CUDA device index."""
    return index + 1
DTYPE_NAMES = ('float32', 'float64', 'float16', 'bfloat16', 'int32', 'int64', 'uint8')


class Key(ctypes.Structure):
    """kvs_key_t"""
    _fields_ = [('id', ctypes.c_int64), ('name', ctypes.c_char_p)]


class Array(ctypes.Structure):
    """kvs_array_t"""
    _fields_ = [('data', ctypes.c_void_p), ('dtype', ctypes.c_int), ('ndim', ctypes.c_int),
                ('shape', ctypes.c_int64 * MAX_NDIM), ('device', ctypes.c_int)]


class RowSparse(ctypes.Structure):
    """kvs_row_sparse_t"""
    _fields_ = [('data', ctypes.c_void_p), ('indices', ctypes.c_void_p), ('nnz', ctypes.c_int64),
                ('dtype', ctypes.c_int), ('ndim', ctypes.c_int),
                ('shape', ctypes.c_int64 * MAX_NDIM), ('device', ctypes.c_int)]


# The same layouts for struct.pack_into, which fills a list of n entries
# several times faster than setting the fields of ctypes structures.
KEY_STRUCT = struct.Struct('@qP')
ARRAY_STRUCT = struct.Struct('@Pii%dqi4x' % MAX_NDIM)
ROWS_STRUCT = struct.Struct('@PPqii%dqi4x' % MAX_NDIM)
ROWS_NNZ = RowSparse.nnz.offset            # where a pull's out gets its row count
ROWS_NNZ_STRUCT = struct.Struct('@q')
assert KEY_STRUCT.size == ctypes.sizeof(Key)
assert ROWS_STRUCT.size == ctypes.sizeof(RowSparse)
assert ARRAY_STRUCT.size == ctypes.sizeof(Array)
assert Array.device.offset == ARRAY_STRUCT.size - 8

UPDATER = ctypes.CFUNCTYPE(ctypes.c_int, Key, ctypes.POINTER(Array), ctypes.POINTER(Array),
                           ctypes.c_void_p)

def _candidates():
    env = os.environ.get('KVS_LIBRARY')
    if env:
        return [env]
    found = []
    if os.path.exists(_package.LIBRARY):
        found.append(_package.LIBRARY)
    try:
        from . import _paths
        found.append(_paths.LIBRARY)
    except ImportError:
        pass
    found.append('libkvs.so.0')
    name = ctypes.util.find_library('kvs')
    if name:
        found.append(name)
    return found


def _load():
    tried = []
    for path in _candidates():
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            tried.append('%s (%s)' % (path, e))
    raise ImportError('kvs: cannot load libkvs; tried ' + '; '.join(tried) +
                      '. Install kvs (make install) or set KVS_LIBRARY to the library\'s path.')


_package.set_environment()
lib = _load()

_P = ctypes.c_void_p
_I = ctypes.c_int
_S = ctypes.c_char_p
_SIGS = {
    'kvs_version': (_S, [_P, _P, _P]),
    'kvs_strerror': (_S, [_I]),
    'kvs_err_name': (_S, [_I]),
    'kvs_create': (_I, [_S, ctypes.POINTER(_P)]),
    'kvs_close': (None, [_P]),
    'kvs_set_option': (_I, [_P, _I, ctypes.c_int64]),
    'kvs_get_option': (_I, [_P, _I, ctypes.POINTER(ctypes.c_int64)]),
    'kvs_type': (_S, [_P]),
    'kvs_rank': (_I, [_P]),
    'kvs_num_workers': (_I, [_P]),
    'kvs_last_error': (_S, [_P]),
    'kvs_init': (_I, [_P, _I, _P, _P]),
    'kvs_push': (_I, [_P, _I, _P, _P, _I]),
    'kvs_pull': (_I, [_P, _I, _P, _P, _I]),
    'kvs_pushpull': (_I, [_P, _I, _P, _P, _P, _I]),
    'kvs_row_sparse_pull': (_I, [_P, _I, _P, _P, _P, _I]),
    'kvs_array_alloc': (_I, [_P, _I, _I, _P, ctypes.POINTER(Array)]),
    'kvs_array_free': (_I, [_P, ctypes.POINTER(Array)]),
    'kvs_pull_view': (_I, [_P, _I, _P, _P, _I]),
    'kvs_mem_hold': (_I, [_P, ctypes.POINTER(_P)]),
    'kvs_mem_release': (_I, [_P]),
    'kvs_set_updater': (_I, [_P, UPDATER, _P]),
    'kvs_set_optimizer': (_I, [_P, _S]),
    'kvs_set_gradient_compression': (_I, [_P, _S]),
    'kvs_save_optimizer_states': (_I, [_P, _S, _I]),
    'kvs_load_optimizer_states': (_I, [_P, _S]),
    'kvs_barrier': (_I, [_P]),
    'kvs_commit': (_I, [_P, ctypes.c_int64]),
    'kvs_resume_step': (_I, [_P, ctypes.POINTER(ctypes.c_int64)]),
    'kvs_init_row_sparse': (_I, [_P, _I, _P, _P]),
    'kvs_push_row_sparse': (_I, [_P, _I, _P, _P, _I]),
    'kvs_pull_rows': (_I, [_P, _I, _P, _P, _P, _I]),
    'kvs_pushpull_row_sparse': (_I, [_P, _I, _P, _P, _P, _P, _I]),
    'kvs_timeline_start': (_I, [_S]),
    'kvs_timeline_stop': (_I, []),
}
# Calls a library older than this package lacks: they fail when called,
# with a reason, instead of the import.
_NEWER = ('kvs_init_row_sparse', 'kvs_push_row_sparse', 'kvs_pull_rows',
          'kvs_pushpull_row_sparse', 'kvs_commit', 'kvs_resume_step', 'kvs_mem_hold',
          'kvs_mem_release')


class _Missing:
    def __init__(self, name):
        self.name = name

    def __call__(self, *args):
        raise KVSError(next(c for c, n in ERRORS.items() if n == 'KVS_ENOTSUP'),
                       'the libkvs loaded (%s) has no %s: it is older than this package'
                       % (getattr(lib, '_name', '?'), self.name))


for _name, (_res, _args) in _SIGS.items():
    try:
        _fn = getattr(lib, _name)
    except AttributeError:
        if _name not in _NEWER:
            raise
        setattr(lib, _name, _Missing(_name))
        continue
    _fn.restype = _res
    _fn.argtypes = _args


# The library's own codes and names (KVS_ERRNO_MAP in kvs.h), asked of it:
# {-30001: 'KVS_EBADARG', ...}.
ERRORS = {code: name for code, name in
          ((c, lib.kvs_err_name(c).decode()) for c in range(-30001, -31000, -1))
          if name.startswith('KVS_E')}
EUPDATER = next(code for code, name in ERRORS.items() if name == 'KVS_EUPDATER')
# KVS_ERESTART, which a library older than this package does not know.
ERESTART = next((code for code, name in ERRORS.items() if name == 'KVS_ERESTART'), -30019)
EPEERDEAD = next(code for code, name in ERRORS.items() if name == 'KVS_EPEERDEAD')


def version():
    """The library's version string, "kvs MAJOR.MINOR.PATCH"."""
    return lib.kvs_version(None, None, None).decode()


class KVSError(RuntimeError):
    """A failed call of the C library.

    .code is the negative code (kvs.EBADARG, ... or a negated errno value),
    .name its symbolic name ('KVS_ESHAPE', 'ENOMEM'), .detail the detail
    message of kvs_last_error; str() gives all three.
    """

    def __init__(self, code, detail=''):
        self.code = code
        self.name = lib.kvs_err_name(code).decode()
        self.detail = detail
        text = '%s: %s' % (self.name, lib.kvs_strerror(code).decode())
        if detail:
            text += ': ' + detail
        super().__init__(text)


class Restart(KVSError):
    """The job rolled back to its last commit (KVS_ERESTART): a worker or
    kvsd died and kvsrun restarted it; the store now holds the last
    commit's snapshot (or nothing, before the first commit). Any call of a
    dist store may raise it. The handle stays valid: call
    KVStore.resume_step() (or kvs.torch.Trainer.resume()), pull the weights
    (init them at -1), and continue from the step it gives + 1."""


class PeerDead(KVSError):
    """A worker of the job died and no restart was allowed
    (KVS_EPEERDEAD): every round that needed it failed, and every later
    call of a dist store fails the same way. The job cannot go on; close
    the store and exit (kvsrun --restarts N, with kv.commit, makes a death
    a Restart instead)."""


_CLASSES = {ERESTART: Restart, EPEERDEAD: PeerDead}


def error(code, detail=''):
    """The exception of a failed call's code: Restart for KVS_ERESTART,
    PeerDead for KVS_EPEERDEAD, else KVSError."""
    return _CLASSES.get(code, KVSError)(code, detail)


def fail(handle, code):
    """Raises the KVSError (a Restart or PeerDead where the code says so)
    of code, with the detail of the handle's last error."""
    detail = lib.kvs_last_error(handle)
    raise error(code, detail.decode('utf-8', 'replace') if detail else '')
