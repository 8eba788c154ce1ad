"""Arrays of alloc() and pull_view() (and the Trainer's gradient buffers)
outlive close() and the store's collection: they keep their last values,
and the store's memory goes when the last of them goes, never under them.

Each case runs in a fresh interpreter (a read of unmapped memory would
kill it: a failed test, not a dead suite), under a deadline."""

import os
import subprocess
import sys
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))

# Shared by the scripts: the process's mapped size, and its mappings of
# kvsd's segments (memfd:kvs-worker, kvs-arena, ...).
PRELUDE = '''
import gc, os, sys
import numpy as np
import kvs

def vm_bytes():
    with open('/proc/self/statm') as f:
        return int(f.read().split()[0]) * os.sysconf('SC_PAGE_SIZE')

def kvs_maps():
    with open('/proc/self/maps') as f:
        return sum('/memfd:kvs-' in line for line in f)
'''


def run_script(body, timeout=60, kvsrun_n=None):
    script = PRELUDE + textwrap.dedent(body)
    cmd = [sys.executable, '-c', script]
    if kvsrun_n:
        kvsrun = os.environ.get('KVS_TEST_KVSRUN')
        if not kvsrun:
            pytest.skip('KVS_TEST_KVSRUN is not set (tests/test_python.sh sets it)')
        cmd = [kvsrun, '-n', str(kvsrun_n)] + cmd
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=timeout, env=dict(os.environ, KVS_TIMEOUT='30'))
    out = proc.stdout.decode(errors='replace')
    assert proc.returncode == 0, 'exited %d:\n%s' % (proc.returncode, out)
    return out


@pytest.mark.parametrize('how', ['close', 'gc'])
def test_local_arrays_outlive_the_store(how):
    out = run_script('''
        MB64 = 16 << 20                       # float32 elements
        kv = kvs.create('local')
        kv.init('w', np.full(MB64, 2.0, np.float32))
        before = vm_bytes()
        a = kv.alloc(MB64)
        b = kv.alloc((2, 3), 'int64')
        a[:] = 1.5
        b[:] = 7
        kv.push('w', a)
        view = kv.pull_view('w')
        head = view[:3]                       # an array made from the view keeps it too
        assert vm_bytes() - before >= MB64 * 4
        %s
        gc.collect()
        assert (a == 1.5).all() and (b == 7).all() and (view == 1.5).all(), 'values'
        assert head.tolist() == [1.5] * 3
        a[:] = 4                              # writable still; nothing is sent
        b += 1
        assert (a == 4).all() and (b == 8).all()
        assert not view.flags.writeable
        if 'kv' in globals():                 # a closed store refuses calls
            try:
                kv.push('w', a)
                raise AssertionError('push on a closed store')
            except ValueError as e:
                assert 'closed' in str(e), e
        held = vm_bytes()
        del a, b, view
        gc.collect()
        assert held - vm_bytes() < MB64 * 4, 'the memory went while head was alive'
        assert head.tolist() == [1.5] * 3
        del head
        gc.collect()
        assert held - vm_bytes() >= 2 * MB64 * 4, (held, vm_bytes())
        print('ok')
    ''' % ('kv.close()' if how == 'close' else 'del kv'))
    assert out.strip().endswith('ok')


def test_buffers_freed_while_the_store_is_open():
    run_script('''
        kv = kvs.create('local')
        base = vm_bytes()
        for _ in range(20):
            a = kv.alloc(16 << 20)            # 64 MiB, freed at each rebinding
            a[:] = 1
        assert vm_bytes() - base < 3 * (64 << 20), vm_bytes() - base
        del a
        gc.collect()
        assert vm_bytes() - base < (64 << 20)
        kv.close()
    ''')


def test_trainer_gradients_outlive_the_store():
    pytest.importorskip('torch', reason='torch is not installed (python3-torch)')
    run_script('''
        import torch
        import kvs.torch
        torch.manual_seed(0)
        net = torch.nn.Linear(4, 3)
        kv = kvs.create('local')
        tr = kvs.torch.Trainer(net.parameters(), kv)
        net(torch.ones(2, 4)).sum().backward()
        tr.step()
        grads = [p.grad for p in net.parameters()]
        want = [g.clone() for g in grads]
        bf = kv.alloc(5, 'bfloat16')
        bf += 2
        del tr
        kv.close()
        del kv
        gc.collect()
        assert all(torch.equal(g, w) for g, w in zip(grads, want))
        assert (bf == 2).all()
        net.zero_grad()                       # writes into the buffers
        assert all((p.grad == 0).all() for p in net.parameters())
        net(torch.ones(2, 4)).sum().backward()
        assert torch.equal(net.bias.grad, torch.full((3,), 2.0))
        print('ok')
    ''')


def test_dist_arrays_outlive_the_store():
    """In a dist job: a buffer and a view survive close(), the store's
    collection and the job's end, and kvsd's segments leave this process
    when the last array goes."""
    out = run_script('''
        kv = kvs.create('dist_sync')
        r, n = kv.rank, kv.num_workers
        kv.init(1, np.zeros(1000, np.float32))
        a = kv.alloc(1000)
        a[:] = r + 1
        kv.push(1, a)
        view = kv.pull_view(1)
        total = n * (n + 1) / 2
        assert (view == total).all()
        kv.barrier()
        kv.close()
        del kv
        gc.collect()
        assert kvs_maps() >= 2, open('/proc/self/maps').read()   # worker, arena: still mapped
        assert (view == total).all() and (a == r + 1).all()
        a[:] = 9
        assert (a == 9).all()
        del a
        gc.collect()
        assert (view == total).all()
        del view
        gc.collect()
        assert kvs_maps() == 0, open('/proc/self/maps').read()
        print('rank %d: ok' % r)
    ''', timeout=90, kvsrun_n=2)
    assert 'rank 0: ok' in out and 'rank 1: ok' in out, out
