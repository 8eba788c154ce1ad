"""kvs.torch.DistributedOptimizer against torch's own single-process
training, its errors, and in 2-worker jobs (workers.py distopt) the pushes
made during backward and the values pulled first layer first."""

import signal

import pytest

import kvs

torch = pytest.importorskip('torch', reason='torch is not installed (python3-torch)')
import kvs.torch  # noqa: E402  (needs torch)
from test_torch import largest_difference, nets  # noqa: E402


@pytest.fixture(autouse=True)
def deadline():
    """Each test's own deadline."""
    def expired(*_):
        raise TimeoutError('the test ran past its 150 s deadline')
    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(150)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


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
    net(x).pow(2).sum().backward()
    opt.synchronize()
    with pytest.warns(UserWarning, match='skip_synchronize'):
        opt.step()                    # as Horovod: a warning, and the values pulled
    with pytest.raises(ValueError, match='without a backward'):
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
    committed = kvs.create('local')
    committed.commit(0)
    with pytest.raises(ValueError, match='commit'):
        kvs.torch.DistributedOptimizer('sgd lr=0.1', named, committed)
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


def test_failed_push_raised_by_step():
    class Failing(kvs.KVStore):
        def push(self, key, value, priority=0):
            raise kvs.KVSError(kvs.ENOKEY, 'refused by the test')
    net, _ = nets()
    opt = distributed(net, Failing('local'), 'torch', bucket_bytes=0)
    net(torch.randn(2, 5)).sum().backward()  # the pushes fail in the pusher thread
    with pytest.raises(kvs.KVSError, match='refused by the test'):
        opt.step()


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


def test_dist_distributed_optimizer_matches_one_process(job):
    """2 workers, in one job: torch's optimizer on the average and on the
    sum, the store's on the average and on the sum, 1 and 2 backward passes
    a step (workers.py distopt asserts the values, the pushes made during
    backward and the order of the pulls). The store's optimizer, once set,
    is the whole store's: the torch ones come first."""
    configs = ['torch-average-1', 'torch-sum-1', 'torch-average-2', 'store-average-1',
               'store-sum-2']
    out = job(2, 'distopt', *configs, timeout=140)
    for config in configs:
        assert out.count('distopt %s ok' % config) == 2, out
