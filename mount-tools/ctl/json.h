/**
 * mount-tools/ctl/json.h - a small JSON reader for hintfs-ctl.
 *
 * Reads one JSON text (RFC 8259: objects, arrays, strings, numbers, true,
 * false, null) into a tree of nodes. It is what hintfs-ctl needs to read
 * .hintfs/stats and .hintfs/verify, and no more: no writer, no streaming.
 * Bad input gets an error naming the byte offset; nesting is limited so
 * that hostile input cannot exhaust the stack.
 */
#ifndef HINTFS_CTL_JSON_H
#define HINTFS_CTL_JSON_H

#include <stdbool.h>
#include <stddef.h>

enum json_type {
	JSON_NULL,
	JSON_FALSE,
	JSON_TRUE,
	JSON_NUMBER,
	JSON_STRING,
	JSON_ARRAY,
	JSON_OBJECT,
};

/** Deepest nesting of arrays and objects accepted. */
#define JSON_MAX_DEPTH 64

struct json {
	enum json_type type;
	char *key;  /**< the member's name inside an object, else NULL */
	char *str;  /**< STRING: the decoded UTF-8 (NUL-terminated; a
			 \u0000 inside ends it early); NUMBER: the
			 number as written, for exact output */
	size_t len; /**< STRING: decoded bytes */
	double num; /**< NUMBER: its value */
	size_t n;   /**< ARRAY, OBJECT: number of children */
	struct json *child; /**< ARRAY, OBJECT: the first child */
	struct json *next;  /**< the next sibling */
};

/**
 * Parses @len bytes of @text into a tree stored in *@out (free it with
 * json_free()). Returns 0; -EINVAL with a one-line reason in @err (@err_len
 * bytes) when @text is not one JSON value (surrounding white space is
 * fine); -ENOMEM. Thread-safe.
 */
int json_parse(const char *text, size_t len, struct json **out, char *err,
	       size_t err_len);

/** Frees a tree from json_parse(). Accepts NULL. */
void json_free(struct json *v);

/**
 * The node at dotted @path under @v ("cache.hits"; "" is @v itself), or
 * NULL when a member is missing or a step is not an object. The first
 * member of a name wins. The node belongs to the tree.
 */
const struct json *json_get(const struct json *v, const char *path);

/** The number at @path, or @dflt when it is missing or not a number. */
double json_num(const struct json *v, const char *path, double dflt);

/** Whether @path holds a number (then *@out is it). */
bool json_has_num(const struct json *v, const char *path, double *out);

/** The string at @path, or NULL. Belongs to the tree. */
const char *json_str(const struct json *v, const char *path);

#endif /* HINTFS_CTL_JSON_H */
