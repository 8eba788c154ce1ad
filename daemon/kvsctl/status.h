/*
 * status.h - kvsctl's one-question commands (status.c): status, keys,
 * stats (as text, or its sample as JSON) and stop.
 */
#ifndef KVSCTL_STATUS_H
#define KVSCTL_STATUS_H

/* Asks the kvsd of job (checked by kvs__job_name_check) command (enum
 * kvs__ctl_command of proto.h) and prints its answer on stdout: as kvsd
 * wrote it, or with json (command KVS__CTL_SAMPLE), the sample checked
 * and as JSON. After KVS__CTL_STOP, waits until kvsd has removed its
 * socket. Errors on stderr; returns the exit status: 0, or 1 when kvsd
 * could not be asked, answered with an error or badly, stdout failed or
 * a stopping kvsd stayed. */
int status_main(const char *job, int command, int json);

#endif
