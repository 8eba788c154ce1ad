"""The workers of the Python dist tests: `kvsrun -n N python workers.py
SCENARIO [ARGS]`. Each scenario asserts its values; a worker that finds a
wrong one exits non-zero, which fails the job."""

import os
import sys

import numpy as np

import kvs


def sync(rounds='3'):
    """dist_sync: every round's pull is the sum over workers of that round."""
    kv = kvs.create('dist_sync')
    r, n = kv.rank, kv.num_workers
    keys = [3, 5, 7]
    kv.init(keys, [np.full((2, 3), r + 10, np.float32)] * 3)
    for key in keys:                              # rank 0's values won
        assert kv.pull(key).tolist() == [[10] * 3] * 2
    total = n * (n + 1) / 2
    for i in range(int(rounds)):
        kv.push(keys, [[np.full((2, 3), r + 1, np.float32)] * 2] * 3)    # two values per key
        outs = kv.pull(keys)
        for o in outs:
            assert (o == 2 * total).all(), (i, o)
        got = kv.pushpull(5, np.full((2, 3), i, np.float32), out=np.zeros((2, 3), np.float32))
        assert (got == i * n).all()
    kv.set_optimizer(kvs.optimizer.SGD(learning_rate=0.5))
    kv.barrier()
    w = kv.pushpull(7, np.ones((2, 3), np.float32), out=np.zeros((2, 3), np.float32))
    assert np.allclose(w, 2 * total - 0.5 * n), w
    assert kv.type == 'dist_sync' and 0 <= r < n
    print('rank %d of %d: sync ok' % (r, n))
    kv.close()


def async_(pushes='20'):
    """dist_async: every push is applied on arrival; after a barrier every
    worker sees all of them."""
    kv = kvs.create('dist_async')
    kv.init('w', np.zeros(4, np.float64))
    kv.set_optimizer('sgd lr=1')
    for _ in range(int(pushes)):
        kv.push('w', np.ones(4))
    kv.barrier()
    w = kv.pull('w')
    assert (w == -int(pushes) * kv.num_workers).all(), w
    with np.testing.assert_raises(kvs.KVSError) as err:
        kv.pull_view('w')
    assert err.exception.code == kvs.ENOTSUP
    print('rank %d: async ok' % kv.rank)


def refusals():
    """What dist types refuse, with the C library's reasons."""
    kv = kvs.create('dist_sync')
    kv.init(1, np.zeros(2))
    try:
        kv._set_updater(lambda key, inp, stored: None)
    except kvs.KVSError as e:
        assert e.code == kvs.ENOTSUP and e.detail, e
        print('refused: %s' % e)
    else:
        raise AssertionError('a dist store took an updater')
    kv.barrier()


def compressed(rounds='4'):
    """2bit compression (MXNet's dict form): each worker's float32 pushes
    are quantized with its own residual; every value pulled is the sum of
    what every rank's codec sent, recomputed here. A float64 key goes as it
    is. Zero-copy buffers are quantized too."""
    kv = kvs.create('dist_sync')
    r, n = kv.rank, kv.num_workers
    kv.init(['g', 'd'], [np.zeros(20, np.float32), np.zeros(3, np.float64)])
    kv.set_gradient_compression({'type': '2bit', 'threshold': 0.5})
    buf = kv.alloc((20,), 'float32')
    res = np.zeros((n, 20), np.float32)
    for i in range(int(rounds)):
        grads = [np.linspace(-0.7, 0.7, 20, dtype=np.float32) * ((q + i) % 3 - 1) + 0.2 * q
                 for q in range(n)]
        want = np.zeros(20, np.float32)
        for q in range(n):                # the codec: +t, -t or 0, the rest kept
            acc = res[q] + grads[q]
            sent = np.where(acc >= 0.5, 0.5, np.where(acc <= -0.5, -0.5, 0)).astype(np.float32)
            res[q] = acc - sent
            want += sent
        buf[:] = grads[r]
        kv.push('g', buf)
        assert (kv.pull('g') == want).all(), (i, kv.pull('g'), want)
        d = kv.pushpull('d', np.full(3, 0.3), out=np.zeros(3))
        assert np.allclose(d, 0.3 * n), d
    print('rank %d: compressed ok' % r)


def buffers(rounds='5'):
    """Buffers pushed without copies, views of the stored values."""
    kv = kvs.create('dist_sync')
    n = kv.num_workers
    grad = kv.alloc((1000,), 'float32')
    kv.init('g', grad)
    for i in range(int(rounds)):
        grad[:] = kv.rank + i
        kv.push('g', grad)
        view = kv.pull_view('g')
        assert (view == sum(r + i for r in range(n))).all()
        assert not view.flags.writeable
    print('rank %d: buffers ok' % kv.rank)


def threads(rounds='20'):
    """Four Python threads on one dist_sync handle, each with its own keys:
    the C library runs their calls at once (the GIL is released in every
    call), and each thread's rounds sum right."""
    import threading
    kv = kvs.create('dist_sync')
    n = kv.num_workers
    nthreads = 4
    kv.init(list(range(nthreads)), [np.zeros(256, np.float32)] * nthreads)
    errors = []

    def run(t):
        try:
            for i in range(int(rounds)):
                got = kv.pushpull(t, np.full(256, kv.rank + i + t, np.float32),
                                  out=np.zeros(256, np.float32))
                want = sum(r + i + t for r in range(n))
                assert (got == want).all(), (t, i, got[0], want)
        except BaseException as e:    # noqa: B902 -- reported by the main thread
            errors.append(e)

    ts = [threading.Thread(target=run, args=(t,)) for t in range(nthreads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]
    print('rank %d: threads ok' % kv.rank)


def die():
    """Rank 1 dies after the init; rank 0's next wait fails with
    KVS_EPEERDEAD instead of hanging."""
    kv = kvs.create('dist_sync')
    kv.init(1, np.zeros(8, np.float32))
    if kv.rank == 1:
        os._exit(3)
    try:
        kv.push(1, np.ones(8, np.float32))
        kv.pull(1)
    except kvs.PeerDead as e:               # a KVSError of its own class
        assert isinstance(e, kvs.KVSError) and e.code == kvs.EPEERDEAD, e
        print('rank 0: %s' % e)
        sys.exit(0)
    raise AssertionError('the pull returned although rank 1 died')


def trainer(mode):
    """kvs.torch.Trainer over dist_sync against one process training on the
    whole batches: the store's SGD with momentum (mode 'store'), or the
    averaged gradients with torch's SGD (mode 'average')."""
    import torch
    import kvs.torch

    torch.manual_seed(1)
    net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    alone = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    alone.load_state_dict(net.state_dict())
    kv = kvs.create('dist_sync')
    r, n = kv.rank, kv.num_workers
    if r != 0:                                # rank 0's weights must win
        with torch.no_grad():
            for p in net.parameters():
                p.add_(1.0)
    gen = torch.Generator().manual_seed(2)
    x, y = torch.randn(40, 6, generator=gen), torch.randn(40, 2, generator=gen)
    if mode == 'store':
        tr = kvs.torch.Trainer(net.named_parameters(), kv, 'sgd lr=0.1 momentum=0.9')
    else:
        tr = kvs.torch.Trainer(net.parameters(), kv)
        mine = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    ref = torch.optim.SGD(alone.parameters(), lr=0.1, momentum=0.9)
    for step in range(10):
        batch = slice(4 * step, 4 * step + 4)
        part = torch.arange(40)[batch][r::n]
        net.zero_grad(set_to_none=(step % 3 == 2))    # also: autograd's own new grads
        loss = ((net(x[part]) - y[part]) ** 2).sum()
        loss.backward()
        if mode == 'store':
            tr.step(4)
        else:
            tr.step()                         # the average over workers of summed losses
            for p in net.parameters():
                p.grad.mul_(n / 4.0)          # ... made the mean over the batch
            mine.step()
        ref.zero_grad()
        (((alone(x[batch]) - y[batch]) ** 2).sum() / 4).backward()
        ref.step()
    diff = max((a - b).abs().max().item() for a, b in zip(net.parameters(), alone.parameters()))
    assert diff < 1e-5, diff
    print('rank %d: trainer %s ok (%.3g)' % (r, mode, diff))


def distopt(*configs):
    """kvs.torch.DistributedOptimizer over dist_sync against one process
    training on the whole batches, for each config MODE-OP-PASSES in turn
    (each on keys of its own): torch's SGD (mode torch) on the gradients
    averaged (op average) or summed, or the store's SGD (mode store);
    backward_passes_per_step passes of micro-batches. A store that logs
    the calls shows every push made by the pusher thread while backward
    runs (started before the first layer's gradient, the last backward
    makes, is accumulated) and the values pulled first layer first, each
    at a higher priority than the next."""
    import threading
    import torch
    import kvs.torch

    class Logged(kvs.KVStore):
        def __init__(self, name):
            super().__init__(name)
            self.calls = []

        def push(self, key, value, priority=0):
            self.calls.append(('push', key, priority, threading.current_thread().name))
            super().push(key, value, priority)

        def pull(self, key, out=None, priority=0, ignore_sparse=True):
            got = super().pull(key, out, priority)
            self.calls.append(('pull', key, priority))
            return got

    kv = Logged('dist_sync')
    for config in configs:
        _distopt_config(torch, kvs.torch, kv, config)


def _distopt_config(torch, kvs_torch, kv, config):
    import time
    mode, op, passes = config.split('-')
    passes = int(passes)

    def make():
        return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(),
                                   torch.nn.Linear(16, 16), torch.nn.Tanh(),
                                   torch.nn.Linear(16, 16), torch.nn.Tanh(),
                                   torch.nn.Linear(16, 2))

    torch.manual_seed(1)
    net, alone = make(), make()
    alone.load_state_dict(net.state_dict())
    r, n = kv.rank, kv.num_workers
    if r != 0:                                # rank 0's weights must win
        with torch.no_grad():
            for p in net.parameters():
                p.add_(1.0)
    lr = 0.1 if op == 'average' else 0.02
    named = [(config + '.' + name, p) for name, p in net.named_parameters()]
    names = [name for name, _ in named]
    how = dict(backward_passes_per_step=passes, bucket_bytes=0,
               op=kvs_torch.Average if op == 'average' else kvs_torch.Sum)
    if mode == 'store':
        opt = kvs_torch.DistributedOptimizer('sgd lr=%g momentum=0.9' % lr, named, kv, **how)
    else:
        opt = kvs_torch.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=lr,
                                                             momentum=0.9), named, kv, **how)
    ref = torch.optim.SGD(alone.parameters(), lr=lr, momentum=0.9)
    pushes_seen = []                          # pushes started when the last gradient comes
    last_pass = [False]

    def pushes():
        return sum(c[0] == 'push' for c in list(kv.calls))

    def before_last_gradient(grad):
        # Backward waits here (up to a deadline) for the pushes of every
        # later layer to start: they do only if the hooks asked for them.
        if last_pass[0]:
            deadline = time.monotonic() + 20
            while pushes() < len(names) - 2 and time.monotonic() < deadline:
                time.sleep(0.001)
            pushes_seen.append(pushes())
    net[0].weight.register_hook(before_last_gradient)
    gen = torch.Generator().manual_seed(2)
    x, y = torch.randn(80, 6, generator=gen), torch.randn(80, 2, generator=gen)
    for step in range(10):
        batch = torch.arange(8 * step, 8 * step + 8)
        part = batch[r::n]
        opt.zero_grad()
        kv.calls = []
        pushes_seen.clear()
        micros = part.chunk(passes)
        for k, micro in enumerate(micros):
            last_pass[0] = k == len(micros) - 1
            loss = ((net(x[micro]) - y[micro]) ** 2).sum()
            (loss / len(part) if op == 'average' else loss).backward()
        # Every later layer's push started before the first layer's gradient
        # was accumulated at the end of backward.
        assert len(pushes_seen) == 1 and pushes_seen[0] >= len(names) - 2, (pushes_seen, kv.calls)
        opt.step()
        pushed = [c for c in kv.calls if c[0] == 'push']
        # One push per parameter, the last layers first, all asked for by
        # the hooks (made by the pusher thread), none by step().
        assert [c[1][0] for c in pushed] == names[::-1], pushed
        assert all(c[3] == 'kvs pushes' for c in pushed), pushed
        pulls = [c for c in kv.calls if c[0] == 'pull']
        assert [c[1][0] for c in pulls] == names, pulls      # first layer first
        prios = [c[2] for c in pulls]
        assert all(a > b for a, b in zip(prios, prios[1:])), prios
        ref.zero_grad()
        loss = ((alone(x[batch]) - y[batch]) ** 2).sum()
        (loss / len(batch) if op == 'average' else loss).backward()
        ref.step()
    for (name, a), b in zip(named, alone.parameters()):
        torch.testing.assert_close(a.detach(), b.detach(), rtol=1e-5, atol=1e-6,
                                   msg=lambda m, name=name: '%s: %s' % (name, m))
    diff = max((a - b).abs().max().item() for a, b in zip(net.parameters(), alone.parameters()))
    print('rank %d: distopt %s ok (%.3g)' % (r, config, diff), flush=True)

def _rows_taken(kv, key='probe'):
    """False, after saying why, where the store type refuses row-sparse
    values (KVS_ENOTSUP): the test then skips with that reason."""
    try:
        kv.init(key, kvs.RowSparse(np.zeros((0, 1), np.float32), [], (1, 1)))
        return True
    except kvs.KVSError as e:
        if e.code != kvs.ENOTSUP:
            raise
        print('rank %d: rows refused: %s' % (kv.rank, e.detail))
        return False


def rows(kind='dist_sync'):
    """Row-sparse values in a dist store, each value against a numpy
    reference: overlapping and repeated rows of every worker summed, an
    empty push, torch's sparse gradients as they are, compact pulls,
    pushpull with row ids, and sgd updating only the rows pushed."""
    import torch
    kv = kvs.create(kind)
    r, n = kv.rank, kv.num_workers
    shape = (10, 3)
    start = np.arange(30, dtype=np.float32).reshape(shape)
    if not _rows_taken(kv):
        return
    kv.init('e', kvs.RowSparse(start[[1, 4]] + r, [1, 4], shape))  # rank 0's wins
    want = np.zeros(shape, np.float32)
    want[[1, 4]] = start[[1, 4]]
    assert (kv.pull('e') == want).all()
    kv.barrier()                      # dist_async: no push before every rank has pulled

    def part(q):                      # rank q's rows: overlapping, repeated, unsorted
        return [q + 2, q, q + 2], np.full((3, 3), q + 1, np.float32)
    ids, data = part(r)
    empty = kvs.RowSparse(np.zeros((0, 3), np.float32), [], shape)
    kv.push('e', [kvs.RowSparse(data, ids, shape), empty])
    total = np.zeros(shape, np.float32)
    for q in range(n):
        np.add.at(total, part(q)[0], part(q)[1])
    if kind == 'dist_async':
        kv.barrier()
        got = kv.pull('e')            # assignment: the last worker's rows
        assert any((got == kvs.RowSparse(part(q)[1], part(q)[0], shape).todense()).all()
                   for q in range(n)), got
        kv.barrier()
        kv.set_optimizer('sgd lr=1')
        kv.barrier()
        base = kv.pull('e')
        kv.barrier()
        kv.push('e', kvs.RowSparse(data, ids, shape))
        kv.barrier()
        assert np.allclose(kv.pull('e'), base - total), (kv.pull('e'), base - total)
        print('rank %d: rows %s ok' % (r, kind))
        return
    assert (kv.pull('e') == total).all(), (kv.pull('e'), total)
    got = kv.row_sparse_pull('e', row_ids=np.array([5, 0, 5, 2]))
    assert got.indices.tolist() == [0, 2, 5] and (got.data == total[[0, 2, 5]]).all()

    # A sparse gradient of torch (uncoalesced: ids repeat), pushed as it is.
    emb = torch.nn.Embedding(10, 3, sparse=True)
    emb(torch.tensor([r, 7, r])).sum().backward()
    kv.push('e', emb.weight.grad)
    total = np.zeros(shape, np.float32)
    for q in range(n):
        np.add.at(total, [q, 7, q], 1.0)
    assert (kv.pull('e') == total).all(), (kv.pull('e'), total)

    # sgd: only the rows of the round's sum change; pushpull with row ids.
    kv.set_optimizer('sgd lr=0.5 wd=0.1')
    kv.barrier()
    g = kvs.RowSparse(np.ones((1, 3), np.float32), [r + 1], shape)
    pulled = kv.pushpull('e', g, row_ids=np.array([9, 1]))
    after = total.copy()
    pushed = sorted({q + 1 for q in range(n)})
    for row in pushed:
        after[row] -= 0.5 * (sum(1 for q in range(n) if q + 1 == row) + 0.1 * total[row])
    assert pulled.indices.tolist() == [1, 9], pulled.indices
    assert np.allclose(pulled.data, after[[1, 9]]), (pulled.data, after[[1, 9]])
    assert np.allclose(kv.pull('e'), after)
    absent = [i for i in range(10) if i not in pushed]
    assert (kv.pull('e')[absent] == total[absent]).all()
    print('rank %d: rows %s ok' % (r, kind))
    kv.close()


def sparse_trainer(mode):
    """kvs.torch.Trainer with a sparse embedding over dist_sync against one
    process training on the whole batches with torch's SGD on sparse
    gradients: the whole table pulled (mode 'whole') or the next batch's rows named with
    set_rows (mode 'set_rows'). Modes 'parameters...' give the Trainer
    model.parameters() only: its table, initialised dense and small, is a
    key the workers combine, and its gradient is found sparse at the first
    step, whose push is already rows: pulled whole ('parameters'), by the
    next batch's rows ('parameters_set_rows'), or with adam, lazy, against
    torch's SparseAdam ('parameters_adam')."""
    import torch
    import kvs.torch

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(30, 4, sparse=True)
            self.out = torch.nn.Linear(4, 1)

        def forward(self, ids):
            return self.out(self.emb(ids).sum(1)).squeeze(1)

    torch.manual_seed(1)
    net, alone = Model(), Model()
    alone.load_state_dict(net.state_dict())
    kv = kvs.create('dist_sync')
    r, n = kv.rank, kv.num_workers
    if not _rows_taken(kv, 10**9):           # an int key, as the Trainer's are
        return
    adam = mode == 'parameters_adam'
    tr = kvs.torch.Trainer(net.parameters() if mode.startswith('parameters') else net, kv,
                           'adam lr=0.01' if adam else 'sgd lr=0.1')
    if adam:
        refs = [torch.optim.SparseAdam([alone.emb.weight], lr=0.01, eps=1e-8),
                torch.optim.Adam(alone.out.parameters(), lr=0.01, eps=1e-8)]
    else:
        refs = [torch.optim.SGD(alone.parameters(), lr=0.1)]
    gen = torch.Generator().manual_seed(2)
    batches = [(torch.randint(0, 20, (4, 3), generator=gen), torch.randn(4, generator=gen))
               for _ in range(8)]
    for step, (ids, y) in enumerate(batches):
        mine = slice(r, None, n)
        tr.zero_grad()
        ((net(ids[mine]) - y[mine]) ** 2).sum().backward()
        # Rows from the first step: no dense buffer took the gradient.
        assert net.emb.weight.grad.is_sparse, step
        if mode.endswith('set_rows') and step + 1 < len(batches):
            tr.set_rows(net.emb.weight, batches[step + 1][0][mine].flatten())
        tr.step(len(y))
        for o in refs:
            o.zero_grad()
        ((alone(ids) - y) ** 2).mean().backward()
        for o in refs:
            o.step()
    # The store's table everywhere; the local one where it was pulled.
    table = torch.from_numpy(kv.pull(0))
    diff = max((net.out.weight - alone.out.weight).abs().max().item(),
               (net.out.bias - alone.out.bias).abs().max().item(),
               (table - alone.emb.weight).abs().max().item())
    if not mode.endswith('set_rows'):
        diff = max(diff, (net.emb.weight - alone.emb.weight).abs().max().item())
    # MXNet's Adam adds epsilon to sqrt(v) before the bias correction,
    # torch's after it: they differ by about lr * epsilon / sqrt(v).
    assert diff < (1e-4 if adam else 1e-5), diff
    never = sorted(set(range(30)) - set(torch.cat([b[0].flatten() for b in batches]).tolist()))
    assert (table[never] == alone.emb.weight[never]).all()
    print('rank %d: sparse trainer %s ok (%.3g)' % (r, mode, diff))


def one_round(opt):
    """The Trainer's step with set_rows pushes the dense parameters as all
    their rows in the call of the embedding's rows (one round trip): the
    weights it leaves are bit for bit those of the dense parameters pushed
    and pulled dense in a call of their own, then the table's rows, as the
    step did before. The same model and batches are run by hand through
    keys of their own in the same store; a big dense layer (through kvsd), small
    ones (combined by the workers) and a bias of one dimension; opt: a
    spec with momentum and wd, or adam."""
    import torch
    import kvs.torch

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(50, 8, sparse=True)
            self.big = torch.nn.Linear(8, 40000)           # 1.2 MiB: kvsd's
            self.out = torch.nn.Linear(40000, 1)

        def forward(self, ids):
            return self.out(torch.tanh(self.big(self.emb(ids).sum(1)))).squeeze(1)

    spec = {'sgd': 'sgd lr=0.1 momentum=0.9 wd=0.01', 'adam': 'adam lr=0.01 wd=0.01',
            'sgd_not_lazy': 'sgd lr=0.1 momentum=0.9 wd=0.01 lazy_update=0'}[opt]
    torch.manual_seed(1)
    net, hand = Model(), Model()
    hand.load_state_dict(net.state_dict())
    kv = kvs.create('dist_sync')
    r, n = kv.rank, kv.num_workers
    if not _rows_taken(kv, 10**9):           # int keys, as the Trainer's are
        return
    tr = kvs.torch.Trainer(net, kv, spec)
    names = [100 + i for i in range(len(list(hand.parameters())))]
    hp = list(hand.parameters())
    kv.init(names[:1], [kvs.RowSparse(hp[0].data, torch.arange(hp[0].shape[0]),
                                      tuple(hp[0].shape))])
    kv.init(names[1:], [p.data for p in hp[1:]])
    gen = torch.Generator().manual_seed(2)
    batches = [torch.randint(0, 40, (4 * n, 3), generator=gen) for _ in range(6)]
    for step, ids in enumerate(batches):
        mine = slice(r, None, n)
        following = batches[step + 1][mine].flatten() if step + 1 < len(batches) else \
            torch.arange(50)
        tr.zero_grad()
        net(ids[mine]).pow(2).sum().backward()
        tr.set_rows(net.emb.weight, following)
        tr.step(len(ids))
        for p in hp:
            p.grad = None
        hand(ids[mine]).pow(2).sum().backward()
        grads = [p.grad for p in hp[1:]]
        torch._foreach_mul_(grads, 1.0 / len(ids))
        kv.pushpull(names[1:], grads, out=[p.data for p in hp[1:]])
        rs = kvs._rows.from_torch(hp[0].grad)
        got = kv.pushpull(names[0], kvs.RowSparse(rs.data * (1.0 / len(ids)), rs.indices,
                                                  rs.shape), row_ids=following)
        hp[0].data.index_copy_(0, got.indices, got.data)
    for i, (a, b) in enumerate(zip(net.parameters(), hp)):
        assert torch.equal(a, b), (i, (a - b).abs().max().item())
    table = torch.from_numpy(kv.pull(0))
    assert torch.equal(table, torch.from_numpy(kv.pull(names[0])))
    print('rank %d: one round %s ok' % (r, opt))


def _standin_cuda():
    """(alloc(shape, index), put(t, values), get(t)) over the CUDA stand-in
    that KVS_CUDART names: torch tensors that say they live on CUDA device
    index, at a device pointer of the stand-in, as a CUDA build of torch
    hands them over (device cuda:i, data_ptr() on the device). This torch
    has no CUDA: the tensor's own CPU storage gives only dtype and shape."""
    import ctypes
    import torch
    rt = ctypes.CDLL(os.environ['KVS_CUDART'])

    class Cuda(torch.Tensor):
        __torch_function__ = torch._C._disabled_torch_function_impl

        @property
        def device(self):
            return torch.device('cuda', self.kvs_index)

        def data_ptr(self):
            return self.kvs_ptr

    def alloc(shape, index):
        t = torch.Tensor._make_subclass(Cuda, torch.empty(shape, dtype=torch.float32))
        p = ctypes.c_void_p()
        assert rt.cudaSetDevice(index) == 0
        assert rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(t.numel() * 4)) == 0
        t.kvs_ptr, t.kvs_index = p.value, index
        return t

    def copy(dst, src, nbytes, kind):
        assert rt.cudaMemcpy(ctypes.c_void_p(dst), ctypes.c_void_p(src),
                             ctypes.c_size_t(nbytes), kind) == 0

    def put(t, value):
        a = np.full(tuple(t.shape), value, np.float32)
        copy(t.kvs_ptr, a.ctypes.data, a.nbytes, 1)          # cudaMemcpyHostToDevice

    def get(t):
        a = np.empty(tuple(t.shape), np.float32)
        copy(a.ctypes.data, t.kvs_ptr, a.nbytes, 2)          # cudaMemcpyDeviceToHost
        return a

    return alloc, put, get


def cuda_tensors():
    """CUDA tensors (over the stand-in, see _standin_cuda) in dist_sync and
    in a local store: sums on devices and the host mixed, pulls onto
    devices; views and Python updaters of device keys refused plainly."""
    alloc, put, get = _standin_cuda()
    kv = kvs.create('dist_sync')
    r, n = kv.rank, kv.num_workers
    w, g, out = alloc((2, 3), r % 2), alloc((2, 3), r % 2), alloc((2, 3), (r + 1) % 2)
    put(w, r + 10)
    kv.init(3, w)                                 # rank 0's value wins
    kv.pull(3, out=out)
    assert (get(out) == 10).all(), get(out)
    for i in range(3):
        put(g, r + i)
        kv.push(3, g)
        kv.pull(3, out=out)
        assert (get(out) == n * i + n * (n - 1) / 2).all(), (i, get(out))
    put(g, 1)
    kv.push(3, [g, np.full((2, 3), 2, np.float32)])   # a device and the host, summed
    host = kv.pull(3)
    assert (host == 3 * n).all(), host
    kv.close()

    local = kvs.create('local')
    put(w, 4)
    local.init('w', w)
    local.push('w', [g, g])
    local.pull('w', out=out)
    assert (get(out) == 2).all(), get(out)
    try:
        local.pull_view('w')
        raise AssertionError('a view of a key on a GPU')
    except ValueError as e:
        assert 'lives on CUDA device %d' % (r % 2) in str(e), e
    local.set_updater(lambda key, inp, stored: None)
    try:
        local.push('w', g)
        raise AssertionError('a Python updater of a key on a GPU')
    except ValueError as e:
        assert 'Python updater takes host values' in str(e), e
    local.close()
    print('rank %d: cuda tensors ok' % r)


def digits():
    """The example as doc/python.md runs it: 4 workers reach the accuracy
    and match one process."""
    sys.argv = ['train_digits.py']
    import runpy
    runpy.run_path(os.path.join(os.path.dirname(__file__), '..', '..', 'examples',
                                'train_digits.py'), run_name='__main__')


def ctr():
    """The click-through example as doc/python.md runs it: 4 workers
    push the embedding's gradient by rows, reach the ground truth's AUC and
    match one process."""
    sys.argv = ['train_ctr.py']
    import runpy
    runpy.run_path(os.path.join(os.path.dirname(__file__), '..', '..', 'examples',
                                'train_ctr.py'), run_name='__main__')


if __name__ == '__main__':
    scenario = sys.argv[1].replace('async', 'async_')
    globals()[scenario](*sys.argv[2:])
