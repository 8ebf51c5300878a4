/**
 * fs/tree.h - the namespace: the listing of a bucket as a directory tree
 * (private to fs).
 *
 * A tree is built once from the listing and never changes afterwards, so
 * its nodes are never freed and a node's inode number is simply its index
 * + 1 (the root is FUSE_ROOT_ID, 1). Lookups and readdir take no lock.
 *
 * Layout: nodes sit in one array in breadth-first order; the children of a
 * directory are contiguous and sorted by name (bytewise), so lookup is a
 * binary search and readdir an index walk. Names and ETags live in one
 * arena. About 40 bytes per object plus its name and ETag (48 while it is
 * built).
 */
#ifndef HINTFS_FS_TREE_H
#define HINTFS_FS_TREE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tree_node {
	uint64_t size;	      /**< object size; 0 for directories */
	int64_t mtime;	      /**< LastModified; the build time for dirs */
	uint32_t parent;      /**< index of the parent; the root's is 0 */
	uint32_t first_child; /**< index of the first child (directories) */
	uint32_t n_children;  /**< number of children (directories) */
	uint32_t name_off;    /**< offset of the name in the arena */
	uint32_t etag_off;    /**< offset of the NUL-terminated ETag, quotes
				   included ("" for directories) */
	uint16_t name_len;    /**< bytes of the name (no NUL stored) */
	bool is_dir;
};

/** Why keys were left out of the namespace, for the mount-time warning. */
struct tree_skips {
	uint64_t bad_path; /**< empty, ".", ".." or >255-byte component, NUL */
	uint64_t shadowed; /**< a file hidden by a directory of its name */
	uint64_t reserved; /**< names hintfs keeps for itself (.hintfs) */
	char first_bad[128]; /**< the first bad key, printable, for the log */
};

struct tree_builder;
struct tree;

/**
 * Creates an empty builder. @reserved_root_name, if not NULL, is a name the
 * root may not hold (hintfs's control directory); a key that would create
 * it is counted in skips.reserved. Returns NULL when out of memory.
 */
struct tree_builder *tree_builder_create(const char *reserved_root_name);

/**
 * Adds a listed object whose key, with the mount's prefix already removed,
 * is @path (@len bytes, any byte). A @path ending in '/' is a directory
 * marker. Keys that cannot be paths are counted, not added. Returns 0 or
 * -ENOMEM or -EFBIG past 2^32-2 nodes or 4 GiB of names (the builder is
 * then only good for destroy). Not thread-safe.
 */
int tree_builder_add(struct tree_builder *b, const char *path, size_t len,
		     uint64_t size, int64_t mtime, const char *etag);

/**
 * Makes room at once for @n_keys more keys and @name_bytes of their names
 * and ETags, when a listing's size is known before it is read (a saved
 * one): no growth step copies the nodes then. Returns 0 or -ENOMEM (the
 * builder is unchanged and still good).
 */
int tree_builder_reserve(struct tree_builder *b, uint64_t n_keys,
			 uint64_t name_bytes);

/**
 * Turns the builder into a tree, destroying the builder in any case.
 * Directories get @dir_mtime. Returns 0 and stores the tree in *@out, or
 * -ENOMEM.
 */
int tree_build(struct tree_builder *b, int64_t dir_mtime, struct tree **out);

/** Frees a builder that was not built. Accepts NULL. */
void tree_builder_destroy(struct tree_builder *b);

/** Frees @t. Accepts NULL. */
void tree_destroy(struct tree *t);

/** What was skipped while building. Valid while @t lives. */
const struct tree_skips *tree_skips(const struct tree *t);

/** Number of nodes, the root included. */
uint32_t tree_count(const struct tree *t);

/** Number of files (non-directory nodes) and their total bytes. */
void tree_totals(const struct tree *t, uint64_t *files, uint64_t *bytes);

/** Node @idx, or NULL when out of range. Valid while @t lives. */
const struct tree_node *tree_node(const struct tree *t, uint32_t idx);

/** The name of @n (not NUL-terminated; n->name_len bytes). */
const char *tree_name(const struct tree *t, const struct tree_node *n);

/** The ETag of @n, NUL-terminated, quotes included. */
const char *tree_etag(const struct tree *t, const struct tree_node *n);

/**
 * Finds child @name (@len bytes) of directory @dir. Returns its index, or
 * 0 (never a child) when absent or @dir is not a directory.
 */
uint32_t tree_lookup(const struct tree *t, uint32_t dir, const char *name,
		     size_t len);

/**
 * Writes the path of node @idx (relative to the root, no leading '/')
 * after @prefix into @buf of @cap bytes, NUL-terminated. Returns its length,
 * or -ENAMETOOLONG when it does not fit.
 */
int tree_path(const struct tree *t, uint32_t idx, const char *prefix, char *buf,
	      size_t cap);

#endif /* HINTFS_FS_TREE_H */
