#!/bin/sh
# Description: kvsd itself: killed while workers wait (their next call
# fails within 2 s), its stale socket reclaimed by the next one, a second
# kvsd for a job refused, an arena too small a usage error, and a client
# of a job nobody serves told KVS_ECLOSED. The arena's own tests (a full
# one, a 5 GB store) are in test_kvsrun_jobs.sh.
set -u
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/distlib.sh
. "$(dirname "$0")/distlib.sh"

# kvsd killed while workers wait: their next call fails within 2 s.
name="kt-$$-daemon"
mkdir -p "$work/$name"
start_kvsd "$name" 2
export KVS_TEST_WITHIN=2
KVS_TEST_DIR=$work/$name KVS_JOB=$name KVS_RANK=0 KVS_NUM_WORKERS=2 timeout $((60 * slow)) "$worker" daemon_dies &
w0=$!
KVS_TEST_DIR=$work/$name KVS_JOB=$name KVS_RANK=1 KVS_NUM_WORKERS=2 timeout $((60 * slow)) "$worker" daemon_dies &
w1=$!
unset KVS_TEST_WITHIN
wait_for 100 test -f "$work/$name/ready.0" && wait_for 100 test -f "$work/$name/ready.1"
date +%s%3N >"$work/$name/killed"
kill -9 "$kvsd_pid"
wait "$w0"; s0=$?
wait "$w1"; s1=$?
tap $((s0 + s1)) "workers see kvsd die"

# A stale socket of the dead kvsd is reclaimed by the next one.
start_kvsd "$name" 1
KVS_JOB=$name KVS_RANK=0 KVS_NUM_WORKERS=1 timeout $((60 * slow)) "$worker" sums
s=$?
wait_kvsd
tap $((s + $?)) "a new kvsd reclaims a dead one's socket"

# A second kvsd for a job that has one is refused (exit 3).
name="kt-$$-twice"
start_kvsd "$name" 1
first=$kvsd_pid
timeout $((10 * slow)) "$kvsd" --job "$name" -n 1 -q
s=$?
kill "$first"
wait "$first"
[ $s -eq 3 ]
tap $? "a second kvsd for the same job is refused"

# An arena too small to hold a value is a usage error, said as such.
timeout $((10 * slow)) "$kvsd" --job "kt-$$-small" -n 1 -q --arena 64K 2>"$work/small.err"
s=$?
[ $s -eq 2 ] && grep -q "^kvsd: --arena '64K' is below the arena's minimum of 1M$" "$work/small.err"
tap $? "kvsd --arena 64K: exit 2, the minimum named"

# No worker: a client of a job nobody serves gets KVS_ECLOSED, not a hang.
KVS_JOB=kt-$$-nobody KVS_RANK=0 KVS_NUM_WORKERS=1 timeout $((10 * slow)) "$worker" sums 2>"$work/nobody.err"
s=$?
[ $s -eq 1 ] && grep -q KVS_ECLOSED "$work/nobody.err"
tap $? "no kvsd: KVS_ECLOSED"
dist_done
