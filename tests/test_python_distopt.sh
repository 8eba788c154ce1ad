#!/bin/sh
# Description: kvs.torch.DistributedOptimizer (tests/python/test_distopt.py), run by tests/test_python.sh.
. "${top_srcdir:-.}/tests/test_python.sh"
