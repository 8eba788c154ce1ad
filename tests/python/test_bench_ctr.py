"""bench/bench_ctr.py in a tiny configuration: the kvs job (kvsrun, the
Trainer with set_rows) and the DDP job (torch.multiprocessing, gloo's
sparse allreduce) train the CTR model of examples/train_ctr.py on the same
batches to the same losses, and the figures it reports are sane. A check
of the benchmark's correctness, not of its speed."""

import os
import subprocess
import sys

import pytest

pytest.importorskip('torch', reason='torch is not installed (python3-torch)')

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, '..', '..', 'bench', 'bench_ctr.py')
SLOW = int(os.environ.get('KVS_TEST_SLOW', '1'))


def test_kvs_and_ddp_train_alike(tmp_path):
    kvsrun = os.environ.get('KVS_TEST_KVSRUN')
    if not kvsrun:
        pytest.skip('KVS_TEST_KVSRUN is not set (tests/test_python.sh sets it)')
    steps, workers = 4, 2
    proc = subprocess.run(
        [sys.executable, BENCH, 'run', '--kvsrun', kvsrun, '--workers', str(workers),
         '--passes', '1', '--warmup', '1', '--steps', str(steps), '--rows', '4096',
         '--train', '2000', '--test', '500', '--batch', '200', '--timeout', str(60 * SLOW)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=150 * SLOW,
        universal_newlines=True)
    assert proc.returncode == 0, proc.stdout
    out = tmp_path / 'out'
    out.write_text(proc.stdout)
    lines = [l.split(',') for l in proc.stdout.splitlines()]
    runs = {l[1]: l for l in lines if l[0] == 'ctr'}
    assert set(runs) == {'kvs', 'ddp'}, proc.stdout
    for impl, l in runs.items():
        _, _, pas, n, rows, dim, batch, timed, median, rss, shmem, hwm, kvsd, last, held = l
        assert (int(pas), int(n), int(rows), int(dim), int(batch), int(timed)) == \
            (1, workers, 4096, 32, 200, steps), l
        assert 0 < float(median) < 30 * SLOW, l
        assert 10000 < int(rss) <= int(hwm), l           # a torch process: over 10 MiB
        assert 0 <= int(shmem) <= int(rss), l
        assert (int(kvsd) > 0) == (impl == 'kvs'), l
        assert 0 < float(last) < 10 and 0 < float(held) < 10, l
    # The same batches, the same updates: the same losses, to float rounding.
    k, d = runs['kvs'], runs['ddp']
    assert abs(float(k[13]) - float(d[13])) < 1e-4, (k, d)
    assert abs(float(k[14]) - float(d[14])) < 1e-3, (k, d)
    check = [l for l in lines if l[0] == 'ctrcheck']
    assert len(check) == 1 and float(check[0][2]) < 1e-4, proc.stdout
    # The goal's value, and the report's table.
    vals = subprocess.run([sys.executable, BENCH, 'values', str(out)], stdout=subprocess.PIPE,
                          universal_newlines=True, check=True, timeout=60).stdout.split()
    assert vals[0] == 'rows.ddp' and len(vals) == 2, vals
    assert float(vals[1]) == pytest.approx(float(k[8]) / float(d[8]), rel=1e-4)
    md = tmp_path / 'ctr.md'
    subprocess.run([sys.executable, BENCH, 'report', str(out), str(md)], check=True, timeout=60,
                   stdout=subprocess.DEVNULL)
    table = md.read_text().splitlines()
    assert table[0].startswith('| ctr impl |') and len(table) == 4, table
    assert table[2].startswith('| kvs | 2 | 4096 |') and table[3].startswith('| ddp | 2 | 4096 |')
