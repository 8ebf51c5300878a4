/*
 * gpu/reader.h - reads a batch of whole files into one host buffer.
 *
 * Private to gpu/. Knows nothing of CUDA: it stats the files of a batch,
 * then reads each into the place the caller computed from the sizes, with
 * many io_uring requests in flight (or plain syscalls where io_uring is
 * unavailable). A reader is caller-owned storage (_init/_fini) and is used
 * by one thread at a time.
 */
#ifndef HINTFS_GPU_READER_H
#define HINTFS_GPU_READER_H

#include <liburing.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct rd_op;

struct reader {
	/* True when ring is set up; false: the synchronous fallback. */
	bool uring;
	struct io_uring ring;
	/* Most requests in flight; the size of ops[]. */
	unsigned depth;
	/* One per request in flight; each names the file it works on. */
	struct rd_op *ops;
	/* Free entries of ops[], a stack. */
	struct rd_op **free_ops;
	unsigned n_free;
	/* Why io_uring is not used, for hintfs_gpu_describe(); "" if it is. */
	char why_sync[160];
	/*
	 * Set by the owner after reader_init(): every request but CLOSE goes
	 * to io_uring's worker threads (IOSQE_ASYNC) instead of being tried
	 * inline first, so that page-cache copies run on many cores rather
	 * than in the submitting thread. Only with io_uring.
	 */
	bool async;
};

/*
 * Sets up @r for @depth requests in flight. With @use_uring, tries io_uring
 * (and the opcodes it needs) and falls back to plain syscalls when the
 * kernel or a seccomp filter refuses, saying why in r->why_sync. Returns 0
 * or -ENOMEM.
 */
int reader_init(struct reader *r, unsigned depth, bool use_uring);

/* Frees what reader_init() set up. Accepts a zeroed struct. */
void reader_fini(struct reader *r);

/*
 * Stats @n paths (following symlinks) and stores their sizes in @lens.
 * Returns 0, or the error of a failed sample with its index in *@bad:
 * the stat's -errno, -EINVAL for something that is not a regular file.
 */
int reader_sizes(struct reader *r, const char *const *paths, uint32_t n,
		 uint64_t *lens, uint32_t *bad);

/*
 * Reads sample i (@lens[i] bytes from offset 0 of @paths[i]) to
 * @buf + @offs[i], for i < @n. Short reads are continued; a file that ends
 * early gives -ESTALE. Returns 0, or the first failure's -errno with the
 * sample's index in *@bad; every file opened is closed either way.
 */
int reader_fill(struct reader *r, const char *const *paths, uint32_t n,
		const uint64_t *offs, const uint64_t *lens, uint8_t *buf,
		uint32_t *bad);

#endif /* HINTFS_GPU_READER_H */
