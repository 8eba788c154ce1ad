# shellcheck shell=sh
# tests/kvsrunlib.sh - what test_kvsrun.sh and test_kvsrun_jobs.sh share:
# a job per case under a fresh name, kvsrun run under a deadline, and the
# check that nothing of a case's job is left behind. Sourced after lib.sh
# with the plan's count: `. kvsrunlib.sh; kvsrun_start N` prints the plan
# (every case skipped when kvsrun or kvsd is not built) and makes the
# test's private runtime directory, removed on exit.
# The workers' shell commands are single-quoted on purpose: they expand
# KVS_RANK and friends in the worker, not here.
# shellcheck disable=SC2016
top_builddir=${top_builddir:-.}
kvsrun=$top_builddir/daemon/kvsrun/kvsrun
kvsd=$top_builddir/daemon/kvsd/kvsd
worker=${DIST_WORKER:-$top_builddir/tests/dist_worker}

kvsrun_start() {
    echo "1..$1"
    if [ ! -x "$kvsrun" ] || [ ! -x "$kvsd" ]; then
        skip_all "$1" "$kvsrun or $kvsd not built"
    fi
    private_runtime
    KVSD=$kvsd                         # the kvsd under test, not one from PATH
    export KVSD
    unset KVS_JOB KVS_RANK KVS_NUM_WORKERS KVS_TIMEOUT
    dir=$rt/kvs
    out=$rt/out
    bg=""                              # background pids to end on the way out
    trap 'for p in $bg; do kill -KILL "$p" 2>/dev/null; done; rm -rf "$rt"' EXIT
    n=0
    bad=""
    case_no=0
}
# A fresh job name per case; zero-padded so that no name is a prefix of
# another (pgrep -f matches substrings).
next_job() {
    case_no=$((case_no + 1))
    j=$(printf 'kvsrun-test-%d-case%02d' $$ "$case_no")
    bad=""
    : > "$out"
}

# What of job $1 is still there: processes naming it, processes carrying
# it in their environment (workers and their children), its files.
leftovers() {
    for p in $(pgrep -f -- "$1"); do
        echo "process $p ($(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null))"
    done
    grep -lzxF "KVS_JOB=$1" /proc/[0-9]*/environ 2>/dev/null | while read -r f; do
        echo "process ${f#/proc/} with KVS_JOB=$1"
    done
    for f in "$dir/$1.sock" "$dir/$1.lock" "$dir/$1.run"; do
        if [ -e "$f" ]; then echo "file $f"; fi
    done
}

job_procs() { grep -lzxF "KVS_JOB=$1" /proc/[0-9]*/environ 2>/dev/null | wc -l; }

at_least_procs() { [ "$(job_procs "$1")" -ge "$2" ]; }

fail() { bad="$bad${bad:+; }$*"; }

# kvsr SECONDS ARGS...: kvsrun -j $j ARGS under timeout; sets rc and took (ms).
kvsr() {
    kr_limit=$1
    shift
    kr_start=$(now_ms)
    timeout -k 5 $((kr_limit * slow)) "$kvsrun" -j "$j" "$@" >> "$out" 2>&1
    rc=$?
    took=$(($(now_ms) - kr_start))
}

# report DESC: one TAP line for the case, with nothing of the job left
# behind as part of every case.
report() {
    left=$(leftovers "$j")
    if [ -n "$left" ]; then fail "left behind: $(echo "$left" | tr '\n' ' ')"; fi
    n=$((n + 1))
    if [ -z "$bad" ]; then
        echo "ok $n - $1"
    else
        echo "not ok $n - $1"
        echo "# $bad"
        sed 's/^/#   /' "$out"
    fi
}

skip() { n=$((n + 1)); echo "ok $n # SKIP $1"; }

expect_rc() { if [ "$rc" -ne "$1" ]; then fail "exit status $rc, not $1"; fi; }
# expect_within MS: the case took at most MS ms, times $slow (a sanitizer
# build is slower at all it does; the plain build keeps the bound as it is).
expect_within() {
    if [ "$took" -gt $(($1 * slow)) ]; then fail "took $took ms, more than $(($1 * slow))"; fi
}
