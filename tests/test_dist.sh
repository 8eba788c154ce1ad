#!/bin/sh
# Description: dist_sync and dist_async jobs of real processes (kvsd and
# 2-4 workers, tests/dist_worker and tests/dist_remote) get every semantic
# right, with host and device arrays, and survive a worker or kvsd dying;
# nothing of a job is left behind.
set -u
bld=${top_builddir:-.}
kvsd="$bld/daemon/kvsd/kvsd"
worker="$bld/tests/dist_worker"
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
private_runtime
work=$(mktemp -d)
trap 'pkill -f "kvsd --job kt-$$-" 2>/dev/null; rm -rf "$rt" "$work"' EXIT
n_test=0

# start_kvsd JOB N [KVSD OPTIONS]: starts kvsd (under the command
# $kvsd_env, when set), waits for its socket
start_kvsd() {
    j=$1 nw=$2
    shift 2
    ${kvsd_env:-} "$kvsd" --job "$j" -n "$nw" -q "$@" &
    kvsd_pid=$!
    wait_for 50 test -S "$XDG_RUNTIME_DIR/kvs/$j.sock"
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
        KVS_TEST_DIR=$dir KVS_JOB=$name KVS_RANK=$r KVS_NUM_WORKERS=$n KVS_TIMEOUT=30 \
            timeout 60 "${prog:-$worker}" "$sc" ${type:+"$type"} &
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
    wait "$kvsd_pid" || { echo "# kvsd exited $?"; st=1; }
    if ls "$XDG_RUNTIME_DIR/kvs/$name".* >/dev/null 2>&1; then
        echo "# kvsd left files behind"; st=1
    fi
    tap $st "${prog:+${prog##*/} }$sc with $n workers${type:+ ($type)}${kvsd_env:+, kvsd under $kvsd_env}${KVS_COMBINE:+, KVS_COMBINE=$KVS_COMBINE}"
}


# The semantics, twice: with every round through kvsd (KVS_COMBINE=0), and
# as a job runs by default, the small keys' rounds combined by the workers
# (KVS_TEST_COMBINED tells the workers: such keys take no staging, and
# kvsctl stats counts their rounds as combined).
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
KVS_COMBINE=0
export KVS_COMBINE
semantics

# Pushpulls that kvsd reads straight out of the workers' memory
# (KVS_REMOTE), and the ways back to staging: KVS_REMOTE=0, and workers
# kvsd may not read (not dumpable, and kvsd without CAP_SYS_PTRACE: as
# root, both run as nobody). The values are the same; kvsctl stats counts.
# An array unmapped while lent fails the job, naming its rank.
KVS_TEST_KVSCTL=$(cd "$bld" && pwd)/daemon/kvsctl
export KVS_TEST_KVSCTL KVS_TEST_READERS
prog=$bld/tests/dist_remote
for n in 2 3; do KVS_TEST_READERS=$n; job $n remote; done
job 2 remote_gone
KVS_REMOTE=0 KVS_TEST_READERS=0
export KVS_REMOTE
job 2 remote
unset KVS_REMOTE
KVS_TEST_NODUMP=1
export KVS_TEST_NODUMP
if [ "$(id -u)" -eq 0 ]; then
    # nobody may not reach the build tree: the programs and the library
    # are copied where it can.
    nobody="setpriv --reuid=nobody --regid=nogroup --clear-groups"
    bld_abs=$(cd "$bld" && pwd)
    nb=$(mktemp -d)
    chmod 755 "$nb"
    real_worker=$bld_abs/tests/.libs/dist_remote
    [ -f "$real_worker" ] || real_worker=$bld_abs/tests/dist_remote
    cp "$bld_abs/daemon/kvsd/kvsd" "$bld_abs/daemon/kvsctl" "$real_worker" "$nb/"
    cp -P "$bld_abs"/src/.libs/libkvs.so* "$nb/" 2>/dev/null
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s %s/dist_remote "$@"\n' "$nb" "$nobody" "$nb" \
        > "$nb/as_nobody"
    chmod 755 "$nb"/*
    saved_rt=$XDG_RUNTIME_DIR saved_kvsd=$kvsd
    XDG_RUNTIME_DIR=$(mktemp -d)
    chown nobody "$XDG_RUNTIME_DIR"
    KVS_TEST_KVSCTL=$nb/kvsctl kvsd=$nb/kvsd prog=$nb/as_nobody kvsd_env=$nobody
    job 2 remote
    prog=$bld/tests/dist_remote kvsd_env= kvsd=$saved_kvsd
    rm -rf "$XDG_RUNTIME_DIR" "$nb"
    XDG_RUNTIME_DIR=$saved_rt
else
    job 2 remote
fi
unset KVS_TEST_NODUMP KVS_TEST_READERS KVS_TEST_KVSCTL
prog=

# The default: the workers combine the small keys' rounds. kvsctl stats
# counts them exactly (remote).
unset KVS_COMBINE
KVS_TEST_COMBINED=1 KVS_TEST_KVSCTL=$(cd "$bld" && pwd)/daemon/kvsctl
export KVS_TEST_COMBINED KVS_TEST_KVSCTL KVS_TEST_READERS
semantics
prog=$bld/tests/dist_remote
for n in 2 3; do KVS_TEST_READERS=$n; job $n remote; done
prog=
unset KVS_TEST_COMBINED KVS_TEST_KVSCTL KVS_TEST_READERS

# KVS_COMBINE=1 says the default; anything but 0 or 1 is refused at start.
KVS_COMBINE=1 KVS_TEST_COMBINED=1
export KVS_COMBINE KVS_TEST_COMBINED
job 2 sums
unset KVS_COMBINE KVS_TEST_COMBINED
KVS_COMBINE=yes timeout 10 "$kvsd" --job "kt-$$-yes" -n 2 -q 2>"$work/yes.err"
s=$?
[ $s -ne 0 ] && grep -q "KVS_COMBINE=yes is not an integer in \[0, 1\]" "$work/yes.err"
tap $? "kvsd with KVS_COMBINE=yes: refused, the variable named"
KVS_COMBINE_MAX=lots timeout 10 "$kvsd" --job "kt-$$-max" -n 2 -q 2>"$work/max.err"
s=$?
[ $s -ne 0 ] && grep -q "KVS_COMBINE_MAX='lots': not a size in bytes" "$work/max.err"
tap $? "kvsd with KVS_COMBINE_MAX=lots: refused, the variable named"

# Every key combined, up to 64 MiB (KVS_COMBINE_MAX): the big keys' rounds
# are combined in many chunks, by every worker that waits for them.
KVS_COMBINE_MAX=64M KVS_TEST_COMBINED=1
export KVS_COMBINE_MAX KVS_TEST_COMBINED
for n in 2 3; do job $n big; done
job 3 states
unset KVS_COMBINE_MAX KVS_TEST_COMBINED

# What training code does (tests/dist_training): pushes in any order and
# from threads, a close after the last push, an init after rank 0 left, the
# empty string key, 100,000 keys in a call, a lone optimizer, empty row ids,
# zero-copy buffers in any order, threads crowding a small staging area,
# lists in tables (errors deep in them; a staging area they crowd). Through
# kvsd, and with the workers combining the small keys' rounds.
prog=$bld/tests/dist_training
for KVS_COMBINE in 0 1; do
    export KVS_COMBINE
    for n in 2 3; do job $n push_order; done
    for n in 2 3; do job $n threads; done
    job 3 push_close
    job 3 init_after_leave
    job 2 empty_key
    job 2 many_keys
    for n in 2 3; do job $n lone_optimizer; done
    for type in dist_sync dist_async; do job 2 row_sparse_empty; done
    type=
    job 2 buffers_order
    job 3 crowded 0 --staging 20K
    for n in 2 3; do job $n tables; done
    job 2 tables_spill 0 --staging 1M
done
unset KVS_COMBINE
prog=

# Device arrays (tests/dist_device) against the CUDA stand-in: two fake
# GPUs over host memory, allocated and filled by the workers themselves.
# The stand-in is built only where the CUDA and NCCL headers are.
standin="$(cd "$bld" && pwd)/tests/standin/.libs/libkvs_standin.so"
if [ ! -f "$standin" ]; then
    n_test=$((n_test + 1))
    echo "ok $n_test # SKIP device arrays: no CUDA stand-in in this build (no CUDA headers)"
else
prog=$bld/tests/dist_device
KVS_CUDART=$standin
KVS_STANDIN_DEVICES=2
export KVS_CUDART KVS_STANDIN_DEVICES
# Through kvsd, and with the workers combining the small keys' rounds.
for KVS_COMBINE in 0 1; do
    export KVS_COMBINE
    for type in dist_sync dist_device_sync; do for n in 2 3; do job $n sums; done; done
    type=dist_async; job 2 async
    type=dist_sync; job 2 compress; job 2 refused
    # A kvsd without a CUDA runtime opens no handle: device pushes go
    # through staging instead.
    kvsd_env="env -u KVS_CUDART"; job 2 sums; kvsd_env=
done

# kvsd's registry of the workers' device buffers: every round through
# kvsd (with KVS_COMBINE, each worker copies its small keys' device arrays
# itself).
KVS_COMBINE=0
export KVS_COMBINE

# held SCENARIO: a dist_sync job of 2 dist_device workers that stop, each
# having written ready.RANK, for the test to look at kvsd (its counters,
# its mappings: the stand-in's allocations are memfds named kvs-standin)
# until it writes go. Sets name, kvsd_pid, w0 and w1; st 1 when a worker
# did not get ready.
held() {
    name="kt-$$-$1"
    mkdir -p "$work/$name"
    start_kvsd "$name" 2
    for r in 0 1; do
        KVS_TEST_DIR=$work/$name KVS_JOB=$name KVS_RANK=$r KVS_NUM_WORKERS=2 KVS_TIMEOUT=30 \
            timeout 60 "$prog" "$1" dist_sync &
        eval "w$r=\$!"
    done
    st=0
    wait_for 300 test -f "$work/$name/ready.0" && wait_for 300 test -f "$work/$name/ready.1" ||
        st=1
}
release() {  # lets both workers of held go; st 1 when one or kvsd fails
    touch "$work/$name/go"
    wait "$w0" || st=1
    wait "$w1" || st=1
    wait "$kvsd_pid" || st=1
}
kvsctl_stats() {
    "$bld/daemon/kvsctl" --job "$name" stats 2>&1
}
says() {  # says LINE: kvsctl stats has LINE
    kvsctl_stats | grep -qx "$1" || { echo "# no \"$1\" in:"; kvsctl_stats | sed 's/^/# /'; false; }
}
# The stand-in's allocations are memfds named kvs-standin: kvsd keeps the
# descriptor of its own, and maps the workers' it opened without one.
owned() {  # owned N: kvsd has N allocations of its own
    [ "$(ls -l "/proc/$kvsd_pid/fd" | grep -c 'memfd:kvs-standin')" -eq "$1" ]
}
device_counts() {  # device_counts OPEN REGISTERED PUSHES PULLS VALUES: kvsctl stats says so
    says "device buffers: $1 open, $2 registered" && says "device pushes: $3" &&
        says "device pulls: $4" && says "values on GPUs: $5"
}
shared() {  # shared N: kvsd has N of the workers' allocations mapped
    local own
    own=$(ls -l "/proc/$kvsd_pid/fd" | grep -c 'memfd:kvs-standin')
    [ "$(( $(grep -c kvs-standin "/proc/$kvsd_pid/maps") - own ))" -eq "$1" ]
}

# Each of 1100 pushes per worker comes from an allocation of its own, freed
# after the push: kvsd opened every one, and the workers unregister the
# freed ones every 64 registrations, so that kvsd holds only those since
# the last sweep (1100 = 17 * 64 + 12) open. The key was stored from the
# host: its value stays there, and the pushes are copied out to it.
held churn
device_counts 24 2200 2200 0 0 || st=1
shared 24 || st=1
owned 0 || st=1
release
tap $st "dist_device churn with 2 workers: 2200 buffers registered, the freed ones closed"

# 1100 live allocations per worker, pushed from one by one: the last 76
# take the numbers used longest ago, and kvsd holds 1024 per worker open.
# Then one push of all 1100 keys: the first 1024 get numbers (each
# replacing the one used longest ago, every one of them anew), pinned for
# the call, and the other 76 go through staging.
[ "$(ulimit -n)" -ge 4096 ] || ulimit -n 4096   # the stand-in keeps a descriptor per allocation
held live
device_counts 2048 4248 4248 0 0 || st=1
shared 2048 || st=1
release
tap $st "dist_device with 1100 live allocations: numbers reused, a call past 1024 through staging"

# kvsd keeps each worker's buffers open while the worker lives, and none
# of a worker that died. The keys were stored from device arrays: their
# values live in kvsd's own device memory, one allocation each, beside
# the copies of each worker's push that each key keeps for its next round;
# kvsd wrote the pulls into the workers' arrays.
held hold
device_counts 4 4 4 4 2 || st=1
shared 4 || st=1
owned 6 || st=1
pkill -KILL -P "$w1"           # the worker, under timeout
wait "$w1"
wait_for 100 shared 2 || { grep kvs-standin "/proc/$kvsd_pid/maps"; st=1; }
says "device buffers: 2 open, 4 registered" || st=1
touch "$work/$name/go"
wait "$w0" || st=1
wait "$kvsd_pid" || st=1
tap $st "kvsd closes the device buffers of a worker that died"
unset KVS_CUDART KVS_STANDIN_DEVICES KVS_COMBINE
type=
prog=
fi
# The arena's tests (a full one, a 5 GB store) are in test_kvsrun.sh.

# kvsd killed while workers wait: their next call fails within 2 s.
name="kt-$$-daemon"
mkdir -p "$work/$name"
start_kvsd "$name" 2
KVS_TEST_DIR=$work/$name KVS_JOB=$name KVS_RANK=0 KVS_NUM_WORKERS=2 timeout 60 "$worker" daemon_dies &
w0=$!
KVS_TEST_DIR=$work/$name KVS_JOB=$name KVS_RANK=1 KVS_NUM_WORKERS=2 timeout 60 "$worker" daemon_dies &
w1=$!
wait_for 100 test -f "$work/$name/ready.0" && wait_for 100 test -f "$work/$name/ready.1"
kill -9 "$kvsd_pid"
wait "$w0"; s0=$?
wait "$w1"; s1=$?
tap $((s0 + s1)) "workers see kvsd die"

# A stale socket of the dead kvsd is reclaimed by the next one.
start_kvsd "$name" 1
KVS_JOB=$name KVS_RANK=0 KVS_NUM_WORKERS=1 timeout 60 "$worker" sums
s=$?
wait "$kvsd_pid"
tap $((s + $?)) "a new kvsd reclaims a dead one's socket"

# A second kvsd for a job that has one is refused (exit 3).
name="kt-$$-twice"
start_kvsd "$name" 1
first=$kvsd_pid
timeout 10 "$kvsd" --job "$name" -n 1 -q
s=$?
kill "$first"
wait "$first"
[ $s -eq 3 ]
tap $? "a second kvsd for the same job is refused"

# An arena too small to hold a value is a usage error, said as such.
timeout 10 "$kvsd" --job "kt-$$-small" -n 1 -q --arena 64K 2>"$work/small.err"
s=$?
[ $s -eq 2 ] && grep -q "^kvsd: --arena '64K' is below the arena's minimum of 1M$" "$work/small.err"
tap $? "kvsd --arena 64K: exit 2, the minimum named"

# No worker: a client of a job nobody serves gets KVS_ECLOSED, not a hang.
KVS_JOB=kt-$$-nobody KVS_RANK=0 KVS_NUM_WORKERS=1 timeout 10 "$worker" sums 2>"$work/nobody.err"
s=$?
[ $s -eq 1 ] && grep -q KVS_ECLOSED "$work/nobody.err"
tap $? "no kvsd: KVS_ECLOSED"
echo "1..$n_test"
exit 0
