/*
 * tests/unit/sim_cufile.c - cuFile (GPUDirect Storage) simulated on the CPU,
 * for testing gpu/gds.c where no GDS hardware is.
 *
 * Loaded by libhintfs_gpu through $HINTFS_CUFILE next to the simulated
 * CUDA runtime (sim_cudart.c), whose "device memory" is host memory: a
 * cuFileRead here is a pread into it. It keeps what a caller can get
 * wrong: file handles and buffer registrations are counted (and must come
 * back to zero), a read past a buffer's registration is refused, reads into
 * unregistered memory are counted, and reads are short (at most 64 KiB
 * each, as cuFile's may be) so the caller's loop has to continue them.
 *
 * Declarations are ours, from NVIDIA's cuFile API reference, matching
 * gpu/gds.c's (the toolkit here ships no cufile.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

/* Short reads: what one cuFileRead moves at most. */
#define SIM_MAX_READ (64u << 10)
/* O_DIRECT alignment of offsets, lengths and buffers. */
#define SIM_BLOCK 4096

struct sim_status {
	int err;
	int cu_err;
};

struct sim_descr {
	int type;
	union {
		int fd;
		void *handle;
	} handle;
	const void *fs_ops;
};

struct sim_fh {
	int fd;
};

struct sim_buf {
	const uint8_t *base;
	size_t len;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int driver_fails;
static long handles_live, bufs_live, bad_calls, reads, unregistered_reads;
static struct sim_buf bufs[256];

/* The cuFile calls gpu/gds.c makes, then the controls. */
struct sim_status cuFileDriverOpen(void);
struct sim_status cuFileHandleRegister(void **fh, struct sim_descr *d);
void cuFileHandleDeregister(void *fh);
struct sim_status cuFileBufRegister(const void *base, size_t len, int flags);
struct sim_status cuFileBufDeregister(const void *base);
ssize_t cuFileRead(void *fh, void *base, size_t size, off_t file_off,
		   off_t base_off);
void sim_cufile_fail_driver(int fail);
void sim_cufile_stats(long out[5]);

struct sim_status cuFileDriverOpen(void)
{
	struct sim_status st = {0, 0};

	pthread_mutex_lock(&mu);
	if (driver_fails)
		st.err = 5011; /* CU_FILE_DRIVER_NOT_INITIALIZED */
	pthread_mutex_unlock(&mu);
	return st;
}

struct sim_status cuFileHandleRegister(void **fh, struct sim_descr *d)
{
	struct sim_status st = {0, 0};
	struct sim_fh *h;

	if (!fh || !d || d->type != 1 || d->handle.fd < 0) {
		st.err = 5002; /* invalid value */
		return st;
	}
	h = malloc(sizeof(*h));
	if (!h) {
		st.err = 5004;
		return st;
	}
	h->fd = d->handle.fd;
	*fh = h;
	pthread_mutex_lock(&mu);
	handles_live++;
	pthread_mutex_unlock(&mu);
	return st;
}

void cuFileHandleDeregister(void *fh)
{
	pthread_mutex_lock(&mu);
	if (fh)
		handles_live--;
	else
		bad_calls++;
	pthread_mutex_unlock(&mu);
	free(fh);
}

struct sim_status cuFileBufRegister(const void *base, size_t len, int flags)
{
	struct sim_status st = {0, 0};

	(void)flags;
	pthread_mutex_lock(&mu);
	st.err = 5002;
	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) {
		if (!bufs[i].base) {
			bufs[i] = (struct sim_buf){base, len};
			bufs_live++;
			st.err = 0;
			break;
		}
	}
	pthread_mutex_unlock(&mu);
	return st;
}

struct sim_status cuFileBufDeregister(const void *base)
{
	struct sim_status st = {5002, 0};

	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) {
		if (bufs[i].base == base) {
			bufs[i].base = NULL;
			bufs_live--;
			st.err = 0;
			break;
		}
	}
	if (st.err)
		bad_calls++;
	pthread_mutex_unlock(&mu);
	return st;
}

/* A read into [base+off, +size): fine if inside base's registration;
 * refused past its end. Unregistered memory is allowed (real cuFile goes
 * through bounce buffers) but counted. Under mu. */
static int read_ok(const uint8_t *base, off_t off, size_t size)
{
	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) {
		const struct sim_buf *b = &bufs[i];

		if (b->base && base == b->base)
			return off >= 0 && (size_t)off <= b->len &&
			       size <= b->len - (size_t)off;
	}
	unregistered_reads++;
	return off >= 0;
}

/*
 * An O_DIRECT descriptor (what GDS wants): like cuFile's compatibility
 * mode, read whole aligned blocks into a bounce buffer and copy the
 * part asked for.
 */
static ssize_t direct_read(int fd, uint8_t *dst, size_t size, off_t off)
{
	off_t start = off & ~(off_t)(SIM_BLOCK - 1);
	size_t skip = (size_t)(off - start);
	size_t span = (skip + size + SIM_BLOCK - 1) & ~(size_t)(SIM_BLOCK - 1);
	void *bounce = NULL;
	ssize_t got;

	if (posix_memalign(&bounce, SIM_BLOCK, span)) {
		errno = ENOMEM;
		return -1;
	}
	got = pread(fd, bounce, span, start);
	if (got >= 0) {
		got = (size_t)got > skip ? got - (ssize_t)skip : 0;
		if ((size_t)got > size)
			got = (ssize_t)size;
		memcpy(dst, (uint8_t *)bounce + skip, (size_t)got);
	}
	free(bounce);
	return got;
}

ssize_t cuFileRead(void *fh, void *base, size_t size, off_t file_off,
		   off_t base_off)
{
	struct sim_fh *h = fh;
	ssize_t got;
	int ok;

	pthread_mutex_lock(&mu);
	ok = h && read_ok(base, base_off, size);
	if (!ok)
		bad_calls++;
	reads++;
	pthread_mutex_unlock(&mu);
	if (!ok)
		return -5002; /* -CU_FILE_INVALID_VALUE */
	if (size > SIM_MAX_READ)
		size = SIM_MAX_READ;
	if (fcntl(h->fd, F_GETFL) & O_DIRECT)
		got = direct_read(h->fd, (uint8_t *)base + base_off, size,
				  file_off);
	else
		got = pread(h->fd, (uint8_t *)base + base_off, size, file_off);
	return got < 0 ? -1 : got; /* -1: errno says why */
}

/* Nonzero: cuFileDriverOpen fails, as without the nvidia-fs module. */
void sim_cufile_fail_driver(int fail)
{
	pthread_mutex_lock(&mu);
	driver_fails = fail;
	pthread_mutex_unlock(&mu);
}

/* Live handles, live buffer registrations, refused calls, reads, reads
 * into unregistered memory. */
void sim_cufile_stats(long out[5])
{
	pthread_mutex_lock(&mu);
	out[0] = handles_live;
	out[1] = bufs_live;
	out[2] = bad_calls;
	out[3] = reads;
	out[4] = unregistered_reads;
	pthread_mutex_unlock(&mu);
}
