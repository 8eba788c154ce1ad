#!/bin/sh
# Description: kvsrun starts kvsd and N workers, exits with the first failing worker's status, passes signals on, stops the rest, leaves nothing of the job behind, and sizes the arena: --arena reaches kvsd, the default takes 5 GB.
# TAP output. Programs: $top_builddir/daemon/kvsrun and daemon/kvsd; the kvs
# worker (it pushes and pulls one key and checks the sum over the workers) is
# $DIST_WORKER, else $top_builddir/tests/dist_worker. Every job runs in a
# private XDG_RUNTIME_DIR, so the user's own jobs are never touched.
# The workers' shell commands are single-quoted on purpose: they expand
# KVS_RANK and friends in the worker, not here.
# shellcheck disable=SC2016
set -u
top_builddir=${top_builddir:-.}
kvsrun=$top_builddir/daemon/kvsrun
kvsd=$top_builddir/daemon/kvsd/kvsd
worker=${DIST_WORKER:-$top_builddir/tests/dist_worker}

# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"

echo "1..28"
if [ ! -x "$kvsrun" ] || [ ! -x "$kvsd" ]; then
    skip_all 28 "$kvsrun or $kvsd not built"
fi

private_runtime
KVSD=$kvsd                             # the kvsd under test, not one from PATH
export KVSD
unset KVS_JOB KVS_RANK KVS_NUM_WORKERS KVS_TIMEOUT
dir=$rt/kvs
out=$rt/out
bg=""                                  # background pids to end on the way out
trap 'for p in $bg; do kill -KILL "$p" 2>/dev/null; done; rm -rf "$rt"' EXIT

n=0
bad=""
case_no=0

# A fresh job name per case; zero-padded so that no name is a prefix of
# another (pgrep -f matches substrings).
next_job() {
    case_no=$((case_no + 1))
    j=$(printf 'kvsrun-test-%d-case%02d' $$ "$case_no")
    bad=""
    : > "$out"
}

# What of job $1 is still there: processes naming it, processes carrying
# it in their environment (workers and their children), its files.
leftovers() {
    for p in $(pgrep -f -- "$1"); do
        echo "process $p ($(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null))"
    done
    grep -lzxF "KVS_JOB=$1" /proc/[0-9]*/environ 2>/dev/null | while read -r f; do
        echo "process ${f#/proc/} with KVS_JOB=$1"
    done
    for f in "$dir/$1.sock" "$dir/$1.lock" "$dir/$1.run"; do
        if [ -e "$f" ]; then echo "file $f"; fi
    done
}

job_procs() { grep -lzxF "KVS_JOB=$1" /proc/[0-9]*/environ 2>/dev/null | wc -l; }

at_least_procs() { [ "$(job_procs "$1")" -ge "$2" ]; }

fail() { bad="$bad${bad:+; }$*"; }

# kvsr SECONDS ARGS...: kvsrun -j $j ARGS under timeout; sets rc and took (ms).
kvsr() {
    kr_limit=$1
    shift
    kr_start=$(now_ms)
    timeout -k 5 "$kr_limit" "$kvsrun" -j "$j" "$@" >> "$out" 2>&1
    rc=$?
    took=$(($(now_ms) - kr_start))
}

# report DESC: one TAP line for the case, with nothing of the job left
# behind as part of every case.
report() {
    left=$(leftovers "$j")
    if [ -n "$left" ]; then fail "left behind: $(echo "$left" | tr '\n' ' ')"; fi
    n=$((n + 1))
    if [ -z "$bad" ]; then
        echo "ok $n - $1"
    else
        echo "not ok $n - $1"
        echo "# $bad"
        sed 's/^/#   /' "$out"
    fi
}

skip() { n=$((n + 1)); echo "ok $n # SKIP $1"; }

expect_rc() { if [ "$rc" -ne "$1" ]; then fail "exit status $rc, not $1"; fi; }
expect_within() { if [ "$took" -gt "$1" ]; then fail "took $took ms, more than $1"; fi; }

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
report "a worker killed by SIGKILL makes it 137"

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
    timeout 10 "$kvsrun" $args >> "$out" 2>&1
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
    timeout -k 5 30 "$kvsrun" -j "$j" "$@" >> "$out" 2>&1 &
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

# ---- finding kvsd -------------------------------------------------------

next_job
daemon_dir=$(cd "$top_builddir/daemon" && pwd -P)
# The worker names the executable of the kvsd serving its job; kvsrun
# runs without KVSD in its environment.
(unset KVSD; kvsr 20 -n 1 sh -c \
    'p=$(pgrep -f -- "--job $KVS_JOB -n"); echo "exe: $(readlink /proc/$p/exe)"'; exit $rc)
rc=$?
expect_rc 0
case $(grep '^exe: ' "$out") in
    "exe: $daemon_dir/kvsd/kvsd" | "exe: $daemon_dir/.libs/"*kvsd) ;;
    *) fail "kvsd not found beside kvsrun ($daemon_dir)" ;;
esac
report "without --kvsd or KVSD, the kvsd beside kvsrun is started"

# ---- an existing kvsd ---------------------------------------------------

next_job
timeout -k 5 60 "$kvsd" --job "$j" -n 2 -q >> "$out" 2>&1 &
dpid=$!
bg="$bg $dpid"
if ! wait_for 100 test -S "$dir/$j.sock"; then fail "kvsd did not make its socket"; fi
timeout 10 "$kvsd" --job "$j" -n 2 -q >> "$out" 2>&1
rc=$?
expect_rc 3
n=$((n + 1))
if [ -z "$bad" ]; then echo "ok $n - a second kvsd for the same job is refused (3)"; else
    echo "not ok $n - a second kvsd for the same job is refused (3)"; echo "# $bad"; fi
bad=""
n=$((n + 1))
if [ -e "$dir/$j.lock" ]; then
    echo "ok $n - the refused kvsd leaves the serving one's lock file alone"
else
    echo "not ok $n - the refused kvsd leaves the serving one's lock file alone"
fi

kvsr 20 -n 2 /bin/true
expect_rc 0
if ! kill -0 "$(pgrep -P "$dpid")" 2>/dev/null; then fail "the serving kvsd is gone"; fi
if [ ! -S "$dir/$j.sock" ]; then fail "the serving kvsd's socket is gone"; fi
n=$((n + 1))
if [ -z "$bad" ]; then echo "ok $n - kvsrun uses the kvsd that serves the job and leaves it be"; else
    echo "not ok $n - kvsrun uses the kvsd that serves the job and leaves it be"
    echo "# $bad"; sed 's/^/#   /' "$out"; fi
bad=""

if [ -x "$worker" ]; then
    kvsr 30 -n 2 "$worker"
    expect_rc 0
    wait "$dpid"
    drc=$?
    if [ "$drc" -ne 0 ]; then fail "the serving kvsd exited $drc after its workers left"; fi
    report "a real job on that kvsd passes, and the kvsd leaves with its workers"
else
    kill -TERM "$(pgrep -P "$dpid")" 2>/dev/null
    wait "$dpid"
    skip "no worker program $worker"
fi

# ---- real jobs ------------------------------------------------------------

next_job
if [ -x "$worker" ]; then
    kvsr 30 -n 2 "$worker"
    expect_rc 0
    # kvsd leaves on its own once both workers have: no 3 s wait.
    expect_within 2500
    report "a real 2-worker job passes"
else
    skip "no worker program $worker"
fi

next_job
if [ -x "$worker" ]; then
    kvsr 30 -n 4 --timeout 20 "$worker"
    expect_rc 0
    report "a real 4-worker job passes"
else
    skip "no worker program $worker"
fi

next_job
if [ -x "$worker" ]; then
    # 64 KiB of staging: the 1200x1200 float32 arrays of "big" cannot be
    # copied in, and the worker says why.
    kvsr 30 -n 1 --staging 64K "$worker" big
    expect_rc 1
    if ! grep -q "staging area" "$out"; then fail "no word of the staging area"; fi
    report "--staging reaches kvsd"
else
    skip "no worker program $worker"
fi

next_job
kvsr 10 -n 1 --staging 12X /bin/true
expect_rc 2
if ! grep -q "not a size" "$out"; then fail "no usage message"; fi
report "a bad --staging is a usage error"

next_job
kvsr 10 -n 1 --arena 4Q /bin/true
expect_rc 2
if ! grep -q "kvsrun: --arena '4Q' is not a size" "$out"; then fail "no usage message"; fi
kvsr 10 -n 1 --arena 512K /bin/true
expect_rc 2
if ! grep -q "kvsrun: --arena '512K' is below the arena's minimum of 1M" "$out"; then
    fail "no word of the minimum"
fi
report "a bad --arena, or one below 1M, is a usage error"

# ---- the arena ------------------------------------------------------------

next_job
if [ -x "$worker" ]; then
    # 100M of arena: a second value of 64 MiB does not fit; the worker
    # checks that its init says the arena is full and names --arena, and
    # that the first key is still there.
    kvsr 30 -n 1 --arena 100M "$worker" arena_full
    expect_rc 0
    report "--arena reaches kvsd; an init past it says the arena is full"
else
    skip "no worker program $worker"
fi

# 5 GB of values (25 keys of 200 MB) with every flag at its default: past
# the 4 GiB kvsd's arena once had. The sanitizers' shadow memory would
# double it, and the box needs room for it and the other tests.
next_job
avail=$(awk '/^MemAvailable:/ { print int($2 / 1048576) }' /proc/meminfo)
if [ ! -x "$worker" ]; then
    skip "no worker program $worker"
elif [ -n "${KVS_SAN_CFLAGS:-}" ]; then
    skip "a 5 GB store is not run in a sanitizer build ($KVS_SAN_CFLAGS)"
elif [ "${avail:-0}" -lt 12 ]; then
    skip "a 5 GB store needs 12 GiB of memory available, ${avail:-?} GiB are"
else
    kvsr 60 -n 1 "$worker" arena_big
    expect_rc 0
    report "a 5 GB store fits kvsd's default arena"
fi

# Without -j kvsrun names the job itself, and says the name.
next_job
timeout -k 5 20 "$kvsrun" -n 1 sh -c 'echo "job=$KVS_JOB"' >> "$out" 2>&1
rc=$?
expect_rc 0
picked=$(sed -n 's/^job=//p' "$out")
j=$picked                              # what report looks for left behind
if [ -z "$picked" ] || ! grep -q "^kvsrun: job $picked (kvsctl -j $picked status)$" "$out"; then
    fail "the name kvsrun picked ('$picked') is not said"
fi
report "kvsrun says the job name it picks"

# A second kvsrun under the name of a running job is refused before it
# starts a worker, and says whose the name is. A worker started without
# kvsrun into that job is refused by kvsd, and told why.
next_job
if [ -x "$worker" ]; then
    mkdir -p "$rt/$j"
    KVS_TEST_DIR=$rt/$j timeout -k 5 30 "$kvsrun" -j "$j" -n 1 "$worker" hold >> "$out" 2>&1 &
    first=$!
    bg="$bg $first"
    wait_for 100 test -e "$rt/$j/held"
    dpid=$(pgrep -f -- "--job $j -n")
    kvsr 20 -n 1 sh -c 'echo "second job started"'
    expect_rc 1
    if grep -q "second job started" "$out"; then fail "the second job's worker ran"; fi
    if ! grep -q "^kvsrun: job $j is already running (kvsd pid $dpid); pick another name with -j$" \
        "$out"; then
        fail "the second kvsrun does not name the job and its kvsd ($dpid)"
    fi
    KVS_JOB=$j KVS_RANK=0 KVS_NUM_WORKERS=1 timeout 20 "$worker" sums >> "$out" 2>&1 &&
        fail "a worker joined the running job as its rank 0"
    grep -q "rank 0 has already joined job '$j' (is another job running under that name" \
        "$out" || fail "the lone worker is not told why"
    : > "$rt/$j/release"
    wait "$first" || fail "the first job failed"
    report "a second kvsrun under a running job's name is refused, and says whose it is"
else
    skip "no worker program $worker"
fi

next_job
if [ -x "$worker" ]; then
    # Rank 1 never joins: rank 0 waits in the store until kvsrun stops it.
    kvsr 30 -n 2 --grace 1 sh -c 'if [ "$KVS_RANK" = 1 ]; then exit 9; fi; exec "$0"' "$worker"
    expect_rc 9
    expect_within 4000
    report "a real job whose rank 1 fails ends with status 9"
else
    skip "no worker program $worker"
fi
