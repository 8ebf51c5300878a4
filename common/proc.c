/*
 * common/proc.c - a thread's process, read from /proc (proc.h). The one
 * place that maps a request's thread id to its process (the engine's
 * stream owner), and a control request's sender to its parent; and the
 * one place the daemon starts its threads.
 */
#include "common/proc.h"
#include "common/fileio.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* /proc/TID/status is ~1.5 KiB; Tgid is on its fourth line. */
#define PROC_STATUS_MAX (1 << 16)

/* The number on line "@key" ("\nTgid:") of /proc/@tid/status, or 0. */
static pid_t status_field(pid_t tid, const char *key)
{
	char path[32], *text = NULL, *at;
	size_t len;
	long v = 0;

	if (tid <= 0)
		return 0;
	snprintf(path, sizeof(path), "/proc/%ld/status", (long)tid);
	if (read_file_all(path, PROC_STATUS_MAX, &text, &len))
		return 0;
	at = strstr(text, key);
	if (at)
		v = strtol(at + strlen(key), NULL, 10);
	free(text);
	return v > 0 ? (pid_t)v : 0;
}

pid_t proc_tgid(pid_t tid)
{
	return status_field(tid, "\nTgid:");
}

pid_t proc_ppid(pid_t pid)
{
	return status_field(pid, "\nPPid:");
}

int proc_thread_create(pthread_t *thread, const pthread_attr_t *attr,
		       void *(*fn)(void *), void *arg)
{
	sigset_t stop, old;
	int rc;

	sigemptyset(&stop);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGHUP);
	sigaddset(&stop, SIGQUIT);
	/* The new thread inherits the mask it is created under. */
	pthread_sigmask(SIG_BLOCK, &stop, &old);
	rc = pthread_create(thread, attr, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc;
}
