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

