"""Every form and error of the Python API on a local store: argument forms,
dtypes of numpy and torch, errors, updaters, buffers and views,
optimizers, compression, optimizer states."""

import json
import os
import re

import numpy as np
import pytest

import kvs

try:
    import torch
except ImportError:           # Debian: python3-torch
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason='torch is not installed (python3-torch)')

NUMPY_DTYPES = ['float32', 'float64', 'float16', 'int32', 'int64', 'uint8']


@pytest.fixture
def kv():
    with kvs.create('local') as store:
        yield store


# ---- forms -----------------------------------------------------------------

def test_forms_of_keys_and_values(kv):
    kv.init([1, 2], [np.zeros(3), np.zeros(3)])
    kv.push(1, np.ones(3))                                     # a key, a value
    kv.push(2, [np.ones(3), np.ones(3) * 2])                   # a key, values summed
    np.testing.assert_array_equal(kv.pull(1), [1, 1, 1])       # out=None: new arrays
    assert kv.pull([1, 2])[1].tolist() == [3, 3, 3]
    kv.push([1, 2], [[np.ones(3)] * 3, np.ones(3) * 5])        # a list of lists
    outs = [[np.zeros(3), np.zeros(3)], np.zeros(3)]
    assert kv.pull([1, 2], out=outs) is outs
    assert outs[0][0].tolist() == outs[0][1].tolist() == [3, 3, 3]
    assert outs[1].tolist() == [5, 5, 5]
    kv.push((1, 2), (np.ones(3), np.ones(3)))                  # tuples as lists
    assert kv.pull((1, 2))[0].tolist() == [1, 1, 1]
    kv.push(np.int64(1), np.full(3, 7.0))                      # numpy integers as keys
    assert kv.pull(1).tolist() == [7, 7, 7]


def test_pushpull_in_place_and_new_arrays(kv):
    kv.init(1, np.zeros(4))
    v = np.ones(4)
    assert kv.pushpull(1, v) is v and v.tolist() == [1] * 4    # MXNet: result into value
    ro = np.full(4, 2.0)
    ro.flags.writeable = False
    got = kv.pushpull(1, ro)
    assert got is not ro and got.tolist() == [2] * 4 and ro.tolist() == [2] * 4
    strided = np.full(8, 3.0)[::2]
    got = kv.pushpull(1, [strided, np.ones(4)])
    assert got[0].tolist() == [4] * 4 and got[1].tolist() == [4] * 4
    assert strided.tolist() == [3] * 4


def test_pushpull_more_outs_than_values(kv):
    kv.init(1, np.zeros(2))
    outs = [np.zeros(2) for _ in range(3)]
    kv.pushpull(1, np.ones(2) * 6, out=outs)
    assert all(o.tolist() == [6, 6] for o in outs)


def test_mismatched_forms(kv):
    kv.init([1, 2], [np.zeros(2)] * 2)
    with pytest.raises(ValueError, match='2 keys but 1 value'):
        kv.push([1, 2], [np.ones(2)])
    with pytest.raises(TypeError, match='inconsistent types of keys'):
        kv.push([1, 'a'], [np.ones(2)] * 2)
    with pytest.raises(TypeError, match='unexpected type for keys'):
        kv.push(1.5, np.ones(2))
    with pytest.raises(TypeError, match='unexpected type for keys'):
        kv.push([[1, 2]], [np.ones(2)])
    with pytest.raises(TypeError, match='numpy.ndarray or a torch.Tensor'):
        kv.push(1, [1.0, 2.0])
    with pytest.raises(TypeError, match='must be a list'):
        kv.push([1, 2], np.ones(2))
    with pytest.raises(TypeError):
        kv.push(True, np.ones(2))
    assert kv.pull(1).tolist() == [0, 0]                       # nothing changed


def test_outs_must_be_writable_and_contiguous(kv):
    kv.init(1, np.zeros(4))
    ro = np.zeros(4)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match='read-only'):
        kv.pull(1, out=ro)
    with pytest.raises(ValueError, match='C-contiguous'):
        kv.pull(1, out=np.zeros(8)[::2])


def test_non_contiguous_inputs_are_copied(kv):
    m = np.arange(16.0).reshape(4, 4)
    kv.init(1, m.T)
    assert kv.pull(1).tolist() == m.T.tolist()


# ---- dtypes ----------------------------------------------------------------

@pytest.mark.parametrize('dtype', NUMPY_DTYPES)
def test_numpy_dtype_round_trip(kv, dtype):
    value = (np.arange(12) % 7).astype(dtype).reshape(3, 4)
    kv.init(1, value)
    kv.push(1, [value, value])
    got = kv.pull(1)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, value + value)


def test_numpy_dtype_refused(kv):
    with pytest.raises(TypeError, match='int8'):
        kv.init(1, np.zeros(2, np.int8))
    with pytest.raises(TypeError, match='bool'):
        kv.init(1, np.zeros(2, bool))


def test_scalar_and_empty_arrays(kv):
    kv.init([1, 2], [np.array(3.5), np.zeros((0, 4))])
    assert kv.pull(1).shape == () and float(kv.pull(1)) == 3.5
    assert kv.pull(2).shape == (0, 4)


def test_nine_dimensions_refused(kv):
    with pytest.raises(ValueError, match='at most 8'):
        kv.init(1, np.zeros((1,) * 9))


@needs_torch
@pytest.mark.parametrize('dtype', ['float32', 'float64', 'float16', 'bfloat16', 'int32', 'int64',
                                   'uint8'])
def test_torch_dtype_round_trip(kv, dtype):
    dt = getattr(torch, dtype)
    value = (torch.arange(12) % 7).to(dt).reshape(3, 4)
    kv.init(1, value)
    kv.push(1, [value, value])
    out = torch.zeros(3, 4, dtype=dt)
    kv.pull(1, out=out)
    assert torch.equal(out, value + value)
    if dtype != 'bfloat16':
        assert kv.pull(1).dtype == np.dtype(dtype)


@needs_torch
def test_torch_tensors_that_need_grad_and_views(kv):
    w = torch.ones(2, 3, requires_grad=True)
    kv.init(1, w)
    kv.push(1, w.t().contiguous().t())                         # not contiguous: copied
    out = torch.zeros(2, 3)
    kv.pull(1, out=out)
    assert out.tolist() == [[1] * 3] * 2
    with pytest.raises(ValueError, match='contiguous'):
        kv.pull(1, out=torch.zeros(3, 2).t())


@needs_torch
def test_torch_tensor_on_another_device_refused(kv):
    if not hasattr(torch, 'device'):
        pytest.skip('no torch.device')
    meta = torch.zeros(2, device='meta')
    with pytest.raises(ValueError, match='a meta tensor: kvs takes CPU and CUDA tensors'):
        kv.init(1, meta)
    with pytest.raises(kvs.KVSError) as err:         # nothing was stored
        kv.pull(1, out=torch.zeros(2))
    assert err.value.code == kvs.ENOKEY


# ---- errors ----------------------------------------------------------------

def test_kvs_error_carries_code_name_and_detail(kv):
    kv.init(7, np.zeros((2, 3), np.float32))
    with pytest.raises(kvs.KVSError) as err:
        kv.push(7, np.zeros((3, 2), np.float32))
    e = err.value
    assert isinstance(e, RuntimeError)
    assert e.code == kvs.ESHAPE == -30006 and e.name == 'KVS_ESHAPE'
    assert '(3,2)' in e.detail.replace(' ', '') and e.detail in str(e)
    with pytest.raises(kvs.KVSError) as err:
        kv.init(7, np.zeros((2, 3), np.float32))
    assert err.value.code == kvs.EKEYEXISTS
    with pytest.raises(kvs.KVSError) as err:
        kv.push(7, np.zeros((2, 3), np.float64))
    assert err.value.code == kvs.EDTYPE
    with pytest.raises(kvs.KVSError) as err:
        kv.push('s', np.zeros(1))
    assert err.value.code == kvs.EKEYKIND


def test_error_classes_by_code():
    """KVS_ERESTART and KVS_EPEERDEAD raise their own subclasses, every
    other code a plain KVSError; all carry code, name and detail."""
    from kvs import _lib
    for code, cls in ((kvs.ERESTART, kvs.Restart), (kvs.EPEERDEAD, kvs.PeerDead),
                      (kvs.ESHAPE, kvs.KVSError)):
        e = _lib.error(code, 'the detail')
        assert type(e) is cls and isinstance(e, kvs.KVSError), (code, type(e))
        assert e.code == code and e.name == 'KVS_' + [n for n in dir(kvs) if getattr(
            kvs, n) == code and n.isupper() and n.startswith('E')][0]
        assert e.detail == 'the detail' and 'the detail' in str(e)


def test_bad_type_names():
    with pytest.raises(kvs.KVSError) as err:
        kvs.create('no_such_type')
    assert err.value.code == kvs.EBADTYPE and 'no_such_type' in str(err.value)
    with pytest.raises(TypeError):
        kvs.create(3)


def test_closed_store():
    kv = kvs.create()
    kv.close()
    kv.close()
    with pytest.raises(ValueError, match='closed'):
        kv.pull(1, out=np.zeros(1))
    assert 'closed' in repr(kv)


def test_out_none_needs_a_key_this_object_initialised(kv):
    with pytest.raises(ValueError, match='pass out'):
        kv.pull(1)


def test_long_string_key(kv):
    with pytest.raises(ValueError, match='at most 255 bytes'):
        kv.init('x' * 256, np.zeros(1))
    kv.init('x' * 255, np.zeros(1))
    kv.init('', np.ones(1))
    assert kv.pull('').tolist() == [1]


def test_row_sparse_pull_errors(kv):
    kv.init(1, np.ones((3, 2)))
    with pytest.raises(kvs.KVSError) as err:
        kv.row_sparse_pull(1, row_ids=np.array([3]))
    assert err.value.code == kvs.ERANGE
    with pytest.raises(ValueError, match='whole numbers'):
        kv.row_sparse_pull(1, row_ids=np.array([0.5]))
    with pytest.raises(ValueError, match='needs row_ids'):
        kv.row_sparse_pull(1)
    got = kv.row_sparse_pull(1, row_ids=np.array([2.0, 2.0]))   # MXNet's float row ids
    assert got.indices.tolist() == [2] and got.data.tolist() == [[1, 1]]
    assert got.todense().tolist() == [[0, 0], [0, 0], [1, 1]]
    dense = kv.row_sparse_pull(1, out=np.full((3, 2), 5.0), row_ids=np.array([2.0, 2.0]))
    assert dense.tolist() == [[0, 0], [0, 0], [1, 1]]


# ---- updaters --------------------------------------------------------------

def test_updater_sees_key_input_and_stored(kv):
    seen = []

    def update(key, inp, stored):
        seen.append((key, inp.tolist(), stored.tolist(), inp.flags.writeable))
        stored += inp * 2

    kv.init(['w', 'v'], [np.ones(2), np.zeros(2)])
    kv.set_updater(update)
    kv.push(['w', 'v'], [np.ones(2), np.ones(2)])
    assert seen == [('w', [1, 1], [1, 1], False), ('v', [1, 1], [0, 0], False)]
    assert kv.pull('w').tolist() == [3, 3]


def test_updater_exception_fails_the_push_and_changes_nothing(kv):
    kv.init([1, 2], [np.zeros(2), np.zeros(2)])

    def update(key, inp, stored):
        stored += inp
        if key == 2:
            raise ArithmeticError('no update for key 2')

    kv._set_updater(update)
    with pytest.raises(ArithmeticError, match='no update for key 2'):
        kv.push([1, 2], [np.ones(2), np.ones(2)])
    assert kv.pull([1, 2])[0].tolist() == [0, 0]               # key 1 unchanged too
    kv._set_updater(None)                                      # assignment again
    kv.push(2, np.full(2, 4.0))
    assert kv.pull(2).tolist() == [4, 4]


def test_updater_must_not_call_the_store(kv):
    kv.init(1, np.zeros(2))

    def update(key, inp, stored):
        kv.pull(1)

    kv._set_updater(update)
    with pytest.raises(RuntimeError, match='must not call the store'):
        kv.push(1, np.ones(2))
    with pytest.raises(TypeError):
        kv._set_updater(42)


# ---- buffers and views -----------------------------------------------------

def test_alloc_push_and_view(kv):
    buf = kv.alloc((2, 3))
    assert buf.dtype == np.float32 and buf.shape == (2, 3) and not buf.any()
    buf[:] = 5
    kv.init('k', buf)
    buf[:] = 2
    kv.push('k', buf)
    view = kv.pull_view('k')
    assert view.tolist() == [[2] * 3] * 2 and not view.flags.writeable
    with pytest.raises(ValueError):
        view[0, 0] = 1
    assert kv.pull_view(['k'])[0].tolist() == view.tolist()
    b64 = kv.alloc(4, 'float64')
    assert b64.shape == (4,) and b64.dtype == np.float64
    del buf, b64                                               # freed when collected
    with pytest.raises(TypeError):
        kv.alloc((2.5,))
    with pytest.raises(ValueError):
        kv.alloc((-1,))
    with pytest.raises(TypeError):
        kv.alloc(2, 'int8')


@needs_torch
def test_alloc_as_torch(kv):
    t = torch.from_numpy(kv.alloc((3,), torch.float32))
    t += 1
    kv.init(1, t)
    assert kv.pull(1).tolist() == [1, 1, 1]
    bf = kv.alloc((2,), 'bfloat16')
    assert isinstance(bf, torch.Tensor) and bf.dtype == torch.bfloat16


# ---- optimizers, compression, states ---------------------------------------

def test_optimizer_objects_make_specs():
    assert kvs.optimizer.SGD().spec() == 'sgd lr=0.01 momentum=0 wd=0 rescale_grad=1'
    assert kvs.optimizer.SGD(learning_rate=0.1, momentum=0.9, clip_gradient=5).spec() == \
        'sgd lr=0.1 momentum=0.9 wd=0 rescale_grad=1 clip_gradient=5'
    assert kvs.optimizer.Adam().spec() == \
        'adam lr=0.001 beta1=0.9 beta2=0.999 epsilon=1e-08 wd=0 rescale_grad=1'
    with pytest.raises(TypeError):
        kvs.optimizer.SGD(learning_rate='fast').spec()


def test_adam_matches_its_formula(kv):
    kv.init(1, np.ones(3, np.float32))
    kv.set_optimizer(kvs.optimizer.Adam(learning_rate=0.1))
    g = np.array([1.0, -2.0, 0.5], np.float32)
    kv.push(1, g)
    m = 0.1 * g
    v = 0.001 * g * g
    lr = 0.1 * np.sqrt(1 - 0.999) / (1 - 0.9)
    want = 1 - lr * m / (np.sqrt(v) + 1e-8)
    np.testing.assert_allclose(kv.pull(1), want, rtol=1e-5)


def test_bad_optimizer(kv):
    with pytest.raises(kvs.KVSError) as err:
        kv.set_optimizer('sgd lr=-1')
    assert err.value.code == kvs.ESPEC and 'lr' in str(err.value)
    with pytest.raises(kvs.KVSError) as err:
        kv.set_optimizer(kvs.optimizer.SGD(momentum=1.5))
    assert err.value.code == kvs.ESPEC
    with pytest.raises(TypeError):
        kv.set_optimizer(3)


def test_gradient_compression_on_local_is_refused(kv):
    with pytest.raises(kvs.KVSError) as err:
        kv.set_gradient_compression({'type': '2bit', 'threshold': 0.5})
    assert err.value.code == kvs.ENOTSUP
    with pytest.raises(TypeError):
        kv.set_gradient_compression('2bit')
    with pytest.raises(ValueError, match="'type'"):
        kv.set_gradient_compression({'threshold': 0.5})


def test_save_and_load_optimizer_states(kv, tmp_path):
    kv.init(1, np.zeros(2, np.float32))
    kv.set_optimizer('sgd lr=0.1 momentum=0.9')
    kv.push(1, np.ones(2, np.float32))
    path = tmp_path / 'states'
    kv.save_optimizer_states(path, dump_optimizer=True)
    after_one = kv.pull(1).copy()
    kv.push(1, np.ones(2, np.float32))
    after_two = kv.pull(1).copy()
    with kvs.create() as other:
        other.init(1, after_one)
        other.load_optimizer_states(str(path))
        other.push(1, np.ones(2, np.float32))
        np.testing.assert_allclose(other.pull(1), after_two, rtol=1e-6)
    (tmp_path / 'bad').write_bytes(b'not a state file')
    with pytest.raises(kvs.KVSError) as err:
        kv.load_optimizer_states(tmp_path / 'bad')
    assert err.value.code == kvs.ECORRUPT


def test_without_optimizer_states_cannot_be_saved(kv, tmp_path):
    with pytest.raises(kvs.KVSError) as err:
        kv.save_optimizer_states(tmp_path / 's')
    assert err.value.code == kvs.ENOOPT


def test_barrier_and_version(kv):
    kv.barrier()
    kv._barrier()
    # The package's version is configure.ac's (read from the source tree
    # here, as _version.py is written only by make install and the wheel),
    # and the library's is the same.
    top = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..')
    with open(os.path.join(top, 'configure.ac')) as f:
        want = re.search(r'^AC_INIT\(\[kvs\], \[([0-9.]+)\]', f.read(), re.M).group(1)
    assert kvs.__version__ == want
    assert kvs.version() == 'kvs ' + want


def test_timeline_records_the_block(tmp_path):
    path = tmp_path / 'step.json'
    kv = kvs.create('local')
    with kvs.timeline(path):
        kv.init('fc.weight', np.zeros((4, 8), np.float32))
        for _ in range(3):
            kv.push('fc.weight', np.ones((4, 8), np.float32))
            kv.pull('fc.weight')
    kv.pull('fc.weight')               # after the block: not recorded
    with open(path) as f:
        doc = json.load(f)
    assert doc['otherData']['format'] == 'kvs timeline 1'
    calls = [e for e in doc['traceEvents'] if e['ph'] == 'X']
    assert [e['name'] for e in calls] == ['init'] + ['push', 'pull'] * 3
    assert all(e['args']['key'] == 'fc.weight' and e['args']['bytes'] == 128 for e in calls)
    assert all(e['dur'] >= 0 for e in calls)


def test_timeline_written_when_the_block_raises_and_not_nested(tmp_path):
    path = tmp_path / 't.json'
    kv = kvs.create('local')
    with pytest.raises(KeyError):
        with kvs.timeline(path):
            kv.init(3, np.zeros(2, np.float32))
            with pytest.raises(kvs.KVSError) as e:
                with kvs.timeline(tmp_path / 'inner.json'):
                    pass
            assert e.value.code == kvs.EBADARG and 'on already' in e.value.detail
            raise KeyError('out')
    with open(path) as f:
        assert [e['name'] for e in json.load(f)['traceEvents'] if e['ph'] == 'X'] == ['init']
    assert not (tmp_path / 'inner.json').exists()
