/*
 * tests/unit/test_common.c - the shared helpers of common/: the growable
 * buffer, the monotonic clock, mkdir -p, reading a whole file, a
 * thread's process.
 */
#include "common/buf.h"
#include "common/clock.h"
#include "common/fileio.h"
#include "common/proc.h"
#include "common/retry.h"
#include "check.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void test_buf(void)
{
	struct buf b = {0};
	char big[5000];

	/* Empty: nothing allocated, then a C string at every step. */
	CHECK(b.data == NULL && b.len == 0);
	CHECK(buf_append(&b, NULL, 0) == 0);
	CHECK(b.data && b.len == 0 && b.data[0] == '\0');
	/* Whatever the spare bytes hold, an append ends in a NUL. */
	CHECK(buf_reserve(&b, 16) == 0);
	memset(b.data, 'z', b.cap);
	CHECK(buf_append(&b, "abc", 3) == 0);
	CHECK(b.len == 3 && !strcmp(b.data, "abc"));
	/* Bytes, not strings: an embedded NUL is kept. */
	CHECK(buf_append(&b, "d\0e", 3) == 0);
	CHECK(b.len == 6 && !memcmp(b.data, "abcd\0e", 7));
	/* Growth keeps what was there. */
	memset(big, 'x', sizeof(big));
	for (int i = 0; i < 100; i++)
		CHECK(buf_append(&b, big, sizeof(big)) == 0);
	CHECK(b.len == 6 + 100 * sizeof(big));
	CHECK(b.cap > b.len && b.data[b.len] == '\0');
	CHECK(!memcmp(b.data, "abcd\0e", 6) && b.data[6] == 'x' &&
	      b.data[b.len - 1] == 'x');
	/* Reserve makes room without changing len. */
	size_t len = b.len;
	CHECK(buf_reserve(&b, 1 << 20) == 0);
	CHECK(b.len == len && b.cap >= len + (1 << 20) + 1);
	/* An impossible size fails and changes nothing. */
	char *data = b.data;
	CHECK(buf_reserve(&b, (size_t)-1) == -ENOMEM);
	CHECK(b.data == data && b.len == len);
	buf_fini(&b);
	CHECK(b.data == NULL && b.len == 0 && b.cap == 0);

	/* A secret buffer grows by copies (the old one wiped) and keeps
	 * every byte, and stays secret once emptied. */
	b.secret = true;
	for (int i = 0; i < 50; i++)
		CHECK(buf_append(&b, big, sizeof(big)) == 0);
	CHECK(buf_append(&b, "key", 3) == 0);
	CHECK(b.len == 50 * sizeof(big) + 3 && b.data[0] == 'x' &&
	      b.data[b.len - 4] == 'x' && !strcmp(b.data + b.len - 3, "key"));
	buf_fini(&b);
	CHECK(b.data == NULL && b.len == 0 && b.secret);
}

static void test_clock(void)
{
	uint64_t a = mono_ns(), ms = mono_ms();
	struct timespec d = {0, 20 * 1000000};

	nanosleep(&d, NULL);
	uint64_t b = mono_ns();
	CHECK(b >= a + 20 * 1000000ull);
	CHECK(mono_ms() >= ms + 20);
	/* The two agree: ms is ns / 10^6 of the same clock. */
	CHECK(mono_ms() >= b / 1000000u);
}

static void test_mkdir_p(void)
{
	char tmpl[] = "/tmp/hintfs-test-common-XXXXXX";
	char path[256], file[256];
	struct stat st;
	char *dir = mkdtemp(tmpl);

	CHECK(dir != NULL);
	if (!dir)
		return;
	snprintf(path, sizeof(path), "%s/a/b/c", dir);
	CHECK(mkdir_p(path, 0700) == 0);
	CHECK(stat(path, &st) == 0 && S_ISDIR(st.st_mode) &&
	      (st.st_mode & 0777) == 0700);
	/* Again: an existing directory is fine; so is a trailing '/'. */
	CHECK(mkdir_p(path, 0700) == 0);
	snprintf(path, sizeof(path), "%s/a/b/c/", dir);
	CHECK(mkdir_p(path, 0700) == 0);
	/* A file in the way: the parent's error says why. */
	snprintf(file, sizeof(file), "%s/f", dir);
	int fd = open(file, O_CREAT | O_WRONLY, 0600);
	CHECK(fd >= 0);
	close(fd);
	snprintf(path, sizeof(path), "%s/f/g/h", dir);
	CHECK(mkdir_p(path, 0700) == -ENOTDIR);

	/* A parent that cannot be made: its error, not the final ENOENT
	 * (as root every mkdir is allowed, so nothing to see). */
	snprintf(path, sizeof(path), "%s/ro", dir);
	CHECK(mkdir(path, 0500) == 0);
	snprintf(path, sizeof(path), "%s/ro/x/y", dir);
	if (geteuid() != 0)
		CHECK(mkdir_p(path, 0700) == -EACCES);
	snprintf(path, sizeof(path), "%s/ro", dir);
	rmdir(path);

	/* read_file_all: the bytes and a NUL; -EFBIG past the limit. */
	char *text;
	size_t len;

	fd = open(file, O_WRONLY | O_TRUNC);
	int wrote = 0;
	for (int i = 0; i < 20000; i++)
		wrote += write(fd, "0123456789", 10) == 10;
	CHECK(wrote == 20000);
	close(fd);
	CHECK(read_file_all(file, 1 << 20, &text, &len) == 0);
	CHECK(len == 200000 && text[len] == '\0' && text[199999] == '9' &&
	      !memcmp(text, "0123456789", 10));
	free(text);
	CHECK(read_file_all(file, 199999, &text, &len) == -EFBIG);
	CHECK(read_file_all(file, 200000, &text, &len) == 0);
	free(text);

	unlink(file);
	snprintf(path, sizeof(path), "%s/a/b/c", dir);
	rmdir(path);
	snprintf(path, sizeof(path), "%s/a/b", dir);
	rmdir(path);
	snprintf(path, sizeof(path), "%s/a", dir);
	rmdir(path);
	rmdir(dir);
}

static void test_retry(void)
{
	struct retry_policy p;
	unsigned seed = 1;
	unsigned lo[20], hi[20];

	retry_policy_init(&p, 0, 0);
	CHECK(p.max_attempts == RETRY_ATTEMPTS_DEFAULT &&
	      p.max_time_ms == RETRY_TIME_DEFAULT_MS);
	retry_policy_init(&p, 3, 1500);
	CHECK(p.max_attempts == 3 && p.max_time_ms == 1500);

	/* Give up when the attempts or the time are spent, not before. */
	CHECK(!retry_give_up(&p, 1, 0));
	CHECK(!retry_give_up(&p, 2, 1499));
	CHECK(retry_give_up(&p, 3, 0));
	CHECK(retry_give_up(&p, 1, 1500));

	/* Delays: within [c/2, c], c = min(2 s, 50 ms * 2^failed), and
	 * jittered (not one value) at each step. */
	for (int f = 1; f < 20; f++) {
		lo[f] = ~0u;
		hi[f] = 0;
		for (int i = 0; i < 2000; i++) {
			unsigned d = retry_delay_ms(&p, f, &seed);

			lo[f] = d < lo[f] ? d : lo[f];
			hi[f] = d > hi[f] ? d : hi[f];
		}
	}
	CHECK(lo[1] >= 50 && hi[1] <= 100 && lo[1] < hi[1]);
	CHECK(lo[2] >= 100 && hi[2] <= 200 && lo[2] < hi[2]);
	CHECK(lo[5] >= 800 && hi[5] <= 1600);
	CHECK(lo[6] >= 1000 && hi[6] <= 2000 && lo[6] < hi[6]);
	CHECK(lo[19] >= 1000 && hi[19] <= 2000);
	/* Backoff backs off: each step's shortest wait is no shorter. */
	for (int f = 2; f < 20; f++)
		CHECK(lo[f] >= lo[f - 1] / 2 && hi[f] >= hi[f - 1]);
	/* Out of range asks stay in range. */
	CHECK(retry_delay_ms(&p, 0, &seed) <= 100);
	CHECK(retry_delay_ms(&p, 1 << 30, &seed) <= 2000);
}

static void *tgid_of_self(void *arg)
{
	*(pid_t *)arg = proc_tgid(gettid());
	return NULL;
}

/* A thread's process: the same for every thread of ours; 0 unknown. */
static void test_proc_tgid(void)
{
	pthread_t th;
	pid_t got = 0;

	CHECK(proc_tgid(getpid()) == getpid());
	CHECK(pthread_create(&th, NULL, tgid_of_self, &got) == 0);
	pthread_join(th, NULL);
	CHECK(got == getpid());
	CHECK(proc_tgid(0) == 0 && proc_tgid(-1) == 0);
	/* Beyond pid_max (at most 2^22): no such thread. */
	CHECK(proc_tgid(1 << 23) == 0);
}

int main(void)
{
	test_proc_tgid();
	test_retry();
	test_buf();
	test_clock();
	test_mkdir_p();
	return check_done();
}
