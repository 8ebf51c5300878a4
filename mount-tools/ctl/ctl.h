/**
 * mount-tools/ctl/ctl.h - what the parts of hintfs-ctl share.
 *
 * hintfs-ctl talks to a running daemon only through <mount>/.hintfs/
 * (doc/design.md 2.3): it sends hint, warm, evict and relist to the control
 * socket that .hintfs/control links to, and reads stats and verify. Every
 * subcommand is a function `int cmd_NAME(int argc, char **argv)` returning the
 * process's exit status: 0 done, 1 failed (or found a problem: bad blobs,
 * failed warms), 2 bad usage.
 */
#ifndef HINTFS_CTL_CTL_H
#define HINTFS_CTL_CTL_H

#include "json.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CTL_OK	  0
#define CTL_FAIL  1
#define CTL_USAGE 2

/** The name of the control directory inside a mount. */
#define CTL_DIR ".hintfs"

/** A mount point checked to be a hintfs mount. */
struct ctl_mount {
	char *path; /**< as given, without trailing '/' (but "/" stays) */
};

/**
 * Checks that @path is a hintfs mount (has .hintfs/stats); on failure
 * prints one line saying why and returns -1. Release with ctl_mount_fini().
 */
int ctl_mount_open(const char *path, struct ctl_mount *m);
void ctl_mount_fini(struct ctl_mount *m);

/** "<mount>/.hintfs/@name" into @buf (@len bytes). */
void ctl_path(const struct ctl_mount *m, const char *name, char *buf,
	      size_t len);

/**
 * Reads the control file @name whole into a malloc'd, NUL-terminated
 * buffer. Returns 0 or -errno (printing nothing).
 */
int ctl_read(const struct ctl_mount *m, const char *name, char **out,
	     size_t *len);

/**
 * Reads and parses .hintfs/stats into *@st (free with json_free()).
 * Prints one line and returns -1 on failure.
 */
int ctl_stats(const struct ctl_mount *m, struct json **st);

/**
 * Sends request @line ("hint own=parent") with @len bytes of @payload to
 * the mount's control socket (common/ctl_client.h) and waits for the
 * daemon's answer, whose text goes into @reply. Returns 0 when it was
 * done, or -errno: the daemon's refusal, or why it could not be asked
 * (@reply says which).
 */
int ctl_send(const struct ctl_mount *m, const char *line, const char *payload,
	     size_t len, char *reply, size_t reply_len);

/** Prints "hintfs-ctl: error: ..." on stderr. */
void ctl_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/** Prints "hintfs-ctl: warning: ..." on stderr. */
void ctl_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Formatting for people; each returns @buf. */
char *fmt_count(uint64_t v, char *buf, size_t len); /* 1,234,567 */
char *fmt_bytes(double v, char *buf, size_t len);   /* 5.1 GiB */
char *fmt_seconds(double s, char *buf, size_t len); /* 850 ms, 3.2 s, 4 min */
char *fmt_age(double s, char *buf, size_t len);	    /* 3 h 5 min */
/** A bar of @width cells, @frac (0..1) of them full. */
char *fmt_bar(double frac, int width, char *buf, size_t len);

/** Seconds on a monotonic clock. */
double ctl_now(void);

/** Set by SIGINT/SIGTERM once ctl_catch_signals() ran. */
extern volatile int ctl_interrupted;
/** Makes SIGINT and SIGTERM set ctl_interrupted (and interrupt sleeps). */
void ctl_catch_signals(void);
/** Sleeps @s seconds or until a signal; returns false when interrupted. */
bool ctl_sleep(double s);

/** Parses a number of seconds ("0.5", "2"); false when not one > 0. */
bool ctl_parse_seconds(const char *s, double *out);

/** The help texts, printed by --help and `hintfs-ctl help CMD`. */
extern const char ctl_help_hint[], ctl_help_stats[], ctl_help_warm[],
    ctl_help_evict[], ctl_help_relist[], ctl_help_verify[], ctl_help_info[];

int cmd_hint(int argc, char **argv);
int cmd_stats(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_warm(int argc, char **argv);
int cmd_evict(int argc, char **argv);
int cmd_relist(int argc, char **argv);
int cmd_verify(int argc, char **argv);

#endif /* HINTFS_CTL_CTL_H */
