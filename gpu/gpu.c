/*
 * gpu/gpu.c - handles, the ring of batch slots, and the public API.
 *
 * Owns: the registry of open handles, each handle's ring of slots (pinned
 * host buffer, device buffer, two events, the offset and length arrays),
 * its copy stream, and the per-thread error message behind
 * hintfs_gpu_strerror().
 *
 * A slot goes FREE -> FILLING (a submit reads into it and queues the copy)
 * -> HELD (the caller has the batch) -> FREE (released). Invariants:
 *   - Only the submitter that moved a slot to FILLING touches its buffers
 *     and arrays until it is HELD; state changes happen under h->lock.
 *   - A slot's host buffer is written again only after its last copy is
 *     complete (event `copied`) and after the caller's stream work
 *     recorded at release is complete (event `released`), so neither our
 *     DMA nor the caller's kernels can see a half-overwritten batch.
 *   - h->users counts API calls in progress on h (under reg_lock); a
 *     handle leaves the registry first and is freed only when users is 0,
 *     so calls racing with close get -EBADF or finish normally.
 */
#include "gpu/gpu.h"

#include "gpu/cuda_rt.h"
#include "gpu/gds.h"
#include "gpu/reader.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Defaults and limits of struct hintfs_gpu_config, with their reasons. */
/* 3 slots: one held by the caller, one being read, one still copying. */
#define GPU_DEF_RING_DEPTH 3
#define GPU_MAX_RING_DEPTH 64
/* 1,024 paths: 64 MiB of ~110 KB JPEGs is ~600 of them. */
#define GPU_DEF_MAX_FILES 1024u
#define GPU_MAX_MAX_FILES (1u << 20)
/* 64 MiB: past 8 MB a copy runs at full PCIe speed; 3 slots pin 192 MiB. */
#define GPU_DEF_MAX_BYTES (64ull << 20)
#define GPU_MAX_MAX_BYTES (1ull << 40)
/* 64 reads in flight: enough to keep an NVMe drive or a FUSE daemon's
 * 64 threads busy; page-cache hits complete inline anyway. */
#define GPU_DEF_QUEUE_DEPTH 64u
#define GPU_MAX_QUEUE_DEPTH 4096u
#define GPU_MAX_ALIGN	    (1u << 20)
/* Host buffers of the cpu path start on a page, as pinned ones do. */
#define GPU_PAGE_BYTES 4096

#define GPU_KNOWN_FLAGS                                                        \
	(HINTFS_GPU_FORCE_CPU | HINTFS_GPU_NO_URING | HINTFS_GPU_CUFILE |      \
	 HINTFS_GPU_ASYNC_READS)

enum slot_state {
	SLOT_FREE,
	SLOT_FILLING,
	SLOT_HELD,
};

struct gpu_slot {
	enum slot_state state;
	/* seq of the batch in the slot (0: never used). */
	uint64_t seq;
	/* Pinned (cudaHostAlloc) or, on the cpu path, malloc'd; NULL on the
	 * cufile path. */
	uint8_t *host;
	/* cudaMalloc'd; == host on the cpu path. */
	void *dev;
	/* Recorded on h->stream after the batch is on the device. */
	cudaEvent_t copied;
	/* Recorded on the caller's stream by release_on_stream(). */
	cudaEvent_t released;
	bool released_recorded;
	/* cufile path: dev is registered with cuFileBufRegister. */
	bool gds_registered;
	/* max_batch_files entries each. */
	uint64_t *offs;
	uint64_t *lens;
};

struct hintfs_gpu {
	struct hintfs_gpu_config cfg;
	enum hintfs_gpu_path path;
	/* NULL on the cpu path. */
	const struct cuda_rt *rt;
	/* The copy stream (non-blocking: no implicit sync with stream 0). */
	cudaStream_t stream;
	/* Slot states, seq, next_slot. Never held across I/O or a sync. */
	pthread_mutex_t lock;
	/* One submit at a time: it owns rd. */
	pthread_mutex_t submit_lock;
	struct reader rd;
	struct gpu_slot *slots;
	/* Where the search for a free slot starts: the least recently
	 * filled slot, so a new read does not wait on the newest copy. */
	uint32_t next_slot;
	/* Calls in progress, and closing: under reg_lock. */
	unsigned users;
	bool closing;
	char desc[512];
};

/* ----------------------------------------------------------- errors */

static __thread int tl_err;
static __thread char tl_msg[1024];

static void clear_err(void)
{
	tl_err = 0;
	tl_msg[0] = '\0';
}

/* Records @err and its message for hintfs_gpu_strerror(); returns @err. */
__attribute__((format(printf, 2, 3))) static int fail(int err, const char *fmt,
						      ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(tl_msg, sizeof(tl_msg), fmt, ap);
	va_end(ap);
	tl_err = err;
	return err;
}

static const char *errno_text(int err)
{
	const char *d = err < 0 ? strerrordesc_np(-err) : NULL;

	return d ? d : "unknown error";
}

const char *hintfs_gpu_strerror(int err)
{
	if (err != 0 && err == tl_err && tl_msg[0])
		return tl_msg;
	switch (err) {
	case 0:
		return "success";
	case -ENODEV:
		return "no CUDA device";
	case -E2BIG:
		return "more files than max_batch_files in one batch";
	case -EMSGSIZE:
		return "batch larger than max_batch_bytes";
	case -EBUSY:
		return "every ring slot holds a batch not yet released";
	case -EBADF:
		return "hintfs_gpu handle is not open";
	case -ESTALE:
		return "file got shorter while being read";
	}
	return errno_text(err);
}

/* ---------------------------------------------------------- registry */

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reg_idle = PTHREAD_COND_INITIALIZER;
static struct hintfs_gpu **reg;
static size_t reg_len, reg_cap;

static int reg_add(struct hintfs_gpu *h)
{
	int err = 0;

	pthread_mutex_lock(&reg_lock);
	if (reg_len == reg_cap) {
		size_t cap = reg_cap ? reg_cap * 2 : 4;
		struct hintfs_gpu **r = realloc(reg, cap * sizeof(*r));

		if (r) {
			reg = r;
			reg_cap = cap;
		} else {
			err = -ENOMEM;
		}
	}
	if (!err)
		reg[reg_len++] = h;
	pthread_mutex_unlock(&reg_lock);
	return err;
}

/* Index of @h in reg, or -1. Called with reg_lock held; compares only. */
static ssize_t reg_find(const struct hintfs_gpu *h)
{
	for (size_t i = 0; i < reg_len; i++)
		if (reg[i] == h)
			return (ssize_t)i;
	return -1;
}

/* Starts an API call on @h: 0, or -EBADF if @h is not open. */
static int handle_enter(struct hintfs_gpu *h)
{
	int err = -EBADF;

	pthread_mutex_lock(&reg_lock);
	if (h && reg_find(h) >= 0 && !h->closing) {
		h->users++;
		err = 0;
	}
	pthread_mutex_unlock(&reg_lock);
	if (err)
		return fail(err,
			    "hintfs_gpu handle %p is not open (closed, "
			    "or never opened)",
			    (void *)h);
	return 0;
}

static void handle_leave(struct hintfs_gpu *h)
{
	pthread_mutex_lock(&reg_lock);
	if (--h->users == 0 && h->closing)
		pthread_cond_broadcast(&reg_idle);
	pthread_mutex_unlock(&reg_lock);
}

/* ------------------------------------------------------ CUDA helpers */

/* The caller's current device, restored by dev_leave(). */
struct dev_guard {
	int prev;
	bool switched;
};

static int dev_enter(struct hintfs_gpu *h, struct dev_guard *g)
{
	const struct cuda_rt *rt = h->rt;
	cudaError_t e;

	g->switched = false;
	if (!rt)
		return 0;
	if (rt->cudaGetDevice(&g->prev) != cudaSuccess)
		g->prev = -1;
	if (g->prev == h->cfg.device)
		return 0;
	e = rt->cudaSetDevice(h->cfg.device);
	if (e != cudaSuccess) {
		char m[300];

		cuda_rt_describe(rt, e, "cudaSetDevice", m, sizeof(m));
		return fail(cuda_rt_errno(e), "%s", m);
	}
	g->switched = g->prev >= 0;
	return 0;
}

static void dev_leave(struct hintfs_gpu *h, const struct dev_guard *g)
{
	if (g->switched)
		h->rt->cudaSetDevice(g->prev);
}

/* Maps and records a failed CUDA call; returns the errno. */
static int cuda_fail(struct hintfs_gpu *h, cudaError_t e, const char *what)
{
	char m[300];

	cuda_rt_describe(h->rt, e, what, m, sizeof(m));
	return fail(cuda_rt_errno(e), "%s", m);
}

/* --------------------------------------------------------- open/close */

unsigned hintfs_gpu_abi_version(void)
{
	return HINTFS_GPU_ABI_VERSION;
}

void hintfs_gpu_config_init(struct hintfs_gpu_config *cfg)
{
	if (!cfg)
		return;
	memset(cfg, 0, sizeof(*cfg));
	cfg->ring_depth = GPU_DEF_RING_DEPTH;
	cfg->max_batch_files = GPU_DEF_MAX_FILES;
	cfg->max_batch_bytes = GPU_DEF_MAX_BYTES;
	cfg->queue_depth = GPU_DEF_QUEUE_DEPTH;
	cfg->align = 1;
	cfg->device = 0;
	cfg->flags = 0;
}

static int check_config(const struct hintfs_gpu_config *c)
{
	if (c->ring_depth < 1 || c->ring_depth > GPU_MAX_RING_DEPTH)
		return fail(-EINVAL, "ring_depth %u is not in 1..%u",
			    c->ring_depth, GPU_MAX_RING_DEPTH);
	if (c->max_batch_files < 1 || c->max_batch_files > GPU_MAX_MAX_FILES)
		return fail(-EINVAL, "max_batch_files %u is not in 1..%u",
			    c->max_batch_files, GPU_MAX_MAX_FILES);
	if (c->max_batch_bytes < 1 || c->max_batch_bytes > GPU_MAX_MAX_BYTES)
		return fail(-EINVAL, "max_batch_bytes %llu is not in 1..%llu",
			    (unsigned long long)c->max_batch_bytes,
			    (unsigned long long)GPU_MAX_MAX_BYTES);
	if (c->queue_depth < 1 || c->queue_depth > GPU_MAX_QUEUE_DEPTH)
		return fail(-EINVAL, "queue_depth %u is not in 1..%u",
			    c->queue_depth, GPU_MAX_QUEUE_DEPTH);
	if (c->align < 1 || c->align > GPU_MAX_ALIGN ||
	    (c->align & (c->align - 1)))
		return fail(-EINVAL, "align %u is not a power of two in 1..%u",
			    c->align, GPU_MAX_ALIGN);
	if (c->device < 0)
		return fail(-EINVAL, "device %d is negative", c->device);
	if (c->flags & ~GPU_KNOWN_FLAGS)
		return fail(-EINVAL, "unknown flags 0x%x",
			    c->flags & ~GPU_KNOWN_FLAGS);
	return 0;
}

/*
 * Frees everything @h holds; @h is not (or no longer) in the registry.
 * Keeps the calling thread's error message: an open that failed reports
 * its own failure, not one of the cleanup.
 */
static void destroy(struct hintfs_gpu *h)
{
	const struct cuda_rt *rt = h->rt;
	struct dev_guard g = {0};
	int saved_err = tl_err;
	char saved_msg[sizeof(tl_msg)];
	bool cuda;

	memcpy(saved_msg, tl_msg, sizeof(saved_msg));
	cuda = rt && dev_enter(h, &g) == 0;

	if (cuda && h->stream)
		rt->cudaStreamSynchronize(h->stream);
	for (uint32_t i = 0; h->slots && i < h->cfg.ring_depth; i++) {
		struct gpu_slot *s = &h->slots[i];

		if (cuda) {
			/* The caller's kernels may still read dev. */
			if (s->released_recorded)
				rt->cudaEventSynchronize(s->released);
			if (s->gds_registered)
				gds_buf_deregister(s->dev);
			if (s->dev)
				rt->cudaFree(s->dev);
			if (s->host)
				rt->cudaFreeHost(s->host);
			if (s->copied)
				rt->cudaEventDestroy(s->copied);
			if (s->released)
				rt->cudaEventDestroy(s->released);
		} else if (!rt) {
			free(s->host);
		}
		/* (rt set but the device cannot be selected: CUDA memory is
		 * left to the driver's teardown rather than freed wrongly.) */
		free(s->offs);
		free(s->lens);
	}
	if (cuda && h->stream)
		rt->cudaStreamDestroy(h->stream);
	if (cuda)
		dev_leave(h, &g);
	free(h->slots);
	reader_fini(&h->rd);
	pthread_mutex_destroy(&h->lock);
	pthread_mutex_destroy(&h->submit_lock);
	free(h);
	tl_err = saved_err;
	memcpy(tl_msg, saved_msg, sizeof(tl_msg));
}

/*
 * Loads the runtime, checks the device exists, picks the path (pinned or
 * cufile). Returns 0 or -ENODEV saying why.
 */
static int cuda_setup(struct hintfs_gpu *h, char *cufile_note, size_t len)
{
	const struct cuda_rt *rt;
	char why[900];
	cudaError_t e;
	int count = 0, err;

	err = cuda_rt_load(&rt, why, sizeof(why));
	if (err)
		return fail(-ENODEV, "no CUDA device: %s", why);
	e = rt->cudaGetDeviceCount(&count);
	if (e != cudaSuccess) {
		cuda_rt_describe(rt, e, "cudaGetDeviceCount", why, sizeof(why));
		return fail(-ENODEV, "no CUDA device: %s", why);
	}
	if (h->cfg.device >= count)
		return fail(-ENODEV,
			    "no CUDA device: device %d requested, %d present "
			    "(CUDA_VISIBLE_DEVICES counts)",
			    h->cfg.device, count);
	h->rt = rt;

	h->path = HINTFS_GPU_PATH_PINNED;
	if (!(h->cfg.flags & HINTFS_GPU_CUFILE)) {
		snprintf(cufile_note, len, "cufile not requested");
	} else if (gds_load(why, sizeof(why)) == 0) {
		h->path = HINTFS_GPU_PATH_CUFILE;
		snprintf(cufile_note, len, "cufile in use");
	} else {
		snprintf(cufile_note, len, "cufile unavailable: %.360s", why);
	}
	return 0;
}

/* Allocates the slots' buffers and events on the selected device. */
static int alloc_slots(struct hintfs_gpu *h)
{
	const struct cuda_rt *rt = h->rt;
	size_t bytes = (size_t)h->cfg.max_batch_bytes;
	cudaError_t e;

	for (uint32_t i = 0; i < h->cfg.ring_depth; i++) {
		struct gpu_slot *s = &h->slots[i];

		s->offs = calloc(h->cfg.max_batch_files, sizeof(*s->offs));
		s->lens = calloc(h->cfg.max_batch_files, sizeof(*s->lens));
		if (!s->offs || !s->lens)
			return fail(-ENOMEM, "no memory for %u offsets",
				    h->cfg.max_batch_files);
		if (!rt) {
			void *p = NULL;

			if (posix_memalign(&p, GPU_PAGE_BYTES, bytes))
				return fail(-ENOMEM,
					    "no memory for a %zu-byte "
					    "host buffer",
					    bytes);
			s->host = p;
			s->dev = p;
			continue;
		}
		e = rt->cudaMalloc(&s->dev, bytes);
		if (e != cudaSuccess) {
			s->dev = NULL;
			return cuda_fail(h, e, "cudaMalloc (max_batch_bytes)");
		}
		if (h->path == HINTFS_GPU_PATH_PINNED) {
			void *p = NULL;

			e = rt->cudaHostAlloc(&p, bytes, cudaHostAllocDefault);
			if (e != cudaSuccess)
				return cuda_fail(h, e,
						 "cudaHostAlloc "
						 "(max_batch_bytes)");
			s->host = p;
		}
		e = rt->cudaEventCreateWithFlags(&s->copied,
						 cudaEventDisableTiming);
		if (e == cudaSuccess)
			e = rt->cudaEventCreateWithFlags(
			    &s->released, cudaEventDisableTiming);
		if (e != cudaSuccess)
			return cuda_fail(h, e, "cudaEventCreateWithFlags");
		if (h->path == HINTFS_GPU_PATH_CUFILE)
			s->gds_registered =
			    gds_buf_register(s->dev, bytes) == 0;
	}
	return 0;
}

static void describe(struct hintfs_gpu *h, const char *cufile_note)
{
	const struct hintfs_gpu_config *c = &h->cfg;
	char reads[200], cuda[400] = "";
	double mib = (double)c->max_batch_bytes / (1024.0 * 1024.0);

	if (h->rd.uring)
		snprintf(reads, sizeof(reads), "io_uring, %u in flight%s",
			 c->queue_depth,
			 h->rd.async ? ", on io_uring workers" : "");
	else
		snprintf(reads, sizeof(reads), "open/pread (%s)",
			 h->rd.why_sync);
	if (h->rt) {
		int drv = 0;

		h->rt->cudaDriverGetVersion(&drv);
		snprintf(
		    cuda, sizeof(cuda), "; CUDA runtime %d (%s), driver %d; %s",
		    h->rt->runtime_version, h->rt->loaded, drv, cufile_note);
	}
	switch (h->path) {
	case HINTFS_GPU_PATH_CPU:
		snprintf(h->desc, sizeof(h->desc),
			 "cpu: ring of %u x %.1f MiB host buffers, no CUDA; "
			 "reads: %s",
			 c->ring_depth, mib, reads);
		break;
	case HINTFS_GPU_PATH_PINNED:
		snprintf(h->desc, sizeof(h->desc),
			 "pinned: ring of %u x %.1f MiB cudaHostAlloc buffers "
			 "-> cudaMemcpyAsync to device %d; reads: %s%s",
			 c->ring_depth, mib, c->device, reads, cuda);
		break;
	case HINTFS_GPU_PATH_CUFILE:
		snprintf(h->desc, sizeof(h->desc),
			 "cufile: cuFileRead into %u x %.1f MiB on device %d "
			 "(GPUDirect Storage)%s",
			 c->ring_depth, mib, c->device, cuda);
		break;
	}
}

int hintfs_gpu_open(const struct hintfs_gpu_config *cfg,
		    struct hintfs_gpu **out)
{
	struct hintfs_gpu *h;
	struct dev_guard g = {0};
	char cufile_note[400] = "";
	cudaError_t e;
	int err;

	clear_err();
	if (!out)
		return fail(-EINVAL, "hintfs_gpu_open: out is NULL");
	*out = NULL;
	h = calloc(1, sizeof(*h));
	if (!h)
		return fail(-ENOMEM, "no memory for a handle");
	if (cfg)
		h->cfg = *cfg;
	else
		hintfs_gpu_config_init(&h->cfg);
	pthread_mutex_init(&h->lock, NULL);
	pthread_mutex_init(&h->submit_lock, NULL);
	err = check_config(&h->cfg);
	if (err)
		goto fail_free;
	h->slots = calloc(h->cfg.ring_depth, sizeof(*h->slots));
	err = h->slots ? reader_init(&h->rd, h->cfg.queue_depth,
				     !(h->cfg.flags & HINTFS_GPU_NO_URING))
		       : -ENOMEM;
	if (err) {
		fail(err, "no memory for the ring");
		goto fail_free;
	}
	h->rd.async = h->rd.uring && (h->cfg.flags & HINTFS_GPU_ASYNC_READS);

	h->path = HINTFS_GPU_PATH_CPU;
	if (!(h->cfg.flags & HINTFS_GPU_FORCE_CPU)) {
		err = cuda_setup(h, cufile_note, sizeof(cufile_note));
		if (err)
			goto fail_free;
		err = dev_enter(h, &g);
		if (err) {
			/* A device that exists but cannot be selected. */
			char why[sizeof(tl_msg)];

			snprintf(why, sizeof(why), "%s", tl_msg);
			err = fail(-ENODEV, "no CUDA device: %s", why);
			goto fail_free;
		}
		e = h->rt->cudaStreamCreateWithFlags(&h->stream,
						     cudaStreamNonBlocking);
		if (e != cudaSuccess)
			err = cuda_fail(h, e, "cudaStreamCreateWithFlags");
	}
	if (!err)
		err = alloc_slots(h);
	dev_leave(h, &g);
	if (err)
		goto fail_free;
	describe(h, cufile_note);
	err = reg_add(h);
	if (err) {
		fail(err, "no memory for the handle registry");
		goto fail_free;
	}
	*out = h;
	return 0;

fail_free:
	destroy(h);
	return err;
}

void hintfs_gpu_close(struct hintfs_gpu *h)
{
	ssize_t i;

	clear_err();
	if (!h)
		return;
	pthread_mutex_lock(&reg_lock);
	i = reg_find(h);
	if (i < 0 || h->closing) {
		pthread_mutex_unlock(&reg_lock);
		return;
	}
	h->closing = true;
	while (h->users)
		pthread_cond_wait(&reg_idle, &reg_lock);
	reg[i] = reg[--reg_len];
	if (!reg_len) {
		free(reg);
		reg = NULL;
		reg_cap = 0;
	}
	pthread_mutex_unlock(&reg_lock);
	destroy(h);
}

int hintfs_gpu_path_kind(struct hintfs_gpu *h)
{
	int ret;

	clear_err();
	ret = handle_enter(h);
	if (ret)
		return ret;
	ret = (int)h->path;
	handle_leave(h);
	return ret;
}

const char *hintfs_gpu_describe(struct hintfs_gpu *h)
{
	const char *d;

	clear_err();
	if (handle_enter(h))
		return NULL;
	d = h->desc;
	handle_leave(h);
	return d;
}

/* ------------------------------------------------------------ batches */

/* Batch numbers are unique in the process, not just per handle, so that a
 * batch handed to the wrong handle never matches one of its slots. */
static uint64_t next_seq;

/* Takes a free slot for a submit: its index, or -EBUSY. */
static int slot_take(struct hintfs_gpu *h, uint64_t *seq)
{
	int found = -1;

	pthread_mutex_lock(&h->lock);
	for (uint32_t k = 0; k < h->cfg.ring_depth; k++) {
		uint32_t i = (h->next_slot + k) % h->cfg.ring_depth;

		if (h->slots[i].state == SLOT_FREE) {
			found = (int)i;
			break;
		}
	}
	if (found >= 0) {
		h->slots[found].state = SLOT_FILLING;
		h->slots[found].seq = *seq =
		    __atomic_add_fetch(&next_seq, 1, __ATOMIC_RELAXED);
		h->next_slot = ((uint32_t)found + 1) % h->cfg.ring_depth;
	}
	pthread_mutex_unlock(&h->lock);
	if (found < 0)
		return fail(-EBUSY,
			    "all %u ring slots hold batches not yet released",
			    h->cfg.ring_depth);
	return found;
}

static void slot_set(struct hintfs_gpu *h, struct gpu_slot *s,
		     enum slot_state st)
{
	pthread_mutex_lock(&h->lock);
	s->state = st;
	pthread_mutex_unlock(&h->lock);
}

/* Before new bytes go in: the last copy out of the slot and the caller's
 * work recorded at release must be over. */
static int slot_quiesce(struct hintfs_gpu *h, struct gpu_slot *s)
{
	const struct cuda_rt *rt = h->rt;
	cudaError_t e;

	if (!rt)
		return 0;
	e = rt->cudaEventSynchronize(s->copied);
	if (e != cudaSuccess)
		return cuda_fail(h, e, "cudaEventSynchronize (last copy)");
	if (s->released_recorded) {
		e = rt->cudaEventSynchronize(s->released);
		if (e != cudaSuccess)
			return cuda_fail(h, e,
					 "cudaEventSynchronize (release)");
		s->released_recorded = false;
	}
	return 0;
}

static int sample_fail(int err, const char *const *paths, uint32_t i)
{
	return fail(err, "sample %u '%s': %s", i, paths[i],
		    err == -ESTALE ? "file got shorter while being read"
				   : errno_text(err));
}

/* Places the samples: offsets from the sizes in s->lens. */
static int place(struct hintfs_gpu *h, struct gpu_slot *s,
		 const char *const *paths, uint32_t n, uint64_t *bytes)
{
	uint64_t end = 0, max = h->cfg.max_batch_bytes;
	uint64_t mask = h->cfg.align - 1;

	for (uint32_t i = 0; i < n; i++) {
		/* end <= max <= 1 TiB: no overflow here. */
		uint64_t off = (end + mask) & ~mask;

		if (off > max || s->lens[i] > max - off)
			return fail(-EMSGSIZE,
				    "batch over max_batch_bytes %llu: sample "
				    "%u '%s' (%llu bytes) would end at %llu",
				    (unsigned long long)max, i, paths[i],
				    (unsigned long long)s->lens[i],
				    (unsigned long long)(off + s->lens[i]));
		s->offs[i] = off;
		end = off + s->lens[i];
	}
	*bytes = end;
	return 0;
}

/* Reads the batch into slot @s and queues its copy. */
static int fill(struct hintfs_gpu *h, struct gpu_slot *s,
		const char *const *paths, uint32_t n, uint64_t *bytes)
{
	const struct cuda_rt *rt = h->rt;
	uint32_t bad = 0;
	cudaError_t e;
	int err;

	err = slot_quiesce(h, s);
	if (err)
		return err;
	err = reader_sizes(&h->rd, paths, n, s->lens, &bad);
	if (err)
		return sample_fail(err, paths, bad);
	err = place(h, s, paths, n, bytes);
	if (err)
		return err;

	if (h->path == HINTFS_GPU_PATH_CUFILE) {
		for (uint32_t i = 0; i < n; i++) {
			char why[200] = "";

			err = gds_read_file(paths[i], s->dev, s->offs[i],
					    s->lens[i], why, sizeof(why));
			if (err && why[0])
				return fail(err, "sample %u '%s': %s", i,
					    paths[i], why);
			if (err)
				return sample_fail(err, paths, i);
		}
	} else {
		err = reader_fill(&h->rd, paths, n, s->offs, s->lens, s->host,
				  &bad);
		if (err)
			return sample_fail(err, paths, bad);
	}
	if (!rt)
		return 0;
	if (h->path == HINTFS_GPU_PATH_PINNED && *bytes) {
		e = rt->cudaMemcpyAsync(s->dev, s->host, *bytes,
					cudaMemcpyHostToDevice, h->stream);
		if (e != cudaSuccess)
			return cuda_fail(h, e, "cudaMemcpyAsync");
	}
	e = rt->cudaEventRecord(s->copied, h->stream);
	if (e != cudaSuccess)
		return cuda_fail(h, e, "cudaEventRecord (copy)");
	return 0;
}

int hintfs_gpu_submit(struct hintfs_gpu *h, const char *const *paths,
		      uint32_t n, struct hintfs_gpu_batch *out)
{
	struct dev_guard g = {0};
	struct gpu_slot *s;
	uint64_t seq = 0, bytes = 0;
	int err, idx;

	clear_err();
	if (out)
		memset(out, 0, sizeof(*out));
	err = handle_enter(h);
	if (err)
		return err;
	if (!out || (n && !paths)) {
		err = fail(-EINVAL, "hintfs_gpu_submit: %s is NULL",
			   out ? "paths" : "out");
		goto out_leave;
	}
	if (n > h->cfg.max_batch_files) {
		err = fail(-E2BIG, "batch of %u files, over max_batch_files %u",
			   n, h->cfg.max_batch_files);
		goto out_leave;
	}
	for (uint32_t i = 0; i < n; i++) {
		if (!paths[i]) {
			err = fail(-EINVAL, "sample %u: path is NULL", i);
			goto out_leave;
		}
	}

	pthread_mutex_lock(&h->submit_lock);
	idx = slot_take(h, &seq);
	if (idx < 0) {
		err = idx;
		goto out_unlock;
	}
	s = &h->slots[idx];
	err = dev_enter(h, &g);
	if (!err) {
		err = fill(h, s, paths, n, &bytes);
		dev_leave(h, &g);
	}
	if (err) {
		slot_set(h, s, SLOT_FREE);
		goto out_unlock;
	}
	slot_set(h, s, SLOT_HELD);
	out->seq = seq;
	out->slot = (uint32_t)idx;
	out->count = n;
	out->bytes = bytes;
	out->dev = s->dev;
	out->host = s->host;
	out->offsets = s->offs;
	out->lengths = s->lens;
out_unlock:
	pthread_mutex_unlock(&h->submit_lock);
out_leave:
	handle_leave(h);
	return err;
}

/* The held slot of @b: 0, or -EINVAL. Called with h->lock held. */
static int slot_of(struct hintfs_gpu *h, const struct hintfs_gpu_batch *b,
		   struct gpu_slot **out)
{
	struct gpu_slot *s;

	if (!b)
		return fail(-EINVAL, "batch is NULL");
	s = b->slot < h->cfg.ring_depth ? &h->slots[b->slot] : NULL;
	if (!s || b->seq == 0 || s->seq != b->seq || s->state != SLOT_HELD)
		return fail(-EINVAL,
			    "batch %llu is not held by this handle (released "
			    "already, or from another handle)",
			    (unsigned long long)b->seq);
	*out = s;
	return 0;
}

/*
 * Shared by wait and stream_wait: runs @op on the `copied` event of the
 * held batch @b with the handle's device current. On the cpu path there is
 * nothing to wait for: 0 once @b is known to be held.
 */
static int on_copied(struct hintfs_gpu *h, const struct hintfs_gpu_batch *b,
		     int (*op)(struct hintfs_gpu *h, cudaEvent_t ev, void *arg),
		     void *arg)
{
	struct dev_guard g = {0};
	struct gpu_slot *s;
	cudaEvent_t ev = NULL;
	int err;

	clear_err();
	err = handle_enter(h);
	if (err)
		return err;
	pthread_mutex_lock(&h->lock);
	err = slot_of(h, b, &s);
	if (!err)
		ev = s->copied;
	pthread_mutex_unlock(&h->lock);
	if (!err && h->rt) {
		err = dev_enter(h, &g);
		if (!err) {
			err = op(h, ev, arg);
			dev_leave(h, &g);
		}
	}
	handle_leave(h);
	return err;
}

static int sync_event(struct hintfs_gpu *h, cudaEvent_t ev, void *arg)
{
	cudaError_t e = h->rt->cudaEventSynchronize(ev);

	(void)arg;
	return e == cudaSuccess ? 0 : cuda_fail(h, e, "cudaEventSynchronize");
}

static int stream_wait_event(struct hintfs_gpu *h, cudaEvent_t ev, void *stream)
{
	cudaError_t e = h->rt->cudaStreamWaitEvent((cudaStream_t)stream, ev, 0);

	if (e == cudaSuccess)
		return 0;
	cuda_fail(
	    h, e,
	    "cudaStreamWaitEvent (is the stream on the handle's device?)");
	tl_err = -EINVAL;
	return -EINVAL;
}

int hintfs_gpu_wait(struct hintfs_gpu *h, const struct hintfs_gpu_batch *b)
{
	return on_copied(h, b, sync_event, NULL);
}

int hintfs_gpu_stream_wait(struct hintfs_gpu *h,
			   const struct hintfs_gpu_batch *b, void *stream)
{
	return on_copied(h, b, stream_wait_event, stream);
}

static int release(struct hintfs_gpu *h, const struct hintfs_gpu_batch *b,
		   bool on_stream, void *stream)
{
	struct dev_guard g = {0};
	struct gpu_slot *s;
	cudaError_t e;
	int err;

	clear_err();
	err = handle_enter(h);
	if (err)
		return err;
	on_stream = on_stream && h->rt;
	if (on_stream) {
		err = dev_enter(h, &g);
		if (err)
			goto out;
	}
	pthread_mutex_lock(&h->lock);
	err = slot_of(h, b, &s);
	if (!err && on_stream) {
		e = h->rt->cudaEventRecord(s->released, (cudaStream_t)stream);
		if (e != cudaSuccess) {
			cuda_fail(h, e,
				  "cudaEventRecord on the caller's "
				  "stream (is it on the handle's "
				  "device?)");
			err = -EINVAL;
			tl_err = err;
		} else {
			s->released_recorded = true;
		}
	}
	if (!err)
		s->state = SLOT_FREE;
	pthread_mutex_unlock(&h->lock);
	if (on_stream)
		dev_leave(h, &g);
out:
	handle_leave(h);
	return err;
}

int hintfs_gpu_release(struct hintfs_gpu *h, const struct hintfs_gpu_batch *b)
{
	return release(h, b, false, NULL);
}

int hintfs_gpu_release_on_stream(struct hintfs_gpu *h,
				 const struct hintfs_gpu_batch *b, void *stream)
{
	return release(h, b, true, stream);
}
