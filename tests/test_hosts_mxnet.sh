#!/bin/bash
# Description: MXNet's tests/nightly/dist_sync_kvstore.py, ported
# (tests/dist_mxnet.c), in a job across hosts (2 hosts x 2 workers, and
# 3 hosts x 1 worker; sockets over loopback): its big dense and row-sparse
# keys are split over the hosts by rows.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/hostslib.sh
. "$(dirname "$0")/hostslib.sh"

use_transport socket
prog="$bld/tests/dist_mxnet"
job "2 2" dist_sync_kvstore
job "1 1 1" dist_sync_kvstore
hosts_done
