/*
 * tests/unit/test_creds_chain.c - the chain prefetch/s3/creds_chain.c
 * builds from the environment and the profile files: which provider
 * answers first, the one-line error when none does, and a profile's keys
 * re-read when the file changes. No network: instance metadata is disabled, and
 * the providers that would call out are only named, never asked.
 */
#include "prefetch/s3/creds_chain.h"

#include "tests/unit/check.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[] = "/tmp/hintfs-test-chain-XXXXXX";
static char cred_path[256], conf_path[256];

static void put(const char *path, const char *text)
{
	char tmp[300];
	FILE *f;

	/* rename: a new inode, as an editor or a sidecar writes it */
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	fputs(text, f);
	fclose(f);
	rename(tmp, path);
}

static void clear_env(void)
{
	static const char *const vars[] = {
	    "AWS_ACCESS_KEY_ID",
	    "AWS_SECRET_ACCESS_KEY",
	    "AWS_SESSION_TOKEN",
	    "AWS_PROFILE",
	    "AWS_DEFAULT_PROFILE",
	    "AWS_ROLE_ARN",
	    "AWS_WEB_IDENTITY_TOKEN_FILE",
	    "AWS_ROLE_SESSION_NAME",
	    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
	    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
	    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
	    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
	    "AWS_REGION",
	    "AWS_DEFAULT_REGION",
	    "AWS_ENDPOINT_URL",
	    "AWS_ENDPOINT_URL_STS",
	    "AWS_EC2_METADATA_SERVICE_ENDPOINT",
	};

	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);
	setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
	setenv("AWS_SHARED_CREDENTIALS_FILE", cred_path, 1);
	setenv("AWS_CONFIG_FILE", conf_path, 1);
}

/* Builds the chain for @profile (NULL: the default) and starts it.
 * Returns creds_start()'s result; the provider's name in @who. */
static int start(const char *profile, struct creds **out, char *who,
		 size_t who_len, char *err, size_t err_len)
{
	struct aws_config aws;
	struct creds_provider *chain[CREDS_CHAIN_MAX];
	size_t n = 0;
	int rc;

	*out = NULL;
	err[0] = who[0] = '\0';
	rc = aws_config_load(&(struct aws_config_req){.profile = profile}, &aws,
			     err, err_len);
	if (!rc)
		rc = creds_chain_build(
		    &(struct creds_chain_req){
			.aws = &aws,
			.profile_named = profile != NULL,
		    },
		    chain, &n);
	if (!rc) {
		CHECK(n == 5);
		rc = creds_start(chain, n, out, err, err_len);
	}
	if (!rc) {
		struct creds_info ci;

		creds_get_info(*out, &ci);
		snprintf(who, who_len, "%s", ci.provider);
	}
	aws_config_fini(&aws);
	return rc;
}

static const char *key_of(struct creds *c, char *buf, size_t len)
{
	const struct creds_snap *s = creds_get(c);

	snprintf(buf, len, "%s", s->access_key);
	creds_put(s);
	return buf;
}

static void test_order(void)
{
	struct creds *c;
	char who[64], err[1024], key[64];

	clear_env();
	put(cred_path,
	    "[default]\naws_access_key_id = AKPROFILE\n"
	    "aws_secret_access_key = SKPROFILE\n"
	    "[p]\naws_access_key_id = AKP\naws_secret_access_key = SKP\n");
	put(conf_path,
	    "[profile proc]\ncredential_process = printf "
	    "'{\"Version\":1,\"AccessKeyId\":\"AKPROC\","
	    "\"SecretAccessKey\":\"S\"}'\n"
	    "aws_access_key_id = AKCONFIG\naws_secret_access_key = SKC\n"
	    "[profile role]\nrole_arn = arn:aws:iam::1:role/r\n"
	    "[profile both]\nrole_arn = arn:aws:iam::1:role/r\n"
	    "source_profile = p\ncredential_source = Environment\n"
	    "[profile badsrc]\nrole_arn = arn:aws:iam::1:role/r\n"
	    "credential_source = Laptop\n"
	    "[profile loop]\nrole_arn = arn:aws:iam::1:role/r\n"
	    "source_profile = loop2\n"
	    "[profile loop2]\nrole_arn = arn:aws:iam::1:role/r\n"
	    "source_profile = loop\n"
	    "[profile sso]\nsso_session = corp\n"
	    "[profile nothing]\nregion = eu-west-1\n");

	/* 1. The environment first... */
	setenv("AWS_ACCESS_KEY_ID", "AKENV", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "SKENV", 1);
	CHECK(start(NULL, &c, who, sizeof(who), err, sizeof(err)) == 0);
	CHECK(!strcmp(who, "environment") &&
	      !strcmp(key_of(c, key, 64), "AKENV"));
	creds_stop(c);
	/* ... unless -o profile= names a profile. */
	CHECK(start("p", &c, who, sizeof(who), err, sizeof(err)) == 0);
	CHECK(!strcmp(who, "profile 'p'") &&
	      !strcmp(key_of(c, key, 64), "AKP"));
	creds_stop(c);
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");

	/* 3. The profile's static keys. */
	CHECK(start(NULL, &c, who, sizeof(who), err, sizeof(err)) == 0);
	CHECK(!strcmp(who, "profile 'default'") &&
	      !strcmp(key_of(c, key, 64), "AKPROFILE"));
	creds_stop(c);
	/* credential_process beats the config file's static keys. */
	CHECK(start("proc", &c, who, sizeof(who), err, sizeof(err)) == 0);
	CHECK(!strcmp(who, "credential_process (profile 'proc')") &&
	      !strcmp(key_of(c, key, 64), "AKPROC"));
	creds_stop(c);

	/* 2. Web identity half set up: a failure that stops the chain, even
	 * though the profile has keys. */
	setenv("AWS_ROLE_ARN", "arn:aws:iam::1:role/r", 1);
	CHECK(start(NULL, &c, who, sizeof(who), err, sizeof(err)) == -EINVAL);
	CHECK(!strcmp(err,
		      "cannot get credentials (environment: "
		      "AWS_ACCESS_KEY_ID not set; web identity: AWS_ROLE_ARN "
		      "is set but not AWS_WEB_IDENTITY_TOKEN_FILE)"));
	unsetenv("AWS_ROLE_ARN");

	/* Each configuration mistake of a profile, in one line. */
	static const struct {
		const char *profile, *msg;
	} bad[] = {
	    {"role", "profile 'role': role_arn needs source_profile, "
		     "credential_source or web_identity_token_file"},
	    {"both", "profile 'both': has both source_profile and "
		     "credential_source"},
	    {"badsrc", "credential_source 'Laptop' is not Environment"},
	    {"loop", "source_profile chain deeper than 4"},
	    {"sso", "profile 'sso': IAM Identity Center (sso_*) is not "
		    "supported"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		CHECK(start(bad[i].profile, &c, who, sizeof(who), err,
			    sizeof(err)) == -EINVAL);
		if (!strstr(err, bad[i].msg)) {
			fprintf(stderr, "case %s: '%s' lacks '%s'\n",
				bad[i].profile, err, bad[i].msg);
			CHECK(0);
		}
		CHECK(!strchr(err, '\n'));
	}

	/* Nothing anywhere: every provider and why, in the SDKs' order. */
	CHECK(start("nothing", &c, who, sizeof(who), err, sizeof(err)) ==
	      -ENOENT);
	CHECK(!strcmp(err,
		      "no credentials (environment: skipped: -o profile= "
		      "names a profile; web identity: AWS_ROLE_ARN not set; "
		      "profile 'nothing': no credentials in it; container "
		      "credentials: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI and "
		      "_FULL_URI not set; instance metadata: "
		      "AWS_EC2_METADATA_DISABLED is true)"));

	/* 4. A container URL in plain http to a stranger is refused. */
	setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://example.com/creds",
	       1);
	CHECK(start("nothing", &c, who, sizeof(who), err, sizeof(err)) ==
	      -EINVAL);
	CHECK(strstr(err,
		     "container credentials: "
		     "AWS_CONTAINER_CREDENTIALS_FULL_URI 'http://example.com/"
		     "creds' is plain http") != NULL);
	setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1@evil/",
	       1);
	setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "tok-SECRET", 1);
	CHECK(start("nothing", &c, who, sizeof(who), err, sizeof(err)) ==
	      -EINVAL);
	CHECK(
	    strstr(err,
		   "container credentials: "
		   "AWS_CONTAINER_CREDENTIALS_FULL_URI 'http://***@evil/' has "
		   "user info before '@' (its host is 'evil')") != NULL);
	CHECK(!strstr(err, "tok-SECRET") && !strchr(err, '\n'));
	unsetenv("AWS_CONTAINER_AUTHORIZATION_TOKEN");
	unsetenv("AWS_CONTAINER_CREDENTIALS_FULL_URI");
}

/* AWS_CONTAINER_CREDENTIALS_FULL_URI: the host is compared exactly, after
 * libcurl parsed the URL, so that the authorization token never goes over
 * plain http to a stranger. */
static void test_container_url(void)
{
	static const struct {
		const char *url, *fetched, *why;
	} cases[] = {
	    {"http://127.0.0.1:9911/creds", "http://127.0.0.1:9911/creds",
	     NULL},
	    {"http://127.1/c", "http://127.0.0.1/c", NULL},
	    {"http://127.200.3.4/c", "http://127.200.3.4/c", NULL},
	    {"http://localhost/c", "http://localhost/c", NULL},
	    {"http://[::1]:80/c", "http://[::1]:80/c", NULL},
	    {"http://169.254.170.2/v2/creds", "http://169.254.170.2/v2/creds",
	     NULL},
	    {"http://169.254.170.23/v1/credentials",
	     "http://169.254.170.23/v1/credentials", NULL},
	    {"http://[FD00:EC2::23]/v1/credentials",
	     "http://[FD00:EC2::23]/v1/credentials", NULL},
	    {"http://[0:0:0:0:0:0:0:1]/c", "http://[::1]/c", NULL},
	    {"https://creds.example.com/x", "https://creds.example.com/x",
	     NULL},
	    /* The attacks: what precedes '@' is user info, not the host. */
	    {"http://127.0.0.1@evil.example/", NULL,
	     "'http://***@evil.example/' has user info before '@' "
	     "(its host is 'evil.example')"},
	    {"http://169.254.170.2:80@evil.example/", NULL,
	     "'http://***@evil.example/' has user info"},
	    {"http://user:s3cret@127.0.0.1/", NULL,
	     "'http://***@127.0.0.1/' has user info"},
	    {"https://a:b@creds.example.com/", NULL, "has user info"},
	    {"http://127.0.0.1.evil.example/", NULL,
	     "'http://127.0.0.1.evil.example/' is plain http to a host "
	     "other than the loopback or the ECS/EKS agent"},
	    {"http://localhost.evil.example/", NULL, "is plain http"},
	    {"http://169.254.170.2.evil.example/", NULL, "is plain http"},
	    {"http://169.254.170.3/", NULL, "is plain http"},
	    {"http://[::ffff:7f00:1]/", NULL, "is plain http"},
	    {"http://evil.example#@127.0.0.1/", NULL, "is plain http"},
	    {"http://evil.example?@127.0.0.1/", NULL, "is plain http"},
	    {"file:///etc/passwd", NULL, "is not an http or https URL"},
	    {"127.0.0.1/creds", NULL, "is not a URL"},
	    {"http://127.0.0.1/a\nb", NULL,
	     "'http://127.0.0.1/a?b' is not "
	     "a URL"},
	};
	char why[700], *out;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int rc;

		why[0] = '\0';
		rc = creds_container_url_check(cases[i].url, &out, why,
					       sizeof(why));
		if (cases[i].fetched) {
			CHECK(rc == 0);
			CHECK(out && !strcmp(out, cases[i].fetched));
		} else {
			CHECK(rc == -EINVAL && !out);
			CHECK(!strchr(why, '\n') && !strstr(why, "s3cret"));
		}
		if (cases[i].why && !strstr(why, cases[i].why)) {
			fprintf(stderr, "'%s': '%s' lacks '%s'\n", cases[i].url,
				why, cases[i].why);
			CHECK(0);
		}
		free(out);
	}
}

static void test_reread(void)
{
	struct creds *c;
	const struct creds_snap *s;
	char who[64], err[1024], key[64];
	uint64_t gen;

	clear_env();
	put(cred_path, "[rot]\naws_access_key_id = AKOLD\n"
		       "aws_secret_access_key = SKOLD\n");
	CHECK(start("rot", &c, who, sizeof(who), err, sizeof(err)) == 0);
	s = creds_get(c);
	gen = s->gen;
	creds_put(s);
	/* A sidecar rotates the keys: seen within the watch interval. */
	put(cred_path, "[rot]\naws_access_key_id = AKNEW\n"
		       "aws_secret_access_key = SKNEW\n");
	CHECK(creds_wait_newer(c, gen, 15000));
	CHECK(!strcmp(key_of(c, key, 64), "AKNEW"));
	creds_stop(c);
}

int main(void)
{
	if (!mkdtemp(dir))
		return 1;
	snprintf(cred_path, sizeof(cred_path), "%s/credentials", dir);
	snprintf(conf_path, sizeof(conf_path), "%s/config", dir);
	test_order();
	test_container_url();
	test_reread();
	unlink(cred_path);
	unlink(conf_path);
	rmdir(dir);
	return check_done();
}
