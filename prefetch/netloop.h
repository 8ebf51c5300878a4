/**
 * prefetch/netloop.h - a network thread's event loop: curl's multi
 * handle driven through its socket interface over one epoll set (private
 * to prefetch: the curl source and its unit test; the engine links no
 * curl). Includers: prefetch/netloop.c, prefetch/source_curl.c.
 *
 * Why not curl_multi_perform() + curl_multi_poll(): each perform call
 * looks at every transfer, and libcurl 7.88 polls each one's socket (a
 * poll(2) per transfer per wake-up) to learn whether it is readable. With
 * 64 GETs in flight that measured 64 poll calls per object fetched. Here
 * the kernel says which sockets are ready and curl runs only their
 * transfers (curl_multi_socket_action()), with curl's own timer for
 * connects, timeouts and transfers that are ready without a socket.
 *
 * Wake-ups from other threads go through an eventfd and are coalesced:
 * however many threads call netloop_wake() before the loop looks, it
 * wakes once.
 *
 * Threads: netloop_wake() from any thread; everything else, and every
 * call on the multi handle, from the one thread that runs the loop (after
 * netloop_init(), before netloop_fini()).
 */
#ifndef HINTFS_PREFETCH_NETLOOP_H
#define HINTFS_PREFETCH_NETLOOP_H

#include <curl/curl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/** Caller-owned storage; fields are private to netloop.c. */
struct netloop {
	CURLM *multi;		  /**< not owned */
	int epfd;		  /**< the epoll set: curl's sockets and evfd */
	int evfd;		  /**< eventfd of netloop_wake() */
	atomic_bool wake_pending; /**< evfd written, loop not yet woken */
	bool timer_set;		  /**< curl asked for a call at timer_ns */
	uint64_t timer_ns;	  /**< mono_ns() due time of curl's timer */
	uint64_t wakes;		  /**< wake-ups taken from evfd */
	uint64_t timeouts;	  /**< netloop_run() waits that ran out the
				       caller's whole timeout: nothing woke them */
};

/**
 * Readies @nl to drive @multi (installs curl's socket and timer
 * callbacks on it). Returns 0, or -errno when epoll or eventfd fail.
 */
int netloop_init(struct netloop *nl, CURLM *multi);

/**
 * Closes the epoll set and the eventfd. Call after curl_multi_cleanup()
 * (which still tells the socket callback about the sockets it closes).
 */
void netloop_fini(struct netloop *nl);

/** Makes the loop's current or next netloop_run() return soon. Any
 *  thread; async-signal-safe. */
void netloop_wake(struct netloop *nl);

/**
 * Waits up to @timeout_ms (0: only looks; less when curl's timer is due
 * sooner) for ready sockets, curl's timer or a wake-up, then lets curl
 * run the transfers that can progress. Finished transfers are then in
 * curl_multi_info_read(). Returns the nanoseconds spent waiting (the rest
 * of the call was work).
 */
uint64_t netloop_run(struct netloop *nl, int timeout_ms);

#endif /* HINTFS_PREFETCH_NETLOOP_H */
