/*
 * tests/servers/s3proxy/http.h - the HTTP/1.1 the test servers need:
 * parsing of message heads, relaying of bodies with their framing tracked,
 * and the listening socket. Shared by s3proxy and the fast origin
 * (tests/servers/origin); private to the test servers. Every function may
 * be called from any thread on objects that thread owns; none keeps state
 * of its own.
 */
#ifndef S3PROXY_HTTP_H
#define S3PROXY_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>

/* Bytes received from a socket and not yet consumed. */
struct ibuf {
	char *data;
	size_t cap;
	size_t start; /* first unconsumed byte */
	size_t end;   /* one past the last received byte */
};

/* A parsed message head. The pointers point into the buffer it was parsed
 * from and are valid until that buffer is read into again. */
struct http_msg {
	size_t head_len;
	const char *method; /* requests only */
	size_t method_len;
	const char *target; /* requests only: path and query, as sent */
	size_t target_len;
	const char *range; /* the Range header's value, NULL if absent */
	size_t range_len;
	const char *if_match; /* the If-Match header's value, NULL if absent */
	size_t if_match_len;
	int status;		/* responses only */
	int64_t content_length; /* -1 if absent */
	bool http10;
	bool chunked;	 /* Transfer-Encoding ends in chunked */
	bool conn_close; /* Connection: close */
	bool keep_alive; /* Connection: keep-alive */
	bool expect_continue;
};

enum http_framing { FR_NONE, FR_LENGTH, FR_CHUNKED, FR_CLOSE };

enum http_chunk_state {
	CS_SIZE,    /* hex digits of a chunk size */
	CS_EXT,	    /* chunk extension, up to the end of the line */
	CS_SIZE_LF, /* CR seen after the size line */
	CS_DATA,    /* chunk payload, ->left bytes to go */
	CS_DATA_CR, /* CRLF after the payload */
	CS_DATA_LF,
	CS_TRAILER, /* at the start of a trailer line (or the final CRLF) */
	CS_TRAILER_LINE,
	CS_FINAL_LF,
	CS_DONE,
};

/* Where a body is in its framing, while it is relayed. */
struct http_body {
	enum http_framing kind;
	uint64_t left; /* FR_LENGTH: bytes to go; CS_DATA: chunk bytes */
	enum http_chunk_state cs; /* FR_CHUNKED only */
	bool size_digits;	  /* CS_SIZE: a hex digit was seen */
	bool eof;		  /* FR_CLOSE: the sender closed */
};

/* The monotonic clock in nanoseconds, which all of s3proxy's times use. */
static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/** Sends all @len bytes (no SIGPIPE). Returns 0 or -errno. */
int http_send_all(int fd, const char *buf, size_t len);

/** True if @s (@len bytes) equals @word, ignoring ASCII case. */
bool http_token_is(const char *s, size_t len, const char *word);

/** The value of hex digit @c, or -1. */
int http_hex_value(char c);

/**
 * Parses the head at @h (@len bytes, ending in CRLFCRLF, as returned by
 * http_read_head()) as a request or a response into @m.
 * Returns 0 or -EPROTO.
 */
int http_parse_head(const char *h, size_t len, bool request,
		    struct http_msg *m);

/**
 * Scans the @len bytes at @p for the CRLFCRLF that ends a message head,
 * from @from on (bytes before it were scanned already and held none).
 * Returns the head's length with its CRLFCRLF, or 0 if it is not whole.
 */
size_t http_head_end(const char *p, size_t len, size_t from);

/**
 * Reads from @fd into @ib until @ib holds a whole message head at
 * ib->start. Returns the head's length; 0 if the peer closed (or reset)
 * before sending a byte; -EMSGSIZE if no head fits the buffer;
 * -ECONNABORTED if the peer went away part-way. *first_ns (if not NULL)
 * is set to when the head's first byte arrived.
 */
ssize_t http_read_head(int fd, struct ibuf *ib, uint64_t *first_ns);

/** Sets @b up for the body of request @rq. */
void http_body_init_request(struct http_body *b, const struct http_msg *rq);

/** Sets @b up for the body of response @rs to a request that was a HEAD
 * if @head_request. */
void http_body_init_response(struct http_body *b, bool head_request,
			     const struct http_msg *rs);

/** True once the whole body went through (at once for FR_NONE). */
bool http_body_done(const struct http_body *b);

/**
 * Forwards @prefix bytes at ib->start (a head, or 0) and then the body @b
 * from @src (bytes already in @ib first) to @dst, stopping once @budget
 * payload bytes were sent (UINT64_MAX: no limit). The prefix and the
 * first body bytes go out in one send; a @dst of -1 drops them. *sent
 * counts payload bytes (without chunk framing). Consumes exactly the
 * message from @ib. Returns 1 when the body is complete, 0 when cut at
 * @budget, -EPIPE if @dst failed, -ECONNABORTED if @src closed or failed
 * early, -EPROTO on bad chunked framing.
 */
int http_relay(int src, struct ibuf *ib, size_t prefix, int dst,
	       struct http_body *b, uint64_t budget, uint64_t *sent);

/**
 * Opens a TCP socket listening at @addr (@len bytes; port 0: the kernel
 * picks one) with a backlog of @backlog. Returns the socket (close-on-exec)
 * with the port it got in *port, or -errno.
 */
int http_listen(const struct sockaddr *addr, socklen_t len, int backlog,
		int *port);

/**
 * Blocks SIGTERM and SIGINT in the calling thread (call it before any
 * other thread exists, so all inherit the mask), ignores SIGPIPE, and
 * returns a close-on-exec signalfd that reads the two, or -errno.
 */
int http_stop_signals(void);

/** Raises the soft limit of open descriptors to the hard one (servers
 * that hold hundreds of connections). Best effort: failures are ignored. */
void http_raise_fd_limit(void);

#endif /* S3PROXY_HTTP_H */
