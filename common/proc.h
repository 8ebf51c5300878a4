/**
 * common/proc.h - threads and processes: what /proc says about the threads
 * that call us, and how the daemon starts its own.
 * NOTE(fuse): a request carries the calling thread's id, not its
 * process's: whoever names or tracks a caller by process asks here.
 */
#ifndef HINTFS_COMMON_PROC_H
#define HINTFS_COMMON_PROC_H

#include <pthread.h>
#include <sys/types.h>

/**
 * The process (thread group id) of thread @tid, from /proc/TID/status;
 * 0 when unknown (the thread has ended, or /proc cannot say). Any thread.
 */
pid_t proc_tgid(pid_t tid);

/**
 * The parent of process @pid, from /proc/PID/status, in the pid namespace
 * of the /proc this process sees; 0 when unknown. Any thread.
 */
pid_t proc_ppid(pid_t pid);

/**
 * pthread_create() of a thread that never takes SIGINT, SIGTERM, SIGHUP or
 * SIGQUIT: they go to the main thread, which libfuse's handlers wake from
 * its wait for the session's end. NOTE(fuse): libfuse blocks them in its
 * own workers; taken by one of ours, a stop set the session's flag while
 * the main thread slept on, and `hintfs -f` ignored a Ctrl-C. Every thread
 * of the daemon starts here. Returns pthread_create()'s result. Any
 * thread.
 */
int proc_thread_create(pthread_t *thread, const pthread_attr_t *attr,
		       void *(*fn)(void *), void *arg);

#endif /* HINTFS_COMMON_PROC_H */
