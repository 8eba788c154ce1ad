#!/bin/sh
# Description: a commit's snapshot is written by a thread of kvsd while
# the next rounds change every key (kvsd slowed to a pause per MiB
# written, so that they surely do): the file is the commit point's, bit
# for bit (values, optimizer states, round counts: the next step after a
# restore equals the uninterrupted run's); a worker killed during the
# write makes kvsd exit 75 at once, naming the previous commit, and a
# kvsd killed during the write leaves the previous commit's snapshot:
# either way a restart restores that one.
set -u
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/distlib.sh
. "$(dirname "$0")/distlib.sh"
cow="$bld/tests/dist_cow"
snaps="$XDG_RUNTIME_DIR/kvs"
# 17 pieces of 1 MiB: the write takes 1.7 s (times $slow) at least.
pause=$((100000 * slow))
[ $pause -gt 900000 ] && pause=900000

# kvsd_bg JOB LOG KVSD-OPTIONS...: kvsd of 2 workers, its stderr in LOG.
kvsd_bg() {
    j=$1 log=$2
    shift 2
    KVS_TEST_SNAPSHOT_PAUSE_US=$pause "$kvsd" --job "$j" -n 2 "$@" 2>"$log" &
    kvsd_pid=$!
}

# workers JOB SCENARIO: ranks 0 and 1 in the background ($w0, $w1).
workers() {
    KVS_TEST_DIR=$work/$1 KVS_JOB=$1 KVS_RANK=0 KVS_NUM_WORKERS=2 KVS_TIMEOUT=$((30 * slow)) \
        timeout $((60 * slow)) "$cow" "$2" &
    w0=$!
    KVS_TEST_DIR=$work/$1 KVS_JOB=$1 KVS_RANK=1 KVS_NUM_WORKERS=2 KVS_TIMEOUT=$((30 * slow)) \
        timeout $((60 * slow)) "$cow" "$2" &
    w1=$!
}

both_ok() {
    wait "$w0"; s0=$?
    wait "$w1"; s1=$?
    [ "$s0" -eq 0 ] && [ "$s1" -eq 0 ] || { echo "# workers exited $s0 $s1"; return 1; }
}

# kvsd_exit WANT: 0 when kvsd exits WANT within 30 s (times $slow).
kvsd_exit() {
    if ! wait_for 300 gone "$kvsd_pid"; then
        echo "# kvsd still runs: killed"
        kill -KILL "$kvsd_pid" 2>/dev/null
    fi
    wait "$kvsd_pid"
    ks=$?
    [ "$ks" -eq "$1" ] || { echo "# kvsd exited $ks, expected $1"; return 1; }
}

ready() {
    wait_for 600 test -f "$work/$1/ready.0" && wait_for 600 test -f "$work/$1/ready.1"
}

# restored JOB STEP LOG: a kvsd --restore, workers that find the commit
# at STEP, its values and the next step of the uninterrupted run.
restored() {
    kvsd_bg "$1" "$3" --recover --restore
    wait_for 50 test -S "$snaps/$1.sock"
    KVS_TEST_STEP=$2 workers "$1" resume
    both_ok
    rs=$?
    kvsd_exit 0
    rs=$((rs + $?))
    grep -q "restored 3 keys from $snaps/$1.snap: step $2," "$3" || rs=$((rs + 1))
    return $rs
}

# A commit at step 2, three steps pushed while its file is written.
name="kc-$$-rounds"
mkdir -p "$work/$name"
kvsd_bg "$name" "$work/$name.kvsd1" --recover
wait_for 50 test -S "$snaps/$name.sock"
workers "$name" run
ready "$name"
s=$?
test -e "$snaps/$name.snap.tmp.$kvsd_pid" && ! test -e "$snaps/$name.snap"
tap $((s + $?)) "three steps after a commit ran while its snapshot was written"
wait_for 300 test -s "$snaps/$name.snap" && ! test -e "$snaps/$name.snap.tmp.$kvsd_pid"
tap $? "the snapshot is whole in its place once written"
kill -9 "$(cat "$work/$name/ready.1")"
kvsd_exit 75
s=$?
grep -q "rolling back to the last commit, step 2" "$work/$name.kvsd1"
tap $((s + $?)) "a worker killed after the write: kvsd exits 75, naming the commit"
kill -9 "$(cat "$work/$name/ready.0")"
wait "$w0" "$w1" 2>/dev/null
restored "$name" 2 "$work/$name.kvsd2"
tap $? "the snapshot is the commit's, bit for bit: values, then the next step"

# Commits at steps 1 and 2; a worker killed while the second is written:
# kvsd leaves at once, the first commit is the last.
name="kc-$$-worker"
mkdir -p "$work/$name"
kvsd_bg "$name" "$work/$name.kvsd1" --recover
wait_for 50 test -S "$snaps/$name.sock"
workers "$name" two
ready "$name"
s=$?
test -e "$snaps/$name.snap.tmp.$kvsd_pid" && test -s "$snaps/$name.snap"
s=$((s + $?))
kill -9 "$(cat "$work/$name/ready.1")"
kvsd_exit 75
s=$((s + $?))
grep -q "rolling back to the last commit, step 1" "$work/$name.kvsd1"
tap $((s + $?)) "a worker killed during the second commit's write: kvsd exits 75 at once, naming the first"
kill -9 "$(cat "$work/$name/ready.0")"
wait "$w0" "$w1" 2>/dev/null
restored "$name" 1 "$work/$name.kvsd2"
tap $? "its restart restores the first commit, bit for bit"

# Commits at steps 1 and 2; kvsd killed while the second is written.
name="kc-$$-kill"
mkdir -p "$work/$name"
kvsd_bg "$name" "$work/$name.kvsd1" --recover
wait_for 50 test -S "$snaps/$name.sock"
workers "$name" two
ready "$name"
s=$?
test -e "$snaps/$name.snap.tmp.$kvsd_pid" && test -s "$snaps/$name.snap"
s=$((s + $?))
kill -9 "$kvsd_pid"
wait "$kvsd_pid" 2>/dev/null
tap $s "kvsd killed while the second commit's snapshot is written"
kill -9 "$(cat "$work/$name/ready.0")" "$(cat "$work/$name/ready.1")"
wait "$w0" "$w1" 2>/dev/null
restored "$name" 1 "$work/$name.kvsd2"
tap $? "its restart restores the first commit, bit for bit"
! test -e "$snaps/$name.snap.tmp.$kvsd_pid"
tap $? "the half-written snapshot is removed"
dist_done
