#!/bin/bash
# Description: jobs across hosts, each host a kvsrun with its own kvsd on
# this machine, linked over loopback TCP (both transports): the dist tests'
# scenarios give the results they give on one host; a host's kvsd killed
# or stopped fails the job everywhere within its bound, naming the host;
# wrong, missing and loose secrets, garbage, idle connections and a port
# scan never get past the handshake; nothing is left behind.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
bld=${top_builddir:-.}
kvsrun="$bld/daemon/kvsrun"
worker="$bld/tests/dist_worker"
training="$bld/tests/dist_training"
KVSD="$bld/daemon/kvsd/kvsd"
export KVSD
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
private_runtime
work=$(mktemp -d)
nsa=kh$$a nsb=kh$$b
trap 'pkill -f "kvsd --job kh-$$-" 2>/dev/null; ip netns del $nsa 2>/dev/null; ip netns del $nsb 2>/dev/null; rm -rf "$rt" "$work"' EXIT
n_test=0

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# hosts NAME "N0 N1 ..." PROGRAM ARGS...: one kvsrun per host, in the
# background, host h with N_h workers; their pids in $hpids, logs in
# $work/NAME.h<h>.log. KVS_TEST_DIR is $work/NAME.
hosts() {
    hname=$1 counts=($2)
    shift 2
    nh=${#counts[@]}
    port=$(free_port)
    mkdir -p "$work/$hname"
    hpids=()
    for h in $(seq 0 $((nh - 1))); do
        KVS_TEST_DIR=$work/$hname KVS_TIMEOUT=${timeout:-30} \
            timeout 120 "$kvsrun" -j "$hname" -n "${counts[$h]}" --nodes "$nh" --node-rank "$h" \
            --coord "127.0.0.1:$port" ${kvsrun_opts:-} "$@" >"$work/$hname.h$h.log" 2>&1 &
        hpids+=($!)
    done
}

# hosts_wait: 0 when every kvsrun of the last hosts() exited 0.
hosts_wait() {
    hw=0
    for h in "${!hpids[@]}"; do
        wait "${hpids[$h]}"
        s=$?
        [ "$s" -eq 0 ] || { echo "# $hname host $h exited $s"; sed 's/^/#   /' "$work/$hname.h$h.log" | tail -n 8; hw=1; }
    done
    if ls "$XDG_RUNTIME_DIR/kvs/$hname".* >/dev/null 2>&1; then
        echo "# $hname left files behind"; hw=1
    fi
    return $hw
}

# job "N0 N1 ..." SCENARIO [TYPE]: a scenario of the dist tests across hosts.
job() {
    name="kh-$$-$2-${1// /-}-${KVS_TRANSPORT}${3:+-$3}"
    hosts "$name" "$1" "${prog:-$worker}" "$2" ${3:+"$3"}
    hosts_wait
    tap $? "$2 on hosts of $1 workers over $KVS_TRANSPORT${3:+ ($3)}"
}

# use_transport T: KVS_TRANSPORT=T, and for ucx its TCP transport only.
use_transport() {
    KVS_TRANSPORT=$1
    export KVS_TRANSPORT
    if [ "$1" = ucx ]; then export UCX_TLS=tcp; else unset UCX_TLS; fi
}

transports="uring socket"
# The UCX plug-in, from the build tree, over UCX's TCP transport (the
# wire a cluster without a fabric has); further down also with UCX free
# to pick its shared-memory transports, as on one machine.
ucx_why=""
if [ -f "$bld/daemon/.libs/kvs-transport-ucx.so" ]; then
    KVS_TRANSPORT_DIR="$(cd "$bld/daemon/.libs" && pwd)"
    export KVS_TRANSPORT_DIR
    transports="$transports ucx"
else
    ucx_why="the UCX plug-in is not built (configure found no UCX: apt-get install libucx-dev)"
fi

for KVS_TRANSPORT in $transports; do
    use_transport "$KVS_TRANSPORT"
    job "2 2" sums
    job "1 2 1" sums
    job "2 2" big
    job "2 1" init
    job "2 2" optimizer
    job "1 1 1" barrier
    job "2 2" uneven
    job "2 2" async
    job "2 2" errors
    job "2 1" buffers
    job "2 2" long_list
    job "2 2" compress
    job "1 2" compress dist_async
    job "2 2" split
    job "1 1 1" split
    job "1 2" split dist_async
    job "2 2" states
    job "1 1 1" states
    prog=$training
    job "2 1" push_order
    job "2 1" threads
    job "1 2" tables
    job "2 2" many_keys
    job "1 1" row_sparse_empty dist_async
    prog=
    # train_linreg: 2 hosts x 2 workers learn what one process learns
    name="kh-$$-linreg-$KVS_TRANSPORT"
    hosts "$name" "2 2" "$bld/examples/train_linreg"
    hosts_wait && grep -q "matches a single-process run with 4x the batch: yes" "$work/$name.h0.log"
    tap $? "train_linreg on 2 hosts x 2 workers over $KVS_TRANSPORT"
done
if [ -z "$ucx_why" ]; then
    # UCX free to choose: shared memory where it can (it keeps TCP for
    # messages, since only TCP tells of a dead peer), on one machine.
    unset UCX_TLS
    KVS_TRANSPORT=ucx
    for sc in sums big states; do
        name="kh-$$-$sc-ucx-any"
        hosts "$name" "2 2" "$worker" "$sc"
        hosts_wait
        tap $? "$sc on hosts of 2 2 workers over ucx, UCX choosing its transports"
    done
    # UCX's own transports must agree with kvsd's: one host on ucx, one on
    # sockets, is refused at once, saying why.
    name="kh-$$-mixed"
    port=$(free_port)
    KVS_TRANSPORT=ucx timeout 60 "$kvsrun" -j "$name" -n 1 --nodes 2 --node-rank 0 \
        --coord "127.0.0.1:$port" "$worker" sums >"$work/$name.h0.log" 2>&1 &
    h0=$!
    KVS_TRANSPORT=socket timeout 60 "$kvsrun" -j "$name" -n 1 --nodes 2 --node-rank 1 \
        --coord "127.0.0.1:$port" "$worker" sums >"$work/$name.h1.log" 2>&1
    s1=$?
    wait "$h0"; s0=$?
    [ $s0 -ne 0 ] && grep -q "KVS_TRANSPORT must be the same on every host" "$work/$name.h0.log"
    r=$?
    [ $r -eq 0 ] || sed 's/^/#   /' "$work/$name.h0.log" "$work/$name.h1.log" | tail -n 8
    tap $r "hosts on ucx and on sockets: refused, saying KVS_TRANSPORT must agree"
    [ $s1 -ne 0 ]
    tap $? "... and the host on sockets fails too"
else
    n_test=$((n_test + 1))
    echo "ok $n_test - ucx # SKIP $ucx_why"
fi
KVS_TRANSPORT=socket
export KVS_TRANSPORT

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
    TP_STUB=$how KVS_TRANSPORT=$stub KVS_TEST_DIR=$work/$name timeout 60 "$kvsrun" -j "$name" \
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
        env "$@" "$rank_var=$h" KVS_TEST_DIR="$work/$ename" timeout 120 "$kvsrun" \
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

# Faults, over sockets and, where it is built, UCX.
fault_transports=socket
[ -z "$ucx_why" ] && fault_transports="socket ucx"
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
done
KVS_TRANSPORT=socket
unset UCX_TLS

# Secrets.
secret=$work/secret
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$secret"
chmod 600 "$secret"
other=$work/other
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$other"
chmod 600 "$other"

name="kh-$$-secret"
kvsrun_opts="--secret-file $secret" hosts "$name" "1 1" "$worker" sums
hosts_wait
tap $? "a job with a secret file"

# The wrong secret: host 1 is refused at once, and says why.
name="kh-$$-wrong"
port=$(free_port)
timeout 60 "$kvsrun" -j "$name" -n 1 --nodes 2 --node-rank 0 --coord "127.0.0.1:$port" \
    --secret-file "$secret" "$worker" sums >"$work/wrong.h0.log" 2>&1 &
h0=$!
t0=$(now_ms)
timeout 60 "$kvsrun" -j "$name" -n 1 --nodes 2 --node-rank 1 --coord "127.0.0.1:$port" \
    --secret-file "$other" "$worker" sums >"$work/wrong.h1.log" 2>&1
s1=$?
t1=$(now_ms)
kill -TERM "$h0"; wait "$h0"
[ $s1 -ne 0 ] && [ $((t1 - t0)) -lt 10000 ] && grep -q "secret" "$work/wrong.h1.log"
tap $? "a host with the wrong secret is refused within 10 s, and says why"

# A secret file others may read is refused.
chmod 644 "$other"
timeout 30 "$kvsrun" -j "kh-$$-loose" -n 1 --nodes 2 --node-rank 1 --coord "127.0.0.1:1" \
    --secret-file "$other" "$worker" sums >"$work/loose.log" 2>&1
s=$?
[ $s -ne 0 ] && grep -q "group or others" "$work/loose.log"
tap $? "a secret file readable by others is refused, with the fix"

# Without a secret, a non-loopback address is refused.
timeout 30 "$kvsrun" -j "kh-$$-nosecret" -n 1 --nodes 2 --node-rank 1 --coord "127.0.0.1:1" \
    --bind 0.0.0.0 "$worker" sums >"$work/nosecret.log" 2>&1
s=$?
[ $s -ne 0 ] && grep -q "loopback only" "$work/nosecret.log"
tap $? "without a secret, a non-loopback bind is refused"

# Garbage, an idle connection and a port scan at host 0 during start-up
# never get in, and the job runs.
name="kh-$$-garbage"
port=$(free_port)
mkdir -p "$work/$name"
KVS_TEST_DIR=$work/$name timeout 120 "$kvsrun" -j "$name" -n 1 --nodes 2 --node-rank 0 \
    --coord "127.0.0.1:$port" --secret-file "$secret" "$worker" sums >"$work/$name.h0.log" 2>&1 &
h0=$!
python3 - "$port" <<'EOF'
import os, socket, sys, time
port = int(sys.argv[1])
for _ in range(50):                       # wait for the listener
    try:
        socket.create_connection(("127.0.0.1", port), 0.2).close(); break
    except OSError:
        time.sleep(0.1)
idle = socket.create_connection(("127.0.0.1", port))        # says nothing
for _ in range(30):                                          # a port scan
    try:
        socket.create_connection(("127.0.0.1", port), 0.2).close()
    except OSError:
        pass
g = socket.create_connection(("127.0.0.1", port))
g.sendall(os.urandom(4096))                                  # garbage
time.sleep(0.5)
g.close()
h = socket.create_connection(("127.0.0.1", port))           # a head that lies
h.sendall(b"KSH1" + bytes([1, 0, 0, 0]) + (1).to_bytes(4, "little") + (0).to_bytes(4, "little")
          + (1 << 40).to_bytes(8, "little"))
time.sleep(0.2)
h.close()
idle.close()
EOF
KVS_TEST_DIR=$work/$name timeout 120 "$kvsrun" -j "$name" -n 1 --nodes 2 --node-rank 1 \
    --coord "127.0.0.1:$port" --secret-file "$secret" "$worker" sums >"$work/$name.h1.log" 2>&1
s1=$?
wait "$h0"; s0=$?
[ $s0 -eq 0 ] && [ $s1 -eq 0 ]
tap $? "garbage, an idle connection and a port scan during start-up: the job runs"

# Each host in its own network namespace, joined by a veth pair: a real
# network stack between them, and a link that can be cut (root only).
ns_ok=0
if [ "$(id -u)" = 0 ] && command -v ip >/dev/null && ip netns add $nsa 2>/dev/null; then
    net=10.$((($$ >> 8) % 200 + 20)).$(($$ % 250)).
    ip netns add $nsb && ip link add kh$$va type veth peer name kh$$vb \
        && ip link set kh$$va netns $nsa && ip link set kh$$vb netns $nsb \
        && ip -n $nsa addr add ${net}1/24 dev kh$$va && ip -n $nsb addr add ${net}2/24 dev kh$$vb \
        && ip -n $nsa link set kh$$va up && ip -n $nsb link set kh$$vb up \
        && ip -n $nsa link set lo up && ip -n $nsb link set lo up && ns_ok=1
fi
# nshosts NAME SCENARIO: host 0 in $nsa, host 1 in $nsb, a worker each.
nshosts() {
    hname=$1
    mkdir -p "$work/$hname"
    hpids=()
    for h in 0 1; do
        ns=$nsa
        [ $h = 1 ] && ns=$nsb
        KVS_TEST_DIR=$work/$hname KVS_TIMEOUT=30 timeout 120 ip netns exec $ns "$kvsrun" \
            -j "$hname" -n 1 --nodes 2 --node-rank $h --coord "${net}1:47470" \
            --bind "${net}$((h + 1))" --secret-file "$secret" "$worker" "$2" \
            >"$work/$hname.h$h.log" 2>&1 &
        hpids+=($!)
    done
}
if [ $ns_ok = 1 ]; then
    for KVS_TRANSPORT in $transports; do
        use_transport "$KVS_TRANSPORT"
        name="kh-$$-netns-$KVS_TRANSPORT"
        nshosts "$name" sums
        hosts_wait
        tap $? "sums with each host in its own network namespace over $KVS_TRANSPORT"
    done
    for KVS_TRANSPORT in $fault_transports; do
        use_transport "$KVS_TRANSPORT"
        name="kh-$$-cut-$KVS_TRANSPORT"
        ip -n $nsb link set kh$$vb up
        export KVS_TEST_WITHIN=8
        nshosts "$name" host_dies
        unset KVS_TEST_WITHIN
        wait_for 200 test -f "$work/$name/ready.0" && wait_for 100 test -f "$work/$name/ready.1"
        date +%s%3N >"$work/$name/killed"
        ip -n $nsb link set kh$$vb down
        hosts_wait
        tap $? "the link between two hosts cut ($KVS_TRANSPORT): both fail within 8 s, naming the other"
    done
else
    for t in $transports $fault_transports; do
        n_test=$((n_test + 1))
        echo "ok $n_test - network namespaces # SKIP needs root and ip netns"
    done
fi

echo "1..$n_test"
exit 0
