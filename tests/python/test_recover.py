"""A dist job that loses a worker and recovers: `kvsrun -n 2 --restarts 2`
runs this file as its workers (see the end), rank 1 kills itself with
SIGKILL once after a commit, the job rolls back to that commit, kvsrun
starts a replacement, and both workers end with the values of a run
without the kill, and of the same steps on a local store, bit for bit."""

import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest

import kvs

STEPS, EVERY, KILL_AFTER = 30, 5, 14      # rank 1 dies after the commit of step 14
SPEC = 'sgd lr=0.1 momentum=0.9'
N = 8


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


def run(kvsrun, marker, kill):
    cmd = [kvsrun, '-n', '2', '--restarts', '2', sys.executable, os.path.abspath(__file__),
           marker, kill]
    env = dict(os.environ, KVS_TIMEOUT='60')
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=180, env=env)
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


def test_worker_killed_after_a_commit_rejoins(tmp_path):
    kvsrun = kvsrun_with_restarts()
    marker = str(tmp_path / 'killed')
    plain, _ = run(kvsrun, marker, '0')
    assert not os.path.exists(marker)
    killed, out = run(kvsrun, marker, '1')
    assert os.path.exists(marker), out
    # The replacement started from the commit; the survivor rolled back to it.
    assert 'rank 1 resumed at step %d' % KILL_AFTER in out, out
    assert 'rank 0 rolled back to step %d' % KILL_AFTER in out, out
    want = local_reference()
    assert plain[0] == plain[1] == want, out
    assert killed[0] == killed[1] == want, out


def worker(marker, kill):
    """One worker of the job: resume at start and after kvs.Restart, steps
    whose gradients are functions of the step, a commit every EVERY."""
    kv = kvs.create('dist_sync')
    r = kv.rank
    w = np.zeros(N, np.float32)

    def resume():
        while True:
            try:
                step = kv.resume_step()
                if step < 0:                   # fresh, or an empty store after a roll back
                    kv.init('w', np.zeros(N, np.float32))
                    kv.set_optimizer(SPEC)
                    kv.pull('w', out=w)
                else:
                    kv.pull('w', out=w)
                return step
            except kvs.Restart:
                pass

    step = resume()
    if step >= 0:
        print('rank %d resumed at step %d' % (r, step), flush=True)
    while step + 1 < STEPS:
        try:
            for step in range(step + 1, STEPS):
                kv.push('w', gradient(step, r))
                kv.pull('w', out=w)
                if (step + 1) % EVERY == 0:
                    kv.commit(step)
                    if (kill == '1' and r == 1 and step == KILL_AFTER
                            and not os.path.exists(marker)):
                        open(marker, 'w').close()
                        os.kill(os.getpid(), signal.SIGKILL)
        except kvs.Restart:
            step = resume()
            print('rank %d rolled back to step %d' % (r, step), flush=True)
    print('rank %d final %s' % (r, json.dumps(w.tolist())), flush=True)
    kv.close()


if __name__ == '__main__':
    worker(*sys.argv[1:3])
