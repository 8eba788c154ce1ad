#!/usr/bin/python3
"""The CTR model of examples/train_ctr.py: kvs against DistributedDataParallel.

    bench_ctr.py run --kvsrun _bench/daemon/kvsrun/kvsrun [--workers 4]
                     [--passes 3] [--warmup 3] [--steps 30]
                     [--rows 1048576] [--train 200000] [--test 50000] [--batch 1000]
        Trains the model, data and batches of examples/train_ctr.py
        (imported from there, its sizes by default) in two jobs of N
        processes each, the same batches in both, each worker taking its
        N-th of every batch:
          kvs: kvsrun -n N, kvs.torch.Trainer over a dist_sync store with
              its SGD, the embedding's sparse gradient pushed as rows and
              the next part's rows pulled (set_rows), as train_ctr.py does;
          ddp: N processes started by torch.multiprocessing, the model
              under torch.nn.parallel.DistributedDataParallel on gloo (the
              embedding's sparse gradient is averaged by gloo's sparse
              allreduce during backward), then torch's SGD.
        A step is zero_grad, forward, backward and the update, the same
        learning rate and the same full-batch mean gradient in both. Each
        job runs WARMUP untimed steps, STEPS timed ones with a barrier
        before each, then one untimed last step (kvs pulls the whole table
        there, as train_ctr.py's last step does, so that both models can
        be compared in full). A step's time is its slowest worker's; a
        pass's value is the median of its timed steps. The jobs take
        turns to go first, pass by pass. Memory: each worker's VmRSS and
        VmHWM after the last timed step (the largest of the workers) and,
        for kvs, kvsd's VmRSS then. Every step's loss (the batch's mean)
        and the held-out loss of the trained model must agree between the
        two (within 1e-4 and 1e-3), else the run fails. Prints per pass and job
            ctr,IMPL,PASS,WORKERS,ROWS,DIM,BATCH,STEPS,MEDIAN_S,RSS_KIB,SHMEM_KIB,HWM_KIB,
                KVSD_RSS_KIB,LAST_LOSS,HELD_OUT_LOSS
        (KVSD_RSS_KIB 0 for ddp), then per pass
            ctrcheck,PASS,LARGEST_STEP_LOSS_DIFFERENCE,HELD_OUT_LOSS_DIFFERENCE
    bench_ctr.py report FILE [MD]
        The passes in words from FILE's lines; with MD, writes the table of
        RESULTS.md's CTR section there.
    bench_ctr.py values FILE
        The goal's per-pass values for bench/claims.py judge: "rows.ddp
        V1 V2 ...", each pass's kvs median over the same pass's DDP median.

A benchmark, not a test: it exits 0 whatever the speed, 1 when something
fails or the two trainings disagree. The package is used as configured in
the environment (PYTHONPATH and KVS_LIBRARY as scripts/bench sets them).
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), 'examples'))

# Float sums taken in other orders, over a few dozen steps: every step's
# loss, and the held-out loss of the model at the end (its rarely seen rows
# carry the differences of all the steps).
LOSS_TOLERANCE, HELD_OUT_TOLERANCE = 1e-4, 1e-3
CONFIG = ('workers', 'warmup', 'steps', 'rows', 'train', 'test', 'batch', 'timeout')


def mem_of(pid='self'):
    """(VmRSS, VmHWM, RssShmem) of a process, KiB; 0 for what cannot be
    read. RssShmem: the part of VmRSS in shared memory (for a kvs worker,
    kvsd's segments it has mapped: its staging area, the values' pages)."""
    out = {'VmRSS:': 0, 'VmHWM:': 0, 'RssShmem:': 0}
    try:
        with open('/proc/%s/status' % pid) as f:
            for line in f:
                parts = line.split()
                if parts and parts[0] in out:
                    out[parts[0]] = int(parts[1])
    except OSError:
        pass
    return out['VmRSS:'], out['VmHWM:'], out['RssShmem:']


def find_kvsd():
    """kvsrun starts kvsd and the workers as its children: kvsd is our
    sibling; None when there is none."""
    parent = os.getppid()
    for name in os.listdir('/proc'):
        if not name.isdigit():
            continue
        try:
            with open('/proc/%s/stat' % name) as f:
                stat = f.read()
        except OSError:
            continue
        if ' (kvsd) ' in stat and int(stat[stat.rindex(')') + 1:].split()[1]) == parent:
            return int(name)
    return None


def train(impl, cfg, rank, out_path):
    """One worker of either job: trains, writes what it measured to out_path."""
    import torch
    import train_ctr as ctr

    torch.set_num_threads(1)
    workers = cfg['workers']
    (ids, dense, label), test, _ = ctr.data(cfg['rows'], cfg['train'], cfg['test'])
    total = cfg['warmup'] + cfg['steps'] + 1
    per_epoch = -(-cfg['train'] // cfg['batch'])
    steps = ctr.batches(-(-total // per_epoch), cfg['train'], cfg['batch'])[:total]
    loss_fn = torch.nn.BCEWithLogitsLoss(reduction='sum')
    if impl == 'kvs':
        import kvs
        import kvs.torch
        kv = kvs.create('dist_sync')
        if (kv.rank, kv.num_workers) != (rank, workers):
            raise SystemExit('bench_ctr: worker %d of %d, not %d of %d'
                             % (kv.rank, kv.num_workers, rank, workers))
        net = ctr.CTR(init=rank == 0, rows=cfg['rows'])
        trainer = kvs.torch.Trainer(net, kv, kvs.optimizer.SGD(ctr.LR))
        sync = kv.barrier

        def step(s, idx):
            part = idx[rank::workers]
            trainer.zero_grad()
            loss = loss_fn(net(ids[part], dense[part]), label[part])
            loss.backward()
            if s + 1 < len(steps):                 # the rows the next part reads
                trainer.set_rows(net.emb.weight, ids[steps[s + 1][rank::workers]].flatten())
            trainer.step(len(idx))                 # the store sums the parts: / whole batch
            return loss.item()
    else:
        import torch.distributed as dist
        dist.init_process_group('gloo', init_method='file://' + cfg['init_file'], rank=rank,
                                world_size=workers,
                                timeout=datetime.timedelta(seconds=cfg['timeout']))
        net = ctr.CTR(init=True, rows=cfg['rows'])
        model = torch.nn.parallel.DistributedDataParallel(net)
        opt = torch.optim.SGD(net.parameters(), lr=ctr.LR)
        sync = dist.barrier

        def step(s, idx):
            part = idx[rank::workers]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(ids[part], dense[part]), label[part])
            # DDP averages over the workers: scaled so that the average is
            # the sum of the parts over the whole batch, as in kvs.
            (loss * (workers / len(idx))).backward()
            opt.step()
            return loss.item()

    times, losses, mem, kvsd_rss = [], [], (0, 0, 0), 0
    for s, idx in enumerate(steps):
        sync()
        t0 = time.perf_counter()
        loss = step(s, idx)
        dt = time.perf_counter() - t0
        losses.append(loss / len(idx))             # summed over workers: the batch's mean
        if cfg['warmup'] <= s < len(steps) - 1:
            times.append(dt)
        if s == len(steps) - 2:
            mem = mem_of()
            if impl == 'kvs' and rank == 0:
                pid = find_kvsd()
                kvsd_rss = mem_of(pid)[0] if pid else 0
    held_out = None
    if rank == 0:
        with torch.no_grad():
            t_ids, t_dense, t_label = test
            held_out = torch.nn.functional.binary_cross_entropy_with_logits(
                net(t_ids, t_dense), t_label).item()
    with open(out_path, 'w') as f:
        json.dump({'times': times, 'losses': losses, 'rss': mem[0], 'hwm': mem[1],
                   'shmem': mem[2], 'kvsd_rss': kvsd_rss, 'held_out': held_out}, f)
    if impl == 'kvs':
        kv.close()
    else:
        sync()
        dist.destroy_process_group()


def ddp_worker(rank, cfg, out_dir):
    """torch.multiprocessing's entry: one DDP rank."""
    train('ddp', cfg, rank, os.path.join(out_dir, 'ddp.%d' % rank))


def run_kvs(args, cfg, out_dir):
    # --timeout: each store call's deadline (KVS_TIMEOUT); the job's is ours.
    cmd = [args.kvsrun, '-n', str(args.workers), '--timeout', str(min(args.timeout, 120)),
           sys.executable, os.path.abspath(__file__), 'worker', json.dumps(cfg), out_dir]
    try:
        proc = subprocess.run(cmd, timeout=args.timeout + 60)
    except subprocess.TimeoutExpired:
        raise SystemExit('bench_ctr: the kvs job took over %d s' % (args.timeout + 60))
    if proc.returncode != 0:
        raise SystemExit('bench_ctr: the kvs job exited %d' % proc.returncode)


def run_ddp(args, cfg, out_dir):
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory() as d:
        cfg = dict(cfg, init_file=os.path.join(d, 'init'))
        ctx = mp.spawn(ddp_worker, args=(cfg, out_dir), nprocs=args.workers, join=False)
        deadline = time.monotonic() + args.timeout + 60
        try:
            while not ctx.join(timeout=1):
                if time.monotonic() > deadline:
                    raise SystemExit('bench_ctr: the DDP job took over %d s' % (args.timeout + 60))
        except mp.ProcessRaisedException as e:
            raise SystemExit('bench_ctr: the DDP job failed: %s' % e)
        except mp.ProcessExitedException as e:
            raise SystemExit('bench_ctr: the DDP job failed: %s' % e)
        finally:
            for p in ctx.processes:
                if p.is_alive():
                    p.kill()
                    p.join(10)


def gather(impl, out_dir, workers):
    """The job's figures from its workers' files."""
    ws = []
    for r in range(workers):
        with open(os.path.join(out_dir, '%s.%d' % (impl, r))) as f:
            ws.append(json.load(f))
    step_s = [max(w['times'][i] for w in ws) for i in range(len(ws[0]['times']))]
    big = max(ws, key=lambda w: w['rss'])
    return {'median': statistics.median(step_s), 'rss': big['rss'], 'shmem': big['shmem'],
            'hwm': max(w['hwm'] for w in ws),
            'kvsd_rss': ws[0]['kvsd_rss'],
            'losses': [sum(w['losses'][i] for w in ws) for i in range(len(ws[0]['losses']))],
            'held_out': ws[0]['held_out']}


def run(args):
    import train_ctr as ctr
    cfg = {k: getattr(args, k) for k in CONFIG}
    for p in range(1, args.passes + 1):
        got = {}
        order = ('kvs', 'ddp') if p % 2 else ('ddp', 'kvs')
        for impl in order:
            with tempfile.TemporaryDirectory() as out_dir:
                (run_kvs if impl == 'kvs' else run_ddp)(args, cfg, out_dir)
                got[impl] = gather(impl, out_dir, args.workers)
        for impl in ('kvs', 'ddp'):
            g = got[impl]
            print('ctr,%s,%d,%d,%d,%d,%d,%d,%.9g,%d,%d,%d,%d,%.9g,%.9g'
                  % (impl, p, args.workers, args.rows, ctr.DIM, args.batch, args.steps,
                     g['median'], g['rss'], g['shmem'], g['hwm'], g['kvsd_rss'], g['losses'][-1],
                     g['held_out']), flush=True)
        k, d = got['kvs'], got['ddp']
        step_diff = max(abs(a - b) for a, b in zip(k['losses'], d['losses']))
        held_diff = abs(k['held_out'] - d['held_out'])
        print('ctrcheck,%d,%.3g,%.3g' % (p, step_diff, held_diff), flush=True)
        if len(k['losses']) != len(d['losses']) or step_diff > LOSS_TOLERANCE or \
                held_diff > HELD_OUT_TOLERANCE:
            raise SystemExit('bench_ctr: pass %d: kvs and DDP trained apart: step losses differ by '
                             'up to %.3g (tolerance %g), held-out losses by %.3g (tolerance %g)'
                             % (p, step_diff, LOSS_TOLERANCE, held_diff, HELD_OUT_TOLERANCE))


def read_lines(path):
    """{impl: [fields by name, ...] in pass order}, [(pass, step diff, held-out diff)]."""
    names = ('impl', 'pass', 'workers', 'rows', 'dim', 'batch', 'steps', 'median', 'rss', 'shmem',
             'hwm', 'kvsd_rss', 'last_loss', 'held_out')
    runs, checks = {}, []
    with open(path) as f:
        for line in f:
            row = line.strip().split(',')
            if row[0] == 'ctr' and len(row) == len(names) + 1:
                x = dict(zip(names, row[1:]))
                for k in names[1:]:
                    x[k] = float(x[k])
                runs.setdefault(x['impl'], []).append(x)
            elif row[0] == 'ctrcheck' and len(row) == 4:
                checks.append((int(row[1]), float(row[2]), float(row[3])))
    return runs, checks


def report(path, md):
    runs, checks = read_lines(path)
    pairs = list(zip(runs.get('kvs', []), runs.get('ddp', [])))
    for k, d in pairs:
        print('CTR step, %d processes, pass %d: kvs %.2f ms, DDP %.2f ms: %.3f x; worker VmRSS '
              'kvs %.0f MiB (%.0f MiB of it shared with kvsd; kvsd %.0f MiB), DDP %.0f MiB'
              % (k['workers'], k['pass'], k['median'] * 1e3, d['median'] * 1e3,
                 k['median'] / d['median'], k['rss'] / 1024, k['shmem'] / 1024,
                 k['kvsd_rss'] / 1024, d['rss'] / 1024))
    for p, sd, hd in checks:
        print('CTR pass %d: step losses agree within %.3g, held-out losses within %.3g'
              % (p, sd, hd))
    if not md:
        return
    with open(md, 'w') as f:
        f.write('| ctr impl | N | rows | dim | batch | timed steps | median step µs '
                '| per pass µs | worker VmRSS MiB | of it RssShmem MiB | worker VmHWM MiB '
                '| kvsd VmRSS MiB | held-out loss |\n')
        f.write('|---|---|---|---|---|---|---|---|---|---|---|---|---|\n')
        for impl in ('kvs', 'ddp'):
            xs = runs.get(impl, [])
            if not xs:
                continue

            def med(key):
                return statistics.median(x[key] for x in xs)
            f.write('| %s | %d | %d | %d | %d | %d | %.1f | %s | %.1f | %.1f | %.1f | %s | %.6f |\n'
                    % (impl, xs[0]['workers'], xs[0]['rows'], xs[0]['dim'], xs[0]['batch'],
                       xs[0]['steps'], med('median') * 1e6,
                       ' '.join('%.1f' % (x['median'] * 1e6) for x in xs), med('rss') / 1024,
                       med('shmem') / 1024, med('hwm') / 1024,
                       '%.1f' % (med('kvsd_rss') / 1024) if impl == 'kvs' else '-',
                       med('held_out')))


def values(path):
    runs, _ = read_lines(path)
    pairs = list(zip(runs.get('kvs', []), runs.get('ddp', [])))
    if pairs:
        print('rows.ddp ' + ' '.join('%.6f' % (k['median'] / d['median']) for k, d in pairs))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('what', choices=['run', 'worker', 'report', 'values'])
    ap.add_argument('rest', nargs='*')
    ap.add_argument('--kvsrun')
    ap.add_argument('--workers', type=int, default=4)
    ap.add_argument('--passes', type=int, default=3)
    ap.add_argument('--warmup', type=int, default=3)
    ap.add_argument('--steps', type=int, default=30)
    ap.add_argument('--rows', type=int)
    ap.add_argument('--train', type=int)
    ap.add_argument('--test', type=int)
    ap.add_argument('--batch', type=int)
    ap.add_argument('--timeout', type=int, default=600, help='seconds for each job')
    args = ap.parse_args()
    if args.what == 'run':
        if not args.kvsrun:
            ap.error('run needs --kvsrun')
        import train_ctr as ctr
        for name, default in (('rows', ctr.ROWS), ('train', ctr.N_TRAIN), ('test', ctr.N_TEST),
                              ('batch', ctr.BATCH)):
            if getattr(args, name) is None:
                setattr(args, name, default)
        if min(args.workers, args.passes, args.steps, args.rows, args.train, args.test,
               args.batch) < 1 or args.warmup < 0 or args.batch < args.workers:
            ap.error('sizes and counts must be positive, and a batch at least one per worker')
        run(args)
    elif args.what == 'worker':
        cfg = json.loads(args.rest[0])
        rank = int(os.environ.get('KVS_RANK', '-1'))
        train('kvs', cfg, rank, os.path.join(args.rest[1], 'kvs.%d' % rank))
    elif args.what == 'report':
        report(args.rest[0], args.rest[1] if len(args.rest) > 1 else None)
    else:
        values(args.rest[0])


if __name__ == '__main__':
    main()
