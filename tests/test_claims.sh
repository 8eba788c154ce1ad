#!/bin/sh
# Description: the docs' speed figures are bench/RESULTS.md's: every bench region of README.md and doc/*.md is what bench/claims.py renders from it, no benchmark figure stands outside a region, goals are judged on the median of their per-pass values unrounded (0.703 against 0.7 is missed), where Open MPI's passes are over 2 x apart the docs set kvs against the one-copy floor of the same passes, and the checker fails on a region edited by hand, a figure outside a region, and a RESULTS.md whose verdict its own values contradict.
# TAP output. Reads the source tree only ($top_srcdir); runs no benchmark.
set -u
LC_ALL=C
export LC_ALL
top=${top_srcdir:-$(dirname "$0")/..}
py=$(command -v python3 || true)
if [ -z "$py" ]; then
    echo "1..0 # SKIP python3 is not installed (bench/claims.py needs it)"
    exit 77
fi
claims="$top/bench/claims.py"

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
n_test=0
failed=0
: >"$tmp/diag"
tap() {
    n_test=$((n_test + 1))
    if [ "$1" -eq 0 ]; then
        echo "ok $n_test - $2"
    else
        echo "not ok $n_test - $2"
        failed=1
        sed 's/^/# /' "$tmp/diag"
    fi
    : >"$tmp/diag"
}
# A copy of the docs and RESULTS.md to break.
fresh() {
    rm -rf "$tmp/t"
    mkdir -p "$tmp/t/bench"
    cp -R "$top/doc" "$tmp/t/doc"
    cp "$top/README.md" "$tmp/t/README.md"
    cp "$top/bench/RESULTS.md" "$tmp/t/bench/RESULTS.md"
    chmod -R u+w "$tmp/t"
}
check() { timeout 60 "$py" "$claims" render --check --root "$tmp/t" >>"$tmp/diag" 2>&1; }

timeout 60 "$py" "$claims" render --check --root "$top" >"$tmp/diag" 2>&1
tap $? "every bench region matches bench/RESULTS.md, and no benchmark figure is outside one"

# Each doc the renderer reads has its regions: the README's speed table
# and the guides' goals.
st=0
for r in README.md:speed-one-host README.md:status-recover README.md:status-python \
    doc/speed.md:goals doc/speed.md:speed-hosts doc/speed.md:rows doc/python.md:python \
    doc/timeline.md:timeline-cost doc/scaling.md:scale doc/status.md:status-one-host; do
    grep -q "<!-- bench:${r#*:} -->" "$top/${r%%:*}" || { echo "${r%%:*} has no bench:${r#*:} region" >>"$tmp/diag"; st=1; }
done
tap $st "README.md and the guides quote their figures from bench regions"

# One rule: the median of the per-pass values, unrounded.
printf 'one.zc.4.256K 0.62 0.70 0.703 0.76 0.71\none.zc.2.4K 0.99 1.01\nkeys.dist 0.5\none.copy.2.4K\n' >"$tmp/values"
timeout 60 "$py" "$claims" judge "$tmp/values" >"$tmp/goals" 2>>"$tmp/diag"
st=$?
grep -q '^| `one.zc.4.256K` | .* | 0.62 0.70 0.703 0.76 0.71 | 0.703 | missed |$' "$tmp/goals" || st=1
grep -q '^| `one.zc.2.4K` | .* | 1.000 | met |$' "$tmp/goals" || st=1
grep -q '^| `keys.dist` | .* | 0.500 | met |$' "$tmp/goals" || st=1
grep -q '^| `one.copy.2.4K` | .* | - | - | not measured |$' "$tmp/goals" || st=1
[ $st -eq 0 ] || cat "$tmp/goals" >>"$tmp/diag"
tap $st "a goal is judged on the median of its per-pass values, unrounded (0.703 against 0.7: missed)"

# The round after 1 ms of compute: judged like the others when measured;
# a RESULTS.md without it (a run before the case) says so, and does not
# count it among the goals met.
printf 'one.compute.2.4K 1.1 1.3 1.15\n' >"$tmp/values"
timeout 60 "$py" "$claims" judge "$tmp/values" >"$tmp/goals" 2>>"$tmp/diag"
st=$?
grep -q '^| `one.compute.2.4K` | 4 KiB round after 1 ms of compute, 2 workers: kvs / Open MPI | ≤ 1.2 | 1.1 1.3 1.15 | 1.150 | met |$' "$tmp/goals" || st=1
: >"$tmp/values"
timeout 60 "$py" "$claims" judge "$tmp/values" >"$tmp/goals" 2>>"$tmp/diag" || st=1
grep -q '^| `one.compute.2.4K` | .* | - | - | not measured |$' "$tmp/goals" || st=1
grep -q '^0 of the 0 goals measured are met\.$' "$tmp/goals" || st=1
[ $st -eq 0 ] || cat "$tmp/goals" >>"$tmp/diag"
tap $st "the round after 1 ms of compute is judged like the others, and not measured without values"

fresh
st=0
sed -i '/^| `one\.compute\./d; /^| allreduce-c1ms |/d' "$tmp/t/bench/RESULTS.md"
timeout 60 "$py" "$claims" render --root "$tmp/t" >/dev/null 2>>"$tmp/diag" || st=1
grep -q '^| 4 KiB round after 1 ms of compute, 2 workers: kvs / Open MPI | ≤ 1.2 | - | not measured |$' "$tmp/t/doc/speed.md" ||
    { echo "the goals region does not say the compute round is not measured" >>"$tmp/diag"; st=1; }
grep -q 'bench:status-one-host -->.* goals on one host met in the latest full run ([0-9-]*); 1 more not measured in it<!--' "$tmp/t/doc/status.md" ||
    { echo "the status counts the compute round as measured" >>"$tmp/diag"; grep 'status-one-host' "$tmp/t/doc/status.md" >>"$tmp/diag"; st=1; }
if grep -q '^| `one\.' "$tmp/t/bench/RESULTS.md"; then
    sed -i 's/^\(| `one.idle` |\)/| `one.compute.2.4K` | x | ≤ 1.2 | 1.1 1.3 1.15 | 1.150 | met |\n\1/' "$tmp/t/bench/RESULTS.md"
    timeout 60 "$py" "$claims" render --root "$tmp/t" >/dev/null 2>>"$tmp/diag" || st=1
    grep -q '^| 4 KiB round after 1 ms of compute, 2 workers: kvs / Open MPI | ≤ 1.2 | 1.150 | \*\*met\*\* |$' "$tmp/t/doc/speed.md" ||
        { echo "the compute round's verdict is not rendered" >>"$tmp/diag"; st=1; }
    grep -q 'bench:status-one-host -->.* goals on one host met in the latest full run ([0-9-]*)<!--' "$tmp/t/doc/status.md" ||
        { echo "the status still says a goal is not measured" >>"$tmp/diag"; st=1; }
fi
check || st=1
tap $st "a RESULTS.md without the compute round renders its goal as not measured, and with it its verdict"

printf 'one.zc.4.256K 0.7004\n' >"$tmp/values"
timeout 60 "$py" "$claims" judge "$tmp/values" >"$tmp/goals" 2>>"$tmp/diag"
grep -q '| 0.7004 | missed |$' "$tmp/goals"
tap $? "a value just over its limit prints with the digits that show it over"

printf 'no.such.goal 1\n' >"$tmp/values"
timeout 60 "$py" "$claims" judge "$tmp/values" >/dev/null 2>&1
[ $? -ne 0 ]
tap $? "judge refuses a goal it does not know"

# The checker fails on what it is for.
fresh
# A figure inside a region edited by hand.
"$py" - "$tmp/t/README.md" <<'EOF'
import re, sys
p = sys.argv[1]
s = open(p).read()
a = s.index('<!-- bench:speed-one-host -->')
b = s.index('<!-- /bench:speed-one-host -->')
body = re.sub(r'\*\*(met|missed)\*\*', lambda m: '**met**' if m.group(1) == 'missed' else '**missed**',
              s[a:b], count=1)
open(p, 'w').write(s[:a] + body + s[b:])
EOF
st=0
check && st=1
grep -q 'README.md: a bench region differs' "$tmp/diag" || st=1
tap $st "a verdict edited by hand in a region fails the check"

fresh
printf '\nA round of 4 KiB takes 2.1 µs here.\n' >>"$tmp/t/doc/dist.md"
st=0
check && st=1
grep -q 'doc/dist.md:.*a time in µs outside a bench region' "$tmp/diag" || st=1
tap $st "a benchmark figure outside a region fails the check"

fresh
printf '\nThe 200,000-key goal is met.\n' >>"$tmp/t/doc/api.md"
st=0
check && st=1
grep -q 'doc/api.md:.*a goal said met or missed' "$tmp/diag" || st=1
tap $st "a goal called met outside a region fails the check"

fresh
printf '\n<!-- bench:nothing -->\n<!-- /bench:nothing -->\n' >>"$tmp/t/doc/api.md"
st=0
check && st=1
grep -q 'unknown region bench:nothing' "$tmp/diag" || st=1
tap $st "an unknown region fails the check"

# A new RESULTS.md whose figures differ: the docs no longer match, and
# rendering mends them.
fresh
if grep -q '^| `one\.' "$tmp/t/bench/RESULTS.md"; then
    # the goals table: a verdict its values contradict is refused
    sed -i 's/^\(| `keys.dist` | .* | \)\(met\|missed\)\( |\)$/\1wrong\3/' "$tmp/t/bench/RESULTS.md"
    st=0
    check && st=1
    grep -q 'goal keys.dist says wrong' "$tmp/diag" || st=1
    tap $st "a RESULTS.md whose verdict its values contradict is refused"
    fresh
fi
sed -i 's/^\(| allreduce | kvs-dist | 2 | 4 KiB | [0-9]* | \)[0-9.]*/\199.9/' "$tmp/t/bench/RESULTS.md"
st=0
check && st=1
grep -q 'a bench region differs' "$tmp/diag" || st=1
timeout 60 "$py" "$claims" render --root "$tmp/t" >/dev/null 2>>"$tmp/diag" || st=1
: >"$tmp/diag.keep"
check || st=1
grep -q '99.9 µs' "$tmp/t/README.md" || { echo "the new time is not in README.md" >>"$tmp/diag"; st=1; }
tap $st "a changed RESULTS.md fails the check until rendered, and the rendering has its figure"

# Open MPI's passes over 2 x apart (bimodal at 4 KiB here): the row and
# the status set kvs against the one-copy floor of the same passes, the
# median of the per-pass ratios; passes within 2 x say nothing of it.
# passes IMPL V...: that row of the "Per pass" table given these values.
passes() {
    "$py" - "$tmp/t/bench/RESULTS.md" "$@" <<'EOF'
import sys
p, impl, vals = sys.argv[1], sys.argv[2], sys.argv[3:]
s = open(p).read()
head = '| allreduce | %s | 2 | 4 KiB | ' % impl
i = s.index(head, s.index('### Per pass'))
j = s.index('\n', i)
n = s[i:j].count('|') - 5
open(p, 'w').write(s[:i] + head + ' | '.join((vals + ['-'] * n)[:n]) + ' |' + s[j:])
EOF
}
fresh
st=0
passes mpi 2.0 2.1 2.2 2.0 2.1
timeout 60 "$py" "$claims" render --root "$tmp/t" >/dev/null 2>>"$tmp/diag" || st=1
grep '^| 4 KiB, 2 workers |' "$tmp/t/README.md" | grep -q 'apart' &&
    { echo "passes within 2 x are called apart" >>"$tmp/diag"; st=1; }
passes mpi 1 1 5 1 1
passes kvs-dist 6 6 6 6 6
passes floor-1copy 2 3 2 3 2
timeout 60 "$py" "$claims" render --root "$tmp/t" >/dev/null 2>>"$tmp/diag" || st=1
for f in README.md doc/status.md; do
    grep -q "Open MPI's passes 1.0 µs to 5.0 µs, over 2 × apart: kvs 3.00 × the one-copy floor of the same passes" "$tmp/t/$f" ||
        { echo "$f does not set kvs against the floor" >>"$tmp/diag"; st=1; }
done
check || st=1
tap $st "Open MPI's passes over 2 x apart: kvs against the one-copy floor of the same passes, in the table and the status"

# The rows step: a RESULTS.md without it (an older run) renders "not
# measured"; one with it renders its table and its goals' verdicts.
fresh
st=0
sed -i '/^| rows case |/,/^$/d; /^| ctr impl |/,/^$/d' "$tmp/t/bench/RESULTS.md"
timeout 60 "$py" "$claims" render --root "$tmp/t" >/dev/null 2>>"$tmp/diag" || st=1
grep -q '^Row-sparse tables: not measured' "$tmp/t/doc/speed.md" || { echo "no 'not measured' for the rows step" >>"$tmp/diag"; st=1; }
tap $st "a RESULTS.md without the rows step renders the rows region as not measured"

fresh
"$py" - "$tmp/t/bench/RESULTS.md" <<'EOF2'
import re, sys
p = sys.argv[1]
s = open(p).read()
s = re.sub(r'\n\| rows case \|.*?\n\n', '\n', s, flags=re.S)
rows = '''
| rows case | N | id | median µs | per pass µs | worker VmRSS MiB | of it RssShmem MiB | worker VmHWM MiB | kvsd VmRSS MiB |
|---|---|---|---|---|---|---|---|---|
| row-sparse step | 4 | sparse | 2500.0 | 2500.0 | 50.0 | 40.0 | 60.0 | 4000.0 |
| dense pushpull of 4096 x 64 | 4 | small | 2000.0 | 2000.0 | - | - | - | - |
| dense pushpull of the whole table | 4 | table | 3000000.0 | 3000000.0 | - | - | - | 5000.0 |
| 100%: row-sparse | 4 | full-sparse | 800000.0 | 800000.0 | - | - | - | 3000.0 |
| 100%: dense | 4 | full-dense | 1000000.0 | 1000000.0 | - | - | - | 3000.0 |

'''
s = s.replace('\n## Goals\n', '\n## Row-sparse tables\n' + rows + '## Goals\n', 1) if '\n## Goals\n' in s \
    else s + '\n## Row-sparse tables\n' + rows
s = re.sub(r'\n\| `rows\.small` \|[^\n]*', '', s)   # a real run's line gives way to this one
if '| `keys.dist` |' in s:
    s = s.replace('| `keys.dist` |', '| `rows.small` | x | ≤ 2 | 1.25 1.3 1.2 | 1.250 | met |\n| `keys.dist` |', 1)
open(p, 'w').write(s)
EOF2
timeout 60 "$py" "$claims" render --root "$tmp/t" >/dev/null 2>>"$tmp/diag" || st=1
grep -q '^| 4 workers push 4,096 Zipf(1.1) rows each .* | 2.50 ms | workers 50 MiB, 40 MiB of it memory shared with kvsd (peak 60 MiB), kvsd 4000 MiB | dense 4,096 x 64: 2.00 ms |' "$tmp/t/doc/speed.md" || { echo "the rows table is not rendered" >>"$tmp/diag"; st=1; }
if grep -q '^| `one\.' "$tmp/t/bench/RESULTS.md"; then
    grep -q '1.250: \*\*met\*\* (≤ 2)' "$tmp/t/doc/speed.md" || { echo "the rows goal is not rendered" >>"$tmp/diag"; st=1; }
fi
check || st=1
tap $st "a RESULTS.md with the rows step renders its table and goals"

# The CTR model against DDP (the ctr step): its line in the rows region,
# "not measured" without it, its figures and verdict with it.
fresh
st=0
timeout 60 "$py" "$claims" render --root "$tmp/t" >/dev/null 2>>"$tmp/diag" || st=1
if ! grep -q '^| ctr impl |' "$tmp/t/bench/RESULTS.md"; then
    grep -q '^| the CTR model of `examples/train_ctr.py`, 4 processes: .* | not measured |' "$tmp/t/doc/speed.md" ||
        { echo "no 'not measured' line for the ctr step" >>"$tmp/diag"; st=1; }
fi
"$py" - "$tmp/t/bench/RESULTS.md" <<'EOF2'
import re, sys
p = sys.argv[1]
s = open(p).read()
s = re.sub(r'\n\| ctr impl \|.*?\n\n', '\n', s + '\n', flags=re.S)
s = re.sub(r'\n\| `rows\.ddp` \|[^\n]*', '', s)
ctr = '''
| ctr impl | N | rows | dim | batch | timed steps | median step µs | per pass µs | worker VmRSS MiB | of it RssShmem MiB | worker VmHWM MiB | kvsd VmRSS MiB | held-out loss |
|---|---|---|---|---|---|---|---|---|---|---|---|---|
| kvs | 4 | 1048576 | 32 | 1000 | 30 | 20000.0 | 20000.0 21000.0 19000.0 | 300.0 | 30.0 | 310.0 | 400.0 | 0.600000 |
| ddp | 4 | 1048576 | 32 | 1000 | 30 | 80000.0 | 80000.0 80000.0 80000.0 | 500.0 | 0.0 | 600.0 | - | 0.600000 |

'''
s = s + '\n## CTR model against DDP\n' + ctr
s = s.replace('| `keys.dist` |', '| `rows.ddp` | x | ≤ 0.3 | 0.25 0.2625 0.2375 | 0.250 | met |\n| `keys.dist` |', 1)
open(p, 'w').write(s)
EOF2
timeout 60 "$py" "$claims" render --root "$tmp/t" >/dev/null 2>>"$tmp/diag" || st=1
grep -q '^| the CTR model of `examples/train_ctr.py` (1,048,576 x 32 table, batches of 1,000), 4 processes: .* | 20.0 ms | workers 300 MiB, 30 MiB of it shared with kvsd (peak 310 MiB), kvsd 400 MiB | DDP on gloo, `nn.Embedding(sparse=True)`: 80.0 ms, workers 500 MiB (peak 600 MiB) | 0.250: \*\*met\*\* (≤ 0.3) |$' "$tmp/t/doc/speed.md" ||
    { echo "the ctr line is not rendered" >>"$tmp/diag"; grep -n 'CTR' "$tmp/t/doc/speed.md" >>"$tmp/diag"; st=1; }
check || st=1
tap $st "the CTR model against DDP: its line in the rows region, not measured without the ctr step"

# The recover step (doc/recovery.md's regions, made here in the copy):
# "not measured" without it, its table and verdicts with it; its goals are
# judged like every other.
printf 'recover.commit 0.12 0.08 0.09\nrecover.disk 1.3 1.2 1.24\nrecover.kvsd 2.0001\n' >"$tmp/values"
timeout 60 "$py" "$claims" judge "$tmp/values" >"$tmp/goals" 2>>"$tmp/diag"
st=$?
grep -q '^| `recover.commit` | .* | ≤ 0.1 s | 0.12 0.08 0.09 | 0.090 | met |$' "$tmp/goals" || st=1
grep -q '^| `recover.disk` | .* | ≤ 1.25 | 1.3 1.2 1.24 | 1.240 | met |$' "$tmp/goals" || st=1
grep -q '^| `recover.kvsd` | .* | ≤ 2 s | 2.0001 | 2.0001 | missed |$' "$tmp/goals" || st=1
grep -q '^| `recover.chaos` | .* | - | - | not measured |$' "$tmp/goals" || st=1
[ $st -eq 0 ] || cat "$tmp/goals" >>"$tmp/diag"
tap $st "the recover goals are judged on the median of their per-pass values, unrounded"

recovery_doc() {
    printf '# Recovery\n\nBenchmarks: <!-- bench:status-recover --><!-- /bench:status-recover -->\n\n<!-- bench:recover -->\n<!-- /bench:recover -->\n' \
        >"$tmp/t/doc/recovery.md"
}
fresh
recovery_doc
st=0
sed -i '/^| recover id |/,/^$/d; /^| `recover\./d' "$tmp/t/bench/RESULTS.md"
timeout 60 "$py" "$claims" render --root "$tmp/t" >/dev/null 2>>"$tmp/diag" || st=1
grep -q '^Not measured: the last full run (.*) has no recover step' "$tmp/t/doc/recovery.md" ||
    { echo "no 'not measured' for the recover step" >>"$tmp/diag"; st=1; }
grep -q 'bench:status-recover -->not benchmarked in the latest full run' "$tmp/t/doc/recovery.md" ||
    { echo "no 'not benchmarked' status" >>"$tmp/diag"; st=1; }
! grep -q 'a commit of a 1 GiB store' "$tmp/t/doc/speed.md" ||
    { echo "the goals region lists recover goals not measured" >>"$tmp/diag"; st=1; }
check || st=1
tap $st "a RESULTS.md without the recover step renders its regions as not measured"

fresh
recovery_doc
"$py" - "$tmp/t/bench/RESULTS.md" <<'EOF2'
import re, sys
p = sys.argv[1]
s = open(p).read()
s = re.sub(r'\n\| recover id \|.*?\n\n', '\n', s + '\n', flags=re.S)
s = re.sub(r'\n\| `recover\.[a-z]+` \|[^\n]*', '', s)
rec = """
| recover id | measure | per pass | median |
|---|---|---|---|
| store.bytes | the snapshot file, bytes | 1073742159 1073742159 1073742159 | 1073742159 |
| memory.round | in memory: a round, s | 1.0 1.0 1.0 | 1.0 |
| memory.round_after_commit | in memory: a round after a commit, s | 1.5 1.5 1.5 | 1.5 |
| checkpoint.round | --checkpoint: a round, s | 2.0 2.1 1.9 | 2.0 |
| checkpoint.round_after_commit | --checkpoint: a round after a commit, s | 2.1 2.0 2.2 | 2.1 |
| checkpoint.recover_kvsd | --checkpoint: kvsd killed to the next round, s | 3.5 3.4 3.6 | 3.5 |
| copy.s | the copy to disk, s | 4.0 4.2 3.8 | 4.0 |
| dd.write_s | dd conv=fsync, s | 2.0 2.1 1.9 | 2.0 |
| dd.read_s | dd of the checkpoint file, s | 1.0 1.1 0.9 | 1.0 |
| dd.read_cached | 1: from the page cache | 0 0 0 | 0 |
| chaos.workers | workers | 4 | 4 |
| chaos.steps | steps | 500 | 500 |
| chaos.every | a commit every | 10 | 10 |
| chaos.kills | kills | 23 | 23 |
| chaos.kvsd_kills | of kvsd | 5 | 5 |
| chaos.restarts | restarts | 23 | 23 |
| chaos.slowest_s | slowest | 0.3 | 0.3 |
| chaos.redone | redone | 140 | 140 |
| chaos.seconds | seconds | 95 | 95 |
| chaos.identical | bit for bit | 1 | 1 |

"""
s = s + '\n## Recovery\n' + rec
goals = ('| `recover.commit` | x | ≤ 0.1 s | 2.5 2.6 2.4 | 2.500 | missed |\n'
         '| `recover.disk` | x | ≤ 1.25 | 2.0 2.0 2.0 | 2.000 | missed |\n'
         '| `recover.kvsd` | x | ≤ 2 s | 2.5 2.3 2.7 | 2.500 | missed |\n'
         '| `recover.chaos` | x | ≤ 2 s | 0.3 | 0.300 | met |\n')
s = s.replace('| `keys.dist` |', goals + '| `keys.dist` |', 1)
open(p, 'w').write(s)
EOF2
st=0
timeout 60 "$py" "$claims" render --root "$tmp/t" >/dev/null 2>>"$tmp/diag" || st=1
for want in \
    '^| a commit, in memory: the workers. wait (the snapshot written to tmpfs) | 2.500 s | ≤ 0.1 s: \*\*missed\*\* |$' \
    '^| with `--checkpoint`: the copy to disk, 4.00 s (0.27 GB/s), against `dd conv=fsync` of as many bytes, 2.00 s (0.54 GB/s) | 2.000 × dd.s time | ≤ 1.25: \*\*missed\*\* |$' \
    '^| with `--checkpoint`: a round right after a commit, 2.10 s, against the others, 2.00 s (without `--checkpoint`: 1.50 s against 1.00 s) | - | ≤ 1.1: not measured |$' \
    '^| kvsd killed: to the next successful round, 3.50 s, less the snapshot.s read, 1.00 s (1.07 GB/s, from the disk) | 2.500 s | ≤ 2 s: \*\*missed\*\* |$' \
    '^| the kill loop (`scripts/chaos`: 4 workers, 500 steps, a commit every 10): 23 kills (5 of kvsd), 23 restarts, 140 steps redone, 95.00 s; final values bit for bit the fault-free run.s | slowest recovery 0.300 s | ≤ 2 s: \*\*met\*\* |$' \
    'bench:status-recover -->benchmarked: 1 of its 4 goals met in the latest full run ([0-9-]*): a commit of 1 GiB waited 2.50 s, kvsd.s death 2.50 s, the kill loop.s slowest recovery took 300.0 ms<!--'; do
    grep -q "$want" "$tmp/t/doc/recovery.md" || { echo "not rendered: $want" >>"$tmp/diag"; st=1; }
done
grep -q '^| kvsd killed, 1 GiB snapshot: .* | ≤ 2 s | 2.500 s | \*\*missed\*\* |$' "$tmp/t/doc/speed.md" ||
    { echo "the goals region lacks the recover goals" >>"$tmp/diag"; st=1; }
[ $st -eq 0 ] || sed -n '/bench:recover -->/,/\/bench:recover/p' "$tmp/t/doc/recovery.md" >>"$tmp/diag"
check || st=1
tap $st "a RESULTS.md with the recover step renders its table, its goals and its status"

# The README's Python line: each way's goal as judged, or "not
# benchmarked" when the run has none of them.
fresh
st=0
v='[-0-9.]* ×' j='\(met\|missed\)'
grep -q "bench:status-python -->in the latest full run ([0-9-]*): a Trainer step of ResNet-50 takes $v DDP.s on gloo ($j); the DDP hook adds $v gloo.s communication time ($j); a DistributedOptimizer step takes $v DDP.s ($j)<!--" "$tmp/t/README.md" ||
    { echo "status-python not rendered:" >>"$tmp/diag"; grep 'status-python' "$tmp/t/README.md" >>"$tmp/diag"; st=1; }
sed -i '/^| `py\./d' "$tmp/t/bench/RESULTS.md"
timeout 60 "$py" "$claims" render --root "$tmp/t" >/dev/null 2>>"$tmp/diag" || st=1
grep -q 'bench:status-python -->not benchmarked in the latest full run' "$tmp/t/README.md" ||
    { echo "no 'not benchmarked' Python status" >>"$tmp/diag"; st=1; }
tap $st "the README's Python line gives each way's step against DDP as judged, or says it was not benchmarked"

echo "1..$n_test"
exit $failed
