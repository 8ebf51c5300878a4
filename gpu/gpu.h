/**
 * gpu/gpu.h - batches of files copied to GPU memory through pinned buffers.
 *
 * libhintfs_gpu reads a batch of files (under a hintfs mount, or anywhere)
 * with io_uring into one of a ring of pinned host buffers, then copies the
 * filled buffer to a device buffer with cudaMemcpyAsync on the library's own
 * stream. Submitting batch k+1 reads into another slot while the copy of
 * batch k is still running, so disk/page-cache reads and the PCIe copy
 * overlap. Each batch comes back as one packed region (device and host
 * pointers) plus each sample's offset and length inside it.
 *
 * Lifecycle, as in LMDB:
 *
 *	struct hintfs_gpu_config cfg;
 *	struct hintfs_gpu *h;
 *	struct hintfs_gpu_batch b;
 *
 *	hintfs_gpu_config_init(&cfg);
 *	cfg.max_batch_bytes = 32 << 20;
 *	rc = hintfs_gpu_open(&cfg, &h);          (-ENODEV: no CUDA device)
 *	rc = hintfs_gpu_submit(h, paths, n, &b);  (reads done, copy queued)
 *	rc = hintfs_gpu_stream_wait(h, &b, my_stream);
 *	... kernels on my_stream read b.dev + b.offsets[i] ...
 *	rc = hintfs_gpu_release_on_stream(h, &b, my_stream);
 *	hintfs_gpu_close(h);
 *
 * Paths: the library takes one of three, fixed at open and reported by
 * hintfs_gpu_path_kind() and hintfs_gpu_describe():
 *   - HINTFS_GPU_PATH_PINNED: io_uring reads into cudaHostAlloc memory,
 *     cudaMemcpyAsync to cudaMalloc memory (the default);
 *   - HINTFS_GPU_PATH_CUFILE: cuFileRead (GPUDirect Storage) straight into
 *     device memory; only when asked for (HINTFS_GPU_CUFILE) and
 *     libcufile.so.0 loads; there is no host copy (batch.host is NULL);
 *   - HINTFS_GPU_PATH_CPU: plain host memory and no CUDA at all
 *     (HINTFS_GPU_FORCE_CPU); batch.dev == batch.host; same API, for tests
 *     and machines without a GPU.
 *
 * The CUDA runtime is loaded with dlopen at hintfs_gpu_open(), not linked:
 * the library loads and its CPU path works where no CUDA is installed, and a
 * machine without a GPU gets -ENODEV from hintfs_gpu_open() with the reason
 * in hintfs_gpu_strerror(), never a loader error or a crash.
 *
 * Errors: every function returning int returns 0 or a negative errno. The
 * codes that have a fixed meaning here:
 *   -ENODEV    no usable CUDA device (no driver, no GPU, runtime missing,
 *              device index out of range); hintfs_gpu_open() only
 *   -ENOENT, -EACCES, -EISDIR, ...
 *              a sample could not be opened or read; the message names the
 *              sample's index and path
 *   -EINVAL    a bad argument (NULL, a bad config field, a non-regular
 *              file, a batch that is not held by this handle)
 *   -E2BIG     more paths than cfg.max_batch_files
 *   -EMSGSIZE  the files of a batch add up to more than cfg.max_batch_bytes
 *   -EBUSY     every ring slot holds a batch not yet released
 *   -ESTALE    a file got shorter between its stat and its read
 *   -ENOMEM    host or device memory could not be allocated
 *   -EIO       any other CUDA failure (the message has the CUDA error)
 *   -EBADF     the handle is not open (closed, or never returned by
 *              hintfs_gpu_open())
 * After a failure, hintfs_gpu_strerror(rc) on the same thread gives a
 * one-line message with the details.
 *
 * Handles: the value of a closed handle is like a closed file descriptor:
 * every call with it returns -EBADF and touches no freed memory (the
 * library keeps a registry of open handles and compares pointers only),
 * hintfs_gpu_close() of it does nothing. As with descriptors, a later open
 * may return the same pointer value again.
 *
 * Threads: all functions may be called from any thread, on the same handle
 * at once. Submits on one handle are serialized (one io_uring, one staging
 * area); waits and releases run beside a submit. hintfs_gpu_close() waits
 * for calls in progress on the handle to return. The library saves and
 * restores the calling thread's current CUDA device around its own calls.
 */
#ifndef HINTFS_GPU_GPU_H
#define HINTFS_GPU_GPU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HINTFS_GPU_API __attribute__((visibility("default")))

/** An open handle: opaque; from hintfs_gpu_open(), to hintfs_gpu_close(). */
struct hintfs_gpu;

/**
 * Bumped whenever struct hintfs_gpu_config or struct hintfs_gpu_batch
 * changes layout, or a function changes meaning. Bindings that mirror the
 * structs (the ctypes module hintfs.gpu) check it before the first call.
 */
#define HINTFS_GPU_ABI_VERSION 1

/** Use plain host memory and no CUDA: batch.dev == batch.host. */
#define HINTFS_GPU_FORCE_CPU (1u << 0)
/** Read with plain open/pread/close instead of io_uring. */
#define HINTFS_GPU_NO_URING (1u << 1)
/**
 * Read with cuFile (GPUDirect Storage) into device memory when
 * libcufile.so.0 loads and its driver opens; else the pinned path, and
 * hintfs_gpu_describe() says why. Off by default: see gpu/README.md.
 */
#define HINTFS_GPU_CUFILE (1u << 2)
/**
 * Hand every open and read to io_uring's worker threads (IOSQE_ASYNC)
 * instead of completing page-cache hits inline in the submitting thread,
 * so that a warm batch is copied out of the page cache by many cores.
 * Ignored without io_uring. Off by default: see gpu/README.md.
 */
#define HINTFS_GPU_ASYNC_READS (1u << 3)

enum hintfs_gpu_path {
	HINTFS_GPU_PATH_CPU = 0,
	HINTFS_GPU_PATH_PINNED = 1,
	HINTFS_GPU_PATH_CUFILE = 2,
};

/**
 * How to open a handle. Fill with hintfs_gpu_config_init(), then change
 * fields. Memory held by an open handle: ring_depth x max_batch_bytes of
 * pinned host memory and as much device memory (cpu path: host only).
 */
struct hintfs_gpu_config {
	/** Slots in the ring: batches held by the caller plus the one being
	 *  read; 2 lets one read overlap one copy, 3 (default) also lets the
	 *  caller hold the batch it is working on. 1..64. */
	uint32_t ring_depth;
	/** Most paths in one batch (size of the offset/length arrays).
	 *  Default 1024. 1..1048576. */
	uint32_t max_batch_files;
	/** Size of each slot's host and device buffer, the most bytes one
	 *  batch may hold. Default 64 MiB. 1 byte..1 TiB. */
	uint64_t max_batch_bytes;
	/** io_uring requests in flight while reading a batch. Default 64.
	 *  1..4096. */
	uint32_t queue_depth;
	/** Each sample starts at a multiple of this (a power of two,
	 *  1..1 MiB). Default 1: samples packed back to back. */
	uint32_t align;
	/** CUDA device index. Default 0. */
	int32_t device;
	/** HINTFS_GPU_* flags. Default 0. */
	uint32_t flags;
};

/**
 * One batch, filled by hintfs_gpu_submit(). The caller owns the struct; the
 * memory its pointers name belongs to the handle and stays valid until the
 * batch is released or the handle closed.
 */
struct hintfs_gpu_batch {
	/** Batch number, from 1, unique within the process. */
	uint64_t seq;
	/** Ring slot the batch lives in. */
	uint32_t slot;
	/** Number of samples (paths). */
	uint32_t count;
	/** Bytes used in the buffers: the end of the last sample. */
	uint64_t bytes;
	/** Packed samples in device memory (cpu path: == host). Usable on
	 *  the device once hintfs_gpu_wait() or hintfs_gpu_stream_wait(). */
	void *dev;
	/** The same bytes in pinned host memory, readable on return of
	 *  hintfs_gpu_submit(); NULL on the cufile path. */
	void *host;
	/** count byte offsets of the samples into dev/host. */
	const uint64_t *offsets;
	/** count sample lengths in bytes (0 for empty files). */
	const uint64_t *lengths;
};

/** HINTFS_GPU_ABI_VERSION of the library actually loaded. */
HINTFS_GPU_API unsigned hintfs_gpu_abi_version(void);

/** Fills @cfg with the defaults. Any thread. */
HINTFS_GPU_API void hintfs_gpu_config_init(struct hintfs_gpu_config *cfg);

/**
 * Opens a handle: checks @cfg, loads the CUDA runtime (unless
 * HINTFS_GPU_FORCE_CPU), selects the device, allocates the ring, sets up
 * io_uring. Returns 0 and the handle in *@out, or a negative errno and
 * *@out = NULL: -ENODEV when no usable CUDA device exists (the message says
 * why: no driver, no device, no runtime library, index out of range),
 * -EINVAL for a bad field, -ENOMEM. @cfg is copied; NULL means defaults.
 * The environment variable HINTFS_CUDART, when set, is the one CUDA runtime
 * library tried; HINTFS_CUFILE, likewise, the cuFile library (default
 * libcufile.so.0). The caller owns the handle and closes it. Any thread.
 */
HINTFS_GPU_API int hintfs_gpu_open(const struct hintfs_gpu_config *cfg,
				   struct hintfs_gpu **out);

/**
 * Waits for calls in progress on @h, waits for the copies and for the
 * stream work recorded by hintfs_gpu_release_on_stream(), then frees
 * everything. Batches not yet released become invalid. NULL and handles
 * already closed are ignored. Any thread.
 */
HINTFS_GPU_API void hintfs_gpu_close(struct hintfs_gpu *h);

/** The path @h takes (enum hintfs_gpu_path), or -EBADF. Any thread. */
HINTFS_GPU_API int hintfs_gpu_path_kind(struct hintfs_gpu *h);

/**
 * One line on what @h does: the path, ring size, how files are read, the
 * CUDA versions, and why cuFile is or is not used ("cufile unavailable:
 * ..."). Owned by @h, valid until hintfs_gpu_close(). NULL for a handle
 * that is not open. Any thread.
 */
HINTFS_GPU_API const char *hintfs_gpu_describe(struct hintfs_gpu *h);

/**
 * Reads the @n files named by @paths into a free slot, packed in order
 * (sample i at offsets[i], lengths[i] bytes, each offset a multiple of
 * cfg.align), and queues the copy to the device. Returns 0 once every file
 * is read and the copy is queued, with the batch in *@out; the host bytes
 * are readable then, the device bytes after hintfs_gpu_wait() or
 * hintfs_gpu_stream_wait(). @n may be 0, files may be empty. Sizes are
 * taken when each file is stat'ed; a file that grows afterwards is read up
 * to its old size, one that shrinks fails the batch with -ESTALE.
 *
 * Errors (nothing is held afterwards, *@out is zeroed): -E2BIG, -EMSGSIZE,
 * -EBUSY (release a batch first), -ENOENT and the other open/read errors of
 * the first sample that failed (the message names its index and path),
 * -EINVAL, -EIO, -EBADF. Any thread; submits on one handle run one at a
 * time. The caller owns @paths; the library does not keep them.
 */
HINTFS_GPU_API int hintfs_gpu_submit(struct hintfs_gpu *h,
				     const char *const *paths, uint32_t n,
				     struct hintfs_gpu_batch *out);

/**
 * Blocks until the device copy of @b is complete (the cpu path: returns at
 * once). Returns 0, -EINVAL if @b is not held by @h, -EIO, -EBADF. Any
 * thread.
 */
HINTFS_GPU_API int hintfs_gpu_wait(struct hintfs_gpu *h,
				   const struct hintfs_gpu_batch *b);

/**
 * Makes work queued later on @stream (a cudaStream_t of @h's device; NULL is
 * the legacy default stream) wait for the device copy of @b, without
 * blocking the host (cudaStreamWaitEvent on an event recorded after the
 * copy). The cpu path: returns 0 and does nothing. Returns -EINVAL if @b
 * is not held by @h or the stream is not usable, -EBADF. Any thread.
 */
HINTFS_GPU_API int hintfs_gpu_stream_wait(struct hintfs_gpu *h,
					  const struct hintfs_gpu_batch *b,
					  void *stream);

/**
 * Gives @b's slot back. The caller promises that nothing reads the batch's
 * memory any more, on the host or on the device (e.g. it synchronized the
 * streams that used it). Returns 0, or -EINVAL if @b is not held by @h
 * (released already, or from another handle: nothing happens), -EBADF.
 * Any thread.
 */
HINTFS_GPU_API int hintfs_gpu_release(struct hintfs_gpu *h,
				      const struct hintfs_gpu_batch *b);

/**
 * Gives @b's slot back once the work queued on @stream so far is done: an
 * event is recorded on @stream, and the slot's buffers are not written
 * again before it completes. Use this when kernels or copies that read the
 * batch may still be running. On the cpu path it is hintfs_gpu_release().
 * Returns 0; -EINVAL if @b is not held by @h, or if the event cannot be
 * recorded on @stream (the batch then stays held); -EBADF. Any thread.
 */
HINTFS_GPU_API int
hintfs_gpu_release_on_stream(struct hintfs_gpu *h,
			     const struct hintfs_gpu_batch *b, void *stream);

/**
 * Text for @err (a negative errno from this library). If the last failed
 * call of the calling thread returned @err, the text is that failure's
 * detailed line ("no CUDA device: cudaGetDeviceCount: ...", "sample 3
 * '/data/x.jpg': No such file or directory"); otherwise a fixed text. The
 * string is valid until the calling thread's next call into the library.
 * Never NULL. Any thread.
 */
HINTFS_GPU_API const char *hintfs_gpu_strerror(int err);

#ifdef __cplusplus
}
#endif

#endif /* HINTFS_GPU_GPU_H */
