"""kvs.torch.DistributedOptimizer: Horovod's wrapper, its pushes made during
backward.

    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt = kvs.torch.DistributedOptimizer(opt, model.named_parameters(), kv)
    for x, y in my_part_of_each_batch:
        opt.zero_grad()
        loss_fn(model(x), y).backward()    # each gradient is pushed once ready
        opt.step()                         # pulls the averages, then SGD

A hook on each parameter queues its gradient for the push as soon as
backward has accumulated it (a bucket of them: see bucket_bytes), and
backward goes on with the layers before it; one thread makes the pushes
(_Pusher says why). The gradients live in the store's buffers
(KVStore.alloc), so a push copies nothing: it returns once kvsd has taken
the buffer, and kvsd sums the round (and runs its optimizer) beside
backward. step() pulls the values, first layer first, and applies them.

Two modes. Given a torch optimizer, the store only sums: step() writes into
each p.grad the average over the workers (op=Sum: the sum) and runs the
torch optimizer, which stays the object the user made, its state and
param_groups included (the returned object is an instance of a subclass of
its class, as Horovod's is). Given a kvs optimizer (a spec string such as
'sgd lr=0.1 momentum=0.9', or a kvs.optimizer object), kvsd runs it on the
average (op=Sum: the sum) and step() pulls the new weights into p.data.

Each parameter is the key of its name (a string key), initialised at
construction from rank 0's value, which every worker then pulls: the
workers start equal, as after Horovod's broadcast_parameters.
"""

import contextlib
import queue
import threading
import warnings
import weakref

import torch

from .kvstore import KVStore
from . import _lib

Average = 'average'
Sum = 'sum'

# Gradients are pushed in buckets of at least this many bytes, the last
# parameters first (the order backward makes them): a bias joins its
# layer's weight in one call, and a big tensor goes alone.
DEFAULT_BUCKET_BYTES = 1 << 20

# The longest synchronize() waits for the pushes backward asked for (each
# push has the store's own deadline too).
_PUSH_WAIT_S = 600.0


def _spec_of(optimizer):
    if isinstance(optimizer, str):
        return optimizer
    return optimizer.spec()


def _rescaled(spec, factor):
    """The optimizer spec with its rescale_grad multiplied by factor."""
    if factor == 1:
        return spec
    words, found = [], False
    for word in spec.split():
        if word.startswith('rescale_grad='):
            try:
                value = float(word.split('=', 1)[1])
            except ValueError:
                raise ValueError('optimizer spec %r: rescale_grad is not a number' % spec) from None
            word = 'rescale_grad=%r' % (value * factor)
            found = True
        words.append(word)
    if not found:
        words.append('rescale_grad=%r' % factor)
    return ' '.join(words)


def _named(named_parameters, groups):
    """[(name, tensor)] checked: pairs, unique names and tensors; every
    parameter of the optimizer's groups named. None: the groups' parameters,
    named 'param.I' in their order."""
    if named_parameters is None:
        if groups is None:
            raise ValueError('DistributedOptimizer with a kvs optimizer needs named_parameters '
                             '(model.named_parameters())')
        return [('param.%d' % i, p) for i, p in enumerate(p for g in groups for p in g['params'])]
    named = list(named_parameters)
    if not named:
        raise ValueError('DistributedOptimizer needs at least one parameter')
    names, ids = set(), set()
    for pair in named:
        if not (isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], str)
                and isinstance(pair[1], torch.Tensor)):
            raise ValueError('named_parameters must be (name, tensor) pairs, as '
                             'model.named_parameters() gives; got %r' % (pair,))
        name, p = pair
        if name in names:
            raise ValueError('parameter name %r appears twice in named_parameters: names must '
                             'be unique' % name)
        if id(p) in ids:
            raise ValueError('parameter %r is named twice in named_parameters' % name)
        names.add(name)
        ids.add(id(p))
        raw = name.encode()
        if not raw or len(raw) > _lib.MAX_KEY_LEN or b'\0' in raw:
            raise ValueError('parameter name %r: a name is 1 to %d bytes of UTF-8, without NUL '
                             '(it is the store key)' % (name, _lib.MAX_KEY_LEN))
    if groups is not None:
        for g in groups:
            for p in g['params']:
                if id(p) not in ids:
                    raise ValueError('a parameter of the optimizer (shape %s) is not in '
                                     'named_parameters: name every parameter it trains'
                                     % (tuple(p.shape),))
    return named


class _Pusher:
    """The one thread that makes the pushes the hooks ask for, in the order
    asked. A push returns once kvsd has taken its buffers, but kvsd takes
    them in its serve pass, which may first be summing a round (often the
    very round this push completes): made from the hook, that wait would
    hold backward up. Here backward only queues the bucket and goes on."""

    def __init__(self, kv):
        self.kv = kv
        self.jobs = queue.SimpleQueue()
        self.cond = threading.Condition()
        self.pending = 0              # queued and not yet returned
        self.error = None             # the first push that failed
        self.thread = None

    def put(self, keys, grads, priority):
        with self.cond:
            self.pending += 1
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name='kvs pushes', daemon=True)
            self.thread.start()
        self.jobs.put((keys, grads, priority))

    def _run(self):
        while True:
            job = self.jobs.get()
            if job is None:
                return
            try:
                self.kv.push(job[0], job[1], priority=job[2])
            except BaseException as exc:   # noqa: B902 -- raised again by wait()
                with self.cond:
                    if self.error is None:
                        self.error = exc
            with self.cond:
                self.pending -= 1
                self.cond.notify_all()

    def wait(self):
        """Returns when every push queued has returned; raises the first
        that failed."""
        with self.cond:
            if not self.cond.wait_for(lambda: self.pending == 0, timeout=_PUSH_WAIT_S):
                raise TimeoutError('the pushes backward queued did not return within %g s'
                                   % _PUSH_WAIT_S)
            error, self.error = self.error, None
        if error is not None:
            raise error

    def stop(self):
        if self.thread is not None:
            self.jobs.put(None)
            self.thread = None


class _Distributed:
    """What DistributedOptimizer adds to an optimizer: the hooks, the pushes
    and the pulls. Its methods come first in the class made for a torch
    optimizer, whose own step() runs after the pulls."""

    def _kvs_setup(self, named, kv, store_spec, passes, op, bucket_bytes):
        if not isinstance(kv, KVStore):
            raise TypeError('kv must be a kvs.KVStore, not %s' % type(kv).__name__)
        if isinstance(passes, bool) or not isinstance(passes, int) or passes < 1:
            raise ValueError('backward_passes_per_step must be an int >= 1, not %r' % (passes,))
        if op not in (Average, Sum):
            raise ValueError('op must be kvs.torch.Average or kvs.torch.Sum, not %r' % (op,))
        if isinstance(bucket_bytes, bool) or not isinstance(bucket_bytes, int) \
                or bucket_bytes < 0:
            raise ValueError('bucket_bytes must be an int >= 0, not %r' % (bucket_bytes,))
        for name, p in named:
            if p.device.type != 'cpu':
                raise ValueError('parameter %r is on %s: DistributedOptimizer takes CPU '
                                 'parameters' % (name, p.device))
            if not p.is_floating_point():
                raise TypeError('parameter %r is of dtype %s: DistributedOptimizer trains '
                                'float parameters' % (name, p.dtype))
            if not p.data.is_contiguous():
                raise ValueError('parameter %r is not contiguous' % name)
        self.kv = kv
        self.backward_passes_per_step = passes
        self.op = op
        self._store_updates = store_spec is not None
        self._names = [n for n, _ in named]
        self._params = [p for _, p in named]
        self._set_up_keys(store_spec)
        # Only the parameters that get gradients are exchanged: index i of
        # these lists is parameter i of self._params.
        self._live = [i for i, p in enumerate(self._params) if p.requires_grad]
        self._grads = [None] * len(self._params)
        for i in self._live:
            p = self._params[i]
            g = kv.alloc(tuple(p.shape), p.dtype)
            g = g if isinstance(g, torch.Tensor) else torch.from_numpy(g)
            if p.grad is not None:
                g.copy_(p.grad)
            p.grad = self._grads[i] = g
        self._passes = [0] * len(self._params)     # backward passes since the last sync
        self._pushed = [False] * len(self._params)
        self._order = []              # the order the first passes made the gradients in
        self._first = True            # no synchronize yet: _order is being recorded
        self._should_sync = True
        self._synchronized = False
        self._buckets = []
        self._make_buckets(reversed(self._live), bucket_bytes)
        self._bucket_bytes = bucket_bytes
        self._hooks, self._accumulators = [], []
        self._pusher = _Pusher(kv)
        weakref.finalize(self, self._pusher.stop)
        self._register_hooks()

    def _set_up_keys(self, store_spec):
        """Initialises the keys from rank 0's values and pulls them into every
        worker's parameters; sets the store's optimizer. A store holding a
        commit is refused: resuming is the Trainer's."""
        datas = [p.data for p in self._params]
        if self.kv.resume_step() >= 0:
            raise ValueError('the store holds a commit: DistributedOptimizer does not resume '
                             'one (kvs.torch.Trainer does)')
        self.kv.init(self._names, datas)
        self.kv.pull(self._names, out=datas)
        if self._store_updates:
            scale = 1.0 / self.kv.num_workers if self.op == Average else 1.0
            self.kv.set_optimizer(_rescaled(store_spec, scale))

    def _make_buckets(self, order, bucket_bytes):
        """Buckets of the parameter indices in order (the order backward
        makes their gradients), each closed at bucket_bytes or more; a
        bucket's priority is that of its first layer: the lower its index,
        the higher."""
        self._buckets, cur, size = [], [], 0
        for i in order:
            cur.append(i)
            size += self._params[i].numel() * self._params[i].element_size()
            if size >= bucket_bytes:
                self._buckets.append(cur)
                cur, size = [], 0
        if cur:
            self._buckets.append(cur)
        self._bucket_of = {}
        for b, members in enumerate(self._buckets):
            for i in members:
                self._bucket_of[i] = b
        self._left = [len(m) for m in self._buckets]     # members not ready this step
        self._bucket_pushed = [False] * len(self._buckets)

    def _register_hooks(self):
        for i in self._live:
            p = self._params[i]
            self._hooks.append(p.register_hook(self._guard(i)))
            if hasattr(p, 'register_post_accumulate_grad_hook'):
                self._hooks.append(p.register_post_accumulate_grad_hook(
                    lambda _p, i=i: self._ready(i)))
            else:
                with torch.enable_grad():
                    acc = p.expand_as(p).grad_fn.next_functions[0][0]
                self._accumulators.append(acc)      # the hook lives as long as acc
                self._hooks.append(acc.register_hook(lambda *_, i=i: self._ready(i)))

    def _guard(self, i):
        """Before backward adds to parameter i's gradient: refused once it is
        pushed (the store may still read its buffer) until synchronize()."""
        def hook(grad):
            if self._pushed[i]:
                raise ValueError(
                    'gradient of %r computed more than backward_passes_per_step (%d) times '
                    'before step() or synchronize(): raise backward_passes_per_step to '
                    'accumulate more passes locally' % (self._names[i],
                                                         self.backward_passes_per_step))
            return None
        return hook

    def _ready(self, i):
        """Parameter i's gradient has been accumulated by backward."""
        self._passes[i] += 1
        if self._passes[i] != self.backward_passes_per_step:
            return                    # accumulating (or past: pushed at synchronize)
        if self._first:
            self._order.append(i)
        b = self._bucket_of[i]
        self._left[b] -= 1
        if self._left[b] == 0 and not self._bucket_pushed[b]:
            self._push(b, queued=True)

    def _own_gradient(self, i):
        """Parameter i's gradient in its store buffer, which p.grad is again
        (autograd puts a new tensor there after p.grad = None)."""
        p, g = self._params[i], self._grads[i]
        if p.grad is not g:
            if p.grad is None:
                g.zero_()
            elif p.grad.layout != torch.strided:
                g.copy_(p.grad.to_dense())
            else:
                g.copy_(p.grad)
            p.grad = g
        return g

    def _push(self, b, queued=False):
        """Pushes bucket b: by the pusher thread when queued (from a hook),
        else here."""
        members = self._buckets[b]
        grads = [self._own_gradient(i) for i in members]
        keys = [self._names[i] for i in members]
        self._bucket_pushed[b] = True
        for i in members:
            self._pushed[i] = True
        if queued:
            self._pusher.put(keys, grads, -min(members))
        else:
            self.kv.push(keys, grads, priority=-min(members))

    # ---- Horovod's methods ------------------------------------------------

    def synchronize(self):
        """Pushes what backward has not pushed yet (buckets with a parameter
        short of backward_passes_per_step passes, or unused by this forward),
        then pulls every value, first layer first: the average (op=Sum: the
        sum) of the gradients into p.grad, or, with a kvs optimizer, the new
        weights into p.data. ValueError when no backward ran since the last
        synchronize."""
        if not any(self._passes[i] for i in self._live):
            raise ValueError('step() or synchronize() without a backward pass since the last '
                             'one: there is no gradient to exchange')
        self._pusher.wait()
        for b in range(len(self._buckets)):
            if not self._bucket_pushed[b]:
                self._push(b)
        scale = 1.0 / self.kv.num_workers if self.op == Average else 1.0
        for members in sorted(self._buckets, key=min):
            members = sorted(members)
            keys = [self._names[i] for i in members]
            if self._store_updates:
                self.kv.pull(keys, out=[self._params[i].data for i in members],
                             priority=-members[0])
            else:
                grads = [self._grads[i] for i in members]
                self.kv.pull(keys, out=grads, priority=-members[0])
                if scale != 1:
                    torch._foreach_mul_(grads, scale)
        for i in self._live:
            self._passes[i] = 0
            self._pushed[i] = False
        if self._first:
            self._first = False
            if sorted(self._order) == self._live and self._order != list(reversed(self._live)):
                self._make_buckets(self._order, self._bucket_bytes)   # the order seen
        self._left = [len(m) for m in self._buckets]
        self._bucket_pushed = [False] * len(self._buckets)
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """step() inside this block does not synchronize: for a
        synchronize() made before it, e.g. to clip the gradients."""
        self._should_sync = False
        try:
            yield
        finally:
            self._should_sync = True

    def _in_flight(self):
        return any(self._pushed[i] for i in self._live)

    def zero_grad(self, set_to_none=False):
        """Zeroes every gradient in its store buffer, which stays p.grad
        (set_to_none is taken as False: the buffer is what the next push
        sends without a copy). ValueError while gradients are pushed and not
        yet pulled (after backward, before step() or synchronize()), as
        Horovod refuses it: the store may still be reading them."""
        del set_to_none
        if self._in_flight():
            raise ValueError('zero_grad() after backward and before step() or synchronize(): '
                             'the pushed gradients are still being read by the store')
        for i in self._live:
            self._own_gradient(i).zero_()
        # Passes accumulated so far are dropped with their gradients.
        for i in self._live:
            self._passes[i] = 0
        self._left = [len(m) for m in self._buckets]

    def _kvs_step(self):
        if self._should_sync:
            if self._synchronized and not any(self._passes[i] for i in self._live):
                # Horovod warns too; its second exchange changes nothing.
                warnings.warn('step() after synchronize() without skip_synchronize(): the '
                              'values synchronize() pulled are used', stacklevel=3)
            else:
                self.synchronize()
        elif not self._synchronized:
            raise ValueError('step() under skip_synchronize() needs a synchronize() before it')
        self._synchronized = False

    def remove_hooks(self):
        """Stops pushing during backward (the hooks are removed)."""
        for h in self._hooks:
            h.remove()
        self._hooks, self._accumulators = [], []
        self._pusher.stop()


class _StoreOptimizer(_Distributed):
    """DistributedOptimizer with kvsd's optimizer: step() pulls the weights."""

    def step(self, closure=None):
        """Synchronizes: the store's optimizer has updated the weights, which
        are pulled into the parameters."""
        if closure is not None:
            raise ValueError('DistributedOptimizer.step() takes no closure')
        self._kvs_step()

    def __repr__(self):
        return '<kvs.torch.DistributedOptimizer: the store\'s optimizer, %d parameters>' \
            % len(self._params)


def _torch_step(base):
    """The step() of DistributedOptimizer over the torch optimizer class
    base (named, not found through type(self), so that a class the user
    derives from the returned one still reaches base's step)."""
    def step(self, closure=None):
        """Synchronizes (the gradients become their average over the
        workers), then runs the wrapped optimizer's step."""
        if closure is not None:
            raise ValueError('DistributedOptimizer.step() takes no closure')
        self._kvs_step()
        return base.step(self)
    return step


def DistributedOptimizer(optimizer, named_parameters=None, kv=None, backward_passes_per_step=1,
                         op=Average, bucket_bytes=DEFAULT_BUCKET_BYTES):
    """Horovod's DistributedOptimizer over kvs: gradients pushed during
    backward, the values pulled at step().

    optimizer: a torch.optim.Optimizer (the store sums; step() leaves the
    average in p.grad and runs it), or a kvs optimizer, a spec string or a
    kvs.optimizer object (kvsd runs it on the average; step() pulls the
    weights). named_parameters: model.named_parameters(); every parameter
    the torch optimizer trains must be in it, names unique; None with a
    torch optimizer names its parameters 'param.I' in order. kv: the store
    (default: kvs.create('dist_sync')); it should hold no other keys.
    backward_passes_per_step: the backward passes accumulated locally
    before the push (the push is made by the last). op: Average or Sum over
    the workers. bucket_bytes: gradients pushed in one call until at least
    this many bytes (0: each alone).

    The parameters' keys are initialised from rank 0's values (every
    worker must make this call, as with any kv.init); the gradients become
    store buffers.
    """
    if kv is None:
        from . import create
        kv = create('dist_sync')
    if isinstance(optimizer, torch.optim.Optimizer):
        named = _named(named_parameters, optimizer.param_groups)
        base = type(optimizer)
        cls = type(base.__name__, (_Distributed, base),
                   {'step': _torch_step(base),
                    '__doc__': 'kvs.torch.DistributedOptimizer over ' + base.__name__})
        obj = cls.__new__(cls)
        obj.__dict__.update(optimizer.__dict__)      # its param_groups, state and defaults
        obj._kvs_setup(named, kv, None, backward_passes_per_step, op, bucket_bytes)
        return obj
    if isinstance(optimizer, str) or callable(getattr(optimizer, 'spec', None)):
        named = _named(named_parameters, None)
        obj = _StoreOptimizer()
        obj._kvs_setup(named, kv, _spec_of(optimizer), backward_passes_per_step, op,
                       bucket_bytes)
        return obj
    raise TypeError('optimizer must be a torch.optim.Optimizer, a kvs optimizer spec string '
                    'or a kvs.optimizer object, not %s' % type(optimizer).__name__)


def broadcast_parameters(params, kv):
    """Every worker's tensors take rank 0's values: Horovod's
    broadcast_parameters (root 0). params: a state_dict, or (name, tensor)
    pairs; every worker calls it with the same names, in the same order
    of calls. Each call initialises keys 'broadcast.N.NAME' (N counts this
    store object's calls), which stay in the store."""
    if not isinstance(kv, KVStore):
        raise TypeError('kv must be a kvs.KVStore, not %s' % type(kv).__name__)
    pairs = list(params.items()) if isinstance(params, dict) else list(params)
    for pair in pairs:
        if not (isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], str)
                and isinstance(pair[1], torch.Tensor)):
            raise ValueError('params must be a state_dict or (name, tensor) pairs; got %r'
                             % (pair,))
        if not pair[1].is_contiguous():
            raise ValueError('tensor %r is not contiguous' % pair[0])
    if len({n for n, _ in pairs}) != len(pairs):
        raise ValueError('names in params must be unique')
    n = getattr(kv, '_broadcasts', 0)
    kv._broadcasts = n + 1
    if not pairs:
        return
    keys = ['broadcast.%d.%s' % (n, name) for name, _ in pairs]
    datas = [t.data if isinstance(t, torch.nn.Parameter) else t for _, t in pairs]
    kv.init(keys, datas)
    kv.pull(keys, out=datas)
