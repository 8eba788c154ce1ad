#!/bin/sh
# Description: MXNet's tests/nightly/dist_sync_kvstore.py, ported
# (tests/dist_mxnet.c): dense and row-sparse keys in float32 and float16
# under MXNet's "test" optimizer, row-sparse pushes of one row, of none
# and of 30% of a big table, pulled compactly and into dense outs by random
# row ids; inits; 2bit compression. With 2 and 4 workers, keys combined or
# not.
set -u
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/distlib.sh
. "$(dirname "$0")/distlib.sh"

prog="$bld/tests/dist_mxnet"
for n in 2 4; do job $n dist_sync_kvstore; done
KVS_COMBINE=0
export KVS_COMBINE
job 3 dist_sync_kvstore
dist_done
