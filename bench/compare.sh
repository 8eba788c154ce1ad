#!/bin/bash
# bench/compare.sh BEFORE_BUILD AFTER_BUILD [PASSES] [CSV]: kvs's own cases
# on two build trees of kvs (each configured and built with `make`), side by
# side in one run, to tell whether a change made anything slower. The two
# take turns pass by pass (before, after; then after, before), so that the
# machine's drift hits both alike; the table gives each case's median per
# build, their ratio (after / before), and the ratio pass by pass, whose
# spread is the noise a ratio must stand out of.
#
# Cases: dist_sync with 2 workers by copy and zero-copy at 4 KiB..64 MiB,
# 4 workers at 4 KiB and 4 MiB, 2 hosts x 2 workers over io_uring on this
# machine, the in-process store with 2 values, and the init and pushpull of
# 200,000 one-element keys (bench_keys). A build tree may have the programs
# where the flat layout put them (daemon/kvsd) or where the rooms do
# (daemon/kvsd/kvsd). Rows go to CSV (default /tmp/compare.csv).
set -u
if [ $# -lt 2 ] || [ ! -d "$1" ] || [ ! -d "$2" ]; then
    echo "usage: bench/compare.sh BEFORE_BUILD AFTER_BUILD [PASSES] [CSV]" >&2
    exit 2
fi
before=$1 after=$2 passes=${3:-4} out=${4:-/tmp/compare.csv}
: >"$out"
rt=$(mktemp -d)
chmod 700 "$rt"
trap 'rm -rf "$rt"' EXIT
export XDG_RUNTIME_DIR=$rt
common="--seconds 1 --min-reps 10"

# program BUILD NAME: the build's NAME (kvsd, kvsrun) in either layout.
program() {
    if [ -x "$1/daemon/$2/$2" ]; then echo "$1/daemon/$2/$2"; else echo "$1/daemon/$2"; fi
}

# cases TAG BUILD: every case once on BUILD, its rows tagged TAG.
cases() {
    tag=$1 b=$2
    KVSD=$(program "$b" kvsd)
    export KVSD
    kvsrun=$(program "$b" kvsrun)
    suite=$b/bench/bench_suite
    {
        "$kvsrun" -n 2 --timeout 60 "$suite" dist --sizes 4K,256K,4M,64M $common |
            sed 's/^row,[^,]*,[^,]*/row,copy,dist2/'
        "$kvsrun" -n 2 --timeout 60 "$suite" dist --sizes 4K,256K,4M,64M --zero-copy $common |
            sed 's/^row,[^,]*,[^,]*/row,zc,dist2/'
        "$kvsrun" -n 4 --timeout 60 "$suite" dist --sizes 4K,4M $common |
            sed 's/^row,[^,]*,[^,]*/row,copy,dist4/'
        "$suite" local -n 2 --sizes 4K,4M $common | sed 's/^row,[^,]*,[^,]*/row,copy,local2/'
        "$kvsrun" -n 2 --timeout 120 "$b/bench/bench_keys" |
            awk -F, '/^keys,/ { print "row,keys,dist2,2,200000,1," $7 ",0,0" }'
        port=$((40000 + RANDOM % 20000))
        for h in 0 1; do
            KVS_TRANSPORT=uring "$kvsrun" -j "compare-$$-$tag" -n 2 --nodes 2 --node-rank $h \
                --coord "127.0.0.1:$port" --timeout 60 "$suite" dist --sizes 4K,4M $common \
                >"$rt/host$h" &
            hosts[$h]=$!
        done
        wait "${hosts[0]}" "${hosts[1]}"
        sed 's/^row,[^,]*,[^,]*/row,copy,hosts2x2/' "$rt/host0"
    } 2>/dev/null | grep '^row,' | sed "s/^row,/$tag,/" >>"$out"
}

for p in $(seq 1 "$passes"); do
    if [ $((p % 2)) -eq 1 ]; then
        cases before "$before"
        cases after "$after"
    else
        cases after "$after"
        cases before "$before"
    fi
    echo "pass $p of $passes done" >&2
done

python3 - "$out" <<'EOF'
import collections
import statistics
import sys

rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    tag, case, job, n, size, _reps, median = line.strip().split(',')[:7]
    rows[(case, job, int(n), int(size), tag)].append(float(median))
print('%-5s %-9s %2s %9s  %12s %12s  %6s  %s'
      % ('case', 'job', 'n', 'bytes', 'before (s)', 'after (s)', 'ratio', 'pass by pass'))
for key in sorted({k[:4] for k in rows}):
    a, b = rows.get(key + ('before',), []), rows.get(key + ('after',), [])
    if not a or not b:
        continue
    pairs = ' '.join('%.2f' % (y / x) for x, y in zip(a, b))
    ma, mb = statistics.median(a), statistics.median(b)
    print('%-5s %-9s %2d %9d  %12.4g %12.4g  %6.3f  %s' % (key + (ma, mb, mb / ma, pairs)))
EOF
