#!/bin/sh
# Description: kvsctl reads a held 2-worker dist_sync job right (status, keys, stats with exact counts, its per-key rounds and latencies, stats --short, stats --json), stops a kvsd cleanly (workers then get KVS_ECLOSED, nothing is left), fails plainly for a job nobody serves or a bad command, and its usage errors; --version of kvsctl, kvsd and kvsrun gives configure's version; kvsctl plan: test_kvsctl_plan.sh.
# TAP output. Programs: $top_builddir/daemon/kvsd/kvsd, daemon/kvsctl/kvsctl and
# tests/dist_worker (scenario "hold": int keys 1, float32 (2,3), and 2,
# int32 (4,); three sync rounds pushed to key 1, one pull; a barrier; then
# it waits for $KVS_TEST_DIR/release; and "stop_waits"). Every job runs in
# a private XDG_RUNTIME_DIR; every command runs under timeout.
set -u
bld=${top_builddir:-.}
kvsd=$bld/daemon/kvsd/kvsd
kvsctl=$bld/daemon/kvsctl/kvsctl
worker=$bld/tests/dist_worker

# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"

echo "1..28"
if [ ! -x "$kvsd" ] || [ ! -x "$kvsctl" ] || [ ! -x "$worker" ]; then
    skip_all 26 "$kvsd, $kvsctl or $worker not built"
fi

private_runtime
unset KVS_JOB KVS_RANK KVS_NUM_WORKERS KVS_TIMEOUT KVS_TEST_EXPECT_CLOSED
dir=$rt/kvs
bg=""                                  # background pids to end on the way out
# TERM, which timeout passes on to the kvsd or worker it runs.
trap 'for p in $bg; do kill -TERM "$p" 2>/dev/null; done; rm -rf "$rt"' EXIT

py=${PYTHON:-python3}
command -v "$py" >/dev/null 2>&1 || py=""
n=0
tap() {  # tap STATUS NAME
    n=$((n + 1))
    if [ "$1" -eq 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fi
}

# start_job NAME [ENV=VALUE...]: kvsd for a 2-worker job and its two
# "hold" workers, then waits until they hold. Sets kvsd_pid, w0, w1, work.
start_job() {
    job=$1
    shift
    work=$rt/$job
    mkdir -p "$work"
    timeout $((60 * slow)) "$kvsd" --job "$job" -n 2 -q &
    kvsd_pid=$!
    bg="$bg $kvsd_pid"
    wait_for 100 test -S "$dir/$job.sock" || echo "# kvsd of $job did not listen"
    env "$@" KVS_TEST_DIR="$work" KVS_JOB="$job" KVS_RANK=0 KVS_NUM_WORKERS=2 KVS_TIMEOUT=$((30 * slow)) \
        timeout $((60 * slow)) "$worker" hold &
    w0=$!
    env "$@" KVS_TEST_DIR="$work" KVS_JOB="$job" KVS_RANK=1 KVS_NUM_WORKERS=2 KVS_TIMEOUT=$((30 * slow)) \
        timeout $((60 * slow)) "$worker" hold &
    w1=$!
    bg="$bg $w0 $w1"
    wait_for 300 test -e "$work/held" || echo "# the workers of $job did not hold"
}

# ctl NAME ARGS...: runs kvsctl, output in $rt/NAME.out and .err, status in ctl_rc.
ctl() {
    out=$1
    shift
    timeout $((10 * slow)) "$kvsctl" "$@" >"$rt/$out.out" 2>"$rt/$out.err"
    ctl_rc=$?
    sed 's/^/#   /' "$rt/$out.out" "$rt/$out.err"
}

# field FILE NAME: the value of a "NAME: value" line.
field() { sed -n "s/^$2: //p" "$1"; }

# ---- a held job, looked at ----------------------------------------------
# look COMBINE: with KVS_COMBINE=0 every round goes through kvsd, which
# counts its pushes and pulls; by default (KVS_COMBINE unset) the workers
# combine key 1's rounds, which kvsd counts as combined rounds only.
look() {
    if [ "$1" = 0 ]; then export KVS_COMBINE=0; else unset KVS_COMBINE; fi
    job=kvsctl-test-$$-look-$1
    start_job "$job"

    ctl status -j "$job" status
    st=$ctl_rc
    [ "$(field "$rt/status.out" job)" = "$job" ] || st=1
    [ "$(field "$rt/status.out" mode)" = sync ] || st=1
    [ "$(field "$rt/status.out" workers)" = "2 expected, 2 connected, 0 left, 0 dead" ] || st=1
    [ "$(field "$rt/status.out" keys)" = 2 ] || st=1
    [ "$(field "$rt/status.out" optimizer)" = none ] || st=1
    [ "$(field "$rt/status.out" failed)" = no ] || st=1
    tap $st "status: sync, 2 workers connected, 2 keys, no optimizer, not failed (KVS_COMBINE=$1)"

    # The job name comes from KVS_JOB when -j is not given.
    KVS_JOB=$job timeout $((10 * slow)) "$kvsctl" status >"$rt/status2.out" 2>"$rt/status2.err"
    st=$?
    [ "$(field "$rt/status2.out" job)" = "$job" ] || st=1
    tap $st "status: the job from KVS_JOB (KVS_COMBINE=$1)"

    # keys: header, then key 1 (version: init + 3 rounds) and key 2, in order.
    ctl keys -j "$job" keys
    st=$ctl_rc
    [ "$(awk 'NR == 1 { print $1, $2, $3, $4, $5 }' "$rt/keys.out")" = "KEY DTYPE SHAPE VERSION ROUNDS" ] || st=1
    [ "$(awk 'NR == 2 { print $1, $2, $3, $4, $5 }' "$rt/keys.out")" = "1 float32 (2,3) 4 3" ] || st=1
    [ "$(awk 'NR == 3 { print $1, $2, $3, $4, $5 }' "$rt/keys.out")" = "2 int32 (4,) 1 0" ] || st=1
    [ "$(wc -l <"$rt/keys.out")" -eq 3 ] || st=1
    tap $st "keys: 1 float32 (2,3) version 4, 3 rounds; 2 int32 (4,) version 1, 0 rounds (KVS_COMBINE=$1)"

    # stats, exactly: a push or pull counts once per key per worker call, with
    # the bytes of its value: 3 rounds x 2 workers x 24 bytes (float32 2x3)
    # pushed, 1 pull x 2 workers x 24 bytes pulled; or, combined, 3 rounds of
    # 1 key that kvsd never sees. Collectives: the inits of keys 1 and 2, the
    # barrier.
    ctl stats -j "$job" stats
    st=$ctl_rc
    if [ "$1" = 0 ]; then
        rounds=3 pushes=6 pulls=2 combined="0 (keys the workers combine: 0)"
    else
        rounds=0 pushes=0 pulls=0 combined="3 (keys the workers combine: 1)"
    fi
    [ "$(field "$rt/stats.out" rounds)" = $rounds ] || st=1
    [ "$(field "$rt/stats.out" pushes)" = $pushes ] || st=1
    [ "$(field "$rt/stats.out" pulls)" = $pulls ] || st=1
    [ "$(field "$rt/stats.out" "bytes pushed")" = $((pushes * 24)) ] || st=1
    [ "$(field "$rt/stats.out" "bytes pulled")" = $((pulls * 24)) ] || st=1
    [ "$(field "$rt/stats.out" "combined rounds")" = "$combined" ] || st=1
    [ "$(field "$rt/stats.out" collectives)" = 3 ] || st=1
    [ "$(field "$rt/stats.out" "requests failed")" = 0 ] || st=1
    [ "$(field "$rt/stats.out" "device buffers")" = "0 open, 0 registered" ] || st=1
    [ "$(field "$rt/stats.out" "device pushes")" = 0 ] || st=1
    [ "$(field "$rt/stats.out" "device pulls")" = 0 ] || st=1
    [ "$(field "$rt/stats.out" "values on GPUs")" = 0 ] || st=1
    waits=$(field "$rt/stats.out" waits)
    case $waits in ''|*[!0-9]*) st=1 ;; esac
    tap $st "stats: $rounds rounds, $pushes pushes, $pulls pulls, combined rounds $combined, 3 collectives, 0 failed, no device buffers (KVS_COMBINE=$1)"

    # stats then lists each key, busiest first: key 1 with its 3 rounds and
    # their latencies (bucket bounds, so never "-"), key 2 with none.
    st=0
    keyrows=$(awk '$1 == "KEY" && $2 == "ROUNDS" { on = 1; next } on { print $1, $2, ($3 == "-"), ($5 == "-") }' \
        "$rt/stats.out" | tr '\n' ';')
    [ "$keyrows" = "1 3 0 0;2 0 1 1;" ] || { echo "# key rows: $keyrows"; st=1; }
    tap $st "stats: key 1 with 3 rounds and its p50 and max, then key 2 with none (KVS_COMBINE=$1)"

    # stats --short: the same counters, without the listings per key.
    ctl short -j "$job" stats --short
    st=$ctl_rc
    [ "$(field "$rt/short.out" rounds)" = $rounds ] || st=1
    [ "$(field "$rt/short.out" pushes)" = $pushes ] || st=1
    grep -q "^keys: 2, of them 0 with rows counted" "$rt/short.out" || st=1
    ! grep -q "^KEY" "$rt/short.out" || st=1
    tap $st "stats --short: the counters, no listing per key (KVS_COMBINE=$1)"

    # stats --json: one JSON object with the same counts; key 1's rounds
    # and its histogram's, each worker's 3 pushes and 96 bytes (3 pushes
    # and a pull of 24 bytes).
    ctl json -j "$job" stats --json
    st=$ctl_rc
    if [ "$1" = 0 ]; then by=false; else by=true; fi
    if [ -z "$py" ]; then
        echo "ok $((n + 1)) # SKIP no python3 to read the JSON"
        n=$((n + 1))
    else
        "$py" - "$rt/json.out" "$job" $rounds $pushes $by <<'PYEOF' || st=1
import json, sys
path, job, rounds, pushes, combined = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "true"
with open(path) as f:
    o = json.load(f)
def check(what, got, want):
    if got != want:
        print("# %s: %r, expected %r" % (what, got, want))
        sys.exit(1)
check("job", o["job"], job)
check("mode", o["mode"], "sync")
check("counters.rounds", o["counters"]["rounds"], rounds)
check("counters.pushes", o["counters"]["pushes"], pushes)
check("counters.combined_rounds", o["counters"]["combined_rounds"], 3 if combined else 0)
check("keys", [(k["key"], k["rounds"], k["combined"]) for k in o["keys"]], [(1, 3, combined), (2, 0, False)])
check("key 1's histogram", sum(o["keys"][0]["histogram"]), 3)
check("key 1's histogram buckets", len(o["keys"][0]["histogram"]), 40)
check("key 1's p50 <= max", o["keys"][0]["p50_ns"] <= o["keys"][0]["max_ns"] and o["keys"][0]["p50_ns"] > 0, True)
check("ranks", sorted((r["rank"], r["pushes"], r["bytes"]) for r in o["ranks"]), [(0, 3, 96), (1, 3, 96)])
PYEOF
        tap $st "stats --json: parses; rounds $rounds, key 1 with 3 rounds in its histogram, each rank 3 pushes and 96 bytes (KVS_COMBINE=$1)"
    fi

    # Released, the workers close and kvsd exits 0 on its own, leaving nothing.
    touch "$work/release"
    st=0
    wait "$w0" || { echo "# rank 0 failed"; st=1; }
    wait "$w1" || { echo "# rank 1 failed"; st=1; }
    wait_for 50 gone "$kvsd_pid" || { echo "# kvsd still runs"; st=1; }
    wait "$kvsd_pid" || { echo "# kvsd exited $?"; st=1; }
    [ ! -e "$dir/$job.sock" ] && [ ! -e "$dir/$job.lock" ] || { echo "# files left"; st=1; }
    tap $st "released: workers and kvsd exit 0, no socket or lock left (KVS_COMBINE=$1)"
    unset KVS_COMBINE
}
look 0
look default

# ---- a kvsd before any worker ---------------------------------------------
job=kvsctl-test-$$-early
timeout $((60 * slow)) "$kvsd" --job "$job" -q &
kvsd_pid=$!
bg="$bg $kvsd_pid"
wait_for 100 test -S "$dir/$job.sock"
ctl early -j "$job" status
st=$ctl_rc
[ "$(field "$rt/early.out" mode)" = "unknown yet" ] || st=1
[ "$(field "$rt/early.out" workers)" = "unknown yet, 0 connected, 0 left, 0 dead" ] || st=1
[ "$(field "$rt/early.out" keys)" = 0 ] || st=1
ctl early-keys -j "$job" keys
[ $ctl_rc -eq 0 ] && [ "$(wc -l <"$rt/early-keys.out")" -eq 1 ] || st=1
tap $st "status and keys before any worker: mode and workers unknown yet, no keys"

# stop of a kvsd nobody uses: it exits 0 at once.
ctl early-stop -j "$job" stop
st=$ctl_rc
[ "$(cat "$rt/early-stop.out")" = stopping ] || st=1
wait_for 30 gone "$kvsd_pid" || { echo "# kvsd still runs"; st=1; }
wait "$kvsd_pid" || { echo "# kvsd exited $?"; st=1; }
tap $st "stop of an idle kvsd"

# ---- a held job, stopped ----------------------------------------------------
job=kvsctl-test-$$-stop
start_job "$job" KVS_TEST_EXPECT_CLOSED=1
t0=$(now_ms)
ctl stop -j "$job" stop
st=$ctl_rc
[ "$(cat "$rt/stop.out")" = stopping ] || st=1
tap $st "stop: kvsd answers 'stopping'"

st=0
wait_for 30 gone "$kvsd_pid" || { echo "# kvsd still runs $((3 * slow)) s after stop"; st=1; }
took=$(($(now_ms) - t0))
echo "# kvsd was gone $took ms after kvsctl stop began"
[ $took -le $((3000 * slow)) ] || st=1
wait "$kvsd_pid" || { echo "# kvsd exited $?"; st=1; }
tap $st "stop: kvsd exits 0 within 3 s"

[ ! -e "$dir/$job.sock" ] && [ ! -e "$dir/$job.lock" ]
tap $? "stop: no socket or lock left"

# Released, each worker's next call fails with KVS_ECLOSED (the scenario
# checks it and exits 0 then).
touch "$work/release"
st=0
wait "$w0" || { echo "# rank 0 exited $?"; st=1; }
wait "$w1" || { echo "# rank 1 exited $?"; st=1; }
tap $st "stop: the workers' next call fails with KVS_ECLOSED"

# ---- stopped while workers wait ---------------------------------------------
# Rank 0 waits to pull a round rank 1 never pushes to, rank 1 in a barrier rank
# 0 never reaches (scenario stop_waits): kvsd answers both with KVS_ECLOSED
# as it stops, and still exits 0 leaving nothing.
job=kvsctl-test-$$-waits
work=$rt/$job
mkdir -p "$work"
timeout $((60 * slow)) "$kvsd" --job "$job" -n 2 -q &
kvsd_pid=$!
bg="$bg $kvsd_pid"
wait_for 100 test -S "$dir/$job.sock"
for r in 0 1; do
    KVS_TEST_DIR=$work KVS_JOB=$job KVS_RANK=$r KVS_NUM_WORKERS=2 KVS_TIMEOUT=$((30 * slow)) \
        timeout $((60 * slow)) "$worker" stop_waits &
    eval "w$r=\$!"
done
bg="$bg $w0 $w1"
wait_for 300 test -e "$work/waiting" || echo "# the workers of $job did not wait"
# Rank 1 writes the file just before its barrier call, so kvsd may not have
# the call yet: ask until status shows both waits (or the deadline passes),
# then check what it says.
both_waits() {
    timeout $((10 * slow)) "$kvsctl" -j "$job" status 2>/dev/null >"$rt/waitpoll.out" &&
        grep -q '^waiting: key 1 round 1: ' "$rt/waitpoll.out" &&
        grep -q '^waiting: kvs_barrier: ' "$rt/waitpoll.out"
}
wait_for 100 both_waits || echo "# kvsd did not have both waits within $((10 * slow)) s"
# status names each wait and who is missing
ctl waitlist -j "$job" status
st=$ctl_rc
grep -q '^waiting: key 1 round 1: 1 of 2 workers pushed, waiting for rank 1$' "$rt/waitlist.out" ||
    { echo "# status does not show the open round"; st=1; }
grep -q '^waiting: kvs_barrier: 1 of 2 workers arrived, waiting for rank 0$' "$rt/waitlist.out" ||
    { echo "# status does not show the barrier"; st=1; }
ctl waits -j "$job" stop
[ "$ctl_rc" -eq 0 ] || st=1
wait_for 30 gone "$kvsd_pid" || { echo "# kvsd still runs $((3 * slow)) s after stop"; st=1; }
wait "$kvsd_pid" || { echo "# kvsd exited $?"; st=1; }
wait "$w0" || { echo "# rank 0 exited $?"; st=1; }
wait "$w1" || { echo "# rank 1 exited $?"; st=1; }
[ ! -e "$dir/$job.sock" ] && [ ! -e "$dir/$job.lock" ] || { echo "# files left"; st=1; }
tap $st "stop while a round and a barrier wait: both fail with KVS_ECLOSED, kvsd exits 0"

# ---- errors -----------------------------------------------------------------
job=kvsctl-test-$$-nobody
ctl nobody -j "$job" status
st=0
[ $ctl_rc -eq 1 ] || st=1
grep -q "kvsctl: no kvsd serves job '$job'" "$rt/nobody.err" || st=1
[ ! -s "$rt/nobody.out" ] || st=1
tap $st "a job nobody serves: exit 1, 'no kvsd serves job'"

st=0
ctl unknown -j "$job" frobnicate
[ $ctl_rc -eq 2 ] && grep -q "unknown command 'frobnicate'" "$rt/unknown.err" || st=1
ctl none -j "$job"
[ $ctl_rc -eq 2 ] || st=1
ctl two -j "$job" status keys
[ $ctl_rc -eq 2 ] || st=1
ctl badopt -x status
[ $ctl_rc -eq 2 ] || st=1
ctl badjob -j ../x status
[ $ctl_rc -eq 2 ] || st=1
tap $st "usage errors (unknown or no command, two commands, bad option or job): exit 2"

st=0
ctl statsopt -j "$job" stats --yaml
[ $ctl_rc -eq 2 ] && grep -q "stats: unknown option '--yaml'" "$rt/statsopt.err" || st=1
ctl jsonkeys -j "$job" keys --json
[ $ctl_rc -eq 2 ] && grep -q "keys: unknown option '--json'" "$rt/jsonkeys.err" || st=1
ctl shortjson -j "$job" stats --short --json
[ $ctl_rc -eq 2 ] && grep -q "stats: --short or --json, not both" "$rt/shortjson.err" || st=1
ctl topopt top --twice "$job"
[ $ctl_rc -eq 2 ] && grep -q "top: unknown option '--twice'" "$rt/topopt.err" || st=1
ctl topdelay top -d 0 "$job"
[ $ctl_rc -eq 2 ] && grep -q "top: -d '0'" "$rt/topdelay.err" || st=1
ctl toptwo -j a top b
[ $ctl_rc -eq 2 ] && grep -q "the job is given twice" "$rt/toptwo.err" || st=1
ctl topjobs top a b
[ $ctl_rc -eq 2 ] || st=1
tap $st "usage errors of stats and top (unknown option, a bad interval, two jobs): exit 2"

st=0
ctl jsonnobody -j "$job" stats --json
[ $ctl_rc -eq 1 ] && grep -q "kvsctl: no kvsd serves job '$job'" "$rt/jsonnobody.err" || st=1
[ ! -s "$rt/jsonnobody.out" ] || st=1
ctl topnobody top --once "$job"
[ $ctl_rc -eq 1 ] && grep -q "kvsctl: no kvsd serves job '$job'" "$rt/topnobody.err" || st=1
ctl topnotty top "$job"
[ $ctl_rc -eq 2 ] && grep -q "top needs a terminal" "$rt/topnotty.err" || st=1
tap $st "stats --json and top --once of a job nobody serves: exit 1; top without a terminal: exit 2"

st=0
ctl help --help
[ $ctl_rc -eq 0 ] && grep -q "usage: kvsctl" "$rt/help.out" || st=1
# --version of the three programs: configure's version (kvs.pc has it).
version=$(sed -n 's/^Version: //p' "$bld/kvs.pc")
[ -n "$version" ] || st=1
ctl version --version
[ $ctl_rc -eq 0 ] && [ "$(cat "$rt/version.out")" = "kvsctl (kvs) $version" ] || st=1
for prog in kvsd:"$kvsd" kvsrun:"$bld/daemon/kvsrun/kvsrun"; do
    said=$(timeout $((10 * slow)) "${prog#*:}" --version 2>&1) &&
        [ "$said" = "${prog%%:*} (kvs) $version" ] || { st=1; echo "# ${prog%%:*}: $said"; }
done
tap $st "--help and --version (kvsctl, kvsd, kvsrun: \"NAME (kvs) $version\")"
exit 0
