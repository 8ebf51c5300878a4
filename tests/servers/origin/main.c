/*
 * tests/servers/origin/main.c - origin: a fast S3 origin for
 * measuring the client (doc/design.md section 4). Serves
 * one directory, read and hashed at start-up, on 127.0.0.1: its
 * subdirectories are buckets, the files below them objects.
 *
 * A test server, like curl's tests/server: never part of the daemon. The
 * RGW stays the server the tests trust for S3's semantics; this one exists
 * so that a 2-core machine measures hintfs and not the server (the RGW
 * costs ~1 ms of CPU per GET). Hence: no locks on the request path (the
 * store is immutable), no copy of object bytes (sendfile from the page
 * cache), no per-request allocation once a connection's buffers have
 * grown, and no signature check.
 *
 * Owns the command line, the worker threads and their connections. Each
 * worker runs its own epoll loop over the connections it accepted
 * (EPOLLEXCLUSIVE on the shared listening socket spreads accepts); a
 * connection never changes thread. SIGTERM and SIGINT are read from a
 * signalfd by the main thread, which wakes the workers through an eventfd.
 *
 * Invariant: stdout carries exactly one line, "port=N", once the store is
 * hashed and the socket listens, so a parent can read it and connect.
 */
#include "s3.h"
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/sendfile.h>
#include <sys/signalfd.h>
#include <unistd.h>

/* 1,024: hintfs with max_inflight=1024 opens that many connections at
 * once, and a short backlog would drop their SYNs into retransmits. */
#define ORIGIN_BACKLOG 1024
/* A request head: S3 clients send well under 2 KiB (a 1,024-byte key
 * encoded, SigV4 headers); 16 KiB leaves room for pipelined ones. */
#define ORIGIN_HEAD_BUF 16384
/* Connections accepted per wake-up of one worker, so one burst of
 * connects cannot starve the requests of the worker's other ones. */
#define ORIGIN_ACCEPT_BATCH 64
#define ORIGIN_EVENTS	    256
#define ORIGIN_WORKERS_MAX  64
/* One sendfile call's most: large objects go out in pieces so that one
 * connection cannot hold its worker for long. */
#define ORIGIN_SENDFILE_MAX (4u << 20)

struct conn {
	int fd;
	struct ibuf ib;
	struct s3_resp resp; /* the answer being sent, if ->sending */
	size_t head_off;     /* bytes of resp.head sent */
	bool sending;
	bool want_out; /* registered for EPOLLOUT instead of EPOLLIN */
	struct conn *prev, *next; /* the worker's connections */
};

struct worker {
	pthread_t tid;
	int ep;
	struct origin *o;
	struct conn *conns;
	struct s3_stats st;
	uint64_t accepted;
};

struct origin {
	struct store store;
	int lfd;
	int stop_fd; /* eventfd: readable once the workers must stop */
	unsigned n_workers;
	struct worker workers[ORIGIN_WORKERS_MAX];
};

/* Markers of the two descriptors in every worker's epoll set that are
 * not connections. */
static char listen_mark, stop_mark;

/* clang-format off: the help text is laid out as printed. */
static void usage(FILE *f)
{
	fputs("usage: origin --dir DIR [--workers N] [--port N] [--port-file "
	      "FILE]\n"
	      "\n"
	      "A fast S3 origin for benchmarks and tests, on 127.0.0.1: each\n"
	      "subdirectory of DIR is a bucket, each file below it an object "
	      "named\n"
	      "by its relative path (read and MD5-hashed at start-up; later "
	      "changes\n"
	      "are not seen). Path-style GET (whole, one Range, If-Match), "
	      "HEAD,\n"
	      "ListObjectsV2. Signatures are accepted as sent, never checked.\n"
	      "Prints 'port=N' on stdout once listening; SIGTERM or SIGINT: "
	      "exit 0\n"
	      "with a summary line on stderr.\n"
	      "\n"
	      "  --dir DIR         the buckets' parent directory\n"
	      "  --workers N       event-loop threads (default 1)\n"
	      "  --port N          the port (default 0: one the kernel picks)\n"
	      "  --port-file FILE  also write the port to FILE (atomically)\n",
	      f);
}
/* clang-format on */

static void conn_free(struct worker *w, struct conn *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		w->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	close(c->fd); /* leaves the epoll set with it */
	if (c->resp.body_fd >= 0)
		close(c->resp.body_fd);
	sbuf_fini(&c->resp.head);
	free(c->ib.data);
	free(c);
}

static int conn_watch(struct worker *w, struct conn *c, bool out)
{
	struct epoll_event ev = {.events = out ? EPOLLOUT : EPOLLIN,
				 .data.ptr = c};

	if (c->want_out == out)
		return 0;
	c->want_out = out;
	return epoll_ctl(w->ep, EPOLL_CTL_MOD, c->fd, &ev) < 0 ? -errno : 0;
}

/* Sends what is left of the answer. Returns 1 when all is sent, 0 when
 * the socket is full, -errno when the connection is broken. */
static int conn_flush(struct conn *c)
{
	struct s3_resp *r = &c->resp;

	while (c->head_off < r->head.len) {
		ssize_t n = send(c->fd, r->head.data + c->head_off,
				 r->head.len - c->head_off,
				 MSG_NOSIGNAL | (r->body_len ? MSG_MORE : 0));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno == EAGAIN ? 0 : -errno;
		c->head_off += (size_t)n;
	}
	while (r->body_len > 0) {
		off_t off = (off_t)r->body_off;
		size_t want = r->body_len < ORIGIN_SENDFILE_MAX
				  ? (size_t)r->body_len
				  : ORIGIN_SENDFILE_MAX;
		ssize_t n = sendfile(c->fd, r->body_fd, &off, want);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno == EAGAIN ? 0 : -errno;
		if (n == 0) /* the file shrank: the framing cannot be kept */
			return -EIO;
		r->body_off += (uint64_t)n;
		r->body_len -= (uint64_t)n;
	}
	if (r->body_fd >= 0) {
		close(r->body_fd);
		r->body_fd = -1;
	}
	c->sending = false;
	return 1;
}

/* Answers the requests whole in the buffer, in order, until one cannot
 * be sent at once. Returns 0, or -errno to drop the connection. */
static int conn_serve(struct worker *w, struct conn *c)
{
	struct ibuf *ib = &c->ib;

	for (;;) {
		struct http_msg m;
		size_t head;
		int rc;

		if (c->sending) {
			rc = conn_flush(c);
			if (rc < 0)
				return rc;
			if (rc == 0)
				return conn_watch(w, c, true);
			if (c->resp.close)
				return -ECONNRESET;
		}
		head =
		    http_head_end(ib->data + ib->start, ib->end - ib->start, 0);
		if (!head)
			break;
		if (http_parse_head(ib->data + ib->start, head, true, &m) < 0)
			return -EPROTO;
		s3_answer(&w->o->store, &m, &c->resp, &w->st);
		ib->start += head;
		if (c->resp.head.oom)
			return -ENOMEM;
		c->head_off = 0;
		c->sending = true;
	}
	if (ib->start == ib->end) {
		ib->start = ib->end = 0;
	} else if (ib->start > 0) {
		memmove(ib->data, ib->data + ib->start, ib->end - ib->start);
		ib->end -= ib->start;
		ib->start = 0;
	}
	return conn_watch(w, c, false);
}

/* Reads what the socket holds. Returns 0, or -errno to drop the
 * connection (the peer closed it, or sent a head that does not fit). */
static int conn_read(struct conn *c)
{
	struct ibuf *ib = &c->ib;

	for (;;) {
		ssize_t n;

		if (ib->end == ib->cap)
			return ib->start == 0 ? -EMSGSIZE : 0;
		n = recv(c->fd, ib->data + ib->end, ib->cap - ib->end, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno == EAGAIN ? 0 : -errno;
		if (n == 0)
			return -ECONNRESET;
		ib->end += (size_t)n;
	}
}

static void accept_some(struct worker *w)
{
	for (int i = 0; i < ORIGIN_ACCEPT_BATCH; i++) {
		int one = 1;
		struct epoll_event ev = {.events = EPOLLIN};
		struct conn *c;
		int fd = accept4(w->o->lfd, NULL, NULL,
				 SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0)
			return; /* EAGAIN, or EMFILE: retried on the next wake
				 */
		/* The last segment of an answer goes out at once; MSG_MORE
		 * still joins a head to its body. */
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		c = calloc(1, sizeof(*c));
		if (c)
			c->ib.data = malloc(ORIGIN_HEAD_BUF);
		if (!c || !c->ib.data) {
			free(c);
			close(fd);
			return;
		}
		c->fd = fd;
		c->ib.cap = ORIGIN_HEAD_BUF;
		c->resp.body_fd = -1;
		ev.data.ptr = c;
		if (epoll_ctl(w->ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
			free(c->ib.data);
			free(c);
			close(fd);
			return;
		}
		c->next = w->conns;
		if (w->conns)
			w->conns->prev = c;
		w->conns = c;
		w->accepted++;
	}
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct epoll_event evs[ORIGIN_EVENTS];

	for (;;) {
		int n = epoll_wait(w->ep, evs, ORIGIN_EVENTS, -1);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			perror("origin: epoll_wait");
			break;
		}
		for (int i = 0; i < n; i++) {
			struct conn *c = evs[i].data.ptr;
			int rc = 0;

			if (evs[i].data.ptr == &stop_mark)
				goto out;
			if (evs[i].data.ptr == &listen_mark) {
				accept_some(w);
				continue;
			}
			if (evs[i].events & EPOLLIN)
				rc = conn_read(c);
			else if (!(evs[i].events & EPOLLOUT))
				rc = -ECONNRESET; /* error or hang-up only */
			if (rc == 0)
				rc = conn_serve(w, c);
			if (rc < 0)
				conn_free(w, c);
		}
	}
out:
	while (w->conns)
		conn_free(w, w->conns);
	return NULL;
}

static int worker_init(struct origin *o, struct worker *w)
{
	struct epoll_event lev = {.events = EPOLLIN | EPOLLEXCLUSIVE,
				  .data.ptr = &listen_mark};
	struct epoll_event sev = {.events = EPOLLIN, .data.ptr = &stop_mark};

	w->o = o;
	w->ep = epoll_create1(EPOLL_CLOEXEC);
	if (w->ep < 0)
		return -errno;
	if (epoll_ctl(w->ep, EPOLL_CTL_ADD, o->lfd, &lev) < 0 ||
	    epoll_ctl(w->ep, EPOLL_CTL_ADD, o->stop_fd, &sev) < 0) {
		int err = -errno;

		close(w->ep);
		return err;
	}
	return 0;
}

/* Writes @port to @path through a temporary file, so a reader never sees
 * a partial number. */
static int write_port_file(const char *path, int port)
{
	char tmp[4096];
	FILE *f;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	f = fopen(tmp, "w");
	if (!f)
		return -errno;
	fprintf(f, "%d\n", port);
	if (fclose(f) != 0 || rename(tmp, path) < 0)
		return -errno;
	return 0;
}

struct args {
	const char *dir;
	const char *port_file;
	unsigned workers;
	int port;
};

/* Returns 0, 1 after --help, or -EINVAL. */
static int parse_args(int argc, char **argv, struct args *a)
{
	static const struct option opts[] = {
	    {"dir", required_argument, NULL, 'd'},
	    {"workers", required_argument, NULL, 'w'},
	    {"port", required_argument, NULL, 'p'},
	    {"port-file", required_argument, NULL, 'f'},
	    {"help", no_argument, NULL, 'h'},
	    {0},
	};
	int opt;
	char *end;
	long v;

	*a = (struct args){.workers = 1};
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'd':
			a->dir = optarg;
			break;
		case 'f':
			a->port_file = optarg;
			break;
		case 'w':
		case 'p':
			v = strtol(optarg, &end, 10);
			if (*end || end == optarg || v < 0 ||
			    (opt == 'w' && (v < 1 || v > ORIGIN_WORKERS_MAX)) ||
			    v > 65535) {
				fprintf(stderr, "origin: bad value '%s'\n",
					optarg);
				return -EINVAL;
			}
			if (opt == 'w')
				a->workers = (unsigned)v;
			else
				a->port = (int)v;
			break;
		case 'h':
			usage(stdout);
			return 1;
		default:
			usage(stderr);
			return -EINVAL;
		}
	}
	if (!a->dir || optind != argc) {
		usage(stderr);
		return -EINVAL;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static struct origin origin;
	struct origin *o = &origin;
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct s3_stats sum = {0};
	uint64_t conns = 0, one = 1;
	struct signalfd_siginfo si;
	struct args a;
	size_t n_objs = 0;
	int rc, port = 0, sig_fd;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	rc = parse_args(argc, argv, &a);
	if (rc != 0)
		return rc > 0 ? 0 : 2;
	/* Before any thread exists, so only the signalfd sees them. */
	sig_fd = http_stop_signals();
	if (sig_fd < 0) {
		fprintf(stderr, "origin: signalfd: %s\n", strerror(-sig_fd));
		return 1;
	}

	rc = store_open(&o->store, a.dir, cpus > 0 ? (unsigned)cpus : 1);
	if (rc < 0) {
		fprintf(stderr, "origin: --dir %s: %s\n", a.dir, strerror(-rc));
		store_close(&o->store);
		return 1;
	}
	for (size_t i = 0; i < o->store.n_buckets; i++)
		n_objs += o->store.buckets[i].n_objs;

	http_raise_fd_limit();
	sa.sin_port = htons((uint16_t)a.port);
	o->lfd = http_listen((struct sockaddr *)&sa, sizeof(sa), ORIGIN_BACKLOG,
			     &port);
	o->stop_fd = eventfd(0, EFD_CLOEXEC);
	/* Workers accept until EAGAIN; a blocking accept would stall one. */
	if (o->lfd >= 0 && fcntl(o->lfd, F_SETFL, O_NONBLOCK) < 0)
		o->stop_fd = -1;
	if (o->lfd < 0 || o->stop_fd < 0) {
		fprintf(stderr, "origin: cannot listen: %s\n",
			strerror(o->lfd < 0 ? -o->lfd : errno));
		store_close(&o->store);
		return 1;
	}
	for (o->n_workers = 0; o->n_workers < a.workers; o->n_workers++) {
		struct worker *w = &o->workers[o->n_workers];

		rc = worker_init(o, w);
		if (rc == 0 && pthread_create(&w->tid, NULL, worker_main, w)) {
			close(w->ep);
			rc = -EAGAIN;
		}
		if (rc < 0) {
			fprintf(stderr, "origin: worker: %s\n", strerror(-rc));
			break;
		}
	}
	if (rc == 0 && a.port_file) {
		rc = write_port_file(a.port_file, port);
		if (rc < 0)
			fprintf(stderr, "origin: --port-file %s: %s\n",
				a.port_file, strerror(-rc));
	}
	if (rc == 0) {
		printf("port=%d\n", port);
		fflush(stdout);
		fprintf(stderr,
			"origin: listening on 127.0.0.1:%d, %zu bucket(s), "
			"%zu object(s), %u worker(s)\n",
			port, o->store.n_buckets, n_objs, o->n_workers);
		while (read(sig_fd, &si, sizeof(si)) < 0 && errno == EINTR)
			;
	}

	/* Level-triggered and never read: every worker sees it. */
	if (write(o->stop_fd, &one, sizeof(one)) < 0)
		perror("origin: eventfd");
	for (unsigned i = 0; i < o->n_workers; i++) {
		struct worker *w = &o->workers[i];

		pthread_join(w->tid, NULL);
		close(w->ep);
		sum.gets += w->st.gets;
		sum.heads += w->st.heads;
		sum.lists += w->st.lists;
		sum.errors += w->st.errors;
		sum.bytes += w->st.bytes;
		conns += w->accepted;
	}
	fprintf(stderr,
		"origin: summary: gets=%" PRIu64 " heads=%" PRIu64
		" lists=%" PRIu64 " errors=%" PRIu64 " bytes=%" PRIu64
		" conns=%" PRIu64 "\n",
		sum.gets, sum.heads, sum.lists, sum.errors, sum.bytes, conns);
	close(o->lfd);
	close(o->stop_fd);
	close(sig_fd);
	store_close(&o->store);
	return rc == 0 ? 0 : 1;
}
