#!/bin/sh
# Description: each fault of a job that recovers, as users run it (kvsrun
# --restarts, --checkpoint) with C workers making kvs calls
# (tests/recover_faults), in dist_sync and dist_async: a worker killed
# before the first commit (the job starts again from an empty store), while
# the others wait in a commit, during its own commit (the commit made for
# all or for none), after a commit; two workers killed at once; kvsd killed
# during a round, during a commit and while it writes the commit's
# snapshot (made for all or none, no half file left); kvsd killed while it
# writes a checkpoint (the folder keeps whole snapshots only; the
# restarted kvsd copies the commit it restored; a new job from the folder
# resumes at the last commit; a corrupt newest is passed over; another
# job's is refused); a full disk (the job goes on, kvsctl status says it,
# the older file stays); restarts used up (a clear message, no hang); a
# stalled worker replaced. Every job ends with every key's value checked
# by rank 0.
# shellcheck disable=SC2016
set -u
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/kvsrunlib.sh
. "$(dirname "$0")/kvsrunlib.sh"
# shellcheck source=tests/recoverlib.sh
. "$(dirname "$0")/recoverlib.sh"
kvsrun_start 21
rf=$top_builddir/tests/recover_faults
kvsctl=$top_builddir/daemon/kvsctl/kvsctl
full=$rt/full
trap 'for p in $bg; do kill -KILL "$p" 2>/dev/null; done
    umount "$full" 2>/dev/null; rm -rf "$rt"' EXIT

# A case's folder for its workers' files.
case_dir() { w=$rt/w.$case_no; mkdir -p "$w"; }

# later_resumes: the steps the workers resumed at after a fault (every
# "resume" line but each rank's first on its first life), sorted, one
# line. fresh_ok: 0 when every first start was at -1.
later_resumes() {
    awk '/^rank [0-9]+ life [0-9]+: resume / {
        k = $2 " " $4; if ($4 == "0:" && !(k in seen)) { seen[k] = 1; next } print $6 }' "$out" |
        sort -n | tr '\n' ' '
}
fresh_ok() {
    ! awk '/^rank [0-9]+ life 0: resume / { if (!($2 in seen)) { seen[$2] = 1; if ($6 != "-1") bad = 1 } }
        END { exit !bad }' "$out"
}

# expect_resumes WANT: the later resumes are WANT ("5 5 5 ").
expect_resumes() {
    got=$(later_resumes)
    if [ "$got" != "$1" ]; then fail "resumed at '$got', not '$1'"; fi
    if ! fresh_ok; then fail "a first start not at -1"; fi
}

expect_right() {
    if ! grep -q '^values right$' "$out"; then fail "rank 0 did not find the values right"; fi
}

# both_resumed_at STEP: 0 when both ranks' first lives resumed at STEP.
both_resumed_at() {
    [ "$(grep -c "^rank [01] life 0: resume $1\$" "$out")" -eq 2 ]
}

# from_folder SECONDS DIR STEPS BIG: a new job of the same name on the
# checkpoint folder DIR, without faults (its output alone in $out, the
# last one's kept in $out.1): it exits 0 with the values right.
from_folder() {
    cp "$out" "$out.1"
    : > "$out"
    kvsr "$1" -n 2 --checkpoint "$2" "$rf" dist_sync "$3" 5 "$w" none "$4"
    expect_rc 0
    expect_right
}

# kvsd_pid: the job's kvsd (not a worker naming the job).
kvsd_pid() { pgrep -f -- "^[^ ]*kvsd --job $j -n" | head -n 1; }

# kvsr_bg SECONDS ARGS...: kvsr in the background ($kp); kvsr_wait sets
# rc and took.
kvsr_bg() {
    kr_limit=$1
    shift
    kr_start=$(now_ms)
    timeout -k 5 $((kr_limit * slow)) "$kvsrun" -j "$j" "$@" >> "$out" 2>&1 &
    kp=$!
    bg="$bg $kp"
}
kvsr_wait() {
    wait "$kp"
    rc=$?
    took=$(($(now_ms) - kr_start))
}

if [ ! -x "$rf" ]; then
    for _ in $(seq 21); do skip "$rf not built"; done
    exit 0
fi

for type in dist_sync dist_async; do
    # ---- a worker killed ------------------------------------------------

    next_job
    case_dir
    kvsr 60 -n 3 --restarts 2 "$rf" $type 12 5 "$w" die:1:step:3
    expect_rc 0
    expect_right
    expect_resumes "-1 -1 -1 "
    report "$type: a worker killed before the first commit: all start again from an empty store"

    next_job
    case_dir
    kvsr 60 -n 3 --restarts 2 "$rf" $type 15 5 "$w" die:1:commit:10
    expect_rc 0
    expect_right
    expect_resumes "5 5 5 "
    report "$type: a worker killed while the others wait in a commit: the commit is made for none"

    # A big key (32 MiB) makes the snapshot's write take a while; rank 1
    # is killed 20 ms into its commit, before or after it is made (or,
    # commits being answered before their write, after a later one).
    next_job
    case_dir
    kvsr 90 -n 3 --restarts 2 "$rf" $type 15 5 "$w" die:1:incommit:10:20 8388608
    expect_rc 0
    expect_right
    got=$(later_resumes)
    # At 15, the last commit, the others may have ended before the kill:
    # then only who was still in the job resumes.
    case $got in
        "5 5 5 " | "10 10 10 " | "15 15 15 ") echo "# $type: all resumed at ${got%% *}" ;;
        "15 " | "15 15 ") echo "# $type: resumed at the last commit, the others had ended" ;;
        *) fail "resumed at '$got', not all at 5, 10 or 15" ;;
    esac
    report "$type: a worker killed during its commit: the commit is made for all or for none"

    next_job
    case_dir
    kvsr 60 -n 3 --restarts 2 "$rf" $type 15 5 "$w" die:1:after:10
    expect_rc 0
    expect_right
    expect_resumes "10 10 10 "
    report "$type: a worker killed after a commit: all resume at it"

    # Both die right after the same commit; kvsrun may see the deaths
    # together (one restart of kvsd) or apart (two, and a rank that resumed
    # after the first resumes again after the second): either way every
    # resume, at least one a rank, is at the commit.
    next_job
    case_dir
    kvsr 60 -n 3 --restarts 4 "$rf" $type 15 5 "$w" die:0,1:after:5
    expect_rc 0
    expect_right
    got=$(later_resumes)
    case $got in
        "5 5 5 "*) [ -z "$(echo "$got" | tr -d '5 ')" ] || fail "resumed at '$got'" ;;
        *) fail "resumed at '$got'" ;;
    esac
    report "$type: two workers killed at once: replaced, all resume at the commit"

    # ---- kvsd killed ----------------------------------------------------

    # Rank 1 sleeps before step 7 (sync: rank 0 waits in the round) or
    # before commit 10 (rank 0 waits in the commit); kvsd is killed then.
    for at in step:7 commit:10; do
        next_job
        case_dir
        kvsr_bg 60 -n 2 --restarts 1 "$rf" $type 15 5 "$w" "pause:1:$at:$((1500 * slow))"
        if ! wait_for 300 test -e "$w/paused.1"; then fail "rank 1 never paused"; fi
        sleep 0.3
        kill -KILL "$(kvsd_pid)" 2>/dev/null
        kvsr_wait
        expect_rc 0
        expect_right
        expect_resumes "5 5 "
        if [ "$(grep -c '^rank [01] life 0: restart$' "$out")" -ne 2 ]; then
            fail "not one KVS_ERESTART per worker"
        fi
        if ! grep -q 'kvsd (pid [0-9]*) was killed by signal 9 (Killed): restart 1 of 1' "$out"; then
            fail "no line for kvsd's restart"
        fi
        report "$type: kvsd killed while a worker waits in ${at%:*} ${at#*:}: restarted, both resume at 5"
    done
done

# ---- kvsd killed while it writes a commit's snapshot --------------------

# A 128 MiB key makes the snapshot's write into memory take a while; kvsd
# is killed as soon as commit 2's temp file shows. kvsd answers a commit
# before its file is written, so the workers go on to step 15, whose
# commit waits for commit 2's file: the kill finds them there. Commit 2 is
# made for both workers or for neither; the restarted kvsd removes the
# half-written file.
next_job
case_dir
kvsr_bg 90 -n 2 --restarts 1 "$rf" dist_sync 15 5 "$w" none 33554432
caught=""
if wait_for 600 test -e "$dir/$j.snap"; then
    limit=$(($(now_ms) + 30000 * slow))
    while [ "$(now_ms)" -lt "$limit" ] && kill -0 "$kp" 2>/dev/null; do
        if ls "$dir/$j.snap.tmp."* >/dev/null 2>&1; then
            kill -KILL "$(kvsd_pid)" 2>/dev/null
            caught=yes
            break
        fi
    done
else
    fail "commit 1 made no snapshot"
fi
kvsr_wait
expect_rc 0
expect_right
got=$(later_resumes)
case $got in
    "5 5 " | "10 10 ") echo "# killed ${caught:+in the write; }both resumed at ${got%% *}" ;;
    # The workers ended first (their last commit answered at its capture):
    # the kill hit the last write, and nobody was left to resume.
    "") echo "# killed in the last commit's write, after the workers ended" ;;
    *) fail "resumed at '$got', not both at 5 or both at 10" ;;
esac
if [ -z "$caught" ]; then echo "# the write was over before the kill"; fi
if ls "$dir/$j.snap"* >/dev/null 2>&1; then
    fail "left in $dir: $(ls "$dir" | tr '\n' ' ')"
fi
report "kvsd killed while it writes a commit's snapshot: the commit is made for all or none, no half file left"

# ---- kvsd killed during a checkpoint's disk write -----------------------

# A 64 MiB key, --checkpoint with KVS_CHECKPOINT_SYNC=1: commit 2's copy
# takes a while; kvsd is killed as soon as its temp file shows.
next_job
case_dir
ck=$rt/ck
KVS_CHECKPOINT_SYNC=1 kvsr_bg 90 -n 2 --restarts 1 --checkpoint "$ck" "$rf" dist_sync 10 5 "$w" \
    none 16777216
caught=""
if wait_for 600 test -e "$ck/$(snap 1)"; then
    limit=$(($(now_ms) + 30000 * slow))
    while [ "$(now_ms)" -lt "$limit" ] && kill -0 "$kp" 2>/dev/null; do
        if ls "$ck"/.snap-*2.kvs.tmp.* >/dev/null 2>&1; then
            kill -KILL "$(kvsd_pid)" 2>/dev/null
            caught=$(ls -A "$ck" | tr '\n' ' ')
            break
        fi
    done
else
    fail "commit 1 never reached $ck"
fi
kvsr_wait
expect_rc 0
expect_right
case $(later_resumes) in
    "5 5 " | "10 10 " | "") ;;           # "": the workers had ended (as above)
    *) fail "resumed at '$(later_resumes)', not both at 5 or both at 10" ;;
esac
if [ -z "$caught" ]; then
    echo "# the copy was over before the kill: the folder's state is still checked"
else
    echo "# killed while $ck held: $caught"
fi
# The restarted kvsd copies the commit it restored from memory, which its
# killed one had not finished copying, and drops the killed one's temp
# file: the folder ends with both commits, whole, and nothing else.
want="$(snap 1) $(snap 2) "
if [ "$(ls -A "$ck" | tr '\n' ' ')" != "$want" ]; then
    fail "the folder holds '$(ls -A "$ck" | tr '\n' ' ')', not '$want'"
fi
# Every worker left: kvsd's snapshot in memory is gone, so a new job of
# the same name restores from the folder's newest.
from_folder 90 "$ck" 10 16777216
from=$(grep '^rank [01] life 0: resume' "$out" | awk '{ print $6 }' | tr '\n' ' ')
if [ "$from" != "10 10 " ]; then fail "the job from the folder resumed at '$from', not at 10"; fi
if grep -q 'passing over' "$out"; then fail "a snapshot in the folder did not check"; fi
report "kvsd killed while it writes a checkpoint: the folder ends with whole snapshots only, the last commit's too"

# The same folder (commits 1 and 2, steps 5 and 10), its newest made
# corrupt: a new job of that name resumes at the one before, saying so.
next_job
j=$(printf 'kvsrun-test-%d-case%02d' $$ $((case_no - 1)))
printf 'garbage' | dd of="$ck/$(snap 2)" bs=1 seek=100 conv=notrunc 2>/dev/null
kvsr 90 -n 2 --checkpoint "$ck" "$rf" dist_sync 10 5 "$w" none 16777216
expect_rc 0
expect_right
if ! both_resumed_at 5; then
    fail "the job did not resume at 5"
fi
if ! grep -q "passing over $ck/$(snap 2)" "$out"; then
    fail "the corrupt snapshot was not named"
fi
report "a corrupt newest snapshot in the folder: the job resumes from the one before, naming it"

# A job of another name given that folder: refused at once, clearly.
next_job
kvsr 30 -n 2 --checkpoint "$ck" "$rf" dist_sync 10 5 "$w" none 16777216
if [ "$rc" -eq 0 ]; then fail "exit status 0"; fi
expect_within 15000
if ! grep -q "is a snapshot of job 'kvsrun-test-$$-case[0-9]*', not '$j'" "$out"; then
    fail "no line naming the other job"
fi
report "a snapshot of another job in the folder: the job fails at once, naming it"

# ---- a full disk --------------------------------------------------------

# A 2 MiB folder, snapshots of 1.2 MiB: commit 1 fits, 2 and 3 do not.
next_job
case_dir
mkdir -p "$full"
if ! mount -t tmpfs -o size=2M tmpfs "$full" 2>/dev/null; then
    skip "cannot mount a small tmpfs (not root?)"
else
    KVS_CHECKPOINT_SYNC=1 kvsr_bg 60 -n 2 --checkpoint "$full" "$rf" dist_sync 15 5 "$w" \
        "pause:1:after:15:$((3000 * slow))" 300000
    if ! wait_for 300 test -e "$w/paused.1"; then fail "rank 1 never paused"; fi
    "$kvsctl" -j "$j" status > "$rt/status" 2>&1
    if ! grep -q "^checkpoint: $full (sync), last on disk: commit 1, not the last yet" "$rt/status" ||
        ! grep -q "^checkpoint failures: 2, the last: commit 3: .*: No space left on device" "$rt/status"; then
        fail "kvsctl status did not say the failed copies: $(tr '\n' '|' < "$rt/status")"
    fi
    kvsr_wait
    expect_rc 0
    expect_right
    # The first failed copy is said under kvsrun (whose kvsd is quiet), once.
    if [ "$(grep -c "checkpoint of commit 2 into $full failed: .*No space left on device" "$out")" -ne 1 ] ||
        grep -q "checkpoint of commit 3 into" "$out"; then
        fail "the failed copy was not said once: $(grep checkpoint "$out" | tr '\n' '|')"
    fi
    if [ "$(ls -A "$full" | tr '\n' ' ')" != "$(snap 1) " ]; then
        fail "the full folder holds '$(ls -A "$full" | tr '\n' ' ')', not commit 1 alone"
    fi
    # The one left is whole: a new job of the same name resumes from it.
    from_folder 60 "$full" 15 300000
    if ! both_resumed_at 5; then
        fail "the job from the full folder did not resume at 5"
    fi
    report "a full disk: the commits succeed, the first failed copy is said, kvsctl status counts them, the older file stays whole"
    umount "$full"
fi

# ---- restarts used up, a stalled worker ---------------------------------

next_job
case_dir
kvsr 60 -n 2 --restarts 1 "$rf" dist_sync 12 5 "$w" die:1:step:3:all
expect_rc 137
expect_within 20000
if ! grep -q 'rank 1 (pid [0-9]*) was killed by signal 9 (Killed); its 1 restart is used up' "$out"; then
    fail "no line saying the restarts are used up"
fi
report "restarts used up with workers in kvs calls: the job fails (137) with the message, no hang"

next_job
case_dir
kvsr 90 -n 2 --restarts 1 --stall-timeout $((3 * slow)) "$rf" dist_sync 8 3 "$w" stall:1:step:4
expect_rc 0
expect_right
expect_resumes "3 3 "
if ! grep -q 'rank 1 (pid [0-9]*) stalled: the others have waited on it for' "$out"; then
    fail "no line naming the stalled rank"
fi
report "a stalled worker (SIGSTOP): killed by --stall-timeout, replaced, the job ends right"
