# doc/local.mk - the man pages: installed (man_MANS) and, through the top
# Makefile.am's EXTRA_DIST, shipped in the tarball.

man_MANS += doc/man/kvs.7 doc/man/kvsd.8 doc/man/kvsrun.1 doc/man/kvsctl.1
