/*
 * tests/servers/s3proxy/http.c - message heads and bodies of HTTP/1.1,
 * just enough for a proxy that forwards them unchanged.
 *
 * Owns no state: the caller's struct ibuf holds what was received and not
 * yet consumed, and struct http_body where a body is in its framing.
 * Invariant of http_relay(): it consumes from the buffer exactly the
 * bytes of the one message being relayed (the rest stays for the next),
 * and touches payload bytes only to count them; chunked framing is walked
 * byte by byte, chunk payload skipped in bulk.
 */
#include "http.h"

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

int http_send_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

static size_t min_size(size_t a, uint64_t b)
{
	return b < a ? (size_t)b : a;
}

bool http_token_is(const char *s, size_t len, const char *word)
{
	return strlen(word) == len && strncasecmp(s, word, len) == 0;
}

/* True if the comma-separated list @v contains @word (case-insensitive). */
static bool list_has(const char *v, size_t len, const char *word)
{
	size_t i = 0;

	while (i < len) {
		size_t j = i;

		while (j < len && v[j] != ',')
			j++;
		size_t a = i, b = j;

		while (a < b && (v[a] == ' ' || v[a] == '\t'))
			a++;
		while (b > a && (v[b - 1] == ' ' || v[b - 1] == '\t'))
			b--;
		if (http_token_is(v + a, b - a, word))
			return true;
		i = j + 1;
	}
	return false;
}

static int parse_header(struct http_msg *m, const char *name, size_t name_len,
			const char *v, size_t v_len)
{
	if (http_token_is(name, name_len, "content-length")) {
		uint64_t n = 0;

		if (v_len == 0 || v_len > 18)
			return -EPROTO;
		for (size_t i = 0; i < v_len; i++) {
			if (v[i] < '0' || v[i] > '9')
				return -EPROTO;
			n = n * 10 + (uint64_t)(v[i] - '0');
		}
		m->content_length = (int64_t)n;
	} else if (http_token_is(name, name_len, "transfer-encoding")) {
		/* chunked must be the last coding; anything else before it is
		 * passed through untouched. */
		m->chunked =
		    v_len >= 7 && strncasecmp(v + v_len - 7, "chunked", 7) == 0;
	} else if (http_token_is(name, name_len, "connection")) {
		m->conn_close |= list_has(v, v_len, "close");
		m->keep_alive |= list_has(v, v_len, "keep-alive");
	} else if (http_token_is(name, name_len, "expect")) {
		m->expect_continue = list_has(v, v_len, "100-continue");
	} else if (http_token_is(name, name_len, "range")) {
		m->range = v;
		m->range_len = v_len;
	} else if (http_token_is(name, name_len, "if-match")) {
		m->if_match = v;
		m->if_match_len = v_len;
	}
	return 0;
}

int http_parse_head(const char *h, size_t len, bool request, struct http_msg *m)
{
	const char *end = h + len, *eol, *sp1, *sp2, *ver;

	memset(m, 0, sizeof(*m));
	m->head_len = len;
	m->content_length = -1;

	eol = memchr(h, '\n', len);
	if (!eol || eol == h || eol[-1] != '\r')
		return -EPROTO;
	sp1 = memchr(h, ' ', (size_t)(eol - h));
	if (!sp1)
		return -EPROTO;
	if (request) {
		sp2 = memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1));
		if (!sp2 || sp1 == h || sp2 == sp1 + 1)
			return -EPROTO;
		m->method = h;
		m->method_len = (size_t)(sp1 - h);
		m->target = sp1 + 1;
		m->target_len = (size_t)(sp2 - sp1 - 1);
		ver = sp2 + 1;
	} else {
		ver = h;
		if (eol - sp1 < 4 || sp1[1] < '1' || sp1[1] > '5' ||
		    sp1[2] < '0' || sp1[2] > '9' || sp1[3] < '0' ||
		    sp1[3] > '9')
			return -EPROTO;
		m->status =
		    (sp1[1] - '0') * 100 + (sp1[2] - '0') * 10 + (sp1[3] - '0');
	}
	if (strncmp(ver, "HTTP/1.", 7) != 0)
		return -EPROTO;
	m->http10 = ver[7] == '0';

	for (const char *line = eol + 1; line < end; line = eol + 1) {
		const char *colon, *v, *ve;

		eol = memchr(line, '\n', (size_t)(end - line));
		if (!eol)
			return -EPROTO;
		if (eol - line <= 1) /* the empty line that ends the head */
			break;
		colon = memchr(line, ':', (size_t)(eol - line));
		if (!colon || colon == line)
			return -EPROTO;
		v = colon + 1;
		ve = eol[-1] == '\r' ? eol - 1 : eol;
		while (v < ve && (*v == ' ' || *v == '\t'))
			v++;
		while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
			ve--;
		if (parse_header(m, line, (size_t)(colon - line), v,
				 (size_t)(ve - v)) < 0)
			return -EPROTO;
	}
	return 0;
}

size_t http_head_end(const char *p, size_t len, size_t from)
{
	const char *e;

	/* The terminator may straddle what was scanned and what is new. */
	from = from > 3 ? from - 3 : 0;
	if (len < 4 || from >= len)
		return 0;
	e = memmem(p + from, len - from, "\r\n\r\n", 4);
	return e ? (size_t)(e + 4 - p) : 0;
}

ssize_t http_read_head(int fd, struct ibuf *ib, uint64_t *first_ns)
{
	size_t scanned = 0;

	if (ib->start == ib->end)
		ib->start = ib->end = 0;
	else if (first_ns)
		*first_ns = now_ns();
	for (;;) {
		size_t avail = ib->end - ib->start;
		size_t head =
		    http_head_end(ib->data + ib->start, avail, scanned);
		ssize_t n;

		if (head)
			return (ssize_t)head;
		scanned = avail;
		if (ib->end == ib->cap) {
			if (ib->start == 0)
				return -EMSGSIZE;
			memmove(ib->data, ib->data + ib->start, avail);
			ib->start = 0;
			ib->end = avail;
		}
		n = recv(fd, ib->data + ib->end, ib->cap - ib->end, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (avail > 0)
				return -ECONNABORTED;
			return (n == 0 || errno == ECONNRESET) ? 0 : -errno;
		}
		if (avail == 0 && first_ns)
			*first_ns = now_ns();
		ib->end += (size_t)n;
	}
}

static void body_init(struct http_body *b, enum http_framing kind, uint64_t len)
{
	memset(b, 0, sizeof(*b));
	b->kind = kind;
	b->left = len;
	b->cs = CS_SIZE;
	if (kind == FR_LENGTH && len == 0)
		b->kind = FR_NONE;
}

void http_body_init_request(struct http_body *b, const struct http_msg *rq)
{
	if (rq->chunked)
		body_init(b, FR_CHUNKED, 0);
	else if (rq->content_length > 0)
		body_init(b, FR_LENGTH, (uint64_t)rq->content_length);
	else
		body_init(b, FR_NONE, 0);
}

void http_body_init_response(struct http_body *b, bool head_request,
			     const struct http_msg *rs)
{
	if (head_request || rs->status < 200 || rs->status == 204 ||
	    rs->status == 304)
		body_init(b, FR_NONE, 0);
	else if (rs->chunked)
		body_init(b, FR_CHUNKED, 0);
	else if (rs->content_length >= 0)
		body_init(b, FR_LENGTH, (uint64_t)rs->content_length);
	else
		body_init(b, FR_CLOSE, 0);
}

bool http_body_done(const struct http_body *b)
{
	switch (b->kind) {
	case FR_NONE:
		return true;
	case FR_LENGTH:
		return b->left == 0;
	case FR_CHUNKED:
		return b->cs == CS_DONE;
	case FR_CLOSE:
		return b->eof;
	}
	return true;
}

int http_hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Walks chunked framing and payload in @p (@len bytes). Stops at the end
 * of the message or once @budget payload bytes were passed. Returns the
 * bytes consumed (payload in *payload) or -EPROTO. Payload is skipped in
 * bulk; only size lines and trailers are looked at byte by byte. */
static ssize_t chunk_scan(struct http_body *b, const char *p, size_t len,
			  uint64_t budget, uint64_t *payload)
{
	size_t i = 0;

	*payload = 0;
	while (i < len && b->cs != CS_DONE) {
		char c = p[i];
		int v;

		switch (b->cs) {
		case CS_SIZE:
			v = http_hex_value(c);
			if (v >= 0) {
				if (b->left >> 56)
					return -EPROTO;
				b->left = b->left * 16 + (uint64_t)v;
				b->size_digits = true;
			} else if (c == ';' || c == ' ' || c == '\t') {
				b->cs = CS_EXT;
			} else if (c == '\r') {
				b->cs = CS_SIZE_LF;
			} else if (c == '\n') {
				goto size_line_done;
			} else {
				return -EPROTO;
			}
			i++;
			continue;
		case CS_EXT:
			if (c == '\r')
				b->cs = CS_SIZE_LF;
			else if (c == '\n')
				goto size_line_done;
			i++;
			continue;
		case CS_SIZE_LF:
			if (c != '\n')
				return -EPROTO;
		size_line_done:
			i++;
			if (!b->size_digits)
				return -EPROTO;
			b->cs = b->left ? CS_DATA : CS_TRAILER;
			continue;
		case CS_DATA: {
			size_t n = min_size(len - i, b->left);

			n = min_size(n, budget - *payload);
			if (n == 0)
				return (ssize_t)i; /* budget spent */
			i += n;
			*payload += n;
			b->left -= n;
			if (b->left == 0)
				b->cs = CS_DATA_CR;
			continue;
		}
		case CS_DATA_CR:
			if (c == '\r')
				b->cs = CS_DATA_LF;
			else if (c == '\n')
				goto next_chunk;
			else
				return -EPROTO;
			i++;
			continue;
		case CS_DATA_LF:
			if (c != '\n')
				return -EPROTO;
		next_chunk:
			i++;
			b->cs = CS_SIZE;
			b->size_digits = false;
			b->left = 0;
			continue;
		case CS_TRAILER:
			if (c == '\r')
				b->cs = CS_FINAL_LF;
			else if (c == '\n')
				b->cs = CS_DONE;
			else
				b->cs = CS_TRAILER_LINE;
			i++;
			continue;
		case CS_TRAILER_LINE:
			if (c == '\n')
				b->cs = CS_TRAILER;
			i++;
			continue;
		case CS_FINAL_LF:
			if (c != '\n')
				return -EPROTO;
			b->cs = CS_DONE;
			i++;
			continue;
		case CS_DONE:
			break;
		}
	}
	return (ssize_t)i;
}

int http_relay(int src, struct ibuf *ib, size_t prefix, int dst,
	       struct http_body *b, uint64_t budget, uint64_t *sent)
{
	for (;;) {
		size_t avail = ib->end - ib->start - prefix;
		const char *body = ib->data + ib->start + prefix;
		size_t take = 0;
		uint64_t pay = 0;
		ssize_t n;

		if (!http_body_done(b) && *sent < budget && avail > 0) {
			switch (b->kind) {
			case FR_LENGTH:
				take = min_size(min_size(avail, b->left),
						budget - *sent);
				b->left -= take;
				pay = take;
				break;
			case FR_CLOSE:
				take = min_size(avail, budget - *sent);
				pay = take;
				break;
			case FR_CHUNKED:
				n = chunk_scan(b, body, avail, budget - *sent,
					       &pay);
				if (n < 0)
					return (int)n;
				take = (size_t)n;
				break;
			case FR_NONE:
				break;
			}
		}
		if (prefix + take > 0) {
			if (dst >= 0 && http_send_all(dst, ib->data + ib->start,
						      prefix + take) < 0)
				return -EPIPE;
			ib->start += prefix + take;
			prefix = 0;
			*sent += pay;
		}
		if (http_body_done(b))
			return 1;
		if (*sent >= budget)
			return 0;
		/* Everything buffered was consumed: a scan stops early only
		 * at the end of the message or of the budget. */
		ib->start = ib->end = 0;
		n = recv(src, ib->data, ib->cap, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0 && b->kind == FR_CLOSE) {
			b->eof = true;
			return 1;
		}
		if (n <= 0)
			return -ECONNABORTED;
		ib->end = (size_t)n;
	}
}

int http_listen(const struct sockaddr *addr, socklen_t len, int backlog,
		int *port)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int one = 1;
	int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, addr, len) < 0 || listen(fd, backlog) < 0 ||
	    getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
		int err = errno;

		close(fd);
		return -err;
	}
	*port = ntohs(ss.ss_family == AF_INET6
			  ? ((struct sockaddr_in6 *)&ss)->sin6_port
			  : ((struct sockaddr_in *)&ss)->sin_port);
	return fd;
}

/* Two descriptors per proxied connection, one per origin connection plus
 * one per body being sent: 400 connections pass the usual soft limit of
 * 1,024, so take what the hard limit allows. */
void http_raise_fd_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

int http_stop_signals(void)
{
	sigset_t sigs;
	int fd;

	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);
	fd = signalfd(-1, &sigs, SFD_CLOEXEC);
	return fd < 0 ? -errno : fd;
}
