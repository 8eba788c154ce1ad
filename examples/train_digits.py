"""Data-parallel training of an MLP on scikit-learn's digits (8x8 images of
handwritten digits, bundled with scikit-learn: nothing to download).

    kvsrun -n 4 python3 examples/train_digits.py [--epochs 12]

Every worker takes its quarter of each batch (with 4 workers), computes the
gradient of its part's summed loss, and kvs.torch.Trainer pushes it to a
dist_sync store: the store sums the parts, so each round's update is the
full batch's mean gradient, through the store's SGD with momentum. Rank 0
prints the loss per epoch and the held-out accuracy, then trains the same
model alone on the full batches with torch's own SGD and prints the
largest difference between the two sets of weights: data-parallel training
through the store is the same training, to float rounding.

With --commit-every K the job commits the store every K steps and
survives the death of a worker or of kvsd:

    kvsrun -n 4 --restarts 3 python3 examples/train_digits.py --commit-every 10

A worker resumes at start (a replacement that kvsrun started after a death
takes the last commit's weights) and after kvs.Restart (the job rolled
back to the last commit), and goes on from the step after it. Each step's
batch is a function of the step alone, so the steps redone are the same
steps, and the job ends with the weights of a run without faults.
"""
import argparse
import copy

import numpy as np
import torch
from sklearn.datasets import load_digits

import kvs
import kvs.torch

BATCH = 64
LR, MOMENTUM = 0.05, 0.9


def data():
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    order = np.random.default_rng(0).permutation(len(x))
    x, y = torch.from_numpy(x[order]), torch.from_numpy(y[order])
    return (x[:1500], y[:1500]), (x[1500:], y[1500:])


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))


def batches(n, epoch):
    order = torch.from_numpy(np.random.default_rng(1000 + epoch).permutation(n))
    return [order[i:i + BATCH] for i in range(0, n, BATCH)]


def accuracy(net, x, y):
    with torch.no_grad():
        return (net(x).argmax(1) == y).float().mean().item()


def make_trainer(net, kv):
    """The Trainer. A roll back while it sets up the store is retried: it
    then takes the commit rolled back to, or sets up the store afresh."""
    while True:
        try:
            return kvs.torch.Trainer(net.parameters(), kv,
                                     kvs.optimizer.SGD(LR, momentum=MOMENTUM))
        except kvs.Restart:
            pass


def resume(trainer):
    """The step of the last commit (-1: none), the weights brought to it;
    a roll back meanwhile (another death) is resumed in turn."""
    while True:
        try:
            return trainer.resume()
        except kvs.Restart:
            pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--epochs', type=int, default=12)
    ap.add_argument('--commit-every', type=int, default=0, metavar='K',
                    help='commit the store after every K steps, and recover from faults')
    args = ap.parse_args()
    (xtr, ytr), (xte, yte) = data()
    loss_fn = torch.nn.CrossEntropyLoss(reduction='sum')

    kv = kvs.create('dist_sync')
    rank, workers = kv.rank, kv.num_workers
    net = model()
    alone = copy.deepcopy(net)
    trainer = make_trainer(net, kv)
    per_epoch = len(batches(len(xtr), 0))
    steps = args.epochs * per_epoch
    step = resume(trainer) if args.commit_every else -1    # -1: from the start
    order = (-1, None)                             # (epoch, its batches)
    while step + 1 < steps:
        try:
            for step in range(step + 1, steps):
                epoch = step // per_epoch
                if order[0] != epoch:
                    order = (epoch, batches(len(xtr), epoch))
                idx = order[1][step % per_epoch]
                part = idx[rank::workers]          # this worker's part of the batch
                trainer.zero_grad()
                loss_fn(net(xtr[part]), ytr[part]).backward()
                trainer.step(len(idx))             # the store sums the parts: / whole batch
                if args.commit_every and (step + 1) % args.commit_every == 0:
                    trainer.commit(step)
                if rank == 0 and (step + 1) % per_epoch == 0:
                    with torch.no_grad():
                        loss = loss_fn(net(xtr), ytr).item() / len(xtr)
                    print('epoch %2d: loss %.4f' % (epoch + 1, loss), flush=True)
        except kvs.Restart:
            if not args.commit_every:
                raise
            step = resume(trainer)                 # the last commit's step, or -1
            if rank == 0:
                print('rolled back to step %d' % step, flush=True)
    if rank == 0:
        print('held-out accuracy: %.2f%% (%d workers)' % (100 * accuracy(net, xte, yte), workers))
    kv.close()
    if rank != 0:
        return

    # The same training in one process, on the full batches, torch's SGD.
    opt = torch.optim.SGD(alone.parameters(), lr=LR, momentum=MOMENTUM)
    for epoch in range(args.epochs):
        for idx in batches(len(xtr), epoch):
            opt.zero_grad()
            (loss_fn(alone(xtr[idx]), ytr[idx]) / len(idx)).backward()
            opt.step()
    diff = max((a - b).abs().max().item() for a, b in zip(net.parameters(), alone.parameters()))
    print('alone: held-out accuracy %.2f%%; largest weight difference %.3g'
          % (100 * accuracy(alone, xte, yte), diff))


if __name__ == '__main__':
    main()
