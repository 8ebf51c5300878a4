/*
 * gpu/gds.h - cuFile (GPUDirect Storage), loaded with dlopen when asked for.
 *
 * Private to gpu/. Used only on the HINTFS_GPU_CUFILE path: files are read
 * with cuFileRead straight into device memory. The caller has made the
 * handle's CUDA device current on the calling thread.
 */
#ifndef HINTFS_GPU_GDS_H
#define HINTFS_GPU_GDS_H

#include <stddef.h>
#include <stdint.h>

/*
 * Loads libcufile.so.0 ($HINTFS_CUFILE when set) and opens its driver, once
 * per process. Returns 0,
 * or -ENODEV with the reason in @why ("libcufile.so.0: cannot open shared
 * object file: ..."). A failed load is retried by the next call. Any
 * thread.
 */
int gds_load(char *why, size_t why_len);

/*
 * Registers @len bytes of device memory at @dev for direct DMA. Optional
 * for cuFile (unregistered memory goes through its bounce buffers), so a
 * failure is reported (-EIO) and otherwise harmless.
 */
int gds_buf_register(void *dev, size_t len);

/* Undoes gds_buf_register(). */
void gds_buf_deregister(void *dev);

/*
 * Reads the first @len bytes of @path to @dev + @dev_off. Returns 0 or a
 * negative errno: the open's, -ESTALE if the file ends early, -EIO for a
 * cuFile failure (described in @why).
 */
int gds_read_file(const char *path, void *dev, uint64_t dev_off, uint64_t len,
		  char *why, size_t why_len);

#endif /* HINTFS_GPU_GDS_H */
