/**
 * fs/hint.h - the hint file parser (doc/design.md 2.2), private to fs and its
 * tests.
 *
 * Its callers are fs's control files (.hintfs/hint, warm, evict) and the
 * -o hint=FILE watcher: they turn a text into object ids (and byte ranges
 * of them) through fs's namespace, then hand plain ids to the prefetch
 * engine (pf_hint_ranges(), pf_warm()), which knows nothing of paths.
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
 * One entry of a hint: bytes [off, off + len) of object @id, or the whole
 * object when len is HINT_WHOLE (common/hint_format.h; then off is 0). The same
 * layout as the engine's struct pf_range, which fs/ctl.c asserts where the two
 * meet: this parser stays free of the engine's headers (the fuzz target builds
 * it alone).
 */
struct hint_entry {
	uint32_t id;
	uint64_t off;
	uint64_t len; /**< > 0, at most the file's size - off; or HINT_WHOLE */
};

/** What a resolver found at a path (hint_resolve_cb). */
struct hint_target {
	uint32_t id;   /**< the file's object id, or HINT_NO_ID */
	bool is_dir;   /**< a directory of the listing (id is HINT_NO_ID) */
	uint64_t size; /**< the file's size in bytes */
};

/**
 * Resolves @path (@len > 0 bytes, relative to the mount root, normalized:
 * no empty, "." or ".." components, no leading '/') into @t, which the
 * caller set to id HINT_NO_ID, not a directory: the caller's object id
 * and size of the file there, or is_dir for a directory; left as it is
 * when the path is not in the listing.
 */
typedef void (*hint_resolve_cb)(void *arg, const char *path, size_t len,
				struct hint_target *t);

/** What a hint held besides its entries; all counted, none fatal. */
struct hint_report {
	uint64_t lines;	    /**< lines read */
	uint64_t entries;   /**< entries resolved to objects */
	uint64_t unknown;   /**< paths not in the listing */
	uint64_t too_long;  /**< lines over HINT_LINE_MAX bytes */
	uint64_t bad_utf8;  /**< lines that are not UTF-8 */
	uint64_t dotdot;    /**< paths with a ".." component */
	uint64_t outside;   /**< absolute paths not under the mount point */
	uint64_t bad_range; /**< range lines refused: malformed, length 0,
				 end past 2^64 - 1, offset at or past the
				 file's end, a range of a directory */
	int64_t epoch;	    /**< from "#hintfs v1 epoch=N", else -1 */
	bool replace;	    /**< the header says "replace": drop the
				 queued hints instead of queueing behind */
	char stream[HINT_STREAM_MAX + 1]; /**< from "stream=NAME", else "" */
	char first_bad[160]; /**< the first refused line, printable, with why */
};

/** Longest line taken as an entry (doc/design.md 2.2). */
#define HINT_LINE_MAX 4096

/** What a hint_path_cb says of an entry it was given. */
enum hint_take {
	HINT_UNKNOWN = 0,	 /**< not in the listing (counted unknown) */
	HINT_TAKEN = 1,		 /**< taken (counted in entries) */
	HINT_RANGE_DIR = 2,	 /**< a range of a directory (bad_range) */
	HINT_RANGE_PAST_END = 3, /**< a range whose offset is at or past the
				      file's end (bad_range) */
};

/**
 * Called by hint_foreach() with each entry's normalized path (@len 0 for
 * the mount root itself) and range: bytes [@off, @off + @rlen) of it, @rlen
 * > 0 and the end at most 2^64 - 1, or @off 0 and @rlen HINT_WHOLE for a line
 * that names the path alone (a range of 2^64 - 1 bytes from 0 is the
 * same: all of the file). Returns an enum hint_take, or a -errno that
 * stops. A line with a tab is first offered whole, as a path (a key may
 * hold tabs): only when that is HINT_UNKNOWN is it read as a range.
 */
typedef int (*hint_path_cb)(void *arg, const char *path, size_t len,
			    uint64_t off, uint64_t rlen);

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
 * '/') is stripped from absolute entries. Stores the entries, in file
 * order and with duplicates, in a malloc'd array *@entries (owned by the
 * caller; *@n of them; NULL when empty): a path line is its whole file, a
 * range line the bytes it names, cut at the file's size. Fills @rep.
 * Returns 0 or -ENOMEM; bad lines are counted in @rep, never fatal.
 * Thread-safe.
 */
int hint_parse(const char *text, size_t len, const char *mountpoint,
	       hint_resolve_cb resolve, void *arg, struct hint_entry **entries,
	       size_t *n, struct hint_report *rep);

#endif /* HINTFS_FS_HINT_H */
