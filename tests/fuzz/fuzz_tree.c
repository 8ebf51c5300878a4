/*
 * tests/fuzz/fuzz_tree.c - libFuzzer target for the namespace builder
 * (fs/tree.c, doc/design.md 2.1).
 *
 * The input is a listing: keys separated by '\n' (any other byte, NUL
 * included, may be in a key). The tree is built from the keys in that
 * order and again in the reverse order, and must hold what fs/tree.h
 * promises: each folder's children contiguous, strictly increasing by
 * name, their parent right; every node found again by name from its
 * parent and by its path from the root; no more nodes than components;
 * and the two orders give one tree, node for node (a key's size is a hash
 * of the key, so a key listed twice is the same file either way), with
 * the same counts of keys left out.
 */
#include "fs/tree.h"
#include "fuzz.h"

#include <string.h>

/* Keys at most: a listing of thousands says nothing more than one of
 * hundreds here, and each key is walked several times. */
#define FUZZ_TREE_KEYS 512

static uint64_t key_size(const char *k, size_t len)
{
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)k[i]) * 1099511628211ull;
	return h;
}

static struct tree *build(const char *const *keys, const size_t *lens, size_t n,
			  bool reverse, size_t *components)
{
	struct tree_builder *b = tree_builder_create(".hintfs");
	struct tree *t = NULL;

	FUZZ_CHECK(b != NULL);
	*components = 0;
	for (size_t i = 0; i < n; i++) {
		size_t k = reverse ? n - 1 - i : i;

		FUZZ_CHECK(tree_builder_add(b, keys[k], lens[k],
					    key_size(keys[k], lens[k]), 0,
					    "\"e\"") == 0);
		for (size_t j = 0; j < lens[k]; j++)
			*components += keys[k][j] == '/';
		*components += 1;
	}
	FUZZ_CHECK(tree_build(b, 0, &t) == 0);
	return t;
}

static void check_tree(const struct tree *t, size_t components)
{
	uint32_t count = tree_count(t);
	static char path[1 << 16];

	FUZZ_CHECK(count >= 1 && count <= components + 1);
	FUZZ_CHECK(tree_node(t, 0)->is_dir && !tree_node(t, count));
	for (uint32_t i = 0; i < count; i++) {
		const struct tree_node *d = tree_node(t, i);

		if (!d->is_dir) {
			FUZZ_CHECK(d->n_children == 0);
			continue;
		}
		FUZZ_CHECK(d->n_children <= count &&
			   d->first_child <= count - d->n_children);
		for (uint32_t c = 0; c < d->n_children; c++) {
			uint32_t idx = d->first_child + c;
			const struct tree_node *n = tree_node(t, idx);

			FUZZ_CHECK(idx > i && n->parent == i);
			FUZZ_CHECK(n->name_len > 0 && n->name_len <= 255);
			FUZZ_CHECK(tree_lookup(t, i, tree_name(t, n),
					       n->name_len) == idx);
			if (c) {
				const struct tree_node *p =
				    tree_node(t, idx - 1);
				size_t m = p->name_len < n->name_len
					       ? p->name_len
					       : n->name_len;
				int cmp =
				    memcmp(tree_name(t, p), tree_name(t, n), m);

				FUZZ_CHECK(
				    cmp < 0 ||
				    (cmp == 0 && p->name_len < n->name_len));
			}
		}
	}
	/* Every node comes back by its path, walked from the root. */
	for (uint32_t i = 1; i < count; i++) {
		int len = tree_path(t, i, "", path, sizeof(path));
		uint32_t cur = 0;
		const char *p = path, *end;

		FUZZ_CHECK(len > 0);
		end = path + len;
		while (p < end) {
			const char *sep = memchr(p, '/', (size_t)(end - p));
			size_t n = (size_t)((sep ? sep : end) - p);

			cur = tree_lookup(t, cur, p, n);
			FUZZ_CHECK(cur != 0);
			p += n + 1;
		}
		FUZZ_CHECK(cur == i);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *keys[FUZZ_TREE_KEYS];
	size_t lens[FUZZ_TREE_KEYS], n = 0, comp_a, comp_b;
	const char *p = (const char *)data, *end = p + size;
	struct tree *a, *b;

	while (p < end && n < FUZZ_TREE_KEYS) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));

		keys[n] = p;
		lens[n] = (size_t)((nl ? nl : end) - p);
		n++;
		p += lens[n - 1] + 1;
	}
	a = build(keys, lens, n, false, &comp_a);
	b = build(keys, lens, n, true, &comp_b);
	check_tree(a, comp_a);
	check_tree(b, comp_b);
	FUZZ_CHECK(tree_count(a) == tree_count(b));
	for (uint32_t i = 0; i < tree_count(a); i++) {
		const struct tree_node *x = tree_node(a, i);
		const struct tree_node *y = tree_node(b, i);

		FUZZ_CHECK(
		    x->is_dir == y->is_dir && x->size == y->size &&
		    x->parent == y->parent && x->n_children == y->n_children &&
		    x->name_len == y->name_len &&
		    !memcmp(tree_name(a, x), tree_name(b, y), x->name_len));
	}
	FUZZ_CHECK(!memcmp(tree_skips(a), tree_skips(b),
			   offsetof(struct tree_skips, first_bad)));
	tree_destroy(a);
	tree_destroy(b);
	return 0;
}
