#!/bin/bash
# Description: the dist tests' scenarios across hosts (each a kvsrun with its own
# kvsd on this machine) through the UCX plug-in from the build tree, over
# UCX's TCP transport, then with UCX free to pick its own transports; a
# host on ucx and one on sockets are refused at once, saying why. Skipped
# where the plug-in is not built.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/hostslib.sh
. "$(dirname "$0")/hostslib.sh"

if [ -n "$ucx_why" ]; then
    n_test=$((n_test + 1))
    echo "ok $n_test - ucx # SKIP $ucx_why"
    hosts_done
fi
use_transport ucx
scenarios
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
KVS_TRANSPORT=ucx timeout $((60 * slow)) "$kvsrun" -j "$name" -n 1 --nodes 2 --node-rank 0 \
    --coord "127.0.0.1:$port" "$worker" sums >"$work/$name.h0.log" 2>&1 &
h0=$!
KVS_TRANSPORT=socket timeout $((60 * slow)) "$kvsrun" -j "$name" -n 1 --nodes 2 --node-rank 1 \
    --coord "127.0.0.1:$port" "$worker" sums >"$work/$name.h1.log" 2>&1
s1=$?
wait "$h0"; s0=$?
[ $s0 -ne 0 ] && grep -q "KVS_TRANSPORT must be the same on every host" "$work/$name.h0.log"
r=$?
[ $r -eq 0 ] || sed 's/^/#   /' "$work/$name.h0.log" "$work/$name.h1.log" | tail -n 8
tap $r "hosts on ucx and on sockets: refused, saying KVS_TRANSPORT must agree"
[ $s1 -ne 0 ]
tap $? "... and the host on sockets fails too"
hosts_done
