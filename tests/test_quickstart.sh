#!/bin/sh
# Description: examples/quickstart prints the KVStore chapter's values.
# TAP output: one test.
echo "1..1"
exe="${top_builddir:-.}/examples/quickstart"
expected="${top_srcdir:-.}/tests/quickstart.expected"
out=$("$exe" 2>&1)
if [ "$out" = "$(cat "$expected")" ]; then
    echo "ok 1 - quickstart prints the chapter's values"
else
    echo "not ok 1 - quickstart output differs from $expected"
    printf '%s\n' "$out" | diff "$expected" - | sed 's/^/# /'
fi
