/*
 * gpu/cuda_rt.c - finds and loads libcudart at run time.
 *
 * Owns: the process-wide table of CUDA runtime functions and the mapping of
 * CUDA errors to errno (the one place that does it, STYLE.md).
 *
 * Invariant: `rt_table.dl` is set, under rt_lock, only after every symbol
 * was found; from then on the table is never written or unloaded, so
 * readers need no lock once cuda_rt_load() has returned it. The runtime is
 * never dlclose'd: other libraries in the process (PyTorch) may have
 * loaded the same file, and a CUDA runtime does not support being unloaded
 * while contexts exist.
 *
 * Which file: $HINTFS_CUDART if set (only that one); else the soname of
 * the major version we were compiled against (libcudart.so.13 for
 * CUDA 13), then the same name in the toolkit's library folder found at
 * build time (for toolkits not in ld.so.conf), then plain libcudart.so.
 * Every function used here has had the same signature since CUDA 10, so a
 * runtime of another major version found through libcudart.so works too.
 */
#include "gpu/cuda_rt.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef HINTFS_CUDA_LIBDIR
#define HINTFS_CUDA_LIBDIR ""
#endif

#define STR_(x) #x
#define STR(x)	STR_(x)

static pthread_mutex_t rt_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cuda_rt rt_table;

/* Appends to @buf (a NUL-terminated string of capacity @len). */
__attribute__((format(printf, 3, 4))) static void append(char *buf, size_t len,
							 const char *fmt, ...)
{
	size_t used = strnlen(buf, len);
	va_list ap;

	if (used + 1 >= len)
		return;
	va_start(ap, fmt);
	vsnprintf(buf + used, len - used, fmt, ap);
	va_end(ap);
}

/* Fills @t from @dl. Returns the first missing symbol, or NULL. */
static const char *resolve(struct cuda_rt *t, void *dl)
{
#define CUDA_RT_RESOLVE(fn)                                                    \
	t->fn = (__typeof__(t->fn))dlsym(dl, STR(fn));                         \
	if (!t->fn)                                                            \
		return STR(fn);
	CUDA_RT_FUNCS(CUDA_RT_RESOLVE)
#undef CUDA_RT_RESOLVE
	return NULL;
}

/* Tries one file. 0, or -ENODEV with a line appended to @why. */
static int try_open(const char *file, char *why, size_t why_len)
{
	struct cuda_rt t;
	const char *missing;
	void *dl;

	memset(&t, 0, sizeof(t));
	dl = dlopen(file, RTLD_NOW | RTLD_LOCAL);
	if (!dl) {
		append(why, why_len, "%s%s", why[0] ? "; " : "", dlerror());
		return -ENODEV;
	}
	missing = resolve(&t, dl);
	if (missing) {
		append(why, why_len, "%s%s lacks %s", why[0] ? "; " : "", file,
		       missing);
		dlclose(dl);
		return -ENODEV;
	}
	t.dl = dl;
	snprintf(t.loaded, sizeof(t.loaded), "%.255s", file);
	if (t.cudaRuntimeGetVersion(&t.runtime_version) != cudaSuccess)
		t.runtime_version = 0;
	rt_table = t;
	return 0;
}

int cuda_rt_load(const struct cuda_rt **out, char *why, size_t why_len)
{
	const char *env = getenv("HINTFS_CUDART");
	char names[3][300];
	size_t n = 0;
	int err = -ENODEV;

	why[0] = '\0';
	pthread_mutex_lock(&rt_lock);
	if (rt_table.dl) {
		*out = &rt_table;
		pthread_mutex_unlock(&rt_lock);
		return 0;
	}
	if (env && env[0]) {
		snprintf(names[n++], sizeof(names[0]), "%s", env);
	} else {
		snprintf(names[n++], sizeof(names[0]), "libcudart.so.%d",
			 CUDART_VERSION / 1000);
		if (HINTFS_CUDA_LIBDIR[0])
			snprintf(names[n++], sizeof(names[0]),
				 "%s/libcudart.so.%d", HINTFS_CUDA_LIBDIR,
				 CUDART_VERSION / 1000);
		snprintf(names[n++], sizeof(names[0]), "libcudart.so");
	}
	for (size_t i = 0; i < n && err; i++)
		err = try_open(names[i], why, why_len);
	if (err) {
		append(why, why_len, " (CUDA runtime not found%s)",
		       env && env[0] ? " at $HINTFS_CUDART" : "");
	} else {
		*out = &rt_table;
	}
	pthread_mutex_unlock(&rt_lock);
	return err;
}

int cuda_rt_errno(cudaError_t e)
{
	switch (e) {
	case cudaSuccess:
		return 0;
	case cudaErrorMemoryAllocation:
		return -ENOMEM;
	case cudaErrorNoDevice:
	case cudaErrorInvalidDevice:
	case cudaErrorInsufficientDriver:
	case cudaErrorStubLibrary:
	case cudaErrorCallRequiresNewerDriver:
	case cudaErrorDevicesUnavailable:
	case cudaErrorSystemNotReady:
	case cudaErrorSystemDriverMismatch:
	case cudaErrorCompatNotSupportedOnDevice:
	case cudaErrorInitializationError:
		return -ENODEV;
	case cudaErrorInvalidValue:
	case cudaErrorInvalidResourceHandle:
		return -EINVAL;
	default:
		return -EIO;
	}
}

void cuda_rt_describe(const struct cuda_rt *rt, cudaError_t e, const char *what,
		      char *buf, size_t len)
{
	snprintf(buf, len, "%s: %s (%s)", what, rt->cudaGetErrorString(e),
		 rt->cudaGetErrorName(e));
	if (e == cudaErrorInsufficientDriver || e == cudaErrorStubLibrary) {
		/* Tell "no driver at all" from "driver too old". */
		void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);

		if (drv)
			dlclose(drv);
		else
			append(buf, len, "; no NVIDIA driver: %s", dlerror());
	}
}
