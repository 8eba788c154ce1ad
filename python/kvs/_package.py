"""The package's version, and what it carries of its own when a wheel
installed it.

A wheel (setup.py) holds libkvs and the programs inside the package, laid
out as an install prefix: kvs/lib/libkvs.so.0, kvs/lib/kvs/ (the transport
plug-ins, the CUDA kernel module where built), kvs/bin/kvsd, kvsrun and
kvsctl. The package then loads its own library (_lib.py), and the kvsd
that the library or kvsrun starts, with its plug-ins, is the package's
own. `make install` puts none of these here: its programs are on the
PATH and the package finds its library through _paths.py.

This module imports nothing of kvs (setup.py reads the version with it
before anything is built), and the console scripts kvsd, kvsrun and
kvsctl of the wheel are its functions of those names.
"""

import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BIN_DIR = os.path.join(HERE, 'bin')
LIB_DIR = os.path.join(HERE, 'lib')
PKGLIB_DIR = os.path.join(LIB_DIR, 'kvs')
LIBRARY = os.path.join(LIB_DIR, 'libkvs.so.0')


def ac_init_version(text):
    """The version in AC_INIT([kvs], [VERSION], ...) of configure.ac's text."""
    m = re.search(r'^AC_INIT\(\[kvs\],\s*\[([0-9]+\.[0-9]+\.[0-9]+)\]', text, re.M)
    if not m:
        raise ValueError('configure.ac: no AC_INIT([kvs], [MAJOR.MINOR.PATCH], ...)')
    return m.group(1)


def version():
    """The package's version: the one of configure.ac, as `make install` or
    the wheel wrote it into _version.py; in a source tree, read from its
    configure.ac. Never the library's (kvs.version() says that one)."""
    try:
        from ._version import VERSION
        return VERSION
    except ImportError:
        pass
    try:
        with open(os.path.join(HERE, '..', '..', 'configure.ac')) as f:
            return ac_init_version(f.read())
    except (OSError, ValueError):
        return '0+unknown'


def set_environment():
    """Makes the package's own kvsd (KVS_KVSD), transport plug-ins
    (KVS_TRANSPORT_DIR) and CUDA kernel module (KVS_CUDA_KERNELS) the
    defaults of this process and the processes it starts, where the package
    carries them; a value the user set is kept."""
    kvsd = os.path.join(BIN_DIR, 'kvsd')
    if os.access(kvsd, os.X_OK):
        os.environ.setdefault('KVS_KVSD', kvsd)
    if os.path.isdir(PKGLIB_DIR):
        os.environ.setdefault('KVS_TRANSPORT_DIR', PKGLIB_DIR)
        kernels = os.path.join(PKGLIB_DIR, 'libkvs-cuda.so')
        if os.path.exists(kernels):
            os.environ.setdefault('KVS_CUDA_KERNELS', kernels)


def _run(name):
    path = os.path.join(BIN_DIR, name)
    if not os.access(path, os.X_OK):
        sys.exit('%s: this kvs package (%s) holds no %s (only a wheel carries the programs)'
                 % (name, HERE, path))
    set_environment()
    sys.stdout.flush()
    os.execv(path, [sys.argv[0]] + sys.argv[1:])


def kvsd():
    """The console script kvsd: execs the package's kvsd with this argv."""
    _run('kvsd')


def kvsrun():
    """The console script kvsrun: execs the package's kvsrun with this argv."""
    _run('kvsrun')


def kvsctl():
    """The console script kvsctl: execs the package's kvsctl with this argv."""
    _run('kvsctl')
