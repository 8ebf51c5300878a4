/*
 * common/log.c - owns the log sink and the level threshold.
 *
 * Invariant: one message is one line, written by one write(2) (or one
 * syslog(3) call), so concurrent threads never interleave inside a line.
 */
#include "common/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

static _Atomic int log_level = LOG_LVL_INFO;
static _Atomic bool log_syslog;

static const char *const level_names[] = {
    [LOG_LVL_ERROR] = "error",
    [LOG_LVL_WARN] = "warning",
    [LOG_LVL_INFO] = "info",
    [LOG_LVL_DEBUG] = "debug",
};

void log_set_level(enum log_level level)
{
	atomic_store(&log_level, level);
}

enum log_level log_get_level(void)
{
	return atomic_load(&log_level);
}

void log_use_syslog(const char *ident)
{
	openlog(ident, LOG_PID, LOG_DAEMON);
	atomic_store(&log_syslog, true);
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	/* 1 KiB: one S3 key (<= 1024 bytes) plus a reason rarely exceeds it;
	 * longer lines are cut rather than split. */
	char line[1280];
	int n, prefix;
	va_list ap;

	if ((int)level > atomic_load(&log_level))
		return;

	prefix =
	    snprintf(line, sizeof(line), "hintfs: %s: ", level_names[level]);
	va_start(ap, fmt);
	n = vsnprintf(line + prefix, sizeof(line) - prefix - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	n += prefix;
	if ((size_t)n > sizeof(line) - 2)
		n = sizeof(line) - 2;
	for (int i = prefix; i < n; i++)
		if (line[i] == '\n' || line[i] == '\r')
			line[i] = ' ';

	if (atomic_load(&log_syslog)) {
		static const int prio[] = {LOG_ERR, LOG_WARNING, LOG_INFO,
					   LOG_DEBUG};
		line[n] = '\0';
		syslog(prio[level], "%s", line + strlen("hintfs: "));
		return;
	}
	line[n++] = '\n';
	/* Best effort: a closed stderr must not take the daemon down. */
	if (write(STDERR_FILENO, line, n) < 0)
		return;
}

int log_fail_einval(char *err, size_t err_len, const char *fmt, ...)
{
	va_list ap;

	if (err && err_len) {
		va_start(ap, fmt);
		vsnprintf(err, err_len, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}
