#!/bin/sh
# Description: kvsrun finds the kvsd beside it, uses a kvsd that already serves the job and leaves it be, runs real jobs, passes --staging and --arena to kvsd (the default arena takes 5 GB), names the job itself when not told, refuses a second kvsrun under a running job's name; nothing of a job is left behind.
# TAP output. Programs: $top_builddir/daemon/kvsrun/kvsrun and daemon/kvsd/kvsd; the kvs
# worker (it pushes and pulls one key and checks the sum over the workers) is
# $DIST_WORKER, else $top_builddir/tests/dist_worker. Every job runs in a
# private XDG_RUNTIME_DIR, so the user's own jobs are never touched.
# shellcheck disable=SC2016
set -u
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/kvsrunlib.sh
. "$(dirname "$0")/kvsrunlib.sh"
kvsrun_start 15

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
timeout -k 5 $((60 * slow)) "$kvsd" --job "$j" -n 2 -q >> "$out" 2>&1 &
dpid=$!
bg="$bg $dpid"
if ! wait_for 100 test -S "$dir/$j.sock"; then fail "kvsd did not make its socket"; fi
timeout $((10 * slow)) "$kvsd" --job "$j" -n 2 -q >> "$out" 2>&1
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
    kvsr 30 -n 4 --timeout $((20 * slow)) "$worker"
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
# double it, and the box needs room for it and the other tests. A case of
# capacity, not speed: about 11 s alone on a 2-core machine, mostly the
# kernel faulting in 10 GB of pages, and several times that beside the
# sanitizer build's tests and a busy core, so its bound is wide.
next_job
avail=$(awk '/^MemAvailable:/ { print int($2 / 1048576) }' /proc/meminfo)
if [ ! -x "$worker" ]; then
    skip "no worker program $worker"
elif [ -n "${KVS_SAN_CFLAGS:-}" ]; then
    skip "a 5 GB store is not run in a sanitizer build ($KVS_SAN_CFLAGS)"
elif [ "${avail:-0}" -lt 12 ]; then
    skip "a 5 GB store needs 12 GiB of memory available, ${avail:-?} GiB are"
else
    kvsr 180 -n 1 "$worker" arena_big
    expect_rc 0
    report "a 5 GB store fits kvsd's default arena"
fi

# Without -j kvsrun names the job itself, and says the name.
next_job
timeout -k 5 $((20 * slow)) "$kvsrun" -n 1 sh -c 'echo "job=$KVS_JOB"' >> "$out" 2>&1
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
    KVS_TEST_DIR=$rt/$j timeout -k 5 $((30 * slow)) "$kvsrun" -j "$j" -n 1 "$worker" hold >> "$out" 2>&1 &
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
    KVS_JOB=$j KVS_RANK=0 KVS_NUM_WORKERS=1 timeout $((20 * slow)) "$worker" sums >> "$out" 2>&1 &&
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
