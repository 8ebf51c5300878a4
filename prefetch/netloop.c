/*
 * prefetch/netloop.c - curl's multi handle over epoll (see netloop.h).
 *
 * curl tells us through two callbacks what to watch: the socket callback
 * adds, changes or removes a socket's interest in the epoll set, the timer
 * callback sets the one time curl wants to be called regardless of
 * sockets. netloop_run() waits for whichever comes first and hands each
 * ready socket to curl_multi_socket_action() with the readiness epoll
 * reported, so curl need not poll it again.
 *
 * Invariant: a socket is in the epoll set exactly while curl watches it
 * (from its first callback until CURL_POLL_REMOVE); curl_multi_assign()
 * marks the ones we added, so the first callback is an ADD and later ones
 * are a MOD.
 */
#include "prefetch/netloop.h"
#include "common/clock.h"
#include "common/log.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

/*
 * Events taken per epoll_wait(). Above the default in-flight limit, so
 * that one wait usually takes every ready transfer; more wait for the
 * next call, which does not sleep while they are ready.
 */
#define NETLOOP_EVENTS 128

/* The mark curl_multi_assign() leaves on a socket in the epoll set. */
static char in_set;

static int on_socket(CURL *easy, curl_socket_t s, int what, void *arg,
		     void *socketp)
{
	struct netloop *nl = arg;
	struct epoll_event ev = {.data.fd = s};

	(void)easy;
	if (what == CURL_POLL_REMOVE) {
		/* curl may have closed it already: then the kernel has
		 * dropped it from the set, and ENOENT/EBADF are expected. */
		if (socketp)
			epoll_ctl(nl->epfd, EPOLL_CTL_DEL, s, NULL);
		curl_multi_assign(nl->multi, s, NULL);
		return 0;
	}
	if (what & CURL_POLL_IN)
		ev.events |= EPOLLIN;
	if (what & CURL_POLL_OUT)
		ev.events |= EPOLLOUT;
	if (socketp) {
		if (!epoll_ctl(nl->epfd, EPOLL_CTL_MOD, s, &ev))
			return 0;
		if (errno != ENOENT)
			goto fail;
		/* Closed and reopened under the same number. */
	}
	if (epoll_ctl(nl->epfd, EPOLL_CTL_ADD, s, &ev) &&
	    (errno != EEXIST || epoll_ctl(nl->epfd, EPOLL_CTL_MOD, s, &ev)))
		goto fail;
	curl_multi_assign(nl->multi, s, &in_set);
	return 0;
fail:
	/* Cannot happen short of the kernel's memory: curl fails the
	 * transfer, and the engine's retry policy takes it from there. */
	log_warn("engine: cannot watch a connection: %s", strerror(errno));
	return -1;
}

static int on_timer(CURLM *multi, long timeout_ms, void *arg)
{
	struct netloop *nl = arg;

	(void)multi;
	nl->timer_set = timeout_ms >= 0;
	if (nl->timer_set)
		nl->timer_ns = mono_ns() + (uint64_t)timeout_ms * 1000000u;
	return 0;
}

int netloop_init(struct netloop *nl, CURLM *multi)
{
	struct epoll_event ev = {.events = EPOLLIN};

	*nl = (struct netloop){.multi = multi, .epfd = -1, .evfd = -1};
	nl->epfd = epoll_create1(EPOLL_CLOEXEC);
	nl->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	ev.data.fd = nl->evfd;
	if (nl->epfd < 0 || nl->evfd < 0 ||
	    epoll_ctl(nl->epfd, EPOLL_CTL_ADD, nl->evfd, &ev)) {
		int rc = -errno;

		netloop_fini(nl);
		return rc;
	}
	curl_multi_setopt(multi, CURLMOPT_SOCKETFUNCTION, on_socket);
	curl_multi_setopt(multi, CURLMOPT_SOCKETDATA, nl);
	curl_multi_setopt(multi, CURLMOPT_TIMERFUNCTION, on_timer);
	curl_multi_setopt(multi, CURLMOPT_TIMERDATA, nl);
	return 0;
}

void netloop_fini(struct netloop *nl)
{
	if (nl->epfd >= 0)
		close(nl->epfd);
	if (nl->evfd >= 0)
		close(nl->evfd);
	nl->epfd = nl->evfd = -1;
}

void netloop_wake(struct netloop *nl)
{
	uint64_t one = 1;

	/* Written once until the loop takes it: a burst of opens from
	 * sixteen readers is one wake-up, not sixteen. */
	if (!atomic_exchange(&nl->wake_pending, true))
		while (write(nl->evfd, &one, sizeof(one)) < 0 && errno == EINTR)
			;
}

/* Milliseconds until curl's timer, at most @cap (-1: none, then @cap). */
static int timer_ms(const struct netloop *nl, int cap)
{
	uint64_t now = mono_ns(), ms;

	if (!nl->timer_set)
		return cap;
	if (nl->timer_ns <= now)
		return 0;
	/* Rounded up: waking a little early only costs another wait. */
	ms = (nl->timer_ns - now + 999999u) / 1000000u;
	return cap >= 0 && ms > (uint64_t)cap ? cap : (int)ms;
}

uint64_t netloop_run(struct netloop *nl, int timeout_ms)
{
	struct epoll_event evs[NETLOOP_EVENTS];
	uint64_t t0 = mono_ns(), waited;
	int n, running, wait_ms = timer_ms(nl, timeout_ms);

	n = epoll_wait(nl->epfd, evs, NETLOOP_EVENTS, wait_ms);
	waited = mono_ns() - t0;
	if (n == 0 && wait_ms > 0 && wait_ms == timeout_ms)
		nl->timeouts++;
	for (int i = 0; i < n; i++) {
		int fd = evs[i].data.fd, bits = 0;

		if (fd == nl->evfd) {
			uint64_t v;

			/* Read before the flag is cleared: a wake that comes
			 * after the clear writes again; one before it is seen
			 * by the caller's look at its state after we return. */
			while (read(nl->evfd, &v, sizeof(v)) < 0 &&
			       errno == EINTR)
				;
			atomic_store(&nl->wake_pending, false);
			nl->wakes++;
			continue;
		}
		if (evs[i].events & (EPOLLIN | EPOLLHUP))
			bits |= CURL_CSELECT_IN;
		if (evs[i].events & EPOLLOUT)
			bits |= CURL_CSELECT_OUT;
		if (evs[i].events & EPOLLERR)
			bits |= CURL_CSELECT_ERR;
		curl_multi_socket_action(nl->multi, fd, bits, &running);
	}
	if (nl->timer_set && nl->timer_ns <= mono_ns()) {
		nl->timer_set = false;
		curl_multi_socket_action(nl->multi, CURL_SOCKET_TIMEOUT, 0,
					 &running);
	}
	return waited;
}
