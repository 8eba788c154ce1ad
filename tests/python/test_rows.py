"""Row-sparse values from Python: kvs.RowSparse, torch sparse COO tensors
pushed as they are, compact pulls, lazy updates, and kvs.torch.Trainer
with sparse embeddings; each against a numpy (or torch) reference."""

import re

import numpy as np
import pytest

import kvs

torch = pytest.importorskip('torch', reason='torch is not installed (python3-torch)')
import kvs.torch  # noqa: E402  (needs torch)

SHAPE = (8, 3)


def dense_sum(shape, *parts):
    """The dense sum of (rows, data) parts, repeats added: the reference."""
    out = np.zeros(shape, np.float64)
    for rows, data in parts:
        np.add.at(out, np.asarray(rows), np.asarray(data, np.float64))
    return out


def table(seed=0, shape=SHAPE):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ---- RowSparse itself ------------------------------------------------------

def test_row_sparse_fields_and_todense():
    data = np.arange(9, dtype=np.float32).reshape(3, 3)
    rs = kvs.RowSparse(data, [5, 1, 5], SHAPE)          # unsorted, repeated
    assert rs.shape == SHAPE and rs.nnz == 3 and rs.dtype == np.float32
    assert rs.indices.dtype == np.int64 and rs.indices.tolist() == [5, 1, 5]
    assert rs.data is data
    np.testing.assert_array_equal(rs.todense(), dense_sum(SHAPE, ([5, 1, 5], data)))
    assert rs.todense().dtype == np.float32
    empty = kvs.RowSparse(np.zeros((0, 3), np.float64), [], SHAPE)
    assert empty.nnz == 0 and not empty.todense().any() and empty.todense().shape == SHAPE
    one_d = kvs.RowSparse(np.array([2.0, 3.0]), np.array([3, 3], np.int32), 4)
    assert one_d.todense().tolist() == [0, 0, 0, 5]
    assert 'nnz=3' in repr(rs)


def test_row_sparse_of_torch_tensors_stays_torch():
    data = torch.ones(2, 3, dtype=torch.float64)
    rs = kvs.RowSparse(data, torch.tensor([7, 0], dtype=torch.int32), SHAPE)
    assert isinstance(rs.indices, torch.Tensor) and rs.indices.dtype == torch.int64
    dense = rs.todense()
    assert isinstance(dense, torch.Tensor) and dense.dtype == torch.float64
    assert dense.sum().item() == 6 and dense[7].tolist() == [1, 1, 1]
    half = kvs.RowSparse(torch.ones(2, 3, dtype=torch.bfloat16), [1, 1], SHAPE).todense()
    assert half.dtype == torch.bfloat16 and half[1].tolist() == [2, 2, 2]


@pytest.mark.parametrize('data,indices,shape,exc,match', [
    (np.zeros((2, 3)), [[0, 1]], SHAPE, ValueError, 'indices must be 1-D'),
    (np.zeros((2, 3)), [0.0, 1.0], SHAPE, TypeError, 'indices must be integers'),
    (np.zeros((2, 3)), 'ab', SHAPE, TypeError, 'indices must be'),
    (np.zeros((3, 3)), [0, 1], SHAPE, ValueError, r'2 indices .* need data of shape \(2, 3\)'),
    (np.zeros((2, 4)), [0, 1], SHAPE, ValueError, r'need data of shape \(2, 3\)'),
    (np.zeros((2, 3)), [0, 8], SHAPE, ValueError, r'indices\[1\] is 8, outside \[0, 8\)'),
    (np.zeros((2, 3)), [-1, 0], SHAPE, ValueError, r'indices\[0\] is -1'),
    (np.zeros((2, 3)), [0, 1], (), ValueError, '1 to 8 dimensions'),
    (np.zeros((2, 3)), [0, 1], (8, -3), ValueError, 'negative'),
    (np.zeros((2, 3)), [0, 1], (8, 3.0), TypeError, 'shape must hold ints'),
    ([[0, 0, 0]], [0], SHAPE, TypeError, 'data must be a numpy.ndarray'),
    (np.zeros((1, 3), np.complex64), [0], SHAPE, TypeError, 'dtype'),
])
def test_row_sparse_refuses_bad_parts(data, indices, shape, exc, match):
    with pytest.raises(exc, match=match):
        kvs.RowSparse(data, indices, shape)


def test_row_sparse_refuses_a_sparse_tensor_as_data():
    with pytest.raises(TypeError, match='dense tensor'):
        kvs.RowSparse(torch.eye(3).to_sparse(), [0, 1, 2], (3, 3))


# ---- push and pull in a local store ---------------------------------------

def test_push_row_sparse_sums_rows_and_assigns():
    kv = kvs.create('local')
    kv.init('w', table())
    a = kvs.RowSparse(np.ones((3, 3), np.float32), [6, 2, 6], SHAPE)       # repeats
    b = kvs.RowSparse(np.full((2, 3), 2, np.float32), [2, 0], SHAPE)        # overlap
    kv.push('w', [a, b])
    # Without an optimizer the stored value becomes the row-sparse sum.
    want = dense_sum(SHAPE, ([6, 2, 6], a.data), ([2, 0], b.data))
    np.testing.assert_array_equal(kv.pull('w'), want)
    kv.push('w', kvs.RowSparse(np.zeros((0, 3), np.float32), [], SHAPE))    # empty
    assert not kv.pull('w').any()


def test_init_row_sparse_gives_zero_elsewhere():
    kv = kvs.create('local')
    kv.init(['a', 'b'], [kvs.RowSparse(np.full((2, 3), 4, np.float32), [3, 1], SHAPE),
                         table(1)])                 # one dense, one row-sparse key
    want = np.zeros(SHAPE)
    want[[1, 3]] = 4
    np.testing.assert_array_equal(kv.pull('a'), want)
    np.testing.assert_array_equal(kv.pull('b'), table(1))


def embedding_gradient(ids, rows=SHAPE[0], dim=SHAPE[1], seed=3):
    """The sparse COO gradient of nn.Embedding(sparse=True) for a batch of
    ids (uncoalesced when ids repeat) and its dense form."""
    torch.manual_seed(seed)
    emb = torch.nn.Embedding(rows, dim, sparse=True)
    (emb(torch.tensor(ids)) * torch.arange(1.0, dim + 1)).sum().backward()
    return emb.weight.grad


@pytest.mark.parametrize('coalesced', [False, True])
def test_torch_sparse_gradient_pushed_directly(coalesced):
    grad = embedding_gradient([4, 1, 4, 4, 7])
    assert grad.is_sparse and not grad.is_coalesced()
    if coalesced:
        grad = grad.coalesce()
    kv = kvs.create('local')
    kv.init(0, np.ones(SHAPE, np.float32))
    kv.push(0, grad)
    np.testing.assert_allclose(kv.pull(0), grad.to_dense().numpy(), rtol=0, atol=0)
    assert kv.pull(0)[4].tolist() == [3, 6, 9]


def test_torch_sparse_of_two_sparse_dims_is_split_into_rows():
    dense = torch.zeros(SHAPE)
    dense[2, 1], dense[5, 0], dense[5, 2] = 1, 2, 3
    kv = kvs.create('local')
    kv.init(1, np.zeros(SHAPE, np.float32))
    kv.push(1, dense.to_sparse())                   # sparse_dim 2: one entry per element
    np.testing.assert_array_equal(kv.pull(1), dense.numpy())
    kv.init(2, dense.to_sparse())
    np.testing.assert_array_equal(kv.pull(2), dense.numpy())


def test_mixed_dense_and_sparse_keys_in_one_list():
    kv = kvs.create('local')
    kv.init([1, 2, 3], [np.zeros(SHAPE, np.float32)] * 3)
    grad = embedding_gradient([0, 3])
    kv.push([1, 2, 3], [np.ones(SHAPE, np.float32), grad,
                        [np.ones(SHAPE, np.float32), grad]])    # key 3: both kinds, summed
    assert (kv.pull(1) == 1).all()
    np.testing.assert_array_equal(kv.pull(2), grad.to_dense().numpy())
    np.testing.assert_array_equal(kv.pull(3), 1 + grad.to_dense().numpy())


def test_bad_row_sparse_pushes_change_nothing():
    kv = kvs.create('local')
    kv.init('w', table())
    with pytest.raises(kvs.KVSError) as err:        # float64 rows into a float32 key
        kv.push('w', kvs.RowSparse(np.ones((1, 3)), [0], SHAPE))
    assert err.value.code == kvs.EDTYPE
    with pytest.raises(kvs.KVSError) as err:        # another shape
        kv.push('w', kvs.RowSparse(np.ones((1, 4), np.float32), [0], (8, 4)))
    assert err.value.code == kvs.ESHAPE
    np.testing.assert_array_equal(kv.pull('w'), table())
    with pytest.raises(TypeError, match='dense tensors here'):
        kv.pull('w', out=torch.zeros(SHAPE).to_sparse())
    with pytest.raises(TypeError, match='kvs.RowSparse'):
        kv.push('w', [table(), 'x'])


# ---- compact pulls ----------------------------------------------------------

def test_row_sparse_pull_returns_the_sorted_unique_rows():
    kv = kvs.create('local')
    kv.init('e', table())
    got = kv.row_sparse_pull('e', row_ids=np.array([6, 1, 6, 3], np.int64))
    assert isinstance(got, kvs.RowSparse) and got.shape == SHAPE
    assert got.indices.tolist() == [1, 3, 6]
    np.testing.assert_array_equal(got.data, table()[[1, 3, 6]])
    empty = kv.row_sparse_pull('e', row_ids=np.zeros(0, np.int64))
    assert empty.nnz == 0 and empty.data.shape == (0, 3)
    # torch ids give torch tensors; a list of ids for one key, a list each.
    t = kv.row_sparse_pull('e', row_ids=torch.tensor([7, 0]))
    assert isinstance(t.data, torch.Tensor) and t.indices.tolist() == [0, 7]
    both = kv.row_sparse_pull('e', row_ids=[np.array([2]), np.array([5, 2])])
    assert [b.indices.tolist() for b in both] == [[2], [2, 5]]
    kv.init('f', np.arange(8, dtype=np.float64))   # one dimension: rows are elements
    listed = kv.row_sparse_pull(['e', 'f'], row_ids=[np.array([0]), np.array([4, 4, 2])])
    assert listed[1].data.tolist() == [2, 4] and listed[1].dtype == np.float64
    # A dense out is filled as before: the rows, every other row zero.
    out = np.full(SHAPE, 9, np.float32)
    kv.row_sparse_pull('e', out=out, row_ids=np.array([2, 2]))
    want = np.zeros(SHAPE, np.float32)
    want[2] = table()[2]
    np.testing.assert_array_equal(out, want)


def test_row_sparse_pull_of_bad_ids():
    kv = kvs.create('local')
    kv.init('e', table())
    with pytest.raises(kvs.KVSError) as err:
        kv.row_sparse_pull('e', row_ids=np.array([1, 8]))
    assert err.value.code == kvs.ERANGE
    with pytest.raises(ValueError, match='1-D'):
        kv.row_sparse_pull('e', row_ids=np.zeros((1, 2), np.int64))
    with pytest.raises(ValueError, match='known only'):
        kv.row_sparse_pull('unknown', row_ids=np.array([0]))


def test_pushpull_with_row_ids():
    kv = kvs.create('local')
    kv.init('e', table())
    kv.set_optimizer('sgd lr=0.5')
    grad = kvs.RowSparse(np.ones((2, 3), np.float32), [4, 1], SHAPE)
    got = kv.pushpull('e', grad, row_ids=np.array([4, 0]))
    want = table().copy()
    want[[4, 1]] -= 0.5                   # lazily: rows 4 and 1 only
    assert isinstance(got, kvs.RowSparse) and got.indices.tolist() == [0, 4]
    np.testing.assert_array_equal(got.data, want[[0, 4]])
    np.testing.assert_array_equal(kv.pull('e'), want)
    # Torch in, torch out; a dense out is filled as row_sparse_pull fills it.
    t = kv.pushpull('e', embedding_gradient([2]), row_ids=torch.tensor([2]))
    assert isinstance(t.data, torch.Tensor) and t.indices.tolist() == [2]
    out = np.zeros(SHAPE, np.float32)
    kv.pushpull('e', grad, out=out, row_ids=np.array([1]))
    assert out[1].tolist() == kv.pull('e')[1].tolist() and not out[[0, 2, 3, 4, 5, 6, 7]].any()
    # Row-sparse values without row_ids: the whole value comes back.
    whole = kv.pushpull('e', grad)
    np.testing.assert_array_equal(whole, kv.pull('e'))
    # Lists of keys: one RowSparse each; a dense value goes as all its rows.
    kv.init('v', np.zeros(4, np.float32))
    before = kv.pull('e')
    got = kv.pushpull(['e', 'v'], [[grad, grad], np.ones(4, np.float32)],
                      row_ids=[np.array([1, 4, 1]), np.array([3])])
    before[[4, 1]] -= 1.0                 # two values of rows 4 and 1, summed
    assert [g.indices.tolist() for g in got] == [[1, 4], [3]]
    np.testing.assert_allclose(got[0].data, before[[1, 4]], rtol=1e-6)
    assert got[1].data.tolist() == [-0.5]


# ---- lazy and dense updates -------------------------------------------------

@pytest.mark.parametrize('spec', ['sgd lr=0.1 momentum=0.9 wd=0.01',
                                  'adam lr=0.05 wd=0.01',
                                  'sgd lr=0.1 momentum=0.9 wd=0.01 lazy_update=0',
                                  'adam lr=0.05 wd=0.01 lazy_update=0'])
def test_lazy_update_leaves_absent_rows(spec):
    """Key 's' takes row-sparse pushes of rows 1 and 5, key 'd' the same
    gradients dense. Lazily, the rows pushed match the dense key's and
    every other row stays bit for bit; with lazy_update=0 both keys match."""
    kv = kvs.create('local')
    kv.init(['s', 'd'], [table(), table()])
    kv.set_optimizer(spec)
    rng = np.random.default_rng(5)
    for _ in range(4):
        rows = rng.standard_normal((2, 3)).astype(np.float32)
        rs = kvs.RowSparse(rows, [5, 1], SHAPE)
        kv.push(['s', 'd'], [rs, rs.todense()])
    s, d = kv.pull('s'), kv.pull('d')
    if 'lazy_update=0' in spec:
        np.testing.assert_allclose(s, d, rtol=1e-6, atol=1e-7)
    else:
        np.testing.assert_allclose(s[[1, 5]], d[[1, 5]], rtol=1e-6, atol=1e-7)
        absent = [0, 2, 3, 4, 6, 7]
        assert (s[absent] == table()[absent]).all()
        assert (d[absent] != table()[absent]).any()      # wd moved the dense key's rows


def test_optimizer_objects_say_lazy_update():
    assert 'lazy_update' not in kvs.optimizer.SGD(0.1).spec()
    assert kvs.optimizer.Adam(lazy_update=False).spec().endswith('lazy_update=0')


# ---- kvs.torch.Trainer with sparse embeddings -------------------------------

class Model(torch.nn.Module):
    """An embedding table (sparse gradients) and a dense layer on top."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(40, 4, sparse=True)
        self.out = torch.nn.Linear(4, 1)

    def forward(self, ids):
        return self.out(self.emb(ids).sum(1)).squeeze(1)


def models(seed=0):
    torch.manual_seed(seed)
    a, b = Model(), Model()
    b.load_state_dict(a.state_dict())
    return a, b


def batches(n=8, size=6, seed=1):
    gen = torch.Generator().manual_seed(seed)
    # Ids drawn from part of the table, repeated within a batch.
    return [(torch.randint(0, 25, (size, 3), generator=gen),
             torch.randn(size, generator=gen)) for _ in range(n)]


def largest_difference(a, b):
    return max((p - q).abs().max().item() for p, q in zip(a.parameters(), b.parameters()))


@pytest.mark.parametrize('opt,given', [('sgd', 'model'), ('sgd', 'parameters'),
                                       ('adam', 'model'), ('sgd', 'set_rows'),
                                       ('sgd not lazy', 'model')])
def test_trainer_sparse_embedding_matches_torch(opt, given):
    """The Trainer pushes the embedding's sparse gradient as rows and pulls
    rows back; the weights match one process training with torch's sparse
    SGD (or SparseAdam for the table, Adam for the dense layer)."""
    net, ref = models()
    kv = kvs.create('local')
    # Not lazy, the Trainer pulls the whole table (plain sgd: the same update).
    spec = {'sgd': kvs.optimizer.SGD(0.1), 'adam': kvs.optimizer.Adam(0.01),
            'sgd not lazy': kvs.optimizer.SGD(0.1, lazy_update=False)}[opt]
    tr = kvs.torch.Trainer(net.parameters() if given == 'parameters' else net, kv, spec)
    if opt != 'adam':
        ref_opts = [torch.optim.SGD(ref.parameters(), lr=0.1)]
    else:
        ref_opts = [torch.optim.SparseAdam([ref.emb.weight], lr=0.01, eps=1e-8),
                    torch.optim.Adam(ref.out.parameters(), lr=0.01, eps=1e-8)]
    data = batches()
    for step, (ids, y) in enumerate(data):
        tr.zero_grad()
        ((net(ids) - y) ** 2).sum().backward()
        # Sparse from the first step, the table given or found: no dense
        # buffer took the gradient.
        assert net.emb.weight.grad.is_sparse, step
        if given == 'set_rows' and step + 1 < len(data):
            tr.set_rows(net.emb.weight, data[step + 1][0].flatten())
        tr.step(len(y))
        for o in ref_opts:
            o.zero_grad()
        ((ref(ids) - y) ** 2).mean().backward()
        for o in ref_opts:
            o.step()
        assert net.emb.weight.grad is None or net.emb.weight.grad.is_sparse, step
    stored = kv.pull(0)
    if given == 'set_rows':
        # The local table is current in the rows pulled (each batch's, and
        # the last step's own); the store's table is current everywhere.
        last = data[-1][0].flatten()
        diff = (net.emb.weight[last] - ref.emb.weight[last]).abs().max().item()
        diff = max(diff, (net.out.weight - ref.out.weight).abs().max().item(),
                   np.abs(stored - ref.emb.weight.detach().numpy()).max())
    else:
        diff = largest_difference(net, ref)
    # MXNet's Adam adds epsilon to sqrt(v) before the bias correction,
    # torch's after it: they differ by about lr * epsilon / sqrt(v).
    assert diff < (1e-4 if opt == 'adam' else 1e-5), diff
    assert tr._lazy == (opt != 'sgd not lazy')
    assert tr._sparse[0] and not any(tr._sparse[1:])
    touched = torch.cat([ids.flatten() for ids, _ in data]).unique().numpy()
    untouched = np.setdiff1d(np.arange(40), touched)
    torch.manual_seed(0)
    assert (stored[untouched] == Model().emb.weight.detach().numpy()[untouched]).all()


def test_trainer_averages_sparse_gradients_for_a_torch_optimizer():
    net, ref = models()
    kv = kvs.create('local')
    tr = kvs.torch.Trainer(net, kv)
    mine = torch.optim.SGD(net.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for ids, y in batches(4):
        tr.zero_grad()
        ((net(ids) - y) ** 2).sum().backward()
        tr.step(len(y))
        assert net.emb.weight.grad.is_sparse
        mine.step()
        ref_opt.zero_grad()
        ((ref(ids) - y) ** 2).mean().backward()
        ref_opt.step()
    assert largest_difference(net, ref) < 1e-5


def test_trainer_set_rows_refuses_strangers():
    net, _ = models()
    tr = kvs.torch.Trainer(net, kvs.create('local'), 'sgd lr=0.1')
    with pytest.raises(ValueError, match='not a parameter'):
        tr.set_rows(torch.zeros(3), [0])
    with pytest.raises(IndexError):
        tr.set_rows(7, [0])


# ---- dist stores --------------------------------------------------------------

def skip_if_refused(out):
    """Skips where the library's dist types refuse row-sparse values with
    KVS_ENOTSUP (a build without them), naming the library's reason."""
    refused = re.search(r'rows refused: (.*)', out)
    if refused:
        pytest.skip('this build\'s dist types refuse row-sparse values (KVS_ENOTSUP): '
                    + refused.group(1))


@pytest.mark.parametrize('kind,workers', [('dist_sync', 2), ('dist_sync', 4), ('dist_async', 3)])
def test_rows_in_dist_stores(job, kind, workers):
    out = job(workers, 'rows', kind)
    skip_if_refused(out)
    assert out.count('rows %s ok' % kind) == workers, out


@pytest.mark.parametrize('mode', ['whole', 'set_rows', 'parameters', 'parameters_set_rows',
                                  'parameters_adam'])
def test_dist_trainer_sparse_embedding(job, mode):
    out = job(2, 'sparse_trainer', mode)
    skip_if_refused(out)
    assert out.count('sparse trainer %s ok' % mode) == 2, out


@pytest.mark.parametrize('opt', ['sgd', 'adam', 'sgd_not_lazy'])
def test_dist_trainer_one_round_is_bit_identical(job, opt):
    """The step's dense parameters go as all their rows in the embedding's
    row call: the same weights, bit for bit, as their own dense call."""
    out = job(2, 'one_round', opt)
    skip_if_refused(out)
    assert out.count('one round %s ok' % opt) == 2, out
