# tests/local.mk - every test make check runs, and their helpers.

TEST_EXTENSIONS = .sh
LOG_DRIVER = env AM_TAP_AWK='$(AWK)' $(SHELL) $(top_srcdir)/build-aux/tap-driver.sh
SH_LOG_DRIVER = $(LOG_DRIVER)
# Every test file has a deadline, the last resort: each case inside has
# its own (tests/lib.sh). Both are KVS_TEST_SLOW times longer (a whole
# number, 1 unless set; scripts/test sets it for the sanitizer build).
# cmocka reports in TAP.
test_deadline = timeout $$((300 * $${KVS_TEST_SLOW:-1}))
LOG_COMPILER = $(test_deadline) $(SHELL) $(top_srcdir)/tests/cmocka-tap.sh
SH_LOG_COMPILER = $(test_deadline) $(SHELL)
AM_TESTS_ENVIRONMENT = CMOCKA_MESSAGE_OUTPUT=TAP; export CMOCKA_MESSAGE_OUTPUT; \
	top_srcdir='$(top_srcdir)'; top_builddir='$(top_builddir)'; CC='$(CC)'; \
	KVS_SAN_CFLAGS='$(KVS_SAN_CFLAGS)'; PYTHON='$(PYTHON)'; \
	export top_srcdir top_builddir CC KVS_SAN_CFLAGS PYTHON;

# The tests of kvs's programs, a theme a file so that each takes a minute
# or two, and make -j check runs them side by side, and scripts/test
# runs two builds' at once: each has its own XDG_RUNTIME_DIR, a process is
# looked up by a name that carries the test's pid or by that folder in its
# environment, ports come from free_port's locks. The longest come
# first: make starts them first.
TESTS += tests/test_hosts.sh tests/test_hosts_uring.sh tests/test_hosts_ucx.sh \
	tests/test_hosts_forged.sh \
	tests/test_dist_combined.sh tests/test_dist.sh tests/test_python.sh tests/test_python_rows.sh \
	tests/test_python_torch.sh tests/test_python_distopt.sh tests/test_fuzz.sh \
	tests/test_kvsrun_jobs.sh tests/test_dist_training.sh tests/test_hosts_faults.sh \
	tests/test_kvsrun.sh tests/test_dist_remote.sh tests/test_dist_inplace.sh \
	tests/test_hosts_netns.sh tests/test_dist_device.sh tests/test_top.sh tests/test_hosts_secrets.sh tests/test_hosts_users.sh \
	tests/test_timeline.sh tests/test_kvsctl.sh tests/test_kvsctl_plan.sh tests/test_dist_kvsd.sh tests/test_quickstart.sh \
	tests/test_dist_rows.sh tests/test_hosts_rows.sh tests/test_hosts_bytes.sh tests/test_launch.sh
# Recovery (doc/recovery.md), test by test: commits, a worker's death
# rolling kvsd back and its restart from the snapshot, with kvsd started by
# hand; kvsrun's restarts; a worker's handle when kvsd is replaced; the kill
# loop (scripts/chaos, short); each fault under kvsrun with C workers; a
# commit's snapshot written while rounds change its keys, and a kvsd killed
# during the write; the same across 2 hosts.
TESTS += tests/test_recover_kvsd.sh tests/test_recover_run.sh tests/test_recover_client.sh \
	tests/test_recover_loop.sh tests/test_recover_faults.sh tests/test_recover_cow.sh \
	tests/test_recover_hosts.sh
EXTRA_DIST += tests/test_recover_kvsd.sh tests/test_recover_run.sh tests/test_recover_client.sh \
	tests/test_recover_loop.sh tests/test_recover_faults.sh tests/test_recover_cow.sh \
	tests/test_recover_hosts.sh \
	tests/recoverlib.sh
check_PROGRAMS += tests/dist_commit tests/recover_worker tests/dist_restart tests/recover_train \
	tests/recover_faults tests/dist_cow
tests_dist_commit_SOURCES = tests/dist_commit.c tests/distutil.h
tests_dist_commit_LDADD = src/libkvs.la -lm
tests_recover_worker_SOURCES = tests/recover_worker.c
tests_recover_worker_LDADD = src/libkvs.la
tests_dist_restart_SOURCES = tests/dist_restart.c tests/distutil.h
tests_dist_restart_CFLAGS = $(AM_CFLAGS) -pthread
tests_dist_restart_LDADD = src/libkvs.la -lm -lpthread
tests_recover_train_SOURCES = tests/recover_train.c tests/recoverutil.h
tests_recover_train_LDADD = src/libkvs.la
tests_recover_faults_SOURCES = tests/recover_faults.c tests/recoverutil.h
tests_recover_faults_CFLAGS = $(AM_CFLAGS) -pthread
tests_recover_faults_LDADD = src/libkvs.la -lpthread
tests_dist_cow_SOURCES = tests/dist_cow.c tests/distutil.h
tests_dist_cow_LDADD = src/libkvs.la -lm
# MXNet's nightly dist_sync_kvstore.py, ported.
TESTS += tests/test_dist_mxnet.sh tests/test_hosts_mxnet.sh
EXTRA_DIST += tests/test_dist_mxnet.sh tests/test_hosts_mxnet.sh
check_PROGRAMS += tests/dist_mxnet
tests_dist_mxnet_SOURCES = tests/dist_mxnet.c tests/distutil.h
tests_dist_mxnet_LDADD = src/libkvs.la -lm
# tests/test_python.sh runs these with pytest (skipped without the package).
python_tests = tests/python/conftest.py tests/python/test_kvstore.py tests/python/test_api.py \
	tests/python/test_dist.py tests/python/test_rows.py tests/python/test_torch.py tests/python/workers.py \
	tests/python/test_bench_ctr.py tests/python/test_commit.py tests/python/test_recover.py \
	tests/python/test_memory.py tests/python/test_ddp.py tests/python/ddp_workers.py \
	tests/python/test_distopt.py
# kvsctl timeline plot and merge, on timelines the test writes.
TESTS += tests/test_timeline_tool.sh
EXTRA_DIST += tests/test_timeline_tool.sh
# The guides' links: every one resolves, every guide is reachable from
# the README (doc/local.mk ships them).
TESTS += tests/test_docs.sh tests/test_layers.sh
EXTRA_DIST += tests/test_docs.sh tests/test_layers.sh
# The docs' speed figures: each bench region is what bench/claims.py renders
# from bench/RESULTS.md (no benchmark runs).
TESTS += tests/test_claims.sh
EXTRA_DIST += tests/test_claims.sh
check_PROGRAMS += tests/dist_worker tests/dist_remote tests/dist_inplace tests/dist_training tests/dist_device tests/fuzz_proto \
	tests/dist_rows tests/hosts_bytes
if HAVE_CMOCKA
unit_tests = tests/test_array tests/test_half tests/test_pool tests/test_optim tests/test_statefile \
	tests/test_compress tests/test_ring tests/test_shm tests/test_proto tests/test_proto_ctl \
	tests/test_slots tests/test_raw tests/test_api tests/test_api_pushpull tests/test_api_update \
	tests/test_api_states tests/test_mxnet tests/test_mxnet_docs tests/test_threads tests/test_buffers \
	tests/test_spec tests/test_sum tests/test_wire tests/test_shard tests/test_rows \
	tests/test_rows_engine tests/test_snapshot tests/test_ckpt
check_PROGRAMS += $(unit_tests)
TESTS += $(unit_tests)
test_cflags = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
test_core_ldadd = src/libkvs_core.la $(CMOCKA_LIBS)
test_api_ldadd = src/libkvs.la $(CMOCKA_LIBS)
# array.c's checks, sums, copies and conversions of whole arrays; and the
# half conversions of one value, with the x86 half kernels against them.
tests_test_array_SOURCES = tests/test_array.c tests/arrayutil.h
tests_test_array_CFLAGS = $(test_cflags)
tests_test_array_LDADD = $(test_core_ldadd)
tests_test_half_SOURCES = tests/test_half.c tests/arrayutil.h
tests_test_half_CFLAGS = $(test_cflags)
tests_test_half_LDADD = $(test_core_ldadd)
tests_test_pool_CFLAGS = $(test_cflags)
tests_test_pool_LDADD = $(test_core_ldadd)
tests_test_optim_SOURCES = tests/test_optim.c tests/optimutil.h
tests_test_optim_CFLAGS = $(test_cflags)
tests_test_optim_LDADD = $(test_core_ldadd)
tests_test_statefile_SOURCES = tests/test_statefile.c tests/optimutil.h
tests_test_statefile_CFLAGS = $(test_cflags)
tests_test_statefile_LDADD = $(test_core_ldadd)
# A store's snapshot, and the checkpoint folder that keeps snapshots on disk.
tests_test_snapshot_SOURCES = tests/test_snapshot.c tests/snaputil.h tests/testutil.h
tests_test_snapshot_CFLAGS = $(test_cflags)
tests_test_snapshot_LDADD = $(test_core_ldadd)
tests_test_ckpt_SOURCES = tests/test_ckpt.c tests/snaputil.h tests/testutil.h
tests_test_ckpt_CFLAGS = $(test_cflags)
tests_test_ckpt_LDADD = $(test_core_ldadd)
tests_test_compress_CFLAGS = $(test_cflags)
tests_test_compress_LDADD = $(test_core_ldadd)
tests_test_ring_CFLAGS = $(test_cflags)
tests_test_ring_LDADD = $(test_core_ldadd)
tests_test_wire_CFLAGS = $(test_cflags)
tests_test_wire_LDADD = $(test_core_ldadd)
tests_test_shard_CFLAGS = $(test_cflags)
tests_test_shard_LDADD = $(test_core_ldadd)
# The streams between hosts, tested on their own.
check_PROGRAMS += tests/test_transport
TESTS += tests/test_transport
tests_test_transport_CFLAGS = $(test_cflags) -I$(top_srcdir)/daemon/net \
	-DSTUB_PATH='"$(abs_top_builddir)/tests/.libs/tp_stub.so"'
tests_test_transport_LDADD = daemon/net/libkvs_net.la $(test_core_ldadd) -ldl
EXTRA_tests_test_transport_DEPENDENCIES = tests/tp_stub.la
if HAVE_LIBURING
tests_test_transport_CFLAGS += $(LIBURING_CFLAGS) -DHAVE_LIBURING
endif
# kvsctl timeline's reader of untrusted trace files, on its own.
check_PROGRAMS += tests/test_tlread
TESTS += tests/test_tlread
tests_test_tlread_SOURCES = tests/test_tlread.c daemon/kvsctl/tlread.c daemon/kvsctl/tlread.h
tests_test_tlread_CFLAGS = $(test_cflags) -I$(top_srcdir)/daemon/kvsctl
tests_test_tlread_LDADD = $(CMOCKA_LIBS) -lm
check_PROGRAMS += tests/test_auth tests/test_handshake
TESTS += tests/test_auth tests/test_handshake
tests_test_auth_CFLAGS = $(test_cflags) $(SODIUM_CFLAGS) -I$(top_srcdir)/daemon/net
tests_test_auth_LDADD = daemon/net/libkvs_net.la $(test_core_ldadd) $(SODIUM_LIBS)
tests_test_handshake_CFLAGS = $(test_cflags) $(SODIUM_CFLAGS) -I$(top_srcdir)/daemon/net
tests_test_handshake_LDADD = daemon/net/libkvs_net.la $(test_core_ldadd) $(SODIUM_LIBS)
# A host that holds the job's secret and sends forged frames, and the
# worker beside it (test_hosts_forged.sh).
check_PROGRAMS += tests/forge_host tests/forge_worker
tests_forge_host_CFLAGS = $(AM_CFLAGS) $(SODIUM_CFLAGS) -I$(top_srcdir)/daemon/net
tests_forge_host_LDADD = daemon/net/libkvs_net.la src/libkvs_core.la $(SODIUM_LIBS)
tests_forge_worker_LDADD = src/libkvs.la
if HAVE_UCX
# The UCX plug-in's drop of a message with a forged token.
check_PROGRAMS += tests/test_tp_ucx
TESTS += tests/test_tp_ucx.sh
tests_test_tp_ucx_CFLAGS = $(AM_CFLAGS) -I$(top_srcdir)/daemon/net
tests_test_tp_ucx_LDADD = daemon/net/libkvs_net.la src/libkvs_core.la -ldl -lpthread
endif
EXTRA_DIST += tests/test_tp_ucx.sh
tests_test_sum_CFLAGS = $(test_cflags)
tests_test_sum_LDADD = $(test_core_ldadd)
tests_test_spec_CFLAGS = $(test_cflags)
tests_test_spec_LDADD = $(test_core_ldadd)
tests_test_shm_CFLAGS = $(test_cflags)
tests_test_shm_LDADD = $(test_core_ldadd)
# The handshake's socket messages, and the control messages.
tests_test_proto_SOURCES = tests/test_proto.c tests/protoutil.h
tests_test_proto_CFLAGS = $(test_cflags)
tests_test_proto_LDADD = $(test_core_ldadd)
tests_test_proto_ctl_SOURCES = tests/test_proto_ctl.c tests/protoutil.h
tests_test_proto_ctl_CFLAGS = $(test_cflags)
tests_test_proto_ctl_LDADD = $(test_core_ldadd)
tests_test_slots_SOURCES = tests/test_slots.c tests/protoutil.h
tests_test_slots_CFLAGS = $(test_cflags)
tests_test_slots_LDADD = $(test_core_ldadd)
tests_test_raw_CFLAGS = $(test_cflags)
tests_test_raw_LDADD = $(test_core_ldadd) -lm
tests_test_api_SOURCES = tests/test_api.c tests/testutil.h
tests_test_api_CFLAGS = $(test_cflags)
tests_test_api_LDADD = $(test_api_ldadd)
tests_test_api_pushpull_SOURCES = tests/test_api_pushpull.c tests/testutil.h
tests_test_api_pushpull_CFLAGS = $(test_cflags)
tests_test_api_pushpull_LDADD = $(test_api_ldadd)
# Update rules through kvs.h, and the optimizer state files.
tests_test_api_update_SOURCES = tests/test_api_update.c tests/testutil.h
tests_test_api_update_CFLAGS = $(test_cflags)
tests_test_api_update_LDADD = $(test_api_ldadd)
tests_test_api_states_SOURCES = tests/test_api_states.c tests/testutil.h
tests_test_api_states_CFLAGS = $(test_cflags)
tests_test_api_states_LDADD = $(test_api_ldadd)
# MXNet's KVStore tests, and the examples of its KVStore documentation.
tests_test_mxnet_SOURCES = tests/test_mxnet.c tests/testutil.h
tests_test_mxnet_CFLAGS = $(test_cflags)
tests_test_mxnet_LDADD = $(test_api_ldadd)
tests_test_mxnet_docs_SOURCES = tests/test_mxnet_docs.c tests/testutil.h
tests_test_mxnet_docs_CFLAGS = $(test_cflags)
tests_test_mxnet_docs_LDADD = $(test_api_ldadd)
tests_test_buffers_SOURCES = tests/test_buffers.c tests/testutil.h
tests_test_buffers_CFLAGS = $(test_cflags)
tests_test_buffers_LDADD = $(test_api_ldadd)
# Row-sparse values through kvs.h, with the engine's optimizer state read
# beside them; and the engine's row calls kvsd makes and the row kernels.
tests_test_rows_SOURCES = tests/test_rows.c tests/rowsutil.h tests/testutil.h
tests_test_rows_CFLAGS = $(test_cflags)
tests_test_rows_LDADD = $(test_core_ldadd) -lm
tests_test_rows_engine_SOURCES = tests/test_rows_engine.c tests/rowsutil.h tests/testutil.h
tests_test_rows_engine_CFLAGS = $(test_cflags)
tests_test_rows_engine_LDADD = $(test_core_ldadd) -lm
tests_test_threads_SOURCES = tests/test_threads.c tests/testutil.h
tests_test_threads_CFLAGS = $(test_cflags)
tests_test_threads_LDADD = $(test_api_ldadd)
# The kernel module against the host kernels, on a GPU where there is one.
if HAVE_NVCC
check_PROGRAMS += tests/test_kernels
TESTS += tests/test_kernels
tests_test_kernels_CPPFLAGS = $(AM_CPPFLAGS) -isystem $(CUDA_DIR)/include \
	-DCUDA_LIB_DIR='"$(CUDA_DIR)/lib64"' \
	-DKERNELS_PATH='"$(abs_top_builddir)/src/libkvs-cuda.so"'
tests_test_kernels_CFLAGS = $(test_cflags)
tests_test_kernels_LDADD = $(test_core_ldadd) -ldl
EXTRA_tests_test_kernels_DEPENDENCIES = src/libkvs-cuda.so
endif
endif
# A transport plug-in for the loader's tests: the socket transport under
# another name, or broken as TP_STUB asks (tests/tp_stub.c).
check_LTLIBRARIES += tests/tp_stub.la
tests_tp_stub_la_SOURCES = tests/tp_stub.c daemon/net/tp_socket.c daemon/net/tp_util.h \
	daemon/net/tp_socket.h
tests_tp_stub_la_CFLAGS = $(AM_CFLAGS) -fvisibility=hidden -I$(top_srcdir)/daemon/net
tests_tp_stub_la_LDFLAGS = $(AM_LDFLAGS) -module -avoid-version -rpath /nowhere
tests_tp_stub_la_LIBADD = src/libkvs_core.la
# A stand-in for the CUDA runtime and NCCL over host memory, built where
# their headers are, so that the GPU path is tested without a GPU; and the
# kernel module built for the host over it (tests/standin/kernels.c),
# which libkvs loads as it loads the one nvcc builds (KVS_CUDA_KERNELS).
# The module needs the stand-in as the real one needs libcudart: the
# loader finds it by its soname, already loaded by libkvs.
if HAVE_NCCL
standin_lib = $(abs_top_builddir)/tests/standin/.libs/libkvs_standin.so
standin_kernels = $(abs_top_builddir)/tests/standin/.libs/libkvs-cuda.so
standin_paths = -DSTANDIN_PATH='"$(standin_lib)"' -DSTANDIN_KERNELS='"$(standin_kernels)"'
check_LTLIBRARIES += tests/standin/libkvs_standin.la tests/standin/libkvs-cuda.la
tests_standin_libkvs_standin_la_SOURCES = tests/standin/cudart.c tests/standin/cudamem.c \
	tests/standin/cudart_int.h tests/standin/nccl.c tests/standin/standin.h
tests_standin_libkvs_standin_la_CPPFLAGS = $(AM_CPPFLAGS) -isystem $(CUDA_DIR)/include
tests_standin_libkvs_standin_la_CFLAGS = $(AM_CFLAGS) -fvisibility=hidden
tests_standin_libkvs_standin_la_LDFLAGS = $(AM_LDFLAGS) -avoid-version -rpath /nowhere
tests_standin_libkvs_standin_la_LIBADD = src/libkvs_core.la
tests_standin_libkvs_cuda_la_SOURCES = tests/standin/kernels.c tests/standin/standin.h
tests_standin_libkvs_cuda_la_CPPFLAGS = $(AM_CPPFLAGS) -isystem $(CUDA_DIR)/include
tests_standin_libkvs_cuda_la_LDFLAGS = $(AM_LDFLAGS) -module -avoid-version -rpath /nowhere \
	-export-symbols-regex '^kvs_cuda_'
tests_standin_libkvs_cuda_la_LIBADD = src/libkvs_core.la tests/standin/libkvs_standin.la
if HAVE_CMOCKA
check_PROGRAMS += tests/test_standin
TESTS += tests/test_standin
tests_test_standin_CPPFLAGS = -isystem $(CUDA_DIR)/include $(standin_paths)
tests_test_standin_CFLAGS = $(test_cflags)
tests_test_standin_LDADD = $(CMOCKA_LIBS) -ldl
EXTRA_tests_test_standin_DEPENDENCIES = tests/standin/libkvs_standin.la tests/standin/libkvs-cuda.la
check_PROGRAMS += tests/test_cuda
TESTS += tests/test_cuda
tests_test_cuda_CPPFLAGS = $(AM_CPPFLAGS) -DCUDA_LIB_DIR='"$(CUDA_DIR)/lib64"' $(standin_paths)
tests_test_cuda_CFLAGS = $(test_cflags)
tests_test_cuda_LDADD = $(test_core_ldadd)
EXTRA_tests_test_cuda_DEPENDENCIES = tests/standin/libkvs_standin.la tests/standin/libkvs-cuda.la
check_PROGRAMS += tests/test_device
TESTS += tests/test_device
tests_test_device_CPPFLAGS = $(AM_CPPFLAGS) $(standin_paths)
tests_test_device_CFLAGS = $(test_cflags)
tests_test_device_LDADD = $(test_api_ldadd) -ldl
EXTRA_tests_test_device_DEPENDENCIES = tests/standin/libkvs_standin.la tests/standin/libkvs-cuda.la
check_PROGRAMS += tests/test_device_rows
TESTS += tests/test_device_rows
tests_test_device_rows_CPPFLAGS = $(AM_CPPFLAGS) $(standin_paths)
tests_test_device_rows_CFLAGS = $(test_cflags)
tests_test_device_rows_LDADD = $(test_api_ldadd) -ldl
EXTRA_tests_test_device_rows_DEPENDENCIES = tests/standin/libkvs_standin.la tests/standin/libkvs-cuda.la
# test_snapshot's commit of a key on a (stand-in) GPU.
tests_test_snapshot_CPPFLAGS = $(AM_CPPFLAGS) $(standin_paths)
EXTRA_tests_test_snapshot_DEPENDENCIES = tests/standin/libkvs_standin.la tests/standin/libkvs-cuda.la
# The GPU benchmark's own code, run against the stand-in (its numbers mean
# nothing there), and its skip without a runtime.
TESTS += tests/test_bench_gpu.sh
endif
endif
tests_dist_worker_SOURCES = tests/dist_worker.c tests/dist_worker_jobs.c tests/dist_worker.h \
	tests/distutil.h
tests_dist_worker_LDADD = src/libkvs.la -lm
# Jobs that no kvsrun started (test_launch.sh).
check_PROGRAMS += tests/launch_worker
tests_launch_worker_SOURCES = tests/launch_worker.c
tests_launch_worker_LDADD = src/libkvs.la
EXTRA_DIST += tests/test_launch.sh
tests_dist_rows_SOURCES = tests/dist_rows.c tests/dist_rows_hosts.c tests/dist_rows.h \
	tests/distutil.h
tests_dist_rows_LDADD = src/libkvs.la -lm
tests_hosts_bytes_SOURCES = tests/hosts_bytes.c tests/distutil.h
tests_hosts_bytes_LDADD = src/libkvs.la -lm
tests_dist_remote_SOURCES = tests/dist_remote.c tests/distutil.h
tests_dist_remote_LDADD = src/libkvs.la -lpthread
tests_dist_inplace_SOURCES = tests/dist_inplace.c tests/distutil.h
tests_dist_inplace_LDADD = src/libkvs.la -lpthread -lm
tests_dist_device_SOURCES = tests/dist_device.c tests/distutil.h
tests_dist_device_LDADD = src/libkvs.la -lm -ldl
EXTRA_tests_dist_device_DEPENDENCIES = tests/standin/libkvs_standin.la tests/standin/libkvs-cuda.la
tests_dist_training_SOURCES = tests/dist_training.c tests/distutil.h
tests_dist_training_CFLAGS = $(AM_CFLAGS) -pthread
tests_dist_training_LDADD = src/libkvs.la -lm -lpthread
# The fuzz target as a plain program: seeds and fixed mutations, no libFuzzer
# (scripts/test also runs it under libFuzzer when clang has it).
tests_fuzz_proto_CFLAGS = $(AM_CFLAGS) -DKVS_FUZZ_MAIN
tests_fuzz_proto_LDADD = src/libkvs_core.la
EXTRA_DIST += tests/test_quickstart.sh tests/cmocka-tap.sh tests/test_dist.sh tests/test_hosts.sh \
	tests/test_kvsrun.sh tests/test_kvsctl.sh tests/test_top.sh tests/test_fuzz.sh tests/test_python.sh \
	tests/test_python_rows.sh tests/test_python_torch.sh tests/test_python_distopt.sh \
	tests/lib.sh tests/test_bench_gpu.sh tests/test_timeline.sh tests/timeline_check.py \
	tests/distlib.sh tests/test_dist_combined.sh tests/test_dist_remote.sh tests/test_dist_inplace.sh \
	tests/test_dist_training.sh tests/test_dist_device.sh tests/test_dist_kvsd.sh tests/test_dist_rows.sh tests/test_hosts_rows.sh tests/test_hosts_bytes.sh \
	tests/hostslib.sh tests/test_hosts_uring.sh tests/test_hosts_ucx.sh \
	tests/test_hosts_forged.sh \
	tests/test_hosts_faults.sh tests/test_hosts_secrets.sh tests/test_hosts_users.sh \
	tests/test_hosts_netns.sh tests/kvsrunlib.sh tests/test_kvsrun_jobs.sh tests/test_kvsctl_plan.sh
EXTRA_DIST += tests/test_install.sh tests/test_pip.sh tests/quickstart.expected tests/kvstore_chapter.expected \
	$(python_tests)

# The install test builds a program against the installed header and
# pkg-config file only; it runs from scripts/test, after `make install`.
installcheck-local:
	PKG_CONFIG_PATH='$(DESTDIR)$(libdir)/pkgconfig' CC='$(CC)' \
	  PYTHON='$(PYTHON)' KVS_PYTHON_PKGDIR='$(DESTDIR)$(KVS_PYTHONDIR)' \
	  $(SHELL) $(top_srcdir)/tests/test_install.sh '$(DESTDIR)$(prefix)'
