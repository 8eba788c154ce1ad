#!/bin/bash
# Description: jobs started without kvsrun: workers under the environment
# that torchrun, Open MPI (also real mpirun when it runs here) and Slurm
# give (set here as those launchers set it: Debian's torchrun 1.13 fails
# at start under Python 3.11) find their rank and count, the job's first
# local worker starts the host's kvsd, which is gone after the job with
# its socket and lock; a killed worker fails the others within 2 s, a
# worker that never comes fails the job by its deadline; two hosts on
# this machine meet at MASTER_ADDR:MASTER_PORT+1 (torchrun) or KVS_COORD
# (Slurm, nodes of different counts) with a secret, and are refused
# without one; a launcher's environment that contradicts itself is
# KVS_EBADARG.
set -u
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
bld=$(cd "${top_builddir:-.}" && pwd)
src=$(cd "${top_srcdir:-.}" && pwd)
worker=$bld/tests/launch_worker
dworker=$bld/tests/dist_worker
KVS_KVSD=$bld/daemon/kvsd/kvsd
export KVS_KVSD
# What a caller's shell may hold that would place the workers otherwise.
unset KVS_JOB KVS_RANK KVS_NUM_WORKERS KVS_NODES KVS_NODE_RANK KVS_COORD KVS_SECRET_FILE \
    RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK GROUP_WORLD_SIZE MASTER_ADDR \
    MASTER_PORT TORCHELASTIC_RUN_ID PMI_RANK PMI_SIZE \
    SLURM_PROCID SLURM_NTASKS SLURM_LOCALID SLURM_NODEID SLURM_NNODES SLURM_JOB_ID \
    SLURM_STEP_ID SLURM_STEP_NUM_NODES SLURM_STEP_TASKS_PER_NODE SLURM_TASKS_PER_NODE
for v in $(env | sed -n 's/^\(OMPI_[A-Za-z0-9_]*\|PMIX_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
private_runtime
work=$(mktemp -d)
kvs=$XDG_RUNTIME_DIR/kvs
tag=lt$$

# kvsd_pids NAME: the kvsd serving job NAME (or its hosts' parts).
kvsd_pids() {
    for p in /proc/[0-9]*; do
        tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -q -- "kvsd --job $1 " && echo "${p#/proc/}"
    done
}
no_kvsd() { [ -z "$(kvsd_pids "$1")" ]; }
# cleanup: the kvsd this test started (those of its runtime directory)
# killed, its files removed.
cleanup() {
    for p in /proc/[0-9]*; do
        tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -qx "XDG_RUNTIME_DIR=$rt" &&
            tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -q "^$KVS_KVSD " &&
            kill -KILL "${p#/proc/}" 2>/dev/null
    done
    ports_release
    rm -rf "$rt" "$work"
}
trap cleanup EXIT
n_test=0

# wait_workers: waits for the workers started in $pids (bounded by
# their `timeout`); $statuses lists their exit statuses, in start order.
wait_workers() {
    statuses=""
    for p in $pids; do
        wait "$p"
        statuses="$statuses $?"
    done
    statuses=${statuses# }
}

# torchrun_like NODES NPROC RUN_ID CMD...: the workers torchrun
# --nnodes NODES --nproc-per-node NPROC starts, each with the variables it
# sets (torch/distributed/elastic/agent/server/local_elastic_agent.py),
# MASTER_ADDR 127.0.0.1 on $mport. Sets $pids.
torchrun_like() {
    tl_nodes=$1 tl_n=$2 tl_id=$3
    shift 3
    pids=""
    for g in $(seq 0 $((tl_nodes - 1))); do
        for l in $(seq 0 $((tl_n - 1))); do
            r=$((g * tl_n + l))
            RANK=$r WORLD_SIZE=$((tl_nodes * tl_n)) LOCAL_RANK=$l LOCAL_WORLD_SIZE=$tl_n \
                GROUP_RANK=$g GROUP_WORLD_SIZE=$tl_nodes ROLE_RANK=$r ROLE_NAME=default \
                ROLE_WORLD_SIZE=$((tl_nodes * tl_n)) MASTER_ADDR=127.0.0.1 MASTER_PORT=$mport \
                TORCHELASTIC_RESTART_COUNT=0 TORCHELASTIC_MAX_RESTARTS=0 \
                TORCHELASTIC_RUN_ID=$tl_id TORCHELASTIC_USE_AGENT_STORE=True \
                KVS_TEST_RANK=$r KVS_TEST_NW=$((tl_nodes * tl_n)) KVS_TEST_DIR=$work \
                KVS_TIMEOUT=${wtimeout:-$((30 * slow))} timeout $((60 * slow)) "$@" \
                2>>"$work/err" &
            pids="$pids $!"
        done
    done
}

# ompi_like NP JOBID CMD...: what Open MPI 4's mpirun -np NP gives each
# process on one host. Sets $pids.
ompi_like() {
    om_n=$1 om_id=$2
    shift 2
    pids=""
    for r in $(seq 0 $((om_n - 1))); do
        OMPI_COMM_WORLD_RANK=$r OMPI_COMM_WORLD_SIZE=$om_n OMPI_COMM_WORLD_LOCAL_RANK=$r \
            OMPI_COMM_WORLD_LOCAL_SIZE=$om_n OMPI_COMM_WORLD_NODE_RANK=$r \
            OMPI_MCA_ess_base_jobid=$om_id OMPI_MCA_ess_base_vpid=$r OMPI_MCA_orte_num_nodes=1 \
            PMIX_NAMESPACE=$om_id PMIX_RANK=$r OMPI_UNIVERSE_SIZE=$om_n \
            KVS_TEST_RANK=$r KVS_TEST_NW=$om_n KVS_TIMEOUT=$((30 * slow)) \
            timeout $((60 * slow)) "$@" 2>>"$work/err" &
        pids="$pids $!"
    done
}

# slurm_like "N0 N1 ..." JOB STEP CMD...: what srun gives each task of a
# step with N_h tasks on node h (block distribution: ranks node-major),
# every node on this machine. Sets $pids.
slurm_like() {
    read -r -a sl_counts <<<"$1"
    sl_job=$2 sl_step=$3
    shift 3
    sl_nodes=${#sl_counts[@]} sl_n=0 sl_list=
    for c in "${sl_counts[@]}"; do sl_n=$((sl_n + c)); sl_list=$sl_list${sl_list:+,}$c; done
    pids=""
    r=0
    for h in $(seq 0 $((sl_nodes - 1))); do
        for l in $(seq 0 $((sl_counts[h] - 1))); do
            SLURM_PROCID=$r SLURM_NTASKS=$sl_n SLURM_LOCALID=$l SLURM_NODEID=$h \
                SLURM_NNODES=$sl_nodes SLURM_STEP_NUM_NODES=$sl_nodes SLURM_STEP_NUM_TASKS=$sl_n \
                SLURM_STEP_TASKS_PER_NODE=$sl_list SLURM_TASKS_PER_NODE=$sl_list \
                SLURM_JOB_ID=$sl_job SLURM_STEP_ID=$sl_step SLURM_STEPID=$sl_step \
                SLURM_JOB_NODELIST=localhost SLURMD_NODENAME=localhost \
                KVS_TEST_RANK=$r KVS_TEST_NW=$sl_n KVS_TIMEOUT=$((30 * slow)) \
                timeout $((60 * slow)) "$@" 2>>"$work/err" &
            pids="$pids $!"
            r=$((r + 1))
        done
    done
}

# job_ended NAME WANT: 0 when the workers exited with the statuses WANT,
# and within 10 s (times $slow) no kvsd of job NAME runs and neither its
# socket nor its lock is left; its log stays, and says it exited.
job_ended() {
    je=0
    [ "$statuses" = "$2" ] || { echo "# $1: workers exited '$statuses', expected '$2'"; je=1; }
    wait_for 100 no_kvsd "$1" ||
        { echo "# $1: kvsd still runs: $(kvsd_pids "$1")"; je=1; }
    if ls "$kvs/$1".sock "$kvs/$1".lock "$kvs/$1".h*.sock "$kvs/$1".h*.lock >/dev/null 2>&1; then
        echo "# $1: kvsd left its socket or lock"; je=1
    fi
    if ! grep -q "exiting" "$kvs/$1".log "$kvs/$1".h*.log 2>/dev/null; then
        echo "# $1: no log that kvsd exited"; je=1
    fi
    if [ $je -ne 0 ] && [ -s "$work/err" ]; then sed 's/^/#   /' "$work/err" | tail -n 8; fi
    : >"$work/err"
    return $je
}

mport=$(free_port) || exit 1

# torchrun with a static rendezvous (run id "none"): the job is named
# after MASTER_ADDR:MASTER_PORT.
torchrun_like 1 2 none "$worker" sums
wait_workers
job_ended "torch-127.0.0.1_$mport" "0 0"
tap $? "torchrun's environment, 2 workers, run id none: job torch-127.0.0.1_$mport"

torchrun_like 1 4 "$tag-run/1:x" "$worker" sums
wait_workers
job_ended "torch-$tag-run_1_x" "0 0 0 0"
tap $? "torchrun's environment, 4 workers, a run id made a job name"

ompi_like 3 "$$7" "$worker" sums
wait_workers
job_ended "mpi-$$7" "0 0 0"
tap $? "Open MPI's environment, 3 workers"

slurm_like 3 "$$" 4 "$worker" sums
wait_workers
job_ended "slurm-$$.4" "0 0 0"
tap $? "Slurm's environment, 3 tasks on one node"

# Real mpirun, when it runs here at all (as root it needs leave to).
mpirun_ok=
if command -v mpirun >/dev/null 2>&1; then
    mpi_opts="--oversubscribe"
    [ "$(id -u)" -eq 0 ] && mpi_opts="$mpi_opts --allow-run-as-root"
    # shellcheck disable=SC2086
    timeout $((30 * slow)) mpirun -np 1 $mpi_opts true >/dev/null 2>&1 && mpirun_ok=1
fi
if [ -n "$mpirun_ok" ]; then
    # shellcheck disable=SC2086
    KVS_TIMEOUT=$((30 * slow)) timeout $((60 * slow)) mpirun -np 2 $mpi_opts \
        -x KVS_KVSD -x XDG_RUNTIME_DIR -x KVS_TIMEOUT \
        "$dworker" sums >"$work/mpirun.out" 2>&1
    st=$?
    statuses=$st
    # Its job id is mpirun's own: whichever mpi-* job this was.
    name=
    for f in "$kvs"/mpi-*.log; do
        [ -e "$f" ] && [ "$f" != "$kvs/mpi-$$7.log" ] && { name=${f##*/}; name=${name%.log}; }
    done
    if [ -n "$name" ]; then job_ended "$name" 0; st=$?; else echo "# no log of mpirun's job"; st=1; fi
    [ $st -eq 0 ] || sed 's/^/#   /' "$work/mpirun.out" | tail -n 8
    tap $st "real mpirun -np 2: job $name"
else
    echo "ok $((n_test += 1)) # SKIP mpirun is missing or does not run here"
fi

# The Python package, two workers under torchrun's environment.
if [ -n "${PYTHON:-}" ] && [ -z "${KVS_SAN_CFLAGS:-}" ] && "$PYTHON" -c 'import numpy' 2>/dev/null; then
    cat >"$work/sums.py" <<'EOF'
import os
import numpy as np
import kvs

kv = kvs.create('dist_sync')
rank, n = int(os.environ['RANK']), int(os.environ['WORLD_SIZE'])
assert (kv.rank, kv.num_workers) == (rank, n), (kv.rank, kv.num_workers)
kv.init(5, np.zeros(8, dtype=np.float32))
for step in range(1, 4):
    kv.push(5, np.full(8, (rank + 1) * step, dtype=np.float32))
    out = np.empty(8, dtype=np.float32)
    kv.pull(5, out=out)
    assert (out == n * (n + 1) / 2 * step).all(), out
kv.close()
EOF
    KVS_LIBRARY=$bld/src/.libs/libkvs.so PYTHONPATH=$src/python PYTHONDONTWRITEBYTECODE=1 \
        torchrun_like 1 2 "$tag-py" "$PYTHON" "$work/sums.py"
    wait_workers
    job_ended "torch-$tag-py" "0 0"
    tap $? "Python: kvs.create('dist_sync') under torchrun's environment, 2 workers"
else
    echo "ok $((n_test += 1)) # SKIP no Python with numpy, or a sanitizer build"
fi

# A kvsd that already serves the job (started here, as another worker's
# would be): the first local worker connects to it and starts none.
"$KVS_KVSD" --job "torch-$tag-pre" --workers 2 --exit-when-done --connect-timeout 30 -q &
pre=$!
wait_for 50 test -S "$kvs/torch-$tag-pre.sock"
torchrun_like 1 2 "$tag-pre" "$worker" sums
wait_workers
st=0
[ "$statuses" = "0 0" ] || { echo "# workers exited '$statuses'"; sed 's/^/#   /' "$work/err"; st=1; }
wait_for 100 gone "$pre" || { echo "# kvsd did not leave"; kill -KILL "$pre"; st=1; }
wait "$pre" || { echo "# kvsd exited $?"; st=1; }
[ ! -e "$kvs/torch-$tag-pre.log" ] || { echo "# another kvsd was started"; st=1; }
: >"$work/err"
tap $st "a kvsd already serving the job is used, none started"

# The job's lock held by someone that never listens: the kvsd started
# loses it and ends at once, and the worker that started it says so, with
# kvsd's last words, long before its deadline.
: >"$kvs/torch-$tag-held.lock"
flock "$kvs/torch-$tag-held.lock" sleep $((30 * slow)) &
holder=$!
t0=$(now_ms)
KVS_TEST_CODE=KVS_ECLOSED KVS_TEST_MSG="another kvsd serves job 'torch-$tag-held'" \
    torchrun_like 1 1 "$tag-held" "$worker" refused
wait_workers
st=0
[ "$statuses" = "0" ] || { echo "# worker exited '$statuses'"; sed 's/^/#   /' "$work/err"; st=1; }
[ $(($(now_ms) - t0)) -lt $((10000 * slow)) ] || { echo "# told after $(($(now_ms) - t0)) ms"; st=1; }
kill "$holder"
wait "$holder" 2>/dev/null
rm -f "$kvs/torch-$tag-held.lock" "$kvs/torch-$tag-held.log"
: >"$work/err"
tap $st "a kvsd that cannot serve the job: the worker says why within 10 s"

# A worker killed: the others' calls fail with KVS_EPEERDEAD within 2 s
# (dist_worker peer_dies checks it), and kvsd leaves.
torchrun_like 1 3 "$tag-dies" "$dworker" peer_dies
wait_workers
job_ended "torch-$tag-dies" "0 0 137"
tap $? "a killed worker fails the others within 2 s; kvsd leaves after them"

# A worker that never comes: WORLD_SIZE 2, one started. The job fails at
# the handle's deadline (KVS_TIMEOUT, 3 s), which kvsd was given too.
wtimeout=$((3 * slow))
KVS_TEST_WITHIN=$((10 * slow)) torchrun_like 1 1 "$tag-alone" env WORLD_SIZE=2 \
    LOCAL_WORLD_SIZE=2 "$worker" alone
unset wtimeout
wait_workers
job_ended "torch-$tag-alone" "0"
st=$?
# Whichever deadline came first, kvsd's to connect or the worker's call's,
# the cause names who came.
grep -q "1 of 2 workers" "$kvs/torch-$tag-alone.log" ||
    { echo "# kvsd's log does not say who came:"; sed 's/^/#   /' "$kvs/torch-$tag-alone.log"; st=1; }
tap $st "a worker that never comes: the job fails at the deadline, kvsd leaves"

# Two hosts on this machine: torchrun --nnodes 2 --nproc-per-node 2, the
# hosts' kvsd meeting at MASTER_ADDR on MASTER_PORT+1, with a secret.
hport=$(free_port) || exit 1
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/secret"
chmod 600 "$work/secret"
mport_saved=$mport
mport=$((hport - 1))
KVS_SECRET_FILE=$work/secret torchrun_like 2 2 "$tag-hosts" "$worker" sums
wait_workers
job_ended "torch-$tag-hosts" "0 0 0 0"
st=$?
if [ ! -e "$kvs/torch-$tag-hosts.h0.log" ] || [ ! -e "$kvs/torch-$tag-hosts.h1.log" ]; then
    echo "# no log of each host's kvsd"; st=1
fi
tap $st "two hosts by torchrun's environment, 2 workers each, over MASTER_PORT+1 with a secret"

# Two Slurm nodes of different counts (tasks per node "2,1"), host 0 at
# KVS_COORD.
cport=$(free_port) || exit 1
KVS_COORD=127.0.0.1:$cport KVS_SECRET_FILE=$work/secret slurm_like "2 1" "$$" 5 "$worker" sums
wait_workers
job_ended "slurm-$$.5" "0 0 0"
tap $? "two Slurm nodes of 2 and 1 tasks, host 0 at KVS_COORD, with a secret"

# Across hosts without a secret: refused before anything starts.
KVS_TEST_MSG=KVS_SECRET_FILE torchrun_like 2 1 "$tag-nosecret" "$worker" refused
wait_workers
st=0
[ "$statuses" = "0 0" ] || { echo "# workers exited '$statuses'"; sed 's/^/#   /' "$work/err"; st=1; }
[ -z "$(kvsd_pids "torch-$tag-nosecret")" ] || { echo "# a kvsd was started"; st=1; }
: >"$work/err"
tap $st "two hosts without KVS_SECRET_FILE: KVS_EBADARG naming it, no kvsd started"
mport=$mport_saved

# Environments that contradict themselves: KVS_EBADARG naming the variable.
refused() {
    want=$1
    shift
    KVS_TEST_MSG=$want timeout $((30 * slow)) env "$@" "$worker" refused 2>>"$work/err"
}
st=0
refused "RANK=2 is not below WORLD_SIZE=2" RANK=2 WORLD_SIZE=2 MASTER_ADDR=h MASTER_PORT=1 || st=1
refused "RANK and WORLD_SIZE" RANK=0 MASTER_ADDR=h MASTER_PORT=1 || st=1
refused "LOCAL_RANK" RANK=0 WORLD_SIZE=4 GROUP_WORLD_SIZE=2 MASTER_ADDR=h MASTER_PORT=1 || st=1
refused "LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2" RANK=0 WORLD_SIZE=2 LOCAL_RANK=2 \
    LOCAL_WORLD_SIZE=2 MASTER_ADDR=h MASTER_PORT=1 || st=1
refused "OMPI_COMM_WORLD_SIZE=3 is not a multiple of OMPI_COMM_WORLD_LOCAL_SIZE=2" \
    OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=3 OMPI_COMM_WORLD_LOCAL_RANK=0 \
    OMPI_COMM_WORLD_LOCAL_SIZE=2 OMPI_MCA_ess_base_jobid=1 || st=1
refused "SLURM_STEP_TASKS_PER_NODE=2(x2) has no count of tasks for node 2" SLURM_PROCID=0 \
    SLURM_NTASKS=4 SLURM_LOCALID=0 SLURM_NODEID=2 SLURM_NNODES=3 \
    SLURM_STEP_TASKS_PER_NODE='2(x2)' SLURM_JOB_ID=1 || st=1
refused "needs host 0's address" RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
    GROUP_RANK=0 GROUP_WORLD_SIZE=2 TORCHELASTIC_RUN_ID=x || st=1
refused "MASTER_PORT=65535" RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 GROUP_RANK=0 \
    GROUP_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=65535 KVS_SECRET_FILE=/x || st=1
[ $st -eq 0 ] || sed 's/^/#   /' "$work/err"
for f in "$kvs"/*; do
    case $f in *.log | "$kvs/*") ;; *) echo "# left behind: $f"; st=1 ;; esac
done
tap $st "launcher environments that contradict themselves: KVS_EBADARG naming the variable"

echo "1..$n_test"
