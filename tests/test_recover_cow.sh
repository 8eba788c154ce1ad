#!/bin/sh
# Description: a commit's snapshot is written by a thread of kvsd while
# the next rounds change every key (the write held half done until the
# test lets it go, so that they surely do): the file is the commit point's, bit
# for bit (values, optimizer states, round counts: the next step after a
# restore equals the uninterrupted run's); a worker killed during the
# write makes kvsd finish it, then exit 75 naming that commit (the
# workers were answered: it is theirs), and a kvsd killed during the write
# leaves the previous commit's snapshot; a restart restores the one named.
set -u
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/distlib.sh
. "$(dirname "$0")/distlib.sh"
# shellcheck source=tests/recoverlib.sh
. "$(dirname "$0")/recoverlib.sh"
worker="$bld/tests/dist_cow"
snaps="$XDG_RUNTIME_DIR/kvs"

# said CMD...: CMD's status; a failure says which CMD failed.
said() {
    "$@" || { sd=$?; echo "# failed: $*"; return $sd; }
}

# up JOB RANK PID: RANK's ready file is there, or its worker (PID) ended.
up() {
    test -f "$work/$1/ready.$2" || gone "$3"
}

# ready JOB: 0 once both workers are ready; a worker that ends first
# fails it at once.
ready() {
    said wait_for 600 up "$1" 0 "$w0" && said wait_for 600 up "$1" 1 "$w1" \
        && said test -f "$work/$1/ready.0" && said test -f "$work/$1/ready.1"
}

# started JOB SCENARIO: kvsd --recover (its log $work/JOB.kvsd1), the
# write of commit 2 held while $work/JOB/hold exists (dist_cow makes it),
# and two workers running SCENARIO; 0 once both are ready.
started() {
    mkdir -p "$work/$1"
    kvsd_env="env KVS_TEST_SNAPSHOT_HOLD=$work/$1/hold"
    kvsd_bg "$1" "$work/$1.kvsd1" --recover
    unset kvsd_env
    workers "$1" "$2"
    ready "$1"
}

# second_written JOB: commits at steps 1 and 2; 0 when the workers are
# ready while the second's snapshot is written, the first's whole. The
# workers are ready as soon as commit 2 is answered, and kvsd's writer
# opens the file after that: its temporary file is waited for (the write
# is held from its 8th piece on, so it stays).
second_written() {
    started "$1" two
    sw=$?
    said wait_for 300 test -e "$snaps/$1.snap.tmp.$kvsd_pid" && said test -s "$snaps/$1.snap"
    return $((sw + $?))
}

# restored JOB STEP LOG: a kvsd --restore, workers that find the commit
# at STEP, its values and the next step of the uninterrupted run.
restored() {
    kvsd_bg "$1" "$3" --recover --restore
    KVS_TEST_STEP=$2 workers "$1" resume
    all_ok
    rs=$?
    grep -q "restored 3 keys from $snaps/$1.snap: step $2," "$3" || rs=$((rs + 1))
    return $rs
}

# A commit at step 2, three steps pushed while its file is written.
name="kc-$$-rounds"
started "$name" run
s=$?
said wait_for 300 test -e "$snaps/$name.snap.tmp.$kvsd_pid" && said none_of "$snaps/$name.snap"
tap $((s + $?)) "three steps after a commit ran while its snapshot was written"
rm -f "$work/$name/hold"
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
# the workers were answered, so kvsd finishes the file, then leaves; the
# second commit is the last.
name="kc-$$-worker"
second_written "$name"
s=$?
kill -9 "$(cat "$work/$name/ready.1")"
rm -f "$work/$name/hold"
kvsd_exit 75
s=$((s + $?))
grep -q "rolling back to the last commit, step 2" "$work/$name.kvsd1"
tap $((s + $?)) "a worker killed during the second commit's write: kvsd finishes it, exits 75, naming it"
kill -9 "$(cat "$work/$name/ready.0")"
wait "$w0" "$w1" 2>/dev/null
KVS_TEST_AFTER=1
export KVS_TEST_AFTER
restored "$name" 2 "$work/$name.kvsd2"
tap $? "its restart restores the second commit, bit for bit"
unset KVS_TEST_AFTER

# Commits at steps 1 and 2; kvsd killed while the second is written.
name="kc-$$-kill"
second_written "$name"
s=$?
kill -9 "$kvsd_pid"
wait "$kvsd_pid" 2>/dev/null
rm -f "$work/$name/hold"
tap $s "kvsd killed while the second commit's snapshot is written"
kill -9 "$(cat "$work/$name/ready.0")" "$(cat "$work/$name/ready.1")"
wait "$w0" "$w1" 2>/dev/null
restored "$name" 1 "$work/$name.kvsd2"
tap $? "its restart restores the first commit, bit for bit"
! test -e "$snaps/$name.snap.tmp.$kvsd_pid"
tap $? "the half-written snapshot is removed"
dist_done
