#!/bin/bash
# Description: jobs across hosts on this machine without a secret file use
# the job's own secret, which only the job's user can read: a job whose
# hosts are one user runs, and its secret file (mode 0600) is gone after;
# a host run as another user (nobody, with runuser; as root only) is
# refused within 10 s and says why, and host 0 fails the job by its join
# deadline; the other user cannot read the job's runtime directory; a
# secret file or a runtime directory others may read, or another user's,
# is refused with what is wrong.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/hostslib.sh
. "$(dirname "$0")/hostslib.sh"

KVS_TRANSPORT=socket
export KVS_TRANSPORT
me=$(id -u)
hex64=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
ubin="" nrt=""
users_cleanup() {
    hosts_cleanup
    rm -rf "$ubin" "$nrt"
}
trap users_cleanup EXIT

# Another user: nobody, when this test runs as root and nobody can run
# kvsd and kvsrun (from the build tree, else from copies in a directory
# of mode 755).
other_why=""
if [ "$me" -ne 0 ]; then
    other_why="needs root, to run a host as another user"
elif ! command -v runuser >/dev/null || ! nobody=$(id -u nobody 2>/dev/null); then
    other_why="needs runuser and the user nobody"
else
    ukvsd=$KVSD ukvsrun=$kvsrun
    if ! runuser -u nobody -- "$ukvsd" --version >/dev/null 2>&1 \
        || ! runuser -u nobody -- "$ukvsrun" --version >/dev/null 2>&1; then
        ubin=$(mktemp -d)
        chmod 755 "$ubin"
        cp "$KVSD" "$kvsrun" "$ubin/" && chmod 755 "$ubin/kvsd" "$ubin/kvsrun"
        ukvsd=$ubin/kvsd ukvsrun=$ubin/kvsrun
        runuser -u nobody -- "$ukvsd" --version >/dev/null 2>&1 \
            && runuser -u nobody -- "$ukvsrun" --version >/dev/null 2>&1 \
            || other_why="nobody cannot run kvsd and kvsrun, even copied to $ubin"
    fi
    # nobody's own runtime directory.
    nrt=$(mktemp -d)
    chmod 700 "$nrt"
    chown nobody "$nrt"
fi
# as_other_skip NAME: case NAME skipped, for want of another user.
as_other_skip() {
    n_test=$((n_test + 1))
    echo "ok $n_test - $1 # SKIP $other_why"
}

# One user: the job runs without a secret file; while it joins, host 0
# has made the job's secret, mode 0600, this user's; it is gone after.
name="kh-$$-same"
port=$(free_port)
sfile=$XDG_RUNTIME_DIR/kvs/$name@127.0.0.1:$port.secret
mkdir -p "$work/$name"
KVS_TEST_DIR=$work/$name timeout $((60 * slow)) "$kvsrun" -j "$name" -n 1 --nodes 2 \
    --node-rank 0 --coord "127.0.0.1:$port" "$worker" sums >"$work/$name.h0.log" 2>&1 &
h0=$!
wait_for 100 test -f "$sfile"
made=$(stat -c '%a %u %s' "$sfile" 2>/dev/null)
KVS_TEST_DIR=$work/$name timeout $((60 * slow)) "$kvsrun" -j "$name" -n 1 --nodes 2 \
    --node-rank 1 --coord "127.0.0.1:$port" "$worker" sums >"$work/$name.h1.log" 2>&1
s1=$?
wait "$h0"; s0=$?
[ "$made" = "600 $me 65" ] && [ $s0 -eq 0 ] && [ $s1 -eq 0 ] && [ ! -e "$sfile" ]
st=$?
[ $st -eq 0 ] || { echo "# secret: '$made', exits $s0 $s1"; tail -n 4 "$work/$name".h*.log | sed 's/^/#   /'; }
tap $st "one user's hosts without a secret file: the job runs with its own 0600 secret, removed after"

# listening PORT: a socket of this machine listens on TCP port PORT (read
# from the kernel's table: a probe that connects would be a connection
# that host 0 drops and says so).
listening() {
    awk -v p="$(printf ':%04X' "$1")" '$4 == "0A" && substr($2, length($2) - 4) == p { f = 1 }
        END { exit !f }' /proc/net/tcp
}

# Another user's host 1 is refused at once (it cannot prove the job's
# secret) and says why; host 0 drops it, and fails the job when its join
# deadline passes: no hang. Host 1 by kvsrun, then a kvsd started by hand.
other_host() {
    port=$(free_port)
    t0=$(now_ms)
    timeout $((30 * slow)) "$KVSD" --job "$name" --workers 1 --nodes 2 --node-rank 0 \
        --coord "127.0.0.1:$port" --join-timeout 5 >"$work/$name.h0.log" 2>&1 &
    h0=$!
    wait_for 40 listening "$port"
    if [ "$1" = kvsrun ]; then
        runuser -u nobody -- env XDG_RUNTIME_DIR="$nrt" KVSD="$ukvsd" timeout $((30 * slow)) \
            "$ukvsrun" -j "$name" -n 1 --nodes 2 --node-rank 1 --coord "127.0.0.1:$port" \
            "$worker" sums >"$work/$name.h1.log" 2>&1
    else
        runuser -u nobody -- env XDG_RUNTIME_DIR="$nrt" timeout $((30 * slow)) \
            "$ukvsd" --job "$name" --workers 1 --nodes 2 --node-rank 1 \
            --coord "127.0.0.1:$port" >"$work/$name.h1.log" 2>&1
    fi
    s1=$?
    t1=$(now_ms)
    wait "$h0"; s0=$?
    t2=$(now_ms)
    [ $s1 -ne 0 ] && [ $((t1 - t0)) -lt $((10000 * slow)) ] \
        && grep -q "host 1 of job '$name.h1': the server host's proof is wrong: it does not hold this job's secret" \
            "$work/$name.h1.log" \
        && [ $s0 -eq 1 ] && [ $((t2 - t0)) -lt $((15000 * slow)) ] \
        && grep -q "dropped a connection from 127.0.0.1" "$work/$name.h0.log" \
        && grep -q "did not all join within 5 s (coordinator 127.0.0.1:$port; host 1 missing)" \
            "$work/$name.h0.log" \
        && [ ! -e "$XDG_RUNTIME_DIR/kvs/$name@127.0.0.1:$port.secret" ]
    st=$?
    [ $st -eq 0 ] || { echo "# exits $s0 $s1 in $((t1 - t0)) and $((t2 - t0)) ms";
                       tail -n 4 "$work/$name".h*.log | sed 's/^/#   /'; }
    return $st
}
for how in kvsrun kvsd; do
    what="a host run by $how as another user cannot join: refused within 10 s, says why; the job fails"
    if [ -n "$other_why" ]; then
        as_other_skip "$what"
        continue
    fi
    name="kh-$$-other-$how"
    other_host "$how"
    tap $? "$what"
done

# Nor can it read the job's runtime directory, where the secret is.
what="another user pointed at the job's runtime directory is refused"
if [ -n "$other_why" ]; then
    as_other_skip "$what"
else
    runuser -u nobody -- env XDG_RUNTIME_DIR="$XDG_RUNTIME_DIR" KVSD="$ukvsd" \
        timeout $((30 * slow)) "$ukvsrun" -j "kh-$$-peek" -n 1 --nodes 2 --node-rank 1 \
        --coord "127.0.0.1:1" "$worker" sums >"$work/peek.log" 2>&1
    s=$?
    [ $s -ne 0 ] && grep -q "$XDG_RUNTIME_DIR/kvs: Permission denied" "$work/peek.log"
    tap $? "$what"
fi

# secret_refused CASE SAYS: host 1 of job kh-$$-CASE (its host 0 never
# comes) fails at once, saying SAYS; the job's secret file is left as it was.
secret_refused() {
    sf=$XDG_RUNTIME_DIR/kvs/kh-$$-$1@127.0.0.1:1.secret
    before=$(stat -c '%a %u %s %Y' "$sf" 2>/dev/null)
    timeout $((30 * slow)) "$kvsrun" -j "kh-$$-$1" -n 1 --nodes 2 --node-rank 1 \
        --coord "127.0.0.1:1" "$worker" sums >"$work/$1.log" 2>&1
    s=$?
    [ $s -ne 0 ] && grep -qF "$2" "$work/$1.log" \
        && [ "$(stat -c '%a %u %s %Y' "$sf" 2>/dev/null)" = "$before" ]
    st=$?
    [ $st -eq 0 ] || { echo "# exit $s"; sed 's/^/#   /' "$work/$1.log"; }
    return $st
}

# The job's secret file, found loose, is refused with the fix.
mkdir -p "$XDG_RUNTIME_DIR/kvs"
sf=$XDG_RUNTIME_DIR/kvs/kh-$$-loose@127.0.0.1:1.secret
echo "$hex64" >"$sf"
chmod 644 "$sf"
secret_refused loose "job secret $sf has mode 0644, not 0600: another user may read it: remove it (rm $sf)"
tap $? "the job's secret file readable by others (0644) is refused, with the fix"

what="the job's secret file of another user is refused"
if [ -n "$other_why" ]; then
    as_other_skip "$what"
else
    sf=$XDG_RUNTIME_DIR/kvs/kh-$$-owner@127.0.0.1:1.secret
    echo "$hex64" >"$sf"
    chmod 600 "$sf"
    chown nobody "$sf"
    secret_refused owner "job secret $sf is owned by uid $nobody, not $me"
    tap $? "$what"
fi

sf=$XDG_RUNTIME_DIR/kvs/kh-$$-link@127.0.0.1:1.secret
echo "$hex64" >"$work/elsewhere"
chmod 600 "$work/elsewhere"
ln -s "$work/elsewhere" "$sf"
secret_refused link "job secret $sf is a symbolic link"
tap $? "the job's secret file as a symbolic link is refused"

# A runtime directory open to others, or another user's, is refused.
loose=$work/loose-rt
mkdir -p "$loose/kvs"
chmod 700 "$loose"
chmod 755 "$loose/kvs"
XDG_RUNTIME_DIR=$loose timeout $((30 * slow)) "$kvsrun" -j "kh-$$-dir" -n 1 --nodes 2 \
    --node-rank 1 --coord "127.0.0.1:1" "$worker" sums >"$work/dir.log" 2>&1
s=$?
[ $s -ne 0 ] && grep -qF "runtime dir $loose/kvs has mode 0755: group or others have access" \
    "$work/dir.log" && [ ! -e "$loose/kvs/kh-$$-dir@127.0.0.1:1.secret" ]
tap $? "a runtime directory open to others (0755) is refused, nothing made in it"

what="a runtime directory of another user is refused"
if [ -n "$other_why" ]; then
    as_other_skip "$what"
else
    chmod 700 "$loose/kvs"
    chown nobody "$loose/kvs"
    XDG_RUNTIME_DIR=$loose timeout $((30 * slow)) "$kvsrun" -j "kh-$$-dirown" -n 1 --nodes 2 \
        --node-rank 1 --coord "127.0.0.1:1" "$worker" sums >"$work/dirown.log" 2>&1
    s=$?
    [ $s -ne 0 ] && grep -qF "runtime dir $loose/kvs is owned by uid $nobody, not $me" \
        "$work/dirown.log" && [ ! -e "$loose/kvs/kh-$$-dirown@127.0.0.1:1.secret" ]
    tap $? "$what"
fi
hosts_done
