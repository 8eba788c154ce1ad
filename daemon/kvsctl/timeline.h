/*
 * timeline.h - kvsctl timeline: tools over the trace files a job writes
 * with KVS_TIMELINE=FILE. plot (tl_plot.c): each rank's wait for the
 * other workers in each round, as a table and a PNG drawn by gnuplot.
 * merge (tl_merge.c): the parts the kvsd of each host wrote, joined into
 * one file. They ask no kvsd. The dispatcher (kvsctl.c) picks one; the
 * usage text both share is tltool.h's.
 */
#ifndef KVSCTL_TIMELINE_H
#define KVSCTL_TIMELINE_H

/* Run `kvsctl timeline plot` and `kvsctl timeline merge`: argv[0] is
 * "plot" or "merge", the rest their arguments. Each prints on stdout,
 * errors on stderr, and returns the exit status (0; 1 for a file that
 * cannot be read or written, is not a kvs timeline or is malformed, or a
 * gnuplot that is missing or fails; 2 for a usage error). Not for
 * threads: they use getopt. The caller ignores SIGPIPE first, so that a
 * closed stdout or a gnuplot gone early is an error reported, not a
 * signal to die of. */
int tl_plot_main(int argc, char **argv);
int tl_merge_main(int argc, char **argv);

#endif
