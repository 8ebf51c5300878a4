/**
 * common/hint_format.h - the hint format v1 (doc/design.md 2.2): the
 * numbers its writers and its reader agree on, and the C functions that
 * write a header and an entry (a path, or a byte range of a file).
 *
 * The reader is fs/hint.c; the writers are hintfs-ctl (through
 * hint_format_header()), hint_format_entry() for C tools that write
 * entries, and the Python package (hintfs.hint.format_hint(), which
 * mirrors both). tests/data/hints/ holds the texts both must write and
 * what the reader takes from each: tests/unit/test_hint.c and
 * tests/integration/test_hint.py compare them byte for byte.
 */
#ifndef HINTFS_COMMON_HINT_FORMAT_H
#define HINTFS_COMMON_HINT_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** The first bytes of a header line: the format and its version. */
#define HINT_TAG "#hintfs v1"

/** The longest stream name: 1-32 of [A-Za-z0-9._-]. */
#define HINT_STREAM_MAX 32

/**
 * The longest header line the reader takes, without its line end (a longer
 * one is a comment). The longest a writer makes is 84 bytes: "#hintfs v1
 * epoch=" + 19 digits + " stream=" + 32 characters + " replace".
 */
#define HINT_HEADER_MAX 95

/** An entry's length when it names a whole file, not a byte range. */
#define HINT_WHOLE UINT64_MAX

/**
 * Whether @len bytes at @s are a stream name the reader takes: 1 to
 * HINT_STREAM_MAX of [A-Za-z0-9._-]. Pure.
 */
bool hint_stream_ok(const char *s, size_t len);

/**
 * Writes the header line "#hintfs v1[ epoch=N][ stream=NAME][ replace]\n",
 * in that order, into @buf (@size bytes, NUL-terminated): no epoch when
 * @epoch < 0, no stream when @stream is NULL. Returns the bytes written
 * without the NUL, -EINVAL for a stream name hint_stream_ok() refuses, or
 * -ENOSPC when @size is too small (@buf is then ""). Pure; any thread.
 */
int hint_format_header(char *buf, size_t size, int64_t epoch,
		       const char *stream, bool replace);

/**
 * Writes one entry line into @buf (@size bytes, NUL-terminated): "PATH\n"
 * for the whole file when @len is HINT_WHOLE, else bytes [@off, @off +
 * @len) of it, "PATH<TAB>OFFSET<TAB>LENGTH\n" in decimal. @path is
 * @path_len bytes, relative to the mount or absolute under it. Returns the
 * bytes written without the NUL; -EINVAL for a path that is empty or holds
 * a newline or a NUL, or a range of length 0 or past 2^64 - 1; -ENOSPC
 * when @size is too small (@buf is then ""). Pure; any thread.
 */
int hint_format_entry(char *buf, size_t size, const char *path, size_t path_len,
		      uint64_t off, uint64_t len);

#endif /* HINTFS_COMMON_HINT_FORMAT_H */
