/**
 * common/ctl_client.h - the client side of the control protocol
 * (common/ctl_proto.h), for hintfs-ctl and the unit tests.
 */
#ifndef HINTFS_COMMON_CTL_CLIENT_H
#define HINTFS_COMMON_CTL_CLIENT_H

#include <stddef.h>
#include <sys/un.h>

/**
 * Fills @a with the address of the Unix socket at @path. Returns 0, or
 * -ENAMETOOLONG when @path does not fit sun_path (107 bytes and its NUL).
 * For the daemon's socket and its clients alike. Any thread.
 */
int ctl_sockaddr(const char *path, struct sockaddr_un *a);

/**
 * Finds the control socket of the hintfs mounted at @mount: reads the link
 * <mount>/.hintfs/control into @path (@len bytes). Returns 0, -ENOENT
 * when there is no such link (not a hintfs mount, or one older than the
 * socket), or the -errno of readlink(2) (-ENOTCONN: the daemon is gone).
 * Any thread.
 */
int ctl_socket_of(const char *mount, char *path, size_t len);

/**
 * Sends one request to the control socket at @sock: @line ("hint own=2",
 * no newline) and @len bytes of payload (inline when they fit in one
 * message, else in a memfd whose descriptor travels with the line), and
 * waits for the reply, whose text (no errno, no newline) is stored in
 * @reply (@reply_len bytes, NUL-terminated). Returns 0 when the daemon
 * did it, its -errno when it refused (@reply says why), or the -errno of
 * reaching it (@reply then says which step failed). Any thread; blocks
 * until the daemon answers.
 */
int ctl_request(const char *sock, const char *line, const char *payload,
		size_t len, char *reply, size_t reply_len);

#endif /* HINTFS_COMMON_CTL_CLIENT_H */
