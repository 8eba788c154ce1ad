"""The workers of test_ddp.py: `kvsrun -n 2 python ddp_workers.py SCENARIO`.
Each asserts its values; a worker that finds a wrong one exits non-zero,
which fails the job."""

import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import kvs
import kvs.torch

STEPS, BATCH, LR = 6, 8, 0.1


def net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1024),
                               torch.nn.ReLU(), torch.nn.Linear(1024, 256), torch.nn.ReLU(),
                               torch.nn.Linear(256, 4))


def batch(step):
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(BATCH, 6, generator=g), torch.randint(0, 4, (BATCH,), generator=g)


def train(model, rank, n, steps=STEPS, before_step=None):
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    part = BATCH // n
    for step in range(steps):
        if before_step:
            before_step(step)
        x, y = batch(step)
        x, y = x[rank * part:(rank + 1) * part], y[rank * part:(rank + 1) * part]
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return model


def largest_difference(a, b):
    return max((p - q).abs().max().item() for p, q in zip(a.parameters(), b.parameters()))


def hook():
    """DDP with the kvs hook and kvs's process group trains to the values
    of one process on the whole batches, and of DDP on gloo with its own
    hook; its buckets (several, rebuilt after the first step) go through
    keys of kvs."""
    kv = kvs.create('dist_sync')
    r, n = kv.rank, kv.num_workers
    kvs.torch.init_process_group(kv)
    assert dist.get_backend() == 'kvs' and dist.get_world_size() == n and dist.get_rank() == r
    # Collectives on tensors that are not contiguous (a transpose) write
    # their results into them.
    pg = kvs.torch.ProcessGroup(kv)
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    t = (base * (r + 1)).t()
    pg.allreduce([t]).wait()
    assert t.tolist() == (base * (n * (n + 1) // 2)).t().tolist(), t
    opts = dist.BroadcastOptions()
    opts.rootRank = 1
    t = (base + r).t()
    pg.broadcast([t], opts).wait()
    assert t.tolist() == (base + 1).t().tolist(), t
    model = DDP(net(), bucket_cap_mb=0.25)
    state = kvs.torch.hook_state(kv)
    model.register_comm_hook(state, kvs.torch.allreduce_hook)
    train(model, r, n)
    assert state.error is None, state.error
    sizes = set(state._keys)
    buckets = {k.split(':')[1] for k in sizes}
    assert len(buckets) >= 2 and len(sizes) > len(buckets), sizes   # several, one rebuilt
    ref = train(net(), 0, 1)
    d_single = largest_difference(model.module, ref)
    assert d_single < 1e-5, d_single
    os.environ.setdefault('GLOO_SOCKET_IFNAME', 'lo')
    gloo = dist.new_group(backend='gloo')
    theirs = train(DDP(net(), process_group=gloo, bucket_cap_mb=0.25), r, n)
    d_gloo = largest_difference(model.module, theirs.module)
    assert d_gloo < 1e-6, d_gloo
    state.close()
    print('rank %d: hook ok, keys %s, from one process %.2g, from gloo %.2g'
          % (r, sorted(sizes), d_single, d_gloo))
    dist.destroy_process_group()
    kv.close()


def die():
    """Rank 1 dies before the third step; rank 0's backward fails with the
    store's KVS_EPEERDEAD instead of hanging."""
    kv = kvs.create('dist_sync')
    r, n = kv.rank, kv.num_workers
    kvs.torch.init_process_group(kv)
    model = DDP(net())
    state = kvs.torch.hook_state(kv)
    model.register_comm_hook(state, kvs.torch.allreduce_hook)

    def maybe_die(step):
        if step == 2 and r == 1:
            os._exit(3)
    try:
        train(model, r, n, steps=STEPS, before_step=maybe_die)
    except RuntimeError as e:
        assert 'KVS_EPEERDEAD' in str(e), e
        assert isinstance(state.error, kvs.PeerDead) and state.error.code == kvs.EPEERDEAD, \
            state.error
        print('rank 0: %s' % state.error)
        sys.exit(0)
    raise AssertionError('training ended although rank 1 died')


if __name__ == '__main__':
    globals()[sys.argv[1]](*sys.argv[2:])
