"""The KVStore chapter (Dive into Deep Learning, "Distributed Key-Value
Store"), its code as written, with numpy arrays in place of mxnet.np and
plain CPU arrays in place of the chapter's devices.

    python3 examples/kvstore_chapter.py

prints 2, 8, 4, 4, "update on key: 3", 6, 6, 3 and 11 (as arrays), with
the updater's lines for keys 5, 7 and 9 on the way.
"""
import numpy as np

import kvs

# Initialization
kv = kvs.create('local')  # Create a local kv store.
shape = (2, 3)
kv.init(3, np.ones(shape) * 2)
a = np.zeros(shape)
kv.pull(3, out=a)
print(a)

# Push, Aggregate, and Update
kv.push(3, np.ones(shape) * 8)
kv.pull(3, out=a)  # Pull out the value
print(a)

devices = range(4)  # the chapter's four devices: here, four arrays in memory
b = [np.ones(shape) for device in devices]
kv.push(3, b)
kv.pull(3, out=a)
print(a)


def update(key, input, stored):
    print(f'update on key: {key}')
    stored += input * 2


kv._set_updater(update)
kv.pull(3, out=a)
print(a)

kv.push(3, np.ones(shape))
kv.pull(3, out=a)
print(a)

# Pull
b = [np.ones(shape) for device in devices]
kv.pull(3, out=b)
print(b[1])

# Handle a List of Key-Value Pairs: a single device
keys = [5, 7, 9]
kv.init(keys, [np.ones(shape)] * len(keys))
kv.push(keys, [np.ones(shape)] * len(keys))
b = [np.zeros(shape)] * len(keys)
kv.pull(keys, out=b)
print(b[1])

# ... and several devices
b = [[np.ones(shape) for device in devices]] * len(keys)
kv.push(keys, b)
kv.pull(keys, out=b)
print(b[1][1])
