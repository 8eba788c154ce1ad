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
