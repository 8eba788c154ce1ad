#!/bin/sh
# Description: kvsctl timeline plot gives each rank's wait per round as the union of its "waiting for others" intervals (to the microsecond, overlapping keys counted once), names the straggler and draws a PNG with gnuplot; kvsctl timeline merge joins the parts of hosts into one valid file; malformed, cut or foreign files fail with exit 1 and a plain message, and never crash.
# TAP output. Program: $top_builddir/daemon/kvsctl. The timelines are
# written here, in the format kvsd writes (one event a line). The PNG
# cases are skipped without gnuplot, the JSON check of a merged file
# without python3.
set -u
bld=${top_builddir:-.}
kvsctl=$bld/daemon/kvsctl/kvsctl
python=${PYTHON:-python3}

# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"

echo "1..16"
if [ ! -x "$kvsctl" ]; then
    skip_all 16 "$kvsctl not built"
fi

rt=$(mktemp -d) || exit 1
trap 'rm -rf "$rt"' EXIT
n_test=0
skip() { n_test=$((n_test + 1)); echo "ok $n_test # SKIP $1"; }

# ctl NAME ARGS...: runs kvsctl, output in $rt/NAME.out and .err, status in ctl_rc.
ctl() {
    out=$1
    shift
    timeout $((60 * slow)) "$kvsctl" "$@" >"$rt/$out.out" 2>"$rt/$out.err"
    ctl_rc=$?
    sed 's/^/#   /' "$rt/$out.out" "$rt/$out.err"
}

have_gnuplot=0
command -v gnuplot >/dev/null 2>&1 && have_gnuplot=1

# ---- a job of 3 ranks on one host ---------------------------------------------
# The waits, in us, and their unions in ms:
#   rank 0, round 1: key 3 [1000, 11000], key 4 [5000, 16000]    -> 15.000 (a sum: 21)
#           round 2: key 3 [20000, 28000], fc1 [30000, 32500]    -> 10.500
#           round 3: key 3 [40000, 52250]                         -> 12.250
#   rank 1, round 1: key 3 [2000, 9000], key 4 [3000, 4000] in it -> 7.000
#           round 2: [21000, 27000]                               -> 6.000
#           round 3: [41000, 50000], and one of no length         -> 9.000
#   rank 2, round 1: [15000, 15500]                               -> 0.500
#           round 2: none                                         -> 0.000
#           round 3: [51000, 51100], [51050, 51200], [51200, 51300] -> 0.300
# Not counted: kvsd's own process (not a rank), a negative dur, a ts out
# of a double's range, a "waiting for others" of another cat. One line has
# its keys in another order.
tl=$rt/job.json
cat >"$tl" <<'EOF'
{"traceEvents":[
{"name":"process_name","ph":"M","pid":1,"tid":0,"args":{"name":"rank 0"}},
{"name":"process_sort_index","ph":"M","pid":1,"tid":0,"args":{"sort_index":0}},
{"name":"thread_name","ph":"M","pid":1,"tid":1,"args":{"name":"main"}},
{"name":"thread_name","ph":"M","pid":1,"tid":1000003,"args":{"name":"key 3 in kvsd"}},
{"name":"process_name","ph":"M","pid":2,"tid":0,"args":{"name":"rank 1"}},
{"name":"process_name","ph":"M","pid":3,"tid":0,"args":{"name":"rank 2"}},
{"name":"process_name","ph":"M","pid":100000,"tid":0,"args":{"name":"kvsd"}},
{"name":"push","cat":"call","ph":"X","pid":1,"tid":1,"ts":900.000,"dur":12.250,"args":{"key":3,"bytes":4096,"keys":1,"priority":0}},
{"name":"waiting for others","cat":"kvsd","ph":"X","pid":1,"tid":1000003,"ts":1000.000,"dur":10000.000,"args":{"key":3,"bytes":4096,"round":1}},
{"name":"waiting for others","cat":"kvsd","ph":"X","pid":1,"tid":1000004,"ts":5000.000,"dur":11000.000,"args":{"key":4,"bytes":4096,"round":1}},
{"name":"waiting for others","cat":"kvsd","ph":"X","pid":2,"tid":1000003,"ts":2000.000,"dur":7000.000,"args":{"key":3,"bytes":4096,"round":1}},
{"args":{"round":1,"key":4,"bytes":4096},"dur":1000.000,"ts":3000.000,"tid":1000004,"pid":2,"ph":"X","cat":"kvsd","name":"waiting for others"},
{"name":"waiting for others","cat":"kvsd","ph":"X","pid":3,"tid":1000003,"ts":15000.000,"dur":500.000,"args":{"key":3,"bytes":4096,"round":1}},
{"name":"waiting for others","cat":"kvsd","ph":"X","pid":1,"tid":1000003,"ts":20000.000,"dur":8000.000,"args":{"key":3,"bytes":4096,"round":2}},
{"name":"waiting for others","cat":"combine","ph":"X","pid":1,"tid":1,"ts":30000.000,"dur":2500.000,"args":{"key":"fc1.weight","bytes":4096,"round":2}},
{"name":"waiting for others","cat":"kvsd","ph":"X","pid":2,"tid":1000003,"ts":21000.000,"dur":6000.000,"args":{"key":3,"bytes":4096,"round":2}},
{"name":"waiting for others","cat":"kvsd","ph":"X","pid":1,"tid":1000003,"ts":40000.000,"dur":12250.000,"args":{"key":3,"bytes":4096,"round":3}},
{"name":"waiting for others","cat":"kvsd","ph":"X","pid":2,"tid":1000003,"ts":41000.000,"dur":9000.000,"args":{"key":3,"bytes":4096,"round":3}},
{"name":"waiting for others","cat":"kvsd","ph":"X","pid":2,"tid":1000004,"ts":45000.000,"dur":0.000,"args":{"key":4,"bytes":4096,"round":3}},
{"name":"waiting for others","cat":"kvsd","ph":"X","pid":3,"tid":1000003,"ts":51000.000,"dur":100.000,"args":{"key":3,"bytes":4096,"round":3}},
{"name":"waiting for others","cat":"kvsd","ph":"X","pid":3,"tid":1000004,"ts":51050.000,"dur":150.000,"args":{"key":4,"bytes":4096,"round":3}},
{"name":"waiting for others","cat":"combine","ph":"X","pid":3,"tid":1,"ts":51200.000,"dur":100.000,"args":{"key":"fc1.weight","bytes":4096,"round":3}},
{"name":"waiting for others","cat":"kvsd","ph":"X","pid":100000,"tid":1,"ts":1000.000,"dur":5.000,"args":{"key":3,"bytes":4096,"round":1}},
{"name":"waiting for others","cat":"kvsd","ph":"X","pid":2,"tid":1,"ts":60000.000,"dur":-5.000,"args":{"key":3,"bytes":4096,"round":4}},
{"name":"waiting for others","cat":"kvsd","ph":"X","pid":2,"tid":1,"ts":1e400,"dur":5.000,"args":{"key":3,"bytes":4096,"round":4}},
{"name":"waiting for others","cat":"call","ph":"X","pid":2,"tid":1,"ts":60000.000,"dur":5.000,"args":{"key":3,"bytes":4096,"round":4}},
{"name":"died","cat":"event","ph":"i","s":"p","pid":3,"tid":0,"ts":99999.000,"args":{"msg":"rank 2 died"}}
],
"displayTimeUnit":"ms",
"otherData":{"format":"kvs timeline 1","clock":"CLOCK_MONOTONIC","host":0,"hosts":2,"dropped_events":3,"clock_offsets":[{"host":0,"offset_us":0.000,"error_us":0.000}]}}
EOF

# ---- help ------------------------------------------------------------------------
st=0
ctl help timeline --help
[ $ctl_rc -eq 0 ] || st=1
grep -q '^usage: kvsctl timeline plot FILE \[-o OUT.png\] \[--data OUT.tsv\]' "$rt/help.out" || st=1
grep -q '^       kvsctl timeline merge OUT FILE\.\.\.' "$rt/help.out" || st=1
ctl kvsctlhelp --help
grep -q 'kvsctl timeline plot FILE' "$rt/kvsctlhelp.out" || st=1
grep -q '^  timeline ' "$rt/kvsctlhelp.out" || st=1
tap $st "timeline --help documents plot and merge; kvsctl --help lists timeline"

# ---- plot: the table ------------------------------------------------------------
ctl data timeline plot "$tl" --no-plot --data "$rt/waits.tsv"
st=$ctl_rc
{
    printf 'round\trank 0\trank 1\trank 2\n'
    printf '%s\t%s\t%s\t%s\n' 1 15.000 7.000 0.500 2 10.500 6.000 0.000 3 12.250 9.000 0.300
} >"$rt/waits.want"
cmp -s "$rt/waits.tsv" "$rt/waits.want" || { echo "# the table is not the one expected"; st=1; }
[ ! -e "$rt/job-wait.png" ] || { echo "# --no-plot drew a plot"; st=1; }
tap $st "plot --data: each rank's wait per round is the union of its intervals, in ms"

st=0
grep -qF "$tl: 3 ranks, 3 rounds (1 to 3), 14 waits" "$rt/data.out" || st=1
[ "$(awk '$1 == 0 && NF == 3 { print $2, $3 }' "$rt/data.out")" = "12.250 37.750" ] || st=1
[ "$(awk '$1 == 1 && NF == 3 { print $2, $3 }' "$rt/data.out")" = "7.000 22.000" ] || st=1
[ "$(awk '$1 == 2 && NF == 3 { print $2, $3 }' "$rt/data.out")" = "0.300 0.800" ] || st=1
want='^rank 2 waited least, 0.800 ms in all, against 22.000 to 37.750 ms for the others: '
grep -q "$want.*likely straggler" "$rt/data.out" || st=1
grep -q '2 events skipped: a bad or missing pid, ts, dur or args.round' "$rt/data.err" || st=1
grep -q '1 wait skipped: of a process not named "rank R"' "$rt/data.err" || st=1
tap $st "plot: each rank's median and total, rank 2 named the straggler; skipped events counted"

# ---- plot: the PNG ----------------------------------------------------------------
png_ok() { [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]; }
if [ $have_gnuplot -eq 1 ]; then
    ctl png timeline plot "$tl"
    st=$ctl_rc
    png_ok "$rt/job-wait.png" || { echo "# no PNG at $rt/job-wait.png"; st=1; }
    grep -q "^plot: $rt/job-wait.png\$" "$rt/png.out" || st=1
    [ -z "$(find "$rt" -name '*-wait.png.*')" ] || { echo "# a temporary file left"; st=1; }
    tap $st "plot: FILE.json gives FILE-wait.png, a PNG"

    # A name gnuplot would take for a pipe ('|...') or a string's end
    # (a quote) is only ever a name: gnuplot never sees it.
    odd="$rt/it's |a plot"
    ctl odd timeline plot "$tl" -o "$odd"
    st=$ctl_rc
    png_ok "$odd" || st=1
    cp "$tl" "$rt/it's |\`a\` \$(x).log"
    ctl odd2 timeline plot "$rt/it's |\`a\` \$(x).log"
    [ $ctl_rc -eq 0 ] && png_ok "$rt/it's |\`a\` \$(x).log-wait.png" || st=1
    tap $st "plot: odd file names (quotes, '|', \$(...)) are names, in and out"
else
    skip "gnuplot is not installed (Debian: gnuplot-nox)"
    skip "gnuplot is not installed (Debian: gnuplot-nox)"
fi

# Without gnuplot in PATH: a plain error naming the package, no file.
mkdir "$rt/empty"
timeout $((60 * slow)) env PATH="$rt/empty" "$kvsctl" timeline plot "$tl" -o "$rt/none.png" \
    >"$rt/nognu.out" 2>"$rt/nognu.err"
st=$?
sed 's/^/#   /' "$rt/nognu.err"
[ $st -eq 1 ] && grep -q 'gnuplot is not installed.*gnuplot-nox' "$rt/nognu.err" && st=0 || st=1
[ ! -e "$rt/none.png" ] && [ -z "$(find "$rt" -name 'none.png.*')" ] || st=1
tap $st "plot without gnuplot: exit 1, the message names gnuplot-nox, no file left"

# ---- merge --------------------------------------------------------------------------
# Host 1's part: rank 3 and its kvsd, 5 dropped events, its clock offset
# (host 0's clock less its own: -12.5 us, added to its times), and host
# 0's name of rank 0 again (written once in the merged file).
cat >"$tl.host1" <<'EOF'
{"traceEvents":[
{"name":"process_name","ph":"M","pid":4,"tid":0,"args":{"name":"rank 3"}},
{"name":"process_name","ph":"M","pid":1,"tid":0,"args":{"name":"rank 0"}},
{"name":"process_name","ph":"M","pid":100001,"tid":0,"args":{"name":"kvsd host 1"}},
{"name":"waiting for others","cat":"kvsd","ph":"X","pid":4,"tid":1000003,"ts":1000.000,"dur":4000.000,"args":{"key":3,"bytes":4096,"round":1}},
{"name":"waiting for others","cat":"kvsd","ph":"X","pid":4,"tid":1000003,"ts":20000.000,"dur":3000.000,"args":{"key":3,"bytes":4096,"round":2}}
],
"displayTimeUnit":"ms",
"otherData":{"format":"kvs timeline 1","clock":"CLOCK_MONOTONIC","host":1,"hosts":2,"dropped_events":5,"clock_offsets":[{"host":1,"offset_us":-12.500,"error_us":0.250,"measured":true}]}}
EOF
ctl merge timeline merge "$rt/merged.json" "$tl" "$tl.host1"
st=$ctl_rc
grep -q "merged.json: 31 events of 2 parts, 8 dropped while recording" "$rt/merge.out" || st=1
grep -q "host 1's times moved by -12.500 us onto host 0's clock (within 0.250 us)" \
    "$rt/merge.out" || st=1
if command -v "$python" >/dev/null 2>&1; then
    "$python" - "$rt/merged.json" <<'EOF' || st=1
import json, sys
d = json.load(open(sys.argv[1]))
o = d["otherData"]
ev = d["traceEvents"]
names = [e for e in ev if e["name"] == "process_name" and e["pid"] == 1]
want = {"format": "kvs timeline 1", "clock": "CLOCK_MONOTONIC", "host": -1, "hosts": 2,
        "dropped_events": 8,
        "clock_offsets": [{"host": 0, "offset_us": 0.0, "error_us": 0.0},
                          {"host": 1, "offset_us": -12.5, "error_us": 0.25, "measured": True}]}
# Host 1's times on host 0's clock; host 0's as they were.
moved = [(e["ts"], e["dur"]) for e in ev if e["pid"] == 4 and e["ph"] == "X"]
kept = [e["ts"] for e in ev if e["pid"] == 3 and e["ph"] == "X"]
ok = (o == want and len(ev) == 31 and len(names) == 1 and d["displayTimeUnit"] == "ms"
      and moved == [(987.5, 4000.0), (19987.5, 3000.0)]
      and kept == [15000.0, 51000.0, 51050.0, 51200.0])
if not ok:
    print("# merged:", len(ev), "events,", len(names), "names of pid 1,", o, moved, kept)
sys.exit(0 if ok else 1)
EOF
else
    echo "# $python missing: the merged file's JSON is not checked"
fi
ctl mplot timeline plot "$rt/merged.json" --no-plot --data "$rt/merged.tsv"
[ $ctl_rc -eq 0 ] || st=1
[ "$(cut -f5 "$rt/merged.tsv" | tr '\n' ' ')" = "rank 3 4.000 3.000 0.000 " ] || st=1
tap $st "merge of two hosts' parts: valid JSON, host 1's times moved by its clock offset, events \
once, dropped summed (8), both clock offsets, host -1; it plots"

# A host whose clock was never compared with host 0's keeps its times, and
# says so; the merged file merges again as it is (host -1: no move).
sed 's/"measured":true/"measured":false/' "$tl.host1" >"$rt/unmeasured.json"
ctl unmeasured timeline merge "$rt/m2.json" "$tl" "$rt/unmeasured.json"
st=$ctl_rc
grep -q "host 1's clock was never compared with host 0's: its times stay on its own clock" \
    "$rt/unmeasured.err" || st=1
grep -q '"pid":4,"tid":1000003,"ts":1000.000,' "$rt/m2.json" || st=1
ctl again timeline merge "$rt/m3.json" "$rt/merged.json"
[ $ctl_rc -eq 0 ] && ! grep -q "moved" "$rt/again.out" || st=1
grep -q '"pid":4,"tid":1000003,"ts":987.500,' "$rt/m3.json" || st=1
tap $st "merge: a host's clock never compared stays as it is, said; a merged file is not moved again"

st=0
ctl twice timeline merge "$rt/twice.json" "$tl" "$tl"
[ $ctl_rc -eq 1 ] && grep -q "both host 0's part" "$rt/twice.err" || st=1
[ ! -e "$rt/twice.json" ] || st=1
ctl musage timeline merge "$rt/x.json"
[ $ctl_rc -eq 2 ] || st=1
sed 's/"format":"kvs timeline 1"/"format":"kvs timeline 2"/' "$tl" >"$rt/v2.json"
ctl mforeign timeline merge "$rt/mf.json" "$tl" "$rt/v2.json"
[ $ctl_rc -eq 1 ] && grep -q 'v2.json: not a kvs timeline: otherData.format is "kvs timeline 2"' \
    "$rt/mforeign.err" || st=1
[ ! -e "$rt/mf.json" ] && [ -z "$(find "$rt" -name 'mf.json.*')" ] || st=1
tap $st "merge refuses a part given twice, another format (exit 1, nothing written); no FILE \
is a usage error"

# ---- two hosts: waits across hosts ---------------------------------------------------
# Rank 3 (host 1) is late. Ranks 0 and 1 (host 0) hardly wait for each
# other, then wait for host 1 "across hosts", in two keys at once; rank 2
# waits for rank 3 on host 1, then briefly across hosts; rank 3 waits
# 0.1 ms, then 0.5 ms across hosts. Unions in ms: 40.550, 40.550, 39.500,
# 0.600. Without the waits across hosts ranks 0 and 1 (0.050) would look
# like the stragglers.
cat >"$rt/h.json" <<'EOF'
{"traceEvents":[
{"name":"process_name","ph":"M","pid":1,"tid":0,"args":{"name":"rank 0"}},
{"name":"process_name","ph":"M","pid":2,"tid":0,"args":{"name":"rank 1"}},
{"name":"waiting for others","cat":"kvsd","ph":"X","pid":1,"tid":1000001,"ts":900.000,"dur":50.000,"args":{"key":"w","bytes":4096,"round":1}},
{"name":"across hosts","cat":"kvsd","ph":"X","pid":1,"tid":1000001,"ts":1000.000,"dur":40000.000,"args":{"key":"w","bytes":4096,"round":1}},
{"name":"across hosts","cat":"kvsd","ph":"X","pid":1,"tid":1000002,"ts":1500.000,"dur":40000.000,"args":{"key":"b","bytes":64,"round":1}},
{"name":"waiting for others","cat":"kvsd","ph":"X","pid":2,"tid":1000001,"ts":900.000,"dur":50.000,"args":{"key":"w","bytes":4096,"round":1}},
{"name":"across hosts","cat":"kvsd","ph":"X","pid":2,"tid":1000001,"ts":1000.000,"dur":40000.000,"args":{"key":"w","bytes":4096,"round":1}},
{"name":"across hosts","cat":"kvsd","ph":"X","pid":2,"tid":1000002,"ts":1500.000,"dur":40000.000,"args":{"key":"b","bytes":64,"round":1}}
],
"displayTimeUnit":"ms",
"otherData":{"format":"kvs timeline 1","clock":"CLOCK_MONOTONIC","host":0,"hosts":2,"dropped_events":0,"clock_offsets":[{"host":0,"offset_us":0.000,"error_us":0.000,"measured":true}]}}
EOF
cat >"$rt/h.json.host1" <<'EOF'
{"traceEvents":[
{"name":"process_name","ph":"M","pid":3,"tid":0,"args":{"name":"rank 2"}},
{"name":"process_name","ph":"M","pid":4,"tid":0,"args":{"name":"rank 3"}},
{"name":"waiting for others","cat":"kvsd","ph":"X","pid":3,"tid":1000001,"ts":1000.000,"dur":39000.000,"args":{"key":"w","bytes":4096,"round":1}},
{"name":"across hosts","cat":"kvsd","ph":"X","pid":3,"tid":1000001,"ts":40000.000,"dur":500.000,"args":{"key":"w","bytes":4096,"round":1}},
{"name":"waiting for others","cat":"kvsd","ph":"X","pid":4,"tid":1000001,"ts":39900.000,"dur":100.000,"args":{"key":"w","bytes":4096,"round":1}},
{"name":"across hosts","cat":"kvsd","ph":"X","pid":4,"tid":1000001,"ts":40000.000,"dur":500.000,"args":{"key":"w","bytes":4096,"round":1}}
],
"displayTimeUnit":"ms",
"otherData":{"format":"kvs timeline 1","clock":"CLOCK_MONOTONIC","host":1,"hosts":2,"dropped_events":0,"clock_offsets":[{"host":1,"offset_us":0.000,"error_us":0.100,"measured":true}]}}
EOF
ctl hmerge timeline merge "$rt/hm.json" "$rt/h.json" "$rt/h.json.host1"
st=$ctl_rc
ctl hplot timeline plot "$rt/hm.json" --no-plot --data "$rt/hm.tsv"
[ $ctl_rc -eq 0 ] || st=1
[ "$(sed -n 2p "$rt/hm.tsv" | tr '\t' ' ')" = "1 40.550 40.550 39.500 0.600" ] || st=1
grep -q '^rank 3 waited least, 0.600 ms in all' "$rt/hplot.out" || st=1
tap $st "two hosts: a rank's wait across hosts counts, and the late rank of the other host is named"

# ---- a real job, where the tree has the timeline ------------------------------------
# The last of 3 workers sleeps 40 ms before each push (dist_worker's
# straggler scenario): the others wait about that long in every round.
kvsrun=$bld/daemon/kvsrun/kvsrun
worker=$bld/tests/dist_worker
if [ -x "$kvsrun" ] && [ -x "$worker" ] && "$kvsrun" --help 2>&1 | grep -q -- '--timeline'; then
    XDG_RUNTIME_DIR=$rt/run
    export XDG_RUNTIME_DIR
    mkdir -m 700 "$XDG_RUNTIME_DIR"
    KVSD=$bld/daemon/kvsd/kvsd STRAGGLER_MS=40 timeout $((120 * slow)) "$kvsrun" --timeline "$rt/real.json" -n 3 \
        "$worker" straggler >"$rt/run.out" 2>&1
    st=$?
    [ $st -eq 0 ] || sed 's/^/#   /' "$rt/run.out"
    ctl real timeline plot "$rt/real.json" --no-plot
    [ $ctl_rc -eq 0 ] || st=1
    grep -q '^rank 2 waited least' "$rt/real.out" || st=1
    awk '$1 ~ /^[01]$/ && NF == 3 && $2 >= 30 { n++ } $1 == 2 && NF == 3 && $2 < 10 { n++ }
         END { exit n != 3 }' "$rt/real.out" || st=1
    tap $st "a job with a straggler: rank 2 named, the others' median wait 30 ms or more"
else
    skip "kvsrun has no --timeline here"
fi

# ---- malformed input -----------------------------------------------------------------
# bad NAME WANT: plot of $rt/NAME.json exits 1 and says WANT (a grep pattern).
bad() {
    ctl "$1" timeline plot "$rt/$1.json" --no-plot
    [ $ctl_rc -eq 1 ] && grep -q -- "$2" "$rt/$1.err"
}
st=0
size=$(wc -c <"$tl")
head -c $(($(head -n 11 "$tl" | wc -c) + 30)) "$tl" >"$rt/cut.json"
bad cut 'cut.json:12: cut short inside an event' || st=1
head -n 20 "$tl" >"$rt/cutline.json"
bad cutline 'cutline.json: cut short after line 20: the event list does not end' || st=1
{ head -n 28 "$tl"; echo ']'; } >"$rt/cutend.json"
bad cutend 'cutend.json: cut short after the event list (line 29): no otherData' || st=1
head -n 30 "$tl" >"$rt/cuttail.json"
bad cuttail 'cuttail.json: cut short in its otherData' || st=1
head -c $((size - 40)) "$tl" >"$rt/cutother.json"
bad cutother 'cutother.json: cut short in its otherData' || st=1
tap $st "a file cut short (inside an event, after a line, after the list, inside otherData): \
exit 1, says so"

st=0
sed '12s/.*/garbage, not an event/' "$tl" >"$rt/garbage.json"
bad garbage 'garbage.json:12: neither an event' || st=1
sed '13s/"dur":1000.000/"dur":NaN/' "$tl" >"$rt/nan.json"
bad nan 'nan.json:13: not a JSON event (at its byte [0-9]*): expected a value' || st=1
sed '12s/},$/,/' "$tl" >"$rt/open.json"
bad open 'open.json:12: not a JSON event (at its byte [0-9]*): an object not ended' || st=1
{ sed -n 1p "$tl"; printf '{"name":"%070000d"},\n' 0; sed -n '2,$p' "$tl"; } >"$rt/long.json"
bad long 'long.json:2: an event line longer than 65536 bytes' || st=1
{ sed -n 1p "$tl"; printf '{"a":%s1%s},\n' "$(printf '[%.0s' $(seq 40))" \
      "$(printf ']%.0s' $(seq 40))"; sed -n '2,$p' "$tl"; } >"$rt/deep.json"
bad deep 'deep.json:2: not a JSON event (at its byte [0-9]*): nested too deep' || st=1
tap $st "a garbage line, NaN, an object not closed, a line too long, nesting too deep: exit 1, \
file:line and why"

st=0
sed 's/"format":"kvs timeline 1"/"format":"kvs timeline 2"/' "$tl" >"$rt/foreign.json"
bad foreign 'not a kvs timeline: otherData.format is "kvs timeline 2", not "kvs timeline 1"' || st=1
printf '{"traceEvents": [], "otherData": {}}\n' >"$rt/oneline.json"
bad oneline 'oneline.json:1: not a kvs timeline (it does not begin with {"traceEvents":\[)' || st=1
{ head -n 29 "$tl"; echo '"displayTimeUnit":"ms"}'; } >"$rt/noother.json"
bad noother 'noother.json: no otherData object after the event list' || st=1
: >"$rt/empty.json"
bad empty 'empty.json: empty, not a kvs timeline' || st=1
ctl missing timeline plot "$rt/missing.json" --no-plot
[ $ctl_rc -eq 1 ] && grep -q 'missing.json: cannot open: No such file or directory' \
    "$rt/missing.err" || st=1
ctl dir timeline plot "$rt" --no-plot
[ $ctl_rc -eq 1 ] && grep -q 'cannot read: Is a directory' "$rt/dir.err" || st=1
tap $st "not a kvs timeline (another format, another JSON, no otherData, empty, missing, a \
directory): exit 1"

# Every cut of the file, and every line broken, fails plainly or reads:
# never a crash, never a hang.
st=0
i=0
while [ "$i" -lt $((size - 1)) ]; do
    head -c "$i" "$tl" >"$rt/fuzz.json"
    timeout $((10 * slow)) "$kvsctl" timeline plot "$rt/fuzz.json" --no-plot >/dev/null 2>"$rt/fuzz.err"
    rc=$?
    if [ $rc -ne 1 ] || [ ! -s "$rt/fuzz.err" ]; then echo "# cut at $i: exit $rc"; st=1; fi
    i=$((i + 97))
done
lines=$(wc -l <"$tl")
i=1
while [ "$i" -le "$lines" ]; do
    awk -v n="$i" 'NR == n { print substr($0, 1, length($0) / 2) "\"]}{,:\\u12"; next }
                   { print }' "$tl" >"$rt/fuzz.json"
    timeout $((10 * slow)) "$kvsctl" timeline plot "$rt/fuzz.json" --no-plot >/dev/null 2>"$rt/fuzz.err"
    rc=$?
    if [ $rc -ne 0 ] && [ $rc -ne 1 ]; then echo "# line $i broken: exit $rc"; st=1; fi
    i=$((i + 1))
done
tap $st "every cut of a timeline (every 97 bytes) exits 1 with a message; a line broken \
anywhere never crashes"

st=0
ctl u1 timeline plot
[ $ctl_rc -eq 2 ] || st=1
ctl u2 timeline plot "$tl" "$tl"
[ $ctl_rc -eq 2 ] || st=1
ctl u3 timeline plot "$tl" --bogus
[ $ctl_rc -eq 2 ] || st=1
ctl u4 timeline plot "$tl" -o x.png --no-plot
[ $ctl_rc -eq 2 ] || st=1
ctl u5 timeline draw "$tl"
[ $ctl_rc -eq 2 ] && grep -q "unknown subcommand 'draw'" "$rt/u5.err" || st=1
tap $st "usage errors (no FILE, two FILEs, an unknown option, -o with --no-plot, an unknown \
subcommand): exit 2"
exit 0
