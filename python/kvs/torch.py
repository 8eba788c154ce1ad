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
"""

import torch

from .kvstore import KVStore


class Trainer:
    """Data-parallel training of params through kv.

    params: the parameters (model.parameters(), a list of tensors, or
    (name, tensor) pairs as model.named_parameters() gives): parameter i
    becomes key i of kv, so kv should hold nothing else. At creation rank
    0's values win: the other workers' parameters receive them.
    """

    def __init__(self, params, kv, optimizer=None):
        if not isinstance(kv, KVStore):
            raise TypeError('kv must be a kvs.KVStore, not %s' % type(kv).__name__)
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
        kv.init(self.keys, self._data)
        kv.pull(self.keys, out=self._data)
        self._grads = [self._buffer(p) for p in params]
        for p, g in zip(params, self._grads):
            if p.grad is not None:
                g.copy_(p.grad)
            p.grad = g
        self._store_updates = optimizer is not None
        if optimizer is not None:
            kv.set_optimizer(optimizer)

    def _buffer(self, p):
        arr = self.kv.alloc(tuple(p.shape), p.dtype)
        return arr if isinstance(arr, torch.Tensor) else torch.from_numpy(arr)

    def _gradients(self):
        """The gradient buffers, each holding its parameter's gradient (one
        that autograd put elsewhere, e.g. after zero_grad(set_to_none=True),
        is copied in, and the buffer made the gradient again)."""
        for p, g in zip(self.params, self._grads):
            if p.grad is not g:
                if p.grad is None:
                    g.zero_()
                else:
                    g.copy_(p.grad)
                p.grad = g
        return self._grads

    def step(self, batch_size=None):
        """One update. With the store's optimizer: gradients / batch_size
        are pushed and the updated weights pulled into the parameters
        (batch_size is required). Without: every gradient becomes its
        average over the workers (divided by batch_size too, when given),
        for the caller's optimizer to apply."""
        grads = self._gradients()
        if self._store_updates:
            if batch_size is None:
                raise TypeError('step() needs batch_size when the store runs the optimizer')
            if batch_size <= 0:
                raise ValueError('batch_size must be positive, not %r' % (batch_size,))
            if batch_size != 1:
                torch._foreach_mul_(grads, 1.0 / batch_size)
            self.kv.pushpull(self.keys, grads, out=self._data)
        else:
            self.kv.pushpull(self.keys, grads)
            scale = self.kv.num_workers * (1 if batch_size is None else batch_size)
            if scale != 1:
                torch._foreach_mul_(grads, 1.0 / scale)

    def zero_grad(self):
        """Zeroes every gradient (in its buffer)."""
        for g in self._gradients():
            g.zero_()

    def save_states(self, fname):
        """The store's optimizer state, with the optimizer, to fname."""
        self.kv.save_optimizer_states(fname, dump_optimizer=True)

    def load_states(self, fname):
        """Restores what save_states wrote."""
        self.kv.load_optimizer_states(fname)
