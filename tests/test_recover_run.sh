#!/bin/sh
# Description: kvsrun --restarts restarts a failed worker under its rank and environment and a kvsd that ended by itself, and fails the job plainly once the restarts are used up; --restarts 0 is the old behaviour; --stall-timeout kills a worker the others wait on (kvsctl status names it meanwhile); a worker of a 2-host job that ends without connecting does not hold the job up; a --join-timeout of 0 is refused; --checkpoint makes its folder.
# TAP output. Programs: $top_builddir/daemon/kvsrun/kvsrun, daemon/kvsd/kvsd,
# daemon/kvsctl/kvsctl and tests/recover_worker. Every job runs in a private
# XDG_RUNTIME_DIR. Workers that must live through a kvsd restart are shell
# commands that make no kvs calls (a worker's handle reconnecting to the new
# kvsd is the library's business, tested with it).
# shellcheck disable=SC2016
set -u
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/kvsrunlib.sh
. "$(dirname "$0")/kvsrunlib.sh"
kvsrun_start 11
kvsctl=$top_builddir/daemon/kvsctl/kvsctl
rworker=$top_builddir/tests/recover_worker
log=$rt/workers.log
trap 'for p in $bg; do kill -KILL "$p" 2>/dev/null; done; ports_release; rm -rf "$rt"' EXIT

# ---- restarts -----------------------------------------------------------

next_job
: > "$log"
# Rank 1 kills itself on its first two lives; each life writes its rank
# and restart count.
kvsr 60 -n 2 --restarts 3 sh -c 'echo "$KVS_RANK $KVS_RESTART_COUNT $KVS_JOB" >> '"$log"';
    if [ "$KVS_RANK" = 1 ] && [ "$KVS_RESTART_COUNT" -lt 2 ]; then kill -KILL $$; fi; sleep 0.3'
expect_rc 0
got=$(sort "$log" | tr '\n' ' ')
want="0 0 $j 1 0 $j 1 1 $j 1 2 $j "
if [ "$got" != "$want" ]; then fail "the lives wrote '$got', not '$want'"; fi
if [ "$(grep -c 'rank 1 (pid [0-9]*) was killed by signal 9 (Killed): restart [12] of 3; kvsd restarted' "$out")" -ne 2 ]; then
    fail "not one line per restart"
fi
if ! grep -q "kvsrun: restarts: rank 1: 2, kvsd's own: 0; the longest recovery took" "$out"; then
    fail "no summary"
fi
report "a killed worker is restarted under its rank and environment (KVS_RESTART_COUNT), the job exits 0"

next_job
kvsr 60 -n 2 --restarts 1 sh -c 'if [ "$KVS_RANK" = 1 ]; then kill -KILL $$; fi; sleep 30'
expect_rc 137
expect_within 20000
if ! grep -q 'rank 1 (pid [0-9]*) was killed by signal 9 (Killed); its 1 restart is used up' "$out"; then
    fail "no line saying the restarts are used up"
fi
report "restarts used up: the job fails (137) with the message, the others are stopped"

next_job
kvsr 30 -n 2 sh -c 'if [ "$KVS_RANK" = 1 ]; then kill -KILL $$; fi; sleep 30'
expect_rc 137
expect_within 20000
if grep -q 'restart' "$out"; then fail "a restart without --restarts"; fi
report "--restarts 0 (the default) fails the job at the first death, as before"

next_job
: > "$log"
# Rank 1 kills the job's kvsd; both workers must live on and finish.
kvsr 60 -n 2 --restarts 1 sh -c 'if [ "$KVS_RANK" = 1 ]; then sleep 0.3;
    kill -KILL $(pgrep -f -- "kvsd --job $KVS_JOB -n"); fi; sleep 2;
    echo "$KVS_RANK $KVS_RESTART_COUNT" >> '"$log"
expect_rc 0
got=$(sort "$log" | tr '\n' ' ')
if [ "$got" != "0 0 1 0 " ]; then fail "the workers wrote '$got'"; fi
if ! grep -q 'kvsd (pid [0-9]*) was killed by signal 9 (Killed): restart 1 of 1' "$out"; then
    fail "no line for kvsd's restart"
fi
report "a killed kvsd is restarted, the workers are left alone, the job exits 0"

next_job
: > "$log"
# Both ranks die on their first lives at once; their replacements must
# find the one new kvsd ("^[^ ]*kvsd": not a pgrep of the other rank).
kvsr 60 -n 2 --restarts 2 sh -c 'if [ "$KVS_RESTART_COUNT" = 0 ]; then touch '"$log"'.$KVS_RANK;
        while [ ! -e '"$log"'.0 ] || [ ! -e '"$log"'.1 ]; do sleep 0.01; done; kill -KILL $$; fi;
    echo "$KVS_RANK $(pgrep -f -- "^[^ ]*kvsd --job $KVS_JOB -n")" >> '"$log"'; sleep 0.5'
expect_rc 0
if [ "$(wc -l < "$log")" -ne 2 ] || [ "$(cut -d' ' -f2 "$log" | sort -u | wc -l)" -ne 1 ]; then
    fail "the replacements saw kvsd as '$(tr '\n' ' ' < "$log")', not one same kvsd"
fi
if ! grep -q "kvsrun: restarts: rank 0: 1, rank 1: 1, kvsd's own: 0" "$out"; then
    fail "no summary of one restart per rank"
fi
report "two workers that die at once make one kvsd restart"

next_job
# SIGTERM to kvsrun while rank 1 keeps dying: the job ends, restarts or not.
timeout -k 5 $((60 * slow)) "$kvsrun" -j "$j" -n 2 --restarts 100 sh -c \
    'if [ "$KVS_RANK" = 1 ]; then kill -KILL $$; fi; sleep 30' >> "$out" 2>&1 &
kp=$!
bg="$bg $kp"
kr_start=$(now_ms)
sleep 0.5
kill -TERM "$kp"
wait "$kp"
rc=$?
took=$(($(now_ms) - kr_start))
case $rc in 137 | 143) ;; *) fail "exit status $rc, not 137 or 143" ;; esac
expect_within 15000
report "a stop signal ends a job that recovers, even in the middle of a restart"

# ---- --stall-timeout ----------------------------------------------------

next_job
if [ ! -x "$rworker" ] || [ ! -x "$kvsctl" ]; then
    skip "$rworker or $kvsctl not built"
else
    timeout -k 5 $((60 * slow)) "$kvsrun" -j "$j" -n 2 --stall-timeout $((4 * slow)) \
        "$rworker" 1 >> "$out" 2>&1 &
    kp=$!
    bg="$bg $kp"
    kr_start=$(now_ms)
    # While rank 0 waits in the barrier, kvsctl status names rank 1.
    if ! wait_for 30 sh -c '"$1" -j "$2" status 2>/dev/null | grep -q "waiting: kvs_barrier: 1 of 2 workers arrived, waiting for rank 1"' \
        sh "$kvsctl" "$j"; then
        fail "kvsctl status did not name rank 1 as the one waited on"
    fi
    wait "$kp"
    rc=$?
    took=$(($(now_ms) - kr_start))
    expect_rc 137
    expect_within 30000
    if ! grep -q 'rank 1 (pid [0-9]*) stalled: the others have waited on it for [0-9.]* s; killing it' "$out"; then
        fail "no line naming the stalled rank"
    fi
    report "--stall-timeout kills a stopped worker the others wait on, naming it"
fi

# ---- across hosts -------------------------------------------------------

# hosts2 PROGRAM0 PROGRAM1: a job of two hosts on this machine, one worker
# each; sets rc0, rc1 and took (ms).
hosts2() {
    h_port=$(free_port)
    kr_start=$(now_ms)
    timeout -k 5 $((60 * slow)) "$kvsrun" -j "$j" -n 1 --nodes 2 --node-rank 0 \
        --coord "127.0.0.1:$h_port" sh -c "$1" >> "$out" 2>&1 &
    h0=$!
    timeout -k 5 $((60 * slow)) "$kvsrun" -j "$j" -n 1 --nodes 2 --node-rank 1 \
        --coord "127.0.0.1:$h_port" sh -c "$2" >> "$out" 2>&1 &
    h1=$!
    bg="$bg $h0 $h1"
    wait "$h0"
    rc0=$?
    wait "$h1"
    rc1=$?
    took=$(($(now_ms) - kr_start))
}

next_job
hosts2 true true
if [ "$rc0" -ne 0 ] || [ "$rc1" -ne 0 ]; then fail "the hosts exited $rc0 and $rc1, not 0"; fi
expect_within 15000
report "a 2-host job whose workers end without connecting ends at once (0)"

next_job
hosts2 true 'exit 3'
if [ "$rc0" -ne 0 ] || [ "$rc1" -ne 3 ]; then fail "the hosts exited $rc0 and $rc1, not 0 and 3"; fi
expect_within 15000
report "a 2-host job whose worker fails without connecting ends at once"

next_job
kvsr 20 -n 1 --nodes 2 --node-rank 0 --coord 127.0.0.1:1 --restarts 1 --join-timeout 0 true
expect_rc 2
if ! grep -q "kvsrun: --join-timeout '0' is not a number of seconds above 0" "$out"; then
    fail "no clear refusal"
fi
report "--join-timeout 0 is refused (2)"

# ---- --checkpoint -------------------------------------------------------

next_job
if ! "$kvsd" --help 2>/dev/null | grep -q -- '--checkpoint'; then
    skip "this kvsd has no --checkpoint"
else
    kvsr 30 -n 1 --checkpoint "$rt/ck/a" true
    expect_rc 0
    if [ ! -d "$rt/ck/a" ]; then fail "$rt/ck/a was not made"; fi
    report "--checkpoint makes its folder; the job runs"
fi
