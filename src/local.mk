# src/local.mk - libkvs: its code, the exported library, the CUDA kernel module.

# The library's code lives in a convenience library so that unit tests can
# reach internal (hidden) functions; libkvs.la wraps it with the exported API.
noinst_LTLIBRARIES = src/libkvs_core.la
# By layer, in include order: a folder calls only those listed above it.
src_libkvs_core_la_SOURCES = \
	src/base/error.c src/base/error.h \
	src/base/spec.c src/base/spec.h \
	src/base/pool.c src/base/pool.h \
	src/base/bufs.c src/base/bufs.h \
	src/base/latency.c src/base/latency.h \
	src/base/file.c src/base/file.h \
	src/base/bytes.h src/base/sys.h \
	src/shm/ring.c src/shm/ring.h \
	src/shm/shm.c src/shm/shm.h \
	src/kernels/array.c src/kernels/array_x86.c src/kernels/array_x86.h src/kernels/array.h \
	src/kernels/compress.c src/kernels/compress.h \
	src/kernels/optim.c src/kernels/optim.h \
	src/kernels/rows.c src/kernels/rows.h \
	src/kernels/cuda_kernels.h \
	src/device/cuda.c src/device/cuda.h \
	src/device/mem.c src/device/mem.h \
	src/store/key.c src/store/key.h \
	src/store/table.c src/store/table.h src/store/engine_args.c src/store/engine_args.h \
	src/store/rows_stage.c src/store/rows_stage.h \
	src/store/engine.c src/store/engine.h src/store/engine_keys.c src/store/engine_states.c \
	src/store/engine_hooks.h src/store/engine_model.h \
	src/store/heap.c src/store/heap.h \
	src/store/plan.c src/store/plan.h \
	src/store/init.c \
	src/store/push.c src/store/push.h \
	src/store/pull.c \
	src/store/rows.c \
	src/store/optim_state.c src/store/optim_state.h \
	src/store/statefile_codec.c src/store/statefile_codec.h \
	src/store/crc32c_x86.c src/store/crc32c_x86.h \
	src/store/statefile_rec.c src/store/statefile_rec.h \
	src/store/statefile.c src/store/statefile.h \
	src/store/snapshot.c src/store/snapshot.h \
	src/store/ckpt.c src/store/ckpt.h \
	src/store/nccl_reduce.c src/store/nccl_reduce.h \
	src/proto/head.c src/proto/head.h \
	src/proto/hello.c src/proto/hello.h \
	src/proto/ctl.c src/proto/ctl.h \
	src/proto/ops.h \
	src/proto/slots.c src/proto/slots.h \
	src/proto/tables.c src/proto/tables.h \
	src/proto/proto.h \
	src/proto/wire_frame.c src/proto/wire_frame.h \
	src/proto/wire_handshake.c src/proto/wire_handshake.h \
	src/proto/wire_roster.c src/proto/wire_roster.h \
	src/proto/wire_msg.c src/proto/wire_msg.h \
	src/proto/wire.h \
	src/proto/layout.h \
	src/proto/combine.c src/proto/combine.h \
	src/proto/shard.c src/proto/shard.h \
	src/proto/trace.c src/proto/trace.h \
	src/client/residual.c src/client/residual.h \
	src/client/groups.c src/client/groups.h \
	src/client/link.h \
	src/client/launch.c src/client/launch.h src/client/spawn.c \
	src/client/connect.c \
	src/client/staging.c \
	src/client/tables.c src/client/tables.h \
	src/client/wait.c src/client/wait.h \
	src/client/call.c \
	src/client/dev.c src/client/dev.h \
	src/client/combine.c src/client/combine.h \
	src/client/send.c src/client/send.h \
	src/client/pull.c src/client/pull.h src/client/rows.c src/client/rows.h \
	src/client/client.c \
	src/front.h src/kvs.c
src_libkvs_core_la_CFLAGS = $(AM_CFLAGS) -fvisibility=hidden -DKVS_BUILDING_LIBRARY
# Where libkvs finds the kernel module, and the kvsd a worker starts on demand, once
# installed.
src_libkvs_core_la_CPPFLAGS = $(AM_CPPFLAGS) -DKVS__KERNELS_PATH='"$(pkglibdir)/libkvs-cuda.so"' \
	-DKVS__BINDIR='"$(bindir)"'

lib_LTLIBRARIES = src/libkvs.la
src_libkvs_la_SOURCES =
src_libkvs_la_LIBADD = src/libkvs_core.la
src_libkvs_la_LDFLAGS = $(AM_LDFLAGS) -version-info $(KVS_LT_VERSION) -no-undefined \
	-Wl,--version-script=$(top_srcdir)/src/libkvs.map
EXTRA_src_libkvs_la_DEPENDENCIES = src/libkvs.map

# The kernel module libkvs dlopens for device arrays, built by nvcc where
# the toolkit has it (configure's CUDA_ARCHS, NVCCFLAGS). Its results must
# be the host kernels' bit for bit: no fused multiply-adds, IEEE division
# and square root, subnormals kept. The CUDA runtime is linked shared:
# the module is only loaded into a process that has it loaded already.
# A shared object is installed as data (mode 644), as shared libraries are.
if HAVE_NVCC
kvsmoduledir = $(pkglibdir)
kvsmodule_DATA = src/libkvs-cuda.so
CLEANFILES += src/libkvs-cuda.so
kvs_nvcc_flags = -O3 -std=c++17 -fmad=false -ftz=false -prec-div=true -prec-sqrt=true \
	-Wno-deprecated-gpu-targets \
	-shared -cudart shared -Xcompiler -fPIC,-fvisibility=hidden $(KVS_NVCC_WARN) \
	$(NVCC_ARCH_FLAGS)
AM_V_NVCC = $(am__v_NVCC_@AM_V@)
am__v_NVCC_ = $(am__v_NVCC_@AM_DEFAULT_V@)
am__v_NVCC_0 = @echo "  NVCC    " $@;
am__v_NVCC_1 =
src/libkvs-cuda.so: src/kernels/cuda_kernels.cu src/kernels/cuda_kernels.h
	@$(MKDIR_P) src
	$(AM_V_NVCC)$(NVCC) $(kvs_nvcc_flags) -I$(top_srcdir)/src $(NVCCFLAGS) \
	    -o $@ $(top_srcdir)/src/kernels/cuda_kernels.cu
endif
EXTRA_DIST += src/libkvs.map src/kernels/cuda_kernels.cu
