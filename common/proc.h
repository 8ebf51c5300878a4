/**
 * common/proc.h - what /proc says about the threads that call us.
 * NOTE(fuse): a request carries the calling thread's id, not its
 * process's: whoever names or tracks a caller by process asks here.
 */
#ifndef HINTFS_COMMON_PROC_H
#define HINTFS_COMMON_PROC_H

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

#endif /* HINTFS_COMMON_PROC_H */
