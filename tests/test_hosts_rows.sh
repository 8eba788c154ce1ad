#!/bin/bash
# Description: row-sparse calls in jobs across hosts (2 hosts x 2 workers,
# sockets over loopback; tests/dist_rows): dist_sync row-sparse sums of
# overlapping and repeated rows, empty pushes, sgd; lazy sgd (momentum,
# wd) and adam against a local store given every worker's rows, absent
# rows bit-identical; a round of dense and row-sparse pushes; then
# (scenario hosts) an init from rows storing global rank 0's rows on every
# host, compact pulls and row-sparse pushes of a small key and
# of a key split over the hosts, by value; lazy adam and sgd on the split
# key, one round with rows in one host's range only, and adam with
# lazy_update=0 (every row as a local store's). The same across hosts in
# dist_async, where pushes apply in any order: no optimizer with pushes in
# turns (one between two barriers; a pushpull and an empty push among
# them), sgd lr=1 with every worker's overlapping, repeated and empty
# pushes at once (the end is the same in any order), and the three lazy
# cases with pushes in turns against a local store given each alone; on
# 2 hosts x 2 workers and on hosts of 1 and 2.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/hostslib.sh
. "$(dirname "$0")/hostslib.sh"

use_transport socket
prog="$bld/tests/dist_rows"
job "2 2" sums
job "2 2" lazy
job "2 2" mixed
job "2 2" hosts
job "2 2" hosts dist_async
job "1 2" hosts dist_async
hosts_done
