#!/usr/bin/python3
"""A training step with kvs.torch.DistributedOptimizer against DDP and the Trainer.

    bench_distopt.py run --kvsrun _bench/daemon/kvsrun/kvsrun [--steps 10] [--batch 64]
            [--budget 600]
        A training step (forward, backward, update) of an MLP of 8 layers
        of 2048 x 2048 (with biases, ReLU between; 128 MiB of float32
        gradients) on a batch of 64 per worker (--batch: fewer make the
        compute smaller beside the same gradients), 2 worker processes of one
        thread each, three ways in each pass, one after the other:
        kvs.torch.DistributedOptimizer with the store's SGD (each layer's
        gradients pushed during backward as soon as they are ready, the
        weights pulled at step()), torch's DistributedDataParallel on gloo
        (its buckets allreduced during backward) then torch's SGD, and
        kvs.torch.Trainer with the store's SGD (every gradient pushed after
        backward, in one pushpull). All three train the same model from the
        same weights on the same data with the same update (the average
        over the workers of the gradients, lr 0.01): rank 0 prints the sum
        of the weights after the steps, which must agree. Each worker also
        times the bare forward and backward. Prints
        "pydistopt,IMPL,WORKERS,STEP_S,BARE_S,WEIGHT_SUM,BATCH" lines
        (medians, the slowest rank's). When one layer's forward
        and backward, timed first, says that the run would take more than
        --budget seconds (a torch with a generic BLAS: its matrix products
        dwarf the exchange), it prints a "pydistopt-skipped" line instead.
    bench_distopt.py worker IMPL STEPS BATCH
        One worker of such a job (run starts them).
    bench_distopt.py timeline --kvsrun K [--batch 64] [--out bench/distopt-step.png]
        Runs the DistributedOptimizer's job once more under kvsrun
        --timeline, each worker noting when its last step started, when
        its backward ended and when the step ended, and draws rank 0's
        last step from the job's timeline with gnuplot: backward, the
        pushes (the pusher thread), kvsd's sum + SGD of each round and the
        pulls of step(), in ms from the step's start.
    bench_distopt.py report FILE
        Each pass's medians and ratios in words (scripts/bench appends the
        pass to each line).
    bench_distopt.py values FILE
        The goals' per-pass values for bench/claims.py judge:
        DistributedOptimizer's step over DDP's, and over the Trainer's.

A benchmark, not a test: it exits 0 whatever the speed, 1 when something
fails or the weights of the three ways differ.
"""
import argparse
import os
import subprocess
import sys
import time

import benchutil

LAYERS, WIDTH, LR = 8, 2048, 0.01
IMPLS = ('distopt', 'ddp', 'trainer')


def mlp(torch):
    torch.manual_seed(0)
    layers = []
    for i in range(LAYERS):
        layers.append(torch.nn.Linear(WIDTH, WIDTH))
        if i < LAYERS - 1:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def worker(impl, steps, batch):
    """One worker; rank 0 prints the line."""
    import torch
    torch.set_num_threads(1)
    net = mlp(torch)
    kv, rank, nw, sync = benchutil.join(impl != 'ddp')
    if kv:
        import kvs.torch
    gen = torch.Generator().manual_seed(rank + 1)
    x = torch.randn(batch, WIDTH, generator=gen)

    def loss_of(model):
        return model(x).pow(2).mean()

    def bare():
        net.zero_grad()
        loss_of(net).backward()

    bare_s = benchutil.median_of(bare, max(3, steps // 2), sync)
    net.zero_grad(set_to_none=True)
    if impl == 'distopt':
        opt = kvs.torch.DistributedOptimizer('sgd lr=%g' % LR, net.named_parameters(), kv)
        marks = []                    # (start, backward's end, end) of each step, in µs

        def step():
            t0 = time.monotonic_ns()
            opt.zero_grad()
            loss_of(net).backward()
            t1 = time.monotonic_ns()
            opt.step()
            marks.append((t0 / 1e3, t1 / 1e3, time.monotonic_ns() / 1e3))
    elif impl == 'trainer':
        trainer = kvs.torch.Trainer(net.parameters(), kv, 'sgd lr=%g' % LR)

        def step():
            trainer.zero_grad()
            loss_of(net).backward()
            trainer.step(nw)          # each gradient / nw, summed: the average
    else:
        ddp = torch.nn.parallel.DistributedDataParallel(net)
        opt = torch.optim.SGD(net.parameters(), lr=LR)

        def step():
            opt.zero_grad()
            loss_of(ddp).backward()
            opt.step()
    step_s = benchutil.median_of(step, steps, sync)
    weight_sum = sum(p.detach().double().sum().item() for p in net.parameters())
    if impl == 'distopt' and os.environ.get('BENCH_DISTOPT_MARKS'):
        with open('%s.%d' % (os.environ['BENCH_DISTOPT_MARKS'], rank), 'w') as f:
            f.write('%d %.3f %.3f %.3f\n' % ((os.getpid(),) + marks[-1]))
    print('pydistopt-rank,%s,%d,%d,%.9g,%.9g,%.9g,%d' % (impl, nw, rank, step_s, bare_s,
                                                        weight_sum, batch), flush=True)


def combine(impl, outputs):
    """The job's line from its ranks' lines: the slowest rank's medians;
    every rank must hold the same weights."""
    rows = []
    for out in outputs:
        for line in out.splitlines():
            if line.startswith('pydistopt-rank,'):
                rows.append(line.split(',')[1:])
            else:
                print(line, file=sys.stderr)
    if len(rows) != 2 or any(r[0] != impl for r in rows):
        raise SystemExit('bench_distopt: the %s job printed %d lines of its ranks, not 2'
                         % (impl, len(rows)))
    sums = [float(r[5]) for r in rows]
    if abs(sums[0] - sums[1]) > 1e-6 * max(abs(v) for v in sums) + 1e-6:
        raise SystemExit('bench_distopt: the ranks of %s hold different weights: %r'
                         % (impl, sums))
    print('pydistopt,%s,%s,%.9g,%.9g,%.9g,%s' % (impl, rows[0][1], max(float(r[3]) for r in rows),
                                                 max(float(r[4]) for r in rows), sums[0],
                                                 rows[0][6]), flush=True)


def estimate(args):
    """(seconds the run would take, seconds of one bare forward and
    backward), from one layer's forward and backward timed here."""
    import torch
    torch.set_num_threads(1)
    layer = torch.nn.Linear(WIDTH, WIDTH)
    x = torch.randn(args.batch, WIDTH, requires_grad=True)
    t0 = time.perf_counter()
    layer(x).sum().backward()
    bare = LAYERS * (time.perf_counter() - t0)
    reps = (max(3, args.steps // 2) + 2) + (args.steps + 2)
    return len(IMPLS) * reps * bare * 1.3, bare


def run(args):
    env = dict(os.environ, KVS_TIMEOUT='120')
    me = os.path.abspath(__file__)
    need, bare = estimate(args)
    if need > args.budget:
        # A torch whose matrix products are slow (a generic BLAS) makes the
        # compute dwarf the exchange: said, not timed.
        print('pydistopt-skipped,%d,%.3f,%.0f,%.0f' % (args.batch, bare, need, args.budget))
        return
    for impl in IMPLS:
        if impl != 'ddp':
            job = subprocess.run([args.kvsrun, '-n', '2', sys.executable, me, 'worker', impl,
                                  str(args.steps), str(args.batch)], check=True, env=env,
                                 stdout=subprocess.PIPE, universal_newlines=True)
            combine(impl, [job.stdout])
            continue
        procs = benchutil.ddp_job(env, [me, 'worker', 'ddp', str(args.steps), str(args.batch)],
                                  stdout=subprocess.PIPE, universal_newlines=True)
        outs = [p.communicate(timeout=900)[0] for p in procs]
        if any(p.returncode != 0 for p in procs):
            raise SystemExit('bench_distopt: the DDP job failed')
        combine('ddp', outs)


def timeline(args):
    import json
    import tempfile
    me = os.path.abspath(__file__)
    with tempfile.TemporaryDirectory() as tmp:
        trace, marks = os.path.join(tmp, 't.json'), os.path.join(tmp, 'marks')
        env = dict(os.environ, KVS_TIMEOUT='120', BENCH_DISTOPT_MARKS=marks)
        subprocess.run([args.kvsrun, '-n', '2', '--timeline', trace, sys.executable, me,
                        'worker', 'distopt', '1', str(args.batch)], check=True, env=env,
                       stdout=subprocess.DEVNULL)
        with open(marks + '.0') as f:
            t0, t1, t2 = map(float, f.read().split()[1:])
        with open(trace) as f:
            events = json.load(f)['traceEvents']
        rank0 = [e['pid'] for e in events if e.get('ph') == 'M' and e['name'] == 'process_name'
                 and e['args']['name'] == 'rank 0']
        rows = {'push': 2, 'sum + optimizer': 1, 'pull': 0}
        spans = [(3, 0.0, (t1 - t0) / 1e3)]
        for e in events:
            if e.get('ph') == 'X' and e['pid'] in rank0 and e['name'] in rows \
                    and t0 <= e['ts'] <= t2 and (e['name'] != 'sum + optimizer'
                                                 or e.get('cat') == 'kvsd'):
                spans.append((rows[e['name']], (e['ts'] - t0) / 1e3,
                              (e['ts'] + e['dur'] - t0) / 1e3))
        data = os.path.join(tmp, 'spans.tsv')
        with open(data, 'w') as f:
            for row, a, b in spans:
                f.write('%d\t%.3f\t%.3f\n' % (row, a, b))
        script = (
            'set terminal pngcairo size 1000,320 font ",10"\n'
            'set output "%s"\n'
            'set title "kvs.torch.DistributedOptimizer: rank 0\'s last step (MLP 8 x 2048^2, '
            'batch %d, 2 workers)"\n'
            'set xlabel "ms from the start of the step"\n'
            'set ytics ("step(): pulls" 0, "kvsd: sum + SGD" 1, "pushes (pusher thread)" 2, '
            '"forward + backward" 3)\n'
            'set yrange [-0.6:3.6]\nset xrange [0:%.3f]\nset grid x\n'
            'set arrow from %.3f, graph 0 to %.3f, graph 1 nohead dt 2 lc rgb "red"\n'
            'set label "backward returns" at %.3f, graph 0.04 right offset -0.5, 0 tc rgb "red"\n'
            'unset key\n'
            'plot "%s" using (($2+$3)/2):1:(($3-$2)/2):(0.3) with boxxyerror '
            'fs solid 0.6 lc rgb "#3060c0"\n'
            % (args.out, args.batch, (t2 - t0) / 1e3 * 1.02, (t1 - t0) / 1e3, (t1 - t0) / 1e3,
               (t1 - t0) / 1e3, data))
        subprocess.run(['gnuplot'], input=script.encode(), check=True)
        before = sum(1 for row, a, _ in spans if row == 2 and a < (t1 - t0) / 1e3)
        print('timeline: %s: %d of %d pushes started before backward ended (%.1f of %.1f ms)'
              % (args.out, before, sum(1 for s_ in spans if s_[0] == 2), (t1 - t0) / 1e3,
                 (t2 - t0) / 1e3))


def read_lines(path):
    """({impl: [(step, bare, weight sum, batch), ...]} in pass order,
    [(batch, bare s, run s, budget s) of each pass skipped])."""
    found, skipped = {}, []
    with open(path) as f:
        for line in f:
            row = line.strip().split(',')
            if row[0] == 'pydistopt':
                found.setdefault(row[1], []).append(tuple(float(v) for v in row[3:7]))
            elif row[0] == 'pydistopt-skipped':
                skipped.append(tuple(float(v) for v in row[1:5]))
    return found, skipped


def passes(path):
    found, _ = read_lines(path)
    runs = list(zip(*(found.get(impl, []) for impl in IMPLS)))
    for p, run_ in enumerate(runs, 1):
        sums = [r[2] for r in run_]
        if max(sums) - min(sums) > 1e-4 * max(abs(s) for s in sums) + 1e-3:
            raise SystemExit('bench_distopt: pass %d: the weights differ: %s'
                             % (p, dict(zip(IMPLS, sums))))
    return runs


def report(path):
    for batch, bare, need, budget in read_lines(path)[1]:
        print('MLP 8 x 2048^2 step, batch %d, 2 workers: not measured: one forward and backward '
              'alone would take about %.1f s here, the run about %.0f s, past its budget of %.0f s '
              '(the matrix products of this torch are too slow for the compute to compare with '
              'the exchange)' % (batch, bare, need, budget))
    for p, ((ds, db, _, batch), (gs, gb, _, _), (ts, tb, _, _)) in enumerate(passes(path), 1):
        print('MLP 8 x 2048^2 step, batch %d, 2 workers, pass %d: DistributedOptimizer %.1f ms, '
              'DDP %.1f ms, Trainer %.1f ms: %.3f x DDP, %.3f x Trainer; bare forward and '
              'backward %.1f / %.1f / %.1f ms'
              % (batch, p, ds * 1e3, gs * 1e3, ts * 1e3, ds / gs, ds / ts, db * 1e3, gb * 1e3,
                 tb * 1e3))


def values(path):
    runs = passes(path)
    if runs:
        if any(d[3] != 64 for d, _, _ in runs):
            raise SystemExit('bench_distopt: the goals are judged at batch 64')
        print('py.distopt.ddp ' + ' '.join('%.6f' % (d[0] / g[0]) for d, g, _ in runs))
        print('py.distopt.trainer ' + ' '.join('%.6f' % (d[0] / t[0]) for d, _, t in runs))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('what', choices=['run', 'worker', 'timeline', 'report', 'values'])
    ap.add_argument('rest', nargs='*')
    ap.add_argument('--kvsrun')
    ap.add_argument('--steps', type=int, default=10)
    ap.add_argument('--batch', type=int, default=64)
    ap.add_argument('--budget', type=float, default=600.0)
    ap.add_argument('--out', default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  'distopt-step.png'))
    args = ap.parse_args()
    if args.what == 'run':
        if not args.kvsrun:
            ap.error('run needs --kvsrun')
        run(args)
    elif args.what == 'timeline':
        if not args.kvsrun:
            ap.error('timeline needs --kvsrun')
        timeline(args)
    elif args.what == 'report':
        report(args.rest[0])
    elif args.what == 'values':
        values(args.rest[0])
    else:
        worker(args.rest[0], int(args.rest[1]), int(args.rest[2]))


if __name__ == '__main__':
    main()
