#!/bin/sh
# Description: kvs.torch (tests/python/test_torch.py), its DDP hook and process group (test_ddp.py) and the CTR benchmark's check (test_bench_ctr.py), run by tests/test_python.sh.
. "${top_srcdir:-.}/tests/test_python.sh"
