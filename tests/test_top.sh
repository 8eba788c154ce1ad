#!/bin/sh
# Description: kvsctl top on a busy 3-worker dist_sync job whose rank 1 sleeps before each round: --once and a tmux pane of 80x24 show every rank (the sleeper waits least, the others most of the interval) and both keys with their rounds/s and latencies; q ends top with status 0 and the terminal as it was; the job's end ends top with a message; stats --json names string keys right.
# TAP output. Programs: $top_builddir/daemon/kvsd/kvsd, daemon/kvsctl/kvsctl and
# tests/dist_worker (scenario "busy": string keys "small" and
# 'big "one"<tab>2', pushed and pulled until $KVS_TEST_DIR/release). Every
# job runs in a private XDG_RUNTIME_DIR, tmux on a socket of its own; every
# wait has a deadline.
set -u
bld=${top_builddir:-.}
kvsd=$bld/daemon/kvsd/kvsd
kvsctl=$bld/daemon/kvsctl/kvsctl
worker=$bld/tests/dist_worker

# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"

echo "1..7"
if [ ! -x "$kvsd" ] || [ ! -x "$kvsctl" ] || [ ! -x "$worker" ]; then
    skip_all 7 "$kvsd, $kvsctl or $worker not built"
fi
if ! command -v tmux >/dev/null 2>&1; then
    skip_all 7 "tmux is not installed (scripts/setup-deps installs it)"
fi

private_runtime
unset KVS_JOB KVS_RANK KVS_NUM_WORKERS KVS_TIMEOUT KVS_COMBINE TMUX
kvsctl=$(cd "$(dirname "$kvsctl")" && pwd)/kvsctl   # the tmux pane starts elsewhere
py=${PYTHON:-python3}
command -v "$py" >/dev/null 2>&1 || py=""
tm="tmux -S $rt/tmux.sock -f /dev/null"
bg=""
trap '$tm kill-server 2>/dev/null; for p in $bg; do kill -TERM "$p" 2>/dev/null; done
      rm -rf "$rt"' EXIT
n_test=0

# A 3-worker job of "busy" workers, rank 1 the sleeper.
job=top-test-$$
work=$rt/$job
mkdir -p "$work"
timeout $((90 * slow)) "$kvsd" --job "$job" -n 3 -q &
kvsd_pid=$!
bg="$bg $kvsd_pid"
wait_for 100 test -S "$rt/kvs/$job.sock" || echo "# kvsd of $job did not listen"
for r in 0 1 2; do
    KVS_TEST_DIR=$work KVS_JOB=$job KVS_RANK=$r KVS_NUM_WORKERS=3 KVS_TIMEOUT=$((30 * slow)) \
        KVS_TEST_SLOW_RANK=1 KVS_TEST_SLOW_MS=50 KVS_TEST_BUSY_S=$((60 * slow)) \
        timeout $((90 * slow)) "$worker" busy &
    eval "w$r=\$!"
done
bg="$bg $w0 $w1 $w2"
wait_for 300 test -e "$work/busy" || echo "# the workers of $job did not start their rounds"

# check_frame FILE WHAT: the frame in FILE shows ranks 0-2 with their
# figures, rank 1 waiting under 40% of the interval and ranks 0 and 2 over
# 60% (each waits for rank 1's 50 ms a round), and both keys with rounds
# per second and latencies; no line is wider than 80 columns.
check_frame() {
    cf_st=0
    for r in 0 1 2; do
        figures='[0-9]+ +[0-9]+\.[0-9] +[0-9.]+ [KMG]?B/s +[0-9]+\.[0-9] +[0-9]+\.[0-9]%'
        grep -Eq "^ +$r +$figures" "$1" ||
            { echo "# $2: no figures for rank $r"; cf_st=1; }
    done
    # A rank's line: RANK PID ROUNDS/S BYTES UNIT WAIT-MS WAIT%.
    waits=$(awk '$1 ~ /^[0-9]+$/ && NF == 7 { sub(/%$/, "", $7); printf "%s=%s ", $1, $7 }' "$1")
    echo "# $2: wait % by rank: $waits"
    awk '$1 ~ /^[0-9]+$/ && NF == 7 { sub(/%$/, "", $7); w[$1] = $7 + 0 }
         END { exit !(w[1] < 40 && w[0] > 60 && w[2] > 60) }' "$1" ||
        { echo "# $2: rank 1 does not wait least"; cf_st=1; }
    # A key's line: KEY ROUNDS/S ROUNDS P50 P99 BY.
    for k in '"small"' '"big \"one\"\t2"'; do
        grep -F "$k" "$1" | awk '{ exit !($(NF - 4) > 0 && $(NF - 2) != "-") }' ||
            { echo "# $2: no rounds or latency for key $k"; cf_st=1; }
    done
    grep -Eq "^kvsctl top( \(q quits\))?: job $job, sync, 3/3 workers, kvsd CPU [0-9.]+%" "$1" ||
        { echo "# $2: no head line"; cf_st=1; }
    if awk 'length($0) > 80 { bad = 1 } END { exit !bad }' "$1"; then
        echo "# $2: a line is wider than 80 columns"
        cf_st=1
    fi
    return $cf_st
}

# ---- --once: one frame as text ------------------------------------------------
st=0
timeout $((20 * slow)) "$kvsctl" top --once -d 1 "$job" >"$rt/once.out" 2>"$rt/once.err" || st=1
sed 's/^/#   /' "$rt/once.out" "$rt/once.err"
check_frame "$rt/once.out" "--once" || st=1
tap $st "top --once: ranks 0-2 with figures, rank 1 waits least, both keys with rounds/s"

# ---- stats --json: string keys --------------------------------------------------
st=0
timeout $((10 * slow)) "$kvsctl" -j "$job" stats --json >"$rt/json.out" 2>"$rt/json.err" || st=1
if [ -z "$py" ]; then
    n_test=$((n_test + 1))
    echo "ok $n_test # SKIP no python3 to read the JSON"
else
    "$py" - "$rt/json.out" <<'PYEOF' || st=1
import json, sys
o = json.load(open(sys.argv[1]))
keys = {k["key"]: k for k in o["keys"]}
if sorted(keys) != ['big "one"\t2', "small"]:
    print("# keys: %r" % sorted(keys))
    sys.exit(1)
small, big = keys["small"], keys['big "one"\t2']
if not (small["combined"] and not big["combined"] and small["rounds"] > 0 and big["rounds"] > 0
        and sum(small["histogram"]) > 0 and sum(big["histogram"]) > 0):
    print("# small %r, big %r" % (small, big))
    sys.exit(1)
if sorted(r["rank"] for r in o["ranks"]) != [0, 1, 2]:
    print("# ranks: %r" % o["ranks"])
    sys.exit(1)
PYEOF
    tap $st "stats --json: string keys 'small' and 'big \"one\"<tab>2' by name, with rounds"
fi

# ---- the live view in a tmux pane of 80x24 ---------------------------------------
# The pane's shell keeps the terminal's settings before and after kvsctl
# and kvsctl's exit status, then stays, so that the screen can be read.
# NAME.pid: kvsctl's process id.
cat >"$rt/pane.sh" <<EOF
XDG_RUNTIME_DIR='$rt'
export XDG_RUNTIME_DIR
stty -g >"$rt/\$1.before"
sh -c 'echo \$\$ >"\$1"; exec "\$2" top "\$3"' sh "$rt/\$1.pid" '$kvsctl' '$job'
echo \$? >"$rt/\$1.rc"
stty -g >"$rt/\$1.after"
sleep 60
EOF
pane() {  # pane NAME: starts kvsctl top on $job in a new 80x24 session NAME
    $tm new-session -d -x 80 -y 24 -s "$1" "sh '$rt/pane.sh' '$1'"
}
# rc_is NAME STATUS: kvsctl in pane NAME exited with STATUS.
rc_is() {
    [ "$(cat "$rt/$1.rc" 2>/dev/null)" = "$2" ] && return 0
    echo "# $1: exit status $(cat "$rt/$1.rc" 2>/dev/null), expected $2"
    return 1
}
# frame NAME: 0 once the pane shows a frame of figures (the second: the
# first sample needs an interval to compare with), saved in $rt/NAME.screen.
frame() {
    $tm capture-pane -p -t "$1" >"$rt/$1.screen" 2>/dev/null &&
        grep -Eq '^ +2 +[0-9]+ +[0-9]+\.[0-9]' "$rt/$1.screen" &&
        grep -q '"small"' "$rt/$1.screen"
}

st=0
pane live || { echo "# tmux could not start a session"; st=1; }
wait_for 150 frame live || { echo "# no frame within $((15 * slow)) s"; st=1; }
sleep 1.2                              # a frame of a whole interval
frame live || st=1
sed 's/^/#   /' "$rt/live.screen"
check_frame "$rt/live.screen" "tmux" || st=1
[ "$(wc -l <"$rt/live.screen")" -le 24 ] || { echo "# more than 24 lines"; st=1; }
tap $st "top in an 80x24 pane: ranks 0-2 with figures, rank 1 waits least, both keys with rounds/s"

st=0
$tm send-keys -t live q
wait_for 50 test -s "$rt/live.rc" || { echo "# kvsctl did not end within $((5 * slow)) s of q"; st=1; }
rc_is live 0 || st=1
tap $st "q ends top with exit status 0"

st=0
wait_for 50 test -s "$rt/live.after" || st=1
if [ ! -s "$rt/live.before" ] || ! cmp -s "$rt/live.before" "$rt/live.after"; then
    echo "# stty before: $(cat "$rt/live.before")"
    echo "# stty after: $(cat "$rt/live.after")"
    st=1
fi
$tm capture-pane -p -t live >"$rt/live.after.screen" 2>/dev/null || st=1
if grep -q 'ROUNDS/S' "$rt/live.after.screen"; then
    echo "# the view is still on the screen: the alternate screen was not left"
    st=1
fi
tap $st "after q the terminal's settings are as before, the normal screen back"

# ---- SIGTERM, and the job's end ---------------------------------------------------
st=0
pane term || st=1
wait_for 150 frame term || { echo "# no frame within $((15 * slow)) s"; st=1; }
pid=$(cat "$rt/term.pid" 2>/dev/null)
if [ -n "$pid" ]; then kill -TERM "$pid"; else echo "# no kvsctl top to signal"; st=1; fi
wait_for 50 test -s "$rt/term.after" || { echo "# kvsctl did not end within $((5 * slow)) s of SIGTERM"; st=1; }
rc_is term 143 || st=1
cmp -s "$rt/term.before" "$rt/term.after" || { echo "# stty differs after SIGTERM"; st=1; }
tap $st "SIGTERM ends top as the signal does (status 143), the terminal's settings as before"

st=0
pane end || st=1
wait_for 150 frame end || { echo "# no frame within $((15 * slow)) s"; st=1; }
touch "$work/release"
for r in 0 1 2; do
    eval "wpid=\$w$r"
    wait "$wpid" || { echo "# rank $r exited $?"; st=1; }
done
wait_for 100 gone "$kvsd_pid" || { echo "# kvsd still runs"; st=1; }
wait_for 50 test -s "$rt/end.rc" || { echo "# kvsctl top did not end within $((5 * slow)) s of the job"; st=1; }
rc_is end 0 || st=1
$tm capture-pane -p -t end >"$rt/end.screen" 2>/dev/null
sed 's/^/#   /' "$rt/end.screen"
grep -q "kvsctl top: job '$job' has ended" "$rt/end.screen" || { echo "# no message"; st=1; }
cmp -s "$rt/end.before" "$rt/end.after" || { echo "# stty differs after the job's end"; st=1; }
tap $st "the job's end ends top with status 0 and a message, the terminal as before"
exit 0
