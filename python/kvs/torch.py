"""kvs for PyTorch: a Trainer in the shape of gluon's, the update on the store.

    model = torch.nn.Linear(64, 10)
    kv = kvs.create('dist_sync')               # each worker, under kvsrun
    trainer = kvs.torch.Trainer(model.parameters(), kv, 'sgd lr=0.1')
    for x, y in batches:                       # this worker's part of each batch
        loss_fn(model(x), y).backward()        # loss summed over the samples
        trainer.step(global_batch_size)        # sum over workers / batch, SGD, new weights

With an optimizer (a spec string or a kvs.optimizer object) the store
updates the weights: step() pushes every gradient, scaled by 1/batch_size,
in one list call; the store sums them over workers, runs the optimizer
once per round, and the new weights are pulled into the parameters in
place. With optimizer=None the store only averages: step() leaves in
every gradient its average over the workers, and the user's own torch
optimizer steps after it.

Gradients live in the store's buffers (KVStore.alloc): backward
accumulates into them in place, and a push reads them where they are.

Sparse gradients (torch.nn.Embedding(..., sparse=True)) are pushed as
row-sparse values: only their rows travel and, with a lazy optimizer, only
those rows change. After the step the rows the next forward reads must be
pulled: name them with trainer.set_rows(param, ids) before step() and
only those are pulled. Otherwise step() pulls every row that may have
changed: in a one-worker store with a lazy optimizer the rows this step
pushed; else the whole table (correct, and as slow as a dense step).

Which gradients are sparse is known from the start for a model's
embeddings with sparse=True (Trainer(model, ...)), and else from the
gradients themselves: a parameter that has no gradient when the Trainer
is made gets no buffer until its first gradient arrives, so that a sparse
one comes as it is and its first step already pushes rows. A dense one is
copied into its buffer once, at its first step, and accumulates there in
place from then on.

Commits and recovery: trainer.commit(step) commits the store, which holds
the weights and the optimizer's state; trainer.resume() brings the
parameters to the last commit and returns its step (-1: none), at start
and after kvs.Restart; the loop goes on from that step + 1 (doc/python.md,
"Commits and recovery"). Training with optimizer=None keeps its weights
and optimizer in the workers and is not recoverable.
"""

import torch

from . import _rows
from .kvstore import KVStore


# A dense parameter whose row ids take at most this many bytes joins the
# step's row call whatever its row size (a bias, a small layer).
_JOIN_IDS_BYTES = 32768


def _lazy_spec(optimizer):
    """Whether the optimizer updates row-sparse gradients lazily (only their
    rows): the store's default, unless the spec says lazy_update=0."""
    spec = optimizer if isinstance(optimizer, str) else optimizer.spec()
    for word in spec.split():
        if word.startswith('lazy_update='):
            try:
                return float(word.split('=', 1)[1]) != 0
            except ValueError:
                return False          # the store judges it; pull whole tables meanwhile
    return True


def _sparse_modules(model):
    """The weights of model's embeddings that make sparse gradients."""
    found = set()
    for m in model.modules():
        if isinstance(m, (torch.nn.Embedding, torch.nn.EmbeddingBag)) and m.sparse:
            found.add(id(m.weight))
    return found


class Trainer:
    """Data-parallel training of params through kv.

    params: the parameters (model.parameters(), a list of tensors, or
    (name, tensor) pairs as model.named_parameters() gives), or the model
    itself: parameter i becomes key i of kv, so kv should hold nothing
    else. At creation rank 0's values win: the other workers' parameters
    receive them.

    Parameters with sparse gradients are found by their first gradient
    (and pushed as rows from their first step); given the model, its
    embeddings with sparse=True are known from the start. A parameter that
    already has a gradient when the Trainer is made gets its buffer at
    once: should backward then add a sparse gradient to it, that step
    pushes it dense, and the next ones rows.
    """

    def __init__(self, params, kv, optimizer=None):
        if not isinstance(kv, KVStore):
            raise TypeError('kv must be a kvs.KVStore, not %s' % type(kv).__name__)
        sparse = set()
        if isinstance(params, torch.nn.Module):
            sparse = _sparse_modules(params)
            params = params.parameters()
        params = [p[1] if isinstance(p, tuple) else p for p in params]
        if not params:
            raise ValueError('Trainer needs at least one parameter')
        for p in params:
            if not isinstance(p, torch.Tensor):
                raise TypeError('parameters must be torch tensors, not %s' % type(p).__name__)
            if p.device.type != 'cpu':
                raise ValueError('Trainer takes CPU parameters (CUDA ones: not yet; '
                                 'KVStore itself takes CUDA tensors)')
            if not p.is_floating_point():
                raise TypeError('parameter of dtype %s: Trainer trains float parameters' % p.dtype)
        self.kv = kv
        self.params = params
        self.keys = list(range(len(params)))
        self._data = [p.data for p in params]
        self._sparse = [id(p) in sparse for p in params]   # gradients are sparse
        self._store_updates = optimizer is not None
        self._optimizer = optimizer
        self._lazy = _lazy_spec(optimizer) if optimizer is not None else False
        # A store that holds a commit (a replacement worker, or a program
        # started again on a kept store) has the keys and the optimizer:
        # the parameters take its values, and nothing is initialised.
        if kv.resume_step() >= 0:
            self._need_store_updates('resume')
            kv.pull(self.keys, out=self._data)
        else:
            self._init_keys()
        self._restarts = kv._restarts   # the store's roll backs when its keys were set up
        self._stepped = False         # a step() since the keys were set up
        self._initial = None          # the initial weights, while a roll back may need them
        # Dense gradients accumulate in store buffers; sparse ones where
        # autograd puts them. A parameter with no gradient yet gets its
        # buffer with its first dense gradient (_gradients): until then its
        # layout is unknown, and a buffer in place would make a sparse
        # gradient dense.
        self._grads = [None] * len(params)
        self._pending = set()
        for i, p in enumerate(params):
            if self._sparse[i]:
                continue
            if p.grad is None:
                self._pending.add(i)
                continue
            self._grads[i] = self._buffer(p)
            self._grads[i].copy_(p.grad)
            p.grad = self._grads[i]
        # Until the first step, a hook on each parameter given a buffer notes
        # the ones whose gradients come sparse (backward adds them to it).
        self._seen_sparse = set()
        self._hooks = [p.register_hook(self._watch(i)) for i, p in enumerate(params)
                       if self._grads[i] is not None and p.requires_grad]
        self._rows = {}               # key -> the row ids the next forward reads
        self._every_row = {}          # dense parameter -> the ids of all its rows

    def _init_keys(self):
        """Initialises the keys with the parameters (rank 0's win), pulls
        them, and sets the optimizer: a fresh store's set-up."""
        # A table known to be sparse is initialised as rows (all of them), so
        # that dist types keep it out of the small keys the workers combine:
        # those take rows too, but make every round a copy of the table.
        self.kv.init(self.keys, [_rows.RowSparse(d, torch.arange(d.shape[0]), tuple(d.shape))
                                 if s else d for d, s in zip(self._data, self._sparse)])
        self.kv.pull(self.keys, out=self._data)
        if self._optimizer is not None:
            self.kv.set_optimizer(self._optimizer)

    def _need_store_updates(self, what):
        if not self._store_updates:
            raise ValueError(
                'Trainer without an optimizer cannot %s: the store holds gradients, while the '
                'weights and the optimizer\'s state live in the workers; give the Trainer an '
                'optimizer (the store\'s) to make training recoverable' % what)

    def _watch(self, i):
        def hook(grad):
            if grad.layout == torch.sparse_coo:
                self._seen_sparse.add(i)
        return hook

    def _index(self, param):
        if isinstance(param, int) and not isinstance(param, bool):
            if not 0 <= param < len(self.params):
                raise IndexError('parameter %d of %d' % (param, len(self.params)))
            return param
        for i, p in enumerate(self.params):
            if p is param:
                return i
        raise ValueError('not a parameter of this Trainer')

    def set_rows(self, param, ids):
        """Names the rows of param (the tensor, or its index) that the next
        forward reads: the next step() pulls only those rows of it (in the
        same call as its push), leaving the other rows of the local copy as
        they were, possibly stale. For parameters with sparse gradients;
        on a dense one it changes nothing (its whole value is pulled). Holds
        for one step; set them again before each."""
        i = self._index(param)
        if self.params[i].dim() == 0:
            raise ValueError('a parameter of no dimensions has no rows')
        self._rows[i] = ids

    def _buffer(self, p):
        arr = self.kv.alloc(tuple(p.shape), p.dtype)
        return arr if isinstance(arr, torch.Tensor) else torch.from_numpy(arr)

    def _gradients(self, dense):
        """The gradient buffers of the parameters dense, each holding its
        parameter's gradient (one that autograd put elsewhere, e.g. after
        zero_grad(set_to_none=True), is copied in, and the buffer made the
        gradient again). A parameter that has had no gradient yet gets its
        buffer here, zeroed, and keeps no gradient: its layout is still
        unknown."""
        for i in dense:
            p, g = self.params[i], self._grads[i]
            if g is None:
                g = self._grads[i] = self._buffer(p)
            if p.grad is not g:
                if p.grad is None:
                    g.zero_()
                    if i in self._pending:
                        continue
                else:
                    g.copy_(p.grad)
                p.grad = g
                self._pending.discard(i)
        return [self._grads[i] for i in dense]

    def _kinds(self):
        """(dense, sparse): the indices of the parameters whose gradients
        are dense and sparse this step."""
        dense, sparse = [], []
        for i, p in enumerate(self.params):
            grad = p.grad
            if grad is not None and grad.layout == torch.sparse_coo:
                self._sparse[i] = True
                self._pending.discard(i)
                self._grads[i] = None
                sparse.append(i)
            elif self._sparse[i] and grad is None:
                sparse.append(i)      # no rows this step: an empty push keeps rounds in step
            elif grad is not None and grad.layout != torch.strided:
                raise TypeError('parameter %d has a %s gradient; Trainer takes dense and '
                                'sparse COO ones' % (i, grad.layout))
            else:
                dense.append(i)
        return dense, sparse

    def _after_first_step(self):
        """Stops watching; parameters found sparse leave their buffers (their
        first gradient was pushed dense from it)."""
        for h in self._hooks:
            h.remove()
        self._hooks = []
        for i in self._seen_sparse:
            self._sparse[i] = True
            if self._grads[i] is not None and self.params[i].grad is self._grads[i]:
                self.params[i].grad = None
            self._grads[i] = None
        self._seen_sparse = set()

    def _row_sparse(self, i, scale):
        """Parameter i's sparse gradient times scale, as a RowSparse."""
        p = self.params[i]
        if p.grad is None:
            return _rows.RowSparse(p.data.new_zeros((0,) + tuple(p.shape[1:])),
                                   torch.zeros(0, dtype=torch.int64), tuple(p.shape))
        rs = _rows.from_torch(p.grad)
        if scale != 1:
            rs = _rows.RowSparse._trusted(rs.data * scale, rs.indices, rs.shape)
        return rs

    def step(self, batch_size=None):
        """One update. With the store's optimizer: gradients / batch_size
        are pushed and the updated weights pulled into the parameters
        (batch_size is required). Without: every gradient becomes its
        average over the workers (divided by batch_size too, when given),
        for the caller's optimizer to apply. Sparse gradients are pushed
        as row-sparse values (see the module's doc for the rows pulled)."""
        if self._store_updates:
            if batch_size is None:
                raise TypeError('step() needs batch_size when the store runs the optimizer')
            if batch_size <= 0:
                raise ValueError('batch_size must be positive, not %r' % (batch_size,))
        self._stepped = True
        dense, sparse = self._kinds()
        rows, self._rows = self._rows, {}
        try:
            grads = self._gradients(dense)
            keys = [self.keys[i] for i in dense]
            if self._store_updates:
                if batch_size != 1 and grads:
                    torch._foreach_mul_(grads, 1.0 / batch_size)
                if sparse:
                    self._step_sparse(dense, grads, sparse, rows, 1.0 / batch_size)
                elif keys:
                    self.kv.pushpull(keys, grads, out=[self._data[i] for i in dense])
            else:
                if keys:
                    self.kv.pushpull(keys, grads)
                scale = self.kv.num_workers * (1 if batch_size is None else batch_size)
                if scale != 1 and grads:
                    torch._foreach_mul_(grads, 1.0 / scale)
                if sparse:
                    self._average_sparse(sparse, 1.0 / scale)
        finally:
            if self._hooks or self._seen_sparse:
                self._after_first_step()

    def _all_rows(self, i):
        """The ids of every row of parameter i (made once)."""
        ids = self._every_row.get(i)
        if ids is None:
            ids = self._every_row[i] = torch.arange(self._data[i].shape[0])
        return ids

    def _joins(self, i):
        """Whether dense parameter i goes as all its rows in the step's row
        call: it has rows, and their ids (8 bytes a row) are small beside
        its value or small in all."""
        d = self._data[i]
        if d.dim() == 0:
            return False
        return 8 * d.shape[0] <= max(d.numel() * d.element_size() // 4, _JOIN_IDS_BYTES)

    def _step_sparse(self, dense, grads, sparse, rows, scale):
        """Pushes the gradients and pulls the new weights: per sparse
        parameter the rows set by set_rows, else those this step changed
        when they are known (one worker, a lazy optimizer), else the whole
        value. The parameters pulled by rows go in one C call, and with
        them the dense ones as all their rows (the same update as a dense
        push under every rule: each row is present), so that the step
        waits for the other workers once, not twice. Those pulled whole
        are pushed before that call and pulled after it, so that their
        rounds overlap its own."""
        by_rows, whole = [], []
        for i in sparse:
            ids = rows.get(i)
            value = self._row_sparse(i, scale)
            if ids is None and self._lazy and self.kv.num_workers == 1:
                ids = value.indices
            (whole if ids is None else by_rows).append((i, value, ids))
        apart = []                    # dense ones pushed and pulled dense
        if by_rows:
            for i, g in zip(dense, grads):
                if self._joins(i):
                    every = self._all_rows(i)
                    by_rows.append((i, _rows.RowSparse._trusted(g, every, tuple(g.shape)),
                                    every))
                else:
                    apart.append((i, g))
            by_rows.sort(key=lambda x: x[0])
        else:
            apart = list(zip(dense, grads))
        if whole:                     # pushed first: their rounds run beside the calls below
            self.kv.push([self.keys[i] for i, _, _ in whole], [v for _, v, _ in whole])
        if apart:
            self.kv.pushpull([self.keys[i] for i, _ in apart], [g for _, g in apart],
                             out=[self._data[i] for i, _ in apart])
        if by_rows:
            got = self.kv.pushpull([self.keys[i] for i, _, _ in by_rows],
                                   [v for _, v, _ in by_rows],
                                   row_ids=[_as_ids(ids) for _, _, ids in by_rows])
            for (i, _, ids), rs in zip(by_rows, got):
                if not rs.nnz:
                    continue
                data = _torch_of(rs.data).to(self._data[i].dtype)
                if self._sparse[i]:
                    # The ids are unique: a plain scatter, at half index_copy_'s time.
                    self._data[i].index_put_((_torch_of(rs.indices),), data)
                else:                 # every row, in order
                    self._data[i].copy_(data)
        if whole:
            self.kv.pull([self.keys[i] for i, _, _ in whole],
                         out=[self._data[i] for i, _, _ in whole])

    def _average_sparse(self, sparse, scale):
        """Without the store's optimizer: each sparse gradient becomes its
        average over the workers, still sparse. The rows of the sum are
        this worker's own in a one-worker store; else they are found in
        the whole sum pulled (as slow as a dense gradient)."""
        values = [self._row_sparse(i, 1) for i in sparse]
        keys = [self.keys[i] for i in sparse]
        if self.kv.num_workers == 1:
            sums = self.kv.pushpull(keys, values, row_ids=[v.indices for v in values])
            for i, rs in zip(sparse, sums):
                self.params[i].grad = torch.sparse_coo_tensor(
                    _torch_of(rs.indices)[None], _torch_of(rs.data) * scale,
                    tuple(self.params[i].shape))
            return
        self.kv.push(keys, values)
        for i, key in zip(sparse, keys):
            whole = torch.zeros_like(self._data[i])
            self.kv.pull(key, out=whole)
            held = whole.reshape(whole.shape[0], -1).ne(0).any(1).nonzero().flatten()
            self.params[i].grad = torch.sparse_coo_tensor(
                held[None], whole[held] * scale, tuple(whole.shape))

    def zero_grad(self):
        """Zeroes every gradient (in its buffer); sparse ones become None,
        and a parameter that has had no gradient yet keeps none."""
        dense, sparse = self._kinds()
        dense = [i for i in dense if i not in self._pending or self.params[i].grad is not None]
        for g in self._gradients(dense):
            g.zero_()
        for i in sparse:
            self.params[i].grad = None

    def save_states(self, fname):
        """The store's optimizer state, with the optimizer, to fname."""
        self.kv.save_optimizer_states(fname, dump_optimizer=True)

    def load_states(self, fname):
        """Restores what save_states wrote."""
        self.kv.load_optimizer_states(fname)

    # ---- commits and recovery -----------------------------------------------

    def commit(self, step):
        """Commits the store at the end of step (kv.commit): the weights and
        the optimizer's state, which the store holds; the Trainer keeps
        nothing else a resume needs (its gradient buffers are refilled by
        the next backward). Every worker calls it with the same step, after
        that step's step(). Needs the store's optimizer: without one the
        weights and the optimizer's state live in the workers, and commit
        raises ValueError."""
        self._need_store_updates('commit')
        self.kv.commit(step)
        self._initial = None          # a roll back now goes to a commit

    def resume(self):
        """Brings the parameters to the store's last commit and returns its
        step; the loop continues from that step + 1. Call it at start (a
        replacement worker that kvsrun started after a death resumes too)
        and after kvs.Restart from any call. Step >= 0: every parameter's
        value is pulled from the store. Step -1, nothing committed: in a
        store that rolled back, which is then empty, the keys are set up
        again as at creation (rank 0's values win) and the optimizer set;
        else nothing changes. Either way every gradient is zeroed, so that
        a step that a roll back cut short starts clean. Called before the
        first step, it keeps a copy of the initial weights until the first
        commit, so that a roll back before that starts over from them, as
        a run without faults did. Without the store's optimizer only step
        -1 can be resumed (ValueError otherwise)."""
        step = self.kv.resume_step()
        if step >= 0:
            self._need_store_updates('resume')
        self._rows = {}
        if step >= 0:
            self.kv.pull(self.keys, out=self._data)
            self._initial = None
        elif self.kv._restarts != self._restarts:
            if self._initial is not None:
                for d, v in zip(self._data, self._initial):
                    d.copy_(v)
            self._init_keys()
            self._stepped = False
        elif not self._stepped and self._initial is None and self._store_updates:
            self._initial = [d.clone() for d in self._data]
        self._restarts = self.kv._restarts
        self.zero_grad()
        return step


def _torch_of(arr):
    return arr if isinstance(arr, torch.Tensor) else torch.from_numpy(arr)


def _as_ids(ids):
    """Row ids as the store takes them: a 1-D tensor or array."""
    if isinstance(ids, (list, tuple, range)):
        return torch.as_tensor(list(ids), dtype=torch.int64)
    return ids


from ._ddp import *  # noqa: E402,F401,F403  (the DDP hook and process group: _ddp.py)
from ._distopt import Average, DistributedOptimizer, Sum, broadcast_parameters  # noqa: E402,F401
