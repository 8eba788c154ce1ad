#!/bin/sh
# Description: programs written only against the installed kvs.h, compiled
# and linked through pkg-config, get every semantic right: the API tests,
# the MXNet ports and the quickstart, built from the installed files alone;
# the installed Python package runs the chapter.
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
    "$srcdir/tests/test_mxnet.c" "$srcdir/tests/test_buffers.c" "$srcdir/tests/testutil.h" \
    "$srcdir/examples/quickstart.c" "$work/"
flags=$(pkg-config --cflags --libs kvs)
case "$flags" in *"$prefix"*) ;; *) echo "pkg-config did not find kvs in $prefix: $flags" >&2; exit 1 ;; esac
cmocka=$(pkg-config --cflags --libs cmocka)
cd "$work"
export LD_LIBRARY_PATH="$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for t in test_api test_api_pushpull test_api_update test_mxnet test_buffers; do
    # shellcheck disable=SC2086
    $cc -std=gnu11 -Wall -Wextra -Werror -o "$t" "$t.c" $flags $cmocka -lm
    ./"$t"
done
# shellcheck disable=SC2086
$cc -std=c11 -pedantic -Wall -Wextra -Werror -o quickstart quickstart.c $flags
./quickstart | diff "$srcdir/tests/quickstart.expected" -

# The Python package as installed: found through the prefix's package
# directory alone, it loads the installed library by the path make install
# recorded (no KVS_LIBRARY, no LD_LIBRARY_PATH), and runs the chapter.
if [ -n "${KVS_PYTHON_PKGDIR:-}" ] && [ -n "${PYTHON:-}" ]; then
    env -u LD_LIBRARY_PATH -u KVS_LIBRARY PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$KVS_PYTHON_PKGDIR" \
        "$PYTHON" -c 'import kvs, sys; sys.exit(not kvs._lib.lib._name.startswith(sys.argv[1]))' \
        "$prefix" || { echo "the installed kvs package did not load the installed libkvs" >&2; exit 1; }
    env -u LD_LIBRARY_PATH -u KVS_LIBRARY PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$KVS_PYTHON_PKGDIR" \
        "$PYTHON" "$srcdir/examples/kvstore_chapter.py" | diff "$srcdir/tests/kvstore_chapter.expected" -
fi
echo "install test: ok"
