/*
 * tests/servers/origin/s3.h - the S3 requests the fast origin
 * answers, turned into responses. Private to the origin. Functions may be
 * called from any thread on the objects that thread owns; the store is
 * only read.
 */
#ifndef ORIGIN_S3_H
#define ORIGIN_S3_H

#include "../s3proxy/http.h"
#include "store.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A growing byte string; after a failed allocation it stays as it was and
 * ->oom is set. */
struct sbuf {
	char *data;
	size_t len;
	size_t cap;
	bool oom;
};

/* Requests answered, by kind, per worker thread (summed at exit). */
struct s3_stats {
	uint64_t gets;	 /* object GETs answered 200 or 206 */
	uint64_t heads;	 /* HEAD requests */
	uint64_t lists;	 /* ListObjectsV2 pages */
	uint64_t errors; /* 4xx and 5xx answers */
	uint64_t bytes;	 /* object bytes sent (sendfile) */
};

/* What to send for one request: ->head (status line, headers and, for
 * XML answers, the body), then ->body_len bytes of ->body_fd from
 * ->body_off (sendfile) when ->body_fd >= 0. */
struct s3_resp {
	struct sbuf head;
	int body_fd;
	uint64_t body_off;
	uint64_t body_len;
	bool close; /* close the connection once sent */
};

/**
 * Answers the request @m, whose head is in the buffer it was parsed from,
 * into @r (r->head is emptied first and reused; the caller closes
 * r->body_fd once sent). Counts it in @st. Never fails: an allocation
 * failure leaves r->head.oom set, and the caller drops the connection.
 */
void s3_answer(const struct store *s, const struct http_msg *m,
	       struct s3_resp *r, struct s3_stats *st);

/** Frees @b's memory. */
void sbuf_fini(struct sbuf *b);

#endif /* ORIGIN_S3_H */
