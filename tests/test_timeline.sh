#!/bin/sh
# Description: KVS_TIMELINE / kvsrun --timeline writes one Chrome trace of the job: phases nest per thread, keys are named, the others' waits account for a straggler's delay (through kvsd and through the combine area), faults are instant events, a full buffer counts what it dropped, a bad size is refused, a local store writes its own calls, a job without it writes nothing, and across hosts each host writes its part with host 0's clock measured.
# TAP output. Programs: $top_builddir/daemon/kvsrun/kvsrun and daemon/kvsd/kvsd, the
# worker $top_builddir/tests/dist_worker, examples/quickstart; python3
# reads the files (tests/timeline_check.py). Every job runs in a private
# XDG_RUNTIME_DIR.
set -u
top_builddir=${top_builddir:-.}
top_srcdir=${top_srcdir:-.}
kvsrun=$top_builddir/daemon/kvsrun/kvsrun
worker=$top_builddir/tests/dist_worker
quickstart=$top_builddir/examples/quickstart
check="python3 $top_srcdir/tests/timeline_check.py"

# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"

echo "1..11"
if [ ! -x "$kvsrun" ] || [ ! -x "$worker" ]; then
    skip_all 11 "$kvsrun or $worker not built"
fi
if ! python3 -c 'import json' 2>/dev/null; then
    skip_all 11 "python3 is missing"
fi
private_runtime
KVSD=$top_builddir/daemon/kvsd/kvsd
export KVSD
unset KVS_JOB KVS_RANK KVS_NUM_WORKERS KVS_TIMEOUT KVS_TIMELINE KVS_TIMELINE_EVENTS
trap 'ports_release; rm -rf "$rt"' EXIT
n_test=0
sleep_ms=40

# run NAME ARGS...: kvsrun ARGS, its status in $rc, its output in $rt/NAME.out.
run() {
    name=$1
    shift
    timeout $((120 * slow)) "$kvsrun" "$@" >"$rt/$name.out" 2>&1
    rc=$?
}

for combine in 0 1; do
    t=$rt/straggler$combine.json
    KVS_COMBINE=$combine STRAGGLER_MS=$sleep_ms run straggler$combine --timeline "$t" -n 3 \
        "$worker" straggler
    st=$rc
    [ "$st" -eq 0 ] || sed 's/^/# /' "$rt/straggler$combine.out"
    if [ "$st" -eq 0 ]; then $check straggler "$t" "$sleep_ms" 3 || st=1; fi
    tap "$st" "KVS_COMBINE=$combine: a straggler's delay is the others' wait in every round"
done

# kvsrun says where the file went.
st=0
grep -q "kvsrun: timeline written to $rt/straggler1.json" "$rt/straggler1.out" || st=1
tap $st "kvsrun says where the timeline went"

t=$rt/fault.json
run fault --timeline "$t" -n 3 "$worker" peer_dies
st=0
[ "$rc" -ne 0 ] || { echo "# a job whose worker was killed exited 0"; st=1; }
$check fault "$t" || st=1
tap $st "a death, the job's failure and the others' errors are instant events"

t=$rt/dropped.json
KVS_TIMELINE_EVENTS=1024 run dropped --timeline "$t" -n 2 "$worker" long_list
st=$rc
[ "$st" -eq 0 ] || sed 's/^/# /' "$rt/dropped.out"
$check dropped "$t" || st=1
grep -q "events dropped" "$rt/dropped.out" || { echo "# nothing said of the dropped events"; st=1; }
tap $st "a full buffer drops events and the file counts them"

KVS_TIMELINE_EVENTS=12 run badsize --timeline "$rt/bad.json" -n 2 "$worker" sums
st=0
[ "$rc" -ne 0 ] || st=1
grep -q "KVS_TIMELINE_EVENTS='12'" "$rt/badsize.out" || st=1
[ ! -e "$rt/bad.json" ] || st=1
[ "$st" -eq 0 ] || sed 's/^/# /' "$rt/badsize.out"
tap $st "a bad KVS_TIMELINE_EVENTS is refused with a message"

run nodir --timeline "$rt/no/such/dir/t.json" -n 2 "$worker" sums
st=$rc
grep -q "the timeline was not written: .*$rt/no/such/dir/t.json" "$rt/nodir.out" || st=1
grep -q "kvsrun: no timeline was written to $rt/no/such/dir/t.json" "$rt/nodir.out" || st=1
[ "$st" -eq 0 ] || sed 's/^/# /' "$rt/nodir.out"
tap $st "a timeline that cannot be written: the job still succeeds, and kvsd and kvsrun say so"

# Without it: no file anywhere, and no part left in the runtime directory.
mkdir "$rt/off"
abs() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
akvsd=$(abs "$KVSD")
akvsrun=$(abs "$kvsrun")
aworker=$(abs "$worker")
(cd "$rt/off" && KVSD=$akvsd timeout $((120 * slow)) "$akvsrun" -n 3 "$aworker" straggler >"$rt/off.out" 2>&1)
st=$?
[ -z "$(ls -A "$rt/off")" ] || { echo "# files: $(ls -A "$rt/off")"; st=1; }
[ -z "$(find "$rt/kvs" -name '*.timeline*' 2>/dev/null)" ] || st=1
if grep -q timeline "$rt/off.out"; then st=1; fi
tap $st "a job without a timeline writes none"

# The parts are gone once merged.
st=0
left=$(find "$rt/kvs" -name '*.timeline*' 2>/dev/null)
[ -z "$left" ] || { echo "# left: $left"; st=1; }
tap $st "the workers' parts are removed once merged"

# Two hosts on this machine: each writes its part, host 1 knows host 0's clock.
port=$(free_port)
t=$rt/hosts.json
pids=""
for r in 0 1; do
    STRAGGLER_MS=100 timeout $((120 * slow)) "$kvsrun" --nodes 2 --node-rank $r --coord 127.0.0.1:$port \
        -j "tl-$$" --timeline "$t" -n 2 "$worker" straggler >"$rt/hosts$r.out" 2>&1 &
    pids="$pids $!"
done
st=0
for p in $pids; do
    wait "$p" || st=1
done
$check hosts "$t" "$t.host1" || st=1
[ "$st" -eq 0 ] || sed 's/^/# /' "$rt/hosts0.out" "$rt/hosts1.out"
tap $st "across hosts: each host writes its part, with host 0's clock measured"

if [ -x "$quickstart" ]; then
    KVS_TIMELINE=$rt/local.json timeout $((60 * slow)) "$quickstart" >"$rt/local.out" 2>&1
    st=$?
    [ "$st" -eq 0 ] && $check local "$rt/local.json" || st=1
    tap $st "a process of the local store writes its own timeline"
else
    echo "ok 11 # SKIP $quickstart not built"
fi
