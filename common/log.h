/**
 * common/log.h - one-line log messages for the daemon and its libraries.
 *
 * Every message is a single line: "hintfs: LEVEL: text". Messages go to
 * stderr until log_use_syslog() switches them to syslog (after the daemon
 * detaches from its terminal). All functions may be called from any thread;
 * a line is written with one write(2), so lines of different threads never
 * interleave.
 *
 * Credentials must never be passed to these functions: the S3 client logs
 * keys and URLs, never headers.
 */
#ifndef HINTFS_COMMON_LOG_H
#define HINTFS_COMMON_LOG_H

#include <stdbool.h>
#include <stddef.h>

enum log_level {
	LOG_LVL_ERROR = 0,
	LOG_LVL_WARN = 1,
	LOG_LVL_INFO = 2,
	LOG_LVL_DEBUG = 3,
};

/** Messages above @level are dropped. Default LOG_LVL_INFO. */
void log_set_level(enum log_level level);

/** The current threshold. */
enum log_level log_get_level(void);

/** Sends later messages to syslog(3) under @ident instead of stderr. */
void log_use_syslog(const char *ident);

/** Formats and writes one line. Newlines inside the text are replaced. */
void log_msg(enum log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/**
 * Formats a one-line reason into @err (@err_len bytes; nothing when @err is
 * NULL or @err_len is 0) and returns -EINVAL: how the parsers of options,
 * profile files and endpoints say "bad input, and why" to their caller.
 */
int log_fail_einval(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define log_error(...) log_msg(LOG_LVL_ERROR, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_LVL_WARN, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_LVL_INFO, __VA_ARGS__)
#define log_debug(...)                                                         \
	do {                                                                   \
		if (log_get_level() >= LOG_LVL_DEBUG)                          \
			log_msg(LOG_LVL_DEBUG, __VA_ARGS__);                   \
	} while (0)

#endif /* HINTFS_COMMON_LOG_H */
