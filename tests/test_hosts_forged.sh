#!/bin/bash
# Description: a host that holds the job's secret and sends forged frames
# (tests/forge_host, as host 1 of a two-host job whose host 0 runs one
# worker, tests/forge_worker, which inits key 3 of 4,096 bytes and key 5
# of 65,536): a frame whose head claims 1 TiB, a frame of key 3 as 8,192
# bytes, a frame of a key the job never declared, a rows frame of key 3
# whose count of rows is not its length, a rows forward (a dist_async
# push) whose row ids go down. Each time host 0's kvsd
# refuses the frame with the job failed naming the host and the sizes,
# within the deadline, the worker and the forged host both told; the
# 1 TiB frame under a 4 GiB address-space limit, so that an attempt to
# take its memory would show as "out of memory" instead.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/hostslib.sh
. "$(dirname "$0")/hostslib.sh"

forge="$bld/tests/forge_host"
fworker="$bld/tests/forge_worker"
if [ ! -x "$forge" ] || [ ! -x "$fworker" ]; then
    n_test=$((n_test + 1))
    echo "ok $n_test - forged frames # SKIP tests/forge_host is not built"
    hosts_done
fi
KVS_TRANSPORT=socket
export KVS_TRANSPORT
secret=$work/secret
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$secret"
chmod 600 "$secret"
# A sanitizer's shadow memory needs far more address space than the limit.
limit=$((4 * 1024 * 1024))
if nm "$(dirname "$KVSD")/.libs/kvsd" "$KVSD" 2>/dev/null | grep -q __asan_init; then
    limit=unlimited
fi

# forged MODE WHAT...: host 0 (kvsrun, its kvsd and forge_worker) and the
# forged host 1 sending MODE's frame; 0 when host 0 failed the job within
# 30 s (its worker, which expects it, then exits 0), every host said so,
# and host 0's log holds each WHAT.
forged() {
    mode=$1
    shift
    fname="kh-$$-forged-$mode"
    port=$(free_port)
    mkdir -p "$work/$fname"
    t0=$(now_ms)
    (ulimit -v "$limit"; KVS_TEST_DIR=$work/$fname exec timeout $((60 * slow)) "$kvsrun" \
        -j "$fname" -n 1 --nodes 2 --node-rank 0 --coord "127.0.0.1:$port" --arena 64M \
        --secret-file "$secret" "$fworker") >"$work/$fname.h0.log" 2>&1 &
    h0=$!
    "$forge" "$secret" "$fname" "$port" "$mode" $((30 * slow)) >"$work/$fname.h1.log" 2>&1
    s1=$?
    wait "$h0"
    s0=$?
    t1=$(now_ms)
    r=0
    [ $s1 -eq 0 ] || { echo "# the forged host exited $s1"; r=1; }
    [ $s0 -ne 124 ] && [ $s0 -ne 137 ] || { echo "# host 0's kvsrun timed out"; r=1; }
    [ $((t1 - t0)) -lt $((30000 * slow)) ] || { echo "# took $((t1 - t0)) ms"; r=1; }
    grep -q "forge_worker: keys 3 and 5 inited" "$work/$fname.h0.log" \
        && grep -q "forge_worker: the job failed: KVS_EPROTO" "$work/$fname.h0.log" \
        || { echo "# the worker did not see the job fail"; r=1; }
    grep -q "forge_host: host 0 \(failed the job\|ended the link\)" "$work/$fname.h1.log" \
        || { echo "# the forged host did not hear of it"; r=1; }
    for what in "$@"; do
        grep -qF -- "$what" "$work/$fname.h0.log" || { echo "# host 0 does not say: $what"; r=1; }
    done
    if grep -q "out of memory" "$work/$fname.h0.log"; then
        echo "# host 0 tried to take the frame's memory"
        r=1
    fi
    [ $r -eq 0 ] || sed 's/^/#   /' "$work/$fname.h0.log" "$work/$fname.h1.log" | tail -n 12
    return $r
}

forged tib "host 1 (127.0.0.1) sent a malformed frame: a partial frame of 1099511627776 bytes, more than this job lets it carry" \
    "the job's largest key here is 65536 bytes"
tap $? "a forged frame claiming 1 TiB fails the job naming the host, nothing allocated"
forged over "host 1 (127.0.0.1) broke the protocol: a partial of 8192 bytes for key 3 of 4096 bytes"
tap $? "a forged frame of key 3 bigger than key 3 fails the job naming the host and both sizes"
forged unknown "host 1 (127.0.0.1) broke the protocol: a partial of 16 bytes for key 9, which this job has not declared here"
tap $? "a forged frame of a key the job never declared fails the job naming the host"
forged rows "host 1 (127.0.0.1) broke the protocol: partial: 0 rows in 32 bytes, of 1024 rows of 4 bytes"
tap $? "a forged rows frame whose count is not its length fails the job naming the host"
forged rows_forward "host 1 (127.0.0.1) broke the protocol: forward: row id 2 at position 1 is not ascending within rows [0, 1024)"
tap $? "a forged rows forward whose row ids go down fails the job naming the host"
hosts_done
