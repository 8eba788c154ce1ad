/*
 * sys.h - the one wrapper through which the library and its programs make
 * system calls that can be interrupted by a signal.
 */
#ifndef KVS_SYS_H
#define KVS_SYS_H

#include <errno.h>

/* Evaluates a system call until it fails with something other than EINTR.
 * close() is the one call never put through it: on Linux the descriptor is
 * gone even when close reports EINTR, and a retry could close a descriptor
 * another thread has just been given. */
#define EINTR_RETRY(call)                                                                 \
    __extension__({                                                                       \
        __typeof__(call) r_;                                                              \
        do {                                                                              \
            r_ = (call);                                                                  \
        } while (r_ == -1 && errno == EINTR);                                             \
        r_;                                                                               \
    })

#endif
