/*
 * tests/unit/sim_cudart.h - the controls of the simulated CUDA runtime
 * (tests/unit/sim_cudart.c). Tests resolve them with dlsym from the same
 * file libhintfs_gpu loaded through $HINTFS_CUDART.
 */
#ifndef HINTFS_TESTS_SIM_CUDART_H
#define HINTFS_TESTS_SIM_CUDART_H

#include <stddef.h>
#include <stdint.h>

/* What is live now (allocations, streams other than stream 0, events) and
 * what happened so far (copies queued and finished, calls the real runtime
 * would refuse or that name freed memory: misuse). */
struct sim_cuda_stats {
	uint64_t device_allocs, device_bytes;
	uint64_t pinned_allocs, pinned_bytes;
	uint64_t streams, events;
	uint64_t copies, copies_done, misuse;
};

/* The controls. Tests call them through pointers from dlsym, of the types
 * sim_cuda_*_fn. Streams are cudaStream_t passed as void *. */
void sim_cuda_stats(struct sim_cuda_stats *st);
/* How many devices cudaGetDeviceCount reports (0: cudaErrorNoDevice). */
void sim_cuda_set_devices(int n);
/* Total device memory; cudaMalloc past it fails. */
void sim_cuda_set_device_limit(size_t bytes);
/* Time each host-to-device copy takes, once its stream reaches it. */
void sim_cuda_set_copy_delay_us(unsigned us);
/* Closed: copies wait at the head of their stream until it opens. */
void sim_cuda_gate(int closed);
/* A "kernel" on @stream: after @delay_us, FNV-1a of @n device bytes at
 * @dev into *@out. Returns a cudaError_t. */
int sim_cuda_checksum(void *stream, const void *dev, size_t n, uint64_t *out,
		      unsigned delay_us);

typedef __typeof__(&sim_cuda_stats) sim_cuda_stats_fn;
typedef __typeof__(&sim_cuda_set_devices) sim_cuda_set_devices_fn;
typedef __typeof__(&sim_cuda_set_device_limit) sim_cuda_set_device_limit_fn;
typedef __typeof__(&sim_cuda_set_copy_delay_us) sim_cuda_set_copy_delay_us_fn;
typedef __typeof__(&sim_cuda_gate) sim_cuda_gate_fn;
typedef __typeof__(&sim_cuda_checksum) sim_cuda_checksum_fn;

/* FNV-1a, as sim_cuda_checksum computes it: continue @h (start from
 * SIM_FNV1A_BASIS) over @n bytes, so a hash can run over pieces. */
#define SIM_FNV1A_BASIS 0xcbf29ce484222325ull

static inline uint64_t sim_fnv1a(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

#endif /* HINTFS_TESTS_SIM_CUDART_H */
