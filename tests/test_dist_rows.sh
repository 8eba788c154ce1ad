#!/bin/sh
# Description: row-sparse values in dist_sync and dist_async jobs of real
# processes (kvsd and 2-4 workers, tests/dist_rows): sums of overlapping
# and repeated rows against each worker's reference, empty pushes, lazy
# sgd and adam leaving absent rows bit for bit, a round of dense and
# row-sparse pushes, compact pulls of repeated and unsorted ids, bad values
# refused with nothing changed, kvsctl stats counting only the rows
# pushed and pulled of a table of a million rows, and each key's rows
# pushed and pulled on its own, and an init from rows of a table bigger
# than the job's staging; then, in dist_sync, the same of small keys
# whose rounds the workers combine.
set -u
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/distlib.sh
. "$(dirname "$0")/distlib.sh"

prog="$bld/tests/dist_rows"
KVS_COMBINE=0 KVS_TEST_KVSCTL=$(cd "$bld" && pwd)/daemon/kvsctl/kvsctl
export KVS_COMBINE KVS_TEST_KVSCTL
for type in dist_sync dist_async; do
    for n in 2 3 4; do job $n sums; done
done
type=
for n in 2 4; do job $n lazy; done
job 2 lazy_chunks
job 2 lists
for n in 2 3; do job $n mixed; done
job 2 bad
job 2 bytes
# An init from rows of a 4 MiB table with 1 MiB of staging: only the rows
# given cross.
for n in 2 3; do job $n init 0 --staging 1M; done
# The same in dist_sync with the small keys combined by the workers (the
# default), each job checking that its rounds went through the combine
# area: row-sparse pushes and compact pulls of those keys.
KVS_COMBINE=1 KVS_TEST_COMBINED=1
export KVS_TEST_COMBINED
for n in 2 3 4; do job $n sums; done
for n in 2 3 4; do job $n lazy; done
for n in 2 4; do job $n lazy_chunks; done
for n in 2 3; do job $n lists; done
for n in 2 3; do job $n mixed; done
job 2 bad
dist_done
