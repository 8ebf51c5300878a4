/*
 * gpu/cuda_rt.h - the CUDA runtime, loaded with dlopen.
 *
 * Private to gpu/. The function pointers have the types of the toolkit's own
 * declarations (cuda_runtime_api.h, found at build time), so a signature
 * mismatch is a compile error, while nothing links against libcudart: the
 * library loads where no CUDA is installed and reports "no CUDA device" at
 * open instead of failing in the dynamic loader.
 */
#ifndef HINTFS_GPU_CUDA_RT_H
#define HINTFS_GPU_CUDA_RT_H

#include <cuda_runtime_api.h>
#include <stddef.h>

/* Every runtime function the library calls. */
#define CUDA_RT_FUNCS(X)                                                       \
	X(cudaGetErrorName)                                                    \
	X(cudaGetErrorString)                                                  \
	X(cudaRuntimeGetVersion)                                               \
	X(cudaDriverGetVersion)                                                \
	X(cudaGetDeviceCount)                                                  \
	X(cudaGetDevice)                                                       \
	X(cudaSetDevice)                                                       \
	X(cudaMalloc)                                                          \
	X(cudaFree)                                                            \
	X(cudaHostAlloc)                                                       \
	X(cudaFreeHost)                                                        \
	X(cudaStreamCreateWithFlags)                                           \
	X(cudaStreamDestroy)                                                   \
	X(cudaStreamSynchronize)                                               \
	X(cudaStreamWaitEvent)                                                 \
	X(cudaEventCreateWithFlags)                                            \
	X(cudaEventDestroy)                                                    \
	X(cudaEventRecord)                                                     \
	X(cudaEventSynchronize)                                                \
	X(cudaMemcpyAsync)

/*
 * Members are named after the functions, so that a header that renames a
 * function with a macro (cudaFoo -> cudaFoo_v2) renames the member and the
 * symbol looked up alike.
 */
struct cuda_rt {
	/* dlopen handle; never closed (see cuda_rt.c). */
	void *dl;
	/* The file that was loaded, for hintfs_gpu_describe(). */
	char loaded[256];
	/* cudaRuntimeGetVersion(), e.g. 13000. */
	int runtime_version;
#define CUDA_RT_MEMBER(fn) __typeof__(&fn) fn;
	CUDA_RT_FUNCS(CUDA_RT_MEMBER)
#undef CUDA_RT_MEMBER
};

/*
 * Finds a runtime that sees at least one device, once per process (later
 * calls return the same table). Returns 0 and the table in *@out, or
 * -ENODEV with the reasons in @why (each runtime tried and its
 * cudaGetDeviceCount error, the files not found, whether the NVIDIA driver
 * library exists). Any thread. A failure is retried by the next call.
 */
int cuda_rt_load(const struct cuda_rt **out, char *why, size_t why_len);

/*
 * Maps a CUDA error to a negative errno, once for the library:
 * allocation -> -ENOMEM; no device or driver -> -ENODEV; bad value or
 * handle -> -EINVAL; the rest -> -EIO.
 */
int cuda_rt_errno(cudaError_t e);

/* Writes "@what: <text> (<name>)" for @e to @buf. */
void cuda_rt_describe(const struct cuda_rt *rt, cudaError_t e, const char *what,
		      char *buf, size_t len);

#endif /* HINTFS_GPU_CUDA_RT_H */
