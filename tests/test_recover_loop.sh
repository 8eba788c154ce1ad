#!/bin/sh
# Description: the kill loop, short (scripts/chaos has the long one): 4
# workers of tests/recover_train under kvsrun --restarts and --checkpoint,
# committing every 10 steps, while a worker or kvsd is killed with SIGKILL
# every 0.5-1.5 s; the job ends with exit 0 and every key equals, bit for
# bit, the same job's without a fault. 400 steps of at least 30 ms make a
# job of 12 s or more, so that at least 4 kills land however the
# intervals fall (4 of the longest take 6 s; one that meets a restart
# under way finds no victim and waits again).
set -u
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"

echo "1..1"
n_test=0
top_builddir=${top_builddir:-.}
private_runtime
out=$rt/chaos
trap 'rm -rf "$rt"' EXIT
"$top_srcdir/scripts/chaos" --build "$top_builddir" --steps 400 --every 10 --step-ms 30 \
    --interval 0.5-1.5 --min-kills 4 --out "$out" --timeout $((300 * slow)) >"$rt/report" 2>&1
s=$?
sed 's/^/# /' "$rt/report"
tap $s "kill loop: 400 steps, kills every 0.5-1.5 s: exit 0, values bit-identical to a run without faults"
