/*
 * gpu/gds.c - the cuFile (GPUDirect Storage) read path.
 *
 * Owns: the process-wide cuFile function table and the cuFile driver
 * session (opened once, never closed: other code in the process may use
 * cuFile too, and cuFile itself closes the driver at exit). The library is
 * libcufile.so.0, or the file $HINTFS_CUFILE names (tests load a simulated
 * one, tests/unit/sim_cufile.c).
 *
 * Invariant: `gds_fn.loaded` is set, under gds_lock, only after every
 * symbol was found and cuFileDriverOpen() succeeded; the table is read
 * without the lock afterwards and never changes again.
 *
 * The declarations below are our own, written from NVIDIA's cuFile API
 * reference (CUfileError_t is two ints returned by value; CUfileDescr_t is
 * a handle type, a union of fd and pointer, and an fs-ops pointer), because
 * the toolkit's cufile.h is not installed everywhere the library builds.
 * NOTE(gds): this path has not been run on GDS hardware yet; it is off
 * unless HINTFS_GPU_CUFILE is set. On a FUSE mount such as hintfs, GDS
 * cannot do direct DMA and cuFile falls back to its POSIX compatibility
 * mode (or refuses the file when compat mode is off).
 */
#include "gpu/gds.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

/* CUfileError_t */
struct gds_status {
	int err;    /* CUfileOpError; 0 = CU_FILE_SUCCESS */
	int cu_err; /* CUresult of the driver API, when err says so */
};

/* CUfileDescr_t */
struct gds_descr {
	int type; /* CU_FILE_HANDLE_TYPE_OPAQUE_FD */
	union {
		int fd;
		void *handle;
	} handle;
	const void *fs_ops;
};

#define GDS_HANDLE_TYPE_OPAQUE_FD 1

/* cuFileRead's length is a size_t, but keep each call to 1 GiB. */
#define GDS_MAX_READ_BYTES (1u << 30)

static struct {
	bool loaded;
	void *dl;
	struct gds_status (*driver_open)(void);
	struct gds_status (*handle_register)(void **fh, struct gds_descr *d);
	void (*handle_deregister)(void *fh);
	struct gds_status (*buf_register)(const void *base, size_t len,
					  int flags);
	struct gds_status (*buf_deregister)(const void *base);
	ssize_t (*read)(void *fh, void *base, size_t size, off_t file_off,
			off_t base_off);
} gds_fn;

static pthread_mutex_t gds_lock = PTHREAD_MUTEX_INITIALIZER;

int gds_load(char *why, size_t why_len)
{
	const char *lib = getenv("HINTFS_CUFILE");
	struct gds_status st;
	const char *missing = NULL;
	void *dl;
	int err = 0;

	if (!lib || !lib[0])
		lib = "libcufile.so.0";
	pthread_mutex_lock(&gds_lock);
	if (gds_fn.loaded)
		goto out;
	dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!dl) {
		snprintf(why, why_len, "%s", dlerror());
		err = -ENODEV;
		goto out;
	}
#define GDS_SYM(member, name)                                                  \
	gds_fn.member = (__typeof__(gds_fn.member))dlsym(dl, name);            \
	if (!gds_fn.member && !missing)                                        \
		missing = name;
	GDS_SYM(driver_open, "cuFileDriverOpen")
	GDS_SYM(handle_register, "cuFileHandleRegister")
	GDS_SYM(handle_deregister, "cuFileHandleDeregister")
	GDS_SYM(buf_register, "cuFileBufRegister")
	GDS_SYM(buf_deregister, "cuFileBufDeregister")
	GDS_SYM(read, "cuFileRead")
#undef GDS_SYM
	if (missing) {
		snprintf(why, why_len, "%s lacks %s", lib, missing);
		err = -ENODEV;
		dlclose(dl);
		goto out;
	}
	st = gds_fn.driver_open();
	if (st.err != 0) {
		snprintf(why, why_len,
			 "cuFileDriverOpen failed (cufile error %d, CUresult "
			 "%d): is nvidia-fs loaded?",
			 st.err, st.cu_err);
		err = -ENODEV;
		dlclose(dl);
		goto out;
	}
	gds_fn.dl = dl;
	gds_fn.loaded = true;
out:
	pthread_mutex_unlock(&gds_lock);
	return err;
}

int gds_buf_register(void *dev, size_t len)
{
	return gds_fn.buf_register(dev, len, 0).err ? -EIO : 0;
}

void gds_buf_deregister(void *dev)
{
	gds_fn.buf_deregister(dev);
}

int gds_read_file(const char *path, void *dev, uint64_t dev_off, uint64_t len,
		  char *why, size_t why_len)
{
	struct gds_descr descr;
	struct gds_status st;
	void *fh = NULL;
	uint64_t done = 0;
	int fd, err = 0;

	if (len == 0)
		return 0;
	/* Direct DMA needs O_DIRECT; compat mode and some filesystems
	 * (FUSE without direct_io) want a plain descriptor. */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
	if (fd < 0 && errno == EINVAL)
		fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	memset(&descr, 0, sizeof(descr));
	descr.type = GDS_HANDLE_TYPE_OPAQUE_FD;
	descr.handle.fd = fd;
	st = gds_fn.handle_register(&fh, &descr);
	if (st.err != 0) {
		snprintf(why, why_len,
			 "cuFileHandleRegister failed (cufile error %d); GDS "
			 "may not support this filesystem",
			 st.err);
		close(fd);
		return -EIO;
	}
	while (done < len) {
		size_t want = len - done > GDS_MAX_READ_BYTES
				  ? GDS_MAX_READ_BYTES
				  : (size_t)(len - done);
		ssize_t got = gds_fn.read(fh, dev, want, (off_t)done,
					  (off_t)(dev_off + done));

		if (got == -1) {
			err = errno ? -errno : -EIO;
			break;
		}
		if (got < 0) {
			snprintf(why, why_len, "cuFileRead failed (%zd)", got);
			err = -EIO;
			break;
		}
		if (got == 0) {
			err = -ESTALE;
			break;
		}
		done += (uint64_t)got;
	}
	gds_fn.handle_deregister(fh);
	close(fd);
	return err;
}
