#!/usr/bin/python3
"""What Python adds to kvs, and a Trainer step against DistributedDataParallel.

    bench_python.py calls --suite _bench/bench/bench_suite [--sizes 4K,64M]
        The same call from C and from Python, in the same run: bench_suite
        local -n 1 (one kvs_pushpull of one value, in place, round.h's
        harness) against kv.pushpull(key, value) through the package, per
        size. Prints "pycall,BYTES,C_S,PY_S" lines (medians, seconds).
    bench_python.py trainer --kvsrun _bench/daemon/kvsrun/kvsrun [--steps 10]
        A training step of ResNet-50's 161 parameter tensors
        (../resnet50_sizes.h, 25,557,032 float32 values) with 2 worker
        processes: backward, then kvs.torch.Trainer.step (the store's SGD),
        against backward through torch's DistributedDataParallel on gloo
        (which exchanges the gradients during backward), then torch's
        SGD. The model's output is a constant times the sum of every
        parameter, so backward costs the same in both. Each worker also
        times the bare backward (no exchange, no update); the step's cost
        is the step's median less that one. Prints
        "pytrainer,IMPL,WORKERS,STEP_S,BARE_S" lines (medians, slowest rank).

    bench_python.py report FILE
        The goals, from the lines of the two above in FILE.

A benchmark, not a test: it exits 0 whatever the speed, 1 when something
fails or a value is wrong. The package is used as configured in the
environment (PYTHONPATH and KVS_LIBRARY as tests/test_python.sh sets them,
or installed).
"""
import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_sizes(text):
    units = {'': 0, 'K': 10, 'M': 20, 'G': 30}
    out = []
    for part in text.split(','):
        m = re.fullmatch(r'(\d+)([KMG]?)', part.strip().upper())
        if not m:
            raise SystemExit('bench_python: bad size %r' % part)
        out.append(int(m.group(1)) << units[m.group(2)])
    return out


def timed(fn, seconds, min_reps):
    """Median of fn's time over at least min_reps runs and `seconds`."""
    for _ in range(3):
        fn()
    times = []
    start = time.perf_counter()
    while len(times) < min_reps or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if len(times) >= 1000000:
            break
    return statistics.median(times)


def calls(args):
    import kvs
    sizes = parse_sizes(args.sizes)
    out = subprocess.run([args.suite, 'local', '-n', '1', '--sizes', args.sizes, '--seconds',
                          str(args.seconds), '--min-reps', str(args.min_reps)],
                         stdout=subprocess.PIPE, check=True, universal_newlines=True).stdout
    c_median = {}
    for line in out.splitlines():
        f = line.split(',')
        if f[0] == 'row' and f[2] == 'kvs-local':
            c_median[int(float(f[4]))] = float(f[6])
    kv = kvs.create('local')
    for i, size in enumerate(sizes):
        n = size // 4
        value = (np.arange(n) % 251).astype(np.float32)
        kv.init(i, np.zeros(n, np.float32))
        kv.pushpull(i, value)
        if not np.array_equal(value, (np.arange(n) % 251).astype(np.float32)):
            raise SystemExit('bench_python: pushpull returned a wrong value')
        py = timed(lambda: kv.pushpull(i, value), args.seconds, args.min_reps)
        print('pycall,%d,%.9g,%.9g' % (size, c_median[size], py), flush=True)


def resnet50_sizes():
    with open(os.path.join(HERE, 'resnet50_sizes.h')) as f:
        text = f.read()
    body = text[text.index('resnet50_sizes[RESNET50_NTENSORS] = {'):]
    body = re.sub(r'/\*.*?\*/', '', body[body.index('{') + 1:body.index('};')], flags=re.S)
    sizes = [int(v) for v in re.findall(r'(\d+)L', body)]
    if len(sizes) != 161 or sum(sizes) != 25557032:
        raise SystemExit('bench_python: resnet50_sizes.h did not parse')
    return sizes


def model(torch):
    """161 parameters of ResNet-50's sizes; the output is x times the sum of
    every parameter, so every gradient is x."""
    class Params(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ps = torch.nn.ParameterList(
                [torch.nn.Parameter(torch.zeros(n)) for n in resnet50_sizes()])

        def forward(self, x):
            return sum(p.sum() for p in self.ps) * x
    return Params()


def trainer_worker(impl, steps):
    """One worker of a trainer job; rank 0 prints the medians."""
    import torch
    torch.set_num_threads(1)
    net = model(torch)
    if impl == 'kvs':
        import kvs
        import kvs.torch
        kv = kvs.create('dist_sync')
        rank, nw, sync = kv.rank, kv.num_workers, kv.barrier
    else:
        import torch.distributed as dist
        rank, nw = int(os.environ['RANK']), int(os.environ['WORLD_SIZE'])
        dist.init_process_group('gloo', rank=rank, world_size=nw)
        sync = dist.barrier
    x = torch.tensor(float(rank + 1))

    def median_of(fn, reps):
        times = []
        for i in range(reps + 2):
            sync()
            t0 = time.perf_counter()
            fn()
            if i >= 2:
                times.append(time.perf_counter() - t0)
        return statistics.median(times)

    def bare():
        net.zero_grad()
        net(x).backward()

    bare_s = median_of(bare, steps)     # before any hook of the exchange is set
    with torch.no_grad():
        for p in net.parameters():
            p.zero_()
    if impl == 'kvs':
        trainer = kvs.torch.Trainer(net.parameters(), kv, 'sgd lr=0.5')

        def step():
            trainer.zero_grad()
            net(x).backward()
            trainer.step(1)
    else:
        ddp = torch.nn.parallel.DistributedDataParallel(net)
        opt = torch.optim.SGD(net.parameters(), lr=0.5 * nw)  # DDP averages; kvs sums

        def step():
            opt.zero_grad()
            ddp(x).backward()
            opt.step()
    step_s = median_of(step, steps)
    # Every gradient summed over workers is 1 + 2 + ... + nw, lr 0.5 each step.
    want = -0.5 * (steps + 2) * nw * (nw + 1) / 2
    got = [p.data[0].item() for p in net.parameters()]
    if any(abs(g - want) > 1e-3 * abs(want) for g in got):
        raise SystemExit('bench_python: %s trained to %r, not %r' % (impl, got[0], want))
    if impl == 'kvs':
        slowest = [step_s, bare_s]    # rank 0's, as the C benchmarks
    else:
        t = torch.tensor([step_s, bare_s], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        slowest = t.tolist()
    if rank == 0:
        print('pytrainer,%s,%d,%.9g,%.9g' % (impl, nw, slowest[0], slowest[1]), flush=True)


def trainer(args):
    env = dict(os.environ, KVS_TIMEOUT='120')
    me = os.path.abspath(__file__)
    subprocess.run([args.kvsrun, '-n', '2', sys.executable, me, 'trainer-worker', 'kvs',
                    str(args.steps)], check=True, env=env)
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(2):
        e = dict(env, RANK=str(rank), WORLD_SIZE='2', MASTER_ADDR='127.0.0.1',
                 MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, me, 'trainer-worker', 'ddp',
                                       str(args.steps)], env=e))
    if any(p.wait(timeout=600) != 0 for p in procs):
        raise SystemExit('bench_python: the DDP job failed')


def report(path):
    calls_, trainers = {}, {}
    with open(path) as f:
        for line in f:
            row = line.strip().split(',')
            if row[0] == 'pycall':
                calls_[int(row[1])] = (float(row[2]), float(row[3]))
            elif row[0] == 'pytrainer':
                trainers[row[1]] = (float(row[3]), float(row[4]))

    def goal(what, ok, detail):
        print('%-68s %s (%s)' % (what, 'met' if ok else 'MISSED', detail))
    for size, (c, py) in sorted(calls_.items()):
        if size <= 65536:
            goal('Python call, %d KiB: <= 5 us over C' % (size // 1024), py - c <= 5e-6,
                 'C %.2f us, Python %.2f us' % (c * 1e6, py * 1e6))
        else:
            goal('Python call, %d MiB: <= 2%% over C' % (size >> 20), py <= 1.02 * c,
                 'C %.2f ms, Python %.2f ms, %+.1f%%' % (c * 1e3, py * 1e3, 100 * (py / c - 1)))
    if 'kvs' in trainers and 'ddp' in trainers:
        (ks, kb), (ds, db) = trainers['kvs'], trainers['ddp']
        goal('Trainer step, ResNet-50, 2 workers: <= 0.5 x DDP on gloo', ks <= 0.5 * ds,
             'kvs %.1f ms, DDP %.1f ms: %.2f x; less bare backward: %.1f / %.1f ms, %.2f x'
             % (ks * 1e3, ds * 1e3, ks / ds, (ks - kb) * 1e3, (ds - db) * 1e3,
                (ks - kb) / max(ds - db, 1e-9)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('what', choices=['calls', 'trainer', 'trainer-worker', 'report'])
    ap.add_argument('rest', nargs='*')
    ap.add_argument('--suite')
    ap.add_argument('--kvsrun')
    ap.add_argument('--sizes', default='4K,64M')
    ap.add_argument('--seconds', type=float, default=2.0)
    ap.add_argument('--min-reps', type=int, default=20)
    ap.add_argument('--steps', type=int, default=10)
    args = ap.parse_args()
    if args.what == 'calls':
        if not args.suite:
            ap.error('calls needs --suite')
        calls(args)
    elif args.what == 'trainer':
        if not args.kvsrun:
            ap.error('trainer needs --kvsrun')
        trainer(args)
    elif args.what == 'report':
        report(args.rest[0])
    else:
        trainer_worker(args.rest[0], int(args.rest[1]))


if __name__ == '__main__':
    main()
