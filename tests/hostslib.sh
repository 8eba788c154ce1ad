# shellcheck shell=bash
# tests/hostslib.sh - what the test_hosts*.sh files share (bash): a job
# across hosts, each host a kvsrun with its own kvsd on this machine,
# linked over loopback; the transports this build has; the dist tests'
# scenarios as one list of jobs. Sourced after lib.sh; it makes the test's
# private runtime and work directories (removed on exit, with the ports
# the test took) and defines functions; the test then runs its jobs and
# ends with hosts_done, which prints the plan.
# Each job is bounded on its own: its kvsruns by `timeout` and its workers
# by KVS_TIMEOUT, scaled by $slow; the file's deadline is the last resort.
bld=${top_builddir:-.}
kvsrun="$bld/daemon/kvsrun/kvsrun"
worker="$bld/tests/dist_worker"
training="$bld/tests/dist_training"
KVSD="$bld/daemon/kvsd/kvsd"
export KVSD
private_runtime
work=$(mktemp -d)
# hosts_cleanup: what the test's EXIT trap does; a test with more to undo
# calls it from its own trap.
hosts_cleanup() {
    pkill -f "kvsd --job kh-$$-" 2>/dev/null
    ports_release
    rm -rf "$rt" "$work"
}
trap hosts_cleanup EXIT
n_test=0

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
        KVS_TEST_DIR=$work/$hname KVS_TIMEOUT=$((${timeout:-30} * slow)) \
            timeout $((120 * slow)) "$kvsrun" -j "$hname" -n "${counts[$h]}" --nodes "$nh" \
            --node-rank "$h" --coord "127.0.0.1:$port" ${kvsrun_opts:-} "$@" \
            >"$work/$hname.h$h.log" 2>&1 &
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
    if ls "$XDG_RUNTIME_DIR/kvs/$hname".* "$XDG_RUNTIME_DIR/kvs/$hname"@* >/dev/null 2>&1; then
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
# wire a cluster without a fabric has); test_hosts_ucx.sh also with UCX
# free to pick its shared-memory transports, as on one machine.
ucx_why=""
if [ -f "$bld/daemon/.libs/kvs-transport-ucx.so" ]; then
    KVS_TRANSPORT_DIR="$(cd "$bld/daemon/.libs" && pwd)"
    export KVS_TRANSPORT_DIR
    transports="$transports ucx"
else
    ucx_why="the UCX plug-in is not built (configure found no UCX: apt-get install libucx-dev)"
fi
# Faults, over sockets and, where it is built, UCX.
fault_transports=socket
[ -z "$ucx_why" ] && fault_transports="socket ucx"

# scenarios: the dist tests' scenarios across hosts over $KVS_TRANSPORT,
# and train_linreg: 2 hosts x 2 workers learn what one process learns.
scenarios() {
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
    name="kh-$$-linreg-$KVS_TRANSPORT"
    hosts "$name" "2 2" "$bld/examples/train_linreg"
    hosts_wait && grep -q "matches a single-process run with 4x the batch: yes" "$work/$name.h0.log"
    tap $? "train_linreg on 2 hosts x 2 workers over $KVS_TRANSPORT"
}

# hosts_done: the plan, after the last case.
hosts_done() {
    echo "1..$n_test"
    exit 0
}
