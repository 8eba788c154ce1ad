#!/bin/sh
# Description: kvsrun starts kvsd and N workers, exits with the first failing worker's status, passes signals on, stops the rest, and leaves nothing of the job behind; its usage errors. Finding kvsd, an existing kvsd, real jobs, --staging and the arena, job names: test_kvsrun_jobs.sh.
# TAP output. Programs: $top_builddir/daemon/kvsrun/kvsrun and daemon/kvsd. Every
# job runs in a private XDG_RUNTIME_DIR, so the user's own jobs are never
# touched.
# shellcheck disable=SC2016
set -u
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/kvsrunlib.sh
. "$(dirname "$0")/kvsrunlib.sh"
kvsrun_start 13

# ---- exit statuses ------------------------------------------------------

next_job
kvsr 20 -n 2 /bin/true
expect_rc 0
report "kvsrun -n 2 /bin/true exits 0"

next_job
kvsr 20 -n 3 --timeout 7 sh -c 'echo "$KVS_JOB $KVS_RANK $KVS_NUM_WORKERS $KVS_TIMEOUT"'
expect_rc 0
got=$(grep "^$j " "$out" | sort)
want=$(printf '%s 0 3 7\n%s 1 3 7\n%s 2 3 7' "$j" "$j" "$j")
if [ "$got" != "$want" ]; then fail "workers saw '$got'"; fi
report "workers get KVS_JOB, KVS_RANK, KVS_NUM_WORKERS and KVS_TIMEOUT"

next_job
kvsr 20 -n 3 sh -c 'exit $KVS_RANK'
if [ "$rc" -ne 1 ] && [ "$rc" -ne 2 ]; then fail "exit status $rc, not 1 or 2"; fi
report "kvsrun exits with the first failing rank's status"

next_job
kvsr 20 -n 2 --grace 1 sh -c 'if [ "$KVS_RANK" = 1 ]; then kill -KILL $$; fi; exec sleep 30'
expect_rc 137
expect_within 4000
report "a worker killed by SIGKILL makes it 137 within grace + 3 s"

next_job
kvsr 20 -n 2 --grace 2 sh -c 'if [ "$KVS_RANK" = 1 ]; then exit 4; fi; exec sleep 30'
expect_rc 4
expect_within 5000
report "rank 1 fails while rank 0 sleeps: status 4 within grace + 3 s"

# Rank 0 ends on its own, well within the grace, which the message gives as
# written: 1000 s, not 1e+03 s.
next_job
kvsr 20 -n 2 --grace 1000 sh -c 'if [ "$KVS_RANK" = 1 ]; then exit 4; fi; sleep 1'
expect_rc 4
if ! grep -q "^kvsrun: rank 1 (pid [0-9]*) exited with status 4; the other workers get 1000 s to exit$" \
    "$out"; then
    fail "the grace is not said as given"
fi
report "kvsrun gives the grace in its message as it was given"

next_job
kvsr 20 -n 2 --grace 1 sh -c 'if [ "$KVS_RANK" = 1 ]; then exit 5; fi; trap "" TERM; sleep 30'
expect_rc 5
expect_within 5000
report "a worker that ignores SIGTERM is killed 2 s after it"

next_job
kvsr 20 -n 2 sh -c 'sleep 30 & exit 0'
expect_rc 0
expect_within 8000
report "what workers leave running in their process groups is stopped"

next_job
kvsr 20 -n 2 ./no-such-program-here
expect_rc 127
if ! grep -q '^kvsrun: cannot run' "$out"; then fail "no 'kvsrun: cannot run' message"; fi
report "a program that does not exist: 127 and a message"

next_job
kvsr 20 -n 2 --kvsd /bin/false /bin/true
expect_rc 1
if ! grep -q '^kvsrun: .*kvsd.*exited with status 1' "$out"; then fail "kvsd's status not reported"; fi
report "a kvsd that exits before it serves: 1 and its status reported"

next_job
urc=""
for args in "" "-n" "-n 0 true" "-n 1025 true" "-n x true" "-n 2" "-n 2 -j .hidden true" \
    "-n 2 -j a/b true" "-n 2 --grace -1 true" "-n 2 --timeout 0 true" "-n 2 --timeout 0x10 true" \
    "-n 2 --timeout 30s true" "-n 2 --grace nan true" "--no-such-option"; do
    # shellcheck disable=SC2086
    timeout $((10 * slow)) "$kvsrun" $args >> "$out" 2>&1
    urc="$urc $?"
done
if [ "$urc" != " 2 2 2 2 2 2 2 2 2 2 2 2 2 2" ]; then fail "exit statuses$urc"; fi
if ! grep -q "^kvsrun: --timeout '0x10' is not a number of seconds" "$out"; then
    fail "a hex --timeout, which the workers' kvs_create would refuse, is taken"
fi
if grep -v -e '^kvsrun: ' -e "^Try 'kvsrun --help'" "$out" | grep -q .; then
    fail "a message without the 'kvsrun: ' prefix"
fi
report "usage errors exit 2 with a 'kvsrun: ' message"

# ---- signals ------------------------------------------------------------

# start_bg ARGS...: kvsrun -j $j ARGS in the background; sets tpid (its
# timeout) and kpid (kvsrun itself).
start_bg() {
    timeout -k 5 $((30 * slow)) "$kvsrun" -j "$j" "$@" >> "$out" 2>&1 &
    tpid=$!
    bg="$bg $tpid"
    kpid=""
    wait_for 100 eval 'kpid=$(pgrep -P "$tpid")'
}

next_job
start_bg -n 2 sleep 30
if ! wait_for 100 at_least_procs "$j" 2; then fail "workers did not start"; fi
t0=$(now_ms)
kill -TERM "$kpid"
wait "$tpid"
rc=$?
took=$(($(now_ms) - t0))
expect_rc 143
expect_within 3000
report "SIGTERM to kvsrun stops the job at once (143)"

next_job
start_bg -n 2 sh -c 'trap "exit 42" TERM; sleep 30 & wait'
# Two shells and their two sleeps: the traps are set.
if ! wait_for 100 at_least_procs "$j" 4; then fail "workers did not start"; fi
kill -TERM "$kpid"
wait "$tpid"
rc=$?
expect_rc 42
report "the signal reaches the workers, whose handlers decide the status"

