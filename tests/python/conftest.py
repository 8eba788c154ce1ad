"""Shared by the Python tests: the package (uninstalled, on PYTHONPATH with
KVS_LIBRARY pointing at the build's libkvs, as tests/test_python.sh sets
them) and jobs of Python workers started by the build's kvsrun."""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def run_job(n, scenario, *args, timeout=120, kvsrun_opts=(), env=None):
    """Runs `kvsrun -n N python workers.py SCENARIO ARGS`; (exit status, output)."""
    kvsrun = os.environ.get('KVS_TEST_KVSRUN')
    if not kvsrun:
        pytest.skip('KVS_TEST_KVSRUN is not set (tests/test_python.sh sets it)')
    cmd = [kvsrun, '-n', str(n), *kvsrun_opts, sys.executable,
           os.path.join(HERE, 'workers.py'), scenario, *map(str, args)]
    full_env = dict(os.environ, KVS_TIMEOUT='60', **(env or {}))
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=timeout, env=full_env)
    return proc.returncode, proc.stdout.decode(errors='replace')


@pytest.fixture
def job():
    """run_job, asserting that the job succeeded; returns its output."""
    def run(n, scenario, *args, **kw):
        rc, out = run_job(n, scenario, *args, **kw)
        assert rc == 0, 'job %s exited %d:\n%s' % (scenario, rc, out)
        return out
    return run
