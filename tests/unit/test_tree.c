/*
 * tests/unit/test_tree.c - the namespace rules of doc/design.md 2.1 on the
 * tree builder: implied directories, markers, shadowing, skipped keys,
 * sorted lookups and key reconstruction.
 */
#include "fs/tree.h"
#include "check.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int add(struct tree_builder *b, const char *key, uint64_t size)
{
	return tree_builder_add(b, key, strlen(key), size, 1700000000, "\"e\"");
}

/* Index of @path ("a/b/c") from the root, or 0 when absent. */
static uint32_t find(const struct tree *t, const char *path)
{
	uint32_t cur = 0;

	while (*path) {
		size_t n = strcspn(path, "/");

		cur = tree_lookup(t, cur, path, n);
		if (!cur)
			return 0;
		path += n + (path[n] == '/');
	}
	return cur;
}

static void test_rules(void)
{
	struct tree_builder *b = tree_builder_create(".hintfs");
	struct tree *t = NULL;
	char big[300], key[400], path[512];
	const struct tree_node *n;

	memset(big, 'z', 299);
	big[299] = '\0';
	snprintf(key, sizeof(key), "ok/%s", big);

	CHECK(b != NULL);
	CHECK(add(b, "a/b/c.jpg", 10) == 0);
	CHECK(add(b, "a/b/d.jpg", 20) == 0);
	CHECK(add(b, "top", 5) == 0);
	CHECK(add(b, "empty-dir/", 0) == 0); /* marker only */
	CHECK(add(b, "x", 7) == 0);	     /* file ... */
	CHECK(add(b, "x/y", 8) == 0);	     /* ... shadowed by dir x */
	CHECK(add(b, "y/z", 8) == 0);	     /* dir y first ... */
	CHECK(add(b, "y", 9) == 0);	     /* ... then file y: hidden */
	CHECK(add(b, "a//b", 1) == 0);	     /* empty component */
	CHECK(add(b, "./x", 1) == 0);
	CHECK(add(b, "../y", 1) == 0);
	CHECK(add(b, "/abs", 1) == 0);
	CHECK(add(b, key, 1) == 0); /* 299-byte component */
	CHECK(tree_builder_add(b, "n\0ul", 4, 1, 0, "\"e\"") == 0);
	CHECK(add(b, ".hintfs/stats", 1) == 0); /* reserved at the root */
	CHECK(add(b, "sub/.hintfs", 1) == 0);	/* fine below it */
	CHECK(add(b, "/", 0) == 0);		/* marker of the root */
	CHECK(tree_build(b, 42, &t) == 0);

	const struct tree_skips *sk = tree_skips(t);
	CHECK(sk->bad_path == 6);
	CHECK(!strcmp(sk->first_bad, "a//b"));
	CHECK(sk->shadowed == 2);
	CHECK(sk->reserved == 1);

	/* root, a, a/b, 2 files, top, empty-dir, x, x/y, y, y/z, sub,
	 * sub/.hintfs */
	CHECK(tree_count(t) == 13);

	n = tree_node(t, find(t, "a/b/d.jpg"));
	CHECK(n && !n->is_dir && n->size == 20 && n->mtime == 1700000000);
	CHECK(n && !strcmp(tree_etag(t, n), "\"e\""));
	n = tree_node(t, find(t, "x"));
	CHECK(find(t, "x") && n->is_dir && n->size == 0 && n->mtime == 42);
	CHECK(find(t, "x/y") != 0);
	CHECK(find(t, "y") && tree_node(t, find(t, "y"))->is_dir);
	n = tree_node(t, find(t, "empty-dir"));
	CHECK(find(t, "empty-dir") && n->is_dir && n->n_children == 0);
	CHECK(find(t, ".hintfs") == 0);
	CHECK(find(t, "sub/.hintfs") != 0);
	CHECK(find(t, "nope") == 0);
	CHECK(find(t, "top/x") == 0); /* a file has no children */

	/* Children are sorted bytewise and their parent is right. */
	n = tree_node(t, 0);
	for (uint32_t i = 1; i < n->n_children; i++) {
		const struct tree_node *p =
		    tree_node(t, n->first_child + i - 1);
		const struct tree_node *q = tree_node(t, n->first_child + i);
		size_t m =
		    p->name_len < q->name_len ? p->name_len : q->name_len;
		int c = memcmp(tree_name(t, p), tree_name(t, q), m);

		CHECK(c < 0 || (c == 0 && p->name_len < q->name_len));
		CHECK(q->parent == 0);
	}

	/* Keys come back with the prefix for reads. */
	CHECK(tree_path(t, find(t, "a/b/c.jpg"), "data/", path, sizeof(path)) ==
	      (int)strlen("data/a/b/c.jpg"));
	CHECK(!strcmp(path, "data/a/b/c.jpg"));
	CHECK(tree_path(t, find(t, "top"), "", path, sizeof(path)) == 3);
	CHECK(!strcmp(path, "top"));
	CHECK(tree_path(t, find(t, "a/b/c.jpg"), "", path, 5) == -ENAMETOOLONG);

	uint64_t files, bytes;
	tree_totals(t, &files, &bytes);
	CHECK(files == 6 && bytes == 10 + 20 + 5 + 8 + 8 + 1);
	tree_destroy(t);
}

/* Many keys: the hash table grows and every key is still found. */
static void test_many(void)
{
	struct tree_builder *b = tree_builder_create(NULL);
	struct tree *t = NULL;
	char key[64];
	int missing = 0;

	for (int i = 0; i < 50000; i++) {
		snprintf(key, sizeof(key), "c%03d/img_%05d.jpg", i % 100, i);
		if (add(b, key, (uint64_t)i))
			missing++;
	}
	CHECK(missing == 0);
	CHECK(tree_build(b, 0, &t) == 0);
	CHECK(tree_count(t) == 1 + 100 + 50000);
	for (int i = 0; i < 50000; i += 7) {
		snprintf(key, sizeof(key), "c%03d/img_%05d.jpg", i % 100, i);
		uint32_t idx = find(t, key);

		if (!idx || tree_node(t, idx)->size != (uint64_t)i)
			missing++;
	}
	CHECK(missing == 0);
	tree_destroy(t);
}

/* The tree as text: every node's path, kind, size and ETag, in order. */
static void describe(const struct tree *t, char *out, size_t cap)
{
	size_t w = 0;
	char path[256];

	for (uint32_t i = 1; i < tree_count(t); i++) {
		const struct tree_node *n = tree_node(t, i);

		CHECK(tree_path(t, i, "", path, sizeof(path)) > 0);
		w += (size_t)snprintf(out + w, cap - w, "%s %c %llu %s\n", path,
				      n->is_dir ? 'd' : 'f',
				      (unsigned long long)n->size,
				      tree_etag(t, n));
		CHECK(w < cap);
	}
}

/*
 * Names that come twice are settled alike in any listing order: a
 * directory hides a file of its name, of two files the first listed
 * stays. A sorted listing and the same keys shuffled give one tree.
 */
static void test_any_order(void)
{
	static const char *const keys[] = {
	    "a.x", "a/b", "a/b/c", "a/b/d", "a/e/",  "a/e", "f", "f",
	    "g/",  "g/h", "i",	   "i/",    "j/k/l", "j/k", "m", "m/n/o",
	};
	const size_t n_keys = sizeof(keys) / sizeof(keys[0]);
	static char want[4096], got[4096];
	unsigned seed = 7;

	for (int round = 0; round < 20; round++) {
		struct tree_builder *b = tree_builder_create(NULL);
		size_t order[sizeof(keys) / sizeof(keys[0])];
		struct tree *t = NULL;

		for (size_t i = 0; i < n_keys; i++)
			order[i] = i;
		/* Round 0 lists in order; the others shuffle. */
		for (size_t i = n_keys - 1; round && i > 0; i--) {
			size_t j = (size_t)rand_r(&seed) % (i + 1),
			       k = order[i];

			order[i] = order[j];
			order[j] = k;
		}
		CHECK(b && tree_builder_reserve(b, n_keys, 256) == 0);
		for (size_t i = 0; i < n_keys; i++) {
			char etag[16];

			/* A key's size: where it is first in keys[]. */
			size_t first = 0;

			while (strcmp(keys[first], keys[order[i]]))
				first++;
			snprintf(etag, sizeof(etag), "\"%zu\"", first);
			CHECK(tree_builder_add(b, keys[order[i]],
					       strlen(keys[order[i]]), first, 0,
					       etag) == 0);
		}
		CHECK(tree_build(b, 0, &t) == 0);
		/* a/b, a/e, i, j/k, m hide files; f came twice. */
		CHECK(tree_skips(t)->shadowed == 6);
		describe(t, round ? got : want, sizeof(want));
		if (round)
			CHECK(!strcmp(got, want));
		else
			CHECK(strstr(want, "\nf f 6 \"6\"\n") &&
			      strstr(want, "a.x f 0 \"0\"\n") &&
			      strstr(want, "\na/b d 0 \n") &&
			      strstr(want, "\na/b/d f 3 \"3\"\n"));
		tree_destroy(t);
	}

	/* Two listings of one key: the first listed is the file. */
	struct tree_builder *b = tree_builder_create(NULL);
	struct tree *t = NULL;

	CHECK(b && add(b, "dup", 1) == 0 && add(b, "dup", 2) == 0);
	CHECK(tree_build(b, 0, &t) == 0);
	CHECK(tree_count(t) == 2 && tree_node(t, 1)->size == 1);
	CHECK(tree_skips(t)->shadowed == 1);
	tree_destroy(t);
}

int main(void)
{
	test_rules();
	test_many();
	test_any_order();
	return check_done();
}
