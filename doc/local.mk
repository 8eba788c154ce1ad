# doc/local.mk - the guides and the man pages: installed (man_MANS) and
# shipped in the tarball (EXTRA_DIST), so that `make distcheck` checks the
# guides' links (tests/test_docs.sh) in the tree it unpacked.

man_MANS += doc/man/kvs.7 doc/man/kvsd.8 doc/man/kvsrun.1 doc/man/kvsctl.1
doc_guides = doc/api.md doc/dist.md doc/hosts.md doc/scaling.md doc/python.md \
	doc/zero-copy.md doc/gpu.md doc/timeline.md doc/speed.md doc/install.md \
	doc/status.md doc/hacking.md doc/recovery.md
# The timeline guide shows this plot.
EXTRA_DIST += $(doc_guides) bench/timeline-wait.png bench/distopt-step.png
