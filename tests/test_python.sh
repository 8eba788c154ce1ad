#!/bin/sh
# Description: the Python package's tests (tests/python, pytest), run on the
# build tree's library and kvsrun with the package uninstalled: the API,
# MXNet's kvstore tests, the dist jobs and arrays that outlive the store
# here; test_python_rows.sh, test_python_torch.sh and
# test_python_distopt.sh source this file for theirs, so that make runs
# them side by side, each under its own deadline.
# TAP output: one test per pytest test, or all skipped with the reason.
set -u
. "${top_srcdir:-.}/tests/lib.sh"
src=$(cd "${top_srcdir:-.}" && pwd)
bld=$(cd "${top_builddir:-.}" && pwd)

rows_files="test_rows.py"
torch_files="test_torch.py test_bench_ctr.py test_ddp.py"
distopt_files="test_distopt.py"
main_files="test_api.py test_kvstore.py test_dist.py test_commit.py test_recover.py test_memory.py"
case "${0##*/}" in
test_python_rows.sh) files=$rows_files ;;
test_python_torch.sh) files=$torch_files ;;
test_python_distopt.sh) files=$distopt_files ;;
*) files=$main_files ;;
esac
skip() { echo "1..0 # SKIP $1"; exit 0; }
[ -n "${PYTHON:-}" ] || skip "configured without the Python package"
[ -z "${KVS_SAN_CFLAGS:-}" ] ||
    skip "a sanitizer build: python cannot load an instrumented libkvs (the plain build runs these)"
"$PYTHON" -c 'import pytest' 2>/dev/null || skip "pytest is missing (Debian: python3-pytest)"

private_runtime
trap 'rm -rf "$rt"' EXIT
KVS_LIBRARY=$bld/src/.libs/libkvs.so
PYTHONPATH=$src/python
KVS_TEST_KVSRUN=$bld/daemon/kvsrun/kvsrun
KVS_TEST_STANDIN=$bld/tests/standin/.libs/libkvs_standin.so
KVS_TEST_KERNELS=$bld/tests/standin/.libs/libkvs-cuda.so
PYTHONDONTWRITEBYTECODE=1
export KVS_LIBRARY PYTHONPATH KVS_TEST_KVSRUN KVS_TEST_STANDIN KVS_TEST_KERNELS PYTHONDONTWRITEBYTECODE
cd "$src/tests/python" || exit 1
out=$(mktemp)
# shellcheck disable=SC2086
"$PYTHON" -m pytest -p no:cacheprovider -v -rs $files >"$out" 2>&1
rc=$?
# Every test file is run by one of the three.
unclaimed=
for f in test_*.py; do
    case " $rows_files $torch_files $distopt_files $main_files " in
    *" $f "*) ;;
    *) unclaimed="$unclaimed $f" ;;
    esac
done
# pytest -v lines "file::test PASSED|FAILED|SKIPPED|ERROR ..." become TAP;
# a failed run (even one that collected nothing) adds a failing line.
[ "$rc" -eq 0 ] || sed 's/^/# /' "$out"
awk -v rc="$rc" -v unclaimed="$unclaimed" '
/::/ && / (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)/ {
    n++
    if ($0 ~ / PASSED/ || $0 ~ / XFAIL/) print "ok " n " - " $1
    else if ($0 ~ / SKIPPED/) print "ok " n " - " $1 " # SKIP"
    else print "not ok " n " - " $1
}
END {
    if (rc != 0) print "not ok " ++n " - pytest exited with status " rc
    if (unclaimed != "") print "not ok " ++n " - run by no test_python*.sh:" unclaimed
    print "1.." n
}' "$out"
rm -f "$out"
