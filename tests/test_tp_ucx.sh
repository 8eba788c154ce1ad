#!/bin/sh
# Description: the UCX plug-in from the build tree drops a message that
# carries a forged token (tests/test_tp_ucx), within a minute.
bld=${top_builddir:-.}
exec timeout $((60 * ${KVS_TEST_SLOW:-1})) "$bld/tests/test_tp_ucx" \
    "$(cd "$bld" && pwd)/daemon/.libs/kvs-transport-ucx.so"
