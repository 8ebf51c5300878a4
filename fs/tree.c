/*
 * fs/tree.c - builds the immutable directory tree from a bucket listing.
 *
 * Owns the namespace rules of doc/design.md 2.1: directories implied by '/'
 * and by "dir/" markers, a directory shadowing a file of the same name,
 * keys that cannot be paths counted and left out.
 *
 * Building uses a hash table keyed by (parent, name) over the directories
 * only, and temporary nodes linked to their parent's list of children: a
 * file is added with no lookup (a listing is almost all files, and a
 * lookup per file was a cache miss in a table of millions: half of a warm
 * mount of 1,281,167 keys). tree_build() then lays the nodes out breadth
 * first so that each directory's children are contiguous and sorted, and
 * settles names that came twice there, where they are neighbours: a
 * directory hides a file of its name, the first listed of two files wins.
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
	uint32_t child;	  /* last child added (the list runs backwards),
			     0 = none */
	uint32_t sibling; /* the child added before this one, 0 = none */
};

struct tree_builder {
	struct bnode *nodes; /* [0] is the root */
	uint32_t n_nodes;
	uint32_t cap_nodes;
	uint32_t *slots;  /* hash table of directories: index + 1; 0 = empty */
	uint32_t n_slots; /* a power of two, > 2 * n_dirs */
	uint32_t n_dirs;
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
	b->n_slots = 256;
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

/* Makes the node array hold @cap nodes (never fewer than it holds). */
static int nodes_cap(struct tree_builder *b, uint32_t cap)
{
	struct bnode *nn;

	if (cap <= b->cap_nodes)
		return 0;
	nn = realloc(b->nodes, (size_t)cap * sizeof(*nn));
	if (!nn)
		return -ENOMEM;
	b->nodes = nn;
	b->cap_nodes = cap;
	return 0;
}

int tree_builder_reserve(struct tree_builder *b, uint64_t n_keys,
			 uint64_t name_bytes)
{
	uint64_t cap = n_keys + 1 + n_keys / 64; /* folders: a guess */

	if (nodes_cap(b, cap > UINT32_MAX - 1 ? UINT32_MAX - 1 : (uint32_t)cap))
		return -ENOMEM;
	if (name_bytes < UINT32_MAX && buf_reserve(&b->arena, name_bytes))
		return -ENOMEM;
	return 0;
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

		if (!n->n.is_dir)
			continue;
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

/* Appends a node named @name to @parent's children. */
static int new_node(struct tree_builder *b, uint32_t parent, const char *name,
		    size_t len, bool dir, uint32_t *out)
{
	struct bnode *n;
	uint32_t idx;
	int rc;

	/* Index 0 is the root and UINT32_MAX would overflow inode numbers. */
	if (b->n_nodes >= UINT32_MAX - 1)
		return -EFBIG;
	if (b->n_nodes == b->cap_nodes &&
	    nodes_cap(b, b->cap_nodes > UINT32_MAX / 2 ? UINT32_MAX
						       : b->cap_nodes * 2))
		return -ENOMEM;
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
	*out = idx;
	return 0;
}

/*
 * Finds the directory @name in @parent, creating it when absent. Returns
 * its index in *@out, or -errno. A file of that name may exist too: it is
 * hidden when the tree is built.
 */
static int find_or_add_dir(struct tree_builder *b, uint32_t parent,
			   const char *name, size_t len, uint32_t *out)
{
	uint32_t h = hash_name(parent, name, len);
	int rc;

	for (;; h++) {
		uint32_t s = b->slots[h & (b->n_slots - 1)];
		const struct bnode *n;

		if (!s)
			break;
		n = &b->nodes[s - 1];
		if (n->n.parent == parent && name_eq(b, n, name, len)) {
			*out = s - 1;
			return 0;
		}
	}
	rc = new_node(b, parent, name, len, true, out);
	if (rc)
		return rc;
	b->slots[h & (b->n_slots - 1)] = *out + 1;
	b->n_dirs++;
	return b->n_dirs * 2 > b->n_slots ? rehash(b) : 0;
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

/* Whether @c (@len bytes, no '/') can be a file name. */
static bool name_ok(const char *c, size_t len)
{
	return len && len <= TREE_NAME_MAX && !memchr(c, '\0', len) &&
	       !(len == 1 && c[0] == '.') &&
	       !(len == 2 && c[0] == '.' && c[1] == '.');
}

/* Whether every '/'-separated component of @path can be a file name. */
static bool path_ok(const char *path, size_t len)
{
	const char *end = path + len, *sep;

	if (len == 0)
		return false;
	for (;; path = sep + 1) {
		sep = memchr(path, '/', (size_t)(end - path));
		if (!name_ok(path, (size_t)((sep ? sep : end) - path)))
			return false;
		if (!sep)
			return true;
	}
}

/* Whether @path's first component is the name the root may not hold. */
static bool reserved(const struct tree_builder *b, const char *path, size_t len)
{
	const char *sep = memchr(path, '/', len);
	size_t first = sep ? (size_t)(sep - path) : len;

	return b->reserved && first == strlen(b->reserved) &&
	       !memcmp(path, b->reserved, first);
}

int tree_builder_add(struct tree_builder *b, const char *path, size_t len,
		     uint64_t size, int64_t mtime, const char *etag)
{
	bool marker = len > 0 && path[len - 1] == '/';
	uint32_t cur = 0, idx;
	size_t dir_len;
	const char *slash, *name, *sep;
	int rc;

	if (marker) {
		len--;
		if (len == 0)
			return 0; /* the marker of the mount's root itself */
	}
	slash = memrchr(path, '/', len);
	dir_len = slash ? (size_t)(slash - path) + 1 : 0;
	name = path + dir_len;
	if (dir_len && dir_len == b->last_dir_len &&
	    !memcmp(path, b->last_dir, dir_len)) {
		/* In the folder of the key before, whose path was found good
		 * and not reserved: only the last name is new. Start at the
		 * folder's node (directories stay directories). */
		if (!name_ok(name, len - dir_len)) {
			note_bad(b, path, len + marker);
			return 0;
		}
		cur = b->last_dir_idx;
	} else {
		if (!path_ok(path, len)) {
			note_bad(b, path, len + marker);
			return 0;
		}
		if (reserved(b, path, len)) {
			b->skips.reserved++;
			return 0;
		}
		for (const char *c = path; c < name; c = sep + 1) {
			sep = memchr(c, '/', (size_t)(name - c));
			rc =
			    find_or_add_dir(b, cur, c, (size_t)(sep - c), &cur);
			if (rc)
				return rc;
		}
		if (dir_len && dir_len <= sizeof(b->last_dir)) {
			memcpy(b->last_dir, path, dir_len);
			b->last_dir_len = dir_len;
			b->last_dir_idx = cur;
		}
	}
	if (marker)
		return find_or_add_dir(b, cur, name, len - dir_len, &idx);
	rc = new_node(b, cur, name, len - dir_len, false, &idx);
	if (rc)
		return rc;
	b->nodes[idx].n.size = size;
	b->nodes[idx].n.mtime = mtime;
	return arena_put(b, etag, strlen(etag), true,
			 &b->nodes[idx].n.etag_off);
}

/* Children in name order (bytewise); of one name, a directory first,
 * then files in the order listed (builder indices grow with it). */
static int cmp_child(const void *a, const void *bb, void *arg)
{
	const struct tree_builder *b = arg;
	uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)bb;
	const struct tree_node *x = &b->nodes[i].n;
	const struct tree_node *y = &b->nodes[j].n;
	size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
	int c =
	    memcmp(b->arena.data + x->name_off, b->arena.data + y->name_off, n);

	if (c)
		return c;
	if (x->name_len != y->name_len)
		return (int)x->name_len - (int)y->name_len;
	if (x->is_dir != y->is_dir)
		return x->is_dir ? -1 : 1;
	return i < j ? -1 : i > j;
}

/*
 * Puts the children of one directory, order[0..n) in the order they were
 * added, into name order, and keeps one node of each name (the first
 * after sorting: cmp_child()), counting the others as shadowed. Returns
 * how many stay. A listing comes sorted, so most often no sort is needed.
 */
static uint32_t settle_children(struct tree_builder *b, uint32_t *order,
				uint32_t n)
{
	uint32_t w = n ? 1 : 0;
	bool sorted = true;

	for (uint32_t i = 1; i < n && sorted; i++)
		sorted = cmp_child(&order[i - 1], &order[i], b) < 0;
	if (!sorted)
		qsort_r(order, n, sizeof(*order), cmp_child, b);
	for (uint32_t i = 1; i < n; i++) {
		const struct bnode *p = &b->nodes[order[w - 1]];

		if (name_eq(b, &b->nodes[order[i]],
			    b->arena.data + p->n.name_off, p->n.name_len))
			b->skips.shadowed++;
		else
			order[w++] = order[i];
	}
	return w;
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
			/* The list runs backwards: fill from its end. */
			next += bn->n.n_children;
			for (uint32_t c = bn->child, k = next; c;
			     c = b->nodes[c].sibling)
				order[--k] = c;
			n->n_children =
			    settle_children(b, order + first, next - first);
			next = first + n->n_children;
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
