"""numpy arrays and torch tensors as kvs_array_t views.

An input (a value to init or push) that is C-contiguous passes as it is;
any other is copied first. An output (pull, pushpull, row_sparse_pull)
must be writable and C-contiguous, as the library writes into it. A CUDA
tensor passes as a device array (KVS_CUDA of its device) that the library
reads or writes on its GPU; other devices are refused.
"""

import ctypes
import sys

import numpy as np

from . import _lib

_NUMPY_CODES = {
    np.dtype(np.float32): _lib.FLOAT32, np.dtype(np.float64): _lib.FLOAT64,
    np.dtype(np.float16): _lib.FLOAT16, np.dtype(np.int32): _lib.INT32,
    np.dtype(np.int64): _lib.INT64, np.dtype(np.uint8): _lib.UINT8,
}
_NUMPY_DTYPES = {code: dt for dt, code in _NUMPY_CODES.items()}
_TYPESTR_CODES = {dt.str: code for dt, code in _NUMPY_CODES.items()}   # '<f4': FLOAT32, ...
_ZEROS = (0,) * _lib.MAX_NDIM

_torch = None            # the torch module, once a tensor has been seen
_torch_codes = None


def _torch_module():
    """torch, if a tensor could have been passed (never imports it itself)."""
    global _torch, _torch_codes
    if _torch is None and 'torch' in sys.modules:
        _torch = sys.modules['torch']
        t = _torch
        _torch_codes = {t.float32: _lib.FLOAT32, t.float64: _lib.FLOAT64,
                        t.float16: _lib.FLOAT16, t.bfloat16: _lib.BFLOAT16,
                        t.int32: _lib.INT32, t.int64: _lib.INT64, t.uint8: _lib.UINT8}
    return _torch


def is_array(obj):
    """True for what the API takes as one value: an ndarray or a tensor."""
    if isinstance(obj, np.ndarray):
        return True
    t = _torch_module()
    return t is not None and isinstance(obj, t.Tensor)


def _bad_type(obj, what):
    return TypeError('%s must be a numpy.ndarray or a torch.Tensor, not %s'
                     % (what, type(obj).__name__))


def _check_shape(shape, what):
    if len(shape) > _lib.MAX_NDIM:
        raise ValueError('%s has %d dimensions; kvs takes at most %d'
                         % (what, len(shape), _lib.MAX_NDIM))


def describe(obj, writable, what):
    """(data pointer, dtype code, shape, the object to keep alive, device
    code) of obj.

    An input that is not C-contiguous is copied (the copy is what must be
    kept alive); an output must be written in place, so it is refused.
    """
    if isinstance(obj, np.ndarray):
        # One look at __array_interface__ gives pointer, writability, dtype
        # and shape; strides None means C-contiguous.
        ai = obj.__array_interface__
        code = _TYPESTR_CODES.get(ai['typestr'])
        if code is None:
            raise TypeError('%s has dtype %s; kvs takes %s'
                            % (what, obj.dtype, ', '.join(_lib.DTYPE_NAMES)))
        ptr, readonly = ai['data']
        if ai['strides'] is not None and not obj.flags.c_contiguous:
            if writable:
                raise ValueError('%s must be C-contiguous: kvs writes into it in place' % what)
            obj = np.ascontiguousarray(obj)
            ptr, readonly = obj.__array_interface__['data']
        if writable and readonly:
            raise ValueError('%s is read-only: kvs writes into it' % what)
        shape = ai['shape']
        if len(shape) > _lib.MAX_NDIM:
            _check_shape(shape, what)
        return ptr, code, shape, obj, _lib.HOST
    t = _torch_module()
    if t is None or not isinstance(obj, t.Tensor):
        raise _bad_type(obj, what)
    if obj.layout != t.strided:
        raise TypeError('%s is a %s tensor: kvs takes dense tensors here (sparse COO tensors '
                        'are values of init, push and pushpull)' % (what, obj.layout))
    place = obj.device
    if place.type == 'cuda':
        device = _lib.cuda(place.index)
    elif place.type == 'cpu':
        device = _lib.HOST
    else:
        raise ValueError('%s is a %s tensor: kvs takes CPU and CUDA tensors'
                         % (what, place.type))
    code = _torch_codes.get(obj.dtype)
    if code is None:
        raise TypeError('%s has dtype %s; kvs takes %s'
                        % (what, obj.dtype, ', '.join(_lib.DTYPE_NAMES)))
    if obj.requires_grad:
        obj = obj.detach()
    if not obj.is_contiguous():
        if writable:
            raise ValueError('%s must be contiguous: kvs writes into it in place' % what)
        obj = obj.contiguous()
    _check_shape(obj.shape, what)
    return obj.data_ptr(), code, tuple(obj.shape), obj, device


def pack_array(buf, index, ptr, code, shape, device=_lib.HOST):
    """Writes one kvs_array_t at position index of buf."""
    _lib.ARRAY_STRUCT.pack_into(buf, index * _lib.ARRAY_STRUCT.size, ptr, code, len(shape),
                                *(tuple(shape) + _ZEROS[len(shape):]), device)


def device_name(device):
    """How a message names a device code."""
    return 'the host' if device == _lib.HOST else 'CUDA device %d' % (device - 1)


def numpy_dtype(code):
    """The numpy dtype of a kvs dtype code (bfloat16 has none)."""
    dt = _NUMPY_DTYPES.get(code)
    if dt is None:
        raise TypeError('numpy has no %s: use torch tensors for it' % _lib.DTYPE_NAMES[code])
    return dt


def dtype_code(dtype):
    """The kvs code of a dtype given as numpy would take it, or 'bfloat16'."""
    if isinstance(dtype, str) and dtype == 'bfloat16':
        return _lib.BFLOAT16
    t = _torch_module()
    if t is not None and isinstance(dtype, t.dtype):
        code = _torch_codes.get(dtype)
    else:
        try:
            code = _NUMPY_CODES.get(np.dtype(dtype))
        except TypeError:
            raise TypeError('unknown dtype %r' % (dtype,)) from None
    if code is None:
        raise TypeError('dtype %s is not one of %s' % (dtype, ', '.join(_lib.DTYPE_NAMES)))
    return code


def from_memory(ptr, code, shape, readonly, owner=None):
    """A numpy array (or, for bfloat16, a torch tensor) over memory at ptr.

    owner, when given, is kept alive as long as the array is (and any
    array or tensor made from it): it is the base's."""
    size = 1
    for extent in shape:
        size *= extent
    if code == _lib.BFLOAT16:
        t = _torch_module()
        if t is None:
            raise TypeError('bfloat16 values need torch')
        dt, torch_dtype = np.dtype(np.uint8), t.bfloat16
        nbytes = size * 2
    else:
        dt, torch_dtype = numpy_dtype(code), None
        nbytes = size * dt.itemsize
    if nbytes == 0:
        out = np.empty(shape if torch_dtype is None else (0,), dt)
    else:
        mem = (ctypes.c_char * nbytes).from_address(ptr)
        if owner is not None:
            mem._kvs_owner = owner
        out = np.frombuffer(mem, dt)
        if torch_dtype is None:
            out = out.reshape(shape)
    if torch_dtype is not None:
        return _torch.from_numpy(out).view(torch_dtype).reshape(shape)
    if readonly:
        out.flags.writeable = False
    return out
