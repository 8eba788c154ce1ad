# src/local.mk - libkvs: its code, the exported library, the CUDA kernel module.

# The library's code lives in a convenience library so that unit tests can
# reach internal (hidden) functions; libkvs.la wraps it with the exported API.
noinst_LTLIBRARIES = src/libkvs_core.la
src_libkvs_core_la_SOURCES = \
	src/kvs.c \
	src/bufs.c src/bufs.h \
	src/error.c src/error.h \
	src/engine.c src/engine_args.c src/engine_states.c src/engine.h src/engine_int.h \
	src/array.c src/array_x86.c src/array.h \
	src/cuda.c src/cuda.h src/cuda_kernels.h src/mem.c src/mem.h src/nccl_reduce.c src/nccl_reduce.h \
	src/pool.c src/pool.h \
	src/optim.c src/statefile.c src/optim.h \
	src/compress.c src/compress.h src/residual.c src/residual.h \
	src/spec.c src/spec.h \
	src/front.h src/client.h src/client.c src/client_conn.c src/client_dev.c src/layout.h \
	src/combine.c src/combine.h src/client_combine.c src/latency.c src/latency.h \
	src/ring.c src/ring.h \
	src/shm.c src/shm.h src/sys.h \
	src/proto.c src/proto.h src/bytes.h \
	src/wire.c src/wire.h \
	src/shard.c src/shard.h \
	src/trace.c src/trace.h
src_libkvs_core_la_CFLAGS = $(AM_CFLAGS) -fvisibility=hidden -DKVS_BUILDING_LIBRARY
# Where libkvs finds the kernel module once installed.
src_libkvs_core_la_CPPFLAGS = $(AM_CPPFLAGS) -DKVS__KERNELS_PATH='"$(pkglibdir)/libkvs-cuda.so"'

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
src/libkvs-cuda.so: src/cuda_kernels.cu src/cuda_kernels.h
	@$(MKDIR_P) src
	$(AM_V_NVCC)$(NVCC) $(kvs_nvcc_flags) -I$(top_srcdir)/src $(NVCCFLAGS) \
	    -o $@ $(top_srcdir)/src/cuda_kernels.cu
endif
EXTRA_DIST += src/libkvs.map src/cuda_kernels.cu
