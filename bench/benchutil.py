"""What bench_python.py and bench_distopt.py share: a worker's process
group (kvs's or torch's gloo), the median of a step timed across the
workers, and a DDP job of worker processes started on this host.

Imports torch and kvs only when a call needs them.
"""
import os
import socket
import statistics
import subprocess
import sys
import time


def join(with_kvs):
    """This worker's group: (kv or None, rank, workers, barrier). With
    kvs, a dist_sync store (the job is kvsrun's); else torch's gloo group
    (the job's RANK and WORLD_SIZE from the environment, as ddp_job sets)."""
    if with_kvs:
        import kvs
        kv = kvs.create('dist_sync')
        return kv, kv.rank, kv.num_workers, kv.barrier
    import torch.distributed as dist
    rank, nw = int(os.environ['RANK']), int(os.environ['WORLD_SIZE'])
    dist.init_process_group('gloo', rank=rank, world_size=nw)
    return None, rank, nw, dist.barrier


def median_of(fn, reps, sync):
    """The median of fn's time over reps runs after 2 untimed ones, each
    after sync() (the workers' barrier)."""
    times = []
    for i in range(reps + 2):
        sync()
        t0 = time.perf_counter()
        fn()
        if i >= 2:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def ddp_job(env, argv, workers=2, **popen):
    """Starts `workers` processes of sys.executable argv, the ranks of a
    torch.distributed job on this host (RANK, WORLD_SIZE, MASTER_ADDR,
    MASTER_PORT added to env); returns their Popen objects."""
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(workers):
        e = dict(env, RANK=str(rank), WORLD_SIZE=str(workers), MASTER_ADDR='127.0.0.1',
                 MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable] + argv, env=e, **popen))
    return procs
