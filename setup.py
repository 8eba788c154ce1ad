"""The kvs wheel: the Python package with libkvs, kvsd, kvsrun, kvsctl and
the transport plug-ins inside it, built by kvs's own autotools build.

    pip install --no-build-isolation .
    python3 -m build --no-isolation        (the sdist, then the wheel from it)

The sdist holds the whole source tree (_source_files: git's files in a
checkout), so that the wheel builds from it as from a checkout.
build_py runs configure in a temporary directory (with a private prefix,
never the source tree: a git checkout without configure is copied there
and autogen.sh run in the copy), `make install-exec install-data` into a
staging directory, and copies the prefix's bin/kvsd, kvsrun, kvsctl,
lib/libkvs.so.0 and lib/kvs/ (plug-ins) into the package as kvs/bin/ and
kvs/lib/ (kvs/_package.py finds them there). The version is configure.ac's
AC_INIT, read here and written into kvs/_version.py; the wheel is tagged
py3-none-<platform> (ctypes, no Python ABI; native code).

KVS_BUILD_JOBS (default: the number of CPUs) sets make's -j;
KVS_CONFIGURE_FLAGS adds to configure's arguments (e.g. --without-ucx).
"""

import fnmatch
import importlib.util
import os
import shlex
import shutil
import subprocess
import tempfile

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist
from wheel.bdist_wheel import bdist_wheel

TOP = os.path.dirname(os.path.abspath(__file__))
PROGRAMS = ('kvsd', 'kvsrun', 'kvsctl')
# The prefix configure gets: the programs' compiled-in directories point
# there, and none exists, so that nothing of another install is taken;
# the package sets the variables that name its own (kvs/_package.py).
PREFIX = '/nonexistent/kvs-wheel'


def _package_module():
    spec = importlib.util.spec_from_file_location(
        'kvs_package_for_setup', os.path.join(TOP, 'python', 'kvs', '_package.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


with open(os.path.join(TOP, 'configure.ac')) as _f:
    VERSION = _package_module().ac_init_version(_f.read())


def _run(cmd, cwd, env=None):
    print('kvs wheel: %s (in %s)' % (' '.join(shlex.quote(c) for c in cmd), cwd), flush=True)
    subprocess.run(cmd, cwd=cwd, env=env, check=True)


# What is not source in a tree without git: build outputs, at any depth.
NOT_SOURCE = ('.git', '_build*', '_install', 'build', 'dist', '*.egg-info', 'autom4te.cache')


def _source_files():
    """The source tree's files, relative to TOP: git's where it is a git
    checkout (tracked, and untracked ones git does not ignore), else every
    file but build outputs (NOT_SOURCE)."""
    if os.path.exists(os.path.join(TOP, '.git')) and shutil.which('git'):
        out = subprocess.run(['git', 'ls-files', '-z', '--cached', '--others', '--exclude-standard'],
                             cwd=TOP, stdout=subprocess.PIPE, check=False)
        if out.returncode == 0:
            # Deleted but not yet committed: not there.
            return sorted(f for f in out.stdout.decode().split('\0')
                          if f and os.path.lexists(os.path.join(TOP, f)))
    files = []
    for root, dirs, names in os.walk(TOP):
        keep = [d for d in dirs if not any(fnmatch.fnmatch(d, p) for p in NOT_SOURCE)]
        # A link to a folder is copied as the link.
        names += [d for d in keep if os.path.islink(os.path.join(root, d))]
        dirs[:] = [d for d in keep if not os.path.islink(os.path.join(root, d))]
        files += [os.path.relpath(os.path.join(root, n), TOP) for n in names
                  if not any(fnmatch.fnmatch(n, p) for p in NOT_SOURCE)]
    return sorted(files)


def _source_copy(dest):
    """Copies the source tree's files (_source_files) to dest."""
    for f in _source_files():
        os.makedirs(os.path.dirname(os.path.join(dest, f)), exist_ok=True)
        shutil.copy2(os.path.join(TOP, f), os.path.join(dest, f), follow_symlinks=False)


def build_native(pkg_dir):
    """Builds kvs in a temporary directory and puts its library, programs
    and plug-ins into pkg_dir (kvs/ of the build)."""
    if os.path.exists(os.path.join(TOP, 'config.status')):
        raise SystemExit('kvs wheel: %s is configured in place (config.status): run '
                         '`make distclean` there first, or build from a clean copy' % TOP)
    jobs = os.environ.get('KVS_BUILD_JOBS') or str(os.cpu_count() or 1)
    env = dict(os.environ)
    env.setdefault('CFLAGS', '-O2')
    with tempfile.TemporaryDirectory(prefix='kvs-wheel-') as tmp:
        src = TOP
        if not os.path.exists(os.path.join(TOP, 'configure')):
            src = os.path.join(tmp, 'src')
            _source_copy(src)
            _run(['sh', './autogen.sh'], src, env)
        build = os.path.join(tmp, 'build')
        stage = os.path.join(tmp, 'stage')
        os.mkdir(build)
        _run([os.path.join(src, 'configure'), '-q', '--prefix=' + PREFIX, '--disable-python']
             + shlex.split(os.environ.get('KVS_CONFIGURE_FLAGS', '')), build, env)
        for target in ('install-exec', 'install-data'):
            _run(['make', '-s', '-j' + jobs, target, 'DESTDIR=' + stage], build, env)
        prefix = stage + PREFIX
        os.makedirs(os.path.join(pkg_dir, 'bin'), exist_ok=True)
        os.makedirs(os.path.join(pkg_dir, 'lib', 'kvs'), exist_ok=True)
        for prog in PROGRAMS:
            shutil.copy2(os.path.join(prefix, 'bin', prog), os.path.join(pkg_dir, 'bin', prog))
        # The real file under the name the dynamic linker and _package.py
        # use (its soname); a wheel keeps no symbolic links.
        shutil.copy2(os.path.realpath(os.path.join(prefix, 'lib', 'libkvs.so.0')),
                     os.path.join(pkg_dir, 'lib', 'libkvs.so.0'))
        plugins = os.path.join(prefix, 'lib', 'kvs')
        for name in sorted(os.listdir(plugins)) if os.path.isdir(plugins) else ():
            if name.endswith('.so'):
                shutil.copy2(os.path.join(plugins, name), os.path.join(pkg_dir, 'lib', 'kvs', name))


class BuildPy(build_py):
    """The Python files, the version, then the native build."""

    def run(self):
        super().run()
        pkg_dir = os.path.join(self.build_lib, 'kvs')
        with open(os.path.join(pkg_dir, '_version.py'), 'w') as f:
            f.write('"""Written by setup.py: the version of kvs."""\nVERSION = %r\n' % VERSION)
        build_native(pkg_dir)


class NativeDistribution(Distribution):
    """Has native code (the package goes to platlib, the wheel is not pure)."""

    def has_ext_modules(self):
        return True


class Sdist(sdist):
    """The whole source tree (_source_files): the wheel is built from it by
    kvs's autotools build, as from a checkout."""

    def make_distribution(self):
        self.filelist.extend(_source_files())
        self.filelist.sort()
        self.filelist.remove_duplicates()
        super().make_distribution()


class BdistWheel(bdist_wheel):
    """Native code without Python's ABI: py3-none-<platform>."""

    def get_tag(self):
        return ('py3', 'none', super().get_tag()[2])


setup(
    version=VERSION,
    distclass=NativeDistribution,
    cmdclass={'build_py': BuildPy, 'sdist': Sdist, 'bdist_wheel': BdistWheel},
    data_files=[('share/man/man1', ['doc/man/kvsrun.1', 'doc/man/kvsctl.1']),
                ('share/man/man7', ['doc/man/kvs.7']),
                ('share/man/man8', ['doc/man/kvsd.8'])],
)
