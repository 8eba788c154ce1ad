#!/usr/bin/python3
"""torch.distributed with the gloo backend as a peer of kvs in scripts/bench.

The cases and the harness of ../round.h, in Python: dist.all_reduce (SUM,
float32, in place) of S bytes per rank, and with --resnet a step of 161
all_reduce calls, one per ResNet-50 tensor (sizes read from
../resnet50_sizes.h). Same values, warm-up, barrier before each timed round,
check of every round, rank 0 deciding the number of rounds, and median (the
slowest rank's). Rank 0 prints the same "row,..." lines as the C programs.

    torch_gloo.py -n N [--sizes LIST] [--resnet] [--seconds S] [--min-reps M]

scripts/bench runs it only when `/usr/bin/python3 -c "import torch"` works.
"""
import argparse
import math
import os
import re
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WARMUP = 3
MAX_REPS = 100000
HERE = os.path.dirname(os.path.abspath(__file__))


def parse_sizes(text):
    out = []
    for part in filter(None, text.split(",")):
        m = re.fullmatch(r"(\d+)([KMGkmg]?)", part)
        if not m:
            raise SystemExit("torch_gloo: bad size %r" % part)
        out.append(int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2).lower()])
    return out


def resnet50_sizes():
    with open(os.path.join(HERE, "..", "resnet50_sizes.h")) as f:
        text = f.read()
    body = text[text.index("resnet50_sizes[RESNET50_NTENSORS] = {"):]
    body = body[body.index("{") + 1:body.index("};")]
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    sizes = [int(v) for v in re.findall(r"(\d+)L", body)]
    if len(sizes) != 161 or sum(sizes) != 25557032:
        raise SystemExit("torch_gloo: resnet50_sizes.h did not parse")
    return sizes


def pattern(counts):
    """Per key: ((i + 7k) % 251) / 4, the rank-independent part of a value."""
    return [((torch.arange(n, dtype=torch.int64) + 7 * k) % 251).to(torch.float32) * 0.25
             for k, n in enumerate(counts)]


def run_case(rank, nw, counts, args):
    base = pattern(counts)
    bufs = [torch.empty(n, dtype=torch.float32) for n in counts]
    expect_scale = nw * (nw + 1) / 2.0

    def one_round(rnd):
        c = float(rnd % 16)
        for b, p in zip(bufs, base):
            torch.add(p * float(rank + 1), c, out=b)
        dist.barrier()
        c0, t0 = time.process_time(), time.perf_counter()
        for b in bufs:
            dist.all_reduce(b, op=dist.ReduceOp.SUM)
        t1, c1 = time.perf_counter(), time.process_time()
        for k, (b, p) in enumerate(zip(bufs, base)):
            if not torch.equal(b, p * expect_scale + nw * c):
                sys.stderr.write("torch_gloo rank %d: WRONG VALUE, round %d, key %d\n"
                                 % (rank, rnd, k))
                sys.exit(1)
        return t1 - t0, c1 - c0

    rnd = 0
    for _ in range(WARMUP):
        one_round(rnd)
        rnd += 1
    times, cpu = [], 0.0
    start = time.perf_counter()
    while True:
        done, spent = len(times), time.perf_counter() - start
        if done < args.min_reps:
            more = args.min_reps - done
        elif spent >= args.seconds or done >= MAX_REPS:
            more = 0
        else:
            more = int(min(MAX_REPS - done, max(1, math.ceil((args.seconds - spent)
                                                              / (spent / done)))))
        t = torch.tensor([float(more)])
        dist.broadcast(t, 0)
        more = int(t.item())
        if more == 0:
            break
        for _ in range(more):
            dt, dc = one_round(rnd)
            rnd += 1
            times.append(dt)
            cpu += dc
    times.sort()
    n = len(times)
    med = times[n // 2] if n % 2 else 0.5 * (times[n // 2 - 1] + times[n // 2])
    t = torch.tensor([med], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    c = torch.tensor([cpu], dtype=torch.float64)
    dist.all_reduce(c, op=dist.ReduceOp.SUM)
    return n, t.item(), c.item() / n


def worker(rank, nw, port, args):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port,
                            rank=rank, world_size=nw)
    cases = [("allreduce", [s // 4]) for s in parse_sizes(args.sizes)]
    if args.resnet:
        cases.append(("resnet50", resnet50_sizes()))
    for name, counts in cases:
        reps, med, cpu = run_case(rank, nw, counts, args)
        if rank == 0:
            print("row,%s,torch-gloo,%d,%d,%d,%.9g,%.9g,nan"
                  % (name, nw, 4 * sum(counts), reps, med, cpu), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, required=True)
    ap.add_argument("--sizes", default="4K,256K,4M,64M")
    ap.add_argument("--resnet", action="store_true")
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--min-reps", type=int, default=10)
    args = ap.parse_args()
    with socket.socket() as s:         # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(args.n, port, args), nprocs=args.n, join=True)


if __name__ == "__main__":
    main()
