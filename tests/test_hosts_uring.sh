#!/bin/bash
# Description: the dist tests' scenarios across hosts (each a kvsrun with its own
# kvsd on this machine) over the io_uring transport, as test_hosts.sh runs
# them over sockets.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/hostslib.sh
. "$(dirname "$0")/hostslib.sh"

use_transport uring
scenarios
hosts_done
