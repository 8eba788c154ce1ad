#!/bin/sh
# Description: kvsctl plan models a job across hosts to the byte: each host's owned, sent and received bytes and frames, link rates in bits and bytes, --shared-link, --json, ResNet-50 at 64 hosts within 1.1 of the mean, --memory counting each host's copies and sums; its errors name the file and line.
# TAP output. Program: $top_builddir/daemon/kvsctl/kvsctl; no kvsd: plan only
# computes. Shapes from bench/shapes/resnet50.txt.
set -u
bld=${top_builddir:-.}
top_srcdir=${top_srcdir:-.}
kvsctl=$bld/daemon/kvsctl/kvsctl

# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"

echo "1..6"
if [ ! -x "$kvsctl" ]; then
    skip_all 6 "$kvsctl not built"
fi

rt=$(mktemp -d) || exit 1
trap 'rm -rf "$rt"' EXIT
n_test=0

# ctl NAME ARGS...: runs kvsctl, output in $rt/NAME.out and .err, status in ctl_rc.
ctl() {
    out=$1
    shift
    timeout $((10 * slow)) "$kvsctl" "$@" >"$rt/$out.out" 2>"$rt/$out.err"
    ctl_rc=$?
    sed 's/^/#   /' "$rt/$out.out" "$rt/$out.err"
}

# ---- plan: a job across hosts, modelled ---------------------------------------
# Three float32 tensors, keys 0, 1, 2: a (2,3), b (4,) and big (2048,1024),
# 8 MiB. A frame is a 24-byte head, a 56-byte body and 8 bytes a dim, then
# the data: a's frame 96 + 24 = 120, b's 88 + 16 = 104.
# At 2 hosts keys 0 and 1 are host 1's; big (4 MiB or more) is split in
# 2 x ceil(8 MiB / 2 MiB) = 8 parts of 1 MiB (frames of 1,048,672), 4 a host.
# Each host sends every part it does not own (PARTIAL) and the value of each
# part it owns to the other host (VALUE): all 8,389,600 bytes either way.
# At 3 hosts keys 0 and 2 are host 1's, key 1 host 2's; big is 9 parts of
# whole rows: 228 rows, 233,472 values (2,097,152 / 9 rounded up to a
# multiple of 16 values and of a row, 1,024), the last of 224 rows, 229,376:
# frames of 933,984 and 917,600. Host 1 owns parts 0-2, host 2 parts 3-5,
# host 0 parts 6-8: owned 2,785,568 (host 0), 2,802,072 (1), 2,802,056 (2),
# 8,389,696 in all; each host sends all it does not own plus twice what it
# owns: 11,175,264, 11,191,768, 11,191,752; the mean 11,186,261.3. Frames:
# 11 in all; a host sends the 11 - k it does not own and 2k values of its
# k: host 0 (k = 3) 14, hosts 1 and 2 (k = 4, a small key each) 15.
shapes=$rt/three.txt
printf '# three tensors\na 2x3\n\nb 4   # a comment\nbig 2048x1024\n' >"$shapes"
ctl plan2 plan --hosts 2 --shapes "$shapes" --link 1GB/s
st=$ctl_rc
row=$(awk '$1 == 2 { print $2, $3, $4, $5, $6, $7 }' "$rt/plan2.out")
[ "$row" = "10 1 8389600 8389600 1.000 8.390" ] || { echo "# row: $row"; st=1; }
grep -q '^model: .*: 3 tensors, 2097162 float32 values' "$rt/plan2.out" || st=1
tap $st "plan, 2 hosts: each host sends and receives 8,389,600 bytes, 10 parts, 1 connection, 8.390 ms at 1 GB/s"

ctl plan3 plan --hosts 2,3 --shapes "$shapes" --per-host
st=$ctl_rc
row=$(awk '$1 == 3 && NF == 9 { print $2, $3, $4, $5, $6 }' "$rt/plan3.out")
[ "$row" = "11 2 11191768 11186261 1.000" ] || { echo "# row: $row"; st=1; }
for want in "0 0 3 2785568 11175264 11175264 14 14 big" "1 1 3 2802072 11191768 11191768 15 15 big" \
    "2 1 3 2802056 11191752 11191752 15 15 big"; do
    grep -q "^ *$(echo "$want" | sed 's/ /  */g')\$" "$rt/plan3.out" || { echo "# no host line '$want'"; st=1; }
done
tap $st "plan, 3 hosts: each host's owned, sent and received bytes and frames, to the byte"

# Rates: 8 Gbit = 1 GB/s; on one shared link the round is all hosts' bytes
# (2 x 8,389,600 at 2 hosts: 16.779 ms), the ring's 2(H-1) S (16.777 ms).
st=0
for link in 8Gbit 8000Mbit 8Gb/s 1GB/s 1000MB/s; do
    ctl rate plan --hosts 2 --shapes "$shapes" --link "$link" --shared-link
    [ $ctl_rc -eq 0 ] || st=1
    row=$(awk '$1 == 2 { print $7, $8 }' "$rt/rate.out")
    [ "$row" = "16.779 16.777" ] || { echo "# $link: $row"; st=1; }
done
ctl json plan --hosts 2 --shapes "$shapes" --json
grep -q '"hosts": 2, .*"busiest_bytes": 8389600, ' "$rt/json.out" || st=1
tap $st "plan: link rates in bits and bytes, --shared-link, --json"

# ResNet-50's 161 tensors at 64 hosts: kvsd splits keys of 8 MiB / 64 =
# 128 KiB or more, so its 4 MiB and 2.25 MiB convs are spread over the
# hosts and the busiest host carries at most 1.1 times the mean (1.019,
# the split keys cut between rows, as kvsd cuts them). With the 2-host
# bound kept at 64 hosts (--split 4M --part 1M), the hosts that own a
# whole 2.25 MiB conv carry 1.875 times the mean; with keys of 4 MiB kept
# whole too (--split 4194305: above 4 MiB), 2.34 times.
resnet=$top_srcdir/bench/shapes/resnet50.txt
ctl resnet plan --hosts 8,64 --shapes "$resnet"
st=$ctl_rc
imb=$(awk '$1 == 64 { print $2, $3, $6 }' "$rt/resnet.out")
[ "$imb" = "3059 63 1.019" ] || { echo "# 64 hosts: parts, conns, imbalance $imb"; st=1; }
grep -q '^model: .*: 161 tensors, 25557032 float32 values' "$rt/resnet.out" || st=1
grep -q "^split: keys of 2 x 4194304 / H bytes or more, from 65536 to 4194304 (kvsd's) in parts of at most 1048576 bytes (kvsd's)\$" \
    "$rt/resnet.out" || st=1
ctl resnetj plan --hosts 64 --shapes "$resnet" --json
[ $ctl_rc -eq 0 ] || st=1
imbj=$(sed -n 's/.*"imbalance": \([0-9.]*\),.*/\1/p' "$rt/resnetj.out")
awk -v i="$imbj" 'BEGIN { exit !(i > 1 && i <= 1.1) }' || { echo "# json imbalance: $imbj"; st=1; }
grep -q '"split_bytes": 131072, "part_bytes": 1048576, ' "$rt/resnetj.out" || st=1
ctl whatif plan --hosts 64 --shapes "$resnet" --split 4M --part 1M
imb=$(awk '$1 == 64 { print $6 }' "$rt/whatif.out")
[ "$imb" = "1.875" ] || { echo "# what if 4M: $imb"; st=1; }
grep -q '^split: keys of 4194304 bytes or more (what if) in parts of at most 1048576 bytes (what if)$' \
    "$rt/whatif.out" || st=1
ctl whatif2 plan --hosts 64 --shapes "$resnet" --split 4194305 --part 1M
imb=$(awk '$1 == 64 { print $6 }' "$rt/whatif2.out")
[ "$imb" = "2.340" ] || { echo "# what if above 4M: $imb"; st=1; }
tap $st "plan, ResNet-50 at 64 hosts: imbalance $imbj (at most 1.1) with kvsd's bounds (split from 128 KiB), 1.875 split from 4 MiB, 2.340 above"

st=0
printf 'a 2x3\nb 3xq\n' >"$rt/bad.txt"
ctl badline plan --hosts 2 --shapes "$rt/bad.txt"
[ $ctl_rc -eq 1 ] && grep -q "bad.txt:2: .*'3xq'" "$rt/badline.err" || st=1
ctl nodims plan --hosts 2 --shapes "$rt/bad.txt" --hosts 2 --shapes /nonexistent/shapes
[ $ctl_rc -eq 1 ] && grep -q "cannot read /nonexistent/shapes" "$rt/nodims.err" || st=1
ctl zero plan --hosts 0 --shapes "$shapes"
[ $ctl_rc -eq 2 ] && grep -q -- "--hosts: '0'" "$rt/zero.err" || st=1
ctl badrate plan --hosts 2 --shapes "$shapes" --link 100
[ $ctl_rc -eq 2 ] && grep -q -- "--link: '100' is not a rate" "$rt/badrate.err" || st=1
ctl nohosts plan --shapes "$shapes"
[ $ctl_rc -eq 2 ] || st=1
# --memory: each host's copies and sums in a round by copy. The model's
# T = 2,097,162 values = 8,388,648 bytes; at 2 hosts host 0 owns 4 parts of
# big (O = 4,194,304 bytes of data), host 1 those and a and b (4,194,344).
# With W workers a host reads and writes 4WT (the workers' copies in and
# out), (W+1)(T-O) (its pushes summed into PARTIAL frames), 2T (every frame
# received copied into its payload: (H-1)O + T-O), (W+H)O (the owner's
# sum), 2O (one VALUE frame) and 2(T-O) (values into the arena): 10T + O
# for W = 1, 15T + O for W = 2. One worker, one shared link: 83,886,480 +
# 4,194,304 and + 4,194,344, 176,161,608 bytes in all: 176.162 ms at 1
# GB/s after the wire's 16.779. Two workers, a link per host: the busiest
# host, 8.390 ms of wire and 130,024,064 bytes, 138.414 ms.
st=0
ctl mem plan --hosts 2 --shapes "$shapes" --link 1GB/s --memory 1GB/s --shared-link
[ $ctl_rc -eq 0 ] || st=1
row=$(awk '$1 == 2 { print $7, $10, $11 }' "$rt/mem.out")
[ "$row" = "192.941 16.779 176.162" ] || { echo "# shared, 1 worker: $row"; st=1; }
grep -q '^memory: 1GB/s = 1.000 GB/s read plus written, 1 worker a host by copy' "$rt/mem.out" || st=1
ctl memj plan --hosts 2 --shapes "$shapes" --link 1GB/s --memory 1GB/s --workers 2 --json --per-host
[ $ctl_rc -eq 0 ] || st=1
for want in '"round_s": 0.13841366399999999' '"busiest_memory_bytes": 130024064' \
    '"total_memory_bytes": 260048088' '"workers": 2' '"memory_bytes": 130024024, '; do
    grep -qF "$want" "$rt/memj.out" || { echo "# no $want"; st=1; }
done
ctl memw plan --hosts 2 --shapes "$shapes" --memory 1GB/s --workers 0
[ $ctl_rc -eq 2 ] && grep -q -- "--workers: '0'" "$rt/memw.err" || st=1
ctl memr plan --hosts 2 --shapes "$shapes" --memory fast
[ $ctl_rc -eq 2 ] && grep -q -- "--memory: 'fast' is not a rate" "$rt/memr.err" || st=1
tap $st "plan --memory: each host's copies and sums counted to the byte (10T + O, 15T + O with 2 workers), added to the wire's time; bad --workers and --memory"

tap $st "plan errors: a bad line names file:line (exit 1), a missing file, --hosts 0, a rate without unit (exit 2)"
exit 0
