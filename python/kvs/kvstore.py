"""KVStore: MXNet's `kv` API over libkvs.

Names, argument forms and behaviours are those of mxnet.kvstore. Every
data method makes one C list call: the (key, value) forms are flattened
into a list of keys and a list of arrays, as MXNet's _ctype_key_value does.
"""

import ctypes
import numbers
import os
import threading
import weakref

import numpy as np

from . import _arrays, _lib, _rows


_KEY_TYPES = (int, str)             # the types of keys the short ways take


def _is_key(key):
    return isinstance(key, (str, numbers.Integral)) and not isinstance(key, bool)


def _flatten(keys, vals, what, sparse=False):
    """[(key, value)] of MXNet's forms: a key and a value or a list of values,
    or a list of keys with a list of such values. sparse: values may be
    RowSparse too (torch sparse tensors are tensors, so always pass)."""
    if isinstance(keys, (list, tuple)):
        if not isinstance(vals, (list, tuple)):
            raise TypeError('%s for a list of keys must be a list, not %s'
                            % (what, type(vals).__name__))
        if len(keys) != len(vals):
            raise ValueError('%d keys but %d %s' % (len(keys), len(vals), what))
        pairs = []
        for key, val in zip(keys, vals):
            if isinstance(key, (list, tuple)):
                raise TypeError('unexpected type for keys: ' + str(type(key)))
            pairs += _flatten(key, val, what, sparse)
        return pairs
    if not _is_key(keys):
        raise TypeError('unexpected type for keys: ' + str(type(keys)))
    if _arrays.is_array(vals) or (sparse and isinstance(vals, _rows.RowSparse)):
        return [(keys, vals)]
    if not isinstance(vals, (list, tuple)):
        raise _bad_value(vals, what, sparse)
    for val in vals:
        if not (_arrays.is_array(val) or (sparse and isinstance(val, _rows.RowSparse))):
            raise _bad_value(val, 'each of the ' + what, sparse)
    return [(keys, val) for val in vals]


def _bad_value(obj, what, sparse):
    if not sparse:
        return _arrays._bad_type(obj, what)
    return TypeError('%s must be a numpy.ndarray or a torch.Tensor (dense or sparse COO), or a '
                     'kvs.RowSparse, not %s' % (what, type(obj).__name__))


def _split(pairs):
    """(dense pairs, row-sparse pairs) of flat (key, value) pairs, each in
    their order; a row-sparse pair's value becomes a RowSparse. A key with
    values of both kinds has its dense ones taken as row-sparse values of
    all their rows (the same update), so that its values stay in one call."""
    sparse_keys = {k for k, v in pairs if _rows.is_sparse(v)}
    if not sparse_keys:
        return pairs, []
    dense, rows = [], []
    for k, v in pairs:
        if k in sparse_keys:
            rows.append((k, _rows.as_row_sparse(v)))
        else:
            dense.append((k, v))
    return dense, rows


def _keys_of(keys):
    """The flat list of keys of a key argument (an int, a str, or a list)."""
    if isinstance(keys, (list, tuple)):
        for key in keys:
            if not _is_key(key):
                raise TypeError('unexpected type for keys: ' + str(type(key)))
        return list(keys)
    if not _is_key(keys):
        raise TypeError('unexpected type for keys: ' + str(type(keys)))
    return [keys]


def _one_kind(pairs):
    """MXNet's check: the keys of one call are all ints or all strings."""
    if pairs:
        is_str = isinstance(pairs[0][0], str)
        for key, _ in pairs:
            if isinstance(key, str) != is_str:
                raise TypeError('inconsistent types of keys detected.')
    return pairs


def _group(pairs):
    """{key: [arrays]} in order of each key's first appearance."""
    groups = {}
    for key, arr in pairs:
        groups.setdefault(key, []).append(arr)
    return groups


def _per_key(key, arg):
    """[(key, arg of that key)] of a key argument: one entry per key."""
    if isinstance(key, (list, tuple)):
        if not isinstance(arg, (list, tuple)) or len(arg) != len(key):
            raise ValueError('a list of %d keys needs a list of %d values' % (len(key), len(key)))
        return list(zip(key, arg))
    return [(key, arg)]


def _row_ids(obj):
    """Row ids as a 1-D int64 numpy array (integral values of any dtype)."""
    if not _arrays.is_array(obj):
        raise TypeError('row_ids must be numpy arrays or torch tensors (or a list of them), '
                        'not %s' % type(obj).__name__)
    ids = np.asarray(obj.cpu() if not isinstance(obj, np.ndarray) else obj)
    if ids.ndim != 1:
        raise ValueError('row_ids must be 1-D, not of shape %s' % (ids.shape,))
    if ids.dtype != np.int64:
        as_int = ids.astype(np.int64)
        if not np.array_equal(as_int, ids):
            raise ValueError('row_ids must be whole numbers')
        ids = as_int
    return np.ascontiguousarray(ids)


def _copy_into(dst, src):
    if isinstance(dst, np.ndarray):
        np.copyto(dst, np.asarray(src))
    else:
        t = _arrays._torch_module()
        dst.copy_(t.from_numpy(src) if isinstance(src, np.ndarray) else src)


class _Lists:
    """The C lists of one call: n keys, n arrays, and n outs when asked."""

    __slots__ = ('n', 'keys', 'arrays', 'outs', 'keep', 'kinds')

    def __init__(self, n, with_outs=False):
        self.n = n
        self.keys = ctypes.create_string_buffer(_lib.KEY_STRUCT.size * n)
        self.arrays = ctypes.create_string_buffer(_lib.ARRAY_STRUCT.size * n)
        self.outs = ctypes.create_string_buffer(_lib.ARRAY_STRUCT.size * n) if with_outs else None
        self.keep = []                # the arrays (and copies) the lists point into
        self.kinds = []               # (dtype code, shape) of each entry of arrays

    def put(self, buf, i, arr, writable, what):
        ptr, code, shape, keep, device = _arrays.describe(arr, writable, what)
        self.keep.append(keep)
        if buf is self.arrays:
            self.kinds.append((code, tuple(shape)))
        _arrays.pack_array(buf, i, ptr, code, shape, device)


class _RowLists:
    """The C lists of one row-sparse call: n keys, n kvs_row_sparse_t values."""

    __slots__ = ('n', 'keys', 'values', 'keep', 'kinds')

    def __init__(self, n):
        self.n = n
        self.keys = ctypes.create_string_buffer(_lib.KEY_STRUCT.size * n)
        self.values = ctypes.create_string_buffer(_lib.ROWS_STRUCT.size * n)
        self.keep = []
        self.kinds = []               # (dtype code, full shape) of each value


def _pack_key(keys, i, key, names):
    """Packs key as entry i of the C list keys; names caches string keys' bytes."""
    if isinstance(key, str):
        entry = names.get(key)
        if entry is None:
            raw = key.encode()
            if len(raw) > _lib.MAX_KEY_LEN or b'\0' in raw:
                raise ValueError('key %r: a key is at most %d bytes of UTF-8, without NUL'
                                 % (key, _lib.MAX_KEY_LEN))
            entry = (raw, ctypes.cast(ctypes.c_char_p(raw), ctypes.c_void_p).value)
            names[key] = entry
        _lib.KEY_STRUCT.pack_into(keys, i * _lib.KEY_STRUCT.size, 0, entry[1])
    else:
        key = int(key)
        if not -2**63 <= key < 2**63:
            raise ValueError('key %d does not fit in 64 bits' % key)
        _lib.KEY_STRUCT.pack_into(keys, i * _lib.KEY_STRUCT.size, key, 0)


class KVStore:
    """A key-value store shared by the workers of a job (see kvs.create).

    Methods take MXNet's forms: a key (int or str) with a value or a list of
    values (several values of one key: pushes are summed, pulls fill each),
    or a list of keys with a list of such values. Values are numpy arrays or
    torch tensors, CPU or CUDA (a CUDA tensor is read and written on its
    GPU); inputs that are not C-contiguous are copied, outputs
    must be writable and C-contiguous. Failures of the C library raise
    KVSError (kvs.Restart when the job rolled back to its last commit:
    see commit and resume_step); wrong Python types raise TypeError and
    wrong values ValueError, before anything changes.
    """

    def __init__(self, name='local'):
        if not isinstance(name, str):
            raise TypeError('name must be a string')
        handle = ctypes.c_void_p()
        rc = _lib.lib.kvs_create(name.encode(), ctypes.byref(handle))
        if rc != 0:
            _lib.fail(None, rc)
        self._handle = handle.value
        self._known = {}              # key -> (dtype code, shape) of init() through this object
        self._names = {}              # str key -> (its bytes, their address)
        self._updater = None          # the Python function
        self._updater_c = None        # its C callback, kept alive while set
        self._local = threading.local()   # in_updater, updater_error: per calling thread
        self._unfreed = []            # buffers collected while an updater ran
        self._memory = None           # the _Memory arrays over buffers and views keep
        self._restarts = 0            # roll backs seen: calls that raised kvs.Restart

    # ---- the handle ---------------------------------------------------------

    @property
    def handle(self):
        """The C handle (a kvs_t *) as an int; ValueError once closed."""
        if self._handle is None:
            raise ValueError('the store is closed: its arrays of alloc() and pull_view() '
                             'keep their last values, but nothing reaches the store now')
        if self._updater is not None and getattr(self._local, 'in_updater', False):
            raise RuntimeError('an updater must not call the store it runs in')
        return self._handle

    def close(self):
        """Closes the store; a dist worker leaves its job. Arrays from
        alloc() and pull_view() (and tensors over them) stay valid: they
        keep the store's memory until the last of them is gone (see
        doc/python.md, "Arrays outlive the store"). A second close is a
        no-op."""
        handle, self._handle = getattr(self, '_handle', None), None
        if handle is not None:
            _lib.lib.kvs_close(handle)
        self._memory = None

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        if self._handle is None:
            return '<kvs.KVStore closed>'
        return '<kvs.KVStore %s, rank %d of %d>' % (self.type, self.rank, self.num_workers)

    @property
    def type(self):
        """The type name given to create()."""
        return _lib.lib.kvs_type(self.handle).decode()

    @property
    def rank(self):
        """This worker's rank in [0, num_workers)."""
        return _lib.lib.kvs_rank(self.handle)

    @property
    def num_workers(self):
        """The number of workers sharing the store."""
        return _lib.lib.kvs_num_workers(self.handle)

    def _check(self, rc):
        """Raises for a failed call: an updater's exception as it was raised."""
        if rc == 0:
            return
        exc = getattr(self._local, 'updater_error', None)
        if exc is not None:
            self._local.updater_error = None
            if rc == _lib.EUPDATER:
                raise exc
        if rc == _lib.ERESTART:
            self._restarts += 1
        _lib.fail(self._handle, rc)

    def _one(self, key, arr, writable, what):
        """The C lists of one key and one array: (keys, arrays, what to
        keep alive). The short way of the most common call."""
        keys = ctypes.create_string_buffer(_lib.KEY_STRUCT.size)
        arrays = ctypes.create_string_buffer(_lib.ARRAY_STRUCT.size)
        ptr, code, shape, keep, device = _arrays.describe(arr, writable, what)
        _pack_key(keys, 0, key, self._names)
        _arrays.pack_array(arrays, 0, ptr, code, shape, device)
        return keys, arrays, keep

    # ---- lists --------------------------------------------------------------

    def _lists(self, pairs, writable):
        """The C lists of (key, array) pairs: inputs, or outputs (writable)."""
        lists = _Lists(len(_one_kind(pairs)))
        for i, (key, arr) in enumerate(pairs):
            _pack_key(lists.keys, i, key, self._names)
            lists.put(lists.arrays, i, arr, writable, 'out' if writable else 'value')
        return lists

    def _row_lists(self, rpairs):
        """The C lists of (key, RowSparse) pairs."""
        lists = _RowLists(len(_one_kind(rpairs)))
        for i, (key, val) in enumerate(rpairs):
            _pack_key(lists.keys, i, key, self._names)
            code = _rows.pack(lists.values, i, val, lists.keep, 'value')
            lists.kinds.append((code, tuple(val.shape)))
        return lists

    def _kind(self, key):
        """(dtype code, shape) key was initialised with through this object."""
        try:
            return self._known[key]
        except KeyError:
            raise ValueError('key %r: its dtype and shape are known only for keys this store '
                             'object initialised; pass out' % (key,)) from None

    def _empty(self, key):
        """A new zero array of key's dtype and shape."""
        code, shape = self._kind(key)
        if code == _lib.BFLOAT16:
            t = _arrays._torch_module()
            return t.zeros(shape, dtype=t.bfloat16)
        return np.zeros(shape, _arrays.numpy_dtype(code))

    def _outs(self, key, out):
        """(flat pairs, what to return) of out, or of new arrays for None."""
        if out is not None:
            return _flatten(key, out, 'out'), out
        keys = _keys_of(key)
        made = [self._empty(k) for k in keys]
        return list(zip(keys, made)), (made if isinstance(key, (list, tuple)) else made[0])

    # ---- data calls ---------------------------------------------------------

    def init(self, key, value):
        """Initialises keys with values (the store keeps a copy). In dist
        types rank 0's value wins, and the call returns when every worker
        has made it. A row-sparse value (kvs.RowSparse, torch sparse COO
        tensor) gives its rows, every other row zero."""
        pairs, rpairs = _split(_flatten(key, value, 'value', sparse=True))
        # Both lists are made, and so checked, before either call.
        lists = self._lists(pairs, False) if pairs else None
        rlists = self._row_lists(rpairs) if rpairs else None
        if lists is not None:
            self._check(_lib.lib.kvs_init(self.handle, lists.n, lists.keys, lists.arrays))
            for (k, _), kind in zip(pairs, lists.kinds):
                self._known[k] = kind
        if rlists is not None:
            self._check(_lib.lib.kvs_init_row_sparse(self.handle, rlists.n, rlists.keys,
                                                     rlists.values))
            for (k, _), kind in zip(rpairs, rlists.kinds):
                self._known[k] = kind

    def push(self, key, value, priority=0):
        """Pushes values: values of one key are summed, then the updater or
        optimizer (default: assignment) combines the sum with the stored
        value. In dist_sync a key's round completes when every worker has
        pushed it; push returns without waiting for that.

        Row-sparse values (kvs.RowSparse, torch sparse COO tensors such as
        the gradient of nn.Embedding(sparse=True)) push only their rows:
        the sum is row-sparse, and an optimizer updates only its rows
        (kvs.h, kvs_push_row_sparse). A list mixing dense and row-sparse
        keys makes two C calls, the dense one first."""
        if type(value) is np.ndarray and type(key) in _KEY_TYPES:
            keys, arrays, keep = self._one(key, value, False, 'value')
            self._check(_lib.lib.kvs_push(self.handle, 1, keys, arrays, priority))
            return
        pairs, rpairs = _split(_flatten(key, value, 'value', sparse=True))
        lists = self._lists(pairs, False) if pairs else None
        rlists = self._row_lists(rpairs) if rpairs else None
        if lists is not None:
            self._check(_lib.lib.kvs_push(self.handle, lists.n, lists.keys, lists.arrays,
                                          int(priority)))
        if rlists is not None:
            self._check(_lib.lib.kvs_push_row_sparse(self.handle, rlists.n, rlists.keys,
                                                     rlists.values, int(priority)))

    def pull(self, key, out=None, priority=0, ignore_sparse=True):
        """Pulls the values of keys into out (an array, a list, or a list of
        lists, as for push) and returns out; out=None returns new numpy
        arrays (MXNet requires out). In dist_sync it waits for the round of
        this worker's last push of each key. ignore_sparse is MXNet's:
        every array here is dense."""
        if type(key) in _KEY_TYPES and (out is None or type(out) is np.ndarray):
            if out is None:
                out = self._empty(key)
            keys, arrays, keep = self._one(key, out, True, 'out')
            self._check(_lib.lib.kvs_pull(self.handle, 1, keys, arrays, priority))
            return out
        pairs, result = self._outs(key, out)
        lists = self._lists(pairs, True)
        self._check(_lib.lib.kvs_pull(self.handle, lists.n, lists.keys, lists.arrays,
                                      int(priority)))
        return result

    def pushpull(self, key, value, out=None, priority=0, row_ids=None):
        """push then pull of the same keys, as one call; returns out. Without
        out the pulled values are written into value, as MXNet does, and
        value is returned; a value that cannot be written in place
        (read-only, not contiguous) is left as it is and a new array takes
        its place in what is returned.

        With row_ids (per key one 1-D array of row ids, as row_sparse_pull
        takes them) the values are pushed as row-sparse ones (a dense value
        as all its rows: the same update) and then the rows row_ids are
        pulled, in one C call (kvs_pushpull_row_sparse): out=None returns,
        per key, a kvs.RowSparse of the sorted unique ids; dense outs are
        filled as row_sparse_pull fills them. Row-sparse values without
        row_ids pull the whole value: into out, or new numpy arrays, one
        per key."""
        if row_ids is not None:
            return self._pushpull_rows(key, value, out, priority, row_ids)
        if out is None and type(value) is np.ndarray and type(key) in _KEY_TYPES \
                and value.flags.writeable:
            keys, arrays, keep = self._one(key, value, False, 'value')
            if keep is value:         # contiguous: in place (outs may alias values)
                self._check(_lib.lib.kvs_pushpull(self.handle, 1, keys, arrays, arrays,
                                                  priority))
                return value
        vpairs = _flatten(key, value, 'value', sparse=True)
        if any(_rows.is_sparse(v) for _, v in vpairs):
            # A row-sparse value cannot hold the whole value pulled.
            self.push(key, value, priority)
            return self.pull(key, out=out, priority=priority)
        if out is None:
            return self._pushpull_in_place(key, value, vpairs, priority)
        vgroups, ogroups = _group(vpairs), _group(_flatten(key, out, 'out'))
        # The C call pairs values[i] with outs[i]: a key with more values
        # than outs repeats its outs (each receives the same value); one
        # with more outs than values has the rest copied from its first.
        lists = _Lists(len(_one_kind(vpairs)), with_outs=True)
        copies = []
        i = 0
        for k, vals in vgroups.items():
            outs = ogroups[k]
            for j, val in enumerate(vals):
                _pack_key(lists.keys, i, k, self._names)
                lists.put(lists.arrays, i, val, False, 'value')
                lists.put(lists.outs, i, outs[j % len(outs)], True, 'out')
                i += 1
            for extra in outs[len(vals):]:
                _arrays.describe(extra, True, 'out')
                copies.append((extra, outs[0]))
        self._check(_lib.lib.kvs_pushpull(self.handle, lists.n, lists.keys, lists.arrays,
                                          lists.outs, int(priority)))
        for dst, src in copies:
            _copy_into(dst, src)
        return out

    def _pushpull_in_place(self, key, value, vpairs, priority):
        lists = _Lists(len(_one_kind(vpairs)), with_outs=True)
        results = []
        for i, (k, val) in enumerate(vpairs):
            _pack_key(lists.keys, i, k, self._names)
            lists.put(lists.arrays, i, val, False, 'value')
            try:
                lists.put(lists.outs, i, val, True, 'value')
            except ValueError:        # read-only or not contiguous: a new array takes it
                val = self._like(val)
                lists.put(lists.outs, i, val, True, 'value')
            results.append(val)
        self._check(_lib.lib.kvs_pushpull(self.handle, lists.n, lists.keys, lists.arrays,
                                          lists.outs, int(priority)))
        # The same form as value: per key an array, or a list of them.
        it = iter(results)
        shaped = [[next(it) for _ in v] if isinstance(v, (list, tuple)) else next(it)
                  for _, v in _per_key(key, value)]
        return shaped if isinstance(key, (list, tuple)) else shaped[0]

    def _pushpull_rows(self, key, value, out, priority, row_ids):
        if out is not None:
            self.push(key, value, priority)
            return self.row_sparse_pull(key, out=out, priority=priority, row_ids=row_ids)
        values = _group((k, _rows.as_row_sparse(v))
                        for k, v in _one_kind(_flatten(key, value, 'value', sparse=True)))
        ids_of = {}
        for k, r in _per_key(key, row_ids):
            if isinstance(r, (list, tuple)):
                if len(r) != 1:
                    raise ValueError('pushpull takes one row_ids array per key, not %d' % len(r))
                r = r[0]
            ids_of[k] = r
        n = len(values)
        lists = _RowLists(n)
        ids = ctypes.create_string_buffer(_lib.ARRAY_STRUCT.size * n)
        outs = ctypes.create_string_buffer(_lib.ROWS_STRUCT.size * n)
        made = {}
        for i, (k, vals) in enumerate(values.items()):
            val = _rows.merge(vals)
            if k not in ids_of:
                raise ValueError('key %r has no row_ids' % (k,))
            r = _row_ids(ids_of[k])
            _pack_key(lists.keys, i, k, self._names)
            code = _rows.pack(lists.values, i, val, lists.keep, 'value')
            _arrays.pack_array(ids, i, r.ctypes.data, _lib.INT64, r.shape)
            lists.keep.append(r)
            as_torch = _rows._is_torch(val.data) or _rows._is_torch(ids_of[k])
            shape = tuple(val.shape)
            room = min(len(r), shape[0])
            data, got = _rows.pack_room(outs, i, code, shape, room, as_torch, lists.keep)
            made[k] = (i, data, got, shape)
        self._check(_lib.lib.kvs_pushpull_row_sparse(self.handle, n, lists.keys, lists.values,
                                                     ids, outs, int(priority)))
        found = {k: _rows.RowSparse._trusted(data[:_rows.nnz_of(outs, i)],
                                             got[:_rows.nnz_of(outs, i)], shape)
                 for k, (i, data, got, shape) in made.items()}
        if isinstance(key, (list, tuple)):
            return [found[k] for k in key]
        return found[key]

    def _pull_rows(self, key, row_ids, priority):
        """row_sparse_pull without out: compact pulls (kvs_pull_rows)."""
        entries = []                  # (key, ids, torch wanted)
        forms = []                    # per key: None (one id array) or how many
        for k, r in _per_key(key, row_ids):
            if isinstance(r, (list, tuple)):
                forms.append(len(r))
                entries += [(k, _row_ids(x), _rows._is_torch(x)) for x in r]
            else:
                forms.append(None)
                entries.append((k, _row_ids(r), _rows._is_torch(r)))
        n = len(_one_kind([(k, None) for k, _, _ in entries]))
        keys = ctypes.create_string_buffer(_lib.KEY_STRUCT.size * n)
        ids = ctypes.create_string_buffer(_lib.ARRAY_STRUCT.size * n)
        outs = ctypes.create_string_buffer(_lib.ROWS_STRUCT.size * n)
        keep, made = [], []
        for i, (k, r, as_torch) in enumerate(entries):
            code, shape = self._kind(k)
            if not shape:
                raise ValueError('key %r holds a scalar: it has no rows to pull' % (k,))
            _pack_key(keys, i, k, self._names)
            _arrays.pack_array(ids, i, r.ctypes.data, _lib.INT64, r.shape)
            keep.append(r)
            # Room for every id: at least the unique ones; pages not written
            # are never touched.
            room = min(len(r), shape[0])
            made.append(_rows.pack_room(outs, i, code, shape, room, as_torch, keep) + (shape,))
        self._check(_lib.lib.kvs_pull_rows(self.handle, n, keys, ids, outs, int(priority)))
        found = []
        for i, (data, got, shape) in enumerate(made):
            nnz = _rows.nnz_of(outs, i)
            found.append(_rows.RowSparse._trusted(data[:nnz], got[:nnz], shape))
        it = iter(found)
        shaped = [next(it) if form is None else [next(it) for _ in range(form)]
                  for form in forms]
        return shaped if isinstance(key, (list, tuple)) else shaped[0]

    @staticmethod
    def _like(arr):
        if isinstance(arr, np.ndarray):
            return np.empty(arr.shape, arr.dtype)
        return arr.detach().contiguous().clone()

    def row_sparse_pull(self, key, out=None, priority=0, row_ids=None):
        """Pulls the rows row_ids of keys. Into dense out (an array, or
        lists as for pull): the rows, every other row zero; returns out.
        out=None: only the rows come back, as a kvs.RowSparse per key whose
        indices are the sorted unique ids (kvs_pull_rows); a key given a
        list of id arrays gets a list of them. row_ids: per key, one 1-D
        array of row ids for all its outs, or a list with one per out (ids
        need not be sorted or unique; integral values of any dtype; torch
        ids give torch tensors back)."""
        if row_ids is None:
            raise ValueError('row_sparse_pull needs row_ids')
        if out is None:
            return self._pull_rows(key, row_ids, priority)
        pairs, result = self._outs(key, out)
        ids = []
        outs_form = out if out is not None else result
        for (k, o), (_, r) in zip(_per_key(key, outs_form), _per_key(key, row_ids)):
            n_outs = len(o) if isinstance(o, (list, tuple)) else 1
            if isinstance(r, (list, tuple)):
                if len(r) == 1:
                    r = r * n_outs
                elif len(r) != n_outs:
                    raise ValueError("the number of row_ids doesn't match the number of values")
                ids += [_row_ids(x) for x in r]
            else:
                ids += [_row_ids(r)] * n_outs
        lists = self._lists(pairs, True)
        rows = _Lists(len(ids))
        for i, r in enumerate(ids):
            rows.put(rows.arrays, i, r, False, 'row_ids')
        self._check(_lib.lib.kvs_row_sparse_pull(self.handle, lists.n, lists.keys, lists.arrays,
                                                 rows.arrays, int(priority)))
        return result

    # ---- zero-copy buffers and views ----------------------------------------

    def alloc(self, shape, dtype='float32'):
        """A zero-filled array living in the store's buffer memory: pushing
        it copies nothing (in dist types kvsd reads it in place). Do not
        write it after a push until a pull, pushpull or view of that key
        has returned (kvs.h, kvs_array_alloc). It is freed when collected;
        it outlives close() and the store, keeping its values (writes after
        close reach nothing). bfloat16 gives a torch tensor."""
        shape = (shape,) if isinstance(shape, numbers.Integral) else tuple(shape)
        for extent in shape:
            if isinstance(extent, bool) or not isinstance(extent, numbers.Integral):
                raise TypeError('shape must hold ints, not %s' % type(extent).__name__)
            if extent < 0:
                raise ValueError('shape %s has a negative extent' % (shape,))
        if len(shape) > _lib.MAX_NDIM:
            raise ValueError('shape %s has more than %d dimensions' % (shape, _lib.MAX_NDIM))
        code = _arrays.dtype_code(dtype)
        self._free_unfreed()
        self._held()
        arr = _lib.Array()
        extents = (ctypes.c_int64 * max(1, len(shape)))(*shape)
        self._check(_lib.lib.kvs_array_alloc(self.handle, code, len(shape), extents,
                                             ctypes.byref(arr)))
        owner = _Buffer(self, arr.data)
        return _arrays.from_memory(arr.data, code, shape, False, owner=owner)

    def _held(self):
        """The _Memory that arrays over buffers and views keep (made once;
        None with a libkvs older than this package, which has no holds)."""
        if self._memory is None and not isinstance(_lib.lib.kvs_mem_hold, _lib._Missing):
            self._memory = _Memory(self.handle)
        return self._memory

    def _free_buffer(self, ptr):
        if self._handle is None:
            return                    # closed: the buffer goes with the _Memory
        if getattr(self._local, 'in_updater', False):
            self._unfreed.append(ptr)     # the handle is locked: free at the next alloc
            return
        arr = _lib.Array()
        arr.data = ptr
        _lib.lib.kvs_array_free(self._handle, ctypes.byref(arr))

    def _free_unfreed(self):
        while self._unfreed:
            self._free_buffer(self._unfreed.pop())

    def pull_view(self, key, priority=0):
        """The stored values of keys as read-only numpy arrays, without a
        copy (a list for a list of keys). Valid as kvs.h says of
        kvs_pull_view: in local stores until the key changes, in dist_sync
        until this worker pushes the key again; dist_async refuses it. A
        view outlives close() and the store, keeping the memory it reads
        (doc/python.md, "Arrays outlive the store")."""
        keys = _keys_of(key)
        lists = _Lists(len(_one_kind([(k, None) for k in keys])))
        kinds = []
        for i, k in enumerate(keys):
            _pack_key(lists.keys, i, k, self._names)
            code, shape = self._kind(k)
            kinds.append((code, shape))
            _arrays.pack_array(lists.arrays, i, 0, code, shape)
        self._check(_lib.lib.kvs_pull_view(self.handle, lists.n, lists.keys, lists.arrays,
                                           int(priority)))
        views = []
        for i, (code, shape) in enumerate(kinds):
            fields = _lib.ARRAY_STRUCT.unpack_from(lists.arrays, i * _lib.ARRAY_STRUCT.size)
            if fields[-1] != _lib.HOST:
                raise ValueError('key %r lives on %s: pull_view gives host memory only; '
                                 'pull it into a tensor there instead'
                                 % (keys[i], _arrays.device_name(fields[-1])))
            views.append(_arrays.from_memory(fields[0], code, shape, True, owner=self._held()))
        return views if isinstance(key, (list, tuple)) else views[0]

    # ---- update rules -------------------------------------------------------

    def set_optimizer(self, optimizer):
        """Sets the store's optimizer: a spec string ('sgd lr=0.1
        momentum=0.9') or a kvs.optimizer object (SGD, Adam). In dist types
        it is the job's, kept by kvsd; any worker may set it."""
        if isinstance(optimizer, str):
            spec = optimizer
        elif callable(getattr(optimizer, 'spec', None)):
            spec = optimizer.spec()
        else:
            raise TypeError('optimizer must be a spec string or a kvs.optimizer object, not %s'
                            % type(optimizer).__name__)
        self._check(_lib.lib.kvs_set_optimizer(self.handle, spec.encode()))
        self._updater = self._updater_c = None

    def _set_updater(self, updater):
        """Sets updater(key, input, stored), called on every push with the
        summed input (read-only) and the stored value, which it changes in
        place (`stored += input * 2`). An exception it raises fails that push,
        leaves the store unchanged, and is raised again by the push. It must
        not call this store. In-process stores only: dist types raise
        KVSError (KVS_ENOTSUP) and want set_optimizer. None restores
        assignment."""
        if updater is not None and not callable(updater):
            raise TypeError('updater must be callable')
        c_fn = _lib.UPDATER(self._run_updater) if updater is not None else _lib.UPDATER()
        self._check(_lib.lib.kvs_set_updater(self.handle, c_fn, None))
        self._updater, self._updater_c = updater, (c_fn if updater is not None else None)

    set_updater = _set_updater

    def _run_updater(self, key, input_p, stored_p, _ctx):
        local = self._local
        try:
            k = key.name.decode() if key.name is not None else key.id
            inp, st = input_p.contents, stored_p.contents
            if inp.device != _lib.HOST or st.device != _lib.HOST:
                raise ValueError('key %r lives on %s: a Python updater takes host values; '
                                 'use set_optimizer for keys on GPUs'
                                 % (k, _arrays.device_name(st.device or inp.device)))
            shape_in = tuple(inp.shape[:inp.ndim])
            shape_st = tuple(st.shape[:st.ndim])
            a = _arrays.from_memory(inp.data or 0, inp.dtype, shape_in, True)
            b = _arrays.from_memory(st.data or 0, st.dtype, shape_st, False)
            local.in_updater = True
            try:
                self._updater(k, a, b)
            finally:
                local.in_updater = False
            return 0
        except BaseException as exc:  # noqa: B902 -- carried to the caller, never lost
            local.updater_error = exc
            return 1

    def set_gradient_compression(self, compression_params):
        """MXNet's dict form: {'type': '2bit', 'threshold': 0.5}, or
        {'type': 'none'}. In dist types this worker's float32 pushes are
        then quantized with its own residuals and decoded by kvsd; call it
        on every worker. Local stores raise KVSError (KVS_ENOTSUP), as
        MXNet refuses it there."""
        if not isinstance(compression_params, dict):
            raise TypeError('compression_params must be a dict, not %s'
                            % type(compression_params).__name__)
        params = dict(compression_params)
        kind = params.pop('type', None)
        if not isinstance(kind, str):
            raise ValueError("compression_params needs a 'type' string, e.g. {'type': '2bit'}")
        spec = ' '.join([kind] + ['%s=%s' % (k, _number(v, k)) for k, v in params.items()])
        self._check(_lib.lib.kvs_set_gradient_compression(self.handle, spec.encode()))

    def save_optimizer_states(self, fname, dump_optimizer=False):
        """Writes the optimizer's state (and, with dump_optimizer, the
        optimizer) to fname, atomically. In dist types any one worker may."""
        path = os.fsencode(fname)
        self._check(_lib.lib.kvs_save_optimizer_states(self.handle, path, int(bool(dump_optimizer))))

    def load_optimizer_states(self, fname):
        """Replaces the optimizer's state with that saved in fname."""
        self._check(_lib.lib.kvs_load_optimizer_states(self.handle, os.fsencode(fname)))

    def barrier(self):
        """Returns when every worker of the job has reached it."""
        self._check(_lib.lib.kvs_barrier(self.handle))

    _barrier = barrier

    # ---- commits and recovery -----------------------------------------------

    def commit(self, step):
        """Records a snapshot of the whole store at the end of step (an int
        >= 0): every key's value, the optimizer and its state. In dist types
        every worker calls it with the same step after that step's pushes
        and pulls, and it returns when kvsd holds the snapshot; should a
        worker or kvsd die later, the job rolls back to it (kvs.Restart).
        In-process stores keep it in the process. step < 0, or steps that
        differ between workers, raise KVSError (EBADARG)."""
        if isinstance(step, bool) or not isinstance(step, numbers.Integral):
            raise TypeError('step must be an int, not %s' % type(step).__name__)
        self._check(_lib.lib.kvs_commit(self.handle, int(step)))

    def resume_step(self):
        """The step of the snapshot the store holds, as an int: that of the
        last commit, or after a roll back (kvs.Restart) the step the job
        rolled back to; -1 when there is none (a fresh job, or a roll back
        before the first commit, which leaves the store empty). Call it
        after create() and after kvs.Restart, then pull the weights (init
        them at -1) and continue from the step it gives + 1."""
        step = ctypes.c_int64()
        self._check(_lib.lib.kvs_resume_step(self.handle, ctypes.byref(step)))
        return step.value


class _Memory:
    """A hold on a store's buffer and view memory (kvs_mem_hold): arrays of
    alloc() and pull_view() keep it, so that the memory goes when the last
    of them and the store have gone (kvs_mem_release), never under them."""

    __slots__ = ('__weakref__',)

    def __init__(self, handle):
        mem = ctypes.c_void_p()
        rc = _lib.lib.kvs_mem_hold(handle, ctypes.byref(mem))
        if rc != 0:
            _lib.fail(handle, rc)
        # Not at exit: other objects' finalizers may still read the arrays.
        weakref.finalize(self, _lib.lib.kvs_mem_release, mem.value).atexit = False


class _Buffer:
    """Lives as long as an array of alloc() (and what is made of it): its
    end frees the buffer while the store is open; after close() the buffer
    goes with the store's memory, which it keeps. It does not keep the
    store (a weak reference), so that the store may be collected."""

    __slots__ = ('store', 'ptr', 'memory')

    def __init__(self, store, ptr):
        self.store = weakref.ref(store)
        self.ptr = ptr
        self.memory = store._held()

    def __del__(self):
        store = self.store()
        if store is not None:
            store._free_buffer(self.ptr)


def _number(value, name):
    """A number as the C spec parser reads it: the fewest digits that read back."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError('%s must be a number, not %s' % (name, type(value).__name__))
    value = float(value)
    return repr(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)
