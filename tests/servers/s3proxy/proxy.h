/*
 * tests/servers/s3proxy/proxy.h - the proxy proper: connections, the
 * delay, the faults, the request log. Private to s3proxy; main.c fills a
 * config from the command line and feeds accepted sockets in.
 */
#ifndef S3PROXY_PROXY_H
#define S3PROXY_PROXY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

enum fault {
	FAULT_NONE,
	FAULT_SLOWDOWN, /* 503 SlowDown, upstream not contacted */
	FAULT_ERROR500, /* 500 InternalError, upstream not contacted */
	FAULT_RESET,	/* RST before or part-way into the response */
	FAULT_TRUNCATE, /* half the body, then FIN */
	FAULT_STALL,	/* half the body, silence for stall_ns, then FIN */
	FAULT_TRICKLE,	/* the whole body, one byte per trickle_ns */
	FAULT_SLOW,	/* the whole response, slow_ns late */
	FAULT_FAILKEY,	/* a --fail-key matched: fail_status, always */
	N_FAULTS
};

/* What the command line asked for; read-only once threads run. */
struct proxy_config {
	struct sockaddr_storage listen_addr;
	socklen_t listen_len;
	struct sockaddr_storage up_addr;
	socklen_t up_len;
	char up_name[300];    /* --upstream as given, for messages */
	uint64_t half_rtt_ns; /* delay added in each direction */
	uint64_t seed;
	double pct[N_FAULTS]; /* rate of each drawn fault, in percent */
	uint64_t stall_ns;
	uint64_t trickle_ns;	/* between two bytes of a trickled body */
	uint64_t slow_ns;	/* added before a slow response's head */
	const char **fail_keys; /* substrings of failing paths; not owned */
	int n_fail_keys;
	int fail_status;      /* 403, 404, 500 or 503 */
	bool faults_on_list;  /* rates apply to listings too */
	const char *log_path; /* NULL: no log */
};

/* Totals for the summary line at exit; updated with relaxed atomics. */
struct proxy_stats {
	atomic_uint_fast64_t conns;
	atomic_uint_fast64_t requests;
	atomic_uint_fast64_t body_bytes;  /* sent to clients */
	atomic_uint_fast64_t by_class[6]; /* [n]: nxx responses completed */
	atomic_uint_fast64_t faults[N_FAULTS];
	atomic_uint_fast64_t aborted; /* cut by a peer, not by a fault */
	atomic_uint_fast64_t upstream_errors;
	atomic_uint_fast64_t reconnects; /* stale keep-alive replaced */
};

struct conn;

/* Caller-owned (one per process, in main). */
struct proxy {
	struct proxy_config cfg;
	struct proxy_stats st;
	uint64_t t0_ns;			/* log times are relative to this */
	atomic_uint_fast64_t fault_seq; /* index of the next eligible request */
	int log_fd;			/* -1 without a log */
	pthread_mutex_t log_lock;
	/* Registry of live connections, so a stop can shut their sockets. */
	pthread_mutex_t lock;
	pthread_cond_t idle; /* broadcast when n_conns drops to 0 */
	struct conn *conns;
	unsigned n_conns;
	uint64_t n_spawned; /* main thread only: numbers conns */
	bool stopping;
};

/**
 * Prepares @p, whose cfg is filled in: opens the log, starts the clock.
 * Returns 0 or -errno. Main thread, before any other call.
 */
int proxy_init(struct proxy *p);

/**
 * Takes over the accepted client socket @fd (closed on failure): starts
 * its connection thread. Returns 0 or -errno. Main thread.
 */
int proxy_spawn_conn(struct proxy *p, int fd);

/**
 * Shuts the sockets of every connection, which ends their threads, and
 * waits a few seconds for them. Returns how many still run. Main thread.
 */
unsigned proxy_stop_conns(struct proxy *p);

/** Prints the totals as one line on stderr. Any thread. */
void proxy_print_summary(struct proxy *p, unsigned unfinished);

/**
 * Releases what proxy_init() took, unless @unfinished connection threads
 * may still use it. Main thread, last.
 */
void proxy_fini(struct proxy *p, unsigned unfinished);

#endif /* S3PROXY_PROXY_H */
