"""MXNet 1.9's tests/python/unittest/test_kvstore.py, the cases that apply,
on numpy arrays (its row_sparse arrays become dense arrays pulled by rows;
its devices, plain arrays)."""

import numpy as np
import pytest

import kvs

SHAPE = (4, 4)
KEYS = [5, 7, 11]
STR_KEYS = ['b', 'c', 'd']


def init_kv():
    kv = kvs.create()
    kv.init(3, np.zeros(SHAPE, np.float32))
    kv.init(KEYS, [np.zeros(SHAPE, np.float32)] * len(KEYS))
    return kv


def init_kv_with_str():
    kv = kvs.create()
    kv.init('a', np.zeros(SHAPE, np.float32))
    kv.init(STR_KEYS, [np.zeros(SHAPE, np.float32)] * len(STR_KEYS))
    return kv


def check_diff_to_scalar(a, x):
    assert np.sum(np.abs(a - x)) == 0, (a, x)


@pytest.mark.parametrize('make,key', [(init_kv, 3), (init_kv_with_str, 'a')])
def test_single_kv_pair(make, key):
    kv = make()
    kv.push(key, np.ones(SHAPE, np.float32))
    val = np.empty(SHAPE, np.float32)
    kv.pull(key, out=val)
    check_diff_to_scalar(val, 1)


@pytest.mark.parametrize('count', [1, 4])
def test_row_sparse_pull(count):
    kv = init_kv_with_str()
    kv.init('e', np.ones(SHAPE, np.float32))
    rng = np.random.default_rng(count)
    vals = [np.zeros(SHAPE, np.float32) for _ in range(count)]
    row_ids = [rng.integers(SHAPE[0], size=SHAPE[0]).astype(np.int64) for _ in range(count)]
    kv.row_sparse_pull('e', out=vals[0] if count == 1 else vals,
                       row_ids=row_ids[0] if count == 1 else row_ids)
    for val, ids in zip(vals, row_ids):
        for row in range(SHAPE[0]):
            check_diff_to_scalar(val[row], 1 if row in ids else 0)


def test_row_sparse_pull_one_id_list_for_many_outs():
    kv = init_kv()
    kv.init(1, np.arange(16, dtype=np.float32).reshape(SHAPE))
    outs = [np.full(SHAPE, 9, np.float32) for _ in range(3)]
    kv.row_sparse_pull(1, out=outs, row_ids=[np.array([2, 0], np.int64)])
    want = np.arange(16, dtype=np.float32).reshape(SHAPE)
    want[[1, 3]] = 0
    for o in outs:
        np.testing.assert_array_equal(o, want)


@pytest.mark.parametrize('key', [3, 'a'])
def test_init(key):
    kv = kvs.create()
    kv.init(key, np.ones(SHAPE, np.float32) * 4)
    a = np.zeros(SHAPE, np.float32)
    kv.pull(key, out=a)
    check_diff_to_scalar(a, 4)


@pytest.mark.parametrize('make,keys', [(init_kv, KEYS), (init_kv_with_str, STR_KEYS)])
def test_list_kv_pair(make, keys):
    kv = make()
    kv.push(keys, [np.ones(SHAPE, np.float32) * 4] * len(keys))
    val = [np.empty(SHAPE, np.float32)] * len(keys)
    kv.pull(keys, out=val)
    for v in val:
        check_diff_to_scalar(v, 4)


@pytest.mark.parametrize('make,key,keys', [(init_kv, 3, KEYS), (init_kv_with_str, 'a', STR_KEYS)])
def test_aggregator(make, key, keys):
    kv = make()
    num_devs = 4
    vals = [np.ones(SHAPE, np.float32) for _ in range(num_devs)]
    kv.push(key, vals)
    kv.pull(key, out=vals)
    for v in vals:
        check_diff_to_scalar(v, num_devs)
    vals = [[np.ones(SHAPE, np.float32) * 2.0 for _ in range(num_devs)]] * len(keys)
    kv.push(keys, vals)
    kv.pull(keys, out=vals)
    for vv in vals:
        for v in vv:
            check_diff_to_scalar(v, num_devs * 2.0)


def test_sparse_aggregator():
    kv = init_kv_with_str()
    num_devs = 4
    rng = np.random.default_rng(7)
    vals = [rng.random(SHAPE).astype(np.float32) for _ in range(num_devs)]
    expected_sum = np.sum(vals, axis=0)
    all_rows = np.arange(SHAPE[0], dtype=np.int64)
    kv.push('a', vals)
    kv.row_sparse_pull('a', out=vals, row_ids=[all_rows] * len(vals))
    np.testing.assert_allclose(np.sum(vals, axis=0), expected_sum * num_devs, rtol=1e-6)
    vals = [[rng.random(SHAPE).astype(np.float32) for _ in range(num_devs)]] * len(STR_KEYS)
    expected_sum = np.sum(vals[0], axis=0)
    kv.push(STR_KEYS, vals)
    kv.row_sparse_pull(STR_KEYS, out=vals, row_ids=[[all_rows] * num_devs] * len(vals))
    for vv in vals:
        np.testing.assert_allclose(np.sum(vv, axis=0), expected_sum * num_devs, rtol=1e-6)


def updater(key, recv, local):
    local += recv


@pytest.mark.parametrize('make,key,keys', [(init_kv, 3, KEYS), (init_kv_with_str, 'a', STR_KEYS)])
def test_updater(make, key, keys):
    kv = make()
    kv._set_updater(updater)
    num_devs = 4
    vals = [np.ones(SHAPE, np.float32) for _ in range(num_devs)]
    kv.push(key, vals)
    kv.pull(key, out=vals)
    for v in vals:
        check_diff_to_scalar(v, num_devs)
    vals = [[np.ones(SHAPE, np.float32) for _ in range(num_devs)]] * len(keys)
    num_push = 4
    for _ in range(num_push):
        kv.push(keys, vals)
    kv.pull(keys, out=vals)
    for vv in vals:
        for v in vv:
            check_diff_to_scalar(v, num_devs * num_push)


def test_get_type():
    kvtype = 'local_allreduce_cpu'
    kv = kvs.create(kvtype)
    assert kv.type == kvtype


@pytest.mark.parametrize('name', ['local', 'local_update_cpu', 'local_allreduce_cpu', 'device',
                                  'nccl'])
def test_kvstore_types(name):
    kv = kvs.create(name)
    assert (kv.type, kv.rank, kv.num_workers) == (name, 0, 1)


@pytest.mark.parametrize('name', ['dist_sync', 'dist_device_sync', 'dist_async'])
def test_dist_types_need_kvsd(name, monkeypatch):
    monkeypatch.setenv('KVS_JOB', 'nobody-serves-this-job')
    with pytest.raises(kvs.KVSError) as err:
        kvs.create(name)
    assert err.value.code == kvs.ECLOSED


def test_invalid_pull():
    kv = init_kv()
    out = np.zeros(SHAPE, np.float32)
    with pytest.raises(kvs.KVSError) as err:
        kv.pull(9, out=out)
    assert err.value.name == 'KVS_ENOKEY' and '9' in str(err.value)
    with pytest.raises(kvs.KVSError) as err:
        kv.pull(3, out=np.zeros((2, 2), np.float32))
    assert err.value.code == kvs.ESHAPE


def test_set_optimizer_doc_example():
    kv = kvs.create()
    weight = np.zeros((2, 2), np.float32)
    kv.init(3, weight)
    kv.set_optimizer(kvs.optimizer.SGD())
    kv.push(3, np.ones((2, 2), np.float32))
    kv.pull(3, out=weight)
    np.testing.assert_allclose(weight, np.full((2, 2), -0.01, np.float32))


def test_pushpull_doc_examples():
    kv = init_kv()
    a = np.zeros(SHAPE, np.float32)
    kv.pushpull(3, np.ones(SHAPE, np.float32) * 8, out=a)
    check_diff_to_scalar(a, 8)
    b = [np.ones(SHAPE, np.float32) for _ in range(4)]
    kv.pushpull(3, b, out=a)
    check_diff_to_scalar(a, 4)
    b = [[np.ones(SHAPE, np.float32) for _ in range(4)]] * len(KEYS)
    kv.pushpull(KEYS, b)
    check_diff_to_scalar(b[1][1], 4)
