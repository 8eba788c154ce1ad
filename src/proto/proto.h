/*
 * proto.h - the whole of what crosses between a worker and kvsd, for the
 * callers that speak all of it (kvsd, the fuzzer): the handshake messages
 * on the socket (hello.h), the request and completion slots of the rings
 * in shared memory (slots.h) and the tables a slot may stand for
 * (tables.h); and between kvsctl and kvsd, the control request and its
 * reply on the same socket (ctl.h). What every message shares is in
 * head.h. A caller that needs only one part includes that part's header.
 *
 * Encoding writes every field at a fixed little-endian offset; decoding
 * reads the bytes once into a local struct and checks every field before
 * anyone uses it. Decoders are fuzzed (tests/fuzz_proto.c).
 */
#ifndef KVS_PROTO_H
#define KVS_PROTO_H

#include "proto/head.h"
#include "proto/hello.h"
#include "proto/ctl.h"
#include "proto/ops.h"
#include "proto/slots.h"
#include "proto/tables.h"

#endif
