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
    # nobody may not reach the build tree: the programs and the library
    # are copied where it can.
    nobody="setpriv --reuid=nobody --regid=nogroup --clear-groups"
    bld_abs=$(cd "$bld" && pwd)
    nb=$(mktemp -d)
    chmod 755 "$nb"
    real_worker=$bld_abs/tests/.libs/dist_remote
    [ -f "$real_worker" ] || real_worker=$bld_abs/tests/dist_remote
    cp "$bld_abs/daemon/kvsd/kvsd" "$bld_abs/daemon/kvsctl/kvsctl" "$real_worker" "$nb/"
    cp -P "$bld_abs"/src/.libs/libkvs.so* "$nb/" 2>/dev/null
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s %s/dist_remote "$@"\n' "$nb" "$nobody" "$nb" \
        > "$nb/as_nobody"
    chmod 755 "$nb"/*
    saved_rt=$XDG_RUNTIME_DIR saved_kvsd=$kvsd
    XDG_RUNTIME_DIR=$(mktemp -d)
    chown nobody "$XDG_RUNTIME_DIR"
    KVS_TEST_KVSCTL=$nb/kvsctl kvsd=$nb/kvsd prog=$nb/as_nobody kvsd_env=$nobody
    job 2 remote
    prog=$bld/tests/dist_remote kvsd_env= kvsd=$saved_kvsd
    rm -rf "$XDG_RUNTIME_DIR" "$nb"
    XDG_RUNTIME_DIR=$saved_rt
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
