#!/bin/sh
# Description: the GPU benchmark's code against the CUDA and NCCL
# stand-in (two fake devices over host memory; the numbers mean nothing):
# it measures every size for device, nccl and NCCL itself, and dist_sync
# as the workers of a kvsrun job (--dist), checking every pulled sum; and
# without a CUDA runtime it says it skipped and exits 0.
set -u
b="${top_builddir:-.}"
standin="$(cd "$b" && pwd)/tests/standin/.libs/libkvs_standin.so"
KVS_CUDA_KERNELS="${standin%/*}/libkvs-cuda.so"   # the host build of the kernel module
export KVS_CUDA_KERNELS
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
private_runtime
trap 'rm -rf "$rt"' EXIT
echo "1..3"
if out=$(KVS_CUDART="$standin" KVS_NCCL="$standin" KVS_STANDIN_DEVICES=2 \
        "$b/bench/bench_gpu" --max-size 64K --iters 2 2>&1) &&
    [ "$(printf '%s\n' "$out" | grep -cE '^(4|16|64) KiB +(device|nccl|NCCL) ')" = 9 ]; then
    echo "ok 1 - bench_gpu under the stand-in: 3 sizes x device, nccl, NCCL"
else
    echo "not ok 1 - bench_gpu under the stand-in"
    printf '%s\n' "$out" | tail -20 | sed 's/^/# /'
fi
if out=$(KVS_CUDART="$standin" KVS_STANDIN_DEVICES=2 KVS_JOB="bg-$$" timeout 60 \
        "$b/daemon/kvsrun/kvsrun" -n 3 "$b/bench/bench_gpu" --dist --max-size 16K --iters 2 2>&1) &&
    printf '%s\n' "$out" | grep -q '^dist_sync, 3 workers on 2 GPUs' &&
    [ "$(printf '%s\n' "$out" | grep -cE '^(4|16) KiB +dist ')" = 2 ]; then
    echo "ok 2 - bench_gpu --dist: 3 workers of a dist_sync job on 2 fake GPUs"
else
    echo "not ok 2 - bench_gpu --dist"
    printf '%s\n' "$out" | tail -20 | sed 's/^/# /'
fi
if out=$(KVS_CUDART=/nonexistent/libcudart.so.13 "$b/bench/bench_gpu" 2>&1) &&
    printf '%s\n' "$out" | grep -q '^bench_gpu: skipped: no CUDA runtime'; then
    echo "ok 3 - bench_gpu without a runtime skips"
else
    echo "not ok 3 - bench_gpu without a runtime"
    printf '%s\n' "$out" | tail -5 | sed 's/^/# /'
fi
