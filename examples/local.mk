# examples/local.mk - small programs a user copies from.

noinst_PROGRAMS += examples/quickstart examples/train_linreg
examples_quickstart_LDADD = src/libkvs.la
examples_train_linreg_LDADD = src/libkvs.la -lm
EXTRA_DIST += examples/kvstore_chapter.py examples/train_digits.py examples/train_ctr.py
