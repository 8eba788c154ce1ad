#!/bin/bash
# Description: row-sparse calls in jobs across hosts (2 hosts x 2 workers,
# sockets over loopback; tests/dist_rows hosts): compact pulls on every
# host of a small key and of a key split over the hosts, after dense
# rounds whose rows every host pushes, checked by value against each
# worker's reference; a row-sparse push and pushpull refused with
# KVS_ENOTSUP, naming why, and changing nothing; the same in dist_async.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/hostslib.sh
. "$(dirname "$0")/hostslib.sh"

use_transport socket
prog="$bld/tests/dist_rows"
job "2 2" hosts
job "1 2" hosts dist_async
hosts_done
