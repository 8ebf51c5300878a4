/*
 * tests/servers/s3proxy/main.c - s3proxy: a delaying, fault-injecting
 * HTTP/1.1 proxy between an S3 client (hintfs, boto3, curl) and the S3
 * server of the tests, the demo and the benchmark (Ceph RGW). doc/design.md
 * section 4.
 *
 * Owns the command line, the listening socket and the signals: SIGTERM
 * and SIGINT are blocked in every thread and read from a signalfd by the
 * accept loop, so a stop happens at one place, between two accepts, and
 * ends with a summary on stderr and exit status 0. Run with --help for
 * the options and the log format.
 *
 * Invariant: stdout carries exactly one line, "port=N", written once the
 * socket listens, so a parent can read it and connect at once.
 */
#include "proxy.h"
#include "http.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

/* 1,024: the benchmark opens ~400 connections at once. */
#define LISTEN_BACKLOG 1024

/* clang-format off: the help text is laid out as printed. */
static void usage(FILE *f)
{
	fputs(
	    "usage: s3proxy --upstream HOST:PORT [options]\n"
	    "\n"
	    "A delaying, fault-injecting HTTP/1.1 proxy for S3 tests. Prints\n"
	    "'port=N' on stdout once listening; SIGTERM or SIGINT: exit 0 with "
	    "a\n"
	    "summary line on stderr.\n"
	    "\n"
	    "  --listen HOST:PORT    where to listen (default 127.0.0.1:0, any "
	    "port)\n"
	    "  --upstream HOST:PORT  the S3 server (http://HOST:PORT also "
	    "accepted)\n"
	    "  --rtt-ms MS           extra round trip per request, half each "
	    "way (0)\n"
	    "  --seed N              seed of the fault draws (default: from "
	    "the clock)\n"
	    "  --slowdown PCT        answer 503 SlowDown (upstream not "
	    "contacted)\n"
	    "  --error500 PCT        answer 500 InternalError (upstream not "
	    "contacted)\n"
	    "  --reset PCT           reset the client connection (RST), before "
	    "the\n"
	    "                        response or part-way into its body\n"
	    "  --truncate PCT        send half the body, then close\n"
	    "  --stall PCT           send half the body, stay silent "
	    "--stall-ms, close\n"
	    "  --stall-ms MS         (default 10000)\n"
	    "  --trickle PCT         send the body one byte every "
	    "--trickle-ms\n"
	    "  --trickle-ms MS       (default 500)\n"
	    "  --slow PCT            send the whole response --slow-ms late\n"
	    "  --slow-ms MS          (default 1000)\n"
	    "  --fail-key STR        every request whose path (raw or "
	    "%-decoded)\n"
	    "                        contains STR fails with --fail-status; "
	    "repeatable\n"
	    "  --fail-status CODE    403, 404, 500 (default) or 503\n"
	    "  --faults-on-list      let the rates hit listings too\n"
	    "  --log FILE            one line per completed request (see "
	    "below)\n"
	    "\n"
	    "Rates are percentages of the eligible requests: GETs of objects "
	    "(not\n"
	    "listings, unless --faults-on-list). Each draws one number: the "
	    "rates\n"
	    "stack, so they may sum to at most 100.\n"
	    "\n"
	    "Log line, tab-separated: time (ms since start, at completion), "
	    "method,\n"
	    "target (path and query as sent), Range or '-', outcome (the "
	    "status code\n"
	    "sent, or reset, truncated, stalled, aborted), body bytes sent to "
	    "the\n"
	    "client, connection number, duration (ms from request head to "
	    "outcome).\n",
	    f);
}
/* clang-format on */

/* Parses "HOST:PORT", "[V6]:PORT" or "http://HOST:PORT[/]" into @ss. */
static int parse_addr(const char *s, bool passive, struct sockaddr_storage *ss,
		      socklen_t *len)
{
	char host[256];
	const char *colon, *port, *h = s;
	size_t hl;
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res;
	int r;

	if (strncmp(h, "http://", 7) == 0)
		h += 7;
	if (*h == '[') {
		const char *rb = strchr(h, ']');

		if (!rb || rb[1] != ':')
			return -EINVAL;
		colon = rb + 1;
		h++;
		hl = (size_t)(rb - h);
	} else {
		colon = strrchr(h, ':');
		if (!colon)
			return -EINVAL;
		hl = (size_t)(colon - h);
	}
	port = colon + 1;
	if (hl == 0 || hl >= sizeof(host) || *port == '\0')
		return -EINVAL;
	memcpy(host, h, hl);
	host[hl] = '\0';
	char portbuf[16];
	size_t pl = strcspn(port, "/");

	if (pl == 0 || pl >= sizeof(portbuf) ||
	    strspn(port, "0123456789") != pl)
		return -EINVAL;
	memcpy(portbuf, port, pl);
	portbuf[pl] = '\0';
	hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
	r = getaddrinfo(host, portbuf, &hints, &res);
	if (r != 0)
		return -EHOSTUNREACH;
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	*len = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

static int parse_double(const char *s, double lo, double hi, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= lo && v <= hi))
		return -EINVAL;
	*out = v;
	return 0;
}

enum {
	OPT_LISTEN = 256,
	OPT_UPSTREAM,
	OPT_RTT,
	OPT_SEED,
	OPT_SLOWDOWN,
	OPT_ERROR500,
	OPT_RESET,
	OPT_TRUNCATE,
	OPT_STALL,
	OPT_STALL_MS,
	OPT_TRICKLE,
	OPT_TRICKLE_MS,
	OPT_SLOW,
	OPT_SLOW_MS,
	OPT_FAIL_KEY,
	OPT_FAIL_STATUS,
	OPT_FAULTS_ON_LIST,
	OPT_LOG,
	OPT_HELP,
};

static const struct option long_opts[] = {
    {"listen", required_argument, NULL, OPT_LISTEN},
    {"upstream", required_argument, NULL, OPT_UPSTREAM},
    {"rtt-ms", required_argument, NULL, OPT_RTT},
    {"seed", required_argument, NULL, OPT_SEED},
    {"slowdown", required_argument, NULL, OPT_SLOWDOWN},
    {"error500", required_argument, NULL, OPT_ERROR500},
    {"reset", required_argument, NULL, OPT_RESET},
    {"truncate", required_argument, NULL, OPT_TRUNCATE},
    {"stall", required_argument, NULL, OPT_STALL},
    {"stall-ms", required_argument, NULL, OPT_STALL_MS},
    {"trickle", required_argument, NULL, OPT_TRICKLE},
    {"trickle-ms", required_argument, NULL, OPT_TRICKLE_MS},
    {"slow", required_argument, NULL, OPT_SLOW},
    {"slow-ms", required_argument, NULL, OPT_SLOW_MS},
    {"fail-key", required_argument, NULL, OPT_FAIL_KEY},
    {"fail-status", required_argument, NULL, OPT_FAIL_STATUS},
    {"faults-on-list", no_argument, NULL, OPT_FAULTS_ON_LIST},
    {"log", required_argument, NULL, OPT_LOG},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

/* Fills @cfg from argv. Returns 0, 1 for --help, or -EINVAL after
 * printing what is wrong. */
static int parse_args(int argc, char **argv, struct proxy_config *cfg)
{
	const char *listen_s = "127.0.0.1:0", *up_s = NULL;
	bool seeded = false;
	double v, sum = 0;
	int opt;

	memset(cfg, 0, sizeof(*cfg));
	cfg->stall_ns = 10000 * 1000000ull;
	cfg->trickle_ns = 500 * 1000000ull;
	cfg->slow_ns = 1000 * 1000000ull;
	cfg->fail_status = 500;
	cfg->fail_keys = calloc((size_t)argc, sizeof(*cfg->fail_keys));
	if (!cfg->fail_keys)
		return -ENOMEM;

	while ((opt = getopt_long(argc, argv, "", long_opts, NULL)) != -1) {
		enum fault f = FAULT_NONE;

		switch (opt) {
		case OPT_LISTEN:
			listen_s = optarg;
			break;
		case OPT_UPSTREAM:
			up_s = optarg;
			break;
		case OPT_RTT:
			if (parse_double(optarg, 0, 600000, &v) < 0)
				goto bad;
			cfg->half_rtt_ns = (uint64_t)(v * 1e6 / 2);
			break;
		case OPT_SEED: {
			char *end;

			errno = 0;
			cfg->seed = strtoull(optarg, &end, 0);
			if (errno || end == optarg || *end)
				goto bad;
			seeded = true;
			break;
		}
		case OPT_SLOWDOWN:
			f = FAULT_SLOWDOWN;
			break;
		case OPT_ERROR500:
			f = FAULT_ERROR500;
			break;
		case OPT_RESET:
			f = FAULT_RESET;
			break;
		case OPT_TRUNCATE:
			f = FAULT_TRUNCATE;
			break;
		case OPT_STALL:
			f = FAULT_STALL;
			break;
		case OPT_STALL_MS:
			if (parse_double(optarg, 0, 3600000, &v) < 0)
				goto bad;
			cfg->stall_ns = (uint64_t)(v * 1e6);
			break;
		case OPT_TRICKLE:
			f = FAULT_TRICKLE;
			break;
		case OPT_TRICKLE_MS:
			if (parse_double(optarg, 1, 3600000, &v) < 0)
				goto bad;
			cfg->trickle_ns = (uint64_t)(v * 1e6);
			break;
		case OPT_SLOW:
			f = FAULT_SLOW;
			break;
		case OPT_SLOW_MS:
			if (parse_double(optarg, 0, 3600000, &v) < 0)
				goto bad;
			cfg->slow_ns = (uint64_t)(v * 1e6);
			break;
		case OPT_FAIL_KEY:
			if (!*optarg)
				goto bad;
			cfg->fail_keys[cfg->n_fail_keys++] = optarg;
			break;
		case OPT_FAIL_STATUS:
			if (parse_double(optarg, 100, 599, &v) < 0 ||
			    (v != 403 && v != 404 && v != 500 && v != 503))
				goto bad;
			cfg->fail_status = (int)v;
			break;
		case OPT_FAULTS_ON_LIST:
			cfg->faults_on_list = true;
			break;
		case OPT_LOG:
			cfg->log_path = optarg;
			break;
		case OPT_HELP:
			usage(stdout);
			return 1;
		default:
			usage(stderr);
			return -EINVAL;
		}
		if (f != FAULT_NONE) {
			if (parse_double(optarg, 0, 100, &v) < 0)
				goto bad;
			cfg->pct[f] = v;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "s3proxy: unexpected argument '%s'\n",
			argv[optind]);
		return -EINVAL;
	}
	for (int f = 0; f < N_FAULTS; f++)
		sum += cfg->pct[f];
	if (sum > 100.0) {
		fprintf(stderr,
			"s3proxy: the fault rates sum to %g%% > 100%%\n", sum);
		return -EINVAL;
	}
	if (!up_s) {
		fprintf(stderr, "s3proxy: --upstream is required\n");
		return -EINVAL;
	}
	if (parse_addr(listen_s, true, &cfg->listen_addr, &cfg->listen_len) <
	    0) {
		fprintf(stderr, "s3proxy: bad --listen address '%s'\n",
			listen_s);
		return -EINVAL;
	}
	if (parse_addr(up_s, false, &cfg->up_addr, &cfg->up_len) < 0) {
		fprintf(stderr, "s3proxy: bad --upstream address '%s'\n", up_s);
		return -EINVAL;
	}
	snprintf(cfg->up_name, sizeof(cfg->up_name), "%s", up_s);
	if (!seeded)
		cfg->seed = now_ns() ^ ((uint64_t)getpid() << 32);
	return 0;
bad:
	fprintf(stderr, "s3proxy: bad value '%s' for --%s\n", optarg,
		long_opts[opt - OPT_LISTEN].name);
	return -EINVAL;
}

/* Accepts connections until SIGTERM or SIGINT arrives on @sig_fd. */
static void accept_loop(struct proxy *p, int lfd, int sig_fd)
{
	for (;;) {
		struct pollfd pfd[2] = {
		    {.fd = lfd, .events = POLLIN},
		    {.fd = sig_fd, .events = POLLIN},
		};
		int fd;

		if (poll(pfd, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			perror("s3proxy: poll");
			return;
		}
		if (pfd[1].revents)
			return;
		if (!(pfd[0].revents & POLLIN))
			continue;
		fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			/* EMFILE and friends: wait for a connection to end
			 * rather than spin. */
			if (errno != EINTR && errno != EAGAIN &&
			    errno != ECONNABORTED)
				usleep(10000);
			continue;
		}
		proxy_spawn_conn(p, fd);
	}
}

int main(int argc, char **argv)
{
	static struct proxy proxy;
	struct proxy *p = &proxy;
	int r, lfd, sig_fd, port = 0;
	unsigned left;

	r = parse_args(argc, argv, &p->cfg);
	if (r != 0)
		return r > 0 ? 0 : 2;
	r = proxy_init(p);
	if (r < 0) {
		fprintf(stderr, "s3proxy: --log %s: %s\n", p->cfg.log_path,
			strerror(-r));
		return 1;
	}

	/* Before any thread exists, so only the signalfd sees them. */
	sig_fd = http_stop_signals();
	if (sig_fd < 0) {
		fprintf(stderr, "s3proxy: signalfd: %s\n", strerror(-sig_fd));
		return 1;
	}

	http_raise_fd_limit();
	lfd = http_listen((const struct sockaddr *)&p->cfg.listen_addr,
			  p->cfg.listen_len, LISTEN_BACKLOG, &port);
	if (lfd < 0) {
		fprintf(stderr, "s3proxy: cannot listen: %s\n", strerror(-lfd));
		return 1;
	}
	printf("port=%d\n", port);
	fflush(stdout);
	fprintf(stderr,
		"s3proxy: listening on port %d, upstream %s, rtt %.3f ms, "
		"seed %" PRIu64 ", faults %%: slowdown %g error500 %g reset %g "
		"truncate %g stall %g (%.0f ms) trickle %g (%.0f ms) "
		"slow %g (%.0f ms), %d fail-key(s) -> %d%s\n",
		port, p->cfg.up_name, (double)p->cfg.half_rtt_ns * 2 / 1e6,
		p->cfg.seed, p->cfg.pct[FAULT_SLOWDOWN],
		p->cfg.pct[FAULT_ERROR500], p->cfg.pct[FAULT_RESET],
		p->cfg.pct[FAULT_TRUNCATE], p->cfg.pct[FAULT_STALL],
		(double)p->cfg.stall_ns / 1e6, p->cfg.pct[FAULT_TRICKLE],
		(double)p->cfg.trickle_ns / 1e6, p->cfg.pct[FAULT_SLOW],
		(double)p->cfg.slow_ns / 1e6, p->cfg.n_fail_keys,
		p->cfg.fail_status,
		p->cfg.faults_on_list ? ", listings too" : "");

	accept_loop(p, lfd, sig_fd);
	close(lfd);
	left = proxy_stop_conns(p);
	proxy_print_summary(p, left);
	proxy_fini(p, left);
	if (left == 0)
		free(p->cfg.fail_keys);
	close(sig_fd);
	return 0;
}
