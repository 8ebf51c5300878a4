/*
 * gpu/reader.c - a batch of whole files into one host buffer, with io_uring.
 *
 * Owns: the io_uring of one handle, the per-request state (struct rd_op),
 * and the synchronous fallback used where io_uring is refused (old kernels,
 * container seccomp profiles that block io_uring_setup).
 *
 * A batch is read in two passes. The first stats every file (STATX, many
 * in flight) so that the caller can place the samples and check the batch
 * fits before anything is read. The second runs, per file, OPENAT -> READ
 * (repeated while short) -> CLOSE, with up to `depth` files in progress.
 * Opening through io_uring matters on a FUSE mount, where each open is a
 * round trip to the daemon: done one by one they would serialize.
 *
 * Page-cache hits complete inline, inside io_uring_submit, in the calling
 * thread: one core copies the whole batch (3-4 GB/s on the H100 machine
 * of doc/benchmarks.md). With r->async (HINTFS_GPU_ASYNC_READS) the
 * requests go to io_uring's worker threads instead, and the copies run on
 * many cores at once (there: 256 warm JPEGs in 2.7 ms instead of 7.0).
 *
 * Invariant: every rd_op is either on the free stack or has exactly one
 * request owned by the kernel (prepared or submitted), and `inflight`
 * counts the latter. A pass returns only when inflight is 0, so no request
 * can write into the caller's buffer, and no descriptor is left open, after
 * it returns - also when a sample failed.
 */
#include "gpu/reader.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/*
 * The most bytes one READ asks for. io_uring's length is 32 bits and the
 * kernel caps one read at 2 GiB - 4 KiB; larger samples take several reads
 * through the short-read path. The unit test builds this file with a tiny
 * value to drive that path on every sample.
 */
#ifndef RD_MAX_READ_BYTES
#define RD_MAX_READ_BYTES (1u << 30)
#endif

enum rd_kind {
	RD_STATX,
	RD_OPEN,
	RD_READ,
	RD_CLOSE,
};

struct rd_op {
	/* The request this op has in flight. */
	enum rd_kind kind;
	/* Index of the sample in the batch. */
	uint32_t file;
	/* Open descriptor (RD_READ, RD_CLOSE), else -1. */
	int fd;
	/* Bytes of the sample read so far. */
	uint64_t done;
	/* Target of RD_STATX. */
	struct statx stx;
};

/* One pass over a batch. */
struct rd_job {
	const char *const *paths;
	uint32_t n;
	/* Second pass only: where each sample goes, and the buffer. */
	const uint64_t *offs;
	uint8_t *buf;
	/* First pass: filled; second pass: read (as const). */
	uint64_t *lens;
	/* Next sample to start. */
	uint32_t next;
	/* Ops with a request owned by the kernel. */
	unsigned inflight;
	/* First failure (lowest sample index seen), 0 if none. */
	int err;
	uint32_t bad;
};

static void job_fail(struct rd_job *job, uint32_t file, int err)
{
	if (!job->err || file < job->bad) {
		job->err = err;
		job->bad = file;
	}
}

/* ------------------------------------------------------------ io_uring */

static struct io_uring_sqe *get_sqe(struct reader *r)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);

	/*
	 * The SQ has at least `depth` entries and each op owns at most one,
	 * so this only happens if the kernel has not consumed entries yet.
	 */
	if (!sqe) {
		io_uring_submit(&r->ring);
		sqe = io_uring_get_sqe(&r->ring);
	}
	return sqe;
}

/* Prepares @op's next request (op->kind says which). 0 or -EBUSY. */
static int prep(struct reader *r, struct rd_job *job, struct rd_op *op)
{
	struct io_uring_sqe *sqe = get_sqe(r);
	uint64_t left;

	if (!sqe)
		return -EBUSY;
	switch (op->kind) {
	case RD_STATX:
		io_uring_prep_statx(sqe, AT_FDCWD, job->paths[op->file], 0,
				    STATX_TYPE | STATX_SIZE, &op->stx);
		break;
	case RD_OPEN:
		io_uring_prep_openat(sqe, AT_FDCWD, job->paths[op->file],
				     O_RDONLY | O_CLOEXEC, 0);
		break;
	case RD_READ:
		left = job->lens[op->file] - op->done;
		if (left > RD_MAX_READ_BYTES)
			left = RD_MAX_READ_BYTES;
		io_uring_prep_read(sqe, op->fd,
				   job->buf + job->offs[op->file] + op->done,
				   (unsigned)left, op->done);
		break;
	case RD_CLOSE:
		io_uring_prep_close(sqe, op->fd);
		break;
	}
	/* A close is cheap and would only wait for a worker. */
	if (r->async && op->kind != RD_CLOSE)
		io_uring_sqe_set_flags(sqe, IOSQE_ASYNC);
	io_uring_sqe_set_data(sqe, op);
	return 0;
}

static void op_free(struct reader *r, struct rd_job *job, struct rd_op *op)
{
	r->free_ops[r->n_free++] = op;
	job->inflight--;
}

/* Moves @op on to @kind, or frees it if that cannot be queued. */
static void op_next(struct reader *r, struct rd_job *job, struct rd_op *op,
		    enum rd_kind kind)
{
	op->kind = kind;
	if (prep(r, job, op) == 0)
		return;
	/* Cannot happen (see get_sqe); do not leak the descriptor. */
	job_fail(job, op->file, -EBUSY);
	if (op->fd >= 0)
		close(op->fd);
	op_free(r, job, op);
}

static void start(struct reader *r, struct rd_job *job, bool sizes)
{
	struct rd_op *op = r->free_ops[--r->n_free];

	job->inflight++;
	op->file = job->next++;
	op->fd = -1;
	op->done = 0;
	op_next(r, job, op, sizes ? RD_STATX : RD_OPEN);
}

static void complete(struct reader *r, struct rd_job *job, struct rd_op *op,
		     int res)
{
	/*
	 * Transient: the same request again. Never for CLOSE: the descriptor
	 * is gone even when close reports EINTR, and closing the number
	 * again could close another thread's file.
	 */
	if ((res == -EINTR || res == -EAGAIN) && op->kind != RD_CLOSE) {
		op_next(r, job, op, op->kind);
		return;
	}
	switch (op->kind) {
	case RD_STATX:
		if (res < 0)
			job_fail(job, op->file, res);
		else if (S_ISDIR(op->stx.stx_mode))
			job_fail(job, op->file, -EISDIR);
		else if (!S_ISREG(op->stx.stx_mode))
			job_fail(job, op->file, -EINVAL);
		else
			job->lens[op->file] = op->stx.stx_size;
		op_free(r, job, op);
		return;
	case RD_OPEN:
		if (res < 0) {
			job_fail(job, op->file, res);
			op_free(r, job, op);
			return;
		}
		op->fd = res;
		if (job->err || job->lens[op->file] == 0)
			op_next(r, job, op, RD_CLOSE);
		else
			op_next(r, job, op, RD_READ);
		return;
	case RD_READ:
		if (res < 0) {
			job_fail(job, op->file, res);
		} else if (res == 0) {
			/* EOF before the size we stat'ed. */
			job_fail(job, op->file, -ESTALE);
		} else {
			op->done += (unsigned)res;
			/* NOTE: a short read is not an error: ask again. */
			if (op->done < job->lens[op->file] && !job->err) {
				op_next(r, job, op, RD_READ);
				return;
			}
		}
		op_next(r, job, op, RD_CLOSE);
		return;
	case RD_CLOSE:
		/* The bytes are in; a failing close of a read-only file
		 * changes nothing about them. */
		op->fd = -1;
		op_free(r, job, op);
		return;
	}
}

static int run_uring(struct reader *r, struct rd_job *job, bool sizes)
{
	while (true) {
		struct io_uring_cqe *cqe;
		unsigned head, seen = 0;
		int ret;

		while (!job->err && job->next < job->n && r->n_free)
			start(r, job, sizes);
		if (!job->inflight)
			break;
		ret = io_uring_submit_and_wait(&r->ring, 1);
		if (ret < 0 && ret != -EINTR && ret != -EAGAIN &&
		    ret != -EBUSY) {
			/*
			 * The ring itself failed; requests may still be
			 * owned by the kernel, so keep waiting for them.
			 */
			job_fail(job, job->next ? job->next - 1 : 0, ret);
			ret = io_uring_wait_cqe(&r->ring, &cqe);
			if (ret < 0 && ret != -EINTR)
				return ret; /* cannot drain: give up */
		}
		io_uring_for_each_cqe(&r->ring, head, cqe)
		{
			complete(r, job, io_uring_cqe_get_data(cqe), cqe->res);
			seen++;
		}
		io_uring_cq_advance(&r->ring, seen);
	}
	return job->err;
}

/* ------------------------------------------------------- synchronous */

static int sizes_sync(struct rd_job *job)
{
	for (uint32_t i = 0; i < job->n; i++) {
		struct stat st;

		if (stat(job->paths[i], &st) < 0) {
			job_fail(job, i, -errno);
		} else if (S_ISDIR(st.st_mode)) {
			job_fail(job, i, -EISDIR);
		} else if (!S_ISREG(st.st_mode)) {
			job_fail(job, i, -EINVAL);
		} else {
			job->lens[i] = (uint64_t)st.st_size;
			continue;
		}
		break;
	}
	return job->err;
}

static int fill_one_sync(struct rd_job *job, uint32_t i)
{
	uint8_t *dst = job->buf + job->offs[i];
	uint64_t len = job->lens[i], done = 0;
	int fd, err = 0;

	fd = open(job->paths[i], O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	while (done < len) {
		size_t want = len - done > RD_MAX_READ_BYTES
				  ? RD_MAX_READ_BYTES
				  : (size_t)(len - done);
		ssize_t got = pread(fd, dst + done, want, (off_t)done);

		if (got < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (got < 0) {
			err = -errno;
			break;
		}
		if (got == 0) {
			err = -ESTALE;
			break;
		}
		done += (uint64_t)got;
	}
	close(fd);
	return err;
}

static int fill_sync(struct rd_job *job)
{
	for (uint32_t i = 0; i < job->n; i++) {
		int err = fill_one_sync(job, i);

		if (err) {
			job_fail(job, i, err);
			break;
		}
	}
	return job->err;
}

/* ------------------------------------------------------------- public */

static bool uring_has_ops(struct io_uring *ring, char *why, size_t len)
{
	static const struct {
		int op;
		const char *name;
	} need[] = {
	    {IORING_OP_STATX, "STATX"},
	    {IORING_OP_OPENAT, "OPENAT"},
	    {IORING_OP_READ, "READ"},
	    {IORING_OP_CLOSE, "CLOSE"},
	};
	struct io_uring_probe *probe = io_uring_get_probe_ring(ring);
	bool ok = true;

	if (!probe) {
		snprintf(why, len, "io_uring opcode probe failed");
		return false;
	}
	for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++) {
		if (!io_uring_opcode_supported(probe, need[i].op)) {
			snprintf(why, len, "kernel io_uring lacks %s",
				 need[i].name);
			ok = false;
			break;
		}
	}
	io_uring_free_probe(probe);
	return ok;
}

int reader_init(struct reader *r, unsigned depth, bool use_uring)
{
	int ret;

	memset(r, 0, sizeof(*r));
	r->depth = depth;
	r->ops = calloc(depth, sizeof(*r->ops));
	r->free_ops = calloc(depth, sizeof(*r->free_ops));
	if (!r->ops || !r->free_ops) {
		reader_fini(r);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < depth; i++)
		r->free_ops[i] = &r->ops[i];
	r->n_free = depth;

	if (!use_uring) {
		snprintf(r->why_sync, sizeof(r->why_sync),
			 "io_uring not requested");
		return 0;
	}
	ret = io_uring_queue_init(depth, &r->ring, 0);
	if (ret < 0) {
		snprintf(r->why_sync, sizeof(r->why_sync),
			 "io_uring_queue_init: %s", strerror(-ret));
		return 0;
	}
	if (!uring_has_ops(&r->ring, r->why_sync, sizeof(r->why_sync))) {
		io_uring_queue_exit(&r->ring);
		return 0;
	}
	r->uring = true;
	return 0;
}

void reader_fini(struct reader *r)
{
	if (r->uring)
		io_uring_queue_exit(&r->ring);
	free(r->ops);
	free(r->free_ops);
	memset(r, 0, sizeof(*r));
}

int reader_sizes(struct reader *r, const char *const *paths, uint32_t n,
		 uint64_t *lens, uint32_t *bad)
{
	struct rd_job job = {.paths = paths, .n = n, .lens = lens};
	int err;

	err = r->uring ? run_uring(r, &job, true) : sizes_sync(&job);
	*bad = job.bad;
	return err;
}

int reader_fill(struct reader *r, const char *const *paths, uint32_t n,
		const uint64_t *offs, const uint64_t *lens, uint8_t *buf,
		uint32_t *bad)
{
	/* lens is only read in this pass; the job shares one field. */
	struct rd_job job = {.paths = paths,
			     .n = n,
			     .offs = offs,
			     .buf = buf,
			     .lens = (uint64_t *)lens};
	int err;

	err = r->uring ? run_uring(r, &job, false) : fill_sync(&job);
	*bad = job.bad;
	return err;
}
