/*
 * tests/unit/fs_stats.h - reads a counter of .hintfs/stats through the fs
 * core (fs/fs.h), as a reader of the mount would, and sends control
 * requests through its socket: for the unit programs that drive fs
 * without a mount (test_fs.c, bench_mount.c).
 */
#ifndef HINTFS_TESTS_FS_STATS_H
#define HINTFS_TESTS_FS_STATS_H

#include "fs/fs.h"
#include "common/ctl_client.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The number after "@name": in section @section of the stats, or -1. */
static inline long long fs_stat_of(struct fs *fs, const char *section,
				   const char *name)
{
	static __thread char text[65536];
	char pat[64];
	struct fs_file *fh = NULL;
	bool direct;
	const char *p;
	ssize_t n;

	if (fs_open(fs, FS_INO_CTL_STATS, O_RDONLY, 0, &fh, &direct))
		return -1;
	n = fs_read(fs, FS_INO_CTL_STATS, fh, text, sizeof(text) - 1, 0);
	fs_release(fs, FS_INO_CTL_STATS, fh);
	if (n < 0)
		return -1;
	text[n] = '\0';
	snprintf(pat, sizeof(pat), "\"%s\": {", section);
	p = strstr(text, pat);
	snprintf(pat, sizeof(pat), "\"%s\": ", name);
	p = p ? strstr(p, pat) : NULL;
	return p ? atoll(p + strlen(pat)) : -1;
}

/* Sends @line with @len bytes of @text to the control socket of @fs, as
 * hintfs-ctl does; returns the daemon's verdict (0 or -errno). */
static inline int ctl_send(struct fs *fs, const char *line, const char *text,
			   size_t len)
{
	char reply[512];

	return ctl_request(fs_ctl_socket(fs), line, text, len, reply,
			   sizeof(reply));
}

#endif /* HINTFS_TESTS_FS_STATS_H */
