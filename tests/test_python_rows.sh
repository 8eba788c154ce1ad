#!/bin/sh
# Description: the row-sparse values of the Python package (tests/python/test_rows.py), run by tests/test_python.sh.
. "${top_srcdir:-.}/tests/test_python.sh"
