#!/bin/bash
# Description: jobs across hosts, each host in its own network namespace, joined
# by a veth pair: a real network stack between them over every transport,
# and a link cut (over sockets and, where it is built, UCX): both hosts
# fail within 8 s, naming the other. Needs root and ip netns; skipped
# otherwise.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/hostslib.sh
. "$(dirname "$0")/hostslib.sh"

nsa=kh$$a nsb=kh$$b
trap 'ip netns del $nsa 2>/dev/null; ip netns del $nsb 2>/dev/null; hosts_cleanup' EXIT
KVS_TRANSPORT=socket
export KVS_TRANSPORT
secret=$work/secret
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$secret"
chmod 600 "$secret"

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
        KVS_TEST_DIR=$work/$hname KVS_TIMEOUT=$((30 * slow)) timeout $((120 * slow)) ip netns exec $ns "$kvsrun" \
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

hosts_done
