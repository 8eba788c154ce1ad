#!/bin/sh
# Description: device arrays (tests/dist_device) in jobs of real processes
# against the CUDA stand-in (two fake GPUs over host memory): sums, async,
# compression, refusals, a kvsd without a CUDA runtime; kvsd's registry of
# the workers' device buffers (churn, more live allocations than it holds
# open, a worker that dies). Skipped without the stand-in (no CUDA
# headers).
set -u
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/distlib.sh
. "$(dirname "$0")/distlib.sh"

# Device arrays (tests/dist_device) against the CUDA stand-in: two fake
# GPUs over host memory, allocated and filled by the workers themselves,
# the kernels the host build of the kernel module's, loaded by libkvs as
# it loads the real one. The stand-in is built only where the CUDA and
# NCCL headers are.
standin="$(cd "$bld" && pwd)/tests/standin/.libs/libkvs_standin.so"
if [ ! -f "$standin" ]; then
    n_test=$((n_test + 1))
    echo "ok $n_test # SKIP device arrays: no CUDA stand-in in this build (no CUDA headers)"
else
prog=$bld/tests/dist_device
KVS_CUDART=$standin
KVS_CUDA_KERNELS=${standin%/*}/libkvs-cuda.so
KVS_STANDIN_DEVICES=2
export KVS_CUDART KVS_CUDA_KERNELS KVS_STANDIN_DEVICES
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
        KVS_TEST_DIR=$work/$name KVS_JOB=$name KVS_RANK=$r KVS_NUM_WORKERS=2 KVS_TIMEOUT=$((30 * slow)) \
            timeout $((180 * slow)) "$prog" "$1" dist_sync &
        eval "w$r=\$!"
    done
    st=0
    # churn's 1,100 rounds take 35 s when the machine is shared with a
    # sanitizer build: the wait is for the workers' work, not one round.
    wait_for 1500 test -f "$work/$name/ready.0" && wait_for 1500 test -f "$work/$name/ready.1" ||
        { echo "# the workers of $1 were not ready within $((150 * slow)) s"; st=1; }
}
release() {  # lets both workers of held go; st 1 when one or kvsd fails
    touch "$work/$name/go"
    wait "$w0" || st=1
    wait "$w1" || st=1
    wait_kvsd || st=1
}
kvsctl_stats() {
    "$bld/daemon/kvsctl/kvsctl" --job "$name" stats 2>&1
}
says() {  # says LINE: kvsctl stats has LINE
    kvsctl_stats | grep -qx "$1" || { echo "# no \"$1\" in:"; kvsctl_stats | sed 's/^/# /'; false; }
}
# The stand-in's allocations are memfds named kvs-standin: kvsd keeps the
# descriptor of its own, and maps the workers' it opened without one. Each
# allocation, made or opened, is mapped twice: PROT_NONE at its device
# address (counted here), and read-write for the stand-in's own work.
owned() {  # owned N: kvsd has N allocations of its own
    [ "$(ls -l "/proc/$kvsd_pid/fd" | grep -c 'memfd:kvs-standin')" -eq "$1" ]
}
device_counts() {  # device_counts OPEN REGISTERED PUSHES PULLS VALUES: kvsctl stats says so
    says "device buffers: $1 open, $2 registered" && says "device pushes: $3" &&
        says "device pulls: $4" && says "values on GPUs: $5"
}
device_maps() {  # kvsd's mappings of device addresses
    awk '$2 == "---s" && /kvs-standin/' "/proc/$kvsd_pid/maps" | wc -l
}
shared() {  # shared N: kvsd has N of the workers' allocations mapped
    local own
    own=$(ls -l "/proc/$kvsd_pid/fd" | grep -c 'memfd:kvs-standin')
    [ "$(( $(device_maps) - own ))" -eq "$1" ]
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
wait_kvsd || st=1
tap $st "kvsd closes the device buffers of a worker that died"
unset KVS_CUDART KVS_CUDA_KERNELS KVS_STANDIN_DEVICES KVS_COMBINE
type=
prog=
fi
dist_done
