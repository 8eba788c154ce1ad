# shellcheck shell=sh
# tests/recoverlib.sh - what the recovery tests share: a snapshot's name in
# a checkpoint folder, and for those with kvsd started by hand
# (test_recover_kvsd.sh, test_recover_cow.sh) a kvsd of 2 workers in the
# background, the two workers ($worker) and the checks of how each ended.
# Sourced after lib.sh (and distlib.sh for kvsd by hand); it defines
# functions only and starts nothing itself. Every wait is bounded: the workers by `timeout`, kvsd by
# kvsd_exit, all scaled by $slow.

# snap N: the name of commit N's snapshot in a checkpoint folder.
snap() { printf 'snap-%020d.kvs' "$1"; }

# kvsd_bg JOB LOG KVSD-OPTIONS...: kvsd of 2 workers (under the command
# $kvsd_env, when set), its stderr in LOG; waits for its socket. A socket
# file a killed kvsd left is removed first: else the wait would end at
# once, and workers started then would find nobody on it.
kvsd_bg() {
    j=$1 log=$2
    shift 2
    rm -f "$XDG_RUNTIME_DIR/kvs/$j.sock"
    ${kvsd_env:-} "$kvsd" --job "$j" -n 2 "$@" 2>"$log" &
    kvsd_pid=$!
    wait_for 50 test -S "$XDG_RUNTIME_DIR/kvs/$j.sock"
}

# workers JOB ARGS...: ranks 0 and 1 of $worker ARGS in the background
# ($w0, $w1), each with its directory $work/JOB.
workers() {
    j=$1
    shift
    KVS_TEST_DIR=$work/$j KVS_JOB=$j KVS_RANK=0 KVS_NUM_WORKERS=2 KVS_TIMEOUT=$((30 * slow)) \
        timeout $((60 * slow)) "$worker" "$@" &
    w0=$!
    KVS_TEST_DIR=$work/$j KVS_JOB=$j KVS_RANK=1 KVS_NUM_WORKERS=2 KVS_TIMEOUT=$((30 * slow)) \
        timeout $((60 * slow)) "$worker" "$@" &
    w1=$!
}

# both_ok: 0 when both workers exit 0.
both_ok() {
    wait "$w0"; s0=$?
    wait "$w1"; s1=$?
    [ "$s0" -eq 0 ] && [ "$s1" -eq 0 ] || { echo "# workers exited $s0 $s1"; return 1; }
}

# kvsd_exit WANT: 0 when kvsd exits WANT within 30 s (times $slow); its
# status in $ks.
kvsd_exit() {
    if ! wait_for 300 gone "$kvsd_pid"; then
        echo "# kvsd still runs: killed"
        kill -KILL "$kvsd_pid" 2>/dev/null
    fi
    wait "$kvsd_pid"
    ks=$?
    [ "$ks" -eq "$1" ] || { echo "# kvsd exited $ks, expected $1"; return 1; }
}

# all_ok: 0 when both workers exit 0 and then kvsd exits 0.
all_ok() {
    both_ok
    ao=$?
    kvsd_exit 0
    return $((ao + $?))
}
