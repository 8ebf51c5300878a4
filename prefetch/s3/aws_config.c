/*
 * prefetch/s3/aws_config.c - reads AWS credentials, region and endpoint
 * from the environment and the shared files, as the AWS CLI does.
 *
 * Owns the INI reader for ~/.aws/credentials and ~/.aws/config and the
 * order in which sources are asked (see aws_config.h). Invariant: a secret
 * (secret key, session token) is copied only into struct aws_config, is
 * wiped when that is released, and never reaches a message: errors name
 * the file, the profile and the key, never a value.
 */
#include "prefetch/s3/aws_config.h"

#include "common/fileio.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* A credentials file is a few hundred bytes; 16 MiB is certainly a
 * mistake (a wrong path), and refusing it bounds the memory we use. */
#define AWS_FILE_MAX_BYTES (16u << 20)

/* ---- the INI reader ------------------------------------------------------ */

static bool is_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
}

/* Trims white space off both ends of [*s, *s + *n). */
static void trim(const char **s, size_t *n)
{
	while (*n && is_blank(**s)) {
		(*s)++;
		(*n)--;
	}
	while (*n && is_blank((*s)[*n - 1]))
		(*n)--;
}

/* Cuts a value at an inline comment: '#' or ';' after white space. */
static size_t value_len(const char *v, size_t n)
{
	for (size_t i = 1; i < n; i++)
		if ((v[i] == '#' || v[i] == ';') && is_blank(v[i - 1]))
			return i;
	return n;
}

/* A growable scratch string for one key, value or section name. */
struct scratch {
	char *buf;
	size_t cap;
};

/* Copies @n bytes of @s (plus an optional "@pre." in front) into @sc as a
 * NUL-terminated string. NUL bytes inside stop the string early: harmless. */
static char *scratch_set(struct scratch *sc, const char *pre, const char *s,
			 size_t n, bool lower)
{
	size_t pn = pre ? strlen(pre) + 1 : 0;

	if (pn + n + 1 > sc->cap) {
		size_t cap = pn + n + 1 + 64;
		char *b = realloc(sc->buf, cap);

		if (!b)
			return NULL;
		sc->buf = b;
		sc->cap = cap;
	}
	if (pre) {
		memcpy(sc->buf, pre, pn - 1);
		sc->buf[pn - 1] = '.';
	}
	for (size_t i = 0; i < n; i++) {
		char c = s[i];

		if (lower && c >= 'A' && c <= 'Z')
			c = (char)(c - 'A' + 'a');
		sc->buf[pn + i] = c;
	}
	sc->buf[pn + n] = '\0';
	return sc->buf;
}

int aws_ini_parse(const char *text, size_t len, aws_ini_cb cb, void *arg)
{
	struct scratch sec = {0}, key = {0}, val = {0}, nest = {0};
	bool in_section = false, nested = false;
	const char *p = text, *end = text + len;
	int rc = 0;

	while (p < end && !rc) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		const char *line = p;
		size_t n, d;
		bool indented;

		if (!eol)
			eol = end;
		p = eol + 1;
		n = (size_t)(eol - line);
		indented = n && is_blank(line[0]) && line[0] != '\r';
		trim(&line, &n);
		if (!n || line[0] == '#' || line[0] == ';')
			continue;

		if (line[0] == '[' && !indented) {
			const char *rb = memrchr(line, ']', n);
			const char *name = line + 1;
			size_t nn;

			nested = false;
			in_section = false;
			if (!rb)
				continue; /* garbage: skip up to the next header
					   */
			nn = (size_t)(rb - name);
			trim(&name, &nn);
			if (!scratch_set(&sec, NULL, name, nn, false)) {
				rc = -ENOMEM;
				break;
			}
			in_section = true;
			rc = cb(arg, sec.buf, NULL, NULL);
			continue;
		}
		if (!in_section)
			continue;
		if (indented && !nested)
			continue; /* a continuation line of a plain value */
		if (!indented)
			nested = false;

		/* The line is not NUL-terminated: no str* functions here. */
		for (d = 0; d < n && line[d] != '=' && line[d] != ':'; d++)
			;
		if (d == n)
			continue; /* not "key = value": skipped, as garbage */
		{
			const char *k = line, *v = line + d + 1;
			size_t kn = d, vn = n - d - 1;

			trim(&k, &kn);
			trim(&v, &vn);
			vn = value_len(v, vn);
			trim(&v, &vn);
			if (!kn)
				continue;
			if (!scratch_set(&key, nested ? nest.buf : NULL, k, kn,
					 true) ||
			    !scratch_set(&val, NULL, v, vn, false)) {
				rc = -ENOMEM;
				break;
			}
			if (!vn && !indented) {
				/* "s3 =": the indented lines below belong to a
				 * sub-section named s3. */
				if (!scratch_set(&nest, NULL, k, kn, true)) {
					rc = -ENOMEM;
					break;
				}
				nested = true;
				continue;
			}
			rc = cb(arg, sec.buf, key.buf, val.buf);
		}
	}
	free(sec.buf);
	free(nest.buf);
	free(key.buf);
	if (val.buf)
		explicit_bzero(val.buf, val.cap);
	free(val.buf);
	return rc;
}

/* ---- files --------------------------------------------------------------- */

/* Reads @path whole, leaving no copy of its secrets in freed memory.
 * Returns 0, or -errno (-EFBIG past the limit, -EISDIR). */
static int slurp(const char *path, char **out, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	int rc;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0)
		rc = -errno;
	else if (S_ISDIR(st.st_mode))
		rc = -EISDIR;
	else
		rc = read_secret_fd(fd, AWS_FILE_MAX_BYTES, out, len);
	close(fd);
	return rc;
}

static const char *env(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

/* $HOME, or the home directory of the password database when HOME is
 * unset (a boot-time mount, a systemd unit). NULL when neither exists. */
const char *aws_home_dir(void)
{
	const char *h = env("HOME");
	struct passwd *pw;

	if (h)
		return h;
	pw = getpwuid(getuid());
	return pw && pw->pw_dir && *pw->pw_dir ? pw->pw_dir : NULL;
}

/* The path of one of the two files: @given (an option), else the
 * variable @var, else ~/.aws/@base; "~/" at the start is expanded. */
static char *file_path(const char *given, const char *var, const char *base)
{
	const char *p = given ? given : env(var);
	const char *home = aws_home_dir();
	char *out = NULL;

	if (p && strncmp(p, "~/", 2))
		return strdup(p);
	if (!home)
		return p ? strdup(p) : NULL;
	if (p) {
		if (asprintf(&out, "%s/%s", home, p + 2) < 0)
			out = NULL;
	} else if (asprintf(&out, "%s/.aws/%s", home, base) < 0) {
		out = NULL;
	}
	return out;
}

/* ---- one profile --------------------------------------------------------- */

static const char *const prof_keys[AWS_PK_COUNT] = {
    [AWS_PK_ACCESS_KEY] = "aws_access_key_id",
    [AWS_PK_SECRET_KEY] = "aws_secret_access_key",
    [AWS_PK_TOKEN] = "aws_session_token",
    [AWS_PK_REGION] = "region",
    [AWS_PK_ENDPOINT] = "endpoint_url",
    [AWS_PK_S3_ENDPOINT] = "s3.endpoint_url",
    [AWS_PK_ROLE_ARN] = "role_arn",
    [AWS_PK_CRED_PROCESS] = "credential_process",
    [AWS_PK_SSO] = "sso_start_url",
    [AWS_PK_WEB_IDENTITY] = "web_identity_token_file",
    [AWS_PK_SOURCE_PROFILE] = "source_profile",
    [AWS_PK_CRED_SOURCE] = "credential_source",
    [AWS_PK_SESSION_NAME] = "role_session_name",
    [AWS_PK_EXTERNAL_ID] = "external_id",
    [AWS_PK_DURATION] = "duration_seconds",
    [AWS_PK_STS_REGIONAL] = "sts_regional_endpoints",
    [AWS_PK_STS_ENDPOINT] = "sts.endpoint_url",
    [AWS_PK_IMDS_ENDPOINT] = "ec2_metadata_service_endpoint",
    [AWS_PK_IMDS_V1_DISABLED] = "ec2_metadata_v1_disabled",
};

/* What one file says about one profile. */
struct prof {
	const char *name;
	bool config;	 /* config file: sections are "profile NAME" */
	bool in_section; /* the section being parsed is ours */
	bool found;	 /* the file has a section for the profile */
	char *val[AWS_PK_COUNT];
};

/* Whether section header @s names profile @name in this kind of file. */
static bool section_is(const char *s, const char *name, bool config)
{
	if (!config)
		return !strcmp(s, name);
	if (!strcmp(name, "default") && !strcmp(s, "default"))
		return true;
	if (strncmp(s, "profile", 7) || !is_blank(s[7]))
		return false;
	s += 7;
	while (is_blank(*s))
		s++;
	return !strcmp(s, name);
}

static int prof_cb(void *arg, const char *section, const char *key,
		   const char *value)
{
	struct prof *p = arg;

	if (!key) {
		p->in_section = section_is(section, p->name, p->config);
		p->found |= p->in_section;
		return 0;
	}
	if (!p->in_section)
		return 0;
	for (int i = 0; i < AWS_PK_COUNT; i++) {
		if (strcmp(key, prof_keys[i]))
			continue;
		if (p->val[i]) {
			explicit_bzero(p->val[i], strlen(p->val[i]));
			free(p->val[i]);
		}
		p->val[i] = strdup(value);
		return p->val[i] ? 0 : -ENOMEM;
	}
	/* sso_session means Identity Center as much as sso_start_url. */
	if (!strcmp(key, "sso_session") && !p->val[AWS_PK_SSO]) {
		p->val[AWS_PK_SSO] = strdup(value);
		return p->val[AWS_PK_SSO] ? 0 : -ENOMEM;
	}
	return 0;
}

static void prof_fini(struct prof *p)
{
	for (int i = 0; i < AWS_PK_COUNT; i++) {
		if (p->val[i]) {
			explicit_bzero(p->val[i], strlen(p->val[i]));
			free(p->val[i]);
		}
	}
}

/*
 * Reads profile @p from @path. A missing file is no profile, unless the
 * path was @given explicitly (an -o option); any other error is one.
 */
static int prof_read(struct prof *p, const char *path, bool given,
		     const char *what, char *err, size_t err_len)
{
	char *text = NULL;
	size_t len = 0;
	int rc;

	if (!path)
		return 0;
	rc = slurp(path, &text, &len);
	if (rc == -ENOENT && !given)
		return 0;
	if (rc == -ENOMEM)
		return rc;
	if (rc) {
		snprintf(err, err_len, "%s file '%s': %s", what, path,
			 rc == -EFBIG ? "larger than 16 MiB: not an AWS file"
				      : strerror(-rc));
		return rc;
	}
	rc = aws_ini_parse(text, len, prof_cb, p);
	explicit_bzero(text, len);
	free(text);
	return rc;
}

int aws_profile_read(const char *cred_path, const char *conf_path,
		     const char *name, struct aws_profile *out, char *err,
		     size_t err_len)
{
	struct prof cr = {.name = name}, cf = {.name = name, .config = true};
	int rc;

	memset(out, 0, sizeof(*out));
	rc = prof_read(&cr, cred_path, false, "credentials", err, err_len);
	if (!rc)
		rc = prof_read(&cf, conf_path, false, "config", err, err_len);
	if (!rc) {
		out->found = cr.found || cf.found;
		memcpy(out->cred, cr.val, sizeof(out->cred));
		memcpy(out->conf, cf.val, sizeof(out->conf));
		memset(cr.val, 0, sizeof(cr.val));
		memset(cf.val, 0, sizeof(cf.val));
	}
	prof_fini(&cr);
	prof_fini(&cf);
	return rc;
}

void aws_profile_fini(struct aws_profile *p)
{
	struct prof a = {0}, b = {0};

	memcpy(a.val, p->cred, sizeof(a.val));
	memcpy(b.val, p->conf, sizeof(b.val));
	prof_fini(&a);
	prof_fini(&b);
	memset(p, 0, sizeof(*p));
}

const char *aws_profile_get(const struct aws_profile *p, enum aws_pkey k)
{
	if (p->cred[k] && *p->cred[k])
		return p->cred[k];
	return p->conf[k] && *p->conf[k] ? p->conf[k] : NULL;
}

/* ---- the whole configuration --------------------------------------------- */

static int dup_to(char **dst, const char *src)
{
	if (!src)
		return 0;
	*dst = strdup(src);
	return *dst ? 0 : -ENOMEM;
}

/* Takes the credentials of one file's profile, if it has a pair. */
static int creds_from(struct aws_config *c, struct prof *p, const char *path,
		      const char *from, char *err, size_t err_len)
{
	const char *ak = p->val[AWS_PK_ACCESS_KEY],
		   *sk = p->val[AWS_PK_SECRET_KEY];

	if (!ak && !sk)
		return 0;
	if (!ak || !sk || !*ak || !*sk)
		return log_fail_einval(
		    err, err_len, "profile '%s' in '%s' has %s but no %s",
		    p->name, path,
		    ak && *ak ? "aws_access_key_id" : "aws_secret_access_key",
		    ak && *ak ? "aws_secret_access_key" : "aws_access_key_id");
	c->creds_from = from;
	if (dup_to(&c->access_key, ak) || dup_to(&c->secret_key, sk) ||
	    dup_to(&c->session_token, p->val[AWS_PK_TOKEN]))
		return -ENOMEM;
	return 0;
}

/* The kind of credentials a profile asks for that hintfs cannot get. */
static const char *unsupported_creds(const struct prof *cr,
				     const struct prof *cf)
{
	/* role_arn, credential_process and web identity are the chain's
	 * (prefetch/s3/creds_chain.c); only Identity Center needs a browser. */
	if (cr->val[AWS_PK_SSO] || cf->val[AWS_PK_SSO])
		return "IAM Identity Center (sso_*)";
	return NULL;
}

static bool env_true(const char *name)
{
	const char *v = env(name);

	return v && !strcasecmp(v, "true");
}

int aws_config_load(const struct aws_config_req *req, struct aws_config *c,
		    char *err, size_t err_len)
{
	const char *profile = req->profile, *profile_from = NULL;
	const char *ak = env("AWS_ACCESS_KEY_ID");
	const char *sk = env("AWS_SECRET_ACCESS_KEY");
	struct prof cr = {0}, cf = {0};
	bool named = true,
	     ignore_ep = env_true("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS");
	const char *e;
	int rc;

	memset(c, 0, sizeof(*c));
	if (profile && !*profile)
		return log_fail_einval(err, err_len,
				       "-o profile= needs a name");
	if (!profile && (profile = env("AWS_PROFILE")))
		profile_from = " (from AWS_PROFILE)";
	else if (!profile && (profile = env("AWS_DEFAULT_PROFILE")))
		profile_from = " (from AWS_DEFAULT_PROFILE)";
	if (!profile) {
		profile = "default";
		named = false;
	}
	if (dup_to(&c->profile, profile))
		return -ENOMEM;
	c->credentials_path =
	    file_path(req->credentials_file, "AWS_SHARED_CREDENTIALS_FILE",
		      "credentials");
	c->config_path =
	    file_path(req->config_file, "AWS_CONFIG_FILE", "config");

	cr.name = cf.name = c->profile;
	cf.config = true;
	rc = prof_read(&cr, c->credentials_path, req->credentials_file != NULL,
		       "credentials", err, err_len);
	if (!rc)
		rc = prof_read(&cf, c->config_path, req->config_file != NULL,
			       "config", err, err_len);
	if (rc)
		goto out;
	if (named && !cr.found && !cf.found) {
		rc = -ENOENT;
		snprintf(err, err_len, "profile '%s'%s not found in %s or %s",
			 profile, profile_from ? profile_from : "",
			 c->credentials_path ? c->credentials_path
					     : "~/.aws/credentials",
			 c->config_path ? c->config_path : "~/.aws/config");
		goto out;
	}

	/* NOTE(s3): as in botocore, a profile named on the command line
	 * beats the AWS_ACCESS_KEY_ID pair; AWS_PROFILE does not. */
	if (!req->profile && (ak || sk)) {
		if (!ak || !sk) {
			rc = log_fail_einval(
			    err, err_len,
			    "no credentials: %s is set but %s is not",
			    ak ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY",
			    ak ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID");
			goto out;
		}
		c->creds_from = "environment";
		if (dup_to(&c->access_key, ak) || dup_to(&c->secret_key, sk) ||
		    dup_to(&c->session_token, env("AWS_SESSION_TOKEN"))) {
			rc = -ENOMEM;
			goto out;
		}
	}
	if (!c->creds_from) {
		rc = creds_from(c, &cr, c->credentials_path, "credentials file",
				err, err_len);
		if (!rc && !c->creds_from)
			rc = creds_from(c, &cf, c->config_path, "config file",
					err, err_len);
		if (rc)
			goto out;
	}
	if (!c->creds_from && req->need_credentials) {
		const char *kind = unsupported_creds(&cr, &cf);

		if (kind)
			rc = log_fail_einval(
			    err, err_len,
			    "profile '%s' gets its credentials "
			    "from %s, which hintfs does not support: put "
			    "aws_access_key_id and aws_secret_access_key in "
			    "it, or export AWS_ACCESS_KEY_ID and "
			    "AWS_SECRET_ACCESS_KEY",
			    profile, kind);
		else
			rc = log_fail_einval(
			    err, err_len,
			    "no credentials: set "
			    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, put "
			    "them in profile '%s' of %s (-o profile=NAME for "
			    "another), or mount a public bucket with -o "
			    "no_sign",
			    profile,
			    c->credentials_path ? c->credentials_path
						: "~/.aws/credentials");
		goto out;
	}

	e = env("AWS_REGION");
	if (!e)
		e = env("AWS_DEFAULT_REGION");
	if (!e)
		e = cf.val[AWS_PK_REGION] && *cf.val[AWS_PK_REGION]
			? cf.val[AWS_PK_REGION]
			: NULL;
	if (dup_to(&c->region, e)) {
		rc = -ENOMEM;
		goto out;
	}

	e = NULL;
	if (!ignore_ep) {
		e = env("AWS_ENDPOINT_URL_S3");
		if (!e)
			e = env("AWS_ENDPOINT_URL");
		/* The "s3 =" sub-section is the more specific one. */
		if (!e && cf.val[AWS_PK_S3_ENDPOINT] &&
		    *cf.val[AWS_PK_S3_ENDPOINT])
			e = cf.val[AWS_PK_S3_ENDPOINT];
		if (!e && cf.val[AWS_PK_ENDPOINT] && *cf.val[AWS_PK_ENDPOINT])
			e = cf.val[AWS_PK_ENDPOINT];
	}
	if (dup_to(&c->endpoint, e))
		rc = -ENOMEM;
out:
	prof_fini(&cr);
	prof_fini(&cf);
	return rc;
}

static void wipe(char **s)
{
	if (*s) {
		explicit_bzero(*s, strlen(*s));
		free(*s);
		*s = NULL;
	}
}

void aws_config_fini(struct aws_config *c)
{
	wipe(&c->access_key);
	wipe(&c->secret_key);
	wipe(&c->session_token);
	free(c->profile);
	free(c->region);
	free(c->endpoint);
	free(c->credentials_path);
	free(c->config_path);
	memset(c, 0, sizeof(*c));
}
