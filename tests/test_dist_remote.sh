#!/bin/sh
# Description: pushpulls that kvsd reads straight out of the workers'
# memory (KVS_REMOTE, tests/dist_remote), and the ways back to staging:
# KVS_REMOTE=0, and workers kvsd may not read; the values are the same,
# kvsctl stats counts them; an array unmapped while lent fails the job,
# naming its rank. Through kvsd, and with the workers combining the small
# keys' rounds.
set -u
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/distlib.sh
. "$(dirname "$0")/distlib.sh"

KVS_COMBINE=0
export KVS_COMBINE

# Pushpulls that kvsd reads straight out of the workers' memory
# (KVS_REMOTE), and the ways back to staging: KVS_REMOTE=0, and workers
# kvsd may not read (not dumpable, and kvsd without CAP_SYS_PTRACE: as
# root, both run as nobody). The values are the same; kvsctl stats counts.
# An array unmapped while lent fails the job, naming its rank.
KVS_TEST_KVSCTL=$(cd "$bld" && pwd)/daemon/kvsctl/kvsctl
export KVS_TEST_KVSCTL KVS_TEST_READERS
prog=$bld/tests/dist_remote
for n in 2 3; do KVS_TEST_READERS=$n; job $n remote; done
job 2 remote_gone
KVS_REMOTE=0 KVS_TEST_READERS=0
export KVS_REMOTE
job 2 remote
unset KVS_REMOTE
KVS_TEST_NODUMP=1
export KVS_TEST_NODUMP
if [ "$(id -u)" -eq 0 ]; then
    as_nobody dist_remote
    kvsd_env=$nobody
    job 2 remote
    kvsd_env=
    as_self
else
    job 2 remote
fi
unset KVS_TEST_NODUMP KVS_TEST_READERS KVS_TEST_KVSCTL
prog=

# The default: the workers combine the small keys' rounds; kvsctl stats
# counts the workers kvsd reads, and the combined rounds.
unset KVS_COMBINE
KVS_TEST_COMBINED=1 KVS_TEST_KVSCTL=$(cd "$bld" && pwd)/daemon/kvsctl/kvsctl
export KVS_TEST_COMBINED KVS_TEST_KVSCTL KVS_TEST_READERS
prog=$bld/tests/dist_remote
for n in 2 3; do KVS_TEST_READERS=$n; job $n remote; done
prog=
unset KVS_TEST_COMBINED KVS_TEST_KVSCTL KVS_TEST_READERS
dist_done
