"""kvs.torch.Trainer against torch's own single-process training."""

import re

import numpy as np
import pytest

import kvs

torch = pytest.importorskip('torch', reason='torch is not installed (python3-torch)')
import kvs.torch  # noqa: E402  (needs torch)


def nets(seed=0):
    torch.manual_seed(seed)
    a = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.ReLU(), torch.nn.Linear(7, 3))
    b = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.ReLU(), torch.nn.Linear(7, 3))
    b.load_state_dict(a.state_dict())
    return a, b


def largest_difference(a, b):
    return max((p - q).abs().max().item() for p, q in zip(a.parameters(), b.parameters()))


@pytest.mark.parametrize('opt', ['sgd', 'adam'])
def test_local_trainer_matches_torch(opt):
    net, ref = nets()
    kv = kvs.create('local')
    if opt == 'sgd':
        tr = kvs.torch.Trainer(net.parameters(), kv, kvs.optimizer.SGD(0.1, momentum=0.9))
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    else:
        tr = kvs.torch.Trainer(net.parameters(), kv, kvs.optimizer.Adam(0.01))
        ref_opt = torch.optim.Adam(ref.parameters(), lr=0.01, eps=1e-8)
    x, y = torch.randn(16, 5), torch.randint(0, 3, (16,))
    for _ in range(8):
        tr.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y, reduction='sum').backward()
        tr.step(16)
        ref_opt.zero_grad()
        torch.nn.functional.cross_entropy(ref(x), y).backward()
        ref_opt.step()
    # MXNet's Adam adds epsilon to sqrt(v) before the bias correction,
    # torch's after it: they differ by about lr * epsilon / sqrt(v).
    assert largest_difference(net, ref) < (1e-5 if opt == 'sgd' else 1e-4)


def test_gradients_live_in_store_buffers():
    net, _ = nets()
    kv = kvs.create('local')
    tr = kvs.torch.Trainer(net.parameters(), kv, 'sgd lr=0.1')
    # No buffer before the first gradient says its layout (dense or sparse).
    assert all(p.grad is None for p in net.parameters())
    net(torch.randn(2, 5)).sum().backward()
    tr.step(2)
    grads = [p.grad for p in net.parameters()]
    tr.zero_grad()
    net(torch.randn(2, 5)).sum().backward()
    assert all(p.grad is g for p, g in zip(net.parameters(), grads))   # accumulated in place
    assert any(g.abs().sum() > 0 for g in grads)
    tr.step(2)
    net.zero_grad(set_to_none=True)
    tr.zero_grad()
    assert all(p.grad is g and not g.any() for p, g in zip(net.parameters(), grads))


def test_trainer_errors():
    kv = kvs.create('local')
    with pytest.raises(TypeError):
        kvs.torch.Trainer([torch.zeros(2)], 'local')
    with pytest.raises(ValueError):
        kvs.torch.Trainer([], kv)
    with pytest.raises(TypeError):
        kvs.torch.Trainer([torch.zeros(2, dtype=torch.int64)], kv)
    tr = kvs.torch.Trainer([torch.zeros(2, requires_grad=True)], kv, 'sgd lr=0.1')
    with pytest.raises(TypeError, match='batch_size'):
        tr.step()
    with pytest.raises(ValueError):
        tr.step(0)


@pytest.mark.parametrize('mode', ['store', 'average'])
def test_dist_trainer_matches_one_process(job, mode):
    out = job(2, 'trainer', mode)
    assert out.count('trainer %s ok' % mode) == 2


def test_train_digits_example(job):
    out = job(4, 'digits', timeout=300)
    acc = float(re.search(r'held-out accuracy: ([\d.]+)%', out).group(1))
    diff = float(re.search(r'largest weight difference (\S+)', out).group(1))
    # The figures doc/python.md quotes: 98% held out, weights within 1e-6.
    assert acc >= 98.0 and diff <= 1e-6, out


def test_train_ctr_example(job):
    out = job(4, 'ctr', timeout=300)
    auc, truth = map(float, re.search(r'held-out AUC: ([\d.]+), ground truth ([\d.]+)',
                                      out).groups())
    diff = float(re.search(r'largest weight difference (\S+)', out).group(1))
    # The figures doc/python.md quotes: the AUC within 0.01 of the ground
    # truth's, weights within 1e-5 of one process.
    assert abs(auc - truth) <= 0.01 and diff <= 1e-5, out


# ---- kvs.torch.DistributedOptimizer ----------------------------------------

def distributed(net, kv, mode, **kw):
    if mode == 'store':
        return kvs.torch.DistributedOptimizer('sgd lr=0.1 momentum=0.9', net.named_parameters(),
                                              kv, **kw)
    return kvs.torch.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9),
                                          net.named_parameters(), kv, **kw)


@pytest.mark.parametrize('mode', ['torch', 'store'])
@pytest.mark.parametrize('passes', [1, 3])
def test_local_distributed_optimizer_matches_torch(mode, passes):
    net, ref = nets()
    opt = distributed(net, kvs.create('local'), mode, backward_passes_per_step=passes)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(12, 5), torch.randint(0, 3, (12,))
    for step in range(6):
        opt.zero_grad()
        if step == 2:
            net.zero_grad(set_to_none=True)   # autograd's own new gradients are taken too
        for micro in range(passes):
            part = slice(micro * 12 // passes, (micro + 1) * 12 // passes)
            torch.nn.functional.cross_entropy(net(x[part]), y[part], reduction='sum').backward()
        opt.step()
        ref_opt.zero_grad()
        torch.nn.functional.cross_entropy(ref(x), y, reduction='sum').backward()
        ref_opt.step()
    for p, q in zip(net.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-5, atol=1e-6)


def test_distributed_optimizer_is_the_wrapped_optimizer():
    net, _ = nets()
    sgd = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    opt = kvs.torch.DistributedOptimizer(sgd, net.named_parameters(), kvs.create('local'))
    assert isinstance(opt, torch.optim.SGD) and opt.param_groups is sgd.param_groups
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    grads = [p.grad for p in net.parameters()]       # store buffers, from the start
    net(torch.randn(2, 5)).sum().backward()
    assert all(p.grad is g for p, g in zip(net.parameters(), grads))
    opt.step()
    sched.step()
    assert opt.param_groups[0]['lr'] == 0.05 and len(opt.state_dict()['state']) == 4
    opt.zero_grad()
    assert all(p.grad is g and not g.any() for p, g in zip(net.parameters(), grads))


def test_distributed_optimizer_buckets_and_synchronize():
    net, ref = nets()
    kv = kvs.create('local')
    opt = kvs.torch.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1),
                                         net.named_parameters(), kv, bucket_bytes=100)
    # Parameters of 140, 28, 84 and 12 bytes, the last ones first: the
    # output layer's bias and weight with the first layer's bias (124 bytes),
    # then the first layer's weight.
    assert opt._buckets == [[3, 2, 1], [0]]
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    x = torch.randn(4, 5)
    net(x).pow(2).sum().backward()
    opt.synchronize()
    for p in net.parameters():           # clipping after synchronize, as Horovod has it
        p.grad.clamp_(-0.5, 0.5)
    with opt.skip_synchronize():
        opt.step()
    ref(x).pow(2).sum().backward()
    for p in ref.parameters():
        p.grad.clamp_(-0.5, 0.5)
    ref_opt.step()
    for p, q in zip(net.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match='synchronize'):
        with opt.skip_synchronize():
            opt.step()


def test_distributed_optimizer_errors():
    net, _ = nets()
    kv = kvs.create('local')
    sgd = torch.optim.SGD(net.parameters(), lr=0.1)
    named = list(net.named_parameters())
    with pytest.raises(TypeError, match='kvs.KVStore'):
        kvs.torch.DistributedOptimizer(sgd, named, 'local')
    with pytest.raises(TypeError, match='optimizer must be'):
        kvs.torch.DistributedOptimizer(0.1, named, kv)
    with pytest.raises(ValueError, match='twice'):
        kvs.torch.DistributedOptimizer(sgd, named + named[:1], kv)
    with pytest.raises(ValueError, match='unique'):
        kvs.torch.DistributedOptimizer(sgd, [('w', p) for _, p in named], kv)
    with pytest.raises(ValueError, match='not in named_parameters'):
        kvs.torch.DistributedOptimizer(sgd, named[1:], kv)
    with pytest.raises(ValueError, match='pairs'):
        kvs.torch.DistributedOptimizer(sgd, net.parameters(), kv)
    with pytest.raises(ValueError, match='backward_passes_per_step'):
        kvs.torch.DistributedOptimizer(sgd, named, kv, backward_passes_per_step=0)
    with pytest.raises(ValueError, match='op must be'):
        kvs.torch.DistributedOptimizer(sgd, named, kv, op='max')
    with pytest.raises(ValueError, match='bucket_bytes'):
        kvs.torch.DistributedOptimizer(sgd, named, kv, bucket_bytes=-1)
    with pytest.raises(ValueError, match='named_parameters'):
        kvs.torch.DistributedOptimizer('sgd lr=0.1', None, kv)
    with pytest.raises(ValueError, match='bytes'):
        kvs.torch.DistributedOptimizer('sgd lr=0.1', [('x' * 300, named[0][1])], kv)
    # Nothing of the refused calls reached the store or the parameters.
    assert all(p.grad is None for p in net.parameters())
    opt = kvs.torch.DistributedOptimizer(sgd, named, kv)
    with pytest.raises(ValueError, match='without a backward'):
        opt.step()
    net(torch.randn(2, 5)).sum().backward()
    with pytest.raises(ValueError, match='zero_grad'):
        opt.zero_grad()
    with pytest.raises(ValueError, match='backward_passes_per_step'):
        net(torch.randn(2, 5)).sum().backward()
    with pytest.raises(ValueError, match='closure'):
        opt.step(lambda: 0)
    opt.step()
    opt.zero_grad()


def test_broadcast_parameters_local():
    net, ref = nets()
    kv = kvs.create('local')
    state = net.state_dict()
    kvs.torch.broadcast_parameters(state, kv)
    kvs.torch.broadcast_parameters(state, kv)        # again: keys of its own
    assert largest_difference(net, ref) == 0
    with pytest.raises(ValueError, match='state_dict'):
        kvs.torch.broadcast_parameters([1, 2], kv)
    with pytest.raises(TypeError):
        kvs.torch.broadcast_parameters(state, None)


@pytest.mark.parametrize('how', ['torch average 1', 'store average 1', 'torch sum 1',
                                 'store sum 2', 'torch average 2'])
def test_dist_distributed_optimizer_matches_one_process(job, how):
    out = job(2, 'distopt', *how.split(), timeout=120)
    assert out.count('distopt %s ok' % how) == 2, out
