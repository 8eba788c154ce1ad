#!/bin/bash
# Description: jobs across hosts (each a kvsrun with its own kvsd on this machine):
# a transport plug-in loaded by path runs the job, one that cannot work
# stops kvsd before any worker, naming the file and why; the launchers'
# variables (Slurm's, Open MPI's) instead of options; a worker killed on
# one host fails the job on every host; a host's kvsd killed or stopped
# fails the job everywhere within its bound, naming the host, while a
# host only busy for many times that bound is not taken for dead. Over
# sockets and, where it is built, UCX.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/hostslib.sh
. "$(dirname "$0")/hostslib.sh"

KVS_TRANSPORT=socket
export KVS_TRANSPORT
# kvsd with its silence bound cut to 2 s (heartbeats then go every 0.4 s).
real_kvsd=$KVSD
short_bound=$work/kvsd-short-bound
printf '#!/bin/sh\nexec %s "$@" --heartbeat-timeout 2\n' \
    "$(cd "$(dirname "$KVSD")" && pwd)/$(basename "$KVSD")" >"$short_bound"
chmod 755 "$short_bound"

# A transport plug-in loaded by path runs the job; one that cannot work
# (built for another ops version, failing to open) stops kvsd before any
# worker starts, naming the file and why.
stub="$(cd "$bld" && pwd)/tests/.libs/tp_stub.so"
name="kh-$$-plugin"
TP_STUB_SAYS=$work/$name.loaded KVS_TRANSPORT=$stub hosts "$name" "2 2" "$worker" sums
hosts_wait && [ -e "$work/$name.loaded" ]
tap $? "sums on hosts of 2 2 workers through a transport plug-in loaded by path"
for how in version open; do
    name="kh-$$-plugin-$how"
    mkdir -p "$work/$name"
    TP_STUB=$how KVS_TRANSPORT=$stub KVS_TEST_DIR=$work/$name timeout $((60 * slow)) "$kvsrun" -j "$name" \
        -n 1 --nodes 2 --node-rank 1 --coord "127.0.0.1:1" \
        sh -c 'touch "$KVS_TEST_DIR/ran"' >"$work/$name.log" 2>&1
    s=$?
    says="built for transport ops version 2"
    [ $how = open ] && says="does not open here: the stub's device is unplugged"
    [ $s -ne 0 ] && [ ! -e "$work/$name/ran" ] && grep -q "$stub" "$work/$name.log" \
        && grep -q "$says" "$work/$name.log"
    r=$?
    [ $r -eq 0 ] || sed 's/^/#   /' "$work/$name.log" | tail -n 5
    tap $r "a transport plug-in that fails ($how) stops kvsd before any worker, naming the file"
done

# The launchers' variables instead of options: one kvsrun per host as srun
# (the coordinator the node list's first host, the port from KVS_COORD) and
# mpirun (KVS_COORD naming host 0) would start them.
envjob() {  # envjob NAME VAR_PREFIX...: runs sums on 2 hosts of 1 worker each
    ename=$1
    shift
    mkdir -p "$work/$ename"
    epids=()
    for h in 0 1; do
        env "$@" "$rank_var=$h" KVS_TEST_DIR="$work/$ename" timeout $((120 * slow)) "$kvsrun" \
            -j "$ename" -n 1 sh -c 'echo "rank $KVS_RANK of $KVS_NUM_WORKERS"; exec "$0" sums' \
            "$worker" >"$work/$ename.h$h.log" 2>&1 &
        epids+=($!)
    done
    es=0
    for h in 0 1; do
        wait "${epids[$h]}" || { es=1; sed 's/^/#   /' "$work/$ename.h$h.log" | tail -n 5; }
        # one job of two hosts: host h's worker is rank h of 2
        grep -qx "rank $h of 2" "$work/$ename.h$h.log" || { es=1; echo "# host $h: not rank $h of 2"; }
    done
    return $es
}
port=$(free_port)
rank_var=SLURM_NODEID
envjob "kh-$$-slurm" SLURM_NNODES=2 SLURM_JOB_NODELIST="127.0.0.1,127.0.0.2" \
    KVS_COORD=":$port" KVS_TRANSPORT=socket
tap $? "under Slurm's variables: the node list's first host, KVS_COORD's port"
port=$(free_port)
rank_var=OMPI_COMM_WORLD_RANK
envjob "kh-$$-ompi" OMPI_COMM_WORLD_SIZE=2 KVS_COORD="127.0.0.1:$port"
tap $? "under Open MPI's variables, KVS_COORD naming host 0"

# Faults, over $fault_transports.
for KVS_TRANSPORT in $fault_transports; do
    use_transport "$KVS_TRANSPORT"
    # A worker killed on one host fails the job on every host.
    name="kh-$$-peer-$KVS_TRANSPORT"
    hosts "$name" "2 2" "$worker" peer_dies
    wait "${hpids[0]}"; s0=$?
    wait "${hpids[1]}"; s1=$?
    [ $s0 -eq 0 ] && [ $s1 -eq 137 ]
    tap $? "a worker killed on host 1 ($KVS_TRANSPORT): host 0's workers see KVS_EPEERDEAD, host 1's kvsrun exits 137"

    # A host's kvsd killed, or stopped: the others fail within 5 s (killed)
    # or the heartbeat bound (stopped), naming the host.
    for how in KILL STOP; do
        name="kh-$$-host-$how-$KVS_TRANSPORT"
        within=5
        [ $how = STOP ] && within=8
        export KVS_TEST_WITHIN=$within
        hosts "$name" "1 1" "$worker" host_dies
        unset KVS_TEST_WITHIN
        wait_for 200 test -f "$work/$name/ready.0" && wait_for 100 test -f "$work/$name/ready.1"
        k=$(pgrep -f "kvsd --job $name -n 1 -q --nodes 2 --node-rank 1")
        date +%s%3N >"$work/$name/killed"
        kill -$how "$k"
        wait "${hpids[0]}"; s0=$?
        [ $how = STOP ] && kill -CONT "$k"
        wait "${hpids[1]}"; s1=$?
        [ $s0 -eq 0 ] || sed 's/^/#   /' "$work/$name.h0.log" | tail -n 5
        [ $s0 -eq 0 ] && gone "$k"
        tap $? "host 1's kvsd gets SIG$how ($KVS_TRANSPORT): host 0 fails within $within s, naming it"
    done

    # Busy is not dead: under a silence bound of 2 s, a job whose kvsd
    # serve passes take many such bounds (200,000 keys to init and sum
    # across the hosts, and frames queued by the hundred thousand) ends
    # well; a stopped kvsd is still found dead within that bound.
    KVSD=$short_bound
    name="kh-$$-busy-$KVS_TRANSPORT"
    export KVS_TEST_KEYS=200000
    timeout=60 hosts "$name" "1 1" "$training" many_keys
    unset KVS_TEST_KEYS
    hosts_wait && grep -q "init of 200000 keys" "$work/$name.h0.log"
    tap $? "a host busy for many silence bounds is not declared dead ($KVS_TRANSPORT)"
    name="kh-$$-busy-STOP-$KVS_TRANSPORT"
    export KVS_TEST_WITHIN=4
    hosts "$name" "1 1" "$worker" host_dies
    unset KVS_TEST_WITHIN
    wait_for 200 test -f "$work/$name/ready.0" && wait_for 100 test -f "$work/$name/ready.1"
    k=$(pgrep -f "kvsd --job $name -n 1 -q --nodes 2 --node-rank 1")
    date +%s%3N >"$work/$name/killed"
    kill -STOP "$k"
    wait "${hpids[0]}"; s0=$?
    kill -CONT "$k"
    wait "${hpids[1]}"
    [ $s0 -eq 0 ] || sed 's/^/#   /' "$work/$name.h0.log" | tail -n 5
    [ $s0 -eq 0 ] && gone "$k"
    tap $? "host 1's kvsd stopped under a 2 s silence bound ($KVS_TRANSPORT): host 0 fails within 4 s"
    KVSD=$real_kvsd
done
KVS_TRANSPORT=socket
unset UCX_TLS
hosts_done
