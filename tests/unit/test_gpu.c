/*
 * tests/unit/test_gpu.c - libhintfs_gpu (gpu/gpu.h) and its file reader.
 *
 * Without a GPU (CI): opening with the GPU requested fails with -ENODEV
 * and a "no CUDA device: <why>" message; the CPU fallback returns the
 * files' bytes at the right offsets (random sizes, empty files, files over
 * 1 MiB), with io_uring and with plain syscalls; bad paths, oversized
 * batches, a full ring and every misuse of handles and batches give their
 * documented errors. The reader is also compiled into this binary with
 * 4,093-byte reads, which drives the short-read path on every sample.
 *
 * With a GPU: the same batches are copied to the device and read back with
 * cudaMemcpy; many batches in a loop and held batches stay intact. Those
 * checks print "SKIP" lines when there is no device; the binary then still
 * exits 0 if everything else passed (77 only if nothing could run). A
 * $HINTFS_CUDART given to the test names the runtime its GPU checks use
 * (PyTorch's copy, where no libcudart is in ld.so.conf).
 *
 * With $HINTFS_TEST_SIM_CUDART naming the simulated runtime
 * (sim_cudart.c; the meson test "gpu-sim"), the GPU checks run on the
 * pinned path against it, and so do checks only a simulator can make:
 * what stays allocated, that reads overlap copies still in flight, that a
 * slot is not rewritten before its copy and the caller's kernels are done,
 * that close waits for those kernels, and the CUDA failures (no device,
 * device memory exhausted, a dead stream). With $HINTFS_TEST_SIM_CUFILE
 * naming the simulated cuFile (sim_cufile.c), the cufile path too.
 */
#include "gpu/gpu.h"
#include "gpu/reader.h"
#include "check.h"
#include "sim_cudart.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define N_FILES 40
#define MIB	(1u << 20)

/* The simulated CUDA runtime to test against, or NULL. */
static const char *sim_path;
/* $HINTFS_CUDART as the test was started with (a GPU machine whose
 * libcudart is not in ld.so.conf, e.g. PyTorch's own copy), or NULL. */
static char *user_cudart;

static char dir[256];
static char *paths[N_FILES];
static uint8_t *data[N_FILES];
static size_t sizes[N_FILES];

/* xorshift: reproducible sizes and bytes without libc's rand state. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static void write_file(const char *path, const uint8_t *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	size_t done = 0;

	if (fd < 0) {
		perror(path);
		exit(1);
	}
	while (done < len) {
		ssize_t n = write(fd, buf + done, len - done);

		if (n <= 0) {
			perror(path);
			exit(1);
		}
		done += (size_t)n;
	}
	close(fd);
}

/* Sizes: two empty files, a 1-byte one, three over 1 MiB, the rest up to
 * 300 KB. */
static void make_files(void)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(dir, sizeof(dir), "%s/hintfs-test-gpu-XXXXXX",
		 tmp && tmp[0] ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		exit(1);
	}
	for (int i = 0; i < N_FILES; i++) {
		size_t len;

		if (i == 3 || i == 17)
			len = 0;
		else if (i == 5)
			len = 1;
		else if (i == 8)
			len = MIB + 12345;
		else if (i == 21)
			len = 3 * MIB;
		else if (i == 30)
			len = 2 * MIB - 1;
		else
			len = rng() % 300000;
		sizes[i] = len;
		data[i] = malloc(len ? len : 1);
		for (size_t k = 0; k < len; k++)
			data[i][k] = (uint8_t)(rng() >> 24);
		paths[i] = malloc(strlen(dir) + 32);
		snprintf(paths[i], strlen(dir) + 32, "%s/sample-%02d.bin", dir,
			 i);
		write_file(paths[i], data[i], len);
	}
}

static void remove_files(void)
{
	char p[300];

	for (int i = 0; i < N_FILES; i++) {
		unlink(paths[i]);
		free(paths[i]);
		free(data[i]);
	}
	snprintf(p, sizeof(p), "%s/a-dir", dir);
	rmdir(p);
	rmdir(dir);
}

static const char *const *cpaths(int first)
{
	return (const char *const *)&paths[first];
}

/* The batch holds samples first..first+n-1, packed with alignment @align,
 * and @mem (host memory: host pointer or a copy of the device bytes) has
 * their bytes. */
static bool batch_ok(const struct hintfs_gpu_batch *b, const uint8_t *mem,
		     int first, uint32_t n, uint32_t align)
{
	uint64_t end = 0;

	if (b->count != n)
		return false;
	for (uint32_t i = 0; i < n; i++) {
		uint64_t off = (end + align - 1) / align * align;

		if (b->offsets[i] != off || b->lengths[i] != sizes[first + i])
			return false;
		if (sizes[first + i] &&
		    memcmp(mem + off, data[first + i], sizes[first + i]))
			return false;
		end = off + sizes[first + i];
	}
	return b->bytes == end;
}

static struct hintfs_gpu *open_cpu(uint32_t flags, uint32_t align)
{
	struct hintfs_gpu_config cfg;
	struct hintfs_gpu *h = NULL;
	int rc;

	hintfs_gpu_config_init(&cfg);
	cfg.flags = HINTFS_GPU_FORCE_CPU | flags;
	cfg.max_batch_bytes = 16 * MIB;
	cfg.align = align;
	cfg.queue_depth = 8; /* fewer than a batch: the window moves */
	rc = hintfs_gpu_open(&cfg, &h);
	if (rc)
		fprintf(stderr, "open (cpu): %s\n", hintfs_gpu_strerror(rc));
	return h;
}

static void test_config(void)
{
	struct hintfs_gpu_config cfg;
	struct hintfs_gpu *h = (struct hintfs_gpu *)1;
	int rc;

	hintfs_gpu_config_init(&cfg);
	CHECK(cfg.ring_depth == 3 && cfg.max_batch_files == 1024);
	CHECK(cfg.max_batch_bytes == 64ull << 20 && cfg.align == 1);
	CHECK(cfg.queue_depth == 64 && cfg.device == 0 && cfg.flags == 0);
	CHECK(hintfs_gpu_abi_version() == HINTFS_GPU_ABI_VERSION);

	CHECK(hintfs_gpu_open(&cfg, NULL) == -EINVAL);

	cfg.flags = HINTFS_GPU_FORCE_CPU;
	cfg.ring_depth = 0;
	rc = hintfs_gpu_open(&cfg, &h);
	CHECK(rc == -EINVAL && h == NULL);
	CHECK(strstr(hintfs_gpu_strerror(rc), "ring_depth") != NULL);
	cfg.ring_depth = 3;
	cfg.align = 3;
	rc = hintfs_gpu_open(&cfg, &h);
	CHECK(rc == -EINVAL && strstr(hintfs_gpu_strerror(rc), "align"));
	cfg.align = 1;
	cfg.flags = 1u << 30;
	CHECK(hintfs_gpu_open(&cfg, &h) == -EINVAL);
	cfg.flags = HINTFS_GPU_FORCE_CPU;
	cfg.max_batch_bytes = 0;
	CHECK(hintfs_gpu_open(&cfg, &h) == -EINVAL);

	/* Fixed texts for codes that did not just fail on this thread. */
	CHECK(strcmp(hintfs_gpu_strerror(-ENODEV), "no CUDA device") == 0);
	CHECK(strcmp(hintfs_gpu_strerror(-ENOENT),
		     "No such file or directory") == 0);
	CHECK(hintfs_gpu_strerror(-99999) != NULL);
}

/*
 * With the GPU requested: either a handle (a GPU is there: returns true)
 * or -ENODEV saying "no CUDA device: <why>". First with a runtime that
 * cannot exist, which must be tried before the real one is loaded.
 */
static bool test_gpu_open(void)
{
	struct hintfs_gpu_config cfg;
	struct hintfs_gpu *h = (struct hintfs_gpu *)1;
	const char *msg;
	int rc;

	hintfs_gpu_config_init(&cfg);
	cfg.max_batch_bytes = 16 * MIB;

	setenv("HINTFS_CUDART", "/nonexistent/libcudart.so.99", 1);
	rc = hintfs_gpu_open(&cfg, &h);
	msg = hintfs_gpu_strerror(rc);
	CHECK(rc == -ENODEV && h == NULL);
	CHECK(strncmp(msg, "no CUDA device: ", 16) == 0);
	CHECK(strstr(msg, "/nonexistent/libcudart.so.99") != NULL);
	CHECK(strstr(msg, "HINTFS_CUDART") != NULL);
	printf("no runtime: %s\n", msg);
	if (sim_path)
		setenv("HINTFS_CUDART", sim_path, 1);
	else if (user_cudart)
		setenv("HINTFS_CUDART", user_cudart, 1);
	else
		unsetenv("HINTFS_CUDART");

	rc = hintfs_gpu_open(&cfg, &h);
	if (rc == 0) {
		CHECK(hintfs_gpu_path_kind(h) == HINTFS_GPU_PATH_PINNED);
		printf("GPU present: %s\n", hintfs_gpu_describe(h));
		hintfs_gpu_close(h);
		return true;
	}
	msg = hintfs_gpu_strerror(rc);
	printf("no GPU: %s\n", msg);
	CHECK(rc == -ENODEV && h == NULL);
	CHECK(strncmp(msg, "no CUDA device: ", 16) == 0);
	CHECK(strlen(msg) > 20); /* and why */

	/* A device index past the end also says so. */
	cfg.device = 4096;
	rc = hintfs_gpu_open(&cfg, &h);
	CHECK(rc == -ENODEV);
	return false;
}

static void test_cpu_batches(uint32_t flags, uint32_t align)
{
	struct hintfs_gpu *h = open_cpu(flags, align);
	struct hintfs_gpu_batch b[3];
	const char *desc;

	CHECK(h != NULL);
	if (!h)
		return;
	desc = hintfs_gpu_describe(h);
	printf("cpu flags 0x%x align %u: %s\n", flags, align, desc);
	CHECK(desc && strncmp(desc, "cpu:", 4) == 0);
	CHECK(hintfs_gpu_path_kind(h) == HINTFS_GPU_PATH_CPU);
	if (desc && (flags & HINTFS_GPU_ASYNC_READS))
		CHECK(strstr(desc, "on io_uring workers") ||
		      strstr(desc, "open/pread"));

	/* Three batches held at once, each intact after the others. */
	CHECK(hintfs_gpu_submit(h, cpaths(0), 15, &b[0]) == 0);
	CHECK(hintfs_gpu_submit(h, cpaths(15), 10, &b[1]) == 0);
	CHECK(hintfs_gpu_submit(h, cpaths(25), 15, &b[2]) == 0);
	CHECK(b[0].dev == b[0].host && b[0].slot != b[1].slot);
	CHECK(b[0].seq < b[1].seq && b[1].seq < b[2].seq);
	CHECK(batch_ok(&b[0], b[0].host, 0, 15, align));
	CHECK(batch_ok(&b[1], b[1].host, 15, 10, align));
	CHECK(batch_ok(&b[2], b[2].host, 25, 15, align));
	CHECK(hintfs_gpu_wait(h, &b[0]) == 0);
	CHECK(hintfs_gpu_stream_wait(h, &b[1], NULL) == 0);

	/* Ring full. */
	{
		struct hintfs_gpu_batch x;
		int rc = hintfs_gpu_submit(h, cpaths(0), 1, &x);

		CHECK(rc == -EBUSY);
		CHECK(strstr(hintfs_gpu_strerror(rc), "3 ring slots"));
		CHECK(x.seq == 0 && x.count == 0);
	}
	CHECK(hintfs_gpu_release(h, &b[1]) == 0);
	CHECK(hintfs_gpu_release_on_stream(h, &b[0], NULL) == 0);
	/* Reuse: the freed slots take new batches, b[2] is untouched. */
	CHECK(hintfs_gpu_submit(h, cpaths(0), N_FILES, &b[0]) == 0);
	CHECK(batch_ok(&b[0], b[0].host, 0, N_FILES, align));
	CHECK(batch_ok(&b[2], b[2].host, 25, 15, align));
	CHECK(hintfs_gpu_release(h, &b[0]) == 0);
	CHECK(hintfs_gpu_release(h, &b[2]) == 0);

	/* Many batches through the ring. */
	for (int k = 0; k < 60; k++) {
		int first = (int)(rng() % N_FILES);
		uint32_t n = (uint32_t)(rng() % (N_FILES - first)) + 1;
		struct hintfs_gpu_batch x;
		bool ok = hintfs_gpu_submit(h, cpaths(first), n, &x) == 0 &&
			  batch_ok(&x, x.host, first, n, align) &&
			  hintfs_gpu_release(h, &x) == 0;

		CHECK(ok);
	}
	hintfs_gpu_close(h);
}

static void test_empty(void)
{
	struct hintfs_gpu *h = open_cpu(0, 1);
	struct hintfs_gpu_batch b;
	const char *empty[3];

	if (!h)
		return;
	CHECK(hintfs_gpu_submit(h, NULL, 0, &b) == 0);
	CHECK(b.count == 0 && b.bytes == 0 && b.seq != 0);
	CHECK(hintfs_gpu_release(h, &b) == 0);

	empty[0] = paths[3];
	empty[1] = paths[17];
	empty[2] = paths[3];
	CHECK(hintfs_gpu_submit(h, empty, 3, &b) == 0);
	CHECK(b.count == 3 && b.bytes == 0);
	CHECK(b.lengths[0] == 0 && b.lengths[2] == 0 && b.offsets[2] == 0);
	CHECK(hintfs_gpu_release(h, &b) == 0);
	hintfs_gpu_close(h);
}

static void test_errors(uint32_t flags)
{
	struct hintfs_gpu_config cfg;
	struct hintfs_gpu *h = NULL, *h2 = open_cpu(flags, 1);
	struct hintfs_gpu_batch b, other;
	const char *bad[4];
	char missing[300], sub[300];
	const char *msg;
	int rc;

	hintfs_gpu_config_init(&cfg);
	cfg.flags = HINTFS_GPU_FORCE_CPU | flags;
	cfg.ring_depth = 2;
	cfg.max_batch_files = 8;
	cfg.max_batch_bytes = 2 * MIB;
	CHECK(hintfs_gpu_open(&cfg, &h) == 0);
	if (!h || !h2)
		return;

	/* A missing file names its sample; nothing stays held. */
	snprintf(missing, sizeof(missing), "%s/no-such-file.jpg", dir);
	bad[0] = paths[0];
	bad[1] = paths[1];
	bad[2] = missing;
	bad[3] = paths[2];
	for (int k = 0; k < 3; k++) {
		rc = hintfs_gpu_submit(h, bad, 4, &b);
		msg = hintfs_gpu_strerror(rc);
		CHECK(rc == -ENOENT);
		CHECK(strstr(msg, "sample 2") && strstr(msg, missing));
		CHECK(b.seq == 0);
	}
	/* A directory, and a NULL path. */
	snprintf(sub, sizeof(sub), "%s/a-dir", dir);
	mkdir(sub, 0700);
	bad[2] = sub;
	rc = hintfs_gpu_submit(h, bad, 4, &b);
	CHECK(rc == -EISDIR && strstr(hintfs_gpu_strerror(rc), "sample 2"));
	bad[2] = NULL;
	CHECK(hintfs_gpu_submit(h, bad, 4, &b) == -EINVAL);
	CHECK(hintfs_gpu_submit(h, NULL, 2, &b) == -EINVAL);
	CHECK(hintfs_gpu_submit(h, cpaths(0), 1, NULL) == -EINVAL);

	/* Too many files, too many bytes (sample 8 is 1 MiB + 12345). */
	rc = hintfs_gpu_submit(h, cpaths(0), 9, &b);
	CHECK(rc == -E2BIG);
	CHECK(strstr(hintfs_gpu_strerror(rc), "max_batch_files 8"));
	bad[0] = paths[8];
	bad[1] = paths[8];
	rc = hintfs_gpu_submit(h, bad, 2, &b);
	msg = hintfs_gpu_strerror(rc);
	CHECK(rc == -EMSGSIZE);
	CHECK(strstr(msg, "sample 1") && strstr(msg, "max_batch_bytes"));
	/* ... and exactly full is fine. */
	bad[1] = paths[21];
	CHECK(hintfs_gpu_submit(h, bad, 1, &b) == 0);
	CHECK(hintfs_gpu_release(h, &b) == 0);

	/* Both slots still free after all the failures. */
	CHECK(hintfs_gpu_submit(h, cpaths(0), 3, &b) == 0);
	CHECK(hintfs_gpu_submit(h2, cpaths(0), 3, &other) == 0);
	{
		struct hintfs_gpu_batch c;

		CHECK(hintfs_gpu_submit(h, cpaths(3), 3, &c) == 0);
		CHECK(hintfs_gpu_submit(h, cpaths(6), 1, NULL) == -EINVAL);
		CHECK(hintfs_gpu_release(h, &c) == 0);
	}

	/* Batches: double release, a forged one, one of another handle. */
	CHECK(hintfs_gpu_release(h, &b) == 0);
	rc = hintfs_gpu_release(h, &b);
	CHECK(rc == -EINVAL && strstr(hintfs_gpu_strerror(rc), "not held"));
	CHECK(hintfs_gpu_wait(h, &b) == -EINVAL);
	CHECK(hintfs_gpu_stream_wait(h, &b, NULL) == -EINVAL);
	CHECK(hintfs_gpu_release(h, NULL) == -EINVAL);
	{
		struct hintfs_gpu_batch forged = other;

		forged.slot = 99;
		CHECK(hintfs_gpu_release(h2, &forged) == -EINVAL);
		forged = other;
		forged.seq += 1000;
		CHECK(hintfs_gpu_release(h2, &forged) == -EINVAL);
	}
	/* A batch of h2 given to h, while h holds one in the same slot. */
	CHECK(hintfs_gpu_submit(h, cpaths(0), 2, &b) == 0);
	{
		struct hintfs_gpu_batch same_slot = other;

		same_slot.slot = b.slot;
		CHECK(hintfs_gpu_release(h, &same_slot) == -EINVAL);
		CHECK(hintfs_gpu_release(h, &other) == -EINVAL);
	}
	CHECK(hintfs_gpu_release(h2, &other) == 0);
	CHECK(hintfs_gpu_release(h, &b) == 0);

	/* Closed and never-opened handles: -EBADF, no memory touched. */
	hintfs_gpu_close(h);
	rc = hintfs_gpu_submit(h, cpaths(0), 1, &b);
	CHECK(rc == -EBADF && strstr(hintfs_gpu_strerror(rc), "not open"));
	CHECK(hintfs_gpu_wait(h, &b) == -EBADF);
	CHECK(hintfs_gpu_stream_wait(h, &b, NULL) == -EBADF);
	CHECK(hintfs_gpu_release(h, &b) == -EBADF);
	CHECK(hintfs_gpu_release_on_stream(h, &b, NULL) == -EBADF);
	CHECK(hintfs_gpu_path_kind(h) == -EBADF);
	CHECK(hintfs_gpu_describe(h) == NULL);
	hintfs_gpu_close(h); /* twice: nothing */
	hintfs_gpu_close(NULL);
	CHECK(hintfs_gpu_submit((struct hintfs_gpu *)&cfg, cpaths(0), 1, &b) ==
	      -EBADF);
	CHECK(hintfs_gpu_submit(NULL, cpaths(0), 1, &b) == -EBADF);
	hintfs_gpu_close(h2);
}

/*
 * The reader alone, built with RD_MAX_READ_BYTES 4093: every sample over
 * 4,093 bytes takes several reads, each continued from where the last
 * stopped (the short-read path), with io_uring and without.
 */
static void test_reader_short_reads(bool uring, bool async)
{
	struct reader r;
	uint64_t lens[N_FILES], offs[N_FILES], end = 0;
	uint8_t *buf;
	uint32_t bad = 0;
	bool same = true;

	CHECK(reader_init(&r, 5, uring) == 0);
	r.async = r.uring && async;
	if (uring && !r.uring)
		printf("SKIP io_uring reader: %s\n", r.why_sync);
	CHECK(reader_sizes(&r, cpaths(0), N_FILES, lens, &bad) == 0);
	for (int i = 0; i < N_FILES; i++) {
		CHECK(lens[i] == sizes[i]);
		offs[i] = end;
		end += lens[i];
	}
	buf = malloc(end);
	memset(buf, 0xee, end);
	CHECK(reader_fill(&r, cpaths(0), N_FILES, offs, lens, buf, &bad) == 0);
	for (int i = 0; i < N_FILES; i++)
		if (sizes[i] && memcmp(buf + offs[i], data[i], sizes[i]))
			same = false;
	CHECK(same);

	/* A file shorter than the size given: -ESTALE, index reported. */
	lens[4] = sizes[4] + 10;
	CHECK(reader_fill(&r, cpaths(0), 6, offs, lens, buf, &bad) == -ESTALE);
	CHECK(bad == 4);
	free(buf);
	reader_fini(&r);
}

/*
 * Threads sharing a handle: submits, waits and releases from four threads
 * (each batch checked), then the same while the handle is closed under
 * them: every call returns 0, -EBUSY or -EBADF, and none crashes.
 */
struct race {
	struct hintfs_gpu *h;
	uint64_t seed;
	bool check_bytes;
	int ok, busy, closed, other;
};

static void *race_worker(void *arg)
{
	struct race *r = arg;
	uint64_t x = r->seed;

	for (int k = 0; k < 300; k++) {
		struct hintfs_gpu_batch b;
		int first, rc;
		uint32_t n;

		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		first = (int)(x % N_FILES);
		n = (uint32_t)((x >> 20) % (uint64_t)(N_FILES - first)) + 1;
		rc = hintfs_gpu_submit(r->h, cpaths(first), n, &b);
		if (rc == -EBUSY) {
			r->busy++;
			continue;
		}
		if (rc == -EBADF) {
			r->closed++;
			break;
		}
		if (rc) {
			r->other++;
			continue;
		}
		/* After a racing close the batch's memory is gone: only the
		 * first round reads it. */
		if (r->check_bytes && !batch_ok(&b, b.host, first, n, 1))
			r->other++;
		rc = hintfs_gpu_wait(r->h, &b);
		if (rc == 0)
			rc = hintfs_gpu_release(r->h, &b);
		if (rc == 0)
			r->ok++;
		else if (rc == -EBADF)
			r->closed++;
		else
			r->other++;
	}
	return NULL;
}

static void test_threads(void)
{
	struct race r[4];
	pthread_t t[4];

	for (int round = 0; round < 2; round++) {
		struct hintfs_gpu *h = open_cpu(0, 1);
		int ok = 0, other = 0;

		if (!h)
			return;
		for (int i = 0; i < 4; i++) {
			memset(&r[i], 0, sizeof(r[i]));
			r[i].h = h;
			r[i].seed = 0x1234567ull * (uint64_t)(i + 1 + round);
			r[i].check_bytes = round == 0;
			pthread_create(&t[i], NULL, race_worker, &r[i]);
		}
		if (round == 1) {
			usleep(20000);
			hintfs_gpu_close(h);
		}
		for (int i = 0; i < 4; i++) {
			pthread_join(t[i], NULL);
			ok += r[i].ok;
			other += r[i].other;
		}
		CHECK(other == 0);
		if (round == 0) {
			CHECK(ok > 0);
			hintfs_gpu_close(h);
		}
		printf("threads round %d: %d batches, %d busy, %d closed\n",
		       round, ok, r[0].busy + r[1].busy + r[2].busy + r[3].busy,
		       r[0].closed + r[1].closed + r[2].closed + r[3].closed);
	}
}

/* ------------------------------------------------------------- GPU */

/* The runtime the library loaded (same file, so dlopen returns the same
 * handle): cudaMemcpy to read device bytes back, and the calls that make
 * a caller's own stream for test_gpu_user_stream(). */
static int (*cuda_memcpy)(void *dst, const void *src, size_t n, int kind);
static int (*cuda_memcpy_async)(void *dst, const void *src, size_t n, int kind,
				void *stream);
static int (*cuda_stream_create)(void **s, unsigned flags);
static int (*cuda_stream_sync)(void *s);
static int (*cuda_stream_destroy)(void *s);
static int (*cuda_host_alloc)(void **p, size_t n, unsigned flags);
static int (*cuda_free_host)(void *p);
#define CUDA_MEMCPY_D2H 2 /* cudaMemcpyDeviceToHost */

static bool load_memcpy(void)
{
	const char *names[] = {"libcudart.so.13", "libcudart.so.12",
			       "libcudart.so"};
	const char *only = sim_path ? sim_path : user_cudart;
	void *dl = NULL;

	if (only)
		names[0] = only;
	for (size_t i = 0; i < (only ? 1 : 3) && !cuda_memcpy; i++) {
		dl = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
		if (dl)
			cuda_memcpy =
			    (__typeof__(cuda_memcpy))dlsym(dl, "cudaMemcpy");
	}
	if (!cuda_memcpy)
		return false;
#define USER_RT(var, fn) var = (__typeof__(var))dlsym(dl, fn)
	USER_RT(cuda_memcpy_async, "cudaMemcpyAsync");
	USER_RT(cuda_stream_create, "cudaStreamCreateWithFlags");
	USER_RT(cuda_stream_sync, "cudaStreamSynchronize");
	USER_RT(cuda_stream_destroy, "cudaStreamDestroy");
	USER_RT(cuda_host_alloc, "cudaHostAlloc");
	USER_RT(cuda_free_host, "cudaFreeHost");
#undef USER_RT
	return true;
}

static bool device_ok(const struct hintfs_gpu_batch *b, int first, uint32_t n)
{
	uint8_t *copy = malloc(b->bytes ? b->bytes : 1);
	bool ok = cuda_memcpy(copy, b->dev, b->bytes, CUDA_MEMCPY_D2H) == 0 &&
		  batch_ok(b, copy, first, n, 1);

	free(copy);
	return ok;
}

static void test_gpu_batches(void)
{
	struct hintfs_gpu_config cfg;
	struct hintfs_gpu *h = NULL;
	struct hintfs_gpu_batch b[3];

	if (!load_memcpy()) {
		printf("SKIP device bytes: cudaMemcpy not found\n");
		return;
	}
	hintfs_gpu_config_init(&cfg);
	cfg.max_batch_bytes = 16 * MIB;
	CHECK(hintfs_gpu_open(&cfg, &h) == 0);
	if (!h)
		return;
	CHECK(hintfs_gpu_submit(h, cpaths(0), 20, &b[0]) == 0);
	CHECK(hintfs_gpu_submit(h, cpaths(20), 20, &b[1]) == 0);
	CHECK(b[0].dev != b[0].host && b[0].host != NULL);
	CHECK(hintfs_gpu_wait(h, &b[0]) == 0);
	CHECK(hintfs_gpu_stream_wait(h, &b[1], NULL) == 0);
	CHECK(hintfs_gpu_wait(h, &b[1]) == 0);
	CHECK(device_ok(&b[0], 0, 20));
	CHECK(device_ok(&b[1], 20, 20));
	CHECK(hintfs_gpu_submit(h, cpaths(5), 30, &b[2]) == 0);
	CHECK(hintfs_gpu_wait(h, &b[2]) == 0);
	CHECK(device_ok(&b[2], 5, 30));
	CHECK(device_ok(&b[0], 0, 20)); /* untouched by later batches */
	CHECK(hintfs_gpu_release_on_stream(h, &b[0], NULL) == 0);
	CHECK(hintfs_gpu_release(h, &b[1]) == 0);
	CHECK(hintfs_gpu_release(h, &b[2]) == 0);

	for (int k = 0; k < 200; k++) {
		int first = (int)(rng() % N_FILES);
		uint32_t n = (uint32_t)(rng() % (N_FILES - first)) + 1;
		struct hintfs_gpu_batch x;
		bool ok = hintfs_gpu_submit(h, cpaths(first), n, &x) == 0 &&
			  hintfs_gpu_wait(h, &x) == 0 &&
			  (k % 20 || device_ok(&x, first, n)) &&
			  hintfs_gpu_release_on_stream(h, &x, NULL) == 0;

		CHECK(ok);
	}
	hintfs_gpu_close(h);
	/* Open/close churn: nothing accumulates (see also the pytest). */
	for (int k = 0; k < 20; k++) {
		CHECK(hintfs_gpu_open(&cfg, &h) == 0);
		hintfs_gpu_close(h);
	}
}

/*
 * A caller's own non-blocking stream, as PyTorch uses: each batch is read
 * back into pinned memory by an asynchronous copy queued on that stream
 * after hintfs_gpu_stream_wait(), and released with
 * hintfs_gpu_release_on_stream() before anything waits for it. With a
 * ring of 2, the slot is refilled two batches later: the copies made
 * before each release must still see their own batch.
 */
static void test_gpu_user_stream(void)
{
	enum { N_BATCHES = 24, MAX_FILES = 6 };
	struct hintfs_gpu_config cfg;
	struct hintfs_gpu_batch b[N_BATCHES];
	struct hintfs_gpu *h = NULL;
	uint8_t *back[N_BATCHES] = {0};
	uint64_t offs[N_BATCHES][MAX_FILES], lens[N_BATCHES][MAX_FILES];
	int first[N_BATCHES];
	void *stream = NULL;
	bool ok = true;

	if (!cuda_memcpy_async || !cuda_stream_create || !cuda_stream_sync ||
	    !cuda_stream_destroy || !cuda_host_alloc || !cuda_free_host) {
		printf("SKIP caller's stream: runtime calls not found\n");
		return;
	}
	hintfs_gpu_config_init(&cfg);
	cfg.ring_depth = 2;
	cfg.max_batch_bytes = 16 * MIB;
	CHECK(cuda_stream_create(&stream, 1 /* cudaStreamNonBlocking */) == 0);
	CHECK(hintfs_gpu_open(&cfg, &h) == 0);
	if (!h || !stream)
		goto out;
	for (int k = 0; k < N_BATCHES && ok; k++) {
		struct hintfs_gpu_batch *x = &b[k];

		first[k] = (int)(rng() % (N_FILES - MAX_FILES));
		ok = CHECK(
		    hintfs_gpu_submit(h, cpaths(first[k]), MAX_FILES, x) == 0);
		ok = ok &&
		     CHECK(cuda_host_alloc((void **)&back[k],
					   x->bytes ? x->bytes : 1, 0) == 0);
		ok = ok && CHECK(hintfs_gpu_stream_wait(h, x, stream) == 0);
		ok = ok &&
		     CHECK(cuda_memcpy_async(back[k], x->dev, x->bytes,
					     CUDA_MEMCPY_D2H, stream) == 0);
		/* The library's arrays belong to the slot: keep copies. */
		for (int i = 0; ok && i < MAX_FILES; i++) {
			offs[k][i] = x->offsets[i];
			lens[k][i] = x->lengths[i];
		}
		ok = ok &&
		     CHECK(hintfs_gpu_release_on_stream(h, x, stream) == 0);
	}
	CHECK(cuda_stream_sync(stream) == 0);
	for (int k = 0; ok && k < N_BATCHES; k++) {
		struct hintfs_gpu_batch x = b[k];

		x.offsets = offs[k];
		x.lengths = lens[k];
		CHECKF(batch_ok(&x, back[k], first[k], MAX_FILES, 1),
		       "batch %d read back on the caller's stream", k);
	}
out:
	hintfs_gpu_close(h);
	for (int k = 0; k < N_BATCHES; k++)
		if (back[k])
			cuda_free_host(back[k]);
	if (stream)
		cuda_stream_destroy(stream);
}

/* ------------------------------------------------ simulated runtime */

static sim_cuda_stats_fn sim_stats;
static sim_cuda_set_devices_fn sim_set_devices;
static sim_cuda_set_device_limit_fn sim_set_device_limit;
static sim_cuda_set_copy_delay_us_fn sim_set_copy_delay_us;
static sim_cuda_gate_fn sim_gate;
static sim_cuda_checksum_fn sim_checksum;
/* The runtime's own stream calls, for the caller's stream. */
static int (*sim_stream_create)(void **s, unsigned flags);
static int (*sim_stream_sync)(void *s);
static int (*sim_stream_destroy)(void *s);

static bool sim_load(void)
{
	void *dl = dlopen(sim_path, RTLD_NOW | RTLD_LOCAL);

	CHECK(dl != NULL);
	if (!dl)
		return false;
#define SIM_SYM(var, name) var = (__typeof__(var))dlsym(dl, name)
	SIM_SYM(sim_stats, "sim_cuda_stats");
	SIM_SYM(sim_set_devices, "sim_cuda_set_devices");
	SIM_SYM(sim_set_device_limit, "sim_cuda_set_device_limit");
	SIM_SYM(sim_set_copy_delay_us, "sim_cuda_set_copy_delay_us");
	SIM_SYM(sim_gate, "sim_cuda_gate");
	SIM_SYM(sim_checksum, "sim_cuda_checksum");
	SIM_SYM(sim_stream_create, "cudaStreamCreateWithFlags");
	SIM_SYM(sim_stream_sync, "cudaStreamSynchronize");
	SIM_SYM(sim_stream_destroy, "cudaStreamDestroy");
#undef SIM_SYM
	CHECK(sim_stats && sim_set_devices && sim_set_device_limit &&
	      sim_set_copy_delay_us && sim_gate && sim_checksum &&
	      sim_stream_create && sim_stream_sync && sim_stream_destroy);
	return sim_stats && sim_set_devices && sim_set_device_limit &&
	       sim_set_copy_delay_us && sim_gate && sim_checksum &&
	       sim_stream_create && sim_stream_sync && sim_stream_destroy;
}

/* Nothing allocated, no stream or event left. */
static bool sim_idle(void)
{
	struct sim_cuda_stats st;

	sim_stats(&st);
	return st.device_allocs == 0 && st.pinned_allocs == 0 &&
	       st.streams == 0 && st.events == 0;
}

static struct hintfs_gpu *open_sim(uint32_t ring)
{
	struct hintfs_gpu_config cfg;
	struct hintfs_gpu *h = NULL;
	int rc;

	hintfs_gpu_config_init(&cfg);
	cfg.ring_depth = ring;
	cfg.max_batch_bytes = 16 * MIB;
	rc = hintfs_gpu_open(&cfg, &h);
	if (rc)
		fprintf(stderr, "open (sim): %s\n", hintfs_gpu_strerror(rc));
	CHECK(rc == 0);
	return h;
}

/* FNV-1a of samples first..first+n-1 packed back to back. */
static uint64_t files_hash(int first, uint32_t n)
{
	uint64_t x = SIM_FNV1A_BASIS;

	for (uint32_t i = 0; i < n; i++)
		x = sim_fnv1a(x, data[first + i], sizes[first + i]);
	return x;
}

/* What a handle holds, and that close gives all of it back. */
static void test_sim_memory(void)
{
	struct hintfs_gpu *h;
	struct sim_cuda_stats st;

	CHECK(sim_idle());
	h = open_sim(3);
	if (!h)
		return;
	sim_stats(&st);
	printf("sim: %s\n", hintfs_gpu_describe(h));
	CHECK(hintfs_gpu_path_kind(h) == HINTFS_GPU_PATH_PINNED);
	CHECK(strstr(hintfs_gpu_describe(h), sim_path) != NULL);
	CHECK(st.device_allocs == 3 && st.device_bytes == 48 * MIB);
	CHECK(st.pinned_allocs == 3 && st.pinned_bytes == 48 * MIB);
	CHECK(st.streams == 1 && st.events == 6);
	hintfs_gpu_close(h);
	CHECK(sim_idle());
}

struct late_submit {
	struct hintfs_gpu *h;
	struct hintfs_gpu_batch b;
	int rc;
	int done; /* atomic */
};

static void *late_submit_main(void *arg)
{
	struct late_submit *l = arg;

	l->rc = hintfs_gpu_submit(l->h, cpaths(30), 10, &l->b);
	__atomic_store_n(&l->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/*
 * Copies held back at the head of the stream: three submits still return
 * with their reads done (reads overlap copies in flight), and a fourth into
 * a released slot whose copy has not run waits for it rather than rewrite
 * the pinned buffer under the DMA.
 */
static void test_sim_overlap(void)
{
	struct hintfs_gpu *h = open_sim(3);
	struct hintfs_gpu_batch b[3];
	struct sim_cuda_stats st0, st;
	struct late_submit late = {0};
	pthread_t t;

	if (!h)
		return;
	sim_stats(&st0);
	sim_gate(1);
	CHECK(hintfs_gpu_submit(h, cpaths(0), 10, &b[0]) == 0);
	CHECK(hintfs_gpu_submit(h, cpaths(10), 10, &b[1]) == 0);
	CHECK(hintfs_gpu_submit(h, cpaths(20), 10, &b[2]) == 0);
	sim_stats(&st);
	CHECK(st.copies - st0.copies == 3);
	CHECK(st.copies_done == st0.copies_done);
	CHECK(batch_ok(&b[1], b[1].host, 10, 10, 1));
	CHECK(batch_ok(&b[2], b[2].host, 20, 10, 1));

	CHECK(hintfs_gpu_release(h, &b[0]) == 0);
	late.h = h;
	pthread_create(&t, NULL, late_submit_main, &late);
	usleep(100000);
	/* Still waiting for b[0]'s copy out of the slot it wants. */
	CHECK(__atomic_load_n(&late.done, __ATOMIC_ACQUIRE) == 0);
	sim_gate(0);
	pthread_join(t, NULL);
	CHECK(late.rc == 0);
	CHECK(late.b.slot == b[0].slot);
	CHECK(hintfs_gpu_wait(h, &late.b) == 0);
	CHECK(device_ok(&late.b, 30, 10));
	CHECK(hintfs_gpu_wait(h, &b[1]) == 0 && device_ok(&b[1], 10, 10));
	CHECK(hintfs_gpu_wait(h, &b[2]) == 0 && device_ok(&b[2], 20, 10));
	hintfs_gpu_close(h);
	CHECK(sim_idle());
}

/*
 * The caller's stream: kernels queued after hintfs_gpu_stream_wait() see
 * the batch, and a slot given back with hintfs_gpu_release_on_stream() is
 * not rewritten while a kernel queued before still reads it.
 *
 * Phase 0: copies are slow (5 ms) and kernels instant: without the wait a
 * kernel reads the device buffer before its copy lands. Phase 1: copies
 * are instant and kernels slow (4 ms), ring of 2: without the release
 * event, batch k+2 lands in batch k's slot under batch k's kernel.
 */
static void test_sim_consumer_stream(void)
{
	enum { ROUNDS = 24 };
	uint64_t want[ROUNDS], got[ROUNDS];
	void *user = NULL;

	CHECK(sim_stream_create(&user, 1 /* non-blocking */) == 0);
	for (int phase = 0; phase < 2; phase++) {
		struct hintfs_gpu *h = open_sim(2);
		int same = 0;

		if (!h)
			break;
		sim_set_copy_delay_us(phase == 0 ? 5000 : 0);
		for (int k = 0; k < ROUNDS; k++) {
			int first = (int)(rng() % N_FILES);
			uint32_t n = (uint32_t)(rng() % (N_FILES - first)) + 1;
			struct hintfs_gpu_batch x;

			got[k] = 0;
			want[k] = files_hash(first, n);
			CHECK(hintfs_gpu_submit(h, cpaths(first), n, &x) == 0);
			CHECK(hintfs_gpu_stream_wait(h, &x, user) == 0);
			CHECK(sim_checksum(user, x.dev, x.bytes, &got[k],
					   phase == 0 ? 0 : 4000) == 0);
			CHECK(hintfs_gpu_release_on_stream(h, &x, user) == 0);
		}
		CHECK(sim_stream_sync(user) == 0);
		for (int k = 0; k < ROUNDS; k++)
			same += got[k] == want[k];
		printf("sim phase %d: %d of %d kernels saw their batch\n",
		       phase, same, ROUNDS);
		CHECK(same == ROUNDS);
		hintfs_gpu_close(h);
	}
	sim_set_copy_delay_us(0);

	/* Close waits for a kernel still reading a released batch. */
	{
		struct hintfs_gpu *h = open_sim(2);
		struct hintfs_gpu_batch x;
		uint64_t sum = 0;

		if (h) {
			CHECK(hintfs_gpu_submit(h, cpaths(0), 20, &x) == 0);
			CHECK(hintfs_gpu_stream_wait(h, &x, user) == 0);
			CHECK(sim_checksum(user, x.dev, x.bytes, &sum, 50000) ==
			      0);
			CHECK(hintfs_gpu_release_on_stream(h, &x, user) == 0);
			hintfs_gpu_close(h);
			CHECK(sim_stream_sync(user) == 0);
			CHECK(sum == files_hash(0, 20));
		}
	}
	CHECK(sim_stream_destroy(user) == 0);
	CHECK(sim_idle());
}

/* CUDA failures: each a clear error, nothing left allocated. */
static void test_sim_failures(void)
{
	struct hintfs_gpu_config cfg;
	struct hintfs_gpu *h = (struct hintfs_gpu *)1;
	struct hintfs_gpu_batch b;
	struct sim_cuda_stats st0, st;
	void *dead = NULL;
	const char *msg;
	int rc;

	hintfs_gpu_config_init(&cfg);
	cfg.max_batch_bytes = 16 * MIB;

	sim_set_devices(0);
	rc = hintfs_gpu_open(&cfg, &h);
	msg = hintfs_gpu_strerror(rc);
	printf("sim, no device: %s\n", msg);
	CHECK(rc == -ENODEV && h == NULL);
	CHECK(strncmp(msg, "no CUDA device: ", 16) == 0);
	CHECK(strstr(msg, "cudaErrorNoDevice") != NULL);
	sim_set_devices(1);

	cfg.device = 1;
	rc = hintfs_gpu_open(&cfg, &h);
	msg = hintfs_gpu_strerror(rc);
	CHECK(rc == -ENODEV);
	CHECK(strstr(msg, "device 1 requested, 1 present") != NULL);
	cfg.device = 0;

	/* Room for two slots of three: the third cudaMalloc fails. */
	sim_set_device_limit(40 * MIB);
	rc = hintfs_gpu_open(&cfg, &h);
	msg = hintfs_gpu_strerror(rc);
	printf("sim, device memory short: %s\n", msg);
	CHECK(rc == -ENOMEM && h == NULL);
	CHECK(strstr(msg, "cudaMalloc") && strstr(msg, "out of memory"));
	CHECK(sim_idle());
	sim_set_device_limit((size_t)4 << 30);

	/* A stream that no longer exists: -EINVAL, the batch stays held. */
	h = open_sim(2);
	if (!h)
		return;
	CHECK(sim_stream_create(&dead, 1) == 0);
	CHECK(sim_stream_destroy(dead) == 0);
	CHECK(hintfs_gpu_submit(h, cpaths(0), 5, &b) == 0);
	sim_stats(&st0);
	rc = hintfs_gpu_stream_wait(h, &b, dead);
	CHECK(rc == -EINVAL &&
	      strstr(hintfs_gpu_strerror(rc), "cudaStreamWaitEvent"));
	rc = hintfs_gpu_release_on_stream(h, &b, dead);
	CHECK(rc == -EINVAL &&
	      strstr(hintfs_gpu_strerror(rc), "caller's stream"));
	sim_stats(&st);
	CHECK(st.misuse - st0.misuse == 2); /* those two, nothing else */
	CHECK(hintfs_gpu_wait(h, &b) == 0 && device_ok(&b, 0, 5));
	CHECK(hintfs_gpu_release(h, &b) == 0);
	hintfs_gpu_close(h);
	CHECK(sim_idle());
}

/*
 * The cufile path against the simulated cuFile ($HINTFS_TEST_SIM_CUFILE):
 * a library that cannot load and a driver that cannot open each leave the
 * pinned path with the reason in the description; with both there, every
 * slot's device buffer is registered, samples are read straight into it
 * (short reads continued), there is no host copy, read errors name their
 * sample, and close gives back every registration and file handle.
 */
static void test_sim_cufile(void)
{
	const char *lib = getenv("HINTFS_TEST_SIM_CUFILE");
	void (*fail_driver)(int);
	void (*cf_stats)(long out[5]);
	struct hintfs_gpu_config cfg;
	struct hintfs_gpu *h = NULL;
	struct hintfs_gpu_batch b;
	const char *bad[2], *desc;
	char missing[300];
	long st[5];
	void *dl;
	int rc;

	if (!lib || !lib[0]) {
		printf("SKIP cufile: no HINTFS_TEST_SIM_CUFILE\n");
		return;
	}
	hintfs_gpu_config_init(&cfg);
	cfg.max_batch_bytes = 16 * MIB;
	cfg.flags = HINTFS_GPU_CUFILE;

	setenv("HINTFS_CUFILE", "/nonexistent/libcufile.so.0", 1);
	CHECK(hintfs_gpu_open(&cfg, &h) == 0);
	if (!h)
		return;
	desc = hintfs_gpu_describe(h);
	CHECK(hintfs_gpu_path_kind(h) == HINTFS_GPU_PATH_PINNED);
	CHECK(strstr(desc, "cufile unavailable: /nonexistent/libcufile.so.0"));
	hintfs_gpu_close(h);

	dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	fail_driver =
	    dl ? (__typeof__(fail_driver))dlsym(dl, "sim_cufile_fail_driver")
	       : NULL;
	cf_stats =
	    dl ? (__typeof__(cf_stats))dlsym(dl, "sim_cufile_stats") : NULL;
	CHECK(fail_driver && cf_stats);
	if (!fail_driver || !cf_stats)
		return;
	setenv("HINTFS_CUFILE", lib, 1);
	fail_driver(1);
	CHECK(hintfs_gpu_open(&cfg, &h) == 0);
	if (!h)
		return;
	desc = hintfs_gpu_describe(h);
	printf("sim cufile, no driver: %s\n", desc);
	CHECK(hintfs_gpu_path_kind(h) == HINTFS_GPU_PATH_PINNED);
	CHECK(strstr(desc, "cuFileDriverOpen failed") != NULL);
	hintfs_gpu_close(h);

	fail_driver(0);
	CHECK(hintfs_gpu_open(&cfg, &h) == 0);
	if (!h)
		return;
	desc = hintfs_gpu_describe(h);
	printf("sim cufile: %s\n", desc);
	CHECK(hintfs_gpu_path_kind(h) == HINTFS_GPU_PATH_CUFILE);
	CHECK(strncmp(desc, "cufile:", 7) == 0);
	cf_stats(st);
	CHECK(st[1] == 3); /* every slot's device buffer registered */
	/* Samples 0..24 include empty ones and one of 1 MiB + 12345. */
	rc = hintfs_gpu_submit(h, cpaths(0), 25, &b);
	if (rc)
		fprintf(stderr, "cufile submit: %s\n", hintfs_gpu_strerror(rc));
	CHECK(rc == 0);
	CHECK(b.host == NULL && b.dev != NULL);
	CHECK(hintfs_gpu_wait(h, &b) == 0 && device_ok(&b, 0, 25));
	CHECK(hintfs_gpu_release(h, &b) == 0);
	CHECK(hintfs_gpu_submit(h, cpaths(20), 20, &b) == 0);
	CHECK(hintfs_gpu_wait(h, &b) == 0 && device_ok(&b, 20, 20));
	CHECK(hintfs_gpu_release(h, &b) == 0);

	snprintf(missing, sizeof(missing), "%s/no-such-file.jpg", dir);
	bad[0] = paths[1];
	bad[1] = missing;
	rc = hintfs_gpu_submit(h, bad, 2, &b);
	CHECK(rc == -ENOENT && strstr(hintfs_gpu_strerror(rc), "sample 1"));
	cf_stats(st);
	CHECK(st[0] == 0); /* no file handle left registered */
	hintfs_gpu_close(h);
	cf_stats(st);
	printf("sim cufile: %ld reads, %ld refused, %ld unregistered\n", st[3],
	       st[2], st[4]);
	CHECK(st[0] == 0 && st[1] == 0 && st[2] == 0 && st[4] == 0);
	/* The 1 MiB + 12345 and 3 MiB samples took many 64 KiB reads. */
	CHECK(st[3] > 45 + 48);
	unsetenv("HINTFS_CUFILE");
	CHECK(sim_idle());
}

static void test_sim(void)
{
	struct sim_cuda_stats st;

	test_sim_memory();
	test_sim_overlap();
	test_sim_consumer_stream();
	/* Every call so far was one the real runtime takes. */
	test_sim_cufile();
	sim_stats(&st);
	CHECK(st.misuse == 0);
	test_sim_failures();
}

int main(void)
{
	bool gpu;

	sim_path = getenv("HINTFS_TEST_SIM_CUDART");
	if (sim_path && !sim_path[0])
		sim_path = NULL;
	user_cudart = getenv("HINTFS_CUDART");
	if (user_cudart && user_cudart[0])
		user_cudart = strdup(user_cudart); /* setenv() replaces it */
	else
		user_cudart = NULL;
	make_files();
	test_config();
	gpu = test_gpu_open();
	test_cpu_batches(0, 1);
	test_cpu_batches(HINTFS_GPU_NO_URING, 1);
	test_cpu_batches(0, 4096);
	test_cpu_batches(HINTFS_GPU_ASYNC_READS, 1);
	test_empty();
	test_errors(0);
	test_errors(HINTFS_GPU_NO_URING);
	test_errors(HINTFS_GPU_ASYNC_READS);
	test_reader_short_reads(true, false);
	test_reader_short_reads(true, true);
	test_reader_short_reads(false, false);
	test_threads();
	if (gpu) {
		test_gpu_batches();
		test_gpu_user_stream();
	} else
		printf("SKIP GPU tests: no CUDA device\n");
	if (sim_path) {
		CHECK(gpu);
		if (gpu && sim_load())
			test_sim();
	}
	remove_files();
	free(user_cudart);
	return check_done();
}
