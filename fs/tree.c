/*
 * fs/tree.c - builds the immutable directory tree from a bucket listing.
 *
 * Owns the namespace rules of doc/design.md 2.1: directories implied by '/'
 * and by "dir/" markers, a directory shadowing a file of the same name,
 * keys that cannot be paths counted and left out.
 *
 * Building uses a hash table keyed by (parent, name) over temporary nodes
 * linked to their children; tree_build() then lays the nodes out breadth
 * first so that each directory's children are contiguous and sorted.
 * Invariant of a built tree: for every directory d and every i <
 * d.n_children, node[d.first_child + i].parent == d, and names increase
 * strictly with i.
 */
#include "fs/tree.h"
#include "common/buf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* A builder node: a tree_node plus the links used while building. */
struct bnode {
	struct tree_node n;
	uint32_t child;	  /* first child in the build-time list, 0 = none */
	uint32_t sibling; /* next sibling in that list, 0 = none */
	bool has_file;	  /* a file key landed here (maybe shadowed later) */
};

struct tree_builder {
	struct bnode *nodes; /* [0] is the root */
	uint32_t n_nodes;
	uint32_t cap_nodes;
	uint32_t *slots;  /* hash table of node index + 1; 0 = empty */
	uint32_t n_slots; /* a power of two, > 2 * n_nodes */
	struct buf arena; /* names and ETags; arena.data[0] = "" */
	char *reserved;	  /* name the root may not hold, or NULL */
	struct tree_skips skips;
	/* The folder of the last key added ("a/b/", with its '/'), and its
	 * node: a listing comes sorted, so the next key is most often in
	 * it, and need not be walked down to again. */
	char last_dir[1024];
	size_t last_dir_len; /* 0: none */
	uint32_t last_dir_idx;
};

struct tree {
	struct tree_node *nodes;
	uint32_t n_nodes;
	char *arena;
	struct tree_skips skips;
	uint64_t n_files;
	uint64_t n_bytes;
};

/* S3 keys are at most 1,024 bytes, but a path component is limited to
 * NAME_MAX by the kernel: longer ones cannot be looked up. */
#define TREE_NAME_MAX 255

static uint32_t hash_name(uint32_t parent, const char *name, size_t len)
{
	uint32_t h = 2166136261u ^ parent; /* FNV-1a, seeded by the parent */

	for (size_t i = 0; i < len; i++) {
		h ^= (unsigned char)name[i];
		h *= 16777619u;
	}
	return h;
}

static int arena_put(struct tree_builder *b, const char *s, size_t len,
		     bool nul, uint32_t *off)
{
	size_t need = b->arena.len + len + (nul ? 1 : 0);

	if (need > UINT32_MAX)
		return -EFBIG;
	*off = (uint32_t)b->arena.len;
	if (buf_append(&b->arena, s, len) ||
	    (nul && buf_append(&b->arena, "", 1)))
		return -ENOMEM;
	return 0;
}

struct tree_builder *tree_builder_create(const char *reserved_root_name)
{
	struct tree_builder *b = calloc(1, sizeof(*b));

	if (!b)
		return NULL;
	b->cap_nodes = 1024;
	b->n_slots = 4096;
	b->nodes = calloc(b->cap_nodes, sizeof(*b->nodes));
	b->slots = calloc(b->n_slots, sizeof(*b->slots));
	/* 64 KiB first: a small dataset's names never move. */
	if (!buf_reserve(&b->arena, 65536))
		buf_append(&b->arena, "", 1); /* arena.data[0] = "" */
	if (reserved_root_name)
		b->reserved = strdup(reserved_root_name);
	if (!b->nodes || !b->slots || !b->arena.data ||
	    (reserved_root_name && !b->reserved)) {
		tree_builder_destroy(b);
		return NULL;
	}
	b->n_nodes = 1;
	b->nodes[0].n.is_dir = true;
	return b;
}

void tree_builder_destroy(struct tree_builder *b)
{
	if (!b)
		return;
	free(b->nodes);
	free(b->slots);
	buf_fini(&b->arena);
	free(b->reserved);
	free(b);
}

static bool name_eq(const struct tree_builder *b, const struct bnode *n,
		    const char *name, size_t len)
{
	return n->n.name_len == len &&
	       !memcmp(b->arena.data + n->n.name_off, name, len);
}

static int rehash(struct tree_builder *b)
{
	uint32_t n_slots = b->n_slots * 2;
	uint32_t *slots = calloc(n_slots, sizeof(*slots));

	if (!slots)
		return -ENOMEM;
	for (uint32_t i = 1; i < b->n_nodes; i++) {
		const struct bnode *n = &b->nodes[i];
		uint32_t h = hash_name(
		    n->n.parent, b->arena.data + n->n.name_off, n->n.name_len);

		while (slots[h & (n_slots - 1)])
			h++;
		slots[h & (n_slots - 1)] = i + 1;
	}
	free(b->slots);
	b->slots = slots;
	b->n_slots = n_slots;
	return 0;
}

/*
 * Finds the child @name of @parent, creating it (as a directory when
 * @dir) when absent. Returns the index in *@out, or -errno.
 */
static int find_or_add(struct tree_builder *b, uint32_t parent,
		       const char *name, size_t len, bool dir, uint32_t *out)
{
	uint32_t h = hash_name(parent, name, len);
	uint32_t idx;
	struct bnode *n;
	int rc;

	for (;; h++) {
		uint32_t s = b->slots[h & (b->n_slots - 1)];

		if (!s)
			break;
		n = &b->nodes[s - 1];
		if (n->n.parent == parent && name_eq(b, n, name, len)) {
			*out = s - 1;
			return 0;
		}
	}
	/* Index 0 is the root and UINT32_MAX would overflow inode numbers. */
	if (b->n_nodes >= UINT32_MAX - 1)
		return -EFBIG;
	if (b->n_nodes == b->cap_nodes) {
		uint32_t cap = b->cap_nodes > UINT32_MAX / 2 ? UINT32_MAX
							     : b->cap_nodes * 2;
		struct bnode *nn = realloc(b->nodes, (size_t)cap * sizeof(*nn));

		if (!nn)
			return -ENOMEM;
		b->nodes = nn;
		b->cap_nodes = cap;
	}
	idx = b->n_nodes;
	n = &b->nodes[idx];
	memset(n, 0, sizeof(*n));
	rc = arena_put(b, name, len, false, &n->n.name_off);
	if (rc)
		return rc;
	n->n.name_len = (uint16_t)len;
	n->n.parent = parent;
	n->n.is_dir = dir;
	n->sibling = b->nodes[parent].child;
	b->nodes[parent].child = idx;
	b->nodes[parent].n.n_children++;
	b->n_nodes++;
	b->slots[h & (b->n_slots - 1)] = idx + 1;
	*out = idx;
	return b->n_nodes * 2 > b->n_slots ? rehash(b) : 0;
}

/* A file turned out to be a directory too: the directory wins. */
static void make_dir(struct tree_builder *b, struct bnode *n)
{
	if (n->n.is_dir)
		return;
	n->n.is_dir = true;
	if (n->has_file) {
		n->has_file = false;
		n->n.size = 0;
		n->n.etag_off = 0;
		b->skips.shadowed++;
	}
}

static void note_bad(struct tree_builder *b, const char *path, size_t len)
{
	size_t j = 0;

	if (b->skips.bad_path++)
		return;
	/* Keep it printable: the key may hold control bytes. */
	for (size_t i = 0; i < len && j + 5 < sizeof(b->skips.first_bad); i++) {
		unsigned char ch = (unsigned char)path[i];

		if (ch < 0x20 || ch == 0x7f) {
			static const char hex[] = "0123456789abcdef";

			b->skips.first_bad[j++] = '\\';
			b->skips.first_bad[j++] = 'x';
			b->skips.first_bad[j++] = hex[ch >> 4];
			b->skips.first_bad[j++] = hex[ch & 15];
		} else {
			b->skips.first_bad[j++] = (char)ch;
		}
	}
	b->skips.first_bad[j] = '\0';
}

/* Whether every '/'-separated component of @path can be a file name. */
static bool path_ok(const char *path, size_t len)
{
	size_t start = 0;

	if (len == 0 || memchr(path, '\0', len))
		return false;
	for (size_t i = 0; i <= len; i++) {
		if (i < len && path[i] != '/')
			continue;
		size_t clen = i - start;
		const char *c = path + start;

		if (clen == 0 || clen > TREE_NAME_MAX ||
		    (clen == 1 && c[0] == '.') ||
		    (clen == 2 && c[0] == '.' && c[1] == '.'))
			return false;
		start = i + 1;
	}
	return true;
}

int tree_builder_add(struct tree_builder *b, const char *path, size_t len,
		     uint64_t size, int64_t mtime, const char *etag)
{
	bool marker = len > 0 && path[len - 1] == '/';
	uint32_t cur = 0, idx;
	size_t start = 0, dir_len;
	const char *slash;
	int rc;

	if (marker) {
		len--;
		if (len == 0)
			return 0; /* the marker of the mount's root itself */
	}
	if (!path_ok(path, len)) {
		note_bad(b, path, len + marker);
		return 0;
	}
	if (b->reserved) {
		const char *sep = memchr(path, '/', len);
		size_t first = sep ? (size_t)(sep - path) : len;

		if (first == strlen(b->reserved) &&
		    !memcmp(path, b->reserved, first)) {
			b->skips.reserved++;
			return 0;
		}
	}
	/* In the folder of the key before: start at its node (directories
	 * stay directories, so it is one still). */
	slash = memrchr(path, '/', len);
	dir_len = slash ? (size_t)(slash - path) + 1 : 0;
	if (dir_len && dir_len == b->last_dir_len &&
	    !memcmp(path, b->last_dir, dir_len)) {
		cur = b->last_dir_idx;
		start = dir_len;
	}
	for (size_t i = start; i <= len; i++) {
		if (i < len && path[i] != '/')
			continue;
		bool last = i == len;
		bool dir = !last || marker;

		rc = find_or_add(b, cur, path + start, i - start, dir, &idx);
		if (rc)
			return rc;
		if (last && dir_len && dir_len <= sizeof(b->last_dir)) {
			memcpy(b->last_dir, path, dir_len);
			b->last_dir_len = dir_len;
			b->last_dir_idx = cur;
		}
		struct bnode *n = &b->nodes[idx];

		if (dir) {
			make_dir(b, n);
		} else if (n->n.is_dir || n->has_file) {
			/* Hidden by a directory (or a duplicate listing). */
			b->skips.shadowed++;
		} else {
			n->has_file = true;
			n->n.size = size;
			n->n.mtime = mtime;
			rc = arena_put(b, etag, strlen(etag), true,
				       &n->n.etag_off);
			if (rc)
				return rc;
		}
		cur = idx;
		start = i + 1;
	}
	return 0;
}

static int cmp_child(const void *a, const void *bb, void *arg)
{
	const struct tree_builder *b = arg;
	const struct tree_node *x = &b->nodes[*(const uint32_t *)a].n;
	const struct tree_node *y = &b->nodes[*(const uint32_t *)bb].n;
	size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
	int c =
	    memcmp(b->arena.data + x->name_off, b->arena.data + y->name_off, n);

	return c ? c : (int)x->name_len - (int)y->name_len;
}

int tree_build(struct tree_builder *b, int64_t dir_mtime, struct tree **out)
{
	struct tree *t = calloc(1, sizeof(*t));
	uint32_t *order = NULL; /* order[final index] = builder index */
	uint32_t next = 1;
	int rc = -ENOMEM;

	if (!t)
		goto out;
	t->nodes = malloc((size_t)b->n_nodes * sizeof(*t->nodes));
	order = malloc((size_t)b->n_nodes * sizeof(*order));
	if (!t->nodes || !order)
		goto out;

	/* Breadth first: the final array is its own queue. */
	order[0] = 0;
	for (uint32_t i = 0; i < next; i++) {
		struct bnode *bn = &b->nodes[order[i]];
		struct tree_node *n = &t->nodes[i];
		uint32_t first = next;

		*n = bn->n;
		if (n->is_dir) {
			n->mtime = dir_mtime;
			n->first_child = first;
			for (uint32_t c = bn->child; c; c = b->nodes[c].sibling)
				order[next++] = c;
			qsort_r(order + first, next - first, sizeof(*order),
				cmp_child, b);
		} else {
			t->n_files++;
			t->n_bytes += n->size;
		}
	}
	/* Parents were builder indices; make them final ones. */
	for (uint32_t i = 0; i < next; i++) {
		const struct tree_node *n = &t->nodes[i];

		for (uint32_t c = 0; n->is_dir && c < n->n_children; c++)
			t->nodes[n->first_child + c].parent = i;
	}
	t->n_nodes = next;
	t->skips = b->skips;
	t->arena = b->arena.data; /* the tree takes the bytes */
	b->arena = (struct buf){0};
	*out = t;
	t = NULL;
	rc = 0;
out:
	free(order);
	tree_destroy(t);
	tree_builder_destroy(b);
	return rc;
}

void tree_destroy(struct tree *t)
{
	if (!t)
		return;
	free(t->nodes);
	free(t->arena);
	free(t);
}

const struct tree_skips *tree_skips(const struct tree *t)
{
	return &t->skips;
}

uint32_t tree_count(const struct tree *t)
{
	return t->n_nodes;
}

void tree_totals(const struct tree *t, uint64_t *files, uint64_t *bytes)
{
	*files = t->n_files;
	*bytes = t->n_bytes;
}

const struct tree_node *tree_node(const struct tree *t, uint32_t idx)
{
	return idx < t->n_nodes ? &t->nodes[idx] : NULL;
}

const char *tree_name(const struct tree *t, const struct tree_node *n)
{
	return t->arena + n->name_off;
}

const char *tree_etag(const struct tree *t, const struct tree_node *n)
{
	return t->arena + n->etag_off;
}

uint32_t tree_lookup(const struct tree *t, uint32_t dir, const char *name,
		     size_t len)
{
	const struct tree_node *d = tree_node(t, dir);
	uint32_t lo, hi;

	if (!d || !d->is_dir)
		return 0;
	lo = d->first_child;
	hi = d->first_child + d->n_children;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		const struct tree_node *m = &t->nodes[mid];
		size_t n = m->name_len < len ? m->name_len : len;
		int c = memcmp(t->arena + m->name_off, name, n);

		if (!c)
			c = (int)m->name_len - (int)len;
		if (!c)
			return mid;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return 0;
}

int tree_path(const struct tree *t, uint32_t idx, const char *prefix, char *buf,
	      size_t cap)
{
	size_t plen = strlen(prefix), len = plen, pos;

	/* First the length, then fill from the end towards the prefix. */
	for (uint32_t i = idx; i != 0; i = t->nodes[i].parent)
		len += t->nodes[i].name_len + (i == idx ? 0 : 1);
	if (len + 1 > cap)
		return -ENAMETOOLONG;
	memcpy(buf, prefix, plen);
	buf[len] = '\0';
	pos = len;
	for (uint32_t i = idx; i != 0; i = t->nodes[i].parent) {
		const struct tree_node *n = &t->nodes[i];

		if (i != idx)
			buf[--pos] = '/';
		pos -= n->name_len;
		memcpy(buf + pos, t->arena + n->name_off, n->name_len);
	}
	return (int)len;
}
