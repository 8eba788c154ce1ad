/*
 * wire.h - what crosses between the kvsd of one host and the kvsd of
 * another: frames, each a 24-byte head and a payload, starting with the
 * handshake that proves both hosts hold the job's secret (daemon/net/auth.c
 * makes and checks the proofs).
 *
 * The handshake, initiated by the host of higher rank (the client):
 *   client -> server  HELLO      its host rank, the job, a nonce
 *   server -> client  CHALLENGE  the server's nonce, and its proof
 *   client -> server  PROOF      the client's proof
 *   server -> client  VERDICT    0, or why the job refuses the client
 * Each proof is an HMAC of both nonces, the job, both ranks and the side
 * it comes from, so that no message can be replayed or reflected. A server
 * allocates nothing for a connection before the PROOF checks.
 *
 * Then the roster: each host of rank above 0 tells host 0 where it listens
 * (JOIN), and host 0 tells every host where the others listen and how many
 * workers each runs (ROSTER). After that, every frame is a message (struct
 * kvs__wire_msg): a body that names a key, its dtype and shape, and
 * carries data (a value, or a text), which kvsd's bridge acts on
 * (daemon/kvsd/bridge.c and the modules it hands each message to).
 *
 * Decoders copy the bytes once, check every field, and never trust a
 * length beyond what the frame's type allows.
 *
 * This header is all of it, for the callers that speak all of it: the
 * frame head (wire_frame.h), the handshake (wire_handshake.h), the roster
 * (wire_roster.h), and the messages (wire_msg.h).
 */
#ifndef KVS_WIRE_H
#define KVS_WIRE_H

#include "proto/wire_frame.h"
#include "proto/wire_handshake.h"
#include "proto/wire_roster.h"
#include "proto/wire_msg.h"

#endif
