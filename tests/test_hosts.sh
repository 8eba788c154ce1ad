#!/bin/bash
# Description: jobs across hosts, each host a kvsrun with its own kvsd on this machine,
# linked over loopback TCP by the socket transport: the dist tests'
# scenarios give the results they give on one host, and nothing is left
# behind. The same over io_uring: test_hosts_uring.sh; over UCX:
# test_hosts_ucx.sh; plug-ins, launchers' variables and faults:
# test_hosts_faults.sh; secrets and what never gets past the handshake:
# test_hosts_secrets.sh; hosts in network namespaces: test_hosts_netns.sh.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/hostslib.sh
. "$(dirname "$0")/hostslib.sh"

use_transport socket
scenarios
hosts_done
