/**
 * common/ctl_proto.h - the control protocol between a hintfs daemon and
 * its clients (hintfs-ctl; the Python package speaks it too, in
 * mount-tools/python/hintfs/__init__.py). doc/design.md 2.3 is the
 * contract; this header holds the numbers both C sides must agree on.
 *
 * Why a socket and not files: the mount is read-only in the kernel (a
 * read-only superblock refuses every open for writing before any request,
 * for root too), so nothing can be written under <mount>/.hintfs. The
 * daemon listens on a Unix socket of its own, and <mount>/.hintfs/control
 * is a symbolic link to it: a client needs only the mount's path.
 *
 * One connection carries one request and one reply, each one
 * SOCK_SEQPACKET message (the kernel keeps the boundaries: no framing):
 *
 *   request  "VERB[ ARG...]\n" then the payload, inline; or the line alone
 *            with one file descriptor attached (SCM_RIGHTS) whose contents
 *            from offset 0 to its size are the payload: a regular file
 *            (a memfd), for payloads past CTL_PROTO_MSG_MAX
 *   reply    "ERRNO TEXT\n": ERRNO 0 and what was done ("stream=rank0
 *            entries=2000 refused=0"), or a positive errno and the one-line
 *            reason the daemon also logged
 *
 * Verbs: hint, warm, evict, relist (their payloads are those of the old
 * .hintfs files of the same names), ping (answers "0 hintfs VERSION").
 * Arguments, hint only: own=K (the sender's K-th stream, named by the
 * daemon from the sender's pid as it sees it: "pid:<pid>" for K=1, the
 * default, "pid<pid>.K" after), own=parent (the stream of the sender's
 * parent, "ctl-<ppid>": a script running hintfs-ctl once per epoch),
 * if_full=replace (a full queue is replaced instead of refused: the epochs
 * queued were read unseen, from the page cache). A "stream=" in the hint's
 * header names the stream instead.
 */
#ifndef HINTFS_COMMON_CTL_PROTO_H
#define HINTFS_COMMON_CTL_PROTO_H

/** The link in the control directory that points at the socket. */
#define CTL_PROTO_LINK "control"

/** The largest message either way: a request line and an inline payload
 *  (a longer payload travels as a file descriptor), or a reply. 64 KiB is
 *  well under the default socket buffer (net.core.wmem_default, 208 KiB),
 *  so a send never has to wait for the reader. */
#define CTL_PROTO_MSG_MAX (64u << 10)

/** The largest payload: a hint of ImageNet's 1.28 million paths is about
 *  60 MiB; four times that leaves room for long paths. */
#define CTL_PROTO_PAYLOAD_MAX (256u << 20)

/** How long the daemon waits for a connected client's request: a client
 *  sends its one message right after connect(); one that does not is
 *  dropped rather than keep a connection slot. */
#define CTL_PROTO_RECV_TIMEOUT_S 10

#endif /* HINTFS_COMMON_CTL_PROTO_H */
