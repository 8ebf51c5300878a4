/*
 * common/ctl_client.c - sends one request to a daemon's control socket and
 * reads its reply (common/ctl_proto.h). Owns nothing past a call: each
 * request opens its own connection, as the protocol has it.
 */
#include "common/ctl_client.h"
#include "common/ctl_proto.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int ctl_sockaddr(const char *path, struct sockaddr_un *a)
{
	size_t len = strlen(path);

	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	if (len >= sizeof(a->sun_path))
		return -ENAMETOOLONG;
	memcpy(a->sun_path, path, len + 1);
	return 0;
}

int ctl_socket_of(const char *mount, char *path, size_t len)
{
	char link[4200];
	ssize_t n;

	if (snprintf(link, sizeof(link), "%s/.hintfs/%s", mount,
		     CTL_PROTO_LINK) >= (int)sizeof(link))
		return -ENAMETOOLONG;
	n = readlink(link, path, len);
	if (n < 0)
		return errno == EINVAL ? -ENOENT : -errno;
	if ((size_t)n >= len)
		return -ENAMETOOLONG;
	path[n] = '\0';
	return 0;
}

/* A memfd holding @len bytes of @payload, for a payload past one message. */
static int payload_fd(const char *payload, size_t len)
{
	int fd = memfd_create("hintfs-ctl", MFD_CLOEXEC);

	if (fd < 0)
		return -errno;
	while (len) {
		ssize_t w = write(fd, payload, len);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			int rc = -errno;

			close(fd);
			return rc;
		}
		payload += w;
		len -= (size_t)w;
	}
	return fd;
}

/* Sends the request: @line, a newline, and the payload or its fd. */
static int send_request(int sfd, const char *line, const char *payload,
			size_t len)
{
	size_t line_len = strlen(line);
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov[3] = {{(void *)line, line_len}, {(void *)"\n", 1}};
	struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
	int pfd = -1, rc = 0;

	if (line_len + 1 + len <= CTL_PROTO_MSG_MAX) {
		iov[2] = (struct iovec){(void *)payload, len};
		mh.msg_iovlen = 3;
	} else {
		pfd = payload_fd(payload, len);
		if (pfd < 0)
			return pfd;
		mh.msg_control = ctl.buf;
		mh.msg_controllen = sizeof(ctl.buf);
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);

		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &pfd, sizeof(int));
	}
	if (sendmsg(sfd, &mh, MSG_NOSIGNAL) < 0)
		rc = -errno;
	if (pfd >= 0)
		close(pfd);
	return rc;
}

int ctl_request(const char *sock, const char *line, const char *payload,
		size_t len, char *reply, size_t reply_len)
{
	struct sockaddr_un a;
	char buf[4096];
	ssize_t n;
	char *end;
	long code;
	int fd, rc;

	if (ctl_sockaddr(sock, &a)) {
		snprintf(reply, reply_len, "socket path too long");
		return -ENAMETOOLONG;
	}
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		rc = -errno;
		snprintf(reply, reply_len, "socket: %s", strerror(-rc));
		return rc;
	}
	if (connect(fd, (struct sockaddr *)&a, sizeof(a))) {
		rc = -errno;
		snprintf(reply, reply_len, "connecting to %s: %s", sock,
			 strerror(-rc));
		close(fd);
		return rc;
	}
	rc = send_request(fd, line, payload, len);
	if (rc) {
		snprintf(reply, reply_len, "sending to %s: %s", sock,
			 strerror(-rc));
		close(fd);
		return rc;
	}
	do
		n = recv(fd, buf, sizeof(buf) - 1, 0);
	while (n < 0 && errno == EINTR);
	rc = n < 0 ? -errno : 0;
	close(fd);
	if (n <= 0) {
		snprintf(reply, reply_len, "no answer from %s: %s", sock,
			 n < 0 ? strerror(-rc) : "it closed the connection");
		return n < 0 ? rc : -EPROTO;
	}
	buf[n] = '\0';
	if (n && buf[n - 1] == '\n')
		buf[n - 1] = '\0';
	errno = 0;
	code = strtol(buf, &end, 10);
	if (errno || end == buf || *end != ' ' || code < 0 || code > 4095) {
		snprintf(reply, reply_len,
			 "a reply that is not the protocol's");
		return -EPROTO;
	}
	snprintf(reply, reply_len, "%s", end + 1);
	return (int)-code;
}
