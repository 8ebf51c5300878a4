/*
 * gpu/cuda_rt.c - finds and loads libcudart at run time.
 *
 * Owns: the process-wide table of CUDA runtime functions and the mapping of
 * CUDA errors to errno (the one place that does it, doc/STYLE.md).
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
 * CUDA 13), the same name in the toolkit's library folder found at build
 * time (for toolkits not in ld.so.conf), then older majors down to 11
 * (for nodes whose driver is older than our toolkit), then plain
 * libcudart.so. The first that sees a device wins and is kept for the
 * process. Every function used here has had the same signature since
 * CUDA 10, so any of them works.
 */
#include "gpu/cuda_rt.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
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

/*
 * Tries one file: loads it, resolves every symbol, counts devices. Returns
 * 0 with the table in *@t (a runtime that sees at least one device), or
 * -ENODEV with the reason appended to @why; *@not_found is set when the
 * file itself could not be loaded.
 */
static int try_open(const char *file, struct cuda_rt *t, char *why,
		    size_t why_len, bool *not_found, void **seen,
		    size_t *n_seen)
{
	const char *missing;
	cudaError_t e;
	int count = 0;
	void *dl;

	*not_found = false;
	memset(t, 0, sizeof(*t));
	dl = dlopen(file, RTLD_NOW | RTLD_LOCAL);
	if (!dl) {
		*not_found = true;
		return -ENODEV;
	}
	/* The same library under another name: already said why not. */
	for (size_t i = 0; i < *n_seen; i++) {
		if (seen[i] == dl) {
			dlclose(dl);
			return -ENODEV;
		}
	}
	seen[(*n_seen)++] = dl;
	missing = resolve(t, dl);
	if (missing) {
		append(why, why_len, "%s%s lacks %s", why[0] ? "; " : "", file,
		       missing);
		dlclose(dl);
		return -ENODEV;
	}
	/*
	 * A runtime that loaded but sees no device stays loaded (never
	 * dlclose a runtime that was initialized): a later open reuses it.
	 */
	e = t->cudaGetDeviceCount(&count);
	if (e != cudaSuccess || count <= 0) {
		char m[300];

		if (e != cudaSuccess)
			cuda_rt_describe(t, e, "cudaGetDeviceCount", m,
					 sizeof(m));
		else
			snprintf(m, sizeof(m), "cudaGetDeviceCount found none");
		append(why, why_len, "%s%s: %s", why[0] ? "; " : "", file, m);
		return -ENODEV;
	}
	t->dl = dl;
	snprintf(t->loaded, sizeof(t->loaded), "%.255s", file);
	if (t->cudaRuntimeGetVersion(&t->runtime_version) != cudaSuccess)
		t->runtime_version = 0;
	return 0;
}

/* The files to try, in order; returns how many. */
static size_t candidates(char names[][300], size_t max, const char *env)
{
	int major = CUDART_VERSION / 1000;
	size_t n = 0;

	if (env && env[0]) {
		snprintf(names[n++], 300, "%.290s", env);
		return n;
	}
	snprintf(names[n++], 300, "libcudart.so.%d", major);
	if (HINTFS_CUDA_LIBDIR[0])
		snprintf(names[n++], 300, "%.270s/libcudart.so.%d",
			 HINTFS_CUDA_LIBDIR, major);
	/* Older runtimes, for drivers too old for ours. */
	for (int m = major - 1; m >= 12 && n + 2 < max; m--)
		snprintf(names[n++], 300, "libcudart.so.%d", m);
	snprintf(names[n++], 300, "libcudart.so.11.0");
	snprintf(names[n++], 300, "libcudart.so");
	return n;
}

int cuda_rt_load(const struct cuda_rt **out, char *why, size_t why_len)
{
	const char *env = getenv("HINTFS_CUDART");
	char names[8][300], missing[400] = "";
	void *seen[8];
	struct cuda_rt t;
	size_t n, n_seen = 0;
	int err = -ENODEV;

	why[0] = '\0';
	pthread_mutex_lock(&rt_lock);
	if (rt_table.dl) {
		*out = &rt_table;
		pthread_mutex_unlock(&rt_lock);
		return 0;
	}
	n = candidates(names, 8, env);
	for (size_t i = 0; i < n && err; i++) {
		bool not_found;

		err = try_open(names[i], &t, why, why_len, &not_found, seen,
			       &n_seen);
		if (not_found)
			append(missing, sizeof(missing), "%s%s",
			       missing[0] ? ", " : "", names[i]);
	}
	if (!err) {
		rt_table = t;
		*out = &rt_table;
	} else {
		void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);

		if (missing[0])
			append(why, why_len, "%sCUDA runtime not found: %s%s",
			       why[0] ? "; " : "", missing,
			       env && env[0] ? " ($HINTFS_CUDART)" : "");
		/* Tell "no driver at all" from "driver too old". */
		if (drv)
			dlclose(drv);
		else
			append(why, why_len, "; no NVIDIA driver: %s",
			       dlerror());
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
}
