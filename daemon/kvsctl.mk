# daemon/kvsctl.mk - kvsctl, the admin tool, and its sub-tools.

bin_PROGRAMS += daemon/kvsctl
daemon_kvsctl_SOURCES = daemon/kvsctl.c daemon/ctl.h daemon/sample.c daemon/top.c \
	daemon/plan.c daemon/plan.h daemon/timeline.c daemon/timeline.h daemon/tl_merge.c \
	daemon/tltool.h daemon/tlread.c daemon/tlread.h
daemon_kvsctl_LDADD = src/libkvs_core.la
