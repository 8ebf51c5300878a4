/*
 * tests/unit/test_aws_config.c - the AWS configuration: the INI reader on
 * good and hostile text, the order of sources (option, environment,
 * credentials file, config file) for keys, region and endpoint, the
 * profile options of the daemon's command line, and the one-line errors,
 * none of which may hold a secret.
 */
#include "prefetch/s3/aws_config.h"
#include "fs/options.h"
#include "check.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[] = "/tmp/hintfs-test-aws-XXXXXX";

/* Writes @text (@len bytes; -1: strlen) to dir/@name; returns the path. */
static const char *put(const char *name, const char *text, long len)
{
	static char path[8][256];
	static int next;
	char *p = path[next++ % 8];
	FILE *f;

	snprintf(p, 256, "%s/%s", dir, name);
	f = fopen(p, "wb");
	if (!f) {
		perror(p);
		exit(1);
	}
	fwrite(text, 1, len < 0 ? strlen(text) : (size_t)len, f);
	fclose(f);
	return p;
}

static void clear_env(void)
{
	static const char *const vars[] = {
	    "AWS_ACCESS_KEY_ID",   "AWS_SECRET_ACCESS_KEY",
	    "AWS_SESSION_TOKEN",   "AWS_REGION",
	    "AWS_DEFAULT_REGION",  "AWS_ENDPOINT_URL",
	    "AWS_ENDPOINT_URL_S3", "AWS_PROFILE",
	    "AWS_DEFAULT_PROFILE", "AWS_SHARED_CREDENTIALS_FILE",
	    "AWS_CONFIG_FILE",	   "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS",
	};
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);
	/* Never the real ~/.aws of whoever runs the tests. */
	setenv("HOME", dir, 1);
}

/* ---- the INI reader ------------------------------------------------------ */

/* Collects "section|key=value" lines (and "[section]" for headers). */
struct collect {
	char out[4096];
	size_t len;
	int calls;
};

static int collect_cb(void *arg, const char *section, const char *key,
		      const char *value)
{
	struct collect *c = arg;
	int n;

	c->calls++;
	if (!key)
		n = snprintf(c->out + c->len, sizeof(c->out) - c->len, "[%s]\n",
			     section);
	else
		n = snprintf(c->out + c->len, sizeof(c->out) - c->len,
			     "%s|%s=%.40s\n", section, key, value);
	if (n > 0 && (size_t)n < sizeof(c->out) - c->len)
		c->len += (size_t)n;
	return 0;
}

static const char *ini(const char *text, long len)
{
	static struct collect c;

	memset(&c, 0, sizeof(c));
	CHECK(aws_ini_parse(text, len < 0 ? strlen(text) : (size_t)len,
			    collect_cb, &c) == 0);
	return c.out;
}

static void test_ini(void)
{
	const char *r;

	/* The everyday file, with CRLF, comments and odd spacing. */
	r = ini("# top comment\r\n"
		"ignored = before any section\r\n"
		"[default]\r\n"
		"aws_access_key_id=AKID\r\n"
		"AWS_Secret_Access_Key   =   sec/ret+key  \r\n"
		"; another comment\r\n"
		"\r\n"
		"[ profile  dev ]\n"
		"region: eu-west-1\n"
		"endpoint_url = http://h:1/  # inline comment\n"
		"weird;value = a#b\n",
		-1);
	CHECK(!strcmp(r, "[default]\n"
			 "default|aws_access_key_id=AKID\n"
			 "default|aws_secret_access_key=sec/ret+key\n"
			 "[profile  dev]\n"
			 "profile  dev|region=eu-west-1\n"
			 "profile  dev|endpoint_url=http://h:1/\n"
			 "profile  dev|weird;value=a#b\n"));

	/* The nested "s3 =" sub-section; an indented line after a plain
	 * value is a continuation and is dropped. */
	r = ini("[profile x]\n"
		"region = r1\n"
		"  continued = no\n"
		"s3 =\n"
		"  endpoint_url = http://s3only\n"
		"\taddressing_style = path\n"
		"endpoint_url = http://all\n"
		"  not_nested = 1\n",
		-1);
	CHECK(!strcmp(r, "[profile x]\n"
			 "profile x|region=r1\n"
			 "profile x|s3.endpoint_url=http://s3only\n"
			 "profile x|s3.addressing_style=path\n"
			 "profile x|endpoint_url=http://all\n"));

	/* Garbage: never a crash, good lines around it still read. */
	r = ini("[unterminated\n"
		"key = skipped\n"
		"[]\n"
		"=novalue\n"
		"no delimiter here\n"
		"[ok]\n"
		"\x01\x02\xff = \xfe\n"
		"k = v",
		-1);
	CHECK(!strcmp(r, "[]\n[ok]\nok|\x01\x02\xff=\xfe\nok|k=v\n"));

	/* NUL bytes inside: the text has a length, not a terminator. */
	r = ini("[a]\nk = v\0hidden\nk2 = w\n", 24);
	CHECK(strstr(r, "a|k2=w\n") != NULL);
	/* A file that ends inside a line, right after '=' or '['. */
	r = ini("[a]\nk =", -1);
	CHECK(!strcmp(r, "[a]\n"));
	r = ini("[", -1);
	CHECK(!strcmp(r, ""));
	r = ini("", 0);
	CHECK(!strcmp(r, ""));

	/* A line of a megabyte: read whole, no fixed buffer. */
	{
		size_t n = 1 << 20;
		char *big = malloc(n + 64);
		struct collect c = {0};

		if (!big) {
			CHECK(big != NULL);
			return;
		}
		strcpy(big, "[a]\nlong = ");
		memset(big + 11, 'x', n);
		strcpy(big + 11 + n, "\nafter = 1\n");
		CHECK(aws_ini_parse(big, strlen(big), collect_cb, &c) == 0);
		CHECK(c.calls == 3);
		CHECK(strstr(c.out, "a|after=1\n") != NULL);
		free(big);
	}

	/* Random bytes: only that it terminates without a crash. */
	{
		char junk[8192];
		struct collect c;

		srand(7);
		for (int round = 0; round < 200; round++) {
			for (size_t i = 0; i < sizeof(junk); i++) {
				int x = rand() % 16;

				junk[i] = x == 0   ? '\n'
					  : x == 1 ? '['
					  : x == 2 ? ']'
					  : x == 3 ? '='
					  : x == 4 ? ' '
						   : (char)rand();
			}
			memset(&c, 0, sizeof(c));
			CHECK(aws_ini_parse(junk, sizeof(junk), collect_cb,
					    &c) == 0);
		}
	}
}

/* ---- sources and precedence ---------------------------------------------- */

static const char CREDS[] =
    "[default]\n"
    "aws_access_key_id = AK_DEFAULT\n"
    "aws_secret_access_key = SK_DEFAULT_SECRET\n"
    "\n"
    "[train]\n"
    "aws_access_key_id = AK_TRAIN\n"
    "aws_secret_access_key = SK_TRAIN_SECRET\n"
    "aws_session_token = TOKEN_TRAIN_SECRET\n"
    "\n"
    "[half]\n"
    "aws_access_key_id = AK_HALF\n"
    "[profile train]\n" /* the config file's syntax: not "train" here */
    "aws_access_key_id = WRONG\n"
    "aws_secret_access_key = WRONG\n";

static const char CONFIG[] = "[default]\n"
			     "region = eu-central-1\n"
			     "[profile train]\n"
			     "region = us-west-2\n"
			     "endpoint_url = http://all-services:1\n"
			     "s3 =\n"
			     "    endpoint_url = http://s3-only:2\n"
			     "[profile onlyconfig]\n"
			     "aws_access_key_id = AK_CONFIG\n"
			     "aws_secret_access_key = SK_CONFIG_SECRET\n"
			     "endpoint_url = http://cfg:3\n"
			     "[onlyconfig-wrong-syntax]\n"
			     "region = nowhere\n"
			     "[profile role]\n"
			     "role_arn = arn:aws:iam::1:role/x\n"
			     "source_profile = default\n"
			     "[profile sso]\n"
			     "sso_session = corp\n"
			     "[profile empty]\n";

/* Loads with @profile named explicitly (NULL: none) and returns rc. */
static int load(struct aws_config *c, const char *profile, bool need, char *err,
		size_t err_len)
{
	struct aws_config_req req = {
	    .profile = profile,
	    .need_credentials = need,
	};

	err[0] = '\0';
	return aws_config_load(&req, c, err, err_len);
}

static bool no_secret(const char *err)
{
	return !strstr(err, "SK_") && !strstr(err, "TOKEN_");
}

static void test_files(void)
{
	struct aws_config c;
	char err[512];
	const char *cred, *conf;

	clear_env();
	cred = put("credentials", CREDS, -1);
	conf = put("config", CONFIG, -1);
	setenv("AWS_SHARED_CREDENTIALS_FILE", cred, 1);
	setenv("AWS_CONFIG_FILE", conf, 1);

	/* The default profile from both files. */
	CHECK(load(&c, NULL, true, err, sizeof(err)) == 0);
	CHECK(!strcmp(c.profile, "default"));
	CHECK(c.access_key && !strcmp(c.access_key, "AK_DEFAULT"));
	CHECK(c.secret_key && !strcmp(c.secret_key, "SK_DEFAULT_SECRET"));
	CHECK(!c.session_token);
	CHECK(c.region && !strcmp(c.region, "eu-central-1"));
	CHECK(!c.endpoint);
	CHECK(c.creds_from && !strcmp(c.creds_from, "credentials file"));
	aws_config_fini(&c);

	/* A named profile: token, and the s3 sub-section's endpoint over
	 * the profile's general one. */
	CHECK(load(&c, "train", true, err, sizeof(err)) == 0);
	CHECK(!strcmp(c.access_key, "AK_TRAIN"));
	CHECK(c.session_token &&
	      !strcmp(c.session_token, "TOKEN_TRAIN_SECRET"));
	CHECK(c.region && !strcmp(c.region, "us-west-2"));
	CHECK(c.endpoint && !strcmp(c.endpoint, "http://s3-only:2"));
	aws_config_fini(&c);

	/* AWS_PROFILE picks it too. */
	setenv("AWS_PROFILE", "train", 1);
	CHECK(load(&c, NULL, true, err, sizeof(err)) == 0);
	CHECK(!strcmp(c.profile, "train") && !strcmp(c.access_key, "AK_TRAIN"));
	aws_config_fini(&c);
	/* ... but an explicit profile beats AWS_PROFILE. */
	CHECK(load(&c, "default", true, err, sizeof(err)) == 0);
	CHECK(!strcmp(c.access_key, "AK_DEFAULT"));
	aws_config_fini(&c);
	unsetenv("AWS_PROFILE");

	/* Keys only in the config file's profile. */
	CHECK(load(&c, "onlyconfig", true, err, sizeof(err)) == 0);
	CHECK(!strcmp(c.access_key, "AK_CONFIG"));
	CHECK(!strcmp(c.creds_from, "config file"));
	CHECK(c.endpoint && !strcmp(c.endpoint, "http://cfg:3"));
	CHECK(!c.region); /* the default profile's region is not inherited */
	aws_config_fini(&c);

	/* A profile that exists in neither file: one clear line. */
	CHECK(load(&c, "nope", true, err, sizeof(err)) == -ENOENT);
	CHECK(strstr(err, "profile 'nope' not found in ") != NULL);
	CHECK(strstr(err, cred) && strstr(err, conf));
	aws_config_fini(&c);
	/* ... the same for AWS_PROFILE, saying where the name came from;
	 * "[x]" in the config file is not profile x. */
	setenv("AWS_PROFILE", "onlyconfig-wrong-syntax", 1);
	CHECK(load(&c, NULL, false, err, sizeof(err)) == -ENOENT);
	CHECK(strstr(err, "(from AWS_PROFILE)") != NULL);
	aws_config_fini(&c);
	unsetenv("AWS_PROFILE");

	/* An empty section exists: no error about the profile, but no keys. */
	CHECK(load(&c, "empty", true, err, sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "no credentials") != NULL);
	CHECK(strstr(err, "profile 'empty'") != NULL);
	aws_config_fini(&c);
	CHECK(load(&c, "empty", false, err, sizeof(err)) == 0);
	CHECK(!c.access_key && !c.creds_from);
	aws_config_fini(&c);

	/* Half a pair; a role (the chain's, prefetch/s3/creds_chain.c, not a
	 * static pair); Identity Center, which hintfs cannot use. */
	CHECK(load(&c, "half", true, err, sizeof(err)) == -EINVAL);
	CHECK(
	    strstr(err, "has aws_access_key_id but no aws_secret_access_key"));
	aws_config_fini(&c);
	CHECK(load(&c, "role", false, err, sizeof(err)) == 0);
	CHECK(!c.access_key && !c.creds_from);
	aws_config_fini(&c);
	CHECK(load(&c, "sso", true, err, sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "sso") != NULL);
	CHECK(no_secret(err));
	aws_config_fini(&c);
	/* ... which is fine for an anonymous mount. */
	CHECK(load(&c, "role", false, err, sizeof(err)) == 0);
	aws_config_fini(&c);
}

static void test_env_precedence(void)
{
	struct aws_config c;
	char err[512];

	clear_env();
	setenv("AWS_SHARED_CREDENTIALS_FILE", put("credentials", CREDS, -1), 1);
	setenv("AWS_CONFIG_FILE", put("config", CONFIG, -1), 1);
	setenv("AWS_ACCESS_KEY_ID", "AK_ENV", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "SK_ENV_SECRET", 1);
	setenv("AWS_SESSION_TOKEN", "TOKEN_ENV_SECRET", 1);

	/* Environment keys beat the default profile and AWS_PROFILE. */
	CHECK(load(&c, NULL, true, err, sizeof(err)) == 0);
	CHECK(!strcmp(c.access_key, "AK_ENV"));
	CHECK(!strcmp(c.session_token, "TOKEN_ENV_SECRET"));
	CHECK(!strcmp(c.creds_from, "environment"));
	aws_config_fini(&c);
	setenv("AWS_PROFILE", "train", 1);
	CHECK(load(&c, NULL, true, err, sizeof(err)) == 0);
	CHECK(!strcmp(c.access_key, "AK_ENV"));
	CHECK(!strcmp(c.region, "us-west-2")); /* the profile still counts */
	aws_config_fini(&c);
	unsetenv("AWS_PROFILE");
	/* A profile named on the command line beats the environment. */
	CHECK(load(&c, "train", true, err, sizeof(err)) == 0);
	CHECK(!strcmp(c.access_key, "AK_TRAIN"));
	CHECK(!strcmp(c.session_token, "TOKEN_TRAIN_SECRET"));
	aws_config_fini(&c);

	/* Half a pair in the environment. */
	unsetenv("AWS_SECRET_ACCESS_KEY");
	CHECK(load(&c, NULL, true, err, sizeof(err)) == -EINVAL);
	CHECK(
	    strstr(err, "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY"));
	aws_config_fini(&c);
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SESSION_TOKEN");

	/* Region: AWS_REGION > AWS_DEFAULT_REGION > the profile. */
	setenv("AWS_DEFAULT_REGION", "ap-south-1", 1);
	CHECK(load(&c, "train", true, err, sizeof(err)) == 0);
	CHECK(!strcmp(c.region, "ap-south-1"));
	aws_config_fini(&c);
	setenv("AWS_REGION", "sa-east-1", 1);
	CHECK(load(&c, "train", true, err, sizeof(err)) == 0);
	CHECK(!strcmp(c.region, "sa-east-1"));
	aws_config_fini(&c);

	/* Endpoint: _S3 > general variable > the profile's. */
	setenv("AWS_ENDPOINT_URL", "http://env-all:4", 1);
	CHECK(load(&c, "train", true, err, sizeof(err)) == 0);
	CHECK(!strcmp(c.endpoint, "http://env-all:4"));
	aws_config_fini(&c);
	setenv("AWS_ENDPOINT_URL_S3", "http://env-s3:5", 1);
	CHECK(load(&c, "train", true, err, sizeof(err)) == 0);
	CHECK(!strcmp(c.endpoint, "http://env-s3:5"));
	aws_config_fini(&c);
	setenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "True", 1);
	CHECK(load(&c, "train", true, err, sizeof(err)) == 0);
	CHECK(!c.endpoint);
	aws_config_fini(&c);
}

static void test_paths(void)
{
	struct aws_config c;
	struct aws_config_req req = {.need_credentials = true};
	char err[512], path[300];

	/* ~/.aws under $HOME by default. */
	clear_env();
	snprintf(path, sizeof(path), "%s/.aws", dir);
	CHECK(mkdir(path, 0700) == 0);
	put(".aws/credentials",
	    "[default]\naws_access_key_id=A\n"
	    "aws_secret_access_key=S\n",
	    -1);
	put(".aws/config", "[default]\nregion = home-region\n", -1);
	CHECK(aws_config_load(&req, &c, err, sizeof(err)) == 0);
	CHECK(c.access_key && !strcmp(c.access_key, "A"));
	CHECK(c.region && !strcmp(c.region, "home-region"));
	snprintf(path, sizeof(path), "%s/.aws/credentials", dir);
	CHECK(c.credentials_path && !strcmp(c.credentials_path, path));
	aws_config_fini(&c);

	/* "~/" in a variable. */
	put("other",
	    "[default]\naws_access_key_id=B\naws_secret_access_key=S\n", -1);
	setenv("AWS_SHARED_CREDENTIALS_FILE", "~/other", 1);
	CHECK(aws_config_load(&req, &c, err, sizeof(err)) == 0);
	CHECK(c.access_key && !strcmp(c.access_key, "B"));
	aws_config_fini(&c);

	/* A variable naming a missing file is no file (as the CLI does)... */
	setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials", 1);
	setenv("AWS_CONFIG_FILE", "/nonexistent/config", 1);
	CHECK(aws_config_load(&req, &c, err, sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "no credentials") != NULL);
	aws_config_fini(&c);
	/* ... an option naming one is an error, and so is a directory. */
	req.credentials_file = "/nonexistent/creds";
	CHECK(aws_config_load(&req, &c, err, sizeof(err)) == -ENOENT);
	CHECK(strstr(err, "credentials file '/nonexistent/creds'") != NULL);
	aws_config_fini(&c);
	req.credentials_file = dir;
	CHECK(aws_config_load(&req, &c, err, sizeof(err)) == -EISDIR);
	aws_config_fini(&c);
	/* The option beats the variable. */
	req.credentials_file = put("opt-creds",
				   "[p]\naws_access_key_id=C\n"
				   "aws_secret_access_key=S\n",
				   -1);
	req.profile = "p";
	CHECK(aws_config_load(&req, &c, err, sizeof(err)) == 0);
	CHECK(c.access_key && !strcmp(c.access_key, "C"));
	aws_config_fini(&c);

	/* HOME unset (a boot-time mount): the password database's home;
	 * whatever it is, the path ends in /.aws/credentials. */
	clear_env();
	unsetenv("HOME");
	req = (struct aws_config_req){.need_credentials = false};
	CHECK(aws_config_load(&req, &c, err, sizeof(err)) == 0);
	CHECK(c.credentials_path &&
	      strstr(c.credentials_path, "/.aws/credentials") != NULL);
	aws_config_fini(&c);
}

/* ---- the daemon's options ------------------------------------------------ */

#define ARGV(...) ((char *[]){"hintfs", __VA_ARGS__, NULL})
#define ARGC(...)                                                              \
	((int)(sizeof((char *[]){"hintfs", __VA_ARGS__}) / sizeof(char *)))
#define PARSE(o, err, ...)                                                     \
	opts_parse(ARGC(__VA_ARGS__), ARGV(__VA_ARGS__), (o), (err),           \
		   sizeof(err))

static void test_options(void)
{
	struct hintfs_opts o;
	char err[512] = "";

	clear_env();
	setenv("AWS_SHARED_CREDENTIALS_FILE", put("credentials", CREDS, -1), 1);
	setenv("AWS_CONFIG_FILE", put("config", CONFIG, -1), 1);
	setenv("AWS_REGION", "env-region", 1);

	CHECK(PARSE(&o, err, "s3://b", "/mnt", "-o", "profile=train") == 0);
	CHECK(o.access_key && !strcmp(o.access_key, "AK_TRAIN"));
	CHECK(!strcmp(o.region, "env-region"));
	CHECK(!strcmp(o.endpoint, "http://s3-only:2"));
	opts_fini(&o);

	CHECK(PARSE(&o, err, "s3://b", "/mnt", "--profile", "train", "-f") ==
	      0);
	CHECK(o.access_key && !strcmp(o.access_key, "AK_TRAIN") &&
	      o.foreground);
	opts_fini(&o);
	CHECK(PARSE(&o, err, "--profile=train", "s3://b", "/mnt") == 0);
	CHECK(o.access_key && !strcmp(o.access_key, "AK_TRAIN"));
	CHECK(!strcmp(o.mountpoint, "/mnt"));
	opts_fini(&o);

	/* -o beats everything. */
	CHECK(PARSE(&o, err, "s3://b", "/mnt", "-o",
		    "rw,_netdev,profile=train,region=opt-region,"
		    "endpoint=http://opt:9") == 0);
	CHECK(!strcmp(o.region, "opt-region"));
	CHECK(!strcmp(o.endpoint, "http://opt:9"));
	opts_fini(&o);

	/* The files by option, for fstab lines where no variable reaches. */
	unsetenv("AWS_SHARED_CREDENTIALS_FILE");
	unsetenv("AWS_CONFIG_FILE");
	unsetenv("AWS_REGION");
	CHECK(PARSE(&o, err, "s3://b", "/mnt", "-o", "profile=train", "-o",
		    "credentials_file=/tmp/nonexistent-hintfs") != 0);
	CHECK(strstr(err, "/tmp/nonexistent-hintfs") != NULL);
	opts_fini(&o);
	{
		char co[300], cf[300];

		snprintf(co, sizeof(co), "credentials_file=%s/credentials",
			 dir);
		snprintf(cf, sizeof(cf), "config_file=%s/config", dir);
		CHECK(PARSE(&o, err, "s3://b", "/mnt", "-o", "profile=train",
			    "-o", co, "-o", cf) == 0);
		CHECK(o.access_key && !strcmp(o.access_key, "AK_TRAIN"));
		CHECK(!strcmp(o.region, "us-west-2"));
		opts_fini(&o);
	}

	CHECK(PARSE(&o, err, "s3://b", "/mnt", "-o", "profile=ghost") != 0);
	CHECK(strstr(err, "profile 'ghost' not found in ") != NULL);
	opts_fini(&o);
	CHECK(PARSE(&o, err, "s3://b", "/mnt", "-o", "profile=") != 0);
	CHECK(strstr(err, "-o profile= needs a name") != NULL);
	opts_fini(&o);

	/* A credential on the command line is refused by name, unechoed. */
	CHECK(PARSE(&o, err, "s3://b", "/mnt", "-o",
		    "rw,aws_secret_access_key=SK_ON_ARGV,profile=train") != 0);
	CHECK(strstr(err, "-o aws_secret_access_key: credentials never go on "
			  "the command line") != NULL);
	CHECK(!strstr(err, "SK_ON_ARGV"));
	opts_fini(&o);
	CHECK(PARSE(&o, err, "s3://b", "/mnt", "-o", "session_token=TOKEN_X") !=
	      0);
	CHECK(strstr(err, "-o session_token:") && !strstr(err, "TOKEN_X"));
	opts_fini(&o);

	/* Anonymous: no keys needed, none used even if found. */
	CHECK(PARSE(&o, err, "s3://b", "/mnt", "-o", "no_sign") == 0);
	CHECK(!o.access_key && !o.secret_key);
	opts_fini(&o);
}

int main(void)
{
	char cmd[300];
	int rc;

	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	test_ini();
	test_files();
	test_env_precedence();
	test_paths();
	test_options();
	rc = check_done();
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
	return rc;
}
