#!/bin/sh
# Description: the dist semantics as a job runs by default, the workers
# combining the small keys' rounds (kvsctl stats counts them exactly);
# KVS_COMBINE=1 says the default, anything but 0 or 1 is refused at start
# (and a bad KVS_COMBINE_MAX); every key combined up to 64 MiB
# (KVS_COMBINE_MAX), the big keys' rounds in many chunks.
set -u
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/distlib.sh
. "$(dirname "$0")/distlib.sh"

# The default: the workers combine the small keys' rounds. kvsctl stats
# counts them exactly (its remote jobs are in test_dist_remote.sh).
unset KVS_COMBINE
KVS_TEST_COMBINED=1 KVS_TEST_KVSCTL=$(cd "$bld" && pwd)/daemon/kvsctl/kvsctl
export KVS_TEST_COMBINED KVS_TEST_KVSCTL
semantics
unset KVS_TEST_COMBINED KVS_TEST_KVSCTL

# KVS_COMBINE=1 says the default; anything but 0 or 1 is refused at start.
KVS_COMBINE=1 KVS_TEST_COMBINED=1
export KVS_COMBINE KVS_TEST_COMBINED
job 2 sums
unset KVS_COMBINE KVS_TEST_COMBINED
KVS_COMBINE=yes timeout $((10 * slow)) "$kvsd" --job "kt-$$-yes" -n 2 -q 2>"$work/yes.err"
s=$?
[ $s -ne 0 ] && grep -q "KVS_COMBINE=yes is not an integer in \[0, 1\]" "$work/yes.err"
tap $? "kvsd with KVS_COMBINE=yes: refused, the variable named"
KVS_COMBINE_MAX=lots timeout $((10 * slow)) "$kvsd" --job "kt-$$-max" -n 2 -q 2>"$work/max.err"
s=$?
[ $s -ne 0 ] && grep -q "KVS_COMBINE_MAX='lots': not a size in bytes" "$work/max.err"
tap $? "kvsd with KVS_COMBINE_MAX=lots: refused, the variable named"

# Every key combined, up to 64 MiB (KVS_COMBINE_MAX): the big keys' rounds
# are combined in many chunks, by every worker that waits for them.
KVS_COMBINE_MAX=64M KVS_TEST_COMBINED=1
export KVS_COMBINE_MAX KVS_TEST_COMBINED
for n in 2 3; do job $n big; done
job 3 states
unset KVS_COMBINE_MAX KVS_TEST_COMBINED
dist_done
