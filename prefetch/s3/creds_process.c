/*
 * prefetch/s3/creds_process.c - credential_process: a program of the user's
 * that prints credentials as JSON (Version 1) on its stdout.
 *
 * Owns running it: /bin/sh -c COMMAND (as the Go and Rust SDKs do, so the
 * profile's quoting works), in its own process group so that a timeout
 * kills the program and whatever it started, with stdin from /dev/null,
 * no descriptor of ours but the two pipes, and an environment without
 * the AWS secrets it has no use for (the SDKs pass everything; a helper
 * that logs its environment would then log our keys).
 * Invariant: stdout (credentials) is wiped after parsing and never
 * quoted; errors name the program (first word of the command, never its
 * arguments, which may hold a token) and quote at most the last line of
 * its stderr.
 */
#include "prefetch/s3/creds.h"

#include "common/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* The SDKs set no limit; a helper that hangs must not hang the mount or
 * the refresh forever. A minute covers an interactive MFA prompt tool
 * that answers from its cache. */
#define CREDS_PROCESS_TIMEOUT_MS 60000
/* Its stdout is a few hundred bytes of JSON. */
#define CREDS_PROCESS_MAX_OUT (64u << 10)

/* Variables the child does not get: secrets of the environment provider
 * (if the chain got this far they are not ours to give away) and the
 * container endpoint's token. */
static const char *const env_strip[] = {
    "AWS_SECRET_ACCESS_KEY=",
    "AWS_SESSION_TOKEN=",
    "AWS_SECURITY_TOKEN=",
    "AWS_ACCESS_KEY_ID=",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN=",
};

struct process_prov {
	struct creds_provider base;
	char *name;
	char *command;
	char prog[64]; /* first word, for messages */
	int timeout_ms;
};

static char **child_env(void)
{
	size_t n = 0, k = 0;
	char **e;

	while (environ && environ[n])
		n++;
	e = calloc(n + 1, sizeof(*e));
	if (!e)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		bool drop = false;

		for (size_t j = 0; j < sizeof(env_strip) / sizeof(env_strip[0]);
		     j++)
			if (!strncmp(environ[i], env_strip[j],
				     strlen(env_strip[j])))
				drop = true;
		if (!drop)
			e[k++] = environ[i];
	}
	return e;
}

/* The last non-empty line of @s (@n bytes), cut to fit @out. */
static void last_line(const char *s, size_t n, char *out, size_t len)
{
	size_t end = n, start;

	while (end &&
	       (s[end - 1] == '\n' || s[end - 1] == '\r' || s[end - 1] == ' '))
		end--;
	start = end;
	while (start && s[start - 1] != '\n')
		start--;
	snprintf(out, len, "%.*s", (int)(end - start), s + start);
	for (char *p = out; *p; p++)
		if ((unsigned char)*p < 0x20)
			*p = ' ';
}

static int process_fetch(struct creds_provider *p, struct creds_value *out,
			 char *err, size_t err_len)
{
	struct process_prov *pp = (struct process_prov *)p;
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	int opipe[2] = {-1, -1}, epipe[2] = {-1, -1}, rc = 0, status = 0;
	char *argv[] = {"sh", "-c", pp->command, NULL};
	char *obuf = NULL, ebuf[2048], why[300];
	size_t olen = 0, elen = 0;
	bool timed_out = false, too_much = false;
	char **envp = NULL;
	uint64_t deadline = mono_ms() + (uint64_t)pp->timeout_ms;
	sigset_t none, dfl;
	pid_t pid = -1;

	memset(out, 0, sizeof(*out));
	obuf = malloc(CREDS_PROCESS_MAX_OUT + 1);
	envp = child_env();
	if (!obuf || !envp)
		rc = -ENOMEM;
	else if (pipe2(opipe, O_CLOEXEC) || pipe2(epipe, O_CLOEXEC))
		rc = -errno;
	if (rc) {
		snprintf(err, err_len, "cannot start %s: %s", pp->prog,
			 strerror(-rc));
		goto out;
	}
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, opipe[1], 1);
	posix_spawn_file_actions_adddup2(&fa, epipe[1], 2);
	/* NOTE(fuse): /dev/fuse and the cache's files must not leak into a
	 * helper that may outlive us. */
	posix_spawn_file_actions_addclosefrom_np(&fa, 3);
	posix_spawnattr_init(&at);
	sigemptyset(&none);
	sigfillset(&dfl);
	posix_spawnattr_setsigmask(&at, &none);
	posix_spawnattr_setsigdefault(&at, &dfl);
	posix_spawnattr_setpgroup(&at, 0);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK |
					  POSIX_SPAWN_SETSIGDEF |
					  POSIX_SPAWN_SETPGROUP);
	rc = -posix_spawn(&pid, "/bin/sh", &fa, &at, argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	close(opipe[1]);
	close(epipe[1]);
	opipe[1] = epipe[1] = -1;
	if (rc) {
		pid = -1;
		snprintf(err, err_len, "cannot start %s: %s", pp->prog,
			 strerror(-rc));
		goto out;
	}

	while (opipe[0] >= 0 || epipe[0] >= 0) {
		struct pollfd pf[2] = {{opipe[0], POLLIN, 0},
				       {epipe[0], POLLIN, 0}};
		uint64_t now = mono_ms();
		int r;

		if (now >= deadline) {
			timed_out = true;
			break;
		}
		r = poll(pf, 2, (int)(deadline - now));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			break;
		for (int i = 0; i < 2; i++) {
			int *fd = i ? &epipe[0] : &opipe[0];
			char tmp[4096];
			ssize_t n;

			if (*fd < 0 ||
			    !(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			n = read(*fd, tmp, sizeof(tmp));
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				close(*fd);
				*fd = -1;
				continue;
			}
			if (!i) {
				if (olen + (size_t)n > CREDS_PROCESS_MAX_OUT) {
					too_much = true;
					timed_out = false;
					goto stop;
				}
				memcpy(obuf + olen, tmp, (size_t)n);
				olen += (size_t)n;
			} else {
				/* keep the tail: the last line says why */
				if ((size_t)n >= sizeof(ebuf)) {
					memcpy(ebuf, tmp + n - sizeof(ebuf),
					       sizeof(ebuf));
					elen = sizeof(ebuf);
				} else {
					if (elen + (size_t)n > sizeof(ebuf)) {
						size_t drop = elen + (size_t)n -
							      sizeof(ebuf);

						memmove(ebuf, ebuf + drop,
							elen - drop);
						elen -= drop;
					}
					memcpy(ebuf + elen, tmp, (size_t)n);
					elen += (size_t)n;
				}
			}
			explicit_bzero(tmp, sizeof(tmp));
		}
	}
stop:
	if (timed_out || too_much) {
		kill(-pid, SIGKILL);
		kill(pid, SIGKILL);
	}
	/* Both pipes are closed; the child may still run (it closed them
	 * itself): it gets what is left of the deadline. */
	for (;;) {
		pid_t w = waitpid(pid, &status, WNOHANG);

		if (w == pid || (w < 0 && errno != EINTR))
			break;
		if (w == 0 && mono_ms() >= deadline) {
			timed_out = true;
			kill(-pid, SIGKILL);
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			break;
		}
		if (w == 0)
			usleep(2000);
	}
	pid = -1;
	if (timed_out) {
		rc = -ETIMEDOUT;
		snprintf(err, err_len,
			 "%s gave no answer within %g s and was "
			 "killed",
			 pp->prog, pp->timeout_ms / 1000.0);
		goto out;
	}
	if (too_much) {
		rc = -EINVAL;
		snprintf(err, err_len,
			 "%s printed more than 64 KiB: not "
			 "credentials",
			 pp->prog);
		goto out;
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		char line[200];

		last_line(ebuf, elen, line, sizeof(line));
		rc = -EACCES;
		if (WIFEXITED(status))
			snprintf(err, err_len, "%s exited with status %d%s%s",
				 pp->prog, WEXITSTATUS(status),
				 line[0] ? ": " : "", line);
		else
			snprintf(err, err_len, "%s was killed by signal %d",
				 pp->prog, WTERMSIG(status));
		goto out;
	}
	rc = creds_parse_process_json(obuf, olen, out, why, sizeof(why));
	if (rc)
		snprintf(err, err_len, "%s: its output is not credentials: %s",
			 pp->prog, why);
out:
	if (pid > 0) {
		kill(-pid, SIGKILL);
		waitpid(pid, &status, 0);
	}
	for (int i = 0; i < 2; i++) {
		if (opipe[i] >= 0)
			close(opipe[i]);
		if (epipe[i] >= 0)
			close(epipe[i]);
	}
	if (obuf) {
		explicit_bzero(obuf, CREDS_PROCESS_MAX_OUT + 1);
		free(obuf);
	}
	free(envp);
	return rc;
}

static void process_destroy(struct creds_provider *p)
{
	struct process_prov *pp = (struct process_prov *)p;

	free(pp->name);
	free(pp->command);
	free(pp);
}

struct creds_provider *creds_process_create(const char *name,
					    const char *command, int timeout_ms)
{
	struct process_prov *pp = calloc(1, sizeof(*pp));
	size_t i = 0, n;

	if (!pp)
		return NULL;
	pp->base = (struct creds_provider){.fetch = process_fetch,
					   .destroy = process_destroy};
	pp->name = strdup(name);
	pp->command = strdup(command);
	pp->timeout_ms = timeout_ms > 0 ? timeout_ms : CREDS_PROCESS_TIMEOUT_MS;
	pp->base.name = pp->name;
	if (!pp->name || !pp->command) {
		process_destroy(&pp->base);
		return NULL;
	}
	while (command[i] == ' ' || command[i] == '\t')
		i++;
	n = strcspn(command + i, " \t");
	snprintf(pp->prog, sizeof(pp->prog), "command '%.*s'",
		 (int)(n < 40 ? n : 40), command + i);
	return &pp->base;
}
