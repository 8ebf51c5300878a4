/*
 * tests/unit/sim_cudart.c - a CUDA runtime simulated on the CPU, for testing
 * gpu/ where no GPU is lent (CI, and every session so far).
 *
 * libhintfs_gpu loads whatever $HINTFS_CUDART names; pointed at this
 * library, its pinned path (cudaHostAlloc ring, cudaMemcpyAsync on its own
 * stream, events between the ring and the caller's streams) runs for real
 * against a runtime that keeps CUDA's ordering rules and nothing more:
 *
 *   - Each stream is a FIFO executed by its own thread, so work is truly
 *     asynchronous to the host. A host-to-device copy reads its source
 *     when the stream reaches it, after a configurable delay standing for
 *     the bus: a library that rewrites a pinned buffer before the copy
 *     out of it has completed puts the new bytes on the "device", and a
 *     test sees them.
 *   - Events complete when their stream reaches them; cudaEventSynchronize
 *     waits for the latest record, cudaStreamWaitEvent holds a stream
 *     until then; an event never recorded is complete.
 *   - Device memory is host memory the runtime tracks: copies must go
 *     from a live pinned allocation to a live device one, or back (a test
 *     reading a batch on its own stream); anything else is counted as a
 *     misuse; frees are checked, and freed device memory is
 *     poisoned. sim_cuda_stats() reports what is still allocated.
 *   - Faults on demand: no device at all, a device-memory limit
 *     (cudaErrorMemoryAllocation past it).
 *
 * It is a test fixture, not a CUDA: no kernels (one checksum "kernel"),
 * no contexts, one process. The sim_cuda_* functions (sim_cudart.h) are its
 * controls; tests find them with dlsym.
 */
#include "sim_cudart.h"

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SIM_API __attribute__((visibility("default")))

enum op_kind {
	OP_COPY,
	OP_RECORD,
	OP_WAIT,
	OP_CHECKSUM,
};

struct op {
	enum op_kind kind;
	struct op *next;
	/* OP_COPY: pinned to device, or device to pinned (d2h). */
	void *dst;
	const void *src;
	size_t n;
	bool d2h;
	/* OP_RECORD, OP_WAIT: the event and the record ticket. */
	struct CUevent_st *ev;
	uint64_t ticket;
	/* OP_CHECKSUM: a "kernel" that reads device memory. */
	uint64_t *out;
	unsigned delay_us;
};

struct CUstream_st {
	pthread_t thread;
	struct op *head, *tail;
	/* Ops queued and not yet finished. */
	unsigned pending;
	bool stop;
	struct CUstream_st *next_live;
};

struct CUevent_st {
	/* Tickets: the latest record, the latest completed. */
	uint64_t recorded, done;
	struct CUevent_st *next_live;
};

struct alloc {
	uint8_t *p;
	size_t n;
	bool device;
};

/* One lock and one condition for the whole runtime: it is a test fixture,
 * and one lock makes every ordering argument simple. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;

static struct alloc *allocs;
static size_t n_allocs, cap_allocs;
static struct CUstream_st *streams;
static struct CUevent_st *events;
static struct CUstream_st *legacy; /* stream 0, made on first use */

static int devices = 1;
static size_t device_limit = (size_t)4 << 30;
static size_t device_used;
static unsigned copy_delay_us;
static bool gate_closed;
static uint64_t n_copies, n_copies_done, n_misuse;
static __thread int cur_device;

static void sleep_us(unsigned us)
{
	struct timespec ts = {us / 1000000u, (long)(us % 1000000u) * 1000};

	while (us && nanosleep(&ts, &ts))
		;
}

/* The allocation holding [p, p+n), of the given kind; NULL if none. Under
 * mu. */
static struct alloc *find(const void *p, size_t n, bool device)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n_allocs; i++) {
		struct alloc *a = &allocs[i];

		if (a->device == device && b >= a->p && b <= a->p + a->n &&
		    n <= (size_t)(a->p + a->n - b))
			return a;
	}
	return NULL;
}

static bool stream_live(const struct CUstream_st *s)
{
	for (const struct CUstream_st *l = streams; l; l = l->next_live)
		if (l == s)
			return true;
	return false;
}

static bool event_live(const struct CUevent_st *e)
{
	for (const struct CUevent_st *l = events; l; l = l->next_live)
		if (l == e)
			return true;
	return false;
}

/* ------------------------------------------------------------ streams */

static void run_op(struct op *o)
{
	switch (o->kind) {
	case OP_COPY:
		pthread_mutex_lock(&mu);
		while (gate_closed)
			pthread_cond_wait(&cv, &mu);
		pthread_mutex_unlock(&mu);
		sleep_us(copy_delay_us);
		pthread_mutex_lock(&mu);
		/* Read the source now, as the DMA engine would. */
		memcpy(o->dst, o->src, o->n);
		n_copies_done++;
		pthread_mutex_unlock(&mu);
		break;
	case OP_RECORD:
		pthread_mutex_lock(&mu);
		if (o->ticket > o->ev->done)
			o->ev->done = o->ticket;
		pthread_cond_broadcast(&cv);
		pthread_mutex_unlock(&mu);
		break;
	case OP_WAIT:
		pthread_mutex_lock(&mu);
		while (o->ev->done < o->ticket)
			pthread_cond_wait(&cv, &mu);
		pthread_mutex_unlock(&mu);
		break;
	case OP_CHECKSUM:
		sleep_us(o->delay_us);
		pthread_mutex_lock(&mu);
		*o->out = sim_fnv1a(SIM_FNV1A_BASIS, o->src, o->n);
		pthread_mutex_unlock(&mu);
		break;
	}
}

static void *stream_main(void *arg)
{
	struct CUstream_st *s = arg;

	pthread_mutex_lock(&mu);
	for (;;) {
		struct op *o;

		while (!s->head && !s->stop)
			pthread_cond_wait(&cv, &mu);
		if (!s->head)
			break;
		o = s->head;
		pthread_mutex_unlock(&mu);
		run_op(o);
		pthread_mutex_lock(&mu);
		s->head = o->next;
		if (!s->head)
			s->tail = NULL;
		s->pending--;
		free(o);
		pthread_cond_broadcast(&cv);
	}
	pthread_mutex_unlock(&mu);
	return NULL;
}

/* Under mu. */
static struct CUstream_st *stream_new(void)
{
	struct CUstream_st *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	if (pthread_create(&s->thread, NULL, stream_main, s)) {
		free(s);
		return NULL;
	}
	s->next_live = streams;
	streams = s;
	return s;
}

/* The stream @s names (NULL: the legacy default stream), or NULL if it is
 * not a live stream. Under mu. */
static struct CUstream_st *stream_of(cudaStream_t s)
{
	if (!s) {
		if (!legacy)
			legacy = stream_new();
		return legacy;
	}
	return stream_live(s) ? s : NULL;
}

/* Appends @o to @s. Under mu. */
static void enqueue(struct CUstream_st *s, struct op *o)
{
	o->next = NULL;
	if (s->tail)
		s->tail->next = o;
	else
		s->head = o;
	s->tail = o;
	s->pending++;
	pthread_cond_broadcast(&cv);
}

/* Under mu. */
static void drain(struct CUstream_st *s)
{
	while (s->pending)
		pthread_cond_wait(&cv, &mu);
}

/* ------------------------------------------------------------ runtime */

cudaError_t cudaRuntimeGetVersion(int *v)
{
	if (!v)
		return cudaErrorInvalidValue;
	*v = CUDART_VERSION;
	return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v)
{
	if (!v)
		return cudaErrorInvalidValue;
	*v = CUDART_VERSION;
	return cudaSuccess;
}

const char *cudaGetErrorName(cudaError_t e)
{
	switch (e) {
	case cudaSuccess:
		return "cudaSuccess";
	case cudaErrorInvalidValue:
		return "cudaErrorInvalidValue";
	case cudaErrorMemoryAllocation:
		return "cudaErrorMemoryAllocation";
	case cudaErrorNoDevice:
		return "cudaErrorNoDevice";
	case cudaErrorInvalidDevice:
		return "cudaErrorInvalidDevice";
	case cudaErrorInvalidResourceHandle:
		return "cudaErrorInvalidResourceHandle";
	default:
		return "cudaErrorUnknown";
	}
}

const char *cudaGetErrorString(cudaError_t e)
{
	switch (e) {
	case cudaSuccess:
		return "no error";
	case cudaErrorInvalidValue:
		return "invalid argument";
	case cudaErrorMemoryAllocation:
		return "out of memory";
	case cudaErrorNoDevice:
		return "no CUDA-capable device is detected (simulated)";
	case cudaErrorInvalidDevice:
		return "invalid device ordinal";
	case cudaErrorInvalidResourceHandle:
		return "invalid resource handle";
	default:
		return "unknown error";
	}
}

cudaError_t cudaGetDeviceCount(int *count)
{
	int n;

	if (!count)
		return cudaErrorInvalidValue;
	pthread_mutex_lock(&mu);
	n = devices;
	pthread_mutex_unlock(&mu);
	*count = n;
	return n ? cudaSuccess : cudaErrorNoDevice;
}

cudaError_t cudaGetDevice(int *d)
{
	if (!d)
		return cudaErrorInvalidValue;
	*d = cur_device;
	return cudaSuccess;
}

cudaError_t cudaSetDevice(int d)
{
	int n;

	pthread_mutex_lock(&mu);
	n = devices;
	pthread_mutex_unlock(&mu);
	if (d < 0 || d >= n)
		return cudaErrorInvalidDevice;
	cur_device = d;
	return cudaSuccess;
}

static cudaError_t alloc_add(void **p, size_t n, bool device)
{
	cudaError_t e = cudaSuccess;

	if (!p)
		return cudaErrorInvalidValue;
	*p = NULL;
	pthread_mutex_lock(&mu);
	if (device && n > device_limit - device_used) {
		e = cudaErrorMemoryAllocation;
	} else if (n_allocs == cap_allocs) {
		size_t cap = cap_allocs ? cap_allocs * 2 : 16;
		struct alloc *a = realloc(allocs, cap * sizeof(*a));

		if (a) {
			allocs = a;
			cap_allocs = cap;
		} else {
			e = cudaErrorMemoryAllocation;
		}
	}
	if (e == cudaSuccess) {
		uint8_t *m = malloc(n ? n : 1);

		if (m) {
			allocs[n_allocs++] = (struct alloc){m, n, device};
			if (device)
				device_used += n;
			*p = m;
		} else {
			e = cudaErrorMemoryAllocation;
		}
	}
	pthread_mutex_unlock(&mu);
	return e;
}

static cudaError_t alloc_free(void *p, bool device)
{
	if (!p)
		return cudaSuccess;
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < n_allocs; i++) {
		struct alloc a = allocs[i];

		if (a.p != p || a.device != device)
			continue;
		allocs[i] = allocs[--n_allocs];
		if (device)
			device_used -= a.n;
		/* A copy or kernel still reading it would see poison. */
		memset(a.p, 0xa5, a.n);
		pthread_mutex_unlock(&mu);
		free(a.p);
		return cudaSuccess;
	}
	n_misuse++;
	pthread_mutex_unlock(&mu);
	return cudaErrorInvalidValue;
}

cudaError_t cudaMalloc(void **p, size_t n)
{
	return alloc_add(p, n, true);
}

cudaError_t cudaFree(void *p)
{
	return alloc_free(p, true);
}

cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int flags)
{
	(void)flags;
	return alloc_add(p, n, false);
}

cudaError_t cudaFreeHost(void *p)
{
	return alloc_free(p, false);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
	(void)flags;
	if (!s)
		return cudaErrorInvalidValue;
	pthread_mutex_lock(&mu);
	*s = stream_new();
	pthread_mutex_unlock(&mu);
	return *s ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
	struct CUstream_st **l;

	pthread_mutex_lock(&mu);
	if (!s || !stream_live(s)) {
		n_misuse++;
		pthread_mutex_unlock(&mu);
		return cudaErrorInvalidResourceHandle;
	}
	/* CUDA lets queued work finish; so does this. */
	drain(s);
	for (l = &streams; *l != s; l = &(*l)->next_live)
		;
	*l = s->next_live;
	s->stop = true;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	pthread_join(s->thread, NULL);
	free(s);
	return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
	struct CUstream_st *st;

	pthread_mutex_lock(&mu);
	st = stream_of(s);
	if (st)
		drain(st);
	else
		n_misuse++;
	pthread_mutex_unlock(&mu);
	return st ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags)
{
	struct CUevent_st *ev;

	(void)flags;
	if (!e)
		return cudaErrorInvalidValue;
	ev = calloc(1, sizeof(*ev));
	*e = ev;
	if (!ev)
		return cudaErrorMemoryAllocation;
	pthread_mutex_lock(&mu);
	ev->next_live = events;
	events = ev;
	pthread_mutex_unlock(&mu);
	return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
	struct CUevent_st **l;

	pthread_mutex_lock(&mu);
	if (!e || !event_live(e)) {
		n_misuse++;
		pthread_mutex_unlock(&mu);
		return cudaErrorInvalidResourceHandle;
	}
	/* Queued records and waits still name it: let them pass first. */
	while (e->done < e->recorded)
		pthread_cond_wait(&cv, &mu);
	for (l = &events; *l != e; l = &(*l)->next_live)
		;
	*l = e->next_live;
	pthread_mutex_unlock(&mu);
	free(e);
	return cudaSuccess;
}

/* Queues @o on @s; frees it and counts a misuse if either handle is bad. */
static cudaError_t submit(cudaStream_t s, struct op *o)
{
	struct CUstream_st *st;
	cudaError_t e = cudaSuccess;

	pthread_mutex_lock(&mu);
	st = stream_of(s);
	if (!st || (o->ev && !event_live(o->ev))) {
		e = cudaErrorInvalidResourceHandle;
	} else if (o->kind == OP_COPY && (!find(o->dst, o->n, !o->d2h) ||
					  !find(o->src, o->n, o->d2h))) {
		/* Only copies between pinned and device memory. */
		e = cudaErrorInvalidValue;
	} else {
		if (o->kind == OP_RECORD)
			o->ticket = ++o->ev->recorded;
		else if (o->kind == OP_WAIT)
			o->ticket = o->ev->recorded;
		else if (o->kind == OP_COPY)
			n_copies++;
		enqueue(st, o);
	}
	if (e != cudaSuccess) {
		n_misuse++;
		free(o);
	}
	pthread_mutex_unlock(&mu);
	return e;
}

static cudaError_t submit_new(cudaStream_t s, struct op proto)
{
	struct op *o = malloc(sizeof(*o));

	if (!o)
		return cudaErrorMemoryAllocation;
	*o = proto;
	return submit(s, o);
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
	if (!e)
		return cudaErrorInvalidResourceHandle;
	return submit_new(s, (struct op){.kind = OP_RECORD, .ev = e});
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e,
				unsigned int flags)
{
	(void)flags;
	if (!e)
		return cudaErrorInvalidResourceHandle;
	return submit_new(s, (struct op){.kind = OP_WAIT, .ev = e});
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
	uint64_t want;

	pthread_mutex_lock(&mu);
	if (!e || !event_live(e)) {
		n_misuse++;
		pthread_mutex_unlock(&mu);
		return cudaErrorInvalidResourceHandle;
	}
	want = e->recorded;
	while (e->done < want)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
	return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n,
			    enum cudaMemcpyKind kind, cudaStream_t s)
{
	bool d2h = kind == cudaMemcpyDeviceToHost;

	/* The library copies to the device; tests read back (d2h). */
	if (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDefault &&
	    !d2h) {
		pthread_mutex_lock(&mu);
		n_misuse++;
		pthread_mutex_unlock(&mu);
		return cudaErrorInvalidValue;
	}
	return submit_new(
	    s,
	    (struct op){
		.kind = OP_COPY, .dst = dst, .src = src, .n = n, .d2h = d2h});
}

/* Synchronous device-to-host read, for tests (tests/unit/test_gpu.c's
 * device_ok); like CUDA's, it does not wait for non-blocking streams. */
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n,
		       enum cudaMemcpyKind kind)
{
	cudaError_t e = cudaSuccess;

	pthread_mutex_lock(&mu);
	if (kind != cudaMemcpyDeviceToHost || !find(src, n, true)) {
		n_misuse++;
		e = cudaErrorInvalidValue;
	} else {
		memcpy(dst, src, n);
	}
	pthread_mutex_unlock(&mu);
	return e;
}

/* ----------------------------------------------------------- controls */

SIM_API void sim_cuda_set_devices(int n)
{
	pthread_mutex_lock(&mu);
	devices = n;
	pthread_mutex_unlock(&mu);
}

SIM_API void sim_cuda_set_device_limit(size_t bytes)
{
	pthread_mutex_lock(&mu);
	device_limit = bytes;
	pthread_mutex_unlock(&mu);
}

SIM_API void sim_cuda_set_copy_delay_us(unsigned us)
{
	pthread_mutex_lock(&mu);
	copy_delay_us = us;
	pthread_mutex_unlock(&mu);
}

SIM_API void sim_cuda_gate(int closed)
{
	pthread_mutex_lock(&mu);
	gate_closed = closed != 0;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
}

/* See sim_cudart.h. The device range is checked when queued (a bad one is
 * a misuse), the bytes are read when the stream reaches the "kernel". */
SIM_API int sim_cuda_checksum(void *s, const void *dev, size_t n, uint64_t *out,
			      unsigned delay_us)
{
	pthread_mutex_lock(&mu);
	if (!find(dev, n, true)) {
		n_misuse++;
		pthread_mutex_unlock(&mu);
		return cudaErrorInvalidValue;
	}
	pthread_mutex_unlock(&mu);
	return submit_new(s, (struct op){.kind = OP_CHECKSUM,
					 .src = dev,
					 .n = n,
					 .out = out,
					 .delay_us = delay_us});
}

SIM_API void sim_cuda_stats(struct sim_cuda_stats *st)
{
	memset(st, 0, sizeof(*st));
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < n_allocs; i++) {
		if (allocs[i].device) {
			st->device_allocs++;
			st->device_bytes += allocs[i].n;
		} else {
			st->pinned_allocs++;
			st->pinned_bytes += allocs[i].n;
		}
	}
	for (struct CUstream_st *s = streams; s; s = s->next_live)
		st->streams += s != legacy;
	for (struct CUevent_st *e = events; e; e = e->next_live)
		st->events++;
	st->copies = n_copies;
	st->copies_done = n_copies_done;
	st->misuse = n_misuse;
	pthread_mutex_unlock(&mu);
}
