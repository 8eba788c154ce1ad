#!/bin/bash
# Description: bytes between hosts follow the rows (tests/hosts_bytes):
# 2 hosts x 2 workers over loopback (sockets) in dist_sync push R rows a
# worker and pull R rows a step of a 32 MiB table under lazy adam; kvsctl
# stats on each host, before and after, counts the key's rows pushed,
# pulled, sent and received exactly, and the link's bytes sent a step are
# at most 1.2x the rows sent (a host's sums to the other owner, the
# owner's changed rows back) times a row's bytes.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/hostslib.sh
. "$(dirname "$0")/hostslib.sh"

use_transport socket
KVS_TEST_KVSCTL=$(cd "$bld" && pwd)/daemon/kvsctl/kvsctl
export KVS_TEST_KVSCTL
name="kh-$$-bytes"
hosts "$name" "2 2" "$bld/tests/hosts_bytes"
hosts_wait
rc=$?
grep -h "bytes in .* frames sent" "$work/$name".h*.log | sed 's/^/# /'
tap $rc "bytes sent a step within 1.2x of the rows on 2 hosts x 2 workers over socket"
hosts_done
