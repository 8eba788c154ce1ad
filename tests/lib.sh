# shellcheck shell=sh
# tests/lib.sh - what the shell tests of kvs's programs share: the skip of
# a whole TAP plan, the private runtime directory every job runs in, a
# millisecond clock, bounded waiting scaled for slow builds, and TCP ports
# no other test holds. Sourced (". lib.sh") after the test's `set -u`; it
# defines functions and $slow, and starts nothing.

# $slow: how many times longer than in a plain build the harness waits
# (KVS_TEST_SLOW, a whole number, 1 unless set; scripts/test sets it for
# the sanitizer build). Every deadline the harness sets for itself (a
# `timeout` around a program, KVS_TIMEOUT of a worker, wait_for) is
# multiplied by it; the bounds kvs promises (a dead host noticed within
# 5 s, kvsrun's grace) are not, since a test of them must hold them.
slow=${KVS_TEST_SLOW:-1}
case $slow in
    '' | *[!0-9]* | 0*)
        echo "Bail out! KVS_TEST_SLOW='$slow' is not a whole number from 1"
        exit 1 ;;
esac

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
# of a second (times $slow) have passed without it.
wait_for() {
    wf_ticks=$(($1 * slow))
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

# none_of PATH...: 0 when no PATH exists.
none_of() {
    for no_path; do
        ! test -e "$no_path" || return 1
    done
}

# free_port: a TCP port of 127.0.0.1 that nothing listens on and no other
# test holds, for a coordinator to listen on. Ports are taken below the
# kernel's ephemeral range (which connect and bind to port 0 draw from, so
# no socket of another program lands on one by chance), and held with a
# lock under $KVS_TEST_PORTS (a directory shared by the tests of this
# user), a symlink naming this test's shell: tests run side by side (make
# -j check) never get the same port. ports_release (the test's EXIT trap)
# lets this test's ports go; a lock whose test is gone is taken back.
free_port() {
    fp_dir=${KVS_TEST_PORTS:-${TMPDIR:-/tmp}/kvs-test-ports-$(id -u)}
    mkdir -p "$fp_dir" 2>/dev/null
    fp_top=$(awk '{ print $1 }' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null)
    case $fp_top in '' | *[!0-9]*) fp_top=32768 ;; esac
    [ "$fp_top" -gt 12000 ] || fp_top=32768
    fp_tries=0
    while [ $fp_tries -lt 200 ]; do
        fp_tries=$((fp_tries + 1))
        fp_port=$((fp_top - 10000 + $(od -An -N2 -tu2 /dev/urandom) % 9000))
        fp_lock=$fp_dir/$fp_port
        if ! ln -s "$$" "$fp_lock" 2>/dev/null; then
            fp_owner=$(readlink "$fp_lock" 2>/dev/null)
            # A lock of a test that has ended: gone, then tried again.
            if [ -n "$fp_owner" ] && ! kill -0 "$fp_owner" 2>/dev/null; then
                rm -f "$fp_lock"
            fi
            continue
        fi
        if python3 -c 'import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[1])))' "$fp_port" 2>/dev/null; then
            echo "$fp_port"
            return 0
        fi
        rm -f "$fp_lock"                # another program has it: not for us
    done
    echo "# free_port: no port found in 200 tries" >&2
    return 1
}

# ports_release: the locks free_port took for this test, let go.
ports_release() {
    pr_dir=${KVS_TEST_PORTS:-${TMPDIR:-/tmp}/kvs-test-ports-$(id -u)}
    for pr_lock in "$pr_dir"/*; do
        [ -L "$pr_lock" ] && [ "$(readlink "$pr_lock")" = "$$" ] && rm -f "$pr_lock"
    done
    return 0
}
