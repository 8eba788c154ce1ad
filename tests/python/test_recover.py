"""A dist job that loses a worker and recovers: `kvsrun -n 2 --restarts 2`
runs this file as its workers (see the end), rank 1 kills itself with
SIGKILL once (after a commit, or before the first one), the job rolls
back, kvsrun starts a replacement, and both workers end with the values of
a run without the kill, bit for bit: through the KVStore API (checked
against the same steps on a local store too) and through
kvs.torch.Trainer."""

import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest

import kvs

STEPS, EVERY = 30, 5                      # a commit after steps 4, 9, 14, ...
KILL_AT = {'after_commit': 14, 'before_commit': 2}
SPEC = 'sgd lr=0.1 momentum=0.9'
N = 8
SLOW = int(os.environ.get('KVS_TEST_SLOW', '1'))


def gradient(step, rank):
    """This worker's gradient of step: a function of the two alone."""
    return ((np.arange(N, dtype=np.float32) + step) * (rank + 1) / 7).astype(np.float32)


def kvsrun_with_restarts():
    kvsrun = os.environ.get('KVS_TEST_KVSRUN')
    if not kvsrun:
        pytest.skip('KVS_TEST_KVSRUN is not set (tests/test_python.sh sets it)')
    helped = subprocess.run([kvsrun, '--help'], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, timeout=30)
    if '--restarts' not in helped.stdout.decode(errors='replace'):
        pytest.skip('this kvsrun has no --restarts')
    return kvsrun


def run(kvsrun, marker, api, kill_at):
    cmd = [kvsrun, '-n', '2', '--restarts', '2', sys.executable, os.path.abspath(__file__),
           marker, api, str(kill_at)]
    env = dict(os.environ, KVS_TIMEOUT=str(60 * SLOW))
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=180 * SLOW, env=env)
    out = proc.stdout.decode(errors='replace')
    assert proc.returncode == 0, 'kvsrun exited %d:\n%s' % (proc.returncode, out)
    finals = dict((int(r), json.loads(v)) for r, v in
                  re.findall(r'rank (\d) final (\[[^\]]*\])', out))
    assert sorted(finals) == [0, 1], out
    return finals, out


def local_reference():
    """The same steps on a local store: per step the sum of both ranks'
    gradients, the same optimizer."""
    with kvs.create('local') as kv:
        kv.init('w', np.zeros(N, np.float32))
        kv.set_optimizer(SPEC)
        for step in range(STEPS):
            kv.push('w', [gradient(step, 0), gradient(step, 1)])
        return kv.pull('w').tolist()


@pytest.mark.parametrize('when', sorted(KILL_AT))
@pytest.mark.parametrize('api', ['kv', 'trainer'])
def test_killed_worker_rejoins(tmp_path, api, when):
    kvsrun = kvsrun_with_restarts()
    if api == 'trainer':
        pytest.importorskip('torch', reason='torch is not installed (python3-torch)')
    marker = str(tmp_path / 'killed')
    kill_at = KILL_AT[when]
    plain, _ = run(kvsrun, marker, api, -1)
    assert not os.path.exists(marker)
    killed, out = run(kvsrun, marker, api, kill_at)
    assert os.path.exists(marker), out
    # The survivor rolled back to the last commit before the kill (-1:
    # none, an empty store); the replacement started from it.
    back = (kill_at + 1) // EVERY * EVERY - 1
    assert 'rank 0 rolled back to step %d' % back in out, out
    if back >= 0:
        assert 'rank 1 resumed at step %d' % back in out, out
    assert plain[0] == plain[1], out
    assert killed[0] == killed[1] == plain[0], out
    if api == 'kv':
        assert plain[0] == local_reference(), out


def loop(r, resume, one_step, commit, marker, kill_at):
    """Steps from the resumed one to STEPS, a commit every EVERY, resuming
    after kvs.Restart; rank 1 kills itself once at kill_at (after its
    commit, if that step has one)."""
    step = resume()
    if step >= 0:
        print('rank %d resumed at step %d' % (r, step), flush=True)
    while step + 1 < STEPS:
        try:
            for step in range(step + 1, STEPS):
                one_step(step)
                if (step + 1) % EVERY == 0:
                    commit(step)
                if r == 1 and step == kill_at and not os.path.exists(marker):
                    open(marker, 'w').close()
                    os.kill(os.getpid(), signal.SIGKILL)
        except kvs.Restart:
            step = resume()
            print('rank %d rolled back to step %d' % (r, step), flush=True)


def retried(fn):
    """fn(), again while it raises kvs.Restart (a death during recovery)."""
    while True:
        try:
            return fn()
        except kvs.Restart:
            pass


def kv_worker(kv, marker, kill_at):
    """Through the KVStore API: pushes of gradients of the step and rank."""
    r = kv.rank
    w = np.zeros(N, np.float32)

    def resume():
        step = kv.resume_step()
        if step < 0:                           # fresh, or an empty store after a roll back
            kv.init('w', np.zeros(N, np.float32))
            kv.set_optimizer(SPEC)
        kv.pull('w', out=w)
        return step

    def one_step(step):
        kv.push('w', gradient(step, r))
        kv.pull('w', out=w)

    loop(r, lambda: retried(resume), one_step, kv.commit, marker, kill_at)
    return w.tolist()


def trainer_worker(kv, marker, kill_at):
    """Through kvs.torch.Trainer: each rank's half of a batch that is a
    function of the step."""
    import torch
    import kvs.torch
    r, n = kv.rank, kv.num_workers
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))
    trainer = retried(lambda: kvs.torch.Trainer(net.parameters(), kv, SPEC))

    def one_step(step):
        g = torch.Generator().manual_seed(1000 + step)
        x, y = torch.randn(16, 6, generator=g), torch.randint(0, 3, (16,), generator=g)
        trainer.zero_grad()
        torch.nn.functional.cross_entropy(net(x[r::n]), y[r::n], reduction='sum').backward()
        trainer.step(16)

    loop(r, lambda: retried(trainer.resume), one_step, trainer.commit, marker, kill_at)
    return [v for p in net.parameters() for v in p.detach().flatten().tolist()]


def worker(marker, api, kill_at):
    kv = kvs.create('dist_sync')
    run_ = kv_worker if api == 'kv' else trainer_worker
    values = run_(kv, marker, int(kill_at))
    print('rank %d final %s' % (kv.rank, json.dumps(values)), flush=True)
    kv.close()


if __name__ == '__main__':
    worker(*sys.argv[1:4])
