# daemon/kvsrun.mk - kvsrun, the launcher.

bin_PROGRAMS += daemon/kvsrun
daemon_kvsrun_SOURCES = daemon/kvsrun.c
daemon_kvsrun_LDADD = src/libkvs_core.la
