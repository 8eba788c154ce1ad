/*
 * cuda.h - the CUDA runtime, loaded with dlopen at first use so that one
 * build runs on machines without a GPU, a driver or the toolkit: a device
 * array there fails with KVS_EDEVICE and the reason.
 *
 * KVS_CUDART names the library to load (a path or a soname); the default
 * is libcudart.so.13. The library is loaded, and its devices counted, once
 * per process; the outcome, good or bad, is kept.
 */
#ifndef KVS_CUDA_H
#define KVS_CUDA_H

#include "error.h"

#define KVS__CUDART_DEFAULT "libcudart.so.13"

/* The number of CUDA devices this process sees: > 0, or KVS_EDEVICE with
 * why there are none ("libcudart.so.13 cannot be loaded: ...", "no CUDA
 * driver", "no CUDA device"). */
int kvs__cuda_devices(struct kvs__err *e);

/* 0 when CUDA device i exists, else KVS_EDEVICE naming what there is. */
int kvs__cuda_device(int i, struct kvs__err *e);

#endif
