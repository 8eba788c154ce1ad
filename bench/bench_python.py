#!/usr/bin/python3
"""What Python adds to kvs, and a Trainer step against DistributedDataParallel.

    bench_python.py calls --suite _bench/bench/bench_suite [--sizes 4K,64M]
        The same call from C and from Python, in the same run: bench_suite
        local -n 1 (one kvs_pushpull of one value, in place, round.h's
        harness) against kv.pushpull(key, value) through the package, per
        size. Both sides see the same data freshness: before each round,
        untimed, the value is refilled with that round's numbers (round.h's
        rh_fill for rank 0: (i % 251) / 4 + round % 16), and after it,
        untimed, the result is checked. Prints "pycall,BYTES,C_S,PY_S" lines
        (medians, seconds).
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
    bench_python.py hook --kvsrun _bench/daemon/kvsrun/kvsrun [--steps 10]
        A DDP step (backward, torch's SGD) of the same model with 2 workers
        under kvsrun, three ways side by side in each worker, interleaved
        step by step: DDP's own hook on gloo; kvs.torch.allreduce_hook;
        and a hook that exchanges nothing (the future completes at once
        with the bucket), whose step is DDP's cost without communication.
        Gloo's communication time is its step less that one; the kvs hook's
        added time is its step less gloo's. Prints
        "pyhook,WORKERS,GLOO_S,KVS_S,NONE_S" lines (medians, rank 0's).

    bench_python.py report FILE
        The medians of each pass, in words, from the lines of the two above
        in FILE (scripts/bench appends the pass to each line).
    bench_python.py values FILE
        The goals' per-pass values, "ID V1 V2 ..." lines for
        bench/claims.py judge: the time Python adds at 4 KiB (µs), Python
        over C at 64 MiB, the Trainer step over DDP's, the kvs hook's added
        time over gloo's communication time.

A benchmark, not a test: it exits 0 whatever the speed, 1 when something
fails or a value is wrong. The package is used as configured in the
environment (PYTHONPATH and KVS_LIBRARY as tests/test_python.sh sets them,
or installed).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

import numpy as np

import benchutil

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


def timed(fn, seconds, min_reps, before=None, after=None):
    """Median of fn's time over at least min_reps runs and `seconds`, after
    3 untimed ones; before(round) and after(round), untimed, around each."""
    rnd = 0
    for _ in range(3):
        if before:
            before(rnd)
        fn()
        if after:
            after(rnd)
        rnd += 1
    times = []
    start = time.perf_counter()
    while len(times) < min_reps or time.perf_counter() - start < seconds:
        if before:
            before(rnd)
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if after:
            after(rnd)
        rnd += 1
        if len(times) >= 100000:        # round.h's RH_MAX_REPS
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
        base = (np.arange(n) % 251).astype(np.float32) * np.float32(0.25)
        value = np.empty(n, np.float32)
        want = np.empty(n, np.float32)

        def fill(rnd):
            np.add(base, np.float32(rnd % 16), out=value)

        def check(rnd):
            np.add(base, np.float32(rnd % 16), out=want)
            if not np.array_equal(value, want):
                raise SystemExit('bench_python: pushpull returned a wrong value in round %d'
                                 % rnd)
        kv.init(i, np.zeros(n, np.float32))
        py = timed(lambda: kv.pushpull(i, value), args.seconds, args.min_reps, fill, check)
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
    kv, rank, nw, sync = benchutil.join(impl == 'kvs')
    if kv:
        import kvs.torch
    else:
        import torch.distributed as dist
    x = torch.tensor(float(rank + 1))

    def bare():
        net.zero_grad()
        net(x).backward()

    bare_s = benchutil.median_of(bare, steps, sync)     # before any hook of the exchange is set
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
    step_s = benchutil.median_of(step, steps, sync)
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


def hook_worker(steps):
    """One worker of the hook job; rank 0 prints the medians."""
    import torch
    import torch.distributed as dist
    from torch.futures import Future
    from torch.nn.parallel import DistributedDataParallel as DDP
    import kvs
    import kvs.torch
    torch.set_num_threads(1)
    kv = kvs.create('dist_sync')
    rank, nw = kv.rank, kv.num_workers
    kvs.torch.init_process_group(kv)          # construction and broadcasts: kvs
    os.environ.setdefault('GLOO_SOCKET_IFNAME', 'lo')
    gloo = dist.new_group(backend='gloo')
    x = torch.tensor(float(rank + 1))

    def nothing(_state, bucket):
        fut = Future()
        fut.set_result(bucket.buffer())
        return fut

    ways = {}
    for impl in ('gloo', 'kvs', 'none'):
        ddp = DDP(model(torch), process_group=gloo)
        if impl == 'kvs':
            ddp.register_comm_hook(kvs.torch.hook_state(kv), kvs.torch.allreduce_hook)
        elif impl == 'none':
            ddp.register_comm_hook(None, nothing)
        ways[impl] = (ddp, torch.optim.SGD(ddp.parameters(), lr=0.5))
    times = {impl: [] for impl in ways}
    for i in range(steps + 2):
        for impl, (ddp, opt) in ways.items():
            kv.barrier()
            t0 = time.perf_counter()
            opt.zero_grad()
            ddp(x).backward()
            opt.step()
            if i >= 2:
                times[impl].append(time.perf_counter() - t0)
    # Gradients averaged over the workers: (1 + ... + nw) / nw, lr 0.5 a step.
    want = -0.5 * (steps + 2) * (nw + 1) / 2
    for impl in ('gloo', 'kvs'):
        got = [p.data[0].item() for p in ways[impl][0].parameters()]
        if any(abs(g - want) > 1e-3 * abs(want) for g in got):
            raise SystemExit('bench_python: DDP with %s trained to %r, not %r'
                             % (impl, got[0], want))
    med = {impl: statistics.median(t) for impl, t in times.items()}
    if rank == 0:
        print('pyhook,%d,%.9g,%.9g,%.9g' % (nw, med['gloo'], med['kvs'], med['none']), flush=True)
    dist.destroy_process_group()


def hook(args):
    env = dict(os.environ, KVS_TIMEOUT='120')
    subprocess.run([args.kvsrun, '-n', '2', sys.executable, os.path.abspath(__file__),
                    'hook-worker', str(args.steps)], check=True, env=env)


def trainer(args):
    env = dict(os.environ, KVS_TIMEOUT='120')
    me = os.path.abspath(__file__)
    subprocess.run([args.kvsrun, '-n', '2', sys.executable, me, 'trainer-worker', 'kvs',
                    str(args.steps)], check=True, env=env)
    procs = benchutil.ddp_job(env, [me, 'trainer-worker', 'ddp', str(args.steps)])
    if any(p.wait(timeout=600) != 0 for p in procs):
        raise SystemExit('bench_python: the DDP job failed')


def read_lines(path):
    """The per-pass lines: {size: [(c, py), ...]}, {impl: [(step, bare), ...]},
    in pass order."""
    calls_, trainers = {}, {}
    with open(path) as f:
        for line in f:
            row = line.strip().split(',')
            if row[0] == 'pyhook':
                trainers.setdefault('hook', []).append(tuple(float(v) for v in row[2:5]))
            elif row[0] == 'pycall':
                calls_.setdefault(int(row[1]), []).append((float(row[2]), float(row[3])))
            elif row[0] == 'pytrainer':
                trainers.setdefault(row[1], []).append((float(row[3]), float(row[4])))
    return calls_, trainers


def report(path):
    calls_, trainers = read_lines(path)
    for size, runs in sorted(calls_.items()):
        for p, (c, py) in enumerate(runs, 1):
            if size < 1 << 20:
                print('Python call, %d KiB, pass %d: C %.2f us, Python %.2f us, %.2f us added'
                      % (size >> 10, p, c * 1e6, py * 1e6, (py - c) * 1e6))
            else:
                print('Python call, %d MiB, pass %d: C %.2f ms, Python %.2f ms, %.3f x'
                      % (size >> 20, p, c * 1e3, py * 1e3, py / c))
    for p, ((ks, kb), (ds, db)) in enumerate(zip(trainers.get('kvs', []),
                                                 trainers.get('ddp', [])), 1):
        print('Trainer step, ResNet-50, 2 workers, pass %d: kvs %.1f ms, DDP %.1f ms: %.3f x; '
              'less bare backward: %.1f / %.1f ms' % (p, ks * 1e3, ds * 1e3, ks / ds,
                                                      (ks - kb) * 1e3, (ds - db) * 1e3))
    for p, (gloo, kv, none) in enumerate(trainers.get('hook', []), 1):
        print('DDP step, ResNet-50, 2 workers, pass %d: gloo hook %.1f ms, kvs hook %.1f ms, no '
              'exchange %.1f ms: kvs adds %.1f ms over gloo, whose communication takes %.1f ms: '
              '%.3f x' % (p, gloo * 1e3, kv * 1e3, none * 1e3, (kv - gloo) * 1e3,
                          (gloo - none) * 1e3, _hook_ratio(gloo, kv, none)))


def _hook_ratio(gloo, kv, none):
    """The kvs hook's added time over gloo's communication time."""
    return (kv - gloo) / max(gloo - none, 1e-9)


def values(path):
    calls_, trainers = read_lines(path)
    if 4096 in calls_:
        print('py.call.4K ' + ' '.join('%.6f' % ((py - c) * 1e6) for c, py in calls_[4096]))
    if 64 << 20 in calls_:
        print('py.call.64M ' + ' '.join('%.6f' % (py / c) for c, py in calls_[64 << 20]))
    pairs = list(zip(trainers.get('kvs', []), trainers.get('ddp', [])))
    if pairs:
        print('py.trainer ' + ' '.join('%.6f' % (k[0] / d[0]) for k, d in pairs))
    if trainers.get('hook'):
        print('py.hook ' + ' '.join('%.6f' % _hook_ratio(*h) for h in trainers['hook']))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('what', choices=['calls', 'trainer', 'trainer-worker', 'hook', 'hook-worker',
                                     'report', 'values'])
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
    elif args.what == 'hook':
        if not args.kvsrun:
            ap.error('hook needs --kvsrun')
        hook(args)
    elif args.what == 'hook-worker':
        hook_worker(int(args.rest[0]))
    elif args.what == 'report':
        report(args.rest[0])
    elif args.what == 'values':
        values(args.rest[0])
    else:
        trainer_worker(args.rest[0], int(args.rest[1]))


if __name__ == '__main__':
    main()
