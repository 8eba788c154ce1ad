#!/bin/sh
# Description: kvsd's commits and roll back, kvsd started by hand: a
# commit in dist_sync and dist_async with sgd's momentum; the snapshot in
# the runtime dir; a worker killed makes kvsd --recover exit 75 naming it
# and the step; kvsd --restore gives new workers the step, the committed
# values and the same next update as a run not interrupted, bit for bit;
# steps that differ fail the commit; --checkpoint DIR keeps two snapshots,
# a restore reads DIR when the runtime dir has none, passing over a
# corrupt one; a snapshot of another job is refused; kvsctl status and
# checkpoint.
set -u
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/distlib.sh
. "$(dirname "$0")/distlib.sh"
# shellcheck source=tests/recoverlib.sh
. "$(dirname "$0")/recoverlib.sh"
worker="$bld/tests/dist_commit"
kvsctl="$bld/daemon/kvsctl/kvsctl"
snaps="$XDG_RUNTIME_DIR/kvs"

for type in dist_sync dist_async; do
    name="kt-$$-$type"
    ckpt="$work/ckpt-$type"
    mkdir -p "$work/$name" "$ckpt"
    opts=""
    [ $type = dist_sync ] && opts="--checkpoint $ckpt --checkpoint-sync"

    # A run that commits at steps 2, 4, 6; then rank 1 killed.
    # shellcheck disable=SC2086
    kvsd_bg "$name" "$work/$name.kvsd1" --recover $opts
    workers "$name" run $type
    wait_for 300 test -f "$work/$name/ready.0" && wait_for 300 test -f "$work/$name/ready.1"
    tap $? "$type: three commits, then both workers ready"
    test -s "$snaps/$name.snap"
    tap $? "$type: the snapshot is in the runtime dir"

    "$kvsctl" -j "$name" status >"$work/$name.status" 2>&1
    grep -q "^last commit: step 6, commit 3, " "$work/$name.status" \
        && grep -q "^generation: 0 " "$work/$name.status"
    tap $? "$type: kvsctl status shows the last commit and the generation"
    if [ $type = dist_sync ]; then
        [ "$(ls "$ckpt" | tr '\n' ' ')" = "$(snap 2) $(snap 3) " ]
        tap $? "$type: --checkpoint-sync: the two newest commits on disk"
        "$kvsctl" -j "$name" checkpoint >"$work/$name.ckpt" 2>&1 \
            && grep -q "^commit 3 (step 6) is on disk in $ckpt" "$work/$name.ckpt"
        tap $? "$type: kvsctl checkpoint"
    else
        "$kvsctl" -j "$name" checkpoint >"$work/$name.ckpt" 2>&1
        [ $? -eq 1 ] && grep -q "no checkpoint directory" "$work/$name.ckpt"
        tap $? "$type: kvsctl checkpoint without --checkpoint: an error"
    fi

    kill -9 "$(cat "$work/$name/ready.1")"
    kvsd_exit 75
    s=$?
    grep -q "worker rank 1 (pid [0-9]*) died: rolling back to the last commit, step 6" \
        "$work/$name.kvsd1"
    tap $((s + $?)) "$type: a worker killed: kvsd --recover exits 75, naming it and the step"
    kill -9 "$(cat "$work/$name/ready.0")"
    wait "$w0" "$w1" 2>/dev/null
    test -s "$snaps/$name.snap" && ! test -S "$snaps/$name.sock"
    tap $? "$type: the snapshot stays, the socket goes"

    # Restored: the committed values, then the same next update. Files a
    # killed kvsd may leave (a half-written snapshot, a link for a copy)
    # are removed.
    echo x >"$snaps/$name.snap.tmp.99999"
    echo x >"$snaps/$name.snap.9"
    # shellcheck disable=SC2086
    kvsd_bg "$name" "$work/$name.kvsd2" --recover --restore $opts
    # kvsd removes them once its socket is made, before it accepts.
    wait_for 50 none_of "$snaps/$name.snap.tmp.99999" "$snaps/$name.snap.9"
    tap $? "$type: a killed kvsd's half-written snapshot and links are removed"
    workers "$name" resume $type
    all_ok
    s=$?
    grep -q "restored 1 keys from $snaps/$name.snap: step 6, commit 3" "$work/$name.kvsd2"
    tap $((s + $?)) "$type: --restore: the step, the committed values, the same next update"
    ! test -e "$snaps/$name.snap"
    tap $? "$type: every worker left: the snapshot is removed"
done

# The runtime dir has no snapshot: the newest of DIR (the resumed run's commit, step 7).
name="kt-$$-dist_sync"
ckpt="$work/ckpt-dist_sync"
[ "$(ls "$ckpt" | tr '\n' ' ')" = "$(snap 3) $(snap 4) " ]
tap $? "dist_sync: the resumed run's commit copied too, two kept"
kvsd_bg "$name" "$work/$name.kvsd3" --recover --restore --checkpoint "$ckpt"
KVS_TEST_STEP=7 workers "$name" step dist_sync
all_ok
s=$?
grep -q "restored 1 keys from $ckpt/$(snap 4): step 7" "$work/$name.kvsd3"
tap $((s + $?)) "restore from DIR when the runtime dir has no snapshot"

# A corrupt newest in DIR: the one before it, and the corrupt one named.
printf 'garbage' | dd of="$ckpt/$(snap 4)" bs=1 seek=100 conv=notrunc 2>/dev/null
kvsd_bg "$name" "$work/$name.kvsd4" --recover --restore --checkpoint "$ckpt"
KVS_TEST_STEP=6 workers "$name" step dist_sync
all_ok
s=$?
grep -q "passing over $ckpt/$(snap 4)" "$work/$name.kvsd4" \
    && grep -q "restored 1 keys from $ckpt/$(snap 3): step 6" "$work/$name.kvsd4"
tap $((s + $?)) "a corrupt newest snapshot in DIR: the previous one, the corrupt one said"

# A snapshot of another job: refused, exit 1, what differs named.
"$kvsd" --job "kt-$$-other" -n 2 --restore --checkpoint "$ckpt" 2>"$work/other.err"
s=$?
[ $s -eq 1 ] && grep -q "is a snapshot of job '$name', not 'kt-$$-other'" "$work/other.err"
tap $? "a snapshot of another job: refused"
"$kvsd" --job "$name" -n 3 --restore --checkpoint "$ckpt" 2>"$work/size.err"
s=$?
[ $s -eq 1 ] && grep -q "a snapshot of a job of 2 workers, not 3" "$work/size.err"
tap $? "a snapshot of a job of another size: refused"

# Steps that differ fail the commit for all; workers that then leave
# with kvs_close are no deaths: kvsd --recover exits 0.
name="kt-$$-badstep"
mkdir -p "$work/$name"
kvsd_bg "$name" "$work/$name.kvsd" --recover
workers "$name" badstep dist_sync
all_ok
tap $? "commits of differing steps: KVS_EBADARG naming the ranks; clean leaves are no deaths"
dist_done
