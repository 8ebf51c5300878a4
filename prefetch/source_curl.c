/*
 * prefetch/source_curl.c - the curl source (source.h): each GET an s3_xfer
 * transfer of the S3 client, all of them in one curl multi handle driven
 * by its network thread through netloop.c. The daemon's engine runs on
 * one per network thread; a sibling source (the shared cache tier's client)
 * shares the handle. PUTs are the client's blocking requests, on the
 * caller's thread (the tier's PUT workers), outside the multi handle.
 *
 * Invariant: a GET's easy handle is in the multi handle exactly while its
 * attempt runs; an attempt leaves it once, through next_done() (curl said
 * it ended), cancel() or release(), and s3_xfer_finish() concludes it
 * there. Only the driving thread touches the multi handle.
 */
#include "prefetch/source.h"
#include "prefetch/netloop.h"
#include "prefetch/prefetch.h"
#include "prefetch/s3/s3_xfer.h"
#include "common/clock.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdlib.h>

struct src_curl {
	struct pf_source base;
	struct s3_client *client; /* not owned */
	CURLM *multi;		  /* the origin's; a sibling's is shared */
	struct netloop *net;	  /* drives multi */
	struct netloop own_net;	  /* the origin's netloop */
	bool owner;		  /* created multi and own_net */
};

static struct src_curl *sc_of(const struct pf_source *s)
{
	return (struct src_curl *)s;
}

static int sc_start(struct pf_source *s, struct pf_get *g, bool retry,
		    long timeout_ms)
{
	struct src_curl *sc = sc_of(s);
	struct s3_xfer *x = g->h;
	CURL *easy;
	int rc;

	if (!x) {
		rc = s3_xfer_create(sc->client, g->key, g->key_len, g->etag,
				    g->off, g->len, g->buf, g, &x);
		if (rc)
			return rc;
		g->h = x;
		if (g->whole)
			s3_xfer_whole_object(x);
		if (g->want_meta)
			s3_xfer_want_meta(x);
	}
	rc = s3_xfer_arm(x, retry, &easy);
	if (rc)
		return rc;
	curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS,
			 timeout_ms > 0 ? timeout_ms : 1L);
	if (curl_multi_add_handle(sc->multi, easy) != CURLM_OK)
		return -ENOMEM;
	return 0;
}

static void sc_cancel(struct pf_source *s, struct pf_get *g,
		      struct s3_status *st)
{
	bool retryable;

	curl_multi_remove_handle(sc_of(s)->multi, s3_xfer_easy(g->h));
	s3_xfer_finish(g->h, CURLE_ABORTED_BY_CALLBACK, st, &retryable);
}

static bool sc_running(const struct pf_source *s, const struct pf_get *g)
{
	return g->h && s3_xfer_easy(g->h);
}

static uint64_t sc_run(struct pf_source *s, int timeout_ms, bool *timed_out)
{
	struct src_curl *sc = sc_of(s);
	uint64_t timeouts = sc->net->timeouts, waited;

	waited = netloop_run(sc->net, timeout_ms);
	*timed_out = sc->net->timeouts != timeouts;
	return waited;
}

static struct pf_get *sc_next_done(struct pf_source *s, ssize_t *got,
				   bool *retryable, struct s3_status *st)
{
	struct src_curl *sc = sc_of(s);
	CURLMsg *msg;
	int left;

	while ((msg = curl_multi_info_read(sc->multi, &left))) {
		struct s3_xfer *x = NULL;

		if (msg->msg != CURLMSG_DONE)
			continue;
		CURL *easy = msg->easy_handle;
		CURLcode cc = msg->data.result;

		curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&x);
		curl_multi_remove_handle(sc->multi, easy);
		*got = s3_xfer_finish(x, cc, st, retryable);
		return s3_xfer_user(x);
	}
	return NULL;
}

static const struct s3_obj_meta *sc_meta(const struct pf_source *s,
					 const struct pf_get *g)
{
	return g->h ? s3_xfer_meta(g->h) : NULL;
}

static void sc_release(struct pf_source *s, struct pf_get *g)
{
	CURL *easy = g->h ? s3_xfer_easy(g->h) : NULL;

	/* Only pf_stop() releases a running GET (no reader is left). */
	if (easy)
		curl_multi_remove_handle(sc_of(s)->multi, easy);
	s3_xfer_destroy(g->h);
}

static void sc_wake(struct pf_source *s)
{
	netloop_wake(sc_of(s)->net);
}

static uint64_t sc_now_ns(const struct pf_source *s)
{
	return mono_ns();
}

static void sc_destroy(struct pf_source *s)
{
	struct src_curl *sc = sc_of(s);

	if (sc->owner) {
		/* netloop_fini() after curl_multi_cleanup(), which still
		 * tells the socket callback about the sockets it closes. */
		curl_multi_cleanup(sc->multi);
		netloop_fini(&sc->own_net);
	}
	free(sc);
}

/* A blocking PUT of the client (its own easy handle, off the multi
 * handle): the tier's PUT workers call it. */
static int sc_put(struct pf_source *s, const char *name, size_t name_len,
		  const void *data, size_t len,
		  const struct s3_meta_header *meta, size_t n_meta,
		  struct s3_status *st)
{
	return s3_put_object(sc_of(s)->client, name, name_len, data, len, meta,
			     n_meta, st);
}

static const struct retry_policy *sc_retry(const struct pf_source *s)
{
	return s3_client_retry(sc_of(s)->client);
}

static const struct pf_source_ops sc_ops = {
    .start = sc_start,
    .cancel = sc_cancel,
    .running = sc_running,
    .run = sc_run,
    .next_done = sc_next_done,
    .meta = sc_meta,
    .release = sc_release,
    .wake = sc_wake,
    .now_ns = sc_now_ns,
    .put = sc_put,
    .retry = sc_retry,
    .destroy = sc_destroy,
};

int pf_source_curl_create(struct s3_client *client, long max_connects,
			  struct pf_source **out)
{
	struct src_curl *sc = calloc(1, sizeof(*sc));
	int rc;

	if (!sc)
		return -ENOMEM;
	sc->base.ops = &sc_ops;
	sc->client = client;
	sc->multi = curl_multi_init();
	if (!sc->multi) {
		free(sc);
		return -ENOMEM;
	}
	/* The pool follows the engine's cap: idle connections kept for
	 * reuse up to it, and never more open at once (a transfer past it
	 * would wait in curl, on its own timeout's clock: the engine's
	 * limit keeps below it). Not per host: the origin and the tier may
	 * be one host, and their sum is what the cap counts. */
	curl_multi_setopt(sc->multi, CURLMOPT_MAXCONNECTS, max_connects);
	curl_multi_setopt(sc->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS,
			  max_connects);
	rc = netloop_init(&sc->own_net, sc->multi);
	if (rc) {
		curl_multi_cleanup(sc->multi);
		free(sc);
		return rc;
	}
	sc->net = &sc->own_net;
	sc->owner = true;
	*out = &sc->base;
	return 0;
}

int pf_source_curl_sibling(struct pf_source *origin, struct s3_client *client,
			   struct pf_source **out)
{
	struct src_curl *sc = calloc(1, sizeof(*sc));

	if (!sc)
		return -ENOMEM;
	sc->base.ops = &sc_ops;
	sc->client = client;
	sc->multi = sc_of(origin)->multi;
	sc->net = sc_of(origin)->net;
	*out = &sc->base;
	return 0;
}

int pf_source_curl_make(struct s3_client *client, struct pf_source *origin,
			long max_connects, struct pf_source **out)
{
	return origin ? pf_source_curl_sibling(origin, client, out)
		      : pf_source_curl_create(client, max_connects, out);
}
