/*
 * fs/options.c - parses and checks the daemon's command line.
 *
 * Owns the rules that turn argv + AWS_* variables + profile files into one
 * configuration: precedence (option over environment over profile over
 * default; aws_config.c does the last three), the generic mount(8)
 * options that are accepted and ignored, and the checks that give a bad
 * value a clear one-line error before anything touches the network.
 */
#include "fs/options.h"

#include "common/fileio.h"
#include "common/log.h"
#include "prefetch/prefetch.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* 64 FUSE threads: reads block on the network for a round trip each, so
 * 16 reader threads plus kernel readahead need this many to never queue. */
#define OPTS_MAX_THREADS_DEFAULT 64
#define OPTS_MAX_THREADS_LIMIT 1024
/* The kernel's page cache filled ahead of opens (fs/store.c): 64 MiB is
 * ~600 files of ~100 KB, a third of a second at 2,000 files/s. Measured on
 * kernel 6.18: warm reads then never reach the daemon and a reader's rate
 * rose 1.2-3x, for the same daemon CPU per file (the copy into the page
 * cache moves from the reply to the push). */
#define OPTS_STORE_AHEAD_DEFAULT (64ull << 20)
/* A reader waits 100 ms on the shared cache tier before it reads the
 * origin: a near tier answers a 110 KB GET in a few ms and a 30 ms origin
 * in 35-60 ms, so past 100 ms the tier has lost; much less would send
 * GETs to the origin whenever the tier's node is briefly busy (the
 * issue's target is <= 1% origin GETs once the tier is warm). */
#define OPTS_TIER_HEDGE_MS_DEFAULT 100
#define OPTS_STORE_AHEAD_HELP "64M"

enum {
	KEY_FOREGROUND,
	KEY_DEBUG,
	KEY_HELP,
	KEY_VERSION,
};

#define OPT(t, field, val) { t, offsetof(struct hintfs_opts, field), val }

static const struct fuse_opt opt_spec[] = {
	OPT("endpoint=%s", endpoint, 0),
	OPT("region=%s", region, 0),
	OPT("ca_file=%s", ca_file, 0),
	OPT("max_threads=%s", max_threads_str, 0),
	OPT("cache_dir=%s", cache_dir, 0),
	OPT("cache_size=%s", cache_size_str, 0),
	OPT("store_ahead=%s", store_ahead_str, 0),
	OPT("hint=%s", hint_file, 0),
	OPT("max_inflight=%s", max_inflight_str, 0),
	OPT("window=%s", window_str, 0),
	OPT("pace_ms=%s", pace_str, 0),
	OPT("fetch_mem=%s", fetch_mem_str, 0),
	OPT("profile=%s", profile, 0),
	OPT("--profile %s", profile, 0),
	OPT("--profile=%s", profile, 0),
	OPT("credentials_file=%s", credentials_file, 0),
	OPT("config_file=%s", config_file, 0),
	OPT("relist", relist, 1),
	OPT("open_per_file", open_per_file, 1),
	OPT("retries=%s", retries_str, 0),
	OPT("retry_time=%s", retry_time_str, 0),
	OPT("stall_timeout=%s", stall_timeout_str, 0),
	OPT("list_workers=%s", list_workers_str, 0),
	OPT("credential_process_timeout=%s", process_timeout_str, 0),
	OPT("path_style", path_style, 1),
	OPT("no_sign", no_sign, 1),
	OPT("insecure", insecure, 1),
	OPT("shared_cache=%s", shared_cache, 0),
	OPT("shared_cache_endpoint=%s", tier_endpoint, 0),
	OPT("shared_cache_region=%s", tier_region, 0),
	OPT("shared_cache_profile=%s", tier_profile, 0),
	OPT("shared_cache_hedge_ms=%s", tier_hedge_str, 0),
	OPT("shared_cache_key=%s", tier_key_file, 0),
	OPT("shared_cache_put_mem=%s", tier_put_mem_str, 0),
	FUSE_OPT_KEY("-f", KEY_FOREGROUND),
	FUSE_OPT_KEY("-d", KEY_DEBUG),
	FUSE_OPT_KEY("debug", KEY_DEBUG),
	FUSE_OPT_KEY("-h", KEY_HELP),
	FUSE_OPT_KEY("--help", KEY_HELP),
	FUSE_OPT_KEY("-V", KEY_VERSION),
	FUSE_OPT_KEY("--version", KEY_VERSION),
	FUSE_OPT_END
};

/*
 * Options mount(8) and fstab pass to every filesystem. hintfs is always
 * read-only, has no devices, setuid files or executables to speak of, so
 * they change nothing; "rw" does not make it writable.
 */
static const char *const generic_opts[] = {
	"ro", "rw", "dev", "nodev", "suid", "nosuid", "exec", "noexec",
	"auto", "noauto", "user", "nouser", "users", "_netdev", "nofail",
	"atime", "noatime", "relatime", "norelatime", "strictatime",
	"diratime", "nodiratime", "sync", "async", "defaults",
};

static bool is_generic(const char *arg)
{
	if (!strncmp(arg, "x-", 2) || !strncmp(arg, "comment=", 8))
		return true;
	for (size_t i = 0; i < sizeof(generic_opts) / sizeof(generic_opts[0]); i++)
		if (!strcmp(arg, generic_opts[i]))
			return true;
	return false;
}

/*
 * Whether -o @arg tries to pass a credential ("secret_key=...",
 * "aws_session_token=..."). Such an option is refused by its name alone:
 * libfuse would echo an unknown option whole, and the value would stay
 * readable in /proc/PID/cmdline.
 */
static bool is_secret(const char *arg)
{
	static const char *const words[] = {
		"secret", "token", "access_key", "key_id", "passw",
	};
	size_t n = strcspn(arg, "=");

	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		if (memmem(arg, n, words[i], strlen(words[i])))
			return true;
	return false;
}

static int opt_proc(void *data, const char *arg, int key,
		    struct fuse_args *outargs)
{
	struct hintfs_opts *o = data;

	switch (key) {
	case FUSE_OPT_KEY_NONOPT:
		if (!o->source)
			return (o->source = strdup(arg)) ? 0 : -1;
		if (!o->mountpoint)
			return (o->mountpoint = strdup(arg)) ? 0 : -1;
		return 1; /* a third: fuse_session_new rejects it */
	case FUSE_OPT_KEY_OPT:
		if (is_secret(arg)) {
			if (!o->secret_opt[0])
				snprintf(o->secret_opt, sizeof(o->secret_opt),
					 "%.*s", (int)strcspn(arg, "="), arg);
			return 0;
		}
		return is_generic(arg) ? 0 : 1;
	case KEY_FOREGROUND:
		o->foreground = true;
		return 0;
	case KEY_DEBUG:
		o->debug = o->foreground = true;
		return 1; /* libfuse's own request trace */
	case KEY_HELP:
		o->help = true;
		return 0;
	case KEY_VERSION:
		o->version = true;
		return 0;
	default:
		return 1;
	}
}

static const char *env_first(const char *a, const char *b)
{
	const char *v = getenv(a);

	if (v && *v)
		return v;
	v = b ? getenv(b) : NULL;
	return v && *v ? v : NULL;
}

/* NOTE(s3): bucket names are 3-63 of [a-z0-9.-]; older regions and other
 * servers allow upper case and '_', so only what breaks a URL is refused. */
static bool bucket_ok(const char *b)
{
	if (!*b)
		return false;
	for (; *b; b++)
		if (!((*b >= 'a' && *b <= 'z') || (*b >= 'A' && *b <= 'Z') ||
		      (*b >= '0' && *b <= '9') || *b == '.' || *b == '-' ||
		      *b == '_'))
			return false;
	return true;
}

/* Splits "s3://bucket/some/prefix" (@url) into *@bucket and "some/prefix/"
 * in *@prefix, both malloc'd (freed by the caller, failure or not). */
static int parse_s3_url(const char *url, char **bucket, char **prefix,
			char *err, size_t err_len)
{
	const char *s = url, *slash;
	size_t plen;

	if (strncmp(s, "s3://", 5))
		return fail_einval(
		    err, err_len,
		    "'%s' is not an S3 URL: expected s3://BUCKET[/PREFIX]", s);
	s += 5;
	slash = strchr(s, '/');
	*bucket = slash ? strndup(s, slash - s) : strdup(s);
	if (!*bucket)
		return -ENOMEM;
	if (!bucket_ok(*bucket))
		return fail_einval(err, err_len, "'%s': bad bucket name", url);

	s = slash ? slash + 1 : "";
	while (*s == '/')
		s++;
	plen = strlen(s);
	while (plen && s[plen - 1] == '/')
		plen--;
	/* NOTE(s3): a prefix names a "directory": "a/b" mounts keys under
	 * "a/b/", not "a/bc". */
	*prefix = malloc(plen + 2);
	if (!*prefix)
		return -ENOMEM;
	memcpy(*prefix, s, plen);
	if (plen)
		(*prefix)[plen++] = '/';
	(*prefix)[plen] = '\0';
	if (strstr(*prefix, "//"))
		return fail_einval(err, err_len,
				   "'%s': empty component in the prefix", url);
	return 0;
}

static int parse_source(struct hintfs_opts *o, char *err, size_t err_len)
{
	return parse_s3_url(o->source, &o->bucket, &o->prefix, err, err_len);
}

/* Whether an endpoint's host is an IP address or localhost, where the
 * bucket cannot be a subdomain: then path-style is the only addressing. */
static bool endpoint_needs_path_style(const char *ep)
{
	const char *h = strstr(ep, "://");
	char host[256];
	size_t n;
	unsigned char addr[16];

	if (!h)
		return false;
	h += 3;
	if (*h == '[')
		return true;
	n = strcspn(h, ":/");
	if (n >= sizeof(host))
		return false;
	memcpy(host, h, n);
	host[n] = '\0';
	return !strcmp(host, "localhost") || inet_pton(AF_INET, host, addr) == 1;
}

/* A whole number in [lo, hi] from @s, or false. */
static bool parse_uint(const char *s, unsigned long long lo,
		       unsigned long long hi, unsigned long long *out)
{
	char *end;
	unsigned long long v;

	if (!*s || *s == '-')
		return false;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v < lo || v > hi)
		return false;
	*out = v;
	return true;
}

/*
 * -o NAME=MS: milliseconds from 0 (@zero says what 0 does) to 60000 in
 * *@ms. 0, or -EINVAL with the one-line error in @err.
 */
static int parse_ms_opt(const char *name, const char *s, const char *zero,
			unsigned int *ms, char *err, size_t err_len)
{
	unsigned long long v;

	if (!parse_uint(s, 0, 60000, &v))
		return fail_einval(err, err_len,
				   "-o %s=%s: expected ms from 0 (%s) to 60000",
				   name, s, zero);
	*ms = (unsigned int)v;
	return 0;
}

/* "200G", "512M", "1073741824", or "20%" (of the free space). */
static bool parse_size(const char *s, uint64_t *bytes, unsigned int *pct)
{
	unsigned long long v, mult = 1;
	char *end;

	if (!*s || *s == '-')
		return false;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return false;
	if (*end == '%' && end[1] == '\0') {
		if (v < 1 || v > 100)
			return false;
		*pct = (unsigned int)v;
		*bytes = 0;
		return true;
	}
	switch (*end) {
	case 'T': case 't': mult <<= 10; /* fall through */
	case 'G': case 'g': mult <<= 10; /* fall through */
	case 'M': case 'm': mult <<= 10; /* fall through */
	case 'K': case 'k': mult <<= 10; end++; break;
	default: break;
	}
	if (*end == 'B' || *end == 'b')
		end++;
	if (*end || v == 0 || v > UINT64_MAX / mult)
		return false;
	*bytes = v * mult;
	*pct = 0;
	return true;
}

/* FNV-1a over the endpoint and prefix: one cache directory per dataset. */
static uint32_t dataset_hash(const char *endpoint, const char *prefix)
{
	uint32_t h = 2166136261u;

	for (const char *p = endpoint; *p; p++)
		h = (h ^ (unsigned char)*p) * 16777619u;
	h = (h ^ '\n') * 16777619u;
	for (const char *p = prefix; *p; p++)
		h = (h ^ (unsigned char)*p) * 16777619u;
	return h;
}

/* $XDG_CACHE_HOME/hintfs/BUCKET-HASH, or ~/.cache/hintfs/BUCKET-HASH. */
static int default_cache_dir(struct hintfs_opts *o, char *err, size_t err_len)
{
	const char *base = env_first("XDG_CACHE_HOME", NULL);
	const char *home = aws_home_dir();
	uint32_t h = dataset_hash(o->endpoint, o->prefix);
	int n;

	if (base)
		n = asprintf(&o->cache_dir, "%s/hintfs/%s-%08x", base, o->bucket, h);
	else if (home)
		n = asprintf(&o->cache_dir, "%s/.cache/hintfs/%s-%08x", home,
			     o->bucket, h);
	else
		return fail_einval(err, err_len,
				   "no cache directory: set -o cache_dir= "
				   "(no XDG_CACHE_HOME and no home directory)");
	if (n < 0) {
		o->cache_dir = NULL;
		return -ENOMEM;
	}
	return 0;
}

/*
 * The shared cache tier (-o shared_cache=s3://BUCKET[/PREFIX]): its own
 * endpoint, region and profile, each defaulting to the profile's and then
 * the origin's; its credentials are the origin's unless a profile is
 * named (then that profile's chain).
 */
static int resolve_tier(struct hintfs_opts *o, char *err, size_t err_len)
{
	const char *ep, *rg;
	int rc;

	if (!o->shared_cache) {
		if (o->tier_endpoint || o->tier_region || o->tier_profile ||
		    o->tier_hedge_str || o->tier_key_file ||
		    o->tier_put_mem_str)
			return fail_einval(err, err_len,
					   "the shared_cache_* options need "
					   "-o shared_cache=s3://BUCKET[/PREFIX]");
		return 0;
	}
	rc = parse_s3_url(o->shared_cache, &o->tier_bucket, &o->tier_prefix,
			  err, err_len);
	if (rc)
		return rc;
	o->tier_hedge_ms = OPTS_TIER_HEDGE_MS_DEFAULT;
	if (o->tier_hedge_str) {
		rc = parse_ms_opt("shared_cache_hedge_ms", o->tier_hedge_str,
				  "never", &o->tier_hedge_ms, err, err_len);
		if (rc)
			return rc;
	}
	if (o->tier_put_mem_str) {
		unsigned int pct = 0;

		if (!parse_size(o->tier_put_mem_str, &o->tier_put_mem, &pct) ||
		    pct || !o->tier_put_mem)
			return fail_einval(err, err_len,
					   "-o shared_cache_put_mem=%s: expected "
					   "bytes with an optional K, M, G or T",
					   o->tier_put_mem_str);
	}
	if (o->tier_key_file) {
		int fd = open(o->tier_key_file, O_RDONLY | O_CLOEXEC);

		/* 16 bytes at least (HMAC is as strong as its key), 1 KiB at
		 * most (tier.c's bounds); every byte counts, a newline too. */
		rc = fd < 0 ? -errno
			    : read_secret_fd(fd, 1024, &o->tier_key,
					     &o->tier_key_len);
		if (fd >= 0)
			close(fd);
		if (rc)
			return fail_einval(err, err_len,
					   "-o shared_cache_key=%s: %s",
					   o->tier_key_file,
					   rc == -EFBIG ? "longer than 1 KiB"
							: strerror(-rc));
		if (o->tier_key_len < 16)
			return fail_einval(err, err_len,
					   "-o shared_cache_key=%s: %zu bytes, "
					   "a key needs 16 at least",
					   o->tier_key_file, o->tier_key_len);
	}
	if (o->tier_profile) {
		rc = aws_config_load(&(struct aws_config_req){
					     .profile = o->tier_profile,
					     .credentials_file = o->credentials_file,
					     .config_file = o->config_file,
					     .need_credentials = false,
				     }, &o->tier_aws, err, err_len);
		if (rc)
			return rc == -ENOMEM ? rc : -EINVAL;
		o->tier_aws_loaded = true;
	}
	ep = o->tier_endpoint ? o->tier_endpoint
	     : o->tier_aws_loaded && o->tier_aws.endpoint ? o->tier_aws.endpoint
							 : o->endpoint;
	rg = o->tier_region ? o->tier_region
	     : o->tier_aws_loaded && o->tier_aws.region ? o->tier_aws.region
						       : o->region;
	if (ep != o->tier_endpoint) {
		free(o->tier_endpoint);
		o->tier_endpoint = strdup(ep);
	}
	if (rg != o->tier_region) {
		free(o->tier_region);
		o->tier_region = strdup(rg);
	}
	if (!o->tier_endpoint || !o->tier_region)
		return -ENOMEM;
	if (!*o->tier_region)
		return fail_einval(err, err_len,
				   "-o shared_cache_region= needs a value");
	if (strncmp(o->tier_endpoint, "http://", 7) &&
	    strncmp(o->tier_endpoint, "https://", 8))
		return fail_einval(err, err_len,
				   "shared cache endpoint '%s' is not an "
				   "http:// or https:// URL", o->tier_endpoint);
	o->tier_path_style = o->path_style ||
			     endpoint_needs_path_style(o->tier_endpoint);
	if (o->tier_profile)
		return creds_chain_build(
		    &(struct creds_chain_req){
			.aws = &o->tier_aws,
			.profile_named = true,
			.ca_file = o->ca_file,
			.insecure = o->insecure,
			.process_timeout_ms = o->process_timeout_s * 1000,
		    },
		    o->tier_chain, &o->n_tier_chain);
	return 0;
}

static int resolve(struct hintfs_opts *o, char *err, size_t err_len)
{
	int rc;

	if (o->secret_opt[0])
		return fail_einval(
		    err, err_len,
		    "-o %s: credentials never go on the "
		    "command line (every user can read it); use "
		    "-o profile=NAME with a credentials file, or "
		    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
		    o->secret_opt);
	if (!o->source)
		return fail_einval(
		    err, err_len,
		    "missing the bucket URL (s3://BUCKET[/PREFIX]); "
		    "see --help");
	if (!o->mountpoint)
		return fail_einval(err, err_len,
				   "missing the mount point; see --help");
	rc = parse_source(o, err, err_len);
	if (rc)
		return rc;

	rc = aws_config_load(&(struct aws_config_req){
				     .profile = o->profile,
				     .credentials_file = o->credentials_file,
				     .config_file = o->config_file,
				     /* the chain says what is missing */
				     .need_credentials = false,
			     }, &o->aws, err, err_len);
	if (rc)
		return rc == -ENOMEM ? rc : -EINVAL;
	if (!o->no_sign) {
		o->access_key = o->aws.access_key;
		o->secret_key = o->aws.secret_key;
		o->session_token = o->aws.session_token;
	}

	if (!o->region) {
		const char *r = o->aws.region;

		o->region = strdup(r ? r : "us-east-1");
		if (!o->region)
			return -ENOMEM;
	}
	if (!*o->region)
		return fail_einval(err, err_len, "-o region= needs a value");

	if (!o->endpoint) {
		const char *e = o->aws.endpoint;

		if (e)
			o->endpoint = strdup(e);
		else if (asprintf(&o->endpoint, "https://s3.%s.amazonaws.com",
				  o->region) < 0)
			o->endpoint = NULL;
		if (!o->endpoint)
			return -ENOMEM;
	}
	if (strncmp(o->endpoint, "http://", 7) && strncmp(o->endpoint, "https://", 8))
		return fail_einval(
		    err, err_len,
		    "endpoint '%s' is not an http:// or https:// URL",
		    o->endpoint);
	if (endpoint_needs_path_style(o->endpoint))
		o->path_style = true;

	o->max_threads = OPTS_MAX_THREADS_DEFAULT;
	if (o->max_threads_str) {
		char *end;
		unsigned long v = strtoul(o->max_threads_str, &end, 10);

		if (!*o->max_threads_str || *end || v < 1 || v > OPTS_MAX_THREADS_LIMIT)
			return fail_einval(err, err_len,
					   "-o max_threads=%s: expected a "
					   "number from 1 to 1024",
					   o->max_threads_str);
		o->max_threads = (unsigned int)v;
	}
	if (o->ca_file && !*o->ca_file)
		return fail_einval(err, err_len, "-o ca_file= needs a path");

	if (o->max_inflight_str) {
		unsigned long long v;

		if (!parse_uint(o->max_inflight_str, 1, 4096, &v))
			return fail_einval(err, err_len,
					   "-o max_inflight=%s: expected a "
					   "number from 1 to 4096",
					   o->max_inflight_str);
		o->max_inflight = (unsigned int)v;
	}
	if (o->window_str) {
		unsigned long long v;

		if (!parse_uint(o->window_str, 1, 1u << 24, &v))
			return fail_einval(err, err_len,
					   "-o window=%s: expected a number "
					   "of objects from 1 to 16777216",
					   o->window_str);
		o->window = (uint32_t)v;
	}
	if (o->pace_str) {
		unsigned int ms = 0;

		if (parse_ms_opt("pace_ms", o->pace_str,
				 "the whole window at once", &ms, err, err_len))
			return -EINVAL;
		o->pace_ms = ms ? ms : PF_PACE_OFF;
	}
	static const struct {
		const char *name;
		size_t str_off, val_off;
		unsigned long long lo, hi;
	} ints[] = {
		{ "retries", offsetof(struct hintfs_opts, retries_str),
		  offsetof(struct hintfs_opts, retries), 1, 1000 },
		{ "retry_time", offsetof(struct hintfs_opts, retry_time_str),
		  offsetof(struct hintfs_opts, retry_time_s), 1, 86400 },
		{ "stall_timeout", offsetof(struct hintfs_opts, stall_timeout_str),
		  offsetof(struct hintfs_opts, stall_timeout_s), 1, 3600 },
		{ "list_workers", offsetof(struct hintfs_opts, list_workers_str),
		  offsetof(struct hintfs_opts, list_workers), 1, 256 },
		{ "credential_process_timeout",
		  offsetof(struct hintfs_opts, process_timeout_str),
		  offsetof(struct hintfs_opts, process_timeout_s), 1, 3600 },
	};
	for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
		const char *str = *(char **)((char *)o + ints[i].str_off);
		unsigned long long v;

		if (!str)
			continue;
		if (!parse_uint(str, ints[i].lo, ints[i].hi, &v))
			return fail_einval(err, err_len,
					   "-o %s=%s: expected a number from "
					   "%llu to %llu",
					   ints[i].name, str, ints[i].lo,
					   ints[i].hi);
		*(int *)((char *)o + ints[i].val_off) = (int)v;
	}
	if (o->fetch_mem_str) {
		unsigned int pct = 0;

		/* 16 MiB: two 8 MiB parts, one a reader waits on and one of
		 * read-ahead. */
		if (!parse_size(o->fetch_mem_str, &o->fetch_mem, &pct) || pct ||
		    o->fetch_mem < (16ull << 20))
			return fail_einval(err, err_len,
					   "-o fetch_mem=%s: expected bytes "
					   "with an optional K, M, G or T, at "
					   "least 16M",
					   o->fetch_mem_str);
	}
	o->cache_size_pct = 10;
	if (o->cache_size_str &&
	    !parse_size(o->cache_size_str, &o->cache_size, &o->cache_size_pct))
		return fail_einval(
		    err, err_len,
		    "-o cache_size=%s: expected bytes with "
		    "an optional K, M, G or T, or a percentage of the free "
		    "space such as 20%%",
		    o->cache_size_str);
	o->store_ahead = OPTS_STORE_AHEAD_DEFAULT;
	if (o->store_ahead_str) {
		unsigned int pct = 0;

		if (!strcmp(o->store_ahead_str, "0"))
			o->store_ahead = 0;
		else if (!parse_size(o->store_ahead_str, &o->store_ahead, &pct) ||
			 pct)
			return fail_einval(err, err_len,
					   "-o store_ahead=%s: expected bytes "
					   "with an optional K, M or G, or 0 "
					   "for off",
					   o->store_ahead_str);
	}
	if (o->cache_dir && !*o->cache_dir)
		return fail_einval(err, err_len, "-o cache_dir= needs a path");
	if (!o->cache_dir) {
		rc = default_cache_dir(o, err, err_len);
		if (rc)
			return rc;
	}
	if (o->hint_file && !*o->hint_file)
		return fail_einval(err, err_len, "-o hint= needs a file");
	rc = resolve_tier(o, err, err_len);
	if (rc)
		return rc;
	/* Last: the providers copy ca_file and the timeout. */
	if (!o->no_sign)
		return creds_chain_build(
		    &(struct creds_chain_req){
			.aws = &o->aws,
			.profile_named = o->profile != NULL,
			.ca_file = o->ca_file,
			.insecure = o->insecure,
			.process_timeout_ms = o->process_timeout_s * 1000,
		    },
		    o->creds_chain, &o->n_creds_chain);
	return 0;
}

int opts_parse(int argc, char **argv, struct hintfs_opts *o, char *err,
	       size_t err_len)
{
	memset(o, 0, sizeof(*o));
	o->fuse_args = (struct fuse_args)FUSE_ARGS_INIT(argc, argv);
	if (fuse_opt_parse(&o->fuse_args, o, opt_spec, opt_proc) == -1)
		return fail_einval(err, err_len,
				   "bad command line; see --help");
	if (o->help || o->version)
		return 0;
	return resolve(o, err, err_len);
}

void opts_fini(struct hintfs_opts *o)
{
	free(o->source);
	free(o->mountpoint);
	free(o->endpoint);
	free(o->region);
	free(o->ca_file);
	free(o->max_threads_str);
	free(o->cache_dir);
	free(o->cache_size_str);
	free(o->store_ahead_str);
	free(o->hint_file);
	free(o->max_inflight_str);
	free(o->window_str);
	free(o->pace_str);
	free(o->fetch_mem_str);
	free(o->profile);
	free(o->credentials_file);
	free(o->config_file);
	aws_config_fini(&o->aws);
	free(o->retries_str);
	free(o->retry_time_str);
	free(o->stall_timeout_str);
	free(o->list_workers_str);
	free(o->process_timeout_str);
	for (size_t i = 0; i < o->n_creds_chain; i++)
		creds_provider_destroy(o->creds_chain[i]);
	for (size_t i = 0; i < o->n_tier_chain; i++)
		creds_provider_destroy(o->tier_chain[i]);
	free(o->shared_cache);
	free(o->tier_endpoint);
	free(o->tier_region);
	free(o->tier_profile);
	free(o->tier_hedge_str);
	free(o->tier_key_file);
	if (o->tier_key)
		explicit_bzero(o->tier_key, o->tier_key_len);
	free(o->tier_key);
	free(o->tier_put_mem_str);
	free(o->tier_bucket);
	free(o->tier_prefix);
	if (o->tier_aws_loaded)
		aws_config_fini(&o->tier_aws);
	free(o->bucket);
	free(o->prefix);
	fuse_opt_free_args(&o->fuse_args);
}

void opts_usage(const char *prog)
{
	printf("usage: %s s3://BUCKET[/PREFIX] MOUNTPOINT [-f] [-d] [-o OPTION[,OPTION...]]\n"
	       "\n"
	       "Mounts an S3 bucket (or a prefix of it) read-only.\n"
	       "\n"
	       "options:\n"
	       "  -f                     stay in the foreground\n"
	       "  -d, -o debug           debug log and FUSE request trace (implies -f)\n"
	       "  -o endpoint=URL        S3 endpoint (default: $AWS_ENDPOINT_URL_S3,\n"
	       "                         $AWS_ENDPOINT_URL, the profile's endpoint_url,\n"
	       "                         or AWS's for the region)\n"
	       "  -o region=REGION       signing region (default: $AWS_REGION,\n"
	       "                         $AWS_DEFAULT_REGION, the profile's region,\n"
	       "                         or us-east-1)\n"
	       "  -o path_style          address the bucket as ENDPOINT/BUCKET (implied\n"
	       "                         when the endpoint is an IP address or localhost)\n"
	       "  -o no_sign             anonymous requests, for public buckets\n"
	       "  -o insecure            do not verify the server's TLS certificate\n"
	       "  -o ca_file=FILE        trust the CAs in FILE as well\n"
	       "  -o max_threads=N       FUSE worker threads (default 64)\n"
	       "  -o cache_dir=DIR       the local cache (default:\n"
	       "                         $XDG_CACHE_HOME/hintfs/BUCKET-HASH or\n"
	       "                         ~/.cache/hintfs/BUCKET-HASH)\n"
	       "  -o cache_size=SIZE     bytes (K, M, G, T) or N%% of the free space\n"
	       "                         (default 10%%)\n"
	       "  -o hint=FILE           the read order, re-read when FILE is replaced\n"
	       "  -o store_ahead=SIZE    bytes of the next hinted, cached files put in\n"
	       "                         the kernel's page cache before they are\n"
	       "                         opened (default " OPTS_STORE_AHEAD_HELP "; 0: off)\n"
	       "  -o max_inflight=N      GETs in flight at once (default 64)\n"
	       "  -o window=N            hinted objects fetched ahead (default 4096)\n"
	       "  -o pace_ms=MS          within the window, fetch as far ahead of the\n"
	       "                         readers as they read in MS (default 1000, at\n"
	       "                         least 256 files; 0: the whole window at once)\n"
	       "  -o fetch_mem=SIZE      memory for objects in flight (default 512M)\n"
	       "  -o relist              list the bucket again instead of using the\n"
	       "                         listing saved in the cache\n"
	       "  -o open_per_file       the kernel asks the daemon at every open and\n"
	       "                         close (the older data path; default: zero-\n"
	       "                         message opens, a cached file costs nothing)\n"
	       "  -o retries=N           attempts per request before EIO (default 10)\n"
	       "  -o retry_time=S        seconds per request before EIO (default 60)\n"
	       "  -o stall_timeout=S     retry a transfer that moves nothing for S\n"
	       "                         seconds (default 5)\n"
	       "  -o list_workers=N      list requests at once for a listing longer\n"
	       "                         than a page (default 16; 1: page by page)\n"
	       "  -o profile=NAME        AWS profile (also --profile NAME; default:\n"
	       "                         $AWS_PROFILE, or default)\n"
	       "  -o credentials_file=F  instead of $AWS_SHARED_CREDENTIALS_FILE or\n"
	       "                         ~/.aws/credentials\n"
	       "  -o config_file=F       instead of $AWS_CONFIG_FILE or ~/.aws/config\n"
	       "  -o credential_process_timeout=S\n"
	       "                         kill a profile's credential_process after S\n"
	       "                         seconds (default 60)\n"
	       "  -o shared_cache=s3://BUCKET[/PREFIX]\n"
	       "                         a shared cache tier: read it on a local miss,\n"
	       "                         write what the origin served to it\n"
	       "  -o shared_cache_endpoint=URL, shared_cache_region=REGION,\n"
	       "     shared_cache_profile=NAME\n"
	       "                         the tier's (default: the profile's, else the\n"
	       "                         origin's endpoint, region and credentials)\n"
	       "  -o shared_cache_hedge_ms=MS\n"
	       "                         a reader waits MS on the tier, then reads the\n"
	       "                         origin (default 100; 0: never), within a\n"
	       "                         budget of 0.5%% of tier GETs\n"
	       "  -o shared_cache_key=FILE\n"
	       "                         a key only the cluster holds: tier objects\n"
	       "                         carry its HMAC, which proves objects whose\n"
	       "                         ETag is not an MD5 (without it they skip\n"
	       "                         the tier)\n"
	       "  -o shared_cache_put_mem=BYTES\n"
	       "                         objects queued for PUT to the tier at most,\n"
	       "                         on top of fetch_mem (default 256M)\n"
	       "  -o allow_other, ...    options of libfuse, passed on\n"
	       "  -h, --help             this text\n"
	       "  -V, --version          the version\n"
	       "\n"
	       "Credentials, region and endpoint are found as the AWS CLI finds\n"
	       "them: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,\n"
	       "AWS_REGION, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, then the profile\n"
	       "in ~/.aws/credentials and ~/.aws/config (region, endpoint_url).\n"
	       "An -o option beats both; a profile named with -o profile= beats\n"
	       "the AWS_ACCESS_KEY_ID pair. Never put keys on the command line.\n"
	       "\n"
	       "Without -f the daemon detaches once the file system is mounted;\n"
	       "a failed mount exits non-zero with one line on stderr. Works as\n"
	       "mount -t fuse.hintfs s3://BUCKET[/PREFIX] DIR -o OPTIONS and in\n"
	       "/etc/fstab; see hintfs(1).\n",
	       prog);
}
