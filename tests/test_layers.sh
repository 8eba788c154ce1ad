#!/bin/sh
# Description: scripts/check-layers, on small trees of its own: rooms that
# call each other in a loop, or include each other's headers, are a cycle
# (exit 1, the names that tie them said); a layered tree passes (exit 0).
set -u
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
check=${top_srcdir:-.}/scripts/check-layers
cc=${CC:-cc}
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
n_test=0
echo "1..4"

# tree NAME: $t/NAME with src/a.c, src/a.h, src/b.c, src/b.h and their
# objects in $t/NAME/_build/src; the files' text comes from the caller.
build_tree() {
    ( cd "$t/$1" && mkdir -p _build/src &&
      for c in src/*.c; do "$cc" -c -Isrc -o "_build/${c%.c}.o" "$c" || exit 1; done )
}

# Layered: b calls a, a calls no one.
mkdir -p "$t/ok/src"
printf 'int a_one(void);\n' >"$t/ok/src/a.h"
printf '#include "a.h"\nint a_one(void) { return 1; }\n' >"$t/ok/src/a.c"
printf 'int b_two(void);\n' >"$t/ok/src/b.h"
printf '#include "a.h"\n#include "b.h"\nint b_two(void) { return a_one() + 1; }\n' >"$t/ok/src/b.c"
build_tree ok
out=$(python3 "$check" --top "$t/ok" "$t/ok/_build" 2>&1)
tap $? "a layered tree passes"

# A loop of calls: a calls b back.
mkdir -p "$t/calls/src"
cp "$t/ok/src/"* "$t/calls/src/"
printf '#include "a.h"\nint b_two(void);\nint a_one(void) { return 1; }\nint a_more(void) { return b_two(); }\n' \
    >"$t/calls/src/a.c"
build_tree calls
out=$(python3 "$check" --top "$t/calls" "$t/calls/_build" 2>&1)
st=$?
[ $st -eq 1 ] && echo "$out" | grep -q 'src/a -> src/b: b_two' && echo "$out" | grep -q 'src/b -> src/a'
tap $? "a loop of calls is a cycle, its names said"

# A loop through a header: a.h includes b.h while b calls a.
mkdir -p "$t/incl/src"
cp "$t/ok/src/"* "$t/incl/src/"
printf '#include "b.h"\nint a_one(void);\n' >"$t/incl/src/a.h"
build_tree incl
out=$(python3 "$check" --top "$t/incl" "$t/incl/_build" 2>&1)
st=$?
[ $st -eq 1 ] && echo "$out" | grep -q '#include "b.h"'
tap $? "an include that points back up is a cycle"

# No objects: refused, not passed.
mkdir -p "$t/empty"
python3 "$check" --top "$t/ok" "$t/empty" >/dev/null 2>&1
[ $? -ne 0 ]
tap $? "a build tree without objects is refused"
