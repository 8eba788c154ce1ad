#!/bin/sh
# Description: programs written only against the installed kvs.h, compiled
# and linked through pkg-config, get every semantic right: the API tests,
# the MXNet ports and the quickstart, built from the installed files alone;
# the installed Python package runs the chapter, and its version is the
# library's and pkg-config's; the installed library starts the installed
# kvsd for a job that no kvsrun started.
# Usage: test_install.sh PREFIX (with PKG_CONFIG_PATH pointing into it).
set -eu
prefix=$1
srcdir=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc=${CC:-cc}

# The sources must not see the source tree's headers: copy them alone,
# with the tests' own helper header, which includes only kvs.h and cmocka.
cp "$srcdir/tests/test_api.c" "$srcdir/tests/test_api_pushpull.c" "$srcdir/tests/test_api_update.c" \
    "$srcdir/tests/test_api_states.c" "$srcdir/tests/test_mxnet.c" "$srcdir/tests/test_mxnet_docs.c" \
    "$srcdir/tests/test_buffers.c" "$srcdir/tests/testutil.h" "$srcdir/examples/quickstart.c" "$work/"
flags=$(pkg-config --cflags --libs kvs)
case "$flags" in *"$prefix"*) ;; *) echo "pkg-config did not find kvs in $prefix: $flags" >&2; exit 1 ;; esac
cmocka=$(pkg-config --cflags --libs cmocka)
cd "$work"
export LD_LIBRARY_PATH="$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for t in test_api test_api_pushpull test_api_update test_api_states test_mxnet test_mxnet_docs test_buffers; do
    # shellcheck disable=SC2086
    $cc -std=gnu11 -Wall -Wextra -Werror -o "$t" "$t.c" $flags $cmocka -lm
    ./"$t"
done
# shellcheck disable=SC2086
$cc -std=c11 -pedantic -Wall -Wextra -Werror -o quickstart quickstart.c $flags
./quickstart | diff "$srcdir/tests/quickstart.expected" -

# A transport plug-in written against the installed kvs-transport.h alone
# passes kvsd's checks of its table (version, size, calls) and fails where
# it says it fails, in its open; kvsd itself links no UCX; the installed
# UCX plug-in, where built, is found by its name and links two hosts.
cat >tp_mine.c <<'EOF2'
#include <errno.h>
#include <stdio.h>
#include <kvs-transport.h>

static int mine_open(struct kvs_transport **out, struct kvs_transport_error *e)
{
    (void)out;
    e->code = -ENODEV;
    snprintf(e->msg, sizeof e->msg, "the carrier pigeons are asleep");
    return -ENODEV;
}
static void mine_close(struct kvs_transport *t) { (void)t; }
static int mine_adopt(struct kvs_transport *t, int fd, int64_t d, int *c,
                      struct kvs_transport_error *e) { (void)t; (void)fd; (void)d; (void)c; (void)e; return -ENOSYS; }
static int mine_send(struct kvs_transport *t, int c, const void *b, size_t n, uint64_t k,
                     struct kvs_transport_error *e) { (void)t; (void)c; (void)b; (void)n; (void)k; (void)e; return -ENOSYS; }
static int mine_wait(struct kvs_transport *t, struct kvs_transport_event *ev, int m, int64_t d,
                     struct kvs_transport_error *e) { (void)t; (void)ev; (void)m; (void)d; (void)e; return -ENOSYS; }
static void mine_drop(struct kvs_transport *t, int c) { (void)t; (void)c; }
static void mine_wake(struct kvs_transport *t) { (void)t; }
static const struct kvs_transport_ops ops = {
    KVS_TRANSPORT_VERSION, sizeof(struct kvs_transport_ops), "pigeon",
    mine_open, mine_close, mine_adopt, mine_send, mine_wait, mine_drop, mine_wake,
};
const struct kvs_transport_ops *kvs_transport_entry(void) { return &ops; }
EOF2
# shellcheck disable=SC2086
$cc -std=c11 -pedantic -Wall -Wextra -Werror -shared -fPIC -o tp_mine.so tp_mine.c $(pkg-config --cflags kvs)
export XDG_RUNTIME_DIR="$work/rt"
mkdir -m 700 "$work/rt"
if KVS_TRANSPORT="$work/tp_mine.so" "$prefix/bin/kvsrun" -j inst-tp -n 1 --nodes 2 --node-rank 1 \
        --coord 127.0.0.1:1 true >tp.log 2>&1 || ! grep -q "the pigeon transport does not open here: the carrier pigeons are asleep" tp.log; then
    echo "a plug-in built against the installed header was not checked as it should be:" >&2
    cat tp.log >&2
    exit 1
fi
if ldd "$prefix/bin/kvsd" | grep -i ucx; then
    echo "kvsd links UCX" >&2
    exit 1
fi
# A dist worker of the installed library: each of 2 pushes 1s, pulls 2s.
cat >sum2.c <<'EOF2'
#include <stdio.h>
#include <kvs.h>

int main(void)
{
    float v[4] = { 1, 1, 1, 1 }, w[4] = { 0 };
    kvs_array_t a = { .data = v, .dtype = KVS_FLOAT32, .ndim = 1, .shape = { 4 } }, o = a;
    kvs_key_t k = KVS_INT_KEY(3);
    kvs_t *kv;

    o.data = w;
    if (kvs_create("dist_sync", &kv))
        return fprintf(stderr, "sum2: %s\n", kvs_last_error(NULL)), 1;
    if (kvs_init(kv, 1, &k, &a) || kvs_push(kv, 1, &k, &a, 0) || kvs_pull(kv, 1, &k, &o, 0)
        || w[0] != 2 || w[3] != 2)
        return fprintf(stderr, "sum2: %s (pulled %g)\n", kvs_last_error(kv), w[0]), 1;
    kvs_close(kv);
    return 0;
}
EOF2
# shellcheck disable=SC2086
$cc -std=c11 -Wall -Wextra -Werror -o sum2 sum2.c $flags
if [ -f "$prefix/lib/kvs/kvs-transport-ucx.so" ]; then
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    for h in 0 1; do
        env -u KVS_TRANSPORT_DIR KVS_TRANSPORT=ucx UCX_TLS=tcp timeout 60 "$prefix/bin/kvsrun" \
            -j inst-ucx -n 1 --nodes 2 --node-rank $h --coord "127.0.0.1:$port" ./sum2 >ucx.$h.log 2>&1 &
        eval "ucx$h=\$!"
    done
    # shellcheck disable=SC2154
    if ! wait "$ucx0" || ! wait "$ucx1"; then
        echo "two hosts over the installed UCX plug-in failed:" >&2
        cat ucx.0.log ucx.1.log >&2
        exit 1
    fi
fi

# A job no kvsrun started: two workers under torchrun's environment, and
# the installed library starts the installed kvsd (no KVS_KVSD, and no
# kvsd in PATH), which is gone with its socket after them.
for r in 0 1; do
    env -u KVS_KVSD -u KVS_JOB PATH=/usr/bin:/bin RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r \
        LOCAL_WORLD_SIZE=2 GROUP_RANK=0 GROUP_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 \
        MASTER_PORT=29400 TORCHELASTIC_RUN_ID=inst KVS_TIMEOUT=30 timeout 60 ./sum2 \
        >torch.$r.log 2>&1 &
    eval "tw$r=\$!"
done
# shellcheck disable=SC2154
if ! wait "$tw0" || ! wait "$tw1" || ! grep -q "every worker has left" "$work/rt/kvs/torch-inst.log"; then
    echo "a job under torchrun's environment did not run on the installed kvsd:" >&2
    cat torch.0.log torch.1.log "$work/rt/kvs/torch-inst.log" >&2
    exit 1
fi
for _ in $(seq 50); do [ -e "$work/rt/kvs/torch-inst.sock" ] || break; sleep 0.1; done
if [ -e "$work/rt/kvs/torch-inst.sock" ]; then
    echo "the installed kvsd started on demand left its socket" >&2
    exit 1
fi

# The Python package as installed: found through the prefix's package
# directory alone, it loads the installed library by the path make install
# recorded (no KVS_LIBRARY, no LD_LIBRARY_PATH), and runs the chapter.
if [ -n "${KVS_PYTHON_PKGDIR:-}" ] && [ -n "${PYTHON:-}" ]; then
    env -u LD_LIBRARY_PATH -u KVS_LIBRARY PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$KVS_PYTHON_PKGDIR" \
        "$PYTHON" -c 'import kvs, sys; sys.exit(not kvs._lib.lib._name.startswith(sys.argv[1]))' \
        "$prefix" || { echo "the installed kvs package did not load the installed libkvs" >&2; exit 1; }
    # One version: the package's (_version.py), the library's, pkg-config's.
    env -u LD_LIBRARY_PATH -u KVS_LIBRARY PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$KVS_PYTHON_PKGDIR" \
        "$PYTHON" -c 'import kvs, sys
v = sys.argv[1]
sys.exit(not (kvs.__version__ == v and kvs.version() == "kvs " + v and kvs._version.VERSION == v))' \
        "$(pkg-config --modversion kvs)" ||
        { echo "the installed kvs package's __version__ is not the library's and pkg-config's" >&2; exit 1; }
    env -u LD_LIBRARY_PATH -u KVS_LIBRARY PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$KVS_PYTHON_PKGDIR" \
        "$PYTHON" "$srcdir/examples/kvstore_chapter.py" | diff "$srcdir/tests/kvstore_chapter.expected" -
fi
echo "install test: ok"
