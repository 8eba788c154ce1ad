# daemon/kvsrun/local.mk - kvsrun, the launcher.
#
# The program is built at daemon/kvsrun/kvsrun: its objects go in
# daemon/kvsrun/ of the build tree, where a file daemon/kvsrun cannot be
# too. It installs as kvsrun.

bin_PROGRAMS += daemon/kvsrun/kvsrun
daemon_kvsrun_kvsrun_SOURCES = daemon/kvsrun/main.c daemon/kvsrun/kvsrun.h \
	daemon/kvsrun/options.c daemon/kvsrun/placement.c daemon/kvsrun/supervise.c \
	daemon/kvsrun/kvsd_child.c daemon/kvsrun/cleanup.c daemon/kvsrun/restart.c \
	daemon/kvsrun/kvsd_ctl.c daemon/kvsrun/watch.c
daemon_kvsrun_kvsrun_LDADD = src/libkvs_core.la
