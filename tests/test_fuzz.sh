#!/bin/sh
# Description: the proto decoders' fuzz target, run over its seeds and a
# fixed sequence of mutations: every accepted input keeps the decoders'
# promises and re-encodes to the same bytes.
echo "1..1"
if out=$("${top_builddir:-.}/tests/fuzz_proto" 2>&1); then
    echo "ok 1 - fuzz_proto regression run"
else
    echo "not ok 1 - fuzz_proto regression run"
    printf '%s\n' "$out" | tail -20 | sed 's/^/# /'
fi
