/*
 * common/proc.c - a thread's process, read from /proc (proc.h). The one
 * place that maps a request's thread id to its process: the engine's
 * stream owner and the control file's stream name both ask here.
 */
#include "common/proc.h"
#include "common/fileio.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* /proc/TID/status is ~1.5 KiB; Tgid is on its fourth line. */
#define PROC_STATUS_MAX (1 << 16)

pid_t proc_tgid(pid_t tid)
{
	char path[32], *text = NULL, *at;
	size_t len;
	long tgid = 0;

	if (tid <= 0)
		return 0;
	snprintf(path, sizeof(path), "/proc/%ld/status", (long)tid);
	if (read_file_all(path, PROC_STATUS_MAX, &text, &len))
		return 0;
	at = strstr(text, "\nTgid:");
	if (at)
		tgid = strtol(at + 6, NULL, 10);
	free(text);
	return tgid > 0 ? (pid_t)tgid : 0;
}
