#!/bin/bash
# Description: jobs across hosts (each a kvsrun with its own kvsd on this machine)
# with a secret file; the wrong secret is refused within 10 s and says
# why, a secret file others may read is refused, a non-loopback address
# without a secret is refused; garbage, an idle connection and a port
# scan during start-up never get past the handshake, and the job runs.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/hostslib.sh
. "$(dirname "$0")/hostslib.sh"

KVS_TRANSPORT=socket
export KVS_TRANSPORT

# Secrets.
secret=$work/secret
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$secret"
chmod 600 "$secret"
other=$work/other
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$other"
chmod 600 "$other"

name="kh-$$-secret"
kvsrun_opts="--secret-file $secret" hosts "$name" "1 1" "$worker" sums
hosts_wait
tap $? "a job with a secret file"

# The wrong secret: host 1 is refused at once, and says why.
name="kh-$$-wrong"
port=$(free_port)
timeout $((60 * slow)) "$kvsrun" -j "$name" -n 1 --nodes 2 --node-rank 0 --coord "127.0.0.1:$port" \
    --secret-file "$secret" "$worker" sums >"$work/wrong.h0.log" 2>&1 &
h0=$!
t0=$(now_ms)
timeout $((60 * slow)) "$kvsrun" -j "$name" -n 1 --nodes 2 --node-rank 1 --coord "127.0.0.1:$port" \
    --secret-file "$other" "$worker" sums >"$work/wrong.h1.log" 2>&1
s1=$?
t1=$(now_ms)
kill -TERM "$h0"; wait "$h0"
[ $s1 -ne 0 ] && [ $((t1 - t0)) -lt $((10000 * slow)) ] && grep -q "secret" "$work/wrong.h1.log"
tap $? "a host with the wrong secret is refused within 10 s, and says why"

# A secret file others may read is refused.
chmod 644 "$other"
timeout $((30 * slow)) "$kvsrun" -j "kh-$$-loose" -n 1 --nodes 2 --node-rank 1 --coord "127.0.0.1:1" \
    --secret-file "$other" "$worker" sums >"$work/loose.log" 2>&1
s=$?
[ $s -ne 0 ] && grep -q "group or others" "$work/loose.log"
tap $? "a secret file readable by others is refused, with the fix"

# Without a secret, a non-loopback address is refused.
timeout $((30 * slow)) "$kvsrun" -j "kh-$$-nosecret" -n 1 --nodes 2 --node-rank 1 --coord "127.0.0.1:1" \
    --bind 0.0.0.0 "$worker" sums >"$work/nosecret.log" 2>&1
s=$?
[ $s -ne 0 ] && grep -q "loopback only" "$work/nosecret.log"
tap $? "without a secret, a non-loopback bind is refused"

# Garbage, an idle connection and a port scan at host 0 during start-up
# never get in, and the job runs.
name="kh-$$-garbage"
port=$(free_port)
mkdir -p "$work/$name"
KVS_TEST_DIR=$work/$name timeout $((120 * slow)) "$kvsrun" -j "$name" -n 1 --nodes 2 --node-rank 0 \
    --coord "127.0.0.1:$port" --secret-file "$secret" "$worker" sums >"$work/$name.h0.log" 2>&1 &
h0=$!
python3 - "$port" "$slow" <<'EOF'
import os, socket, sys, time
port = int(sys.argv[1])
for _ in range(50 * int(sys.argv[2])):    # wait for the listener
    try:
        socket.create_connection(("127.0.0.1", port), 0.2).close(); break
    except OSError:
        time.sleep(0.1)
idle = socket.create_connection(("127.0.0.1", port))        # says nothing
for _ in range(30):                                          # a port scan
    try:
        socket.create_connection(("127.0.0.1", port), 0.2).close()
    except OSError:
        pass
g = socket.create_connection(("127.0.0.1", port))
g.sendall(os.urandom(4096))                                  # garbage
time.sleep(0.5)
g.close()
h = socket.create_connection(("127.0.0.1", port))           # a head that lies
h.sendall(b"KSH1" + bytes([1, 0, 0, 0]) + (1).to_bytes(4, "little") + (0).to_bytes(4, "little")
          + (1 << 40).to_bytes(8, "little"))
time.sleep(0.2)
h.close()
idle.close()
EOF
KVS_TEST_DIR=$work/$name timeout $((120 * slow)) "$kvsrun" -j "$name" -n 1 --nodes 2 --node-rank 1 \
    --coord "127.0.0.1:$port" --secret-file "$secret" "$worker" sums >"$work/$name.h1.log" 2>&1
s1=$?
wait "$h0"; s0=$?
[ $s0 -eq 0 ] && [ $s1 -eq 0 ]
tap $? "garbage, an idle connection and a port scan during start-up: the job runs"
hosts_done
