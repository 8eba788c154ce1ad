#!/bin/sh
# Description: what training code does (tests/dist_training), in jobs of
# real processes: pushes in any order and from threads, a close after the
# last push, an init after rank 0 left, the empty string key, 100,000 keys
# in a call, a lone optimizer, empty row ids, zero-copy buffers in any
# order, threads crowding a small staging area, lists in tables (errors
# deep in them; a staging area they crowd), a buffer and a view kept past
# the close. Through kvsd, and with the
# workers combining the small keys' rounds.
set -u
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/distlib.sh
. "$(dirname "$0")/distlib.sh"

prog=$bld/tests/dist_training
for KVS_COMBINE in 0 1; do
    export KVS_COMBINE
    for n in 2 3; do job $n push_order; done
    for n in 2 3; do job $n threads; done
    job 3 push_close
    job 3 init_after_leave
    job 2 empty_key
    job 2 many_keys
    for n in 2 3; do job $n lone_optimizer; done
    for type in dist_sync dist_async; do job 2 row_sparse_empty; done
    type=
    job 2 buffers_order
    job 3 crowded 0 --staging 20K
    for n in 2 3; do job $n tables; done
    job 2 tables_spill 0 --staging 1M
    job 2 held_close
done
unset KVS_COMBINE
prog=
dist_done
