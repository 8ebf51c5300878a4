/*
 * tests/unit/test_options.c - the daemon's command line: URL and prefix,
 * precedence of options over AWS_* variables, implied path-style, generic
 * mount(8) options dropped, and a clear error for each bad value.
 */
#include "fs/options.h"
#include "common/retry.h"
#include "prefetch/engine_internal.h"
#include "prefetch/prefetch.h"
#include "prefetch/s3/s3_internal.h"
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ARGV(...) ((char *[]){"hintfs", __VA_ARGS__, NULL})
#define ARGC(...)                                                              \
	((int)(sizeof((char *[]){"hintfs", __VA_ARGS__}) / sizeof(char *)))
#define PARSE(o, err, ...)                                                     \
	opts_parse(ARGC(__VA_ARGS__), ARGV(__VA_ARGS__), (o), (err),           \
		   sizeof(err))

static void clear_env(void)
{
	static const char *const vars[] = {
	    "AWS_REGION",	   "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL",
	    "AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN",
	};
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);
	setenv("AWS_ACCESS_KEY_ID", "AKID", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "SECRET", 1);
}

static bool has_arg(const struct hintfs_opts *o, const char *s)
{
	for (int i = 0; i < o->fuse_args.argc; i++)
		if (strstr(o->fuse_args.argv[i], s))
			return true;
	return false;
}

static void test_good(void)
{
	struct hintfs_opts o;
	char err[256] = "";

	clear_env();
	CHECK(PARSE(&o, err, "s3://bkt/some//prefix/", "/mnt") != 0);
	CHECK(strstr(err, "empty component") != NULL);
	opts_fini(&o);

	CHECK(PARSE(&o, err, "s3://bkt/train/imgs/", "/mnt", "-f") == 0);
	CHECK(!strcmp(o.bucket, "bkt"));
	CHECK(!strcmp(o.prefix, "train/imgs/"));
	CHECK(!strcmp(o.region, "us-east-1"));
	CHECK(!strcmp(o.endpoint, "https://s3.us-east-1.amazonaws.com"));
	CHECK(!o.path_style && o.foreground && !o.debug);
	CHECK(o.max_threads == 64);
	CHECK(!strcmp(o.access_key, "AKID") && !strcmp(o.secret_key, "SECRET"));
	opts_fini(&o);

	CHECK(PARSE(&o, err, "s3://bkt", "/mnt", "-o", "list_workers=8") == 0);
	CHECK(o.list_workers == 8);
	opts_fini(&o);

	CHECK(PARSE(&o, err, "s3://bkt", "/mnt", "-o", "fetch_mem=1G") == 0);
	CHECK(o.fetch_mem == 1ull << 30);
	CHECK(o.pace_ms == 1000); /* options.def's default */
	opts_fini(&o);

	/* The pace: milliseconds, 0 for none (the whole window at once). */
	CHECK(PARSE(&o, err, "s3://bkt", "/mnt", "-o", "pace_ms=250") == 0);
	CHECK(o.pace_ms == 250);
	opts_fini(&o);
	CHECK(PARSE(&o, err, "s3://bkt", "/mnt", "-o", "pace_ms=0") == 0);
	CHECK(o.pace_ms == PF_PACE_OFF);
	opts_fini(&o);
	/* The shared cache tier: the origin's endpoint and region unless
	 * its own are given. */
	CHECK(PARSE(&o, err, "s3://bkt", "/mnt", "-o",
		    "endpoint=http://10.0.0.1:7480,"
		    "shared_cache=s3://near/a/b/") == 0);
	CHECK(!strcmp(o.tier_bucket, "near") && !strcmp(o.tier_prefix, "a/b/"));
	CHECK(!strcmp(o.tier_endpoint, "http://10.0.0.1:7480"));
	CHECK(!strcmp(o.tier_region, "us-east-1"));
	CHECK(o.tier_path_style && o.tier_hedge_ms == 100);
	opts_fini(&o);
	CHECK(PARSE(&o, err, "s3://bkt", "/mnt", "-o",
		    "shared_cache=s3://near,shared_cache_endpoint="
		    "https://s3express.example,shared_cache_region=eu-west-1,"
		    "shared_cache_hedge_ms=0") == 0);
	CHECK(!strcmp(o.tier_prefix, "") &&
	      !strcmp(o.tier_endpoint, "https://s3express.example"));
	CHECK(!strcmp(o.tier_region, "eu-west-1") && !o.tier_path_style);
	CHECK(o.tier_hedge_ms == 0 && !strcmp(o.region, "us-east-1"));
	CHECK(o.tier_key == NULL && o.tier_put_mem == 256ull << 20);
	opts_fini(&o);
	/* The cluster key: the file's bytes, all of them; the PUT queue. */
	char key_path[] = "/tmp/test_options_key.XXXXXX", opt[128];
	int fd = mkstemp(key_path);

	CHECK(fd >= 0 && write(fd, "0123456789abcdef\n", 17) == 17);
	close(fd);
	snprintf(opt, sizeof(opt),
		 "shared_cache=s3://near,shared_cache_key=%s,"
		 "shared_cache_put_mem=64M",
		 key_path);
	CHECK(PARSE(&o, err, "s3://bkt", "/mnt", "-o", opt) == 0);
	CHECK(o.tier_key_len == 17 &&
	      !memcmp(o.tier_key, "0123456789abcdef\n", 17));
	CHECK(o.tier_put_mem == 64ull << 20);
	opts_fini(&o);
	/* Readable or writable by group or others: refused at mount, one
	 * line that says what to do (mkstemp made it 0600). */
	char want[256];

	CHECK(chmod(key_path, 0644) == 0);
	CHECK(PARSE(&o, err, "s3://bkt", "/mnt", "-o", opt) != 0);
	snprintf(want, sizeof(want),
		 "tier key %s is accessible by others (mode 0644); "
		 "chmod 600 %s",
		 key_path, key_path);
	CHECK(!strcmp(err, want) && o.tier_key == NULL);
	opts_fini(&o);
	CHECK(chmod(key_path, 0620) == 0);
	CHECK(PARSE(&o, err, "s3://bkt", "/mnt", "-o", opt) != 0);
	CHECK(strstr(err, "(mode 0620); chmod 600") != NULL);
	opts_fini(&o);
	CHECK(chmod(key_path, 0400) == 0);
	CHECK(PARSE(&o, err, "s3://bkt", "/mnt", "-o", opt) == 0);
	CHECK(o.tier_key_len == 17);
	opts_fini(&o);
	CHECK(chmod(key_path, 0600) == 0);
	/* Shorter than 16 bytes: refused, never a weak key. */
	CHECK(truncate(key_path, 15) == 0);
	CHECK(PARSE(&o, err, "s3://bkt", "/mnt", "-o", opt) != 0);
	CHECK(strstr(err, "15 bytes, a key needs 16 at least") != NULL);
	opts_fini(&o);
	unlink(key_path);
	CHECK(PARSE(&o, err, "s3://bkt", "/mnt", "-o", opt) != 0);
	CHECK(strstr(err, "No such file") != NULL);
	opts_fini(&o);
	CHECK(PARSE(&o, err, "s3://bkt", "/mnt") == 0);
	CHECK(o.tier_bucket == NULL);
	opts_fini(&o);
	CHECK(PARSE(&o, err, "s3://bkt", "/mnt", "-o", "store_ahead=0") == 0);
	CHECK(o.store_ahead == 0);
	opts_fini(&o);
	CHECK(PARSE(&o, err, "s3://bkt", "/mnt", "-o", "store_ahead=16M") == 0);
	CHECK(o.store_ahead == 16u << 20);
	opts_fini(&o);

	CHECK(PARSE(&o, err, "s3://bkt", "/mnt") == 0);
	CHECK(!strcmp(o.prefix, "") && o.list_workers == 16);
	CHECK(o.store_ahead == 64u << 20);
	CHECK(!o.foreground && !o.path_style && !o.no_sign && !o.insecure);
	opts_fini(&o);

	/* Flags set after -f leave it alone (fuse_opt writes ints). */
	CHECK(PARSE(&o, err, "s3://bkt", "/mnt", "-f", "-o",
		    "path_style,no_sign,insecure") == 0);
	CHECK(o.foreground && o.path_style && o.no_sign && o.insecure);
	opts_fini(&o);

	CHECK(PARSE(&o, err, "s3://bkt/a", "/mnt") == 0);
	CHECK(!strcmp(o.prefix, "a/")); /* a "directory", not "a*" */
	opts_fini(&o);

	/* Environment, then options over it. */
	setenv("AWS_DEFAULT_REGION", "eu-west-1", 1);
	setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:7480", 1);
	CHECK(PARSE(&o, err, "s3://bkt", "/mnt") == 0);
	CHECK(!strcmp(o.region, "eu-west-1"));
	CHECK(!strcmp(o.endpoint, "http://127.0.0.1:7480"));
	CHECK(o.path_style); /* an IP cannot carry a bucket subdomain */
	opts_fini(&o);

	setenv("AWS_REGION", "ap-south-1", 1);
	setenv("AWS_ENDPOINT_URL_S3", "https://s3.example.com", 1);
	CHECK(PARSE(&o, err, "s3://bkt", "/mnt") == 0);
	CHECK(!strcmp(o.region, "ap-south-1"));
	CHECK(!strcmp(o.endpoint, "https://s3.example.com"));
	CHECK(!o.path_style);
	opts_fini(&o);

	CHECK(PARSE(&o, err, "s3://bkt", "/mnt", "-o",
		    "region=r1,endpoint=http://localhost:9000,max_threads=8") ==
	      0);
	CHECK(!strcmp(o.region, "r1"));
	CHECK(!strcmp(o.endpoint, "http://localhost:9000"));
	CHECK(o.path_style && o.max_threads == 8);
	opts_fini(&o);

	/* Generic mount(8) options are dropped; libfuse's are passed on. */
	CHECK(
	    PARSE(&o, err, "s3://bkt", "/mnt", "-o",
		  "rw,ro,nodev,nosuid,_netdev,x-systemd.automount,allow_other",
		  "-d") == 0);
	CHECK(has_arg(&o, "allow_other"));
	CHECK(!has_arg(&o, "_netdev") && !has_arg(&o, "x-systemd") &&
	      !has_arg(&o, "nosuid") && !has_arg(&o, "rw"));
	CHECK(o.debug && o.foreground);
	opts_fini(&o);

	/* Anonymous mounts need no keys. */
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");
	CHECK(PARSE(&o, err, "s3://bkt", "/mnt", "-o", "no_sign") == 0);
	CHECK(o.no_sign && !o.access_key);
	opts_fini(&o);
}

/* Each bad input fails with a message naming the problem. */
static void test_bad(void)
{
	static const struct {
		const char *a1, *a2, *a3, *a4, *msg;
	} cases[] = {
	    {"notans3url", "/mnt", NULL, NULL, "not an S3 URL"},
	    {"s3://", "/mnt", NULL, NULL, "bad bucket name"},
	    {"s3://b@d", "/mnt", NULL, NULL, "bad bucket name"},
	    {"s3://bkt", NULL, NULL, NULL, "missing the mount point"},
	    {"s3://bkt", "/mnt", "-o", "region=", "region= needs a value"},
	    {"s3://bkt", "/mnt", "-o", "endpoint=notaurl", "not an http"},
	    {"s3://bkt", "/mnt", "-o", "max_threads=0", "max_threads=0"},
	    {"s3://bkt", "/mnt", "-o", "max_threads=x", "max_threads=x"},
	    {"s3://bkt", "/mnt", "-o", "ca_file=", "ca_file= needs"},
	    {"s3://bkt", "/mnt", "-o", "fetch_mem=8M", "at least 16M"},
	    {"s3://bkt", "/mnt", "-o", "fetch_mem=8M", "or 0 for the default"},
	    {"s3://bkt", "/mnt", "-o", "fetch_mem=10%", "fetch_mem=10%"},
	    {"s3://bkt", "/mnt", "-o", "pace_ms=60001",
	     "-o pace_ms=60001: expected ms from 0"},
	    {"s3://bkt", "/mnt", "-o", "pace_ms=1s", "pace_ms=1s"},
	    {"s3://bkt", "/mnt", "-o", "list_workers=0",
	     "-o list_workers=0: expected a number from 1 to 256"},
	    {"s3://bkt", "/mnt", "-o", "list_workers=257", "list_workers=257"},
	    {"s3://bkt", "/mnt", "-o", "retry_time=0",
	     "-o retry_time=0: expected seconds from 1 to 86400"},
	    {"s3://bkt", "/mnt", "-o", "window=0",
	     "-o window=0: expected a number from 1 to 16777216"},
	    {"s3://bkt", "/mnt", "-o", "cache_size=0",
	     "-o cache_size=0: expected bytes with an optional K, M, G or "
	     "T, or a percentage"},
	    {"s3://bkt", "/mnt", "-o", "store_ahead=10%",
	     "-o store_ahead=10%: expected bytes with an optional K, M, G "
	     "or T, or 0 for off"},
	    {"s3://bkt", "/mnt", "-o", "store_ahead=x", "store_ahead=x"},
	    {"s3://bkt", "/mnt", "-o", "shared_cache=near", "not an S3 URL"},
	    {"s3://bkt", "/mnt", "-o", "shared_cache_region=x",
	     "need -o shared_cache="},
	    {"s3://bkt", "/mnt", "-o",
	     "shared_cache=s3://n,shared_cache_endpoint=ftp://x",
	     "shared cache endpoint 'ftp://x'"},
	    {"s3://bkt", "/mnt", "-o",
	     "shared_cache=s3://n,shared_cache_hedge_ms=x",
	     "shared_cache_hedge_ms=x"},
	    {"s3://bkt", "/mnt", "-o",
	     "shared_cache=s3://n,shared_cache_put_mem=10%",
	     "shared_cache_put_mem=10%: expected bytes"},
	    {"s3://bkt", "/mnt", "-o", "shared_cache_key=/k",
	     "need -o shared_cache="},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *argv[] = {"hintfs",
				(char *)cases[i].a1,
				(char *)cases[i].a2,
				(char *)cases[i].a3,
				(char *)cases[i].a4,
				NULL};
		int argc = 1;
		struct hintfs_opts o;
		char err[256] = "";

		clear_env();
		while (argv[argc])
			argc++;
		CHECK(opts_parse(argc, argv, &o, err, sizeof(err)) != 0);
		if (!strstr(err, cases[i].msg)) {
			fprintf(stderr, "case %zu: '%s' lacks '%s'\n", i, err,
				cases[i].msg);
			CHECK(0);
		}
		opts_fini(&o);
	}

	struct hintfs_opts o;
	char err[256] = "";

	clear_env();
	unsetenv("AWS_SECRET_ACCESS_KEY");
	CHECK(PARSE(&o, err, "s3://bkt", "/mnt") != 0);
	CHECK(strstr(err, "no credentials") != NULL);
	opts_fini(&o);
}

/*
 * Every number option holds its default from options.def when it is not
 * given: the daemon passes them on, so these are the values a mount runs
 * with (and what README.md, doc/ and the man pages say: test_docs.py).
 */
static void test_defaults(void)
{
	struct hintfs_opts o;
	char err[256] = "";

	clear_env();
	CHECK(PARSE(&o, err, "s3://bkt", "/mnt") == 0);
	CHECK(o.max_threads == 64 && o.max_inflight == 2048);
	CHECK(o.window == 4096 && o.pace_ms == 1000);
	CHECK(o.fetch_mem == 0 && o.store_ahead == 64ull << 20);
	CHECK(o.cache_size == 0 && o.cache_size_pct == 10);
	CHECK(o.retries == 10 && o.retry_time_s == 60);
	CHECK(o.stall_timeout_s == 5 && o.list_workers == 16);
	CHECK(o.process_timeout_s == 60 && o.tier_hedge_ms == 100);
	CHECK(o.tier_put_mem == 256ull << 20);
	/* The fallbacks of the layers below, for a caller that passes 0,
	 * are the same numbers (their reasons are written by them). */
	CHECK(o.window == PF_WINDOW_DEFAULT && o.pace_ms == PF_PACE_DEFAULT_MS);
	CHECK(o.max_inflight == PF_INFLIGHT_DEFAULT);
	/* fetch_mem: 0, the engine's, which follows the network threads
	 * (test_engine's test_fetch_mem_default). */
	CHECK(o.retries == RETRY_ATTEMPTS_DEFAULT);
	CHECK(o.retry_time_s * 1000 == RETRY_TIME_DEFAULT_MS);
	CHECK(o.stall_timeout_s == S3_STALL_DEFAULT_S);
	CHECK(o.list_workers == S3_LIST_WORKERS_DEFAULT);
	opts_fini(&o);
	/* Given, the value replaces the default, whatever its field's width. */
	CHECK(PARSE(&o, err, "s3://bkt", "/mnt", "-o",
		    "window=7,fetch_mem=3G,cache_size=200G,retry_time=9") == 0);
	CHECK(o.window == 7 && o.fetch_mem == 3ull << 30);
	CHECK(o.cache_size == 200ull << 30 && o.cache_size_pct == 0);
	CHECK(o.retry_time_s == 9 && o.max_inflight == 2048);
	opts_fini(&o);
}

/* --help: a line per option of the table, with its default. */
static void test_usage(void)
{
	static const char *const lines[] = {
	    "  -o window=N            hinted objects fetched ahead (default "
	    "4096)\n",
	    "  -o fetch_mem=SIZE      memory for objects in flight; 0: 256M "
	    "per network\n",
	    "  -o no_sign             anonymous requests, for public buckets\n",
	    "  -o shared_cache_put_mem=SIZE\n",
	    "  -o credential_process_timeout=S\n",
	    "  -o profile=NAME        AWS profile, also --profile NAME "
	    "(default:\n"
	    "                         $AWS_PROFILE, or default)\n",
	    "  -o allow_other, ...",
	};
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	CHECK(f != NULL);
	if (!f)
		return;
	opts_usage(f, "hintfs");
	fclose(f);
	CHECK(!strncmp(text, "usage: hintfs s3://", 19));
	for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++)
		if (!strstr(text, lines[i])) {
			fprintf(stderr, "--help lacks: %s\n", lines[i]);
			CHECK(0);
		}
	/* Wrapped to 79 columns. */
	for (char *l = text, *nl; (nl = strchr(l, '\n')); l = nl + 1)
		CHECK(nl - l <= 79 || !strncmp(l, "usage:", 6));
	free(text);
}

int main(void)
{
	test_good();
	test_bad();
	test_defaults();
	test_usage();
	return check_done();
}
