/*
 * timeline.h - kvsctl timeline: reads the trace files a job writes with
 * KVS_TIMELINE=FILE. plot: each rank's wait for the other workers in each
 * round, as a table and a PNG drawn by gnuplot. merge: the parts the kvsd
 * of each host wrote, joined into one file. It asks no kvsd.
 */
#ifndef KVSCTL_TIMELINE_H
#define KVSCTL_TIMELINE_H

/* Runs `kvsctl timeline`: argv[0] is "timeline", argv[1] "plot" or
 * "merge", the rest their arguments. Prints on stdout, errors on stderr;
 * returns the exit status (0; 1 for a file that cannot be read or
 * written, is not a kvs timeline or is malformed, or a gnuplot that is
 * missing or fails; 2 for a usage error). Not for threads: it uses
 * getopt, and ignores SIGPIPE from then on. */
int timeline_main(int argc, char **argv);

#endif
