# bench/local.mk - benchmarks; scripts/bench runs them.

noinst_PROGRAMS += bench/bench_local bench/bench_dist bench/bench_suite bench/calib bench/bench_half \
	bench/bench_keys bench/bench_gpu
bench_bench_local_SOURCES = bench/bench_local.c bench/bench.h
bench_bench_local_LDADD = src/libkvs.la
bench_bench_dist_SOURCES = bench/bench_dist.c bench/bench.h
bench_bench_dist_LDADD = src/libkvs.la
bench_bench_gpu_SOURCES = bench/bench_gpu.c bench/bench.h
bench_bench_gpu_LDADD = src/libkvs.la -ldl
bench_bench_half_SOURCES = bench/bench_half.c bench/bench.h
bench_bench_half_LDADD = src/libkvs.la
bench_bench_keys_SOURCES = bench/bench_keys.c bench/bench.h
bench_bench_keys_LDADD = src/libkvs.la
# scripts/bench: the kvs cases and the memory-bandwidth calibration; the
# peers in bench/peers/ are built by scripts/bench with their own compilers.
bench_bench_suite_SOURCES = bench/bench_suite.c bench/round.h bench/resnet50_sizes.h bench/kvsd_pid.h
bench_bench_suite_LDADD = src/libkvs.la -lm
bench_calib_SOURCES = bench/calib.c bench/round.h
bench_calib_LDADD = -lm
# scripts/bench: the one-copy floor (each array read once and written once).
noinst_PROGRAMS += bench/onecopy
bench_onecopy_SOURCES = bench/onecopy.c bench/round.h
bench_onecopy_LDADD = -lm
EXTRA_DIST += bench/peers/mpi_allreduce.c bench/peers/tcp_floor.c bench/peers/torch_gloo.py \
	bench/bench_python.py bench/bench_distopt.py bench/benchutil.py bench/bench_ctr.py bench/claims.py bench/compare.sh bench/RESULTS.md bench/NOTES.md \
	bench/shapes/resnet50.txt bench/shapes/transformer-1.3b.txt
# scripts/bench's rows step: row-sparse steps of a table against dense pushpulls.
noinst_PROGRAMS += bench/bench_rows
bench_bench_rows_SOURCES = bench/bench_rows.c bench/bench.h bench/kvsd_pid.h
bench_bench_rows_LDADD = src/libkvs.la -lm
# scripts/bench's recover step: commits, and recovery from a worker's and kvsd's death.
noinst_PROGRAMS += bench/bench_recover
bench_bench_recover_SOURCES = bench/bench_recover.c bench/bench.h bench/kvsd_pid.h
bench_bench_recover_LDADD = src/libkvs.la -lm
# bench/NOTES.md §21: a store's snapshot written, opened and restored; it
# calls the snapshot code below the API, so it links the library's core.
noinst_PROGRAMS += bench/bench_snapshot
bench_bench_snapshot_SOURCES = bench/bench_snapshot.c
bench_bench_snapshot_LDADD = src/libkvs_core.la
