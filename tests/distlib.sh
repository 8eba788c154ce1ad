# shellcheck shell=sh
# tests/distlib.sh - what the test_dist*.sh files share: a job of real
# processes on this host (kvsd and 2-4 workers: tests/dist_worker or
# $prog), its checks, and the dist semantics as one list of jobs. Sourced
# after lib.sh; it makes the test's private runtime and work directories
# (removed on exit) and defines functions; the test then runs its jobs and
# ends with dist_done, which prints the plan.
# Each job is bounded on its own: its workers by `timeout`, kvsd by a wait
# after them, all scaled by $slow; the test file's deadline (tests/local.mk)
# is only the last resort.
bld=${top_builddir:-.}
# KVS_TEST_KVSD: another build of kvsd (scripts/test's TSan stage).
kvsd=${KVS_TEST_KVSD:-$bld/daemon/kvsd/kvsd}
worker="$bld/tests/dist_worker"
private_runtime
work=$(mktemp -d)
trap 'pkill -f "kvsd --job kt-$$-" 2>/dev/null; rm -rf "$rt" "$work"' EXIT
n_test=0

# start_kvsd JOB N [KVSD OPTIONS]: starts kvsd (under the command
# $kvsd_env, when set), waits for its socket. Job names are this run's
# own, so a socket already there is a stale one of an earlier run (its pid
# reused) and goes first: the wait must see the new kvsd's.
start_kvsd() {
    j=$1 nw=$2
    shift 2
    rm -f "$XDG_RUNTIME_DIR/kvs/$j.sock"
    ${kvsd_env:-} "$kvsd" --job "$j" -n "$nw" -q "$@" &
    kvsd_pid=$!
    wait_for 50 test -S "$XDG_RUNTIME_DIR/kvs/$j.sock"
}

# wait_kvsd: 0 when kvsd ($kvsd_pid) exits 0 within 30 s (times $slow) of
# its workers; one that does not is killed, and says so.
wait_kvsd() {
    if ! wait_for 300 gone "$kvsd_pid"; then
        echo "# kvsd still runs $((30 * slow)) s after its workers: killed"
        kill -KILL "$kvsd_pid" 2>/dev/null
    fi
    wait "$kvsd_pid" || { echo "# kvsd exited $?"; return 1; }
}

# job N SCENARIO [EXPECTED_LAST_STATUS [KVSD OPTIONS]]: runs N workers;
# ranks below N-1 must exit 0, the last one with EXPECTED_LAST_STATUS
# (default 0); kvsd must exit 0 and leave no socket or lock behind.
job() {
    n=$1 sc=$2 last=${3:-0}
    shift 2
    [ $# -gt 0 ] && shift
    name="kt-$$-$sc-$n${type:+-$type}"
    dir="$work/$name"
    mkdir -p "$dir"
    start_kvsd "$name" "$n" "$@"
    pids=""
    r=0
    while [ $r -lt "$n" ]; do
        KVS_TEST_DIR=$dir KVS_JOB=$name KVS_RANK=$r KVS_NUM_WORKERS=$n KVS_TIMEOUT=$((30 * slow)) \
            timeout $((60 * slow)) "${prog:-$worker}" "$sc" ${type:+"$type"} &
        pids="$pids $!"
        r=$((r + 1))
    done
    st=0
    r=0
    for p in $pids; do
        wait "$p"
        s=$?
        want=0
        [ $r -eq $((n - 1)) ] && want=$last
        [ "$s" -eq "$want" ] || { echo "# $sc rank $r exited $s, expected $want"; st=1; }
        r=$((r + 1))
    done
    wait_kvsd || st=1
    if ls "$XDG_RUNTIME_DIR/kvs/$name".* >/dev/null 2>&1; then
        echo "# kvsd left files behind"; st=1
    fi
    tap $st "${prog:+${prog##*/} }$sc with $n workers${type:+ ($type)}${kvsd_env:+, kvsd under $kvsd_env}${KVS_COMBINE:+, KVS_COMBINE=$KVS_COMBINE}"
}

# as_nobody PROG (as root): nobody may not reach the build tree, so kvsd,
# kvsctl, the test program tests/PROG and the library are copied where it
# can; kvsd, KVS_TEST_KVSCTL and prog then name those copies (prog runs
# PROG as nobody), XDG_RUNTIME_DIR a fresh directory of nobody's, and
# $nobody the command that runs a command as nobody (for kvsd_env).
# as_self undoes it all.
as_nobody() {
    nobody="setpriv --reuid=nobody --regid=nogroup --clear-groups"
    bld_abs=$(cd "$bld" && pwd)
    nb=$(mktemp -d)
    chmod 755 "$nb"
    real_worker=$bld_abs/tests/.libs/$1
    [ -f "$real_worker" ] || real_worker=$bld_abs/tests/$1
    cp "$bld_abs/daemon/kvsd/kvsd" "$bld_abs/daemon/kvsctl/kvsctl" "$real_worker" "$nb/"
    cp -P "$bld_abs"/src/.libs/libkvs.so* "$nb/" 2>/dev/null
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s %s/%s "$@"\n' "$nb" "$nobody" "$nb" "$1" \
        > "$nb/as_nobody"
    chmod 755 "$nb"/*
    saved_rt=$XDG_RUNTIME_DIR saved_kvsd=$kvsd saved_ctl=${KVS_TEST_KVSCTL-} saved_prog=${prog-}
    XDG_RUNTIME_DIR=$(mktemp -d)
    chown nobody "$XDG_RUNTIME_DIR"
    KVS_TEST_KVSCTL=$nb/kvsctl kvsd=$nb/kvsd prog=$nb/as_nobody
}

as_self() {
    KVS_TEST_KVSCTL=$saved_ctl kvsd=$saved_kvsd prog=$saved_prog
    rm -rf "$XDG_RUNTIME_DIR" "$nb"
    XDG_RUNTIME_DIR=$saved_rt
}

# The semantics, run twice (test_dist.sh with every round through kvsd,
# KVS_COMBINE=0; test_dist_combined.sh as a job runs by default, the small
# keys' rounds combined by the workers: KVS_TEST_COMBINED tells the
# workers such keys take no staging, and kvsctl stats counts their rounds
# as combined).
semantics() {
    for n in 2 3 4; do job $n sums; done
    for n in 2 3; do job $n big; done
    job 3 init
    for n in 2 4; do job $n optimizer; done
    job 3 barrier
    for n in 2 3 4; do job $n uneven; done
    for n in 2 4; do job $n async; done
    job 2 errors
    for n in 2 3; do job $n buffers; done
    for n in 2 3; do job $n long_list; done
    job 3 states
    for n in 2 3 4; do job $n peer_dies 137; done
    job 3 timeout_says
    job 2 spill
    for type in dist_sync dist_async; do for n in 2 3; do job $n compress; done; done
    for type in dist_sync dist_async; do job 2 split; done
    type=
}

# dist_done: the plan, after the last case.
dist_done() {
    echo "1..$n_test"
    exit 0
}
