#!/bin/sh
# Description: a worker's handle when kvsd --recover is killed (-9): with
# a new kvsd of the job started by hand, the call in flight (a pull
# waiting for a round) or the next call (after the worker slept) returns
# KVS_ERESTART once and the handle reconnects: resume step -1, keys
# inited again, a kvs_array_alloc buffer's address and bytes kept, right
# sums; two threads waiting get KVS_ERESTART each; a new kvsd of another
# staging size mapped afresh; a kvsd --restore rolls back to a commit.
# With no kvsd coming back, KVS_ECLOSED at the handle's timeout.
# (A kvsd without --recover killed: KVS_ECLOSED, test_dist_kvsd.sh.)
set -u
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/distlib.sh
. "$(dirname "$0")/distlib.sh"
# KVS_TEST_RESTART_WORKER: another build of it (scripts/test's TSan stage).
restart_worker=${KVS_TEST_RESTART_WORKER:-$bld/tests/dist_restart}

# restart_case SCENARIO REPLACE [NEW KVSD OPTIONS]: a job of 2 workers
# running SCENARIO under kvsd --recover, which is killed once both wrote
# ready.RANK; REPLACE 1: a new kvsd --recover of the job is started (with
# the options), and must exit 0 once the workers closed. 0 when the
# workers exit 0.
restart_case() {
    sc=$1 replace=$2
    shift 2
    name="kt-$$-$sc"
    dir="$work/$name"
    mkdir -p "$dir"
    start_kvsd "$name" 2 --recover
    pids=""
    for r in 0 1; do
        KVS_TEST_DIR=$dir KVS_JOB=$name KVS_RANK=$r KVS_NUM_WORKERS=2 KVS_TIMEOUT=$((30 * slow)) \
            timeout $((60 * slow)) "$restart_worker" "$sc" &
        pids="$pids $!"
    done
    st=0
    if wait_for 200 test -f "$dir/ready.0" && wait_for 200 test -f "$dir/ready.1"; then
        sleep 0.3                      # into the pull's wait, or the worker's sleep
        kill -9 "$kvsd_pid"
        wait "$kvsd_pid" 2>/dev/null
        touch "$dir/killed"
        if [ "$replace" = 1 ]; then
            sleep 0.5                  # the socket is gone a while
            start_kvsd "$name" 2 --recover "$@"
            touch "$dir/restarted"
        fi
    else
        echo "# $sc: the workers did not get ready"; st=1
        kill -9 "$kvsd_pid"
    fi
    r=0
    for p in $pids; do
        wait "$p" || { echo "# $sc rank $r exited $?"; st=1; }
        r=$((r + 1))
    done
    if [ "$replace" = 1 ]; then wait_kvsd || st=1; fi
    return $st
}

restart_case blocked 1
tap $? "kvsd replaced while both wait in a pull: KVS_ERESTART once, then right sums"
restart_case idle 1
tap $? "kvsd replaced while both compute: the next call KVS_ERESTART once, then right sums"
restart_case threads 1
tap $? "kvsd replaced while two threads of each worker wait: each thread KVS_ERESTART once"
restart_case geometry 1 --staging 64M
tap $? "kvsd replaced by one of another staging size: KVS_ERESTART, old buffers gone, new ones work"
# With kvsd's commits and --restore: the job rolls back to its commit.
if "$kvsd" --help 2>&1 | grep -q -- --restore; then
    restart_case committed 1 --restore
    tap $? "kvsd replaced by one restoring a commit: KVS_ERESTART, resume step 5, committed value"
else
    echo "ok $((n_test + 1)) # SKIP kvsd has no --restore"
    n_test=$((n_test + 1))
fi
restart_case none 0
tap $? "no kvsd comes back: KVS_ECLOSED at the handle's timeout"
dist_done
