/*
 * tests/unit/test_netloop.c - the network thread's event loop
 * (prefetch/netloop.c) against a small HTTP/1.1 server on 127.0.0.1 run
 * by this test: many transfers at once complete with their bytes,
 * connections are kept and reused, curl's timer ends a transfer the
 * server never answers, and wake-ups from other threads end a wait and
 * are coalesced.
 *
 * The server: one thread, poll(2) over the listening socket and up to
 * 64 clients. "GET /N" answers N bytes (byte i is 'a' + i % 26) and
 * keeps the connection; "GET /hang" is never answered.
 */
#include "check.h"
#include "prefetch/netloop.h"
#include "common/clock.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define SRV_CLIENTS 64

static struct {
	int lfd, stop_fd[2];
	int port;
	atomic_int accepted;
	pthread_t thread;
} srv;

struct client {
	int fd;
	char req[4096];
	size_t len;
};

static void serve_request(int fd, const char *req)
{
	long n;
	char *msg;
	int h;

	if (strncmp(req, "GET /hang", 9) == 0)
		return;
	n = strtol(req + 5, NULL, 10);
	msg = malloc((size_t)n + 128);
	h = snprintf(msg, 128, "HTTP/1.1 200 OK\r\nContent-Length: %ld\r\n\r\n",
		     n);
	for (long i = 0; i < n; i++)
		msg[h + i] = (char)('a' + i % 26);
	/* One blocking write (two would meet Nagle and delayed ACKs). */
	if (write(fd, msg, (size_t)(h + n)) < 0)
		perror("server write");
	free(msg);
}

static void *server_main(void *arg)
{
	struct client cl[SRV_CLIENTS];
	struct pollfd pfd[SRV_CLIENTS + 2];
	int ncl = 0;

	(void)arg;
	for (;;) {
		int n = 0;

		pfd[n++] =
		    (struct pollfd){.fd = srv.stop_fd[0], .events = POLLIN};
		pfd[n++] = (struct pollfd){.fd = srv.lfd, .events = POLLIN};
		for (int i = 0; i < ncl; i++)
			pfd[n++] =
			    (struct pollfd){.fd = cl[i].fd, .events = POLLIN};
		if (poll(pfd, (nfds_t)n, -1) < 0)
			continue;
		if (pfd[0].revents)
			break;
		if ((pfd[1].revents & POLLIN) && ncl < SRV_CLIENTS) {
			int fd = accept(srv.lfd, NULL, NULL);

			if (fd >= 0) {
				cl[ncl++] = (struct client){.fd = fd};
				atomic_fetch_add(&srv.accepted, 1);
			}
		}
		for (int i = 0; i < ncl; i++) {
			struct client *c = &cl[i];
			ssize_t got;
			char *end;

			if (!(pfd[2 + i].revents & (POLLIN | POLLHUP)))
				continue;
			got = read(c->fd, c->req + c->len,
				   sizeof(c->req) - 1 - c->len);
			if (got <= 0) {
				close(c->fd);
				c->fd = -1;
				continue;
			}
			c->len += (size_t)got;
			c->req[c->len] = '\0';
			while ((end = strstr(c->req, "\r\n\r\n"))) {
				size_t used = (size_t)(end + 4 - c->req);

				serve_request(c->fd, c->req);
				memmove(c->req, end + 4, c->len - used + 1);
				c->len -= used;
			}
		}
		/* Drop the closed ones (pfd is rebuilt next round). */
		for (int i = 0; i < ncl;)
			if (cl[i].fd < 0)
				cl[i] = cl[--ncl];
			else
				i++;
	}
	for (int i = 0; i < ncl; i++)
		close(cl[i].fd);
	return NULL;
}

static void server_start(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);

	srv.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (srv.lfd < 0 || bind(srv.lfd, (struct sockaddr *)&a, sizeof(a)) ||
	    listen(srv.lfd, 128) ||
	    getsockname(srv.lfd, (struct sockaddr *)&a, &len) ||
	    pipe(srv.stop_fd)) {
		perror("test server");
		exit(1);
	}
	srv.port = ntohs(a.sin_port);
	pthread_create(&srv.thread, NULL, server_main, NULL);
}

static void server_stop(void)
{
	if (write(srv.stop_fd[1], "x", 1) < 0)
		perror("server stop");
	pthread_join(srv.thread, NULL);
	close(srv.lfd);
	close(srv.stop_fd[0]);
	close(srv.stop_fd[1]);
}

/* One transfer's received bytes. */
struct sink {
	char *b;
	size_t len;
};

static size_t sink_write(char *p, size_t size, size_t n, void *arg)
{
	struct sink *s = arg;

	s->b = realloc(s->b, s->len + size * n);
	memcpy(s->b + s->len, p, size * n);
	s->len += size * n;
	return size * n;
}

static CURL *get(const char *path, struct sink *s, long timeout_ms)
{
	CURL *h = curl_easy_init();
	char url[128];

	snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", srv.port, path);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink_write);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, s);
	curl_easy_setopt(h, CURLOPT_PRIVATE, s);
	if (timeout_ms)
		curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
	return h;
}

static bool body_ok(const struct sink *s, size_t n)
{
	if (s->len != n)
		return false;
	for (size_t i = 0; i < n; i++)
		if (s->b[i] != (char)('a' + i % 26))
			return false;
	return true;
}

/*
 * Drives @multi until @want transfers ended or 30 s passed (a loop that
 * loses its sockets or its timer fails the test rather than hang it).
 * Stores each ended transfer's result in @res (by the sink's index).
 */
static int drive(struct netloop *nl, CURLM *multi, int want, struct sink *sinks,
		 CURLcode *res)
{
	uint64_t end = mono_ns() + 30ull * 1000000000u;
	int ended = 0;

	while (ended < want && mono_ns() < end) {
		CURLMsg *m;
		int left;

		netloop_run(nl, 1000);
		while ((m = curl_multi_info_read(multi, &left))) {
			struct sink *s;

			if (m->msg != CURLMSG_DONE)
				continue;
			curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE,
					  (char **)&s);
			res[s - sinks] = m->data.result;
			curl_multi_remove_handle(multi, m->easy_handle);
			curl_easy_cleanup(m->easy_handle);
			ended++;
		}
	}
	return ended;
}

/* 48 GETs at once, 1 byte to 300 KB, all with their bytes; then 48 more
 * in sequence that reuse the kept connections (no new accept). */
static void test_many_at_once_and_reuse(void)
{
	enum { N = 48 };
	static struct sink sinks[N];
	CURLcode res[N];
	struct netloop nl;
	CURLM *multi = curl_multi_init();
	int accepted;

	CHECK(netloop_init(&nl, multi) == 0);
	curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, (long)N);
	for (int i = 0; i < N; i++) {
		char path[32];

		snprintf(path, sizeof(path), "/%d", i * 6271 + 1);
		memset(&sinks[i], 0, sizeof(sinks[i]));
		res[i] = CURLE_FAILED_INIT;
		curl_multi_add_handle(multi, get(path, &sinks[i], 0));
	}
	CHECK(drive(&nl, multi, N, sinks, res) == N);
	for (int i = 0; i < N; i++) {
		CHECK(res[i] == CURLE_OK);
		CHECK(body_ok(&sinks[i], (size_t)i * 6271 + 1));
		free(sinks[i].b);
	}
	accepted = atomic_load(&srv.accepted);
	CHECK(accepted >= 1 && accepted <= N);
	for (int i = 0; i < N; i++) {
		memset(&sinks[i], 0, sizeof(sinks[i]));
		res[i] = CURLE_FAILED_INIT;
		curl_multi_add_handle(multi, get("/1000", &sinks[i], 0));
		CHECK(drive(&nl, multi, 1, sinks, res) == 1);
		CHECK(res[i] == CURLE_OK && body_ok(&sinks[i], 1000));
		free(sinks[i].b);
	}
	CHECK(atomic_load(&srv.accepted) == accepted);
	curl_multi_cleanup(multi);
	netloop_fini(&nl);
}

/* A server that never answers: curl's timer, not a socket, ends it. */
static void test_timer_ends_a_silent_transfer(void)
{
	struct sink s = {0};
	CURLcode res = CURLE_OK;
	struct netloop nl;
	CURLM *multi = curl_multi_init();

	CHECK(netloop_init(&nl, multi) == 0);
	curl_multi_add_handle(multi, get("/hang", &s, 300));
	/* No socket ever becomes ready: only the timer can end it. */
	CHECK(drive(&nl, multi, 1, &s, &res) == 1);
	CHECK(res == CURLE_OPERATION_TIMEDOUT);
	free(s.b);
	curl_multi_cleanup(multi);
	netloop_fini(&nl);
}

static void *waker(void *arg)
{
	usleep(100000);
	netloop_wake(arg);
	return NULL;
}

/* A wake from another thread ends a wait that nothing else would end;
 * many wakes before the loop looks are one. */
static void test_wake(void)
{
	struct netloop nl;
	CURLM *multi = curl_multi_init();
	pthread_t t;
	uint64_t t0;

	CHECK(netloop_init(&nl, multi) == 0);
	pthread_create(&t, NULL, waker, &nl);
	t0 = mono_ns();
	netloop_run(&nl, 60000);
	/* Not a timing test: without the wake this waits a minute. */
	CHECK(mono_ns() - t0 < 30ull * 1000000000u);
	CHECK(nl.wakes == 1);
	pthread_join(t, NULL);

	for (int i = 0; i < 100; i++)
		netloop_wake(&nl);
	netloop_run(&nl, 60000);
	CHECK(nl.wakes == 2);
	/* Taken: the next run waits its timeout out, seeing nothing. */
	netloop_run(&nl, 10);
	CHECK(nl.wakes == 2);
	curl_multi_cleanup(multi);
	netloop_fini(&nl);
}

int main(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
	server_start();
	test_many_at_once_and_reuse();
	test_timer_ends_a_silent_transfer();
	test_wake();
	server_stop();
	curl_global_cleanup();
	return check_done();
}
