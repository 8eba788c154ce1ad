"""kvs.RowSparse, and what the API takes as a row-sparse value.

A row-sparse value is the rows `indices` of a value of full shape `shape`,
held as `data` of shape (len(indices),) + shape[1:] (kvs.h,
kvs_row_sparse_t). This file owns the Python form of it: checking one,
making one of a torch sparse COO tensor without densifying it, its dense
form, and packing it as a kvs_row_sparse_t entry of a C list. It never
calls the store; kvstore.py does.
"""

import numbers

import numpy as np

from . import _arrays, _lib


def _shape_of(shape):
    if isinstance(shape, numbers.Integral) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        shape = tuple(shape)
    except TypeError:
        raise TypeError('shape must be a tuple of ints, not %s' % type(shape).__name__) from None
    for extent in shape:
        if isinstance(extent, bool) or not isinstance(extent, numbers.Integral):
            raise TypeError('shape must hold ints, not %s' % type(extent).__name__)
        if extent < 0:
            raise ValueError('shape %s has a negative extent' % (shape,))
    if not 1 <= len(shape) <= _lib.MAX_NDIM:
        raise ValueError('a row-sparse value has 1 to %d dimensions, not %d (shape %s)'
                         % (_lib.MAX_NDIM, len(shape), shape))
    return tuple(int(e) for e in shape)


def _is_torch(obj):
    t = _arrays._torch_module()
    return t is not None and isinstance(obj, t.Tensor)


def _indices_of(indices, torch_out):
    """indices as a 1-D int64 array: a torch tensor when torch_out, else numpy."""
    if _is_torch(indices):
        t = _arrays._torch_module()
        if indices.layout != t.strided:
            raise TypeError('indices must be a dense tensor, not a %s one' % indices.layout)
        if indices.is_floating_point() or indices.is_complex() or indices.dtype == t.bool:
            raise TypeError('indices must be integers, not %s' % indices.dtype)
        if indices.dim() != 1:
            raise ValueError('indices must be 1-D, not of shape %s' % (tuple(indices.shape),))
        indices = indices.detach().to('cpu', t.int64)
        return indices if torch_out else indices.numpy()
    if isinstance(indices, np.ndarray):
        arr = indices
    elif isinstance(indices, (list, tuple, range)):
        arr = np.asarray(indices) if len(indices) else np.zeros(0, np.int64)
    else:
        raise TypeError('indices must be a numpy array, a torch tensor or a list of ints, not %s'
                        % type(indices).__name__)
    if arr.dtype.kind not in 'iu':
        raise TypeError('indices must be integers, not %s' % arr.dtype)
    if arr.ndim != 1:
        raise ValueError('indices must be 1-D, not of shape %s' % (arr.shape,))
    if arr.dtype.kind == 'u' and arr.size and arr.max() >= 2**63:
        raise ValueError('indices hold %d, beyond int64' % arr.max())
    arr = np.ascontiguousarray(arr, np.int64)
    if torch_out:
        return _arrays._torch_module().from_numpy(arr)
    return arr


class RowSparse:
    """A row-sparse value: the rows `indices` of a value of shape `shape`.

    data: a numpy array or a CPU torch tensor of shape (len(indices),) +
    shape[1:], row j being row indices[j] of the whole; its dtype is the
    value's. indices: 1-D integers in [0, shape[0]) (a numpy array, a
    torch tensor or a list), unsorted and repeated as you like: repeats
    are summed (by todense(), and by the store). shape: the whole value's
    shape, 1 to 8 dimensions. An empty value (no indices) is valid.

    .indices is int64, a torch tensor when data is one, else numpy; .data
    is kept as given. Bad arguments raise TypeError or ValueError.
    """

    __slots__ = ('data', 'indices', 'shape')

    def __init__(self, data, indices, shape):
        shape = _shape_of(shape)
        torch_data = _is_torch(data)
        if torch_data:
            t = _arrays._torch_module()
            if data.layout != t.strided:
                raise TypeError('data must be a dense tensor, not a %s one (a sparse COO '
                                'tensor is taken by kv.push as it is)' % data.layout)
            if data.device.type != 'cpu':
                raise ValueError('data is on %s: row-sparse values live on the host'
                                 % data.device)
            if data.requires_grad:
                data = data.detach()
        elif not isinstance(data, np.ndarray):
            raise TypeError('data must be a numpy.ndarray or a torch.Tensor, not %s'
                            % type(data).__name__)
        _arrays.dtype_code(data.dtype)          # a dtype kvs takes, or TypeError
        indices = _indices_of(indices, torch_data)
        nnz = len(indices)
        want = (nnz,) + shape[1:]
        if tuple(data.shape) != want:
            raise ValueError('data has shape %s; %d indices of a value of shape %s need data '
                             'of shape %s' % (tuple(data.shape), nnz, shape, want))
        if nnz:
            ids = indices.numpy() if torch_data else indices
            bad = np.flatnonzero((ids < 0) | (ids >= shape[0]))
            if bad.size:
                raise ValueError('indices[%d] is %d, outside [0, %d) of shape %s'
                                 % (bad[0], ids[bad[0]], shape[0], shape))
        self.data, self.indices, self.shape = data, indices, shape

    @classmethod
    def _trusted(cls, data, indices, shape):
        """One made of parts known to be right (a pull's result), unchecked."""
        self = cls.__new__(cls)
        self.data, self.indices, self.shape = data, indices, shape
        return self

    @property
    def dtype(self):
        """data's dtype (numpy's or torch's)."""
        return self.data.dtype

    @property
    def nnz(self):
        """The number of rows held (repeats counted)."""
        return len(self.indices)

    @property
    def ndim(self):
        return len(self.shape)

    def todense(self):
        """The whole value: rows not held are zero, repeated rows summed. A
        numpy array, or a torch tensor when data is one."""
        if _is_torch(self.data):
            t = _arrays._torch_module()
            out = t.zeros(self.shape, dtype=self.data.dtype)
            if self.nnz:
                if self.data.dtype in (t.float16, t.bfloat16):   # no CPU index_add_ there
                    out = out.float().index_add_(0, self.indices, self.data.float())
                    return out.to(self.data.dtype)
                out.index_add_(0, self.indices, self.data)
            return out
        out = np.zeros(self.shape, self.data.dtype)
        np.add.at(out, self.indices, self.data)
        return out

    def __repr__(self):
        return 'kvs.RowSparse(shape=%s, nnz=%d, dtype=%s)' % (self.shape, self.nnz, self.dtype)


def is_sparse(obj):
    """True for what the API takes as a row-sparse value: a RowSparse or a
    torch sparse COO tensor."""
    if isinstance(obj, RowSparse):
        return True
    return _is_torch(obj) and obj.layout == _arrays._torch_module().sparse_coo


def from_torch(tensor):
    """The RowSparse of a torch sparse COO tensor, coalesced or not, without
    densifying it: its entries' first indices are the rows. A tensor of
    one sparse dimension (an embedding's gradient) gives its indices and
    values as they are; one of more sparse dimensions has its entries
    scattered into the rows they fall in."""
    t = _arrays._torch_module()
    if tensor.device.type != 'cpu':
        raise ValueError('a sparse tensor on %s: row-sparse values live on the host'
                         % tensor.device)
    if tensor.requires_grad:
        tensor = tensor.detach()
    shape = tuple(tensor.shape)
    if not shape:
        raise ValueError('a sparse tensor of no dimensions is not row-sparse')
    idx, vals = tensor._indices(), tensor._values()       # uncoalesced ones too
    if tensor.sparse_dim() == 1:
        return RowSparse._trusted(vals.contiguous(), idx[0].contiguous(), shape)
    rows, where = t.unique(idx[0], return_inverse=True)
    data = t.zeros((len(rows),) + shape[1:], dtype=vals.dtype)
    data.index_put_((where,) + tuple(idx[1:]), vals, accumulate=True)
    return RowSparse._trusted(data, rows, shape)


def as_row_sparse(obj):
    """A RowSparse of a value: a RowSparse, a torch sparse COO tensor, or a
    dense array (all of its rows)."""
    if isinstance(obj, RowSparse):
        return obj
    if is_sparse(obj):
        return from_torch(obj)
    if _is_torch(obj):
        t = _arrays._torch_module()
        if obj.dim() == 0:
            raise ValueError('a value of no dimensions has no rows')
        return RowSparse._trusted(obj, t.arange(obj.shape[0]), tuple(obj.shape))
    if not isinstance(obj, np.ndarray):
        raise _arrays._bad_type(obj, 'value')
    if obj.ndim == 0:
        raise ValueError('a value of no dimensions has no rows')
    return RowSparse._trusted(obj, np.arange(obj.shape[0], dtype=np.int64), obj.shape)


def merge(values):
    """One RowSparse holding the rows of several of one shape (repeats are
    the store's to sum)."""
    if len(values) == 1:
        return values[0]
    first = values[0]
    for v in values[1:]:
        if tuple(v.shape) != tuple(first.shape):
            raise ValueError('values of one key of shapes %s and %s' % (first.shape, v.shape))
    if any(_is_torch(v.data) for v in values):
        t = _arrays._torch_module()
        as_t = [v.data if _is_torch(v.data) else t.from_numpy(v.data) for v in values]
        ids = [v.indices if _is_torch(v.indices) else t.from_numpy(v.indices) for v in values]
        return RowSparse._trusted(t.cat(as_t), t.cat(ids), first.shape)
    return RowSparse._trusted(np.concatenate([v.data for v in values]),
                              np.concatenate([v.indices for v in values]), first.shape)


def pack(buf, i, value, keep, what):
    """Writes value (a RowSparse) as entry i of a kvs_row_sparse_t list;
    what it points into goes to keep."""
    ptr, code, _, held, device = _arrays.describe(value.data, False, what)
    keep.append(held)
    if device != _lib.HOST:
        raise ValueError('%s is on %s: row-sparse values live on the host'
                         % (what, _arrays.device_name(device)))
    ids = value.indices
    if _is_torch(ids):
        ids = ids.numpy()
    ids = np.ascontiguousarray(ids, np.int64)
    keep.append(ids)
    shape = tuple(value.shape)
    _lib.ROWS_STRUCT.pack_into(buf, i * _lib.ROWS_STRUCT.size, ptr, ids.ctypes.data, len(ids),
                               code, len(shape), *(shape + _arrays._ZEROS[len(shape):]),
                               _lib.HOST)
    return code


def pack_room(buf, i, code, shape, rows, torch_out, keep):
    """Entry i of a pull's kvs_row_sparse_t outs: room for rows rows of a
    key of dtype code and shape; returns (data, indices), the arrays the
    C call fills (trim them to the nnz it sets)."""
    if code == _lib.BFLOAT16:
        torch_out = True                   # numpy has no bfloat16
        t = _arrays._torch_module()
        data = t.empty((rows,) + tuple(shape[1:]), dtype=t.bfloat16)
        ptr = data.data_ptr()
    else:
        data = np.empty((rows,) + tuple(shape[1:]), _arrays.numpy_dtype(code))
        ptr = data.ctypes.data
        if torch_out:
            data = _arrays._torch_module().from_numpy(data)
    ids = np.empty(rows, np.int64)
    keep.append(data)
    keep.append(ids)
    _lib.ROWS_STRUCT.pack_into(buf, i * _lib.ROWS_STRUCT.size, ptr, ids.ctypes.data, rows,
                               code, len(shape),
                               *(tuple(shape) + _arrays._ZEROS[len(shape):]), _lib.HOST)
    return data, (_arrays._torch_module().from_numpy(ids) if torch_out else ids)


def nnz_of(buf, i):
    """The nnz a C call set in entry i of a kvs_row_sparse_t list."""
    return _lib.ROWS_NNZ_STRUCT.unpack_from(buf, i * _lib.ROWS_STRUCT.size + _lib.ROWS_NNZ)[0]
