# daemon/kvsctl/local.mk - kvsctl, the admin tool, and its sub-tools.
#
# The program is built at daemon/kvsctl/kvsctl: its objects go in
# daemon/kvsctl/ of the build tree, where a file daemon/kvsctl cannot be
# too. It installs as kvsctl.

bin_PROGRAMS += daemon/kvsctl/kvsctl
daemon_kvsctl_kvsctl_SOURCES = daemon/kvsctl/kvsctl.c daemon/kvsctl/ask.c daemon/kvsctl/ask.h \
	daemon/kvsctl/status.c daemon/kvsctl/status.h daemon/kvsctl/sample.c \
	daemon/kvsctl/sample.h daemon/kvsctl/top.c daemon/kvsctl/top.h daemon/kvsctl/plan.c \
	daemon/kvsctl/plan.h daemon/kvsctl/timeline.h daemon/kvsctl/tl_plot.c \
	daemon/kvsctl/tl_merge.c daemon/kvsctl/tltool.c daemon/kvsctl/tltool.h \
	daemon/kvsctl/tlread.c daemon/kvsctl/tlread.h
daemon_kvsctl_kvsctl_LDADD = src/libkvs_core.la
