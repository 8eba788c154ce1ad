"""kvs.torch's DDP communication hook and process group, in jobs of 2
workers (ddp_workers.py): training matches one process on the whole
batches (within 1e-5) and DDP on gloo with its own hook (within 1e-6), the
buckets rebuilt after the first step get keys of their size, and a worker
that dies fails the other's backward with KVS_EPEERDEAD, without a hang."""

import os
import subprocess
import sys

import pytest

pytest.importorskip('torch', reason='torch is not installed (python3-torch)')

HERE = os.path.dirname(os.path.abspath(__file__))


def ddp_job(scenario, timeout):
    kvsrun = os.environ.get('KVS_TEST_KVSRUN')
    if not kvsrun:
        pytest.skip('KVS_TEST_KVSRUN is not set (tests/test_python.sh sets it)')
    cmd = [kvsrun, '-n', '2', sys.executable, os.path.join(HERE, 'ddp_workers.py'), scenario]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=timeout, env=dict(os.environ, KVS_TIMEOUT='30'))
    return proc.returncode, proc.stdout.decode(errors='replace')


def test_ddp_hook_trains_as_one_process_and_as_gloo():
    rc, out = ddp_job('hook', timeout=150)
    assert rc == 0, out
    assert 'rank 0: hook ok' in out and 'rank 1: hook ok' in out, out


def test_ddp_hook_dead_worker_fails_the_other():
    rc, out = ddp_job('die', timeout=90)
    assert rc != 0, out                       # kvsrun reports rank 1's death
    assert 'rank 0: KVS_EPEERDEAD' in out, out


def test_process_group_collectives_on_a_local_store():
    import torch
    import torch.distributed as dist
    import kvs
    import kvs.torch
    kv = kvs.create('local')
    pg = kvs.torch.ProcessGroup(kv)
    assert (pg.rank(), pg.size()) == (0, 1)
    t = torch.arange(6, dtype=torch.float64).reshape(2, 3)
    opts = dist.BroadcastOptions()
    opts.rootRank = 0
    pg.broadcast([t], opts).wait()
    assert t.tolist() == [[0, 1, 2], [3, 4, 5]]
    flags = torch.tensor([True, False, True])
    pg.allreduce([flags]).wait()                    # bool travels as uint8
    assert flags.tolist() == [True, False, True]
    outs = [[torch.zeros(3, dtype=torch.int64)]]
    pg.allgather(outs, [torch.tensor([7, 8, 9])]).wait()
    assert outs[0][0].tolist() == [7, 8, 9]
    pg.barrier().wait()
    mx = dist.AllreduceOptions()
    mx.reduceOp = dist.ReduceOp.MAX
    with pytest.raises(RuntimeError, match='SUM and AVG'):
        pg.allreduce([t], mx)
    with pytest.raises(TypeError, match='complex'):
        pg.allreduce([torch.zeros(2, dtype=torch.complex64)])
    with pytest.raises(TypeError, match='kvs.KVStore'):
        kvs.torch.hook_state(object())
    kv.close()


@pytest.mark.parametrize('room', ['room', 'no_room'])
def test_ddp_hook_in_one_process(room):
    """One worker on a local store: DDP with the hook and the kvs group
    trains as the module alone would (the hook's average is the gradient),
    from store buffers or, when the store has no room for one, with
    copies."""
    script = '''
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
import kvs, kvs.torch
kv = kvs.create('local')
kvs.torch.init_process_group(kv)
def net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.ReLU(), torch.nn.Linear(7, 2))
model, ref = DDP(net()), net()
state = kvs.torch.hook_state(kv)
if %r == 'no_room':
    def alloc(*args):
        raise kvs.KVSError(-28, 'no room')
    kv.alloc = alloc
model.register_comm_hook(state, kvs.torch.allreduce_hook)
for m in (model, ref):
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for step in range(4):
        x = torch.randn(6, 5, generator=torch.Generator().manual_seed(step))
        opt.zero_grad()
        m(x).square().sum().backward()
        opt.step()
d = max((p - q).abs().max().item() for p, q in zip(model.module.parameters(), ref.parameters()))
assert d == 0, d
assert state._staging == (%r == 'room'), state._staging
assert all((v is not None) == state._staging for v in state._keys.values())
print('ok')
''' % (room, room)
    proc = subprocess.run([sys.executable, '-c', script], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=120)
    out = proc.stdout.decode(errors='replace')
    assert proc.returncode == 0 and out.strip().endswith('ok'), out
