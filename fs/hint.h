/**
 * fs/hint.h - the hint file parser (doc/design.md 2.2), private to fs and its
 * tests.
 *
 * Its callers are fs's control files (.hintfs/hint, warm, evict) and the
 * -o hint=FILE watcher: they turn a text into object ids through fs's
 * namespace, then hand plain ids to the prefetch engine (pf_hint(),
 * pf_warm()), which knows nothing of paths.
 */
#ifndef HINTFS_FS_HINT_H
#define HINTFS_FS_HINT_H

#include "common/hint_format.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** What resolving a path gives when the path is not in the listing. */
#define HINT_NO_ID UINT32_MAX /* == PF_NO_ID */

/**
 * Resolves @path (@len bytes, relative to the mount root, normalized: no
 * empty, "." or ".." components, no leading '/') to the caller's object id,
 * or HINT_NO_ID when it is not a file of the listing.
 */
typedef uint32_t (*hint_resolve_cb)(void *arg, const char *path, size_t len);

/** What a hint held besides its entries; all counted, none fatal. */
struct hint_report {
	uint64_t lines;	   /**< lines read */
	uint64_t entries;  /**< entries resolved to objects */
	uint64_t unknown;  /**< paths not in the listing */
	uint64_t too_long; /**< lines over HINT_LINE_MAX bytes */
	uint64_t bad_utf8; /**< lines that are not UTF-8 */
	uint64_t dotdot;   /**< paths with a ".." component */
	uint64_t outside;  /**< absolute paths not under the mount point */
	int64_t epoch;	   /**< from "#hintfs v1 epoch=N", else -1 */
	bool replace;	   /**< the header says "replace": drop the
				queued hints instead of queueing behind */
	char stream[HINT_STREAM_MAX + 1]; /**< from "stream=NAME", else "" */
	char first_bad[160]; /**< the first refused line, printable, with why */
};

/** Longest line taken as an entry (doc/design.md 2.2). */
#define HINT_LINE_MAX 4096

/**
 * Called by hint_foreach() with each entry's normalized path (@len 0 for
 * the mount root itself). Returns 1 when the path was taken, 0 when it is
 * not in the listing (counted as unknown), or a -errno that stops.
 */
typedef int (*hint_path_cb)(void *arg, const char *path, size_t len);

/**
 * Walks the entries of a text in hint syntax (doc/design.md 2.2), calling @cb
 * for each valid one and counting the rest in @rep: the parser behind
 * hint_parse(), and behind the warm and evict lists, whose entries may be
 * directories. Returns 0 or the first -errno of @cb. Thread-safe.
 */
int hint_foreach(const char *text, size_t len, const char *mountpoint,
		 hint_path_cb cb, void *arg, struct hint_report *rep);

/**
 * Parses a hint file of @len bytes. @mountpoint (absolute, no trailing
 * '/') is stripped from absolute entries. Stores the resolved ids, in file
 * order and with duplicates, in a malloc'd array *@ids (owned by the
 * caller; *@n of them; NULL when empty) and fills @rep. Returns 0 or
 * -ENOMEM; bad lines are counted in @rep, never fatal. Thread-safe.
 */
int hint_parse(const char *text, size_t len, const char *mountpoint,
	       hint_resolve_cb resolve, void *arg, uint32_t **ids, size_t *n,
	       struct hint_report *rep);

#endif /* HINTFS_FS_HINT_H */
