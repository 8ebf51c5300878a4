/*
 * tests/servers/s3proxy/proxy.c - the proxy proper: one thread per client
 * connection, the delay, the fault decisions, the request log.
 *
 * Owns the connections: each has a thread with blocking I/O, the client
 * socket, and one upstream socket opened on first need and reused while
 * both sides keep it alive. Requests on a connection are sequential (S3
 * clients do not pipeline), so a thread relays a request, then its
 * response, and the upstream connection carries one exchange at a time.
 *
 * Delay: a request goes upstream rtt/2 after its head arrived; the first
 * byte of the response goes to the client rtt/2 after it arrived, later
 * bytes as they come. A request thus costs one extra round trip, and
 * concurrent requests overlap their delays as they would on a network.
 *
 * Invariant: the two sockets of a connection agree on message boundaries.
 * Whenever a response is cut short (a fault, an upstream failure, a client
 * gone) both sockets are closed, so a later request can never be answered
 * with the rest of an earlier response.
 */
#include "proxy.h"
#include "http.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* 64 KiB: an S3 request head is a few KiB (SigV4 adds ~500 bytes); what
 * else passes through this buffer is request bodies, which tests rarely
 * send through the proxy. */
#define CLIENT_BUF_BYTES (64 * 1024)
/* 128 KiB: a loopback socket rarely hands over more than 64 KiB per read,
 * so a ~110 KB object moves in two or three reads and sends. */
#define UPSTREAM_BUF_BYTES (128 * 1024)
/* 256 KiB of stack: the threads keep their buffers on the heap; 400
 * connections must not reserve 400 x 8 MiB of address space. */
#define THREAD_STACK_BYTES (256 * 1024)
/* Longer request targets are cut in the log (never in what is sent). */
#define TARGET_LOG_MAX 4096
#define RANGE_LOG_MAX  128
/* Payload bytes let through before a truncation or stall when the body's
 * length is unknown (chunked or close-delimited). */
#define CUT_UNKNOWN_BYTES 4096
/* How long a SIGTERM waits for connection threads to wind down. */
#define STOP_WAIT_MS 3000

/* Per-request draws are made in this order; the rates are stacked. */
static const enum fault drawn_faults[] = {
    FAULT_SLOWDOWN, FAULT_ERROR500, FAULT_RESET, FAULT_TRUNCATE,
    FAULT_STALL,    FAULT_TRICKLE,  FAULT_SLOW,
};

struct s3_error {
	int status;
	const char *reason;  /* HTTP reason phrase */
	const char *code;    /* S3 <Code> */
	const char *message; /* S3 <Message>, as AWS words it */
};

static const struct s3_error s3_errors[] = {
    {403, "Forbidden", "AccessDenied", "Access Denied"},
    {404, "Not Found", "NoSuchKey", "The specified key does not exist."},
    {500, "Internal Server Error", "InternalError",
     "We encountered an internal error. Please try again."},
    {502, "Bad Gateway", "BadGateway",
     "s3proxy could not get an answer from the upstream server."},
    {503, "Service Unavailable", "SlowDown",
     "Please reduce your request rate."},
};

struct rng {
	uint64_t s;
};

struct conn {
	struct proxy *p;
	uint64_t id;
	/* Both fds change only under p->lock (see conn_set_fd), so a stop can
	 * shut them down without racing a close and an fd reuse. */
	int cfd;
	int ufd;
	struct conn *prev, *next; /* in p->conns */
	struct ibuf cin;	  /* from the client */
	struct ibuf uin;	  /* from upstream */
	uint64_t n_requests;
	/* The request being served, copied for its log line. */
	uint64_t t_start_ns;
	char method[16];
	char target[TARGET_LOG_MAX];
	char range[RANGE_LOG_MAX];
};

static void sleep_until(uint64_t t_ns)
{
	struct timespec ts = {
	    .tv_sec = (time_t)(t_ns / 1000000000u),
	    .tv_nsec = (long)(t_ns % 1000000000u),
	};

	/* A deadline already past (always, without --rtt-ms) costs no system
	 * call: clock_nanosleep() would still arm a timer and schedule. */
	if (now_ns() >= t_ns)
		return;
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
	       EINTR)
		;
}

/* splitmix64: one step of a well-mixed 64-bit sequence. */
static uint64_t rng_next(struct rng *r)
{
	uint64_t z = (r->s += 0x9e3779b97f4a7c15u);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

/* A uniform double in [0, 100). */
static double rng_pct(struct rng *r)
{
	return (double)(rng_next(r) >> 11) * 0x1.0p-53 * 100.0;
}

/* The stream of request @n of a run: a function of (seed, n) only, so a
 * run with one client is reproducible whatever the thread timing. */
static void rng_init(struct rng *r, uint64_t seed, uint64_t n)
{
	struct rng mix = {.s = n};

	r->s = seed ^ rng_next(&mix);
}

static void set_nodelay(int fd)
{
	int one = 1;

	/* NOTE(s3): RGW's beast frontend and curl both need Nagle off, or
	 * every small write waits ~40 ms for an ACK. */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* Copies @len bytes of @s into @dst (size @cap) for a log line: NUL
 * terminated, cut if long, control characters and tabs replaced by '?'. */
static void copy_for_log(char *dst, size_t cap, const char *s, size_t len)
{
	if (len >= cap)
		len = cap - 1;
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)s[i];

		dst[i] = (ch < 0x20 || ch == 0x7f) ? '?' : (char)ch;
	}
	dst[len] = '\0';
}

/* Replaces the fd in @slot (c->cfd or c->ufd) by @fd and closes the old
 * one, under the registry lock. With @abort the old socket is reset (RST)
 * instead of closed. Returns -ESHUTDOWN (and closes @fd) once stopping. */
static int conn_set_fd(struct conn *c, int *slot, int fd, bool abort)
{
	struct proxy *p = c->p;
	int old, ret = 0;

	pthread_mutex_lock(&p->lock);
	old = *slot;
	if (p->stopping && fd >= 0) {
		close(fd);
		fd = -1;
		ret = -ESHUTDOWN;
	}
	*slot = fd;
	pthread_mutex_unlock(&p->lock);
	if (old >= 0) {
		if (abort) {
			struct linger lg = {.l_onoff = 1, .l_linger = 0};

			setsockopt(old, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
		}
		close(old);
	}
	return ret;
}

static int conn_connect_upstream(struct conn *c)
{
	const struct proxy_config *cfg = &c->p->cfg;
	int fd = socket(cfg->up_addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	while (connect(fd, (const struct sockaddr *)&cfg->up_addr,
		       cfg->up_len) < 0) {
		int err = errno;

		if (err == EINTR)
			continue;
		close(fd);
		return -err;
	}
	set_nodelay(fd);
	return conn_set_fd(c, &c->ufd, fd, false);
}

/* True if an idle upstream connection was closed by the server (or sent
 * something unasked): it must not carry the next request. */
static bool upstream_stale(int fd)
{
	struct pollfd pfd = {.fd = fd, .events = POLLIN | POLLRDHUP};

	return poll(&pfd, 1, 0) != 0;
}

static void log_request(struct conn *c, const char *status, uint64_t bytes)
{
	struct proxy *p = c->p;
	uint64_t t = now_ns();
	char line[TARGET_LOG_MAX + RANGE_LOG_MAX + 160];
	int n;

	atomic_fetch_add_explicit(&p->st.requests, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&p->st.body_bytes, bytes,
				  memory_order_relaxed);
	if (p->log_fd < 0)
		return;
	n = snprintf(line, sizeof(line),
		     "%.3f\t%s\t%s\t%s\t%s\t%" PRIu64 "\t%" PRIu64 "\t%.3f\n",
		     (double)(t - p->t0_ns) / 1e6, c->method, c->target,
		     c->range[0] ? c->range : "-", status, bytes, c->id,
		     (double)(t - c->t_start_ns) / 1e6);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(line))
		n = sizeof(line) - 1;
	/* One write per line: readers may follow the file as it grows. */
	pthread_mutex_lock(&p->log_lock);
	ssize_t w = write(p->log_fd, line, (size_t)n);

	pthread_mutex_unlock(&p->log_lock);
	(void)w; /* a full disk must not stop the traffic */
}

static void log_status(struct conn *c, int status, uint64_t bytes)
{
	char s[16];

	snprintf(s, sizeof(s), "%d", status);
	if (status >= 100 && status < 600)
		atomic_fetch_add_explicit(&c->p->st.by_class[status / 100], 1,
					  memory_order_relaxed);
	log_request(c, s, bytes);
}

static void count_fault(struct proxy *p, enum fault f)
{
	atomic_fetch_add_explicit(&p->st.faults[f], 1, memory_order_relaxed);
}

static size_t xml_escape(char *dst, size_t cap, const char *s, size_t len)
{
	size_t o = 0;

	for (size_t i = 0; i < len; i++) {
		const char *rep = NULL;
		char one[2] = {s[i], '\0'};

		switch (s[i]) {
		case '&':
			rep = "&amp;";
			break;
		case '<':
			rep = "&lt;";
			break;
		case '>':
			rep = "&gt;";
			break;
		case '"':
			rep = "&quot;";
			break;
		case '\'':
			rep = "&apos;";
			break;
		default:
			rep = one;
			break;
		}
		size_t rl = strlen(rep);

		if (o + rl >= cap)
			break;
		memcpy(dst + o, rep, rl);
		o += rl;
	}
	dst[o] = '\0';
	return o;
}

/* Answers the request @rq with an S3 error document for @status, in one
 * send. Returns 0 or -errno; *body_bytes is the body length sent. */
static int send_s3_error(struct conn *c, const struct http_msg *rq, int status,
			 bool keep, uint64_t *body_bytes)
{
	const struct s3_error *e = &s3_errors[0];
	char resource[1024], rid[40], body[1536], msg[2048];
	size_t path_len = rq->target_len;
	const char *q = memchr(rq->target, '?', rq->target_len);
	int bl, hl;

	for (size_t i = 0; i < sizeof(s3_errors) / sizeof(s3_errors[0]); i++)
		if (s3_errors[i].status == status)
			e = &s3_errors[i];
	if (q)
		path_len = (size_t)(q - rq->target);
	xml_escape(resource, sizeof(resource), rq->target, path_len);
	snprintf(rid, sizeof(rid), "s3proxy-%" PRIx64 "-%" PRIx64, c->id,
		 c->n_requests);
	bl = snprintf(body, sizeof(body),
		      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		      "<Error><Code>%s</Code><Message>%s</Message>"
		      "<Resource>%s</Resource><RequestId>%s</RequestId>"
		      "</Error>",
		      e->code, e->message, resource, rid);
	if (bl < 0 || (size_t)bl >= sizeof(body))
		return -EOVERFLOW;
	/* NOTE(s3): a HEAD gets the headers of the error without its body,
	 * as from S3 itself. */
	if (http_token_is(rq->method, rq->method_len, "HEAD"))
		*body_bytes = 0;
	else
		*body_bytes = (uint64_t)bl;
	hl = snprintf(msg, sizeof(msg),
		      "HTTP/1.1 %d %s\r\n"
		      "Content-Type: application/xml\r\n"
		      "Content-Length: %d\r\n"
		      "x-amz-request-id: %s\r\n"
		      "Connection: %s\r\n\r\n%s",
		      e->status, e->reason, bl, rid,
		      keep ? "keep-alive" : "close", *body_bytes ? body : "");
	if (hl < 0 || (size_t)hl >= sizeof(msg))
		return -EOVERFLOW;
	return http_send_all(c->cfd, msg, (size_t)hl);
}

static int percent_decode(char *dst, size_t cap, const char *s, size_t len)
{
	size_t o = 0;

	for (size_t i = 0; i < len && o + 1 < cap; i++) {
		if (s[i] == '%' && i + 2 < len &&
		    http_hex_value(s[i + 1]) >= 0 &&
		    http_hex_value(s[i + 2]) >= 0) {
			dst[o++] = (char)(http_hex_value(s[i + 1]) * 16 +
					  http_hex_value(s[i + 2]));
			i += 2;
		} else {
			dst[o++] = s[i];
		}
	}
	dst[o] = '\0';
	return (int)o;
}

static bool fail_key_matches(const struct proxy_config *cfg, const char *path,
			     size_t path_len)
{
	char raw[TARGET_LOG_MAX], dec[TARGET_LOG_MAX];

	if (cfg->n_fail_keys == 0)
		return false;
	copy_for_log(raw, sizeof(raw), path, path_len);
	percent_decode(dec, sizeof(dec), path, path_len);
	for (int i = 0; i < cfg->n_fail_keys; i++)
		if (strstr(raw, cfg->fail_keys[i]) ||
		    strstr(dec, cfg->fail_keys[i]))
			return true;
	return false;
}

/* NOTE(s3): path-style addressing is assumed, as in all the tests: a GET
 * of "/", "/bucket" or "/bucket/" is a listing (of buckets, or objects
 * with ListObjects v1 or a bucket sub-resource), and so is any request
 * with list-type= in its query (ListObjectsV2). */
static bool is_listing(const char *path, size_t path_len, const char *query,
		       size_t query_len)
{
	const char *slash;

	for (size_t i = 0; i + 10 <= query_len; i++)
		if ((i == 0 || query[i - 1] == '&') &&
		    memcmp(query + i, "list-type=", 10) == 0)
			return true;
	if (path_len <= 1)
		return true;
	slash = memchr(path + 1, '/', path_len - 1);
	return !slash || slash == path + path_len - 1;
}

/* The fault for request @rq; draws from @r only for eligible requests. */
static enum fault decide_fault(struct proxy *p, const struct http_msg *rq,
			       struct rng *r)
{
	const struct proxy_config *cfg = &p->cfg;
	const char *q = memchr(rq->target, '?', rq->target_len);
	size_t path_len = q ? (size_t)(q - rq->target) : rq->target_len;
	size_t query_len = q ? rq->target_len - path_len - 1 : 0;
	double u, acc = 0;

	if (fail_key_matches(cfg, rq->target, path_len))
		return FAULT_FAILKEY;
	if (!http_token_is(rq->method, rq->method_len, "GET"))
		return FAULT_NONE;
	if (!cfg->faults_on_list &&
	    is_listing(rq->target, path_len, q ? q + 1 : "", query_len))
		return FAULT_NONE;
	rng_init(
	    r, cfg->seed,
	    atomic_fetch_add_explicit(&p->fault_seq, 1, memory_order_relaxed));
	u = rng_pct(r);
	for (size_t i = 0; i < sizeof(drawn_faults) / sizeof(drawn_faults[0]);
	     i++) {
		acc += cfg->pct[drawn_faults[i]];
		if (u < acc)
			return drawn_faults[i];
	}
	return FAULT_NONE;
}

/* Payload bytes to let through before fault @f cuts the body @b. */
static uint64_t fault_cut(enum fault f, const struct http_body *b,
			  struct rng *r)
{
	bool known = b->kind == FR_LENGTH;
	uint64_t len = known ? b->left : CUT_UNKNOWN_BYTES * 2;

	if (b->kind == FR_NONE)
		return 0;
	if (f == FAULT_RESET)
		return rng_next(r) % len; /* anywhere, never the whole body */
	return len / 2;
}

/* Holds a stalled (or slow) response open, silent, for @ns; returns early
 * if the client gives up (or the proxy stops). */
static void stall_wait(struct conn *c, uint64_t ns)
{
	uint64_t until = now_ns() + ns;

	for (;;) {
		uint64_t t = now_ns();
		struct pollfd pfd = {.fd = c->cfd, .events = POLLRDHUP};
		int rc;

		if (t >= until)
			return;
		rc = poll(&pfd, 1, (int)((until - t + 999999) / 1000000));
		if (rc > 0)
			return;
		if (rc < 0 && errno != EINTR)
			return;
	}
}

/*
 * Relays the response whose head (@head_len bytes) is in c->uin, its body
 * one byte per trickle_ns: a server that never stalls long enough for a
 * stall timeout, and never finishes in time either. Returns as
 * http_relay() (1: complete), or -EPIPE when the client gave up (or the
 * proxy stops).
 */
static int trickle_relay(struct conn *c, struct http_body *rb, size_t head_len,
			 uint64_t *sent)
{
	int r = http_relay(c->ufd, &c->uin, head_len, c->cfd, rb, 1, sent);

	while (r == 0) {
		struct pollfd pfd = {.fd = c->cfd, .events = POLLRDHUP};
		int n = poll(&pfd, 1, (int)(c->p->cfg.trickle_ns / 1000000));

		if (n > 0 || (n < 0 && errno != EINTR))
			return -EPIPE;
		r = http_relay(c->ufd, &c->uin, 0, c->cfd, rb, *sent + 1, sent);
	}
	return r;
}

/* Sends the request whose head (@head_len bytes) is at c->cin.start (its
 * body, if any, still to come from the client) upstream, consuming it from
 * c->cin, and reads the response head into c->uin. A keep-alive
 * connection the server closed meanwhile is replaced once, for requests
 * without a body. Returns the response head's length; -ECONNABORTED if
 * the client left mid-body; another -errno if upstream failed. */
static ssize_t exchange_upstream(struct conn *c, size_t head_len,
				 struct http_body *qb, uint64_t *first_ns)
{
	struct proxy *p = c->p;
	bool has_body = !http_body_done(qb);
	const char *head = c->cin.data + c->cin.start;

	/* Without a body nothing more is read from the client until the
	 * response is through, so the head's bytes stay for a resend. */
	if (!has_body)
		c->cin.start += head_len;

	for (int attempt = 0;; attempt++) {
		bool fresh = false;
		uint64_t sent = 0;
		ssize_t rh;
		int r;

		/* A body cannot be sent twice, so the connection is checked
		 * before; a request without one is simply resent (a poll()
		 * per GET is a tenth of the proxy's system calls). */
		if (has_body && c->ufd >= 0 && upstream_stale(c->ufd)) {
			atomic_fetch_add_explicit(&p->st.reconnects, 1,
						  memory_order_relaxed);
			conn_set_fd(c, &c->ufd, -1, false);
		}
		if (c->ufd < 0) {
			r = conn_connect_upstream(c);
			if (r < 0)
				return r;
			fresh = true;
		}
		c->uin.start = c->uin.end = 0;
		if (has_body) /* head + body, straight from c->cin */
			r = http_relay(c->cfd, &c->cin, head_len, c->ufd, qb,
				       UINT64_MAX, &sent);
		else
			r = http_send_all(c->ufd, head, head_len);
		if (r == -ECONNABORTED)
			return -ECONNABORTED; /* the client left mid-body */
		rh = r < 0 ? -EPIPE : http_read_head(c->ufd, &c->uin, first_ns);
		if (rh > 0)
			return rh;
		if (attempt == 0 && !fresh && !has_body && rh != -EMSGSIZE) {
			atomic_fetch_add_explicit(&p->st.reconnects, 1,
						  memory_order_relaxed);
			conn_set_fd(c, &c->ufd, -1, false);
			continue;
		}
		return rh == 0 ? -ECONNRESET : rh;
	}
}

/* Serves the request @rq, whose head is at c->cin.start.
 * Returns true if the connection stays open for another request. */
static bool serve_request(struct conn *c, const struct http_msg *rq)
{
	struct proxy *p = c->p;
	const struct proxy_config *cfg = &p->cfg;
	uint64_t t_arrive = now_ns(), t_first = 0, sent = 0, budget;
	bool head_req = http_token_is(rq->method, rq->method_len, "HEAD");
	bool keep = !rq->conn_close && !(rq->http10 && !rq->keep_alive);
	bool sent_continue = false;
	struct http_msg rs;
	struct http_body qb, rb;
	struct rng rng = {0};
	enum fault f;
	ssize_t rh;
	int r;

	c->t_start_ns = t_arrive;
	c->n_requests++;
	copy_for_log(c->method, sizeof(c->method), rq->method, rq->method_len);
	copy_for_log(c->target, sizeof(c->target), rq->target, rq->target_len);
	copy_for_log(c->range, sizeof(c->range), rq->range ? rq->range : "",
		     rq->range_len);
	http_body_init_request(&qb, rq);
	f = decide_fault(p, rq, &rng);
	if (f != FAULT_NONE)
		count_fault(p, f);

	/* The 100 Continue comes from here; the Expect header still goes
	 * upstream (it may be signed), and upstream's own 100 is dropped. */
	if (rq->expect_continue && !http_body_done(&qb)) {
		static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";

		if (http_send_all(c->cfd, cont, sizeof(cont) - 1) < 0)
			return false;
		sent_continue = true;
	}

	if (f == FAULT_SLOWDOWN || f == FAULT_ERROR500 || f == FAULT_FAILKEY) {
		int status = f == FAULT_SLOWDOWN   ? 503
			     : f == FAULT_ERROR500 ? 500
						   : cfg->fail_status;
		uint64_t drained = 0;

		/* The head and body are read and dropped, so the connection
		 * stays in step with the client. */
		if (http_relay(c->cfd, &c->cin, rq->head_len, -1, &qb,
			       UINT64_MAX, &drained) < 0) {
			log_request(c, "aborted", 0);
			return false;
		}
		sleep_until(t_arrive + 2 * cfg->half_rtt_ns);
		r = send_s3_error(c, rq, status, keep, &sent);
		log_status(c, status, r < 0 ? 0 : sent);
		return r == 0 && keep;
	}
	if (f == FAULT_RESET && (rng_next(&rng) & 1)) {
		/* Before the response: the server never saw the request. */
		sleep_until(t_arrive + 2 * cfg->half_rtt_ns);
		conn_set_fd(c, &c->cfd, -1, true);
		log_request(c, "reset", 0);
		return false;
	}

	sleep_until(t_arrive + cfg->half_rtt_ns);
	rh = exchange_upstream(c, rq->head_len, &qb, &t_first);
	if (rh == -ECONNABORTED && !http_body_done(&qb)) {
		atomic_fetch_add_explicit(&p->st.aborted, 1,
					  memory_order_relaxed);
		log_request(c, "aborted", 0);
		return false;
	}
	if (rh < 0) {
		atomic_fetch_add_explicit(&p->st.upstream_errors, 1,
					  memory_order_relaxed);
		send_s3_error(c, rq, 502, false, &sent);
		log_status(c, 502, sent);
		return false;
	}

	sleep_until(t_first + cfg->half_rtt_ns);
	/* A slow server: the whole answer, late (a client that gave up
	 * meanwhile finds the connection closed by the relay's failure). */
	if (f == FAULT_SLOW)
		stall_wait(c, cfg->slow_ns);
	for (;;) {
		if (http_parse_head(c->uin.data + c->uin.start, (size_t)rh,
				    false, &rs) < 0) {
			atomic_fetch_add_explicit(&p->st.upstream_errors, 1,
						  memory_order_relaxed);
			send_s3_error(c, rq, 502, false, &sent);
			log_status(c, 502, sent);
			return false;
		}
		if (rs.status >= 200)
			break;
		/* An interim 1xx: forwarded (but for a second 100), then the
		 * real response follows on the same connection. */
		if (!(rs.status == 100 && sent_continue) &&
		    http_send_all(c->cfd, c->uin.data + c->uin.start,
				  (size_t)rh) < 0) {
			atomic_fetch_add_explicit(&p->st.aborted, 1,
						  memory_order_relaxed);
			log_request(c, "aborted", 0);
			return false;
		}
		c->uin.start += (size_t)rh;
		rh = http_read_head(c->ufd, &c->uin, NULL);
		if (rh <= 0) {
			atomic_fetch_add_explicit(&p->st.upstream_errors, 1,
						  memory_order_relaxed);
			log_request(c, "aborted", 0);
			return false;
		}
	}

	http_body_init_response(&rb, head_req, &rs);
	if (f == FAULT_TRICKLE) {
		r = trickle_relay(c, &rb, (size_t)rh, &sent);
		if (r == 1) {
			log_status(c, rs.status, sent);
			return keep && !rs.conn_close && rb.kind != FR_CLOSE;
		}
		conn_set_fd(c, &c->ufd, -1, false);
		log_request(c, "aborted", sent);
		return false;
	}
	budget = UINT64_MAX;
	if (f == FAULT_RESET || f == FAULT_TRUNCATE || f == FAULT_STALL)
		budget = fault_cut(f, &rb, &rng);
	r = http_relay(c->ufd, &c->uin, (size_t)rh, c->cfd, &rb, budget, &sent);
	if (r < 0) {
		atomic_fetch_add_explicit(&p->st.aborted, 1,
					  memory_order_relaxed);
		log_request(c, "aborted", sent);
		return false;
	}
	if (r == 1 && f != FAULT_RESET && f != FAULT_STALL) {
		log_status(c, rs.status, sent);
		if (rs.conn_close || rb.kind == FR_CLOSE ||
		    (rs.http10 && !rs.keep_alive)) {
			conn_set_fd(c, &c->ufd, -1, false);
			return false; /* the client was told to close */
		}
		return keep;
	}

	/* A fault cuts the response: upstream still has bytes for it. */
	conn_set_fd(c, &c->ufd, -1, false);
	if (f == FAULT_STALL) {
		stall_wait(c, cfg->stall_ns);
		log_request(c, "stalled", sent);
	} else if (f == FAULT_RESET) {
		conn_set_fd(c, &c->cfd, -1, true);
		log_request(c, "reset", sent);
	} else {
		log_request(c, "truncated", sent);
	}
	return false;
}

static void proxy_remove_conn(struct proxy *p, struct conn *c)
{
	pthread_mutex_lock(&p->lock);
	if (c->prev)
		c->prev->next = c->next;
	else
		p->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	if (--p->n_conns == 0)
		pthread_cond_broadcast(&p->idle);
	pthread_mutex_unlock(&p->lock);
}

static void conn_destroy(struct conn *c)
{
	if (!c)
		return;
	free(c->cin.data);
	free(c->uin.data);
	free(c);
}

static void *conn_main(void *arg)
{
	struct conn *c = arg;
	struct proxy *p = c->p;

	for (;;) {
		struct http_msg rq;
		ssize_t hl = http_read_head(c->cfd, &c->cin, NULL);

		if (hl == -EMSGSIZE) {
			static const char big[] =
			    "HTTP/1.1 431 Request Header Fields Too Large\r\n"
			    "Content-Length: 0\r\nConnection: close\r\n\r\n";

			http_send_all(c->cfd, big, sizeof(big) - 1);
			break;
		}
		if (hl <= 0)
			break; /* closed between requests, or went away */
		if (http_parse_head(c->cin.data + c->cin.start, (size_t)hl,
				    true, &rq) < 0) {
			static const char bad[] =
			    "HTTP/1.1 400 Bad Request\r\n"
			    "Content-Length: 0\r\nConnection: close\r\n\r\n";

			http_send_all(c->cfd, bad, sizeof(bad) - 1);
			break;
		}
		if (!serve_request(c, &rq))
			break;
	}
	conn_set_fd(c, &c->ufd, -1, false);
	conn_set_fd(c, &c->cfd, -1, false);
	proxy_remove_conn(p, c);
	conn_destroy(c);
	return NULL;
}

int proxy_spawn_conn(struct proxy *p, int fd)
{
	struct conn *c = calloc(1, sizeof(*c));
	pthread_attr_t attr;
	pthread_t tid;
	int r;

	if (c) {
		c->cin.data = malloc(CLIENT_BUF_BYTES);
		c->uin.data = malloc(UPSTREAM_BUF_BYTES);
	}
	if (!c || !c->cin.data || !c->uin.data) {
		conn_destroy(c);
		close(fd);
		return -ENOMEM;
	}
	c->p = p;
	c->id = ++p->n_spawned;
	c->cfd = fd;
	c->ufd = -1;
	atomic_fetch_add_explicit(&p->st.conns, 1, memory_order_relaxed);
	c->cin.cap = CLIENT_BUF_BYTES;
	c->uin.cap = UPSTREAM_BUF_BYTES;
	set_nodelay(fd);

	pthread_mutex_lock(&p->lock);
	if (p->stopping) {
		pthread_mutex_unlock(&p->lock);
		conn_destroy(c);
		close(fd);
		return -ESHUTDOWN;
	}
	c->next = p->conns;
	if (p->conns)
		p->conns->prev = c;
	p->conns = c;
	p->n_conns++;
	pthread_mutex_unlock(&p->lock);

	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, THREAD_STACK_BYTES);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	r = pthread_create(&tid, &attr, conn_main, c);
	pthread_attr_destroy(&attr);
	if (r != 0) {
		conn_set_fd(c, &c->cfd, -1, false);
		proxy_remove_conn(p, c);
		conn_destroy(c);
		return -r;
	}
	return 0;
}

unsigned proxy_stop_conns(struct proxy *p)
{
	struct timespec until;
	unsigned left;

	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += STOP_WAIT_MS / 1000;
	pthread_mutex_lock(&p->lock);
	p->stopping = true;
	for (struct conn *c = p->conns; c; c = c->next) {
		if (c->cfd >= 0)
			shutdown(c->cfd, SHUT_RDWR);
		if (c->ufd >= 0)
			shutdown(c->ufd, SHUT_RDWR);
	}
	while (p->n_conns > 0 &&
	       pthread_cond_timedwait(&p->idle, &p->lock, &until) == 0)
		;
	left = p->n_conns;
	pthread_mutex_unlock(&p->lock);
	return left;
}

void proxy_print_summary(struct proxy *p, unsigned unfinished)
{
	struct proxy_stats *s = &p->st;

	fprintf(stderr,
		"s3proxy: summary: connections=%" PRIuFAST64
		" requests=%" PRIuFAST64 " body_bytes=%" PRIuFAST64
		" 2xx=%" PRIuFAST64 " 3xx=%" PRIuFAST64 " 4xx=%" PRIuFAST64
		" 5xx=%" PRIuFAST64 " slowdown=%" PRIuFAST64
		" error500=%" PRIuFAST64 " reset=%" PRIuFAST64
		" truncate=%" PRIuFAST64 " stall=%" PRIuFAST64
		" trickle=%" PRIuFAST64 " slow=%" PRIuFAST64
		" failkey=%" PRIuFAST64 " aborted=%" PRIuFAST64
		" upstream_errors=%" PRIuFAST64 " reconnects=%" PRIuFAST64
		" unfinished=%u\n",
		s->conns, s->requests, s->body_bytes, s->by_class[2],
		s->by_class[3], s->by_class[4], s->by_class[5],
		s->faults[FAULT_SLOWDOWN], s->faults[FAULT_ERROR500],
		s->faults[FAULT_RESET], s->faults[FAULT_TRUNCATE],
		s->faults[FAULT_STALL], s->faults[FAULT_TRICKLE],
		s->faults[FAULT_SLOW], s->faults[FAULT_FAILKEY], s->aborted,
		s->upstream_errors, s->reconnects, unfinished);
}

int proxy_init(struct proxy *p)
{
	pthread_condattr_t ca;

	p->t0_ns = now_ns();
	p->log_fd = -1;
	if (p->cfg.log_path) {
		/* O_APPEND: each line is one write(), so a reader following
		 * the file never sees half a line. */
		p->log_fd = open(
		    p->cfg.log_path,
		    O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
		if (p->log_fd < 0)
			return -errno;
	}
	pthread_mutex_init(&p->log_lock, NULL);
	pthread_mutex_init(&p->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->idle, &ca);
	pthread_condattr_destroy(&ca);
	return 0;
}

void proxy_fini(struct proxy *p, unsigned unfinished)
{
	if (unfinished)
		return; /* their threads may still log or lock */
	if (p->log_fd >= 0)
		close(p->log_fd);
	p->log_fd = -1;
	pthread_cond_destroy(&p->idle);
	pthread_mutex_destroy(&p->lock);
	pthread_mutex_destroy(&p->log_lock);
}
