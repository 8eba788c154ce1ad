# shellcheck shell=sh
# tests/lib.sh - what the shell tests of kvs's programs share: the skip of
# a whole TAP plan, the private runtime directory every job runs in, a
# millisecond clock and bounded waiting. Sourced (". lib.sh") after the
# test's `set -u`; it defines functions and runs nothing.

# skip_all COUNT REASON: the plan "1..COUNT" was printed; reports every
# case as skipped for REASON and exits 0.
skip_all() {
    sa_i=1
    while [ "$sa_i" -le "$1" ]; do
        echo "ok $sa_i # SKIP $2"
        sa_i=$((sa_i + 1))
    done
    exit 0
}

# private_runtime: a fresh XDG_RUNTIME_DIR (mode 700) in $rt, exported, so
# that the test's jobs never meet the user's own. Remove "$rt" on exit.
private_runtime() {
    rt=$(mktemp -d) || exit 1
    chmod 700 "$rt"
    XDG_RUNTIME_DIR=$rt
    export XDG_RUNTIME_DIR
}

now_ms() { date +%s%3N; }

# tap STATUS NAME: the next TAP line, counted in $n_test (the test sets it
# to 0 first), "ok" when STATUS is 0.
tap() {
    n_test=$((n_test + 1))
    if [ "$1" -eq 0 ]; then echo "ok $n_test - $2"; else echo "not ok $n_test - $2"; fi
}

# wait_for TENTHS CMD...: 0 as soon as CMD succeeds, 1 when TENTHS tenths
# of a second have passed without it.
wait_for() {
    wf_ticks=$1
    shift
    while ! "$@"; do
        wf_ticks=$((wf_ticks - 1))
        if [ "$wf_ticks" -le 0 ]; then return 1; fi
        sleep 0.1
    done
}

# gone PID: the process has ended (a child not yet waited for is a zombie,
# which kill -0 still finds).
gone() {
    ! kill -0 "$1" 2>/dev/null || [ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)" = Z ]
}
