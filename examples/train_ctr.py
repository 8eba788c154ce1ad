"""Data-parallel training of a click-through model whose embedding table
(1,048,576 rows x 32, 128 MiB) moves through the store by rows only.

    kvsrun -n 4 python3 examples/train_ctr.py [--epochs 2]

The data is synthetic, made the same on every worker from fixed seeds: each
example has 12 categorical fields, each field's value drawn from a Zipf
distribution over 100,000 values and hashed with its field into one table of
2**20 rows, plus 4 dense features. A hidden ground-truth model gives the
click's log-odds: a weight per table row for the 50 most frequent values of
each field (the long tail of ids carries no signal, as in real logs, and the
model must learn to leave it near zero), a linear term of the dense features
and a bias; the label is drawn from it.

The model is torch.nn.Embedding(sparse=True) over the 12 fields, its rows
concatenated with the dense features into one linear layer. Every worker
takes its quarter of each batch (with 4 workers); kvs.torch.Trainer pushes
the embedding's sparse gradient as a row-sparse value (only the rows the
part touched) and the dense layer's gradient as it is, to a dist_sync store
whose SGD updates only the rows pushed (lazy update), and pulls back only
the rows of the worker's next part (set_rows). Rank 0 prints the held-out
AUC of the model and of the ground truth on the same examples (they come
within 0.01), then trains the same model alone on the full batches with
torch's own SGD and prints the largest difference between the two sets of
weights (within 1e-5: float rounding of sums taken in another order).
"""
import argparse
import copy
import time

import numpy as np
import torch

import kvs
import kvs.torch

ROWS, DIM = 2 ** 20, 32          # the table: 128 MiB of float32
FIELDS, VALUES, ZIPF = 12, 100000, 1.2
SIGNAL = 50                      # values per field that the ground truth weighs
DENSE = 4
N_TRAIN, N_TEST = 200000, 50000
BATCH, LR = 1000, 0.3
SCALE = 10.0                     # embedding output scale: the rows learn SCALE**2 faster


def data(rows=ROWS, n_train=N_TRAIN, n_test=N_TEST):
    """(ids, dense, labels) of the training and held-out examples, and the
    ground truth's log-odds of the held-out ones (smaller sizes: for
    bench/bench_ctr.py's quick runs)."""
    rng = np.random.default_rng(0)
    n = n_train + n_test
    cdf = np.cumsum(np.arange(1, VALUES + 1, dtype=np.float64) ** -ZIPF)
    rank = np.searchsorted(cdf / cdf[-1], rng.random((n, FIELDS)))   # 0: most frequent
    value = rng.permutation(VALUES)[rank]
    ids = (np.arange(FIELDS) * VALUES + value) * 2654435761 % rows      # hashed into one table
    dense = rng.normal(size=(n, DENSE)).astype(np.float32)
    row_weight = rng.normal(size=rows)
    logit = ((row_weight[ids] * (rank < SIGNAL)).sum(1)
             + dense @ rng.normal(0, 0.5, DENSE) - 1.0)
    label = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.float32)
    ids, dense, label = torch.from_numpy(ids), torch.from_numpy(dense), torch.from_numpy(label)
    train = ids[:n_train], dense[:n_train], label[:n_train]
    test = ids[n_train:], dense[n_train:], label[n_train:]
    return train, test, logit[n_train:]


class CTR(torch.nn.Module):
    def __init__(self, init, rows=ROWS):
        """init: draw the weights (rank 0); the other workers receive
        rank 0's from the store, and skip drawing 32M numbers."""
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.utils.skip_init(torch.nn.Embedding, rows, DIM, sparse=True)
        self.out = torch.nn.Linear(FIELDS * DIM + DENSE, 1)
        if init:
            with torch.no_grad():
                self.emb.weight.normal_(0, 0.01)
                self.out.weight.normal_(0, 0.3)

    def forward(self, ids, dense):
        return self.out(torch.cat([self.emb(ids).flatten(1) * SCALE, dense], 1)).squeeze(1)


def batches(epochs, n_train=N_TRAIN, batch=BATCH):
    """Every step's examples, all epochs in a row."""
    out = []
    for epoch in range(epochs):
        order = torch.from_numpy(np.random.default_rng(1000 + epoch).permutation(n_train))
        out += [order[i:i + batch] for i in range(0, n_train, batch)]
    return out


def predict(net, test):
    ids, dense, _ = test
    with torch.no_grad():
        return net(ids, dense).numpy()


def auc(test, score):
    from sklearn.metrics import roc_auc_score     # rank 0 only: the others skip its import
    return roc_auc_score(test[2].numpy(), score)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--epochs', type=int, default=2)
    args = ap.parse_args()
    start = time.monotonic()
    (ids, dense, label), test, truth_logit = data()
    loss_fn = torch.nn.BCEWithLogitsLoss(reduction='sum')

    kv = kvs.create('dist_sync')
    rank, workers = kv.rank, kv.num_workers
    net = CTR(init=rank == 0)
    alone = copy.deepcopy(net) if rank == 0 else None
    trainer = kvs.torch.Trainer(net, kv, kvs.optimizer.SGD(LR))
    steps = batches(args.epochs)
    for step, idx in enumerate(steps):
        part = idx[rank::workers]                  # this worker's part of the batch
        trainer.zero_grad()
        loss_fn(net(ids[part], dense[part]), label[part]).backward()
        if step + 1 < len(steps):                  # the rows the next part reads
            trainer.set_rows(net.emb.weight, ids[steps[step + 1][rank::workers]].flatten())
        trainer.step(len(idx))                     # the store sums the parts: / whole batch
    # The last step named no rows: the whole table came back, as in the store.
    if rank == 0:
        print('%d steps of %d examples on %d workers: %.1f s'
              % (len(steps), BATCH, workers, time.monotonic() - start))
        print('held-out AUC: %.4f, ground truth %.4f'
              % (auc(test, predict(net, test)), auc(test, truth_logit)), flush=True)
    kv.close()
    if rank != 0:
        return

    # The same training in one process, on the full batches, torch's SGD.
    opt = torch.optim.SGD(alone.parameters(), lr=LR)
    for idx in steps:
        opt.zero_grad()
        (loss_fn(alone(ids[idx], dense[idx]), label[idx]) / len(idx)).backward()
        opt.step()
    diff = max((a - b).abs().max().item() for a, b in zip(net.parameters(), alone.parameters()))
    print('alone: held-out AUC %.4f; largest weight difference %.3g (tolerance 1e-5)'
          % (auc(test, predict(alone, test)), diff))


if __name__ == '__main__':
    main()
