"""dist_sync and dist_async from Python: jobs of 2-4 workers under kvsrun."""

import os

import pytest

from conftest import run_job


@pytest.mark.parametrize('workers', [2, 4])
def test_sync_rounds(job, workers):
    out = job(workers, 'sync', 3)
    assert out.count(': sync ok') == workers


def test_async_applies_every_push(job):
    assert job(3, 'async', 20).count('async ok') == 3


def test_dist_refuses_updaters_with_a_reason(job):
    assert job(2, 'refusals').count('refused: KVS_ENOTSUP') == 2


@pytest.mark.parametrize('workers', [2, 3])
def test_2bit_compression(job, workers):
    assert job(workers, 'compressed').count('compressed ok') == workers


def test_buffers_and_views(job):
    assert job(2, 'buffers', 5).count('buffers ok') == 2


def test_threads_on_one_handle(job):
    assert job(2, 'threads', 20).count('threads ok') == 2


def test_cuda_tensors(job):
    """Against the CUDA stand-in (tests/standin) and the host build of the
    kernel module, kvsd included: it reads the workers' device pushes
    through the stand-in's IPC."""
    pytest.importorskip('torch')
    standin = os.environ.get('KVS_TEST_STANDIN')
    kernels = os.environ.get('KVS_TEST_KERNELS')
    if not standin or not os.path.exists(standin) or not kernels or not os.path.exists(kernels):
        pytest.skip('KVS_TEST_STANDIN and KVS_TEST_KERNELS do not name the CUDA stand-in '
                    'and its kernel module (tests/test_python.sh sets them)')
    out = job(2, 'cuda_tensors', env={'KVS_CUDART': standin, 'KVS_CUDA_KERNELS': kernels,
                                      'KVS_STANDIN_DEVICES': '2'})
    assert out.count('cuda tensors ok') == 2


def test_a_dead_worker_fails_the_others(job):
    rc, out = run_job(2, 'die', timeout=90)
    assert rc != 0, out                   # kvsrun reports the worker that died
    assert 'rank 0: KVS_EPEERDEAD' in out, out
