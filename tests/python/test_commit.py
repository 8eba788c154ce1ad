"""Commits and recovery in Python on a local store: kv.commit and
kv.resume_step, kvs.Restart for KVS_ERESTART, and kvs.torch.Trainer's
commit and resume. (Roll backs of dist jobs: test_recover.py.)"""

import numpy as np
import pytest

import kvs
from kvs import _lib

try:
    import torch
    import kvs.torch
except ImportError:           # Debian: python3-torch
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason='torch is not installed (python3-torch)')


@pytest.fixture
def kv():
    with kvs.create('local') as store:
        yield store


# ---- the store -----------------------------------------------------------

def test_resume_step_follows_commits(kv):
    assert kv.resume_step() == -1
    kv.init('w', np.arange(4, dtype=np.float32))
    kv.commit(0)
    assert kv.resume_step() == 0
    kv.push('w', np.ones(4, np.float32))
    kv.commit(7)
    step = kv.resume_step()
    assert step == 7 and type(step) is int
    assert kv.pull('w').tolist() == [1, 1, 1, 1]


def test_commit_refuses_bad_steps(kv):
    kv.init('w', np.zeros(2, np.float32))
    with pytest.raises(kvs.KVSError) as e:
        kv.commit(-1)
    assert e.value.code == kvs.EBADARG and e.value.name == 'KVS_EBADARG'
    assert not isinstance(e.value, kvs.Restart)
    assert kv.resume_step() == -1              # changed nothing
    for bad in ('3', 2.0, True, None):
        with pytest.raises(TypeError):
            kv.commit(bad)
    kv.close()
    with pytest.raises(ValueError):
        kv.commit(1)
    with pytest.raises(ValueError):
        kv.resume_step()


def test_erestart_raises_restart(kv):
    assert kvs.ERESTART == -30019
    assert issubclass(kvs.Restart, kvs.KVSError) and 'Restart' in kvs.__all__
    with pytest.raises(kvs.Restart) as e:
        _lib.fail(None, kvs.ERESTART)
    assert e.value.code == kvs.ERESTART and e.value.name == 'KVS_ERESTART'
    assert 'rolled back to its last commit' in str(e.value)
    err = _lib.error(kvs.ERESTART, 'kvsd restarted')
    assert type(err) is kvs.Restart and err.detail == 'kvsd restarted'
    assert 'kvsd restarted' in str(err)
    assert type(_lib.error(kvs.EBADARG)) is kvs.KVSError
    # Through a store's own check, which counts the roll backs it saw.
    with pytest.raises(kvs.Restart):
        kv._check(kvs.ERESTART)
    with pytest.raises(kvs.KVSError) as e:
        kv._check(kvs.ENOKEY)
    assert type(e.value) is kvs.KVSError
    assert kv._restarts == 1


# ---- kvs.torch.Trainer ------------------------------------------------------

def _net(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.ReLU(), torch.nn.Linear(7, 3))


def _step(net, trainer, i):
    g = torch.Generator().manual_seed(100 + i)
    x, y = torch.randn(8, 5, generator=g), torch.randint(0, 3, (8,), generator=g)
    trainer.zero_grad()
    torch.nn.functional.cross_entropy(net(x), y, reduction='sum').backward()
    trainer.step(8)


def _values(net):
    return [p.detach().clone() for p in net.parameters()]


def _trainer(net, store):
    return kvs.torch.Trainer(net.parameters(), store, kvs.optimizer.SGD(0.1, momentum=0.9))


def _reference(steps):
    """The net after STEPS steps of a run that never stops (a local store)."""
    net = _net(0)
    with kvs.create('local') as store:
        tr = _trainer(net, store)
        for i in range(steps):
            _step(net, tr, i)
    return net


@needs_torch
def test_trainer_commit_then_resume(kv):
    net = _net(0)
    tr = _trainer(net, kv)
    assert tr.resume() == -1                   # fresh: the keys the Trainer set up stay
    for i in range(3):
        _step(net, tr, i)
    tr.commit(2)
    kept = _values(net)
    with torch.no_grad():                      # weights that went astray locally
        for p in net.parameters():
            p.add_(1.0)
    net(torch.randn(2, 5)).sum().backward()    # and a gradient of a step cut short
    assert tr.resume() == 2
    stored = kv.pull(tr.keys, out=[torch.zeros_like(p) for p in net.parameters()])
    for p, s, k in zip(net.parameters(), stored, kept):
        assert torch.equal(p.data, s) and torch.equal(p.data, k)
        assert p.grad is None or not p.grad.any()


@needs_torch
def test_trainer_made_on_a_committed_store_resumes(kv):
    """A new Trainer (as a replacement worker makes) takes the committed
    weights and keeps the optimizer's state: its next step is that of a run
    that never stopped, bit for bit."""
    ref_net = _reference(5)
    net = _net(0)
    tr = _trainer(net, kv)
    for i in range(3):
        _step(net, tr, i)
    tr.commit(2)
    again = _net(1)                            # other initial weights: the store's win
    tr2 = _trainer(again, kv)
    assert [torch.equal(a, b) for a, b in zip(_values(again), _values(net))] == [True] * 4
    step = tr2.resume()
    assert step == 2
    for i in range(step + 1, 5):
        _step(again, tr2, i)
    for a, b in zip(_values(again), _values(ref_net)):
        assert torch.equal(a, b)


@needs_torch
def test_trainer_starts_over_after_a_roll_back_before_any_commit(kv):
    """A roll back before the first commit empties the store: resume() sets
    it up again from the initial weights it kept (resumed before the first
    step), and the steps redone give the weights of a run without it."""
    ref_net = _reference(4)
    net = _net(0)
    tr = _trainer(net, kv)
    assert tr.resume() == -1
    for i in range(2):
        _step(net, tr, i)
    # What a dist store's handle is after kvsd rolled back to no commit: a
    # store without keys, and a roll back counted (the Restart raised).
    emptied = kvs.create('local')
    emptied._restarts = kv._restarts + 1
    tr.kv = emptied
    assert tr.resume() == -1
    step = -1
    for i in range(step + 1, 4):
        _step(net, tr, i)
    for a, b in zip(_values(net), _values(ref_net)):
        assert torch.equal(a, b)
    tr.commit(3)                               # from now a roll back goes to a commit
    assert tr._initial is None
    emptied.close()


@needs_torch
def test_trainer_without_optimizer_does_not_commit(kv):
    net = _net(0)
    tr = kvs.torch.Trainer(net.parameters(), kv)
    assert tr.resume() == -1
    with pytest.raises(ValueError, match='without an optimizer'):
        tr.commit(0)
    assert kv.resume_step() == -1
    kv.commit(0)                               # the store itself may: its keys hold gradients
    with pytest.raises(ValueError, match='without an optimizer'):
        tr.resume()
    with pytest.raises(ValueError, match='without an optimizer'):
        kvs.torch.Trainer(_net(1).parameters(), kv)
