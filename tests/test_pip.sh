#!/bin/sh
# Description: the wheel, built from the dist tarball by `python3 -m build --wheel --no-isolation` without writing into the unpacked tree, is tagged py3-none-<platform> and holds libkvs, kvsd, kvsrun and kvsctl; installed into a venv (--system-site-packages, --no-index) and used from another directory with a clean environment (no LD_LIBRARY_PATH, no PYTHONPATH) it loads its own library, rounds a local store's values, runs a 2-worker dist_sync job under the venv's kvsrun, says configure's version everywhere, and `pip uninstall` leaves no file; `pip install --no-build-isolation .` in a copy of the source tree gives the same; the sdist of that copy holds git's files of the tree, and pip installs it with the same result.
# Usage: tests/test_pip.sh TARBALL SRCDIR (scripts/test runs it after make
# distcheck, with the tarball distcheck made and the git tree). TAP output;
# skipped when python3's venv, build, setuptools or wheel are missing
# (scripts/setup-deps installs them). The builds inside run make -j2 and
# leave out the CUDA kernel module (KVS_CONFIGURE_FLAGS=--without-cuda),
# for time; each step runs under its own deadline.
set -u
tarball=${1:?usage: tests/test_pip.sh TARBALL SRCDIR}
srcdir=${2:?usage: tests/test_pip.sh TARBALL SRCDIR}
srcdir=$(cd "$srcdir" && pwd) || exit 1
case $tarball in /*) ;; *) tarball=$(pwd)/$tarball ;; esac
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
py=/usr/bin/python3

echo "1..9"
if ! "$py" -c 'import venv, ensurepip, build, setuptools, wheel' 2>/dev/null; then
    skip_all 9 "python3's venv, build, setuptools or wheel is missing (Debian: python3-venv python3-build python3-setuptools python3-wheel; scripts/setup-deps)"
fi
version=$(sed -n 's/^AC_INIT(\[kvs\], \[\([0-9.]*\)\].*/\1/p' "$srcdir/configure.ac")

private_runtime
tmp=$(mktemp -d) || exit 1
dot_pid=""
# kill_tree PID: PID and every process under it, children first.
kill_tree() {
    for kt_child in $(pgrep -P "$1" 2>/dev/null); do
        kill_tree "$kt_child"
    done
    kill -TERM "$1" 2>/dev/null
}
trap '[ -z "$dot_pid" ] || kill_tree "$dot_pid"; rm -rf "$tmp" "$rt"' EXIT
n=0
tap() {  # tap STATUS NAME
    n=$((n + 1))
    if [ "$1" -eq 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fi
}
# show FILE: a failed step's output, as TAP diagnostics.
show() { sed 's/^/#   /' "$1"; }
# step NAME: prints how long the step since the last took.
t_last=$(date +%s)
step() {
    t_now=$(date +%s)
    echo "# $1: $((t_now - t_last)) s"
    t_last=$t_now
}
# clean CMD...: CMD from $tmp/elsewhere with nothing of the caller's
# environment (no LD_LIBRARY_PATH, PYTHONPATH, KVS_*).
mkdir "$tmp/elsewhere" "$tmp/home"
clean() {
    (cd "$tmp/elsewhere" && env -i PATH=/usr/bin:/bin HOME="$tmp/home" LANG=C.UTF-8 \
        XDG_RUNTIME_DIR="$rt" "$@")
}
build_env() {
    env -u LD_LIBRARY_PATH -u PYTHONPATH -u KVS_LIBRARY KVS_BUILD_JOBS=2 \
        KVS_CONFIGURE_FLAGS=--without-cuda "$@"
}

# The checks of an installed package: version, own library, a local round.
cat >"$tmp/elsewhere/check.py" <<'EOF'
import os, sys
import numpy as np
import kvs

venv, version = sys.argv[1], sys.argv[2]
assert kvs.__version__ == version, (kvs.__version__, version)
assert kvs.version() == 'kvs ' + kvs.__version__, (kvs.version(), kvs.__version__)
pkg = os.path.dirname(kvs.__file__)
assert pkg.startswith(venv + '/'), pkg
assert kvs._lib.lib._name == os.path.join(pkg, 'lib', 'libkvs.so.0'), kvs._lib.lib._name
assert os.environ['KVS_KVSD'] == os.path.join(pkg, 'bin', 'kvsd'), os.environ['KVS_KVSD']
assert 'LD_LIBRARY_PATH' not in os.environ and 'PYTHONPATH' not in os.environ
kv = kvs.create('local')
kv.init(3, np.arange(6, dtype=np.float32).reshape(2, 3))
assert kv.pull(3).tolist() == [[0, 1, 2], [3, 4, 5]]
kv.push(3, [np.full((2, 3), i, np.float32) for i in range(1, 5)])
assert kv.pull(3).tolist() == [[10] * 3] * 2
kv.close()
print('local ok', kvs.__version__)
EOF
# A 2-worker dist_sync job's worker: sums of known pushes.
cat >"$tmp/elsewhere/worker.py" <<'EOF'
import numpy as np
import kvs

kv = kvs.create('dist_sync')
r, n = kv.rank, kv.num_workers
assert n == 2
kv.init('w', np.full(5, 7, np.float64))
assert kv.pull('w').tolist() == [7] * 5
for i in range(3):
    kv.push('w', np.full(5, (r + 1) * (i + 1), np.float64))
    assert kv.pull('w').tolist() == [3 * (i + 1)] * 5
print('rank %d: dist_sync ok' % r)
kv.close()
EOF

# use VENV NAME: the checks of kvs installed in VENV (test NAME).
use() {
    v=$1
    st=0
    clean timeout $((60 * slow)) "$v/bin/python" check.py "$v" "$version" >"$tmp/out" 2>&1 || st=1
    grep -q "^local ok $version\$" "$tmp/out" || st=1
    for prog in kvsd kvsrun kvsctl; do
        [ "$(clean timeout $((30 * slow)) "$v/bin/$prog" --version 2>&1)" = "$prog (kvs) $version" ] ||
            { st=1; echo "$prog --version: wrong" >>"$tmp/out"; }
    done
    clean timeout $((120 * slow)) "$v/bin/kvsrun" -n 2 "$v/bin/python" worker.py >>"$tmp/out" 2>&1 || st=1
    [ "$(grep -c ': dist_sync ok$' "$tmp/out")" -eq 2 ] || st=1
    [ $st -eq 0 ] || show "$tmp/out"
    tap $st "$2: import kvs from elsewhere (its own libkvs, version $version, a local round), the console scripts' --version, kvsrun -n 2 of a dist_sync job"
}

# 5-7: pip install . in a copy of the source tree (git's files: no
# configure there, so the build runs autogen.sh in a copy of its own),
# built beside the wheel (the builds take most of the time).
pip_dot() {
    mkdir "$tmp/src"
    (cd "$srcdir" && git ls-files -z --cached --others --exclude-standard |
        xargs -0 cp --parents -t "$tmp/src") || return 1
    (cd "$tmp/src" && find . | sort) >"$tmp/src.before"
    timeout $((120 * slow)) "$py" -m venv --system-site-packages "$tmp/v2" || return 1
    (cd "$tmp/src" && build_env timeout $((420 * slow)) "$tmp/v2/bin/pip" install -q \
        --no-build-isolation .) || { pd_rc=$?; echo "pip install . failed (status $pd_rc; 124: past its $((420 * slow)) s)"; return 1; }
    (cd "$tmp/src" && find . | setuptools_own | sort) >"$tmp/src.after"
}
# setuptools_own: the lines of stdin but setuptools' build/ and egg-info.
setuptools_own() {
    grep -v -e '^\./build\(/\|$\)' -e '^\./python/kvs\.egg-info\(/\|$\)'
}
pip_dot >"$tmp/dot.log" 2>&1 &
dot_pid=$!

# 1: the wheel from the unpacked tarball, which it leaves as it was but
# for setuptools' build/ and egg-info.
st=0
mkdir "$tmp/t" && tar -xzf "$tarball" -C "$tmp/t" || st=1
tree=$(echo "$tmp"/t/kvs-*)
(cd "$tree" && find . | sort) >"$tmp/before"
(cd "$tree" && build_env timeout $((420 * slow)) "$py" -m build --wheel --no-isolation -o "$tmp/dist") \
    >"$tmp/build.log" 2>&1 ||
    { st=$?; tail -40 "$tmp/build.log" >"$tmp/out"; show "$tmp/out"; echo "#   status $st (124: past its $((420 * slow)) s)"; st=1; }
(cd "$tree" && find . | setuptools_own | sort) >"$tmp/after"
if ! diff "$tmp/before" "$tmp/after" >"$tmp/out"; then st=1; show "$tmp/out"; fi
wheel=$(echo "$tmp"/dist/kvs-"$version"-py3-none-linux_*.whl)
[ -f "$wheel" ] || { st=1; ls "$tmp/dist" >"$tmp/out" 2>&1; show "$tmp/out"; }
step "the wheel's build"
tap $st "python3 -m build --wheel --no-isolation in the unpacked tarball: kvs-$version-py3-none-linux_*.whl, the tree unchanged"

# 2: what the wheel holds.
st=0
"$py" - "$wheel" >"$tmp/out" 2>&1 <<'EOF' || st=1
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
want = {'kvs/__init__.py', 'kvs/_version.py', 'kvs/_package.py', 'kvs/lib/libkvs.so.0',
        'kvs/bin/kvsd', 'kvs/bin/kvsrun', 'kvs/bin/kvsctl'}
missing = want - names
assert not missing, missing
assert not any('.data/purelib/' in n for n in names), 'the package is not in platlib'
entry = [n for n in names if n.endswith('.dist-info/entry_points.txt')]
text = zipfile.ZipFile(sys.argv[1]).read(entry[0]).decode()
for prog in ('kvsd', 'kvsrun', 'kvsctl'):
    assert '%s = kvs._package:%s' % (prog, prog) in text, text
EOF
[ $st -eq 0 ] || show "$tmp/out"
tap $st "the wheel holds kvs/lib/libkvs.so.0, kvs/bin/kvsd, kvsrun, kvsctl, _version.py and the three console scripts"

# 3: installed into a venv, used from elsewhere.
st=0
timeout $((120 * slow)) "$py" -m venv --system-site-packages "$tmp/v" >"$tmp/out" 2>&1 || st=1
clean timeout $((60 * slow)) "$tmp/v/bin/pip" --version >/dev/null 2>&1
(cd "$tmp/v" && find . ! -type d | sort) >"$tmp/venv.before"
build_env timeout $((120 * slow)) "$tmp/v/bin/pip" install -q --no-build-isolation --no-index "$wheel" \
    >>"$tmp/out" 2>&1 || { st=1; show "$tmp/out"; }
[ $st -eq 0 ] || tap 1 "the wheel installs into a venv"
[ $st -ne 0 ] || use "$tmp/v" "the wheel in a venv"
step "the wheel installed and used"

# 4: pip uninstall leaves no file of it.
st=0
[ -d "$tmp/v/bin" ] && [ -e "$tmp/v/bin/kvsrun" ] || st=1
timeout $((120 * slow)) "$tmp/v/bin/pip" uninstall -q -y kvs >"$tmp/out" 2>&1 || st=1
(cd "$tmp/v" && find . ! -type d | sort) >"$tmp/venv.after"
diff "$tmp/venv.before" "$tmp/venv.after" >>"$tmp/out" || st=1
[ $st -eq 0 ] || show "$tmp/out"
tap $st "pip uninstall kvs leaves no file in the venv that was not there before the install"

st=0
wait "$dot_pid" || st=1
dot_pid=""
[ $st -eq 0 ] || { tail -40 "$tmp/dot.log" >"$tmp/out.tail"; show "$tmp/out.tail"; }
step "pip install . from the source tree (beside the wheel's build)"
tap $st "pip install --no-build-isolation . in a copy of the source tree (git's files)"
if [ $st -eq 0 ]; then
    use "$tmp/v2" "pip install ."
else
    tap 1 "pip install .: not installed"
fi
st=0
diff "$tmp/src.before" "$tmp/src.after" >"$tmp/out" 2>&1 || { st=1; show "$tmp/out"; }
tap $st "pip install .: the source tree as it was, but for setuptools' build/ and egg-info"
step "pip install . used"

# 8, 9: the sdist of that copy (python3 -m build --sdist): the whole
# source tree, as git lists it, and setuptools' own metadata (PKG-INFO,
# setup.cfg and the egg-info folder, whose other files vary with
# setuptools' release); pip installs it (a build from it, as from a
# checkout) into a third venv.
st=0
(cd "$tmp/src" && build_env timeout $((120 * slow)) "$py" -m build --sdist --no-isolation \
    -o "$tmp/sdist") >"$tmp/out" 2>&1 || st=1
sdist=$tmp/sdist/kvs-$version.tar.gz
if [ $st -eq 0 ] && [ -f "$sdist" ]; then
    (cd "$srcdir" && git ls-files --cached --others --exclude-standard
     printf '%s\n' PKG-INFO setup.cfg python/kvs.egg-info/PKG-INFO) | sort >"$tmp/sd.want"
    tar -tzf "$sdist" | sed -n "s|^kvs-$version/\(.*[^/]\)\$|\1|p" \
        | grep -v -x 'python/kvs\.egg-info/[^/]*\.txt' | sort >"$tmp/sd.got"
    diff "$tmp/sd.want" "$tmp/sd.got" >>"$tmp/out" || st=1
else
    st=1
fi
[ $st -eq 0 ] || show "$tmp/out"
tap $st "python3 -m build --sdist: kvs-$version.tar.gz holds git's files of the tree and setuptools' metadata, nothing else"
st=0
if [ -f "$sdist" ]; then
    timeout $((120 * slow)) "$py" -m venv --system-site-packages "$tmp/v3" >"$tmp/out" 2>&1 || st=1
    build_env timeout $((420 * slow)) "$tmp/v3/bin/pip" install -q --no-build-isolation --no-index \
        "$sdist" >>"$tmp/out" 2>&1 || st=1
else
    st=1
fi
if [ $st -eq 0 ]; then
    use "$tmp/v3" "pip install of the sdist"
else
    show "$tmp/out"
    tap 1 "pip install of the sdist: not installed"
fi
step "the sdist built, installed and used"
exit 0
