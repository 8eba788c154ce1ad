#!/bin/sh
# Description: pushpulls whose values kvsd writes straight into the
# workers' outs (process_vm_writev, tests/dist_inplace): bit for bit the
# values of the copying path, for float32 and float64 keys of sizes around
# the bound (KVS_REMOTE_MIN), alone and in lists, into outs and in place,
# a guard page and a canary after every out; never an out written after
# its call returned (a worker that timed out, a peer killed or gone
# mid-round); and the ways back to copies, with kvsd's note in its log:
# outs kvsd may not write (read-only), workers kvsd may not read or write
# (not dumpable: as root, kvsd and workers as nobody).
set -u
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/distlib.sh
. "$(dirname "$0")/distlib.sh"

prog=$bld/tests/dist_inplace
KVS_TEST_KVSCTL=$(cd "$bld" && pwd)/daemon/kvsctl/kvsctl
KVS_REMOTE_MIN=1M KVS_TEST_BOUND=1048576 KVS_TEST_WRITES=1
export KVS_TEST_KVSCTL KVS_REMOTE_MIN KVS_TEST_BOUND KVS_TEST_WRITES
# Fresh allocations full of junk: a flag read from memory never set shows.
MALLOC_PERTURB_=165
export MALLOC_PERTURB_

# kvsd's messages (even under -q) into $log, through kvsd_env.
log=$work/kvsd.log
wrap=$work/logwrap
printf '#!/bin/sh\nexec "$@" 2>>%s\n' "$log" > "$wrap"
chmod 755 "$wrap"
# 1 when kvsd's log has the line $1; says the log otherwise.
logged() {
    grep -q "$1" "$log" && return 0
    echo "# kvsd's log lacks '$1':"; sed 's/^/#   /' "$log"
    return 1
}
# tap of the last job and of a line in kvsd's log.
job_logged() {
    : > "$log"
    kvsd_env="$wrap${kvsd_env_more:+ $kvsd_env_more}"
    job "$@"
    kvsd_env=
    st=0; logged "$note" || st=1
    tap $st "kvsd's log says '$note'"
}

for n in 2 4; do job $n values; done
# Today's path, by copy: the same values, bit for bit, and no out written.
KVS_REMOTE=0 KVS_TEST_WRITES=0
export KVS_REMOTE
job 2 values
unset KVS_REMOTE
# Outs kvsd may not write (read-only while lent): copied by the worker.
KVS_TEST_RO=1 KVS_TEST_WRITES=-1
export KVS_TEST_RO
note="could not write a value into its out (Bad address): that one is copied"
job_logged 2 values
unset KVS_TEST_RO
KVS_TEST_WRITES=1

job 2 timeout
job 2 killed 137
job 2 exits 3

if [ "$(id -u)" -eq 0 ]; then
    # Workers kvsd may not read or write: not dumpable, kvsd and workers
    # as nobody (root's kvsd may ptrace anyone). A worker of another user
    # than kvsd's is refused at connect.
    as_nobody dist_inplace
    KVS_TEST_WRITES=0 KVS_TEST_NODUMP=1
    export KVS_TEST_NODUMP
    note="kvsd may not read its memory (Operation not permitted): its arrays are copied"
    kvsd_env_more=$nobody
    job_logged 2 values
    unset KVS_TEST_NODUMP
    kvsd_env_more=
    as_self
fi
prog=
dist_done
