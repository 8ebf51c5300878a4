/*
 * tests/unit/test_creds.c - the credential formats, the chain's choice and
 * error line, credential_process, and the refresh thread (prefetch/creds*).
 *
 * No network: the HTTP providers are tested by tests/integration/
 * test_creds.py against loopback servers. The refresh tests wait on the
 * refresh thread with generous limits; they assert what happened, never
 * how fast.
 */
#include "prefetch/s3/creds.h"

#include "tests/unit/check.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SECRET "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"

static void test_time(void)
{
	int64_t t = 0;

	CHECK(creds_parse_time("2026-11-25T01:02:03Z", &t) == 0 &&
	      t == 1795568523);
	CHECK(creds_parse_time("2026-11-25T01:02:03.123Z", &t) == 0 &&
	      t == 1795568523);
	CHECK(creds_parse_time("2026-11-25T02:02:03+01:00", &t) == 0 &&
	      t == 1795568523);
	CHECK(creds_parse_time("2026-11-24T19:32:03-0530", &t) == 0 &&
	      t == 1795568523);
	CHECK(creds_parse_time("1970-01-01T00:00:00Z", &t) == 0 && t == 0);
	CHECK(creds_parse_time("2026-11-25T01:02:03", &t) == -EINVAL);
	CHECK(creds_parse_time("2026-13-25T01:02:03Z", &t) == -EINVAL);
	CHECK(creds_parse_time("2026-11-25T01:02:03Zjunk", &t) == -EINVAL);
	CHECK(creds_parse_time("2026-11-25", &t) == -EINVAL);
	CHECK(creds_parse_time("", &t) == -EINVAL);
	CHECK(creds_parse_time(NULL, &t) == -EINVAL);
}

static int pj(const char *s, struct creds_value *v, char *err, size_t n)
{
	err[0] = '\0';
	return creds_parse_process_json(s, strlen(s), v, err, n);
}

static void test_process_json(void)
{
	struct creds_value v;
	char err[256];

	CHECK(pj("{\"Version\": 1, \"AccessKeyId\": \"AKIDEXAMPLE\", "
		 "\"SecretAccessKey\": \"" SECRET "\", \"SessionToken\": "
		 "\"tok\\u00e9\\/x\", \"Expiration\": "
		 "\"2026-11-25T01:02:03Z\"}\n",
		 &v, err, sizeof(err)) == 0);
	CHECK(v.access_key && !strcmp(v.access_key, "AKIDEXAMPLE"));
	CHECK(v.secret_key && !strcmp(v.secret_key, SECRET));
	CHECK(v.session_token && !strcmp(v.session_token, "tok\xc3\xa9/x"));
	CHECK(v.expires == 1795568523);
	creds_value_fini(&v);
	CHECK(!v.access_key && !v.secret_key);

	/* No token, no expiry: long-lived keys; unknown fields skipped. */
	CHECK(pj("{\"Version\":1,\"AccessKeyId\":\"A\",\"SecretAccessKey\":"
		 "\"S\",\"Extra\":{\"a\":[1,2,{\"b\":null}]},\"x\":true}",
		 &v, err, sizeof(err)) == 0);
	CHECK(v.session_token == NULL && v.expires == 0);
	creds_value_fini(&v);

	static const struct {
		const char *in, *msg;
	} bad[] = {
	    {"", "empty output"},
	    {"hello world", "not a JSON object"},
	    {"[1]", "not a JSON object"},
	    {"{\"Version\":2,\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\"}",
	     "Version is not 1"},
	    {"{\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\"}", "no Version"},
	    {"{\"Version\":\"1\",\"AccessKeyId\":\"A\",\"SecretAccessKey\":"
	     "\"S\"}",
	     "Version is not 1"},
	    {"{\"Version\":1,\"AccessKeyId\":\"A\"}", "no SecretAccessKey"},
	    {"{\"Version\":1,\"AccessKeyId\":\"\",\"SecretAccessKey\":\"S\"}",
	     "no AccessKeyId"},
	    {"{\"Version\":1,\"AccessKeyId\":1,\"SecretAccessKey\":\"S\"}",
	     "AccessKeyId is not a string"},
	    {"{\"Version\":1,\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\","
	     "\"Expiration\":\"tomorrow\"}",
	     "Expiration is not"},
	    {"{\"Version\":1,\"AccessKeyId\":\"A\",\"SecretAccessKey\":"
	     "\"" SECRET "\"} trailing",
	     "text after the JSON object"},
	    {"{\"Version\":1,\"AccessKeyId\":\"A\",\"AccessKeyId\":\"B\","
	     "\"SecretAccessKey\":\"S\"}",
	     "given twice"},
	    {"{\"Version\":1,\"AccessKeyId\":\"A\",\"SecretAccessKey\":"
	     "\"" SECRET,
	     "unterminated string"},
	    {"{\"Version\":1,\"AccessKeyId\":\"A\\u0000\",\"SecretAccessKey\":"
	     "\"S\"}",
	     "NUL"},
	    {"{\"Version\":1 \"AccessKeyId\":\"A\"}", "missing ','"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = pj(bad[i].in, &v, err, sizeof(err));

		CHECK(rc == -EINVAL);
		CHECK(!v.access_key && !v.secret_key);
		if (!strstr(err, bad[i].msg)) {
			fprintf(stderr, "case %zu: '%s' lacks '%s'\n", i, err,
				bad[i].msg);
			CHECK(0);
		}
		CHECK(!strstr(err, SECRET));
	}
}

static void test_http_json(void)
{
	struct creds_value v;
	char err[256];
	const char *imds =
	    "{\n  \"Code\" : \"Success\",\n  \"LastUpdated\" : "
	    "\"2026-11-24T23:00:00Z\",\n  \"Type\" : \"AWS-HMAC\",\n"
	    "  \"AccessKeyId\" : \"ASIAIMDS\",\n  \"SecretAccessKey\" : "
	    "\"" SECRET "\",\n  \"Token\" : \"TOKEN\",\n  \"Expiration\" : "
	    "\"2026-11-25T01:02:03Z\"\n}";

	CHECK(creds_parse_http_json(imds, strlen(imds), &v, err, sizeof(err)) ==
	      0);
	CHECK(!strcmp(v.access_key, "ASIAIMDS") &&
	      !strcmp(v.session_token, "TOKEN"));
	CHECK(v.expires == 1795568523);
	creds_value_fini(&v);

	const char *fail = "{\"Code\":\"AssumeRoleUnauthorizedAccess\","
			   "\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\"}";
	CHECK(creds_parse_http_json(fail, strlen(fail), &v, err, sizeof(err)) ==
	      -EINVAL);
	CHECK(strstr(err, "AssumeRoleUnauthorizedAccess") != NULL);
	/* The container endpoint's answer has no Code. */
	const char *ecs =
	    "{\"AccessKeyId\":\"ASIAECS\",\"SecretAccessKey\":\"S\","
	    "\"Token\":\"T\",\"RoleArn\":\"arn:aws:iam::1:role/r\","
	    "\"Expiration\":\"2026-11-25T01:02:03Z\"}";
	CHECK(creds_parse_http_json(ecs, strlen(ecs), &v, err, sizeof(err)) ==
	      0);
	CHECK(!strcmp(v.access_key, "ASIAECS"));
	creds_value_fini(&v);
}

static void test_sts_xml(void)
{
	struct creds_value v;
	char err[512];
	const char *ok =
	    "<AssumeRoleResponse "
	    "xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">\n"
	    "  <AssumeRoleResult>\n"
	    "    <AssumedRoleUser><Arn>arn:aws:sts::1:assumed-role/r/s</Arn>"
	    "<AssumedRoleId>AROA:s</AssumedRoleId></AssumedRoleUser>\n"
	    "    <Credentials>\n"
	    "      <AccessKeyId>ASIASTS</AccessKeyId>\n"
	    "      <SecretAccessKey>" SECRET "</SecretAccessKey>\n"
	    "      <SessionToken>FwoG+/=</SessionToken>\n"
	    "      <Expiration>2026-11-25T01:02:03Z</Expiration>\n"
	    "    </Credentials>\n"
	    "  </AssumeRoleResult>\n"
	    "  <ResponseMetadata><RequestId>x</RequestId></ResponseMetadata>\n"
	    "</AssumeRoleResponse>\n";
	const char *wi =
	    "<AssumeRoleWithWebIdentityResponse><"
	    "AssumeRoleWithWebIdentityResult>"
	    "<SubjectFromWebIdentityToken>sub</SubjectFromWebIdentityToken>"
	    "<Credentials><SessionToken>T</SessionToken><SecretAccessKey>S"
	    "</SecretAccessKey><Expiration>2026-11-25T01:02:03.000Z</"
	    "Expiration>"
	    "<AccessKeyId>ASIAWI</AccessKeyId></Credentials>"
	    "</AssumeRoleWithWebIdentityResult></"
	    "AssumeRoleWithWebIdentityResponse>";
	const char *e =
	    "<ErrorResponse "
	    "xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">"
	    "<Error><Type>Sender</Type><Code>AccessDenied</Code><Message>User "
	    "is "
	    "not authorized to perform: sts:AssumeRole</Message></Error>"
	    "<RequestId>r</RequestId></ErrorResponse>";

	CHECK(creds_parse_sts_xml(ok, strlen(ok), &v, err, sizeof(err)) == 0);
	CHECK(!strcmp(v.access_key, "ASIASTS") &&
	      !strcmp(v.secret_key, SECRET));
	CHECK(!strcmp(v.session_token, "FwoG+/=") && v.expires == 1795568523);
	creds_value_fini(&v);
	CHECK(creds_parse_sts_xml(wi, strlen(wi), &v, err, sizeof(err)) == 0);
	CHECK(!strcmp(v.access_key, "ASIAWI") && v.expires == 1795568523);
	creds_value_fini(&v);
	CHECK(creds_parse_sts_xml(e, strlen(e), &v, err, sizeof(err)) ==
	      -EACCES);
	CHECK(strstr(err, "AccessDenied: User is not authorized") != NULL);
	/* A blank Code and Message (the fuzzer's find): still one line that
	 * says something. */
	static const char blank[] =
	    "<ErrorResponse><Error><Code>\r\r</Code>"
	    "<Message> </Message></Error></ErrorResponse>";
	CHECK(creds_parse_sts_xml(blank, strlen(blank), &v, err, sizeof(err)) ==
	      -EACCES);
	CHECK(!strcmp(err, "an error without a Code"));
	CHECK(creds_parse_sts_xml("nope", 4, &v, err, sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "not XML") != NULL);
	const char *empty =
	    "<AssumeRoleResponse><AssumeRoleResult/></AssumeRoleResponse>";
	CHECK(creds_parse_sts_xml(empty, strlen(empty), &v, err, sizeof(err)) ==
	      -EINVAL);
	CHECK(strstr(err, "no Credentials") != NULL);
	CHECK(!v.access_key);
}

/* ---- a provider the tests steer -------------------------------------------
 */

struct fake {
	struct creds_provider base;
	int calls;
	int fail_from;	/* calls from this one on fail (0: never) */
	int lifetime_s; /* 0: no expiry */
	int rc;		/* what a failure returns */
	const char *why;
};

static int fake_fetch(struct creds_provider *p, struct creds_value *out,
		      char *err, size_t err_len)
{
	struct fake *f = (struct fake *)p;
	char ak[32];

	memset(out, 0, sizeof(*out));
	f->calls++;
	if (f->fail_from && f->calls >= f->fail_from) {
		snprintf(err, err_len, "%s", f->why);
		return f->rc;
	}
	snprintf(ak, sizeof(ak), "AKIDFAKE%04d", f->calls);
	out->access_key = strdup(ak);
	out->secret_key = strdup(SECRET);
	out->expires = f->lifetime_s ? time(NULL) + f->lifetime_s : 0;
	return 0;
}

static void fake_destroy(struct creds_provider *p)
{
	(void)p; /* on the test's stack */
}

static struct fake fake(const char *name, int lifetime_s)
{
	return (struct fake){
	    .base = {.name = name,
		     .fetch = fake_fetch,
		     .destroy = fake_destroy},
	    .lifetime_s = lifetime_s,
	    .rc = -EIO,
	    .why = "server down",
	};
}

static void test_chain(void)
{
	struct creds_provider *chain[4];
	struct creds *c = NULL;
	struct fake good = fake("profile 'p'", 0), later = fake("later", 0);
	const struct creds_snap *s;
	struct creds_info ci;
	char err[1024];

	/* The first that answers wins; the ones after it are not asked. */
	chain[0] =
	    creds_absent_create("environment", 0, "AWS_ACCESS_KEY_ID not set");
	chain[1] =
	    creds_absent_create("web identity", 0, "AWS_ROLE_ARN not set");
	chain[2] = &good.base;
	chain[3] = &later.base;
	CHECK(creds_start(chain, 4, &c, err, sizeof(err)) == 0);
	CHECK(good.calls == 1 && later.calls == 0);
	s = creds_get(c);
	CHECK(!strcmp(s->access_key, "AKIDFAKE0001") &&
	      !strcmp(s->secret_key, SECRET));
	creds_get_info(c, &ci);
	CHECK(!strcmp(ci.provider, "profile 'p'") &&
	      !strcmp(ci.key_tail, "0001"));
	CHECK(ci.expires == 0 && ci.refreshes == 0);
	/* Fixed keys: nothing can refresh them. */
	CHECK(!creds_expired(c, s->gen));
	creds_put(s);
	creds_stop(c);

	/* None answers: one line naming each and why. */
	chain[0] =
	    creds_absent_create("environment", 0, "AWS_ACCESS_KEY_ID not set");
	chain[1] =
	    creds_absent_create("container credentials", 0,
				"AWS_CONTAINER_CREDENTIALS_FULL_URI not set");
	CHECK(creds_start(chain, 2, &c, err, sizeof(err)) == -ENOENT);
	CHECK(!strcmp(err, "no credentials (environment: AWS_ACCESS_KEY_ID not "
			   "set; container credentials: "
			   "AWS_CONTAINER_CREDENTIALS_FULL_URI not set)"));
	CHECK(!strchr(err, '\n'));

	/* One that is set up but fails stops the chain, as in the SDKs. */
	struct fake broken = fake("web identity", 0);
	later = fake("later", 0);
	broken.fail_from = 1;
	broken.rc = -EACCES;
	broken.why = "AccessDenied: not allowed";
	chain[0] =
	    creds_absent_create("environment", 0, "AWS_ACCESS_KEY_ID not set");
	chain[1] = &broken.base;
	chain[2] = &later.base;
	CHECK(creds_start(chain, 3, &c, err, sizeof(err)) == -EACCES);
	CHECK(later.calls == 0);
	CHECK(strstr(err,
		     "cannot get credentials (environment: "
		     "AWS_ACCESS_KEY_ID not set; web identity: AccessDenied: "
		     "not allowed)") != NULL);

	/* Already expired at mount: refused, with the reason. */
	struct fake stale = fake("instance metadata", -10);
	chain[0] = &stale.base;
	CHECK(creds_start(chain, 1, &c, err, sizeof(err)) == -EKEYEXPIRED);
	CHECK(strstr(err, "already expired") != NULL);
}

static void test_refresh(void)
{
	struct creds_provider *chain[1];
	struct fake f = fake("container credentials", 2);
	struct creds *c = NULL;
	const struct creds_snap *s, *s2;
	struct creds_info ci;
	char err[256];
	uint64_t gen;

	/* 2 s credentials are renewed at half their life, by the thread. */
	chain[0] = &f.base;
	CHECK(creds_start(chain, 1, &c, err, sizeof(err)) == 0);
	s = creds_get(c);
	gen = s->gen;
	CHECK(creds_wait_newer(c, gen, 10000));
	s2 = creds_get(c);
	CHECK(s2->gen > gen && strcmp(s2->access_key, s->access_key));
	/* The old snapshot stays whole until put back. */
	CHECK(!strcmp(s->access_key, "AKIDFAKE0001") &&
	      !strcmp(s->secret_key, SECRET));
	creds_put(s);
	creds_put(s2);
	creds_get_info(c, &ci);
	CHECK(ci.refreshes >= 1 && ci.refresh_failures == 0 && ci.expires);
	creds_stop(c);

	/* A failing refresh keeps the current ones and counts the failure. */
	f = fake("instance metadata", 2);
	f.fail_from = 2;
	chain[0] = &f.base;
	CHECK(creds_start(chain, 1, &c, err, sizeof(err)) == 0);
	s = creds_get(c);
	for (int i = 0; i < 100; i++) {
		creds_get_info(c, &ci);
		if (ci.refresh_failures)
			break;
		usleep(50000);
	}
	CHECK(ci.refresh_failures >= 1 && ci.refreshes == 0);
	s2 = creds_get(c);
	CHECK(s2->gen == s->gen && !strcmp(s2->access_key, "AKIDFAKE0001"));
	creds_put(s);
	creds_put(s2);
	creds_stop(c);

	/* "Expired" from the server: one refresh per generation, at once. */
	f = fake("web identity", 3600);
	chain[0] = &f.base;
	CHECK(creds_start(chain, 1, &c, err, sizeof(err)) == 0);
	s = creds_get(c);
	gen = s->gen;
	creds_put(s);
	usleep(1100 * 1000); /* past the 1 s between two fetches */
	CHECK(creds_expired(c, gen));
	CHECK(creds_expired(c, gen)); /* a second request: same refresh */
	CHECK(creds_wait_newer(c, gen, 10000));
	usleep(200 * 1000);
	creds_get_info(c, &ci);
	CHECK(ci.refreshes == 1 && f.calls == 2);
	creds_stop(c);
}

static void test_process(void)
{
	struct creds_provider *p;
	struct creds_value v;
	char err[512];
	int rc;

	setenv("AWS_SECRET_ACCESS_KEY", SECRET, 1);
	setenv("AWS_SESSION_TOKEN", "ENVTOKEN", 1);
	/* The child sees neither of them. */
	p = creds_process_create(
	    "credential_process",
	    "test -z \"$AWS_SECRET_ACCESS_KEY$AWS_SESSION_TOKEN\" && "
	    "printf '{\"Version\": 1, \"AccessKeyId\": \"AKIDPROC\", "
	    "\"SecretAccessKey\": \"S\", \"Expiration\": "
	    "\"2099-01-01T00:00:00Z\"}'",
	    5000);
	CHECK(p && p->fetch(p, &v, err, sizeof(err)) == 0);
	CHECK(v.access_key && !strcmp(v.access_key, "AKIDPROC"));
	creds_value_fini(&v);
	creds_provider_destroy(p);

	/* Hangs (and its child too): killed at the timeout. */
	p = creds_process_create("credential_process",
				 "sleep 30 & sleep 30 --token=hush", 500);
	rc = p->fetch(p, &v, err, sizeof(err));
	CHECK(rc == -ETIMEDOUT);
	CHECK(strstr(err, "command 'sleep' gave no answer within 0.5 s") !=
	      NULL);
	CHECK(!strstr(err, "hush"));
	creds_provider_destroy(p);

	/* Garbage on stdout: the parser's reason, never the text. */
	p = creds_process_create("credential_process", "echo " SECRET, 5000);
	CHECK(p->fetch(p, &v, err, sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "its output is not credentials: not a JSON object") !=
	      NULL);
	CHECK(!strstr(err, SECRET));
	creds_provider_destroy(p);

	/* A failure: the exit status and the last line of stderr. */
	p = creds_process_create(
	    "credential_process",
	    "echo first >&2; echo 'token expired, run login' >&2; exit 3",
	    5000);
	CHECK(p->fetch(p, &v, err, sizeof(err)) == -EACCES);
	CHECK(strstr(err, "exited with status 3: token expired, run login") !=
	      NULL);
	creds_provider_destroy(p);

	/* Too much output. */
	p = creds_process_create("credential_process",
				 "head -c 100000 /dev/zero | tr '\\0' x", 5000);
	CHECK(p->fetch(p, &v, err, sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "more than 64 KiB") != NULL);
	creds_provider_destroy(p);
	unsetenv("AWS_SECRET_ACCESS_KEY");
	unsetenv("AWS_SESSION_TOKEN");
}

int main(void)
{
	test_time();
	test_process_json();
	test_http_json();
	test_sts_xml();
	test_chain();
	test_refresh();
	test_process();
	return check_done();
}
