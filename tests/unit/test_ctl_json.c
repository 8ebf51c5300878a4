/*
 * tests/unit/test_ctl_json.c - hintfs-ctl's JSON reader: every kind of
 * value, escapes and surrogate pairs, numbers kept as written, dotted
 * lookups, a real stats document, and hostile input (truncation at every
 * byte, deep nesting, garbage) refused with an offset and never a crash.
 */
#include "json.h"
#include "check.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static struct json *parse(const char *text)
{
	struct json *v = NULL;
	char err[128];

	if (json_parse(text, strlen(text), &v, err, sizeof(err))) {
		fprintf(stderr, "parse failed: %s: %s\n", err, text);
		return NULL;
	}
	return v;
}

static bool refused(const char *text, size_t len, const char *want)
{
	struct json *v = NULL;
	char err[128] = "";
	int rc = json_parse(text, len, &v, err, sizeof(err));

	if (rc != -EINVAL || v) {
		json_free(v);
		return false;
	}
	if (want && !strstr(err, want)) {
		fprintf(stderr, "error '%s' lacks '%s'\n", err, want);
		return false;
	}
	return true;
}

static void test_values(void)
{
	struct json *v;
	const struct json *c;

	v = parse(
	    " {\"a\": 1, \"b\": [true, false, null, -0.5e+2, \"s\"],"
	    " \"c\": {\"d\": {\"e\": 18446744073709551615}}, \"a\": 2}\n");
	CHECK(v && v->type == JSON_OBJECT && v->n == 4);
	CHECK(json_num(v, "a", 0) == 1); /* the first of two wins */
	c = json_get(v, "b");
	CHECK(c && c->type == JSON_ARRAY && c->n == 5);
	CHECK(c->child->type == JSON_TRUE);
	CHECK(c->child->next->type == JSON_FALSE);
	CHECK(c->child->next->next->type == JSON_NULL);
	CHECK(c->child->next->next->next->num == -50);
	CHECK(!strcmp(c->child->next->next->next->str, "-0.5e+2"));
	CHECK(!strcmp(json_str(v, "b") ? "x" : "y", "y")); /* not a string */
	c = json_get(v, "c.d.e");
	CHECK(c && !strcmp(c->str, "18446744073709551615"));
	CHECK(json_get(v, "c.d.e.f") == NULL);
	CHECK(json_get(v, "c.x") == NULL);
	CHECK(json_get(v, "") == v);
	CHECK(json_num(v, "missing", 7) == 7);
	CHECK(json_num(v, "c", 7) == 7); /* not a number */
	json_free(v);

	v = parse("\"q\\\" b\\\\ s\\/ \\b\\f\\n\\r\\t \\u00e9 \\u20ac "
		  "\\ud83d\\ude00 \\ud800x\"");
	CHECK(v && v->type == JSON_STRING);
	CHECK(v &&
	      !strcmp(v->str, "q\" b\\ s/ \b\f\n\r\t \xc3\xa9 \xe2\x82\xac "
			      "\xf0\x9f\x98\x80 \xef\xbf\xbdx"));
	json_free(v);

	v = parse("[]");
	CHECK(v && v->type == JSON_ARRAY && v->n == 0 && !v->child);
	json_free(v);
	v = parse("{}");
	CHECK(v && v->type == JSON_OBJECT && v->n == 0);
	json_free(v);
	v = parse("0");
	CHECK(v && v->type == JSON_NUMBER && v->num == 0);
	json_free(v);
	/* Raw UTF-8 passes through. */
	v = parse("{\"k\\u00e9y\": \"\xc3\xa9t\xc3\xa9\"}");
	CHECK(v && !strcmp(v->child->key, "k\xc3\xa9y"));
	CHECK(v && !strcmp(json_str(v, "k\xc3\xa9y"), "\xc3\xa9t\xc3\xa9"));
	json_free(v);
}

static void test_bad(void)
{
	CHECK(refused("", 0, "unexpected end"));
	CHECK(refused("   ", 3, "unexpected end"));
	CHECK(refused("{\"a\" 1}", 7, "expected ':'"));
	CHECK(refused("{\"a\": 1,}", 9, "member name"));
	CHECK(refused("[1 2]", 5, "expected ','"));
	CHECK(refused("01", 2, "text after"));
	CHECK(refused("1.", 2, "no digit after"));
	CHECK(refused("1e", 2, "exponent"));
	CHECK(refused("-", 1, "bad number"));
	CHECK(refused("+1", 2, "unexpected character"));
	CHECK(refused("tru", 3, "bad literal"));
	CHECK(refused("nul", 3, "bad literal"));
	CHECK(refused("\"abc", 4, "unterminated"));
	CHECK(refused("\"a\nb\"", 5, "control character"));
	CHECK(refused("\"\\x\"", 4, "bad escape"));
	CHECK(refused("\"\\u12\"", 6, "\\u escape"));
	CHECK(refused("{} {}", 5, "text after"));
	CHECK(refused("{\"a\": 1}x", 9, "at byte 8"));
	/* A NUL inside the length is garbage, not an end. */
	CHECK(refused("[1]\0[2]", 7, "text after"));

	/* Nesting: 64 levels parse, 65 are refused, 100,000 do not crash. */
	{
		static char deep[200001];
		struct json *v = NULL;
		char err[128];

		for (int d = 64; d <= 65; d++) {
			memset(deep, '[', (size_t)d);
			memset(deep + d, ']', (size_t)d);
			CHECK((json_parse(deep, 2 * (size_t)d, &v, err,
					  sizeof(err)) == 0) == (d == 64));
			json_free(v);
			v = NULL;
		}
		memset(deep, '[', 100000);
		memset(deep + 100000, ']', 100000);
		CHECK(refused(deep, 200000, "nested deeper"));
	}
}

/* A stats document as the daemon writes it, cut at every byte: only the
 * whole parses, every prefix is refused cleanly. */
static void test_stats_and_truncation(void)
{
	static const char stats[] =
	    "{\n  \"version\": \"9.9.9\",\n  \"source\": \"s3://dev/a\\\"b\",\n"
	    "  \"listing\": {\"files\": 20, \"bytes\": 1000000, "
	    "\"from_cache\": "
	    "false, \"ms\": 5, \"mounted_at\": 1795298810},\n"
	    "  \"cache\": {\"dir\": \"/tmp/c\", \"objects\": 0, \"capacity\": "
	    "8138394820},\n  \"stalls\": {\"count\": 1, \"seconds\": "
	    "0.002326},\n"
	    "  \"hint\": {\"position\": 0, \"epoch\": -1, \"last\": "
	    "{\"entries\": 0}}\n}\n";
	size_t n = strlen(stats);
	struct json *v = parse(stats);

	CHECK(v != NULL);
	CHECK(!strcmp(json_str(v, "source"), "s3://dev/a\"b"));
	CHECK(json_num(v, "cache.capacity", 0) == 8138394820.0);
	CHECK(json_num(v, "stalls.seconds", 0) == 0.002326);
	CHECK(json_num(v, "hint.epoch", 0) == -1);
	CHECK(json_get(v, "listing.from_cache")->type == JSON_FALSE);
	json_free(v);

	for (size_t cut = 0; cut < n - 2; cut++) {
		struct json *w = NULL;
		char err[128];
		int rc = json_parse(stats, cut, &w, err, sizeof(err));

		CHECK(rc == -EINVAL && !w);
		json_free(w);
	}

	/* Random bytes from JSON's alphabet: never a crash or a leak. */
	srand(11);
	for (int round = 0; round < 20000; round++) {
		static const char alpha[] =
		    "{}[]\",:0123456789-.eE tfnul\\\"ab";
		char junk[64];
		size_t len = (size_t)(rand() % 64);
		struct json *w = NULL;
		char err[128];

		for (size_t i = 0; i < len; i++)
			junk[i] = alpha[rand() % (sizeof(alpha) - 1)];
		if (json_parse(junk, len, &w, err, sizeof(err)) == 0)
			CHECK(w != NULL);
		json_free(w);
	}
}

int main(void)
{
	test_values();
	test_bad();
	test_stats_and_truncation();
	return check_done();
}
