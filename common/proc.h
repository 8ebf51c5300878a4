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

#endif /* HINTFS_COMMON_PROC_H */
