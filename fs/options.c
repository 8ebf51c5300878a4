/*
 * fs/options.c - parses and checks the daemon's command line.
 *
 * Owns the rules that turn argv + AWS_* variables + profile files into one
 * configuration: the option table (options.def: names, defaults, bounds,
 * --help), precedence (option over environment over profile over
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
#include <sys/stat.h>
#include <unistd.h>

enum {
	KEY_FOREGROUND,
	KEY_DEBUG,
	KEY_HELP,
	KEY_VERSION,
};

/* What a row of options.def holds; see there. */
enum opt_type {
	OPT_STR,
	OPT_FLAG,
	OPT_NUM,
	OPT_S,
	OPT_MS,
	OPT_SIZE,
	OPT_SIZE_PCT,
};

struct opt_desc {
	const char *name;
	enum opt_type type;
	size_t str_off; /* char * as given (a flag: its int) */
	size_t val_off; /* the number, of val_size bytes */
	size_t val_size;
	const char *def;
	unsigned long long lo, hi;
	const char *arg;
	const char *help;
};

#define OPT_FIELD_SIZE(f) sizeof(((struct hintfs_opts *)0)->f)

static const struct opt_desc opt_table[] = {
#define HINTFS_OPT(name, type, str, val, def, lo, hi, arg, help)               \
	{#name,                                                                \
	 type,                                                                 \
	 offsetof(struct hintfs_opts, str),                                    \
	 offsetof(struct hintfs_opts, val),                                    \
	 OPT_FIELD_SIZE(val),                                                  \
	 def,                                                                  \
	 lo,                                                                   \
	 hi,                                                                   \
	 arg,                                                                  \
	 help},
#include "fs/options.def"
#undef HINTFS_OPT
};

#define OPT_TABLE_LEN (sizeof(opt_table) / sizeof(opt_table[0]))

#define OPT(t, field, val)                                                     \
	{                                                                      \
		t, offsetof(struct hintfs_opts, field), val                    \
	}

static const struct fuse_opt opt_spec[] = {
/* A flag's template is its name; the others take "=%s" (a string
 * that the table's checks turn into the number). */
#define HINTFS_OPT(name, type, str, val, def, lo, hi, arg, help)               \
	OPT((type) == OPT_FLAG ? #name : #name "=%s", str, (type) == OPT_FLAG),
#include "fs/options.def"
#undef HINTFS_OPT
    OPT("--profile %s", profile, 0),	    OPT("--profile=%s", profile, 0),
    FUSE_OPT_KEY("-f", KEY_FOREGROUND),	    FUSE_OPT_KEY("-d", KEY_DEBUG),
    FUSE_OPT_KEY("debug", KEY_DEBUG),	    FUSE_OPT_KEY("-h", KEY_HELP),
    FUSE_OPT_KEY("--help", KEY_HELP),	    FUSE_OPT_KEY("-V", KEY_VERSION),
    FUSE_OPT_KEY("--version", KEY_VERSION), FUSE_OPT_END};

/*
 * Options mount(8) and fstab pass to every filesystem. hintfs is always
 * read-only, has no devices, setuid files or executables to speak of, so
 * they change nothing; "rw" does not make it writable.
 */
static const char *const generic_opts[] = {
    "ro",	"rw",	      "dev",	  "nodev",	"suid",
    "nosuid",	"exec",	      "noexec",	  "auto",	"noauto",
    "user",	"nouser",     "users",	  "_netdev",	"nofail",
    "atime",	"noatime",    "relatime", "norelatime", "strictatime",
    "diratime", "nodiratime", "sync",	  "async",	"defaults",
};

static bool is_generic(const char *arg)
{
	if (!strncmp(arg, "x-", 2) || !strncmp(arg, "comment=", 8))
		return true;
	for (size_t i = 0; i < sizeof(generic_opts) / sizeof(generic_opts[0]);
	     i++)
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
		return log_fail_einval(
		    err, err_len,
		    "'%s' is not an S3 URL: expected s3://BUCKET[/PREFIX]", s);
	s += 5;
	slash = strchr(s, '/');
	*bucket = slash ? strndup(s, slash - s) : strdup(s);
	if (!*bucket)
		return -ENOMEM;
	if (!bucket_ok(*bucket))
		return log_fail_einval(err, err_len, "'%s': bad bucket name",
				       url);

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
		return log_fail_einval(
		    err, err_len, "'%s': empty component in the prefix", url);
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
	return !strcmp(host, "localhost") ||
	       inet_pton(AF_INET, host, addr) == 1;
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
	case 'T':
	case 't':
		mult <<= 10; /* fall through */
	case 'G':
	case 'g':
		mult <<= 10; /* fall through */
	case 'M':
	case 'm':
		mult <<= 10; /* fall through */
	case 'K':
	case 'k':
		mult <<= 10;
		end++;
		break;
	default:
		break;
	}
	if (*end == 'B' || *end == 'b')
		end++;
	if (*end || v == 0 || v > UINT64_MAX / mult)
		return false;
	*bytes = v * mult;
	*pct = 0;
	return true;
}

/* "16M" for 16 MiB: @bytes with the largest suffix that divides it. */
static void format_size(uint64_t bytes, char *buf, size_t len)
{
	static const char suffix[] = "KMGT";
	int i = -1;

	while (i < 3 && bytes && !(bytes & 1023)) {
		bytes >>= 10;
		i++;
	}
	if (i < 0)
		snprintf(buf, len, "%llu", (unsigned long long)bytes);
	else
		snprintf(buf, len, "%llu%c", (unsigned long long)bytes,
			 suffix[i]);
}

/* A number field of the table is 4 or 8 bytes, as opt_set() stores. */
#define HINTFS_OPT(name, type, str, val, def, lo, hi, arg, help)               \
	_Static_assert((type) == OPT_STR || (type) == OPT_FLAG ||              \
			   OPT_FIELD_SIZE(val) == 4 ||                         \
			   OPT_FIELD_SIZE(val) == 8,                           \
		       #name ": a number field of 4 or 8 bytes");
#include "fs/options.def"
#undef HINTFS_OPT

/*
 * Checks @s, the text of the number option @d (as given, or its default),
 * and stores its value in @o. 0, or -EINVAL with the one-line error.
 */
static int opt_set(struct hintfs_opts *o, const struct opt_desc *d,
		   const char *s, char *err, size_t err_len)
{
	unsigned long long v = 0;
	uint64_t bytes = 0;
	unsigned int pct = 0;
	char *field = (char *)o + d->val_off;
	char min[32];

	switch (d->type) {
	case OPT_NUM:
	case OPT_S:
	case OPT_MS:
		if (!parse_uint(s, d->lo, d->hi, &v))
			return log_fail_einval(
			    err, err_len,
			    "-o %s=%s: expected %s from %llu to "
			    "%llu",
			    d->name, s,
			    d->type == OPT_NUM ? "a number"
			    : d->type == OPT_S ? "seconds"
					       : "ms",
			    d->lo, d->hi);
		break;
	case OPT_SIZE:
		/* 0: off where there is no least value, the layer below's
		 * own where 0 is the default. */
		if (!strcmp(s, "0") && (!d->lo || !strcmp(d->def, "0")))
			break;
		if (!parse_size(s, &bytes, &pct) || pct || bytes < d->lo) {
			format_size(d->lo, min, sizeof(min));
			return log_fail_einval(
			    err, err_len,
			    "-o %s=%s: expected bytes with an "
			    "optional K, M, G or T%s%s%s",
			    d->name, s,
			    !d->lo		   ? ", or 0 for off"
			    : !strcmp(d->def, "0") ? ", or 0 for the default"
						   : "",
			    d->lo > 1 ? ", at least " : "",
			    d->lo > 1 ? min : "");
		}
		v = bytes;
		break;
	case OPT_SIZE_PCT:
		if (!parse_size(s, &bytes, &pct))
			return log_fail_einval(
			    err, err_len,
			    "-o %s=%s: expected bytes with an "
			    "optional K, M, G or T, or a "
			    "percentage of the free space such "
			    "as 20%%",
			    d->name, s);
		v = bytes;
		o->cache_size_pct = pct;
		break;
	default:
		return 0;
	}
	if (d->val_size == sizeof(uint32_t)) {
		uint32_t x = (uint32_t)v;

		memcpy(field, &x, sizeof(x));
	} else {
		uint64_t x = v;

		memcpy(field, &x, sizeof(x));
	}
	return 0;
}

/* Every number of the table, from the text given or else its default. */
static int opts_apply_table(struct hintfs_opts *o, char *err, size_t err_len)
{
	for (size_t i = 0; i < OPT_TABLE_LEN; i++) {
		const struct opt_desc *d = &opt_table[i];
		const char *s;
		int rc;

		/* A flag's field is an int, not a char *: never read it as
		 * one (UBSan: a misaligned load). */
		if (d->type == OPT_STR || d->type == OPT_FLAG)
			continue;
		memcpy(&s, (char *)o + d->str_off, sizeof(s));
		rc = opt_set(o, d, s ? s : d->def, err, err_len);
		if (rc)
			return rc;
	}
	/* pace_ms=0 is no pace, which the engine spells PF_PACE_OFF (its 0
	 * is "the default"). */
	if (!o->pace_ms)
		o->pace_ms = PF_PACE_OFF;
	return 0;
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
		n = asprintf(&o->cache_dir, "%s/hintfs/%s-%08x", base,
			     o->bucket, h);
	else if (home)
		n = asprintf(&o->cache_dir, "%s/.cache/hintfs/%s-%08x", home,
			     o->bucket, h);
	else
		return log_fail_einval(
		    err, err_len,
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
			return log_fail_einval(
			    err, err_len,
			    "the shared_cache_* options need "
			    "-o shared_cache=s3://BUCKET[/PREFIX]");
		return 0;
	}
	rc = parse_s3_url(o->shared_cache, &o->tier_bucket, &o->tier_prefix,
			  err, err_len);
	if (rc)
		return rc;
	if (o->tier_key_file) {
		int fd = open(o->tier_key_file, O_RDONLY | O_CLOEXEC);
		struct stat st;

		/* A key another local user can read lets anyone with PUT on
		 * the tier bucket forge objects under it; one they can write
		 * chooses the key. Refused as ssh refuses such a private key,
		 * on the file opened (fstat: no race with a rename). */
		if (fd >= 0 && fstat(fd, &st) == 0 &&
		    (st.st_mode & (S_IRWXG | S_IRWXO))) {
			close(fd);
			return log_fail_einval(
			    err, err_len,
			    "tier key %s is accessible by others "
			    "(mode %04o); chmod 600 %s",
			    o->tier_key_file, (unsigned)(st.st_mode & 07777),
			    o->tier_key_file);
		}
		/* 16 bytes at least (HMAC is as strong as its key), 1 KiB at
		 * most (tier.c's bounds); every byte counts, a newline too. */
		rc = fd < 0 ? -errno
			    : read_secret_fd(fd, 1024, &o->tier_key,
					     &o->tier_key_len);
		if (fd >= 0)
			close(fd);
		if (rc)
			return log_fail_einval(
			    err, err_len, "-o shared_cache_key=%s: %s",
			    o->tier_key_file,
			    rc == -EFBIG ? "longer than 1 KiB" : strerror(-rc));
		if (o->tier_key_len < 16)
			return log_fail_einval(
			    err, err_len,
			    "-o shared_cache_key=%s: %zu bytes, "
			    "a key needs 16 at least",
			    o->tier_key_file, o->tier_key_len);
	}
	if (o->tier_profile) {
		rc = aws_config_load(
		    &(struct aws_config_req){
			.profile = o->tier_profile,
			.credentials_file = o->credentials_file,
			.config_file = o->config_file,
			.need_credentials = false,
		    },
		    &o->tier_aws, err, err_len);
		if (rc)
			return rc == -ENOMEM ? rc : -EINVAL;
		o->tier_aws_loaded = true;
	}
	ep = o->tier_endpoint				  ? o->tier_endpoint
	     : o->tier_aws_loaded && o->tier_aws.endpoint ? o->tier_aws.endpoint
							  : o->endpoint;
	rg = o->tier_region				? o->tier_region
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
		return log_fail_einval(err, err_len,
				       "-o shared_cache_region= needs a value");
	if (strncmp(o->tier_endpoint, "http://", 7) &&
	    strncmp(o->tier_endpoint, "https://", 8))
		return log_fail_einval(err, err_len,
				       "shared cache endpoint '%s' is not an "
				       "http:// or https:// URL",
				       o->tier_endpoint);
	o->tier_path_style =
	    o->path_style || endpoint_needs_path_style(o->tier_endpoint);
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
		return log_fail_einval(
		    err, err_len,
		    "-o %s: credentials never go on the "
		    "command line (every user can read it); use "
		    "-o profile=NAME with a credentials file, or "
		    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
		    o->secret_opt);
	if (!o->source)
		return log_fail_einval(
		    err, err_len,
		    "missing the bucket URL (s3://BUCKET[/PREFIX]); "
		    "see --help");
	if (!o->mountpoint)
		return log_fail_einval(err, err_len,
				       "missing the mount point; see --help");
	rc = parse_source(o, err, err_len);
	if (rc)
		return rc;

	rc = aws_config_load(
	    &(struct aws_config_req){
		.profile = o->profile,
		.credentials_file = o->credentials_file,
		.config_file = o->config_file,
		/* the chain says what is missing */
		.need_credentials = false,
	    },
	    &o->aws, err, err_len);
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
		return log_fail_einval(err, err_len,
				       "-o region= needs a value");

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
	if (strncmp(o->endpoint, "http://", 7) &&
	    strncmp(o->endpoint, "https://", 8))
		return log_fail_einval(
		    err, err_len,
		    "endpoint '%s' is not an http:// or https:// URL",
		    o->endpoint);
	if (endpoint_needs_path_style(o->endpoint))
		o->path_style = true;

	rc = opts_apply_table(o, err, err_len);
	if (rc)
		return rc;
	if (o->ca_file && !*o->ca_file)
		return log_fail_einval(err, err_len,
				       "-o ca_file= needs a path");
	if (o->cache_dir && !*o->cache_dir)
		return log_fail_einval(err, err_len,
				       "-o cache_dir= needs a path");
	if (!o->cache_dir) {
		rc = default_cache_dir(o, err, err_len);
		if (rc)
			return rc;
	}
	if (o->hint_file && !*o->hint_file)
		return log_fail_einval(err, err_len, "-o hint= needs a file");
	if (o->ctl_socket && *o->ctl_socket != '/')
		return log_fail_einval(err, err_len,
				       "-o ctl_socket= needs an absolute path");
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
		return log_fail_einval(err, err_len,
				       "bad command line; see --help");
	if (o->help || o->version)
		return 0;
	return resolve(o, err, err_len);
}

void opts_fini(struct hintfs_opts *o)
{
	/* The text of every option but flags (resolve() may have replaced
	 * a string: it is still the one in the field). */
	for (size_t i = 0; i < OPT_TABLE_LEN; i++)
		if (opt_table[i].type != OPT_FLAG)
			free(*(char **)((char *)o + opt_table[i].str_off));
	free(o->source);
	free(o->mountpoint);
	aws_config_fini(&o->aws);
	for (size_t i = 0; i < o->n_creds_chain; i++)
		creds_provider_destroy(o->creds_chain[i]);
	for (size_t i = 0; i < o->n_tier_chain; i++)
		creds_provider_destroy(o->tier_chain[i]);
	if (o->tier_key)
		explicit_bzero(o->tier_key, o->tier_key_len);
	free(o->tier_key);
	free(o->tier_bucket);
	free(o->tier_prefix);
	if (o->tier_aws_loaded)
		aws_config_fini(&o->tier_aws);
	free(o->bucket);
	free(o->prefix);
	fuse_opt_free_args(&o->fuse_args);
}

/* The help column starts here; a longer "-o name=ARG" has a line alone. */
#define USAGE_INDENT 25
#define USAGE_WIDTH  79

/* @text wrapped at spaces from column @col to USAGE_WIDTH, each further
 * line indented to USAGE_INDENT. */
static void usage_wrap(FILE *out, const char *text, int col)
{
	const char *p = text;

	while (*p) {
		size_t word = strcspn(p, " ");

		if (col > USAGE_INDENT && col + 1 + (int)word > USAGE_WIDTH) {
			fprintf(out, "\n%*s", USAGE_INDENT, "");
			col = USAGE_INDENT;
		} else if (col > USAGE_INDENT) {
			fputc(' ', out);
			col++;
		}
		fwrite(p, 1, word, out);
		col += (int)word;
		p += word;
		while (*p == ' ')
			p++;
	}
	fputc('\n', out);
}

/* One line of options.def: "-o name=ARG", its help and its default. */
static void usage_opt(FILE *out, const struct opt_desc *d)
{
	char head[96], *text = NULL;
	int col;

	snprintf(head, sizeof(head), "  -o %s%s%s", d->name,
		 d->type == OPT_FLAG ? "" : "=", d->arg);
	col = fprintf(out, "%s", head);
	if (col >= USAGE_INDENT) {
		fprintf(out, "\n");
		col = 0;
	}
	fprintf(out, "%*s", USAGE_INDENT - col, "");
	if (!d->def || asprintf(&text,
				d->type == OPT_STR ? "%s (default: %s)"
						   : "%s (default %s)",
				d->help, d->def) < 0)
		text = NULL;
	usage_wrap(out, text ? text : d->help, USAGE_INDENT);
	free(text);
}

void opts_usage(FILE *out, const char *prog)
{
	fprintf(out,
		"usage: %s s3://BUCKET[/PREFIX] MOUNTPOINT [-f] [-d] [-o "
		"OPTION[,OPTION...]]\n"
		"\n"
		"Mounts an S3 bucket (or a prefix of it) read-only.\n"
		"\n"
		"options:\n"
		"  -f                     stay in the foreground\n"
		"  -d, -o debug           debug log and FUSE request trace "
		"(implies -f)\n",
		prog);
	for (size_t i = 0; i < OPT_TABLE_LEN; i++)
		usage_opt(out, &opt_table[i]);
	fputs(
	    "  -o allow_other, ...    options of libfuse, passed on\n"
	    "  -h, --help             this text\n"
	    "  -V, --version          the version\n"
	    "\n"
	    "Credentials, region and endpoint are found as the AWS CLI finds\n"
	    "them: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, "
	    "AWS_SESSION_TOKEN,\n"
	    "AWS_REGION, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, then the "
	    "profile\n"
	    "in ~/.aws/credentials and ~/.aws/config (region, endpoint_url).\n"
	    "An -o option beats both; a profile named with -o profile= beats\n"
	    "the AWS_ACCESS_KEY_ID pair. Never put keys on the command line.\n"
	    "\n"
	    "Without -f the daemon detaches once the file system is mounted;\n"
	    "a failed mount exits non-zero with one line on stderr. Works as\n"
	    "mount -t fuse.hintfs s3://BUCKET[/PREFIX] DIR -o OPTIONS and in\n"
	    "/etc/fstab; see hintfs(1).\n",
	    out);
}
