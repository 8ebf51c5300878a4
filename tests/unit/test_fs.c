/*
 * tests/unit/test_fs.c - the fs core (fs/fs.h) without a mount: the real
 * namespace, engine and cache over an in-memory S3 (fake_s3.c). What a
 * reader of the mount would see: names and sizes, bytes equal, errno of a
 * failed read, the hint followed, errors counted by kind in the stats.
 */
#include "fake_s3.h"
#include "fs_stats.h"
#include "fs/fs.h"
#include "fs/fs_internal.h"
#include "prefetch/engine_internal.h"
#include "json.h"
#include "check.h"
#include "common/test_hook.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static char cache_dir[] = "/tmp/hintfs-test-fs-XXXXXX";

static void body_of(const char *key, char *buf, size_t len)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = (char)(key[i % strlen(key)] + i / 7);
}

static void put(const char *key, size_t len)
{
	char *b = malloc(len ? len : 1);

	body_of(key, b, len);
	CHECK(fake_s3_put(key, b, len) == 0);
	free(b);
}

static struct fs *mount_fs(int attempts)
{
	struct fs_config cfg = {
	    .s3 = {.bucket = "b",
		   .endpoint = "http://127.0.0.1:9",
		   .region = "us-east-1",
		   .path_style = true,
		   .no_sign = true,
		   .max_attempts = attempts},
	    .prefix = "ds/",
	    .mountpoint = "/mnt/ds",
	    .uid = 1000,
	    .gid = 1000,
	    .cache_dir = cache_dir,
	    .cache_size = 64ull << 20,
	};
	struct fs *fs = NULL;
	char err[512] = "";
	int rc = fs_create(&cfg, &fs, err, sizeof(err));

	if (rc)
		fprintf(stderr, "fs_create: %s\n", err);
	CHECK(rc == 0);
	return fs;
}

static uint64_t lookup_path(struct fs *fs, const char *path)
{
	char buf[256], *save, *name;
	uint64_t ino = FS_INO_ROOT;
	struct stat st;

	snprintf(buf, sizeof(buf), "%s", path);
	for (name = strtok_r(buf, "/", &save); name;
	     name = strtok_r(NULL, "/", &save))
		if (fs_lookup(fs, ino, name, &ino, &st))
			return 0;
	return ino;
}

/* Reads a whole file as a reader would; returns its length or -errno. */
static ssize_t read_file(struct fs *fs, const char *path, char *buf, size_t cap)
{
	uint64_t ino = lookup_path(fs, path);
	struct fs_file *fh = NULL;
	bool direct = false;
	size_t got = 0;
	ssize_t n;

	if (!ino)
		return -ENOENT;
	if (fs_open(fs, ino, O_RDONLY, 0, &fh, &direct))
		return -EBADF;
	/* 128 KiB reads, as the kernel sends them. */
	while ((n = fs_read(fs, ino, fh, buf + got,
			    cap - got < 131072 ? cap - got : 131072,
			    (off_t)got)) > 0)
		got += (size_t)n;
	fs_release(fs, ino, fh);
	return n < 0 ? n : (ssize_t)got;
}

static bool same(struct fs *fs, const char *path, const char *key, size_t len)
{
	char *want = malloc(len + 1), *got = malloc(len + 1);
	ssize_t n = read_file(fs, path, got, len + 1);
	bool ok;

	body_of(key, want, len);
	ok = n == (ssize_t)len && !memcmp(want, got, len);
	free(want);
	free(got);
	return ok;
}

static void test_namespace_and_reads(void)
{
	struct fs *fs;
	struct stat st;
	uint64_t ino;

	fake_s3_reset();
	put("ds/cat/1.jpg", 1000);
	put("ds/cat/2.jpg", 300000); /* several 128 KiB reads */
	put("ds/dog/1.jpg", 0);
	put("elsewhere/x", 10); /* outside the prefix */
	fs = mount_fs(0);
	if (!fs)
		return;
	ino = lookup_path(fs, "cat/2.jpg");
	CHECK(ino && fs_getattr(fs, ino, &st) == 0 && st.st_size == 300000 &&
	      S_ISREG(st.st_mode) && st.st_uid == 1000);
	CHECK(lookup_path(fs, "cat") && lookup_path(fs, "dog/1.jpg"));
	CHECK(!lookup_path(fs, "x") && !lookup_path(fs, "elsewhere"));
	CHECK(fs_lookup(fs, ino, "y", &ino, &st) == -ENOTDIR);

	/* Bytes equal, from the network, then from the cache. */
	CHECK(same(fs, "cat/1.jpg", "ds/cat/1.jpg", 1000));
	CHECK(same(fs, "cat/2.jpg", "ds/cat/2.jpg", 300000));
	CHECK(same(fs, "dog/1.jpg", "ds/dog/1.jpg", 0));
	uint64_t gets = fake_s3_gets();
	CHECK(same(fs, "cat/2.jpg", "ds/cat/2.jpg", 300000));
	/* No second GET (served from the fetch still committing, or the
	 * cache: which one is a race, and either is right). */
	CHECK(fake_s3_gets() == gets);
	fs_destroy(fs);

	/* A remount uses the saved listing and the cache: no request. */
	uint64_t lists = fake_s3_lists();
	fs = mount_fs(0);
	CHECK(fs && same(fs, "cat/2.jpg", "ds/cat/2.jpg", 300000));
	CHECK(fake_s3_lists() == lists && fake_s3_gets() == gets);
	fs_destroy(fs);
}

static void test_errors(void)
{
	char buf[4096];
	struct fs *fs;

	fake_s3_reset();
	for (int i = 0; i < 6; i++) {
		char key[32];

		snprintf(key, sizeof(key), "ds/e/%d", i);
		put(key, 2000);
	}
	/* The cache of the last test lists other objects: list again. */
	fs = mount_fs(3);
	if (!fs)
		return;

	/* Throttled twice, then served: the reader never knows, the stats
	 * count two slowdowns and two retries. */
	fake_s3_fail("ds/e/0", 503, "SlowDown", 2);
	CHECK(same(fs, "e/0", "ds/e/0", 2000));
	CHECK(fs_stat_of(fs, "errors", "slowdown") == 2);
	CHECK(fs_stat_of(fs, "requests", "retries") == 2);

	/* A reset, then served. */
	fake_s3_fail("ds/e/1", 0, "", 1);
	CHECK(same(fs, "e/1", "ds/e/1", 2000));
	CHECK(fs_stat_of(fs, "errors", "network") == 1);

	/* A server error past the budget (3 attempts): EIO. */
	fake_s3_fail("ds/e/2", 500, "InternalError", -1);
	CHECK(read_file(fs, "e/2", buf, sizeof(buf)) == -EIO);
	CHECK(fs_stat_of(fs, "errors", "server") == 3);

	/* Resets past the budget: EIO too, whatever the client's errno. */
	fake_s3_fail("ds/e/5", 0, "", -1);
	CHECK(read_file(fs, "e/5", buf, sizeof(buf)) == -EIO);
	CHECK(fs_stat_of(fs, "errors", "network") == 1 + 3);

	/* Refused: EACCES at once, no retry. */
	fake_s3_fail("ds/e/3", 403, "AccessDenied", -1);
	CHECK(read_file(fs, "e/3", buf, sizeof(buf)) == -EACCES);
	CHECK(fs_stat_of(fs, "errors", "other") == 1);

	/* Changed since the listing: ESTALE, never the new bytes. */
	put("ds/e/4", 2000);
	CHECK(read_file(fs, "e/4", buf, sizeof(buf)) == -ESTALE);
	CHECK(fs_stat_of(fs, "errors", "stale") == 1);
	fs_destroy(fs);
}

/* A hint written to .hintfs/hint is fetched ahead of any read. */
/* A mount of four objects ds/h/0..3 of 5,000 bytes, or NULL. */
static struct fs *mount_h(void)
{
	fake_s3_reset();
	for (int i = 0; i < 4; i++) {
		char key[32];

		snprintf(key, sizeof(key), "ds/h/%d", i);
		put(key, 5000);
	}
	return mount_fs(0);
}

static void test_hint(void)
{
	static const char hint[] =
	    "#hintfs v1 epoch=3\nh/2\nh/0\n/mnt/ds/h/1\n";
	struct fs *fs;
	int waited = 0;

	fs = mount_h();
	if (!fs)
		return;
	CHECK(ctl_send(fs, "hint", hint, strlen(hint)) == 0);
	CHECK(fs_stat_of(fs, "hint", "length") == 3);
	/* The three hinted objects arrive without a read (bounded wait for
	 * the engine thread; not a timing assertion). */
	while (fs_stat_of(fs, "cache", "objects") < 3 && waited++ < 1000)
		usleep(10000);
	CHECK(fs_stat_of(fs, "cache", "objects") == 3);
	CHECK(fs_stat_of(fs, "requests", "prefetched_objects") == 3);
	uint64_t gets = fake_s3_gets();
	CHECK(same(fs, "h/2", "ds/h/2", 5000) &&
	      same(fs, "h/0", "ds/h/0", 5000));
	CHECK(fake_s3_gets() == gets);
	CHECK(fs_stat_of(fs, "hint", "position") == 2);
	fs_destroy(fs);
}

/* Range lines (doc/design.md 2.2): the good ones are taken and their
 * objects prefetched, the bad ones counted with the first named in the
 * answer; a warm list takes a range line as its file. */
static void test_hint_ranges(void)
{
	static const char hint[] = "#hintfs v1 epoch=1\n"
				   "h/1\t100\t200\n"
				   "h/2\t4999\t10\n" /* cut at 5000 */
				   "h/0\t5000\t1\n"  /* at the end */
				   "h\t0\t1\n"	     /* a directory */
				   "h/3\t0\t0\n"     /* length 0 */
				   "h/3\t1\n";	     /* one number */
	char reply[512];
	struct fs *fs;
	int waited = 0;

	fs = mount_h();
	if (!fs)
		return;
	CHECK(ctl_request(fs_ctl_socket(fs), "hint", hint, strlen(hint), reply,
			  sizeof(reply)) == 0);
	CHECKF(strstr(reply, " entries=2 refused=4 (first: range offset at or "
			     "past the end of the file: 'h/0?5000?1')"),
	       "answer '%s'", reply);
	CHECK(fs_stat_of(fs, "hint", "bad_range") == 4);
	CHECK(fs_stat_of(fs, "hint", "length") == 2);
	while (fs_stat_of(fs, "cache", "objects") < 2 && waited++ < 1000)
		usleep(10000);
	CHECK(fs_stat_of(fs, "cache", "objects") == 2);
	uint64_t gets = fake_s3_gets();
	CHECK(same(fs, "h/1", "ds/h/1", 5000) &&
	      same(fs, "h/2", "ds/h/2", 5000));
	CHECK(fake_s3_gets() == gets);

	CHECK(ctl_request(fs_ctl_socket(fs), "warm", "h/3\t10\t20\nh\t0\t1\n",
			  16, reply, sizeof(reply)) == 0);
	CHECKF(!strcmp(reply, "files=1 entries=1 refused=1 (first: a range of "
			      "a directory: 'h?0?1')"),
	       "answer '%s'", reply);
	fs_destroy(fs);
}

/* Queued hints and pending warm entries have caps: past them the writer
 * gets EBUSY (and the stats count it), a replace is always taken. */
static void test_queue_caps(void)
{
	static const char one[] = "h/3\n";
	static const char replace[] = "#hintfs v1 replace\nh/3\n";
	enum { WARM = 70000 };
	char *warm = malloc(WARM * 4 + 1);
	struct fs *fs;

	fs = mount_h();
	if (!fs || !warm) {
		free(warm);
		return;
	}
	/* Nobody reads h/3: the current hint stays, 16 queue behind it. */
	for (int i = 0; i < 17; i++)
		CHECK(ctl_send(fs, "hint", one, strlen(one)) == 0);
	CHECK(fs_stat_of(fs, "hint", "queued") == 16);
	CHECK(ctl_send(fs, "hint", one, strlen(one)) == -EBUSY);
	CHECK(fs_stat_of(fs, "hint", "refused_queue_full") == 1);
	CHECK(ctl_send(fs, "hint", replace, strlen(replace)) == 0);
	CHECK(fs_stat_of(fs, "hint", "queued") == 0);

	/* 70,000 pending entries on a listing of 4: over the cap. */
	for (int i = 0; i < WARM; i++)
		memcpy(warm + 4 * i, "h/0\n", 4);
	CHECK(ctl_send(fs, "warm", warm, WARM * 4) == -EBUSY);
	CHECK(fs_stat_of(fs, "warm", "refused") == WARM);
	CHECK(ctl_send(fs, "warm", ".\n", 2) == 0);
	free(warm);
	fs_destroy(fs);
}

/* The stats JSON, NUL-terminated in @buf; its length or -1. */
static ssize_t stats_text(struct fs *fs, char *buf, size_t size)
{
	struct fs_file *fh = NULL;
	bool direct;
	ssize_t n;

	if (fs_open(fs, FS_INO_CTL_STATS, O_RDONLY, 0, &fh, &direct))
		return -1;
	n = fs_read(fs, FS_INO_CTL_STATS, fh, buf, size - 1, 0);
	fs_release(fs, FS_INO_CTL_STATS, fh);
	if (n >= 0)
		buf[n] = '\0';
	return n;
}

/*
 * Zero-message opens: stats is a node from its LOOKUP to its FORGET,
 * rendered at lookup with its exact size, shown as one file (st_ino);
 * other users are refused; nodes are capped; a read at 0 of a file moves
 * the hint on as an open did. The control link names the socket.
 */
static void test_ctl_nodes(void)
{
	uint64_t ino, ino2, len, nodes[80];
	struct stat st, st2;
	char buf[65536];
	struct fs *fs;
	int n = 0;

	fs = mount_h();
	if (!fs)
		return;
	CHECK(ctl_send(fs, "hint", "h/1\nh/2\n", 8) == 0);
	CHECK(fs_stat_of(fs, "hint", "length") == 2);
	CHECK(fs_ctl_lookup(fs, "stats", 0, &ino, &st) == 0);
	len = (uint64_t)st.st_size;
	CHECK(fs_getattr(fs, ino, &st) == 0 && (uint64_t)st.st_size == len);
	CHECK(len > 0 && st.st_mode == (S_IFREG | 0400));
	CHECK(fs_ctl_node_read(fs, ino, 0, buf, sizeof(buf), 0) == st.st_size);
	/* The sender's stream: this process, as the socket says. */
	snprintf(buf + st.st_size, 64, "\"stream\": \"pid:%ld\"",
		 (long)getpid());
	CHECK(strstr(buf, buf + st.st_size) != NULL);
	CHECK(strstr(buf, "\"data_path\": \"zero-message opens\"") != NULL);
	/* Two lookups, two nodes, one file: stat() of the path and fstat()
	 * of what was opened agree (cp checks it). */
	CHECK(fs_ctl_lookup(fs, "stats", 0, &ino2, &st2) == 0);
	CHECK(ino2 != ino && st.st_ino == st2.st_ino &&
	      st.st_ino == FS_INO_CTL_STATS);
	CHECK(fs_getattr(fs, ino2, &st2) == 0 && st2.st_ino == st.st_ino);
	fs_forget(fs, ino2, 1);
	fs_forget(fs, ino, 1);
	CHECK(fs_getattr(fs, ino, &st) == -ENOENT);
	CHECK(fs_ctl_lookup(fs, "stats", 1234, &ino, &st) == -EACCES);
	CHECK(fs_ctl_lookup(fs, "nope", 0, &ino, &st) == -ENOENT);
	CHECK(fs_ctl_lookup(fs, "hint", 0, &ino, &st) == -ENOENT);

	/* The link to the socket: a fixed inode, its target the socket. */
	CHECK(fs_lookup(fs, FS_INO_CTL_DIR, "control", &ino, &st) == 0);
	CHECK(S_ISLNK(st.st_mode) &&
	      (size_t)st.st_size == strlen(fs_ctl_socket(fs)));
	CHECK(fs_readlink(fs, ino, buf, sizeof(buf)) == st.st_size &&
	      !strcmp(buf, fs_ctl_socket(fs)));
	CHECK(fs_readlink(fs, FS_INO_CTL_STATS, buf, sizeof(buf)) == -EINVAL);
	CHECK(fs_readlink(fs, ino, buf, 4) == -ENAMETOOLONG);

	/* verify checks at its first read, not at the lookup (a stat() or
	 * `ls -l` makes one too): a bound for a size until then. */
	CHECK(fs_ctl_lookup(fs, "verify", 0, &ino, &st) == 0);
	CHECK(st.st_size == 65536);
	n = (int)fs_ctl_node_read(fs, ino, 0, buf, sizeof(buf), 0);
	CHECK(n > 0 && n < 65536 && strstr(buf, "\"checked\": ") != NULL);
	CHECK(fs_getattr(fs, ino, &st) == 0 && st.st_size == n);
	fs_forget(fs, ino, 1);
	n = 0;

	/* Nodes never closed are capped. */
	while (n < 80 && fs_ctl_lookup(fs, "stats", 0, &nodes[n], &st) == 0)
		n++;
	CHECK(n == 64);
	CHECK(fs_ctl_lookup(fs, "stats", 0, &ino, &st) == -ENFILE);
	while (n)
		fs_forget(fs, nodes[--n], 1);
	CHECK(fs_ctl_lookup(fs, "stats", 0, &ino, &st) == 0);
	fs_forget(fs, ino, 1);

	/* A read from offset 0 is an open: the hint moves on. */
	CHECK(ctl_send(fs, "hint", "#hintfs v1 stream=r replace\nh/0\n", 32) ==
	      0);
	CHECK(fs_lookup(fs, 1, "h", &ino, &st) == 0);
	CHECK(fs_lookup(fs, ino, "0", &ino, &st) == 0);
	fs_follow_read(fs, ino, 131072, 0, false);
	CHECK(fs_read(fs, ino, NULL, buf, 131072, 0) == 5000);
	fs_follow_read(fs, ino, 131072, 0, true);
	CHECK(stats_text(fs, buf, sizeof(buf)) > 0);
	CHECK(strstr(buf, "\"name\": \"r\", \"position\": 1,") != NULL);
	fs_destroy(fs);
}

/* The follow table's clock (fs_follow_create()): vnow; the first read of
 * it after race_fs is set first runs, on this thread, another reader's
 * read of the middle of race_ino on a later clock, as a thread that read
 * the clock after ours and took the lock before us would. */
static uint64_t vnow;
static struct fs *race_fs;
static uint64_t race_ino;

static uint64_t follow_clock(void)
{
	uint64_t now = vnow;
	struct fs *fs = race_fs;

	if (fs) {
		race_fs = NULL;
		vnow += 1000;
		fs_follow_read(fs, race_ino, 131072, 131072, false);
	}
	return now;
}

/* Readers of file @ino the engine counts (pf_note_open/pf_note_close). */
static uint32_t opens_of(struct fs *fs, uint64_t ino)
{
	struct pf *pf = atomic_load(&fs->pf);
	uint32_t n;

	pthread_mutex_lock(&pf->mu);
	n = pf->open_count[ino - 1];
	pthread_mutex_unlock(&pf->mu);
	return n;
}

/*
 * Two readers part-way through large files, followed from
 * their READs. One reads the clock, the other reads a later one and stamps
 * its entry first: the first, taking the lock with the earlier clock, must
 * not count the second's entry idle (unsigned, its idle time was huge) and
 * close it under its reader. A reader idle for 10 s is still closed.
 */
static void test_follow_clock_order(void)
{
	enum { SIZE = 1 << 20, READ = 131072 };
	uint64_t a, b;
	struct fs *fs;

	fake_s3_reset();
	put("ds/f/a", SIZE);
	put("ds/f/b", SIZE);
	fs = mount_fs(0);
	if (!fs)
		return;
	a = lookup_path(fs, "f/a");
	b = lookup_path(fs, "f/b");
	CHECK(a && b && atomic_load(&fs->pf));
	fs_follow_destroy(fs->follow);
	fs->follow = fs_follow_create(follow_clock);
	CHECK(fs->follow != NULL);
	if (!a || !b || !fs->follow || !atomic_load(&fs->pf)) {
		fs_destroy(fs);
		return;
	}
	vnow = 1000000000ull;
	fs_follow_read(fs, b, READ, 0, false);
	fs_follow_read(fs, a, READ, 0, false);
	CHECK(opens_of(fs, a) == 1 && opens_of(fs, b) == 1);

	/* a's read of its middle reads the clock; b stamps a later one. */
	race_fs = fs;
	race_ino = b;
	fs_follow_read(fs, a, READ, READ, false);
	CHECK(race_fs == NULL);
	CHECK(opens_of(fs, a) == 1 && opens_of(fs, b) == 1);
	/* b's reader reaches the end: its one close. */
	fs_follow_read(fs, b, READ, SIZE - READ, true);
	CHECK(opens_of(fs, b) == 0);

	/* 11 s later a new reader of b finds a idle and closes it. */
	vnow += 11000000000ull;
	fs_follow_read(fs, b, READ, 0, false);
	CHECK(opens_of(fs, a) == 0 && opens_of(fs, b) == 1);
	fs_destroy(fs);
}

/* How many descriptors of this process are the memfd named @name (the
 * daemon runs in this process: one it kept would be counted). */
static int memfds_named(const char *name)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	char path[300], want[64], link[128];
	int n = 0;

	if (!d)
		return -1;
	snprintf(want, sizeof(want), "/memfd:%s ", name);
	while ((e = readdir(d))) {
		ssize_t len;

		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		len = readlink(path, link, sizeof(link) - 1);
		if (len <= 0)
			continue;
		link[len] = '\0';
		if (!strncmp(link, want, strlen(want)))
			n++;
	}
	closedir(d);
	return n;
}

/*
 * The control socket: what a sender gets back (the stream its hint went
 * to, the errno of a refusal), the sender's own streams named from its
 * pid, a full queue replaced on request, a payload past one message sent
 * as a memfd, and bad requests refused with a reason, changing nothing.
 */
static void test_ctl_socket(void)
{
	static const char one[] = "h/3\n";
	char want[128], reply[512];
	const char *sock;
	size_t big_len = 200000;
	char *big = malloc(big_len);
	struct fs *fs;

	fs = mount_h();
	if (!fs || !big) {
		free(big);
		if (fs)
			fs_destroy(fs);
		return;
	}
	sock = fs_ctl_socket(fs);
	CHECK(ctl_request(sock, "ping", "", 0, reply, sizeof(reply)) == 0);
	CHECK(!strncmp(reply, "hintfs ", 7));
	CHECK(ctl_request(sock, "hint", one, 4, reply, sizeof(reply)) == 0);
	snprintf(want, sizeof(want), "stream=pid:%ld entries=1 refused=0",
		 (long)getpid());
	CHECK(!strcmp(reply, want));
	CHECK(ctl_request(sock, "hint own=3", "h/1\nnot/there\n", 14, reply,
			  sizeof(reply)) == 0);
	snprintf(want, sizeof(want),
		 "stream=pid%ld.3 entries=1 refused=1 (first: not in the "
		 "listing: 'not/there')",
		 (long)getpid());
	CHECK(!strcmp(reply, want));
	/* The header's name wins over the sender's. */
	CHECK(ctl_request(sock, "hint own=2", "#hintfs v1 stream=rank4\nh/1\n",
			  28, reply, sizeof(reply)) == 0);
	CHECK(!strncmp(reply, "stream=rank4 ", 13));

	/* A full queue: refused (EBUSY, with why), or replaced on request. */
	for (int i = 0; i < 16; i++)
		CHECK(ctl_request(sock, "hint", one, 4, reply, sizeof(reply)) ==
		      0);
	CHECK(ctl_request(sock, "hint", one, 4, reply, sizeof(reply)) ==
	      -EBUSY);
	CHECK(strstr(reply, "16 hints are queued already") != NULL);
	CHECK(ctl_request(sock, "hint if_full=replace", one, 4, reply,
			  sizeof(reply)) == 0);
	/* Not a refusal: the queue holds the one hint now. */
	CHECK(fs_stat_of(fs, "hint", "refused_queue_full") == 1);
	CHECK(fs_stat_of(fs, "hint", "queued") == 0);

	/* Past one message: the payload travels as a memfd. */
	for (size_t i = 0; i + 4 <= big_len; i += 4)
		memcpy(big + i, "h/2\n", 4);
	CHECK(ctl_request(sock, "hint own=9 if_full=replace", big, big_len,
			  reply, sizeof(reply)) == 0);
	snprintf(want, sizeof(want), "stream=pid%ld.9 entries=%zu ",
		 (long)getpid(), big_len / 4);
	CHECK(!strncmp(reply, want, strlen(want)));

	/* Bad requests: refused with a reason; nothing taken. */
	long long got = fs_stat_of(fs, "hint", "received");

	CHECK(ctl_request(sock, "write", "x", 1, reply, sizeof(reply)) ==
	      -EINVAL);
	CHECK(strstr(reply, "unknown command") != NULL);
	CHECK(ctl_request(sock, "hint own=0", one, 4, reply, sizeof(reply)) ==
	      -EINVAL);
	CHECK(ctl_request(sock, "hint owner=1", one, 4, reply, sizeof(reply)) ==
	      -EINVAL);
	CHECK(ctl_request(sock, "relist now", "", 0, reply, sizeof(reply)) ==
	      -EINVAL);
	CHECK(ctl_request(sock, "", "", 0, reply, sizeof(reply)) == -EINVAL);
	CHECK(fs_stat_of(fs, "hint", "received") == got);
	CHECK(ctl_request(sock, "warm", "h/0\nno/such\n", 12, reply,
			  sizeof(reply)) == 0);
	CHECK(!strcmp(reply, "files=1 entries=1 refused=1 (first: not in "
			     "the listing: 'no/such')"));
	/* An empty message with a descriptor: not kept open. */
	{
		static const char probe[] = "hintfs-leak-probe";
		int sfd, mfd = memfd_create(probe, 0);
		struct sockaddr_un a = {.sun_family = AF_UNIX};
		union {
			char buf[CMSG_SPACE(sizeof(int))];
			struct cmsghdr align;
		} cm;
		struct msghdr mh = {.msg_control = cm.buf,
				    .msg_controllen = sizeof(cm.buf)};
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);

		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &mfd, sizeof(int));
		snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock);
		sfd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
		CHECK(connect(sfd, (struct sockaddr *)&a, sizeof(a)) == 0);
		CHECK(sendmsg(sfd, &mh, 0) == 0);
		close(mfd);
		/* The daemon closes the connection once it has looked. */
		CHECK(recv(sfd, reply, 1, 0) == 0);
		close(sfd);
		/* Bounded wait for its thread, not a timing check. */
		for (int i = 0; i < 1000 && memfds_named(probe) > 0; i++)
			usleep(10000);
		CHECK(memfds_named(probe) == 0);
	}
	fs_destroy(fs);
	/* Gone with the mount. */
	CHECK(access(sock, F_OK) == -1 && errno == ENOENT);
	free(big);
}

/*
 * An object whose blob write fails (a failing disk: the write test hook)
 * is not fetched whole again and again: from then on it is read through, and
 * one sequential read moves about the object's size from the server.
 */
static void test_write_failure_reads_through(void)
{
	enum { SIZE = 20 << 20 };
	struct fs *fs;

	fake_s3_reset();
	put("ds/w/big", SIZE);
	setenv("HINTFS_FAULT_CACHE_WRITE", "1", 1);
	fs = mount_fs(0);
	unsetenv("HINTFS_FAULT_CACHE_WRITE");
	if (!fs)
		return;
	CHECK(same(fs, "w/big", "ds/w/big", SIZE));
	if (!TEST_HOOKS_BUILT) {
		/* A build without test hooks (the shipped daemon's) ignores
		 * the hook: the object is cached, nothing read through. */
		for (int i = 0;
		     i < 1000 && fs_stat_of(fs, "cache", "objects") < 1; i++)
			usleep(10000);
		CHECK(fs_stat_of(fs, "cache", "objects") == 1);
		CHECK(fs_stat_of(fs, "requests", "not_cached") == 0);
		fs_destroy(fs);
		return;
	}
	/* 3 parts of 8 MiB for the whole fetch whose commit failed, then
	 * ranged parts for what was read after (was one whole fetch per
	 * read once the failed fetch had left). */
	CHECK(fake_s3_gets() <= 8);
	/* Once the failed commit is counted the fetch has left: the next
	 * read goes through, about the object's size from the server. */
	for (int i = 0;
	     i < 1000 && fs_stat_of(fs, "requests", "not_cached") < 1; i++)
		usleep(10000);
	CHECK(fs_stat_of(fs, "requests", "not_cached") == 1);
	CHECK(fs_stat_of(fs, "cache", "objects") == 0);
	uint64_t gets = fake_s3_gets();
	long long through = fs_stat_of(fs, "reads", "read_through");
	CHECK(same(fs, "w/big", "ds/w/big", SIZE));
	CHECK(fake_s3_gets() - gets <= 4);
	CHECK(fs_stat_of(fs, "reads", "read_through") > through);
	fs_destroy(fs);
}

/*
 * A process that holds the cache index's write lock on command, so that
 * the engine's cache writer blocks in its commit: forked while this
 * process has no other thread. Commands on @cmd: 'l' locks (answers 'l'
 * on @ack once held), 'u' unlocks and exits.
 */
static pid_t index_locker(int *cmd_fd, int *ack_fd)
{
	int cmd[2], ack[2];
	pid_t pid;

	if (pipe(cmd) || pipe(ack))
		return -1;
	pid = fork();
	if (pid == 0) {
		char path[256], c = 0;
		MDB_env *env = NULL;
		MDB_txn *txn = NULL;

		close(cmd[1]);
		close(ack[0]);
		snprintf(path, sizeof(path), "%s/index.mdb", cache_dir);
		if (read(cmd[0], &c, 1) != 1 || c != 'l' ||
		    mdb_env_create(&env) || mdb_env_set_maxdbs(env, 3) ||
		    mdb_env_open(env, path, MDB_NOSUBDIR, 0600) ||
		    mdb_txn_begin(env, NULL, 0, &txn))
			_exit(1);
		if (write(ack[1], "l", 1) != 1 || read(cmd[0], &c, 1) != 1)
			_exit(1);
		mdb_txn_abort(txn);
		mdb_env_close(env);
		_exit(0);
	}
	close(cmd[0]);
	close(ack[1]);
	*cmd_fd = cmd[1];
	*ack_fd = ack[0];
	return pid;
}

static void *destroy_fs(void *fs)
{
	fs_destroy(fs);
	return NULL;
}

/*
 * An unmount commits what was fetched: an object read from the fetch's
 * buffers while the cache writer was busy is in the next mount's cache.
 */
static void test_stop_commits_what_was_fetched(void)
{
	int cmd = -1, ack = -1, status = 0;
	pthread_t t;
	struct fs *fs;
	pid_t locker;
	char c = 0;

	fake_s3_reset();
	put("ds/s/a", 100000);
	put("ds/s/b", 100000);
	locker = index_locker(&cmd, &ack);
	CHECK(locker > 0);
	fs = mount_fs(0);
	if (!fs || locker <= 0)
		return;
	/* The writer takes a, then waits for the index: b is read from its
	 * fetch and stays in the writer's queue. */
	CHECK(write(cmd, "l", 1) == 1 && read(ack, &c, 1) == 1 && c == 'l');
	CHECK(same(fs, "s/a", "ds/s/a", 100000));
	CHECK(same(fs, "s/b", "ds/s/b", 100000));
	CHECK(fake_s3_gets() == 2);
	/* The unmount begins (the engine is told to stop) before the index
	 * is free again. */
	CHECK(pthread_create(&t, NULL, destroy_fs, fs) == 0);
	usleep(300000);
	CHECK(write(cmd, "u", 1) == 1);
	pthread_join(t, NULL);
	CHECK(waitpid(locker, &status, 0) == locker && WIFEXITED(status) &&
	      WEXITSTATUS(status) == 0);
	close(cmd);
	close(ack);

	fs = mount_fs(0);
	CHECK(fs && same(fs, "s/a", "ds/s/a", 100000) &&
	      same(fs, "s/b", "ds/s/b", 100000));
	CHECK(fake_s3_gets() == 2);
	fs_destroy(fs);
}

/* The dotted paths of fs/stats.def's rows. */
static const char *const stat_rows[] = {
#define HINTFS_STAT(id, path, type, fmt, val, prom, label, scale, help) path,
#include "fs/stats.def"
#undef HINTFS_STAT
};

#define N_STAT_ROWS (sizeof(stat_rows) / sizeof(stat_rows[0]))

static bool stat_is_row(const char *path)
{
	for (size_t i = 0; i < N_STAT_ROWS; i++)
		if (!strcmp(stat_rows[i], path))
			return true;
	return false;
}

/* Counts the numbers under @v (at @path) that are not rows of the table,
 * naming each; the per-kind FUSE requests and the arrays are not rows. */
static int stat_numbers_not_rows(const struct json *v, const char *path)
{
	char sub[256];
	int bad = 0;

	if (v->type == JSON_NUMBER && !stat_is_row(path)) {
		fprintf(stderr, "stats: %s is not a row of fs/stats.def\n",
			path);
		return 1;
	}
	if (v->type != JSON_OBJECT || !strcmp(path, "fuse"))
		return 0;
	for (const struct json *c = v->child; c; c = c->next) {
		snprintf(sub, sizeof(sub), "%s%s%s", path, *path ? "." : "",
			 c->key);
		bad += stat_numbers_not_rows(c, sub);
	}
	return bad;
}

/*
 * The stats file and fs/stats.def, from which hintfs-ctl makes its
 * Prometheus metrics, hold the same numbers: every row is in the file
 * (with a tier and credentials, whose sections exist only then), and every
 * number in the file is a row.
 */
static void test_stats_are_the_table(void)
{
	struct fs_config cfg = {
	    .s3 = {.bucket = "b",
		   .endpoint = "http://127.0.0.1:9",
		   .region = "us-east-1",
		   .path_style = true,
		   .access_key = "AKID",
		   .secret_key = "SECRET"},
	    .tier = {.bucket = "t",
		     .endpoint = "http://127.0.0.1:9",
		     .region = "us-east-1",
		     .path_style = true,
		     .access_key = "AKID",
		     .secret_key = "SECRET"},
	    .tier_prefix = "",
	    .prefix = "ds/",
	    .mountpoint = "/mnt/ds",
	    .uid = 1000,
	    .gid = 1000,
	    .cache_dir = cache_dir,
	    .cache_size = 64ull << 20,
	};
	static char text[65536];
	struct fs_file *fh = NULL;
	struct json *st = NULL;
	struct fs *fs = NULL;
	char err[512] = "";
	bool direct;
	ssize_t n = -1;

	fake_s3_reset();
	fake_s3_put("ds/a", "abc", 3);
	CHECK(fs_create(&cfg, &fs, err, sizeof(err)) == 0);
	if (!fs) {
		fprintf(stderr, "fs_create: %s\n", err);
		return;
	}
	if (!fs_open(fs, FS_INO_CTL_STATS, O_RDONLY, 0, &fh, &direct)) {
		n = fs_read(fs, FS_INO_CTL_STATS, fh, text, sizeof(text) - 1,
			    0);
		fs_release(fs, FS_INO_CTL_STATS, fh);
	}
	CHECK(n > 0 && json_parse(text, (size_t)n, &st, err, sizeof(err)) == 0);
	if (st) {
		CHECK(json_get(st, "tier") &&
		      json_get(st, "credentials.provider"));
		for (size_t i = 0; i < N_STAT_ROWS; i++) {
			double v;

			if (!json_has_num(st, stat_rows[i], &v)) {
				fprintf(stderr, "stats: no number at %s\n",
					stat_rows[i]);
				CHECK(0);
			}
		}
		CHECK(stat_numbers_not_rows(st, "") == 0);
	}
	/* The exposition's rule: a counter's metric ends in _total, and only a
	 * counter's. */
#define HINTFS_STAT(id, path, type, fmt, val, prom, label, scale, help)        \
	CHECK(                                                                 \
	    ((type) == STAT_COUNTER) ==                                        \
	    (strlen(prom) > 6 && !strcmp(prom + strlen(prom) - 6, "_total")));
	enum { STAT_GAUGE, STAT_COUNTER };
#include "fs/stats.def"
#undef HINTFS_STAT
	json_free(st);
	fs_destroy(fs);
}

/* Whether some row of fs/stats.def reads @field ("ps.reads") of the
 * engine's snapshot: its "val" column names it, not a longer name. */
static bool stat_reads_field(const char *field)
{
	static const char *const vals[] = {
#define HINTFS_STAT(id, path, type, fmt, val, prom, label, scale, help) #val,
#include "fs/stats.def"
#undef HINTFS_STAT
	};
	size_t n = strlen(field);

	for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++)
		for (const char *p = strstr(vals[i], field); p;
		     p = strstr(p + 1, field))
			if (!isalnum((unsigned char)p[n]) && p[n] != '_')
				return true;
	return false;
}

/*
 * Every number of the engine's snapshot (the rows of prefetch/stats.def,
 * from which struct pf_stats is made) is shown in the stats file: a
 * counter added there and not to fs/stats.def would count unseen.
 */
static void test_engine_counters_are_shown(void)
{
	int unseen = 0;

#define PF_STAT(type, name, help)                                              \
	if (!stat_reads_field("ps." #name)) {                                  \
		fprintf(stderr, "stats: pf_stats.%s is in no row\n", #name);   \
		unseen++;                                                      \
	}
#include "prefetch/stats.def"
#define PF_TIER_STAT(type, name, help)                                         \
	if (!stat_reads_field("ps.tier_st." #name)) {                          \
		fprintf(stderr, "stats: pf_tier_stats.%s is in no row\n",      \
			#name);                                                \
		unseen++;                                                      \
	}
#include "prefetch/stats.def"
	CHECK(unseen == 0);
}

/* What listing_load() handed over: count, order and the keys' bytes. */
struct listed {
	uint64_t n;
	bool in_order; /* keys came as recorded: their number rises by 1 */
	char first[16];
};

static int listed_cb(void *arg, const struct s3_object *o)
{
	struct listed *l = arg;
	unsigned long i = strtoul(o->key, NULL, 10);

	if (!l->n)
		snprintf(l->first, sizeof(l->first), "%.8s", o->key);
	l->in_order &= i == l->n && o->size == i && !strcmp(o->etag, "\"e\"");
	l->n++;
	return 0;
}

/* Records @n objects with 900-byte keys (about 4,400 to a chunk). */
static struct listing_buf *record(struct cache *c, const char *name, unsigned n)
{
	struct listing_buf *lb = listing_buf_create(c, name);
	char key[901];

	CHECK(lb != NULL);
	memset(key, 'k', 900);
	key[900] = '\0';
	for (unsigned i = 0; lb && i < n; i++) {
		struct s3_object o = {
		    .key = key, .key_len = 900, .size = i, .etag = "\"e\""};

		snprintf(key, 9, "%08u", i);
		key[8] = 'k';
		CHECK(listing_buf_add(lb, &o) == 0);
	}
	return lb;
}

static bool meta_has(struct cache *c, const char *name)
{
	void *blob = NULL;
	size_t len;
	int rc = cache_meta_get(c, name, &blob, &len);

	free(blob);
	return rc == 0;
}

/*
 * The saved listing is written in chunks as it grows, and used only once
 * all of it is saved: a listing not saved (failed, cut short) leaves the
 * snapshot in use whole and its own chunks dropped; a new one replaces
 * the old one's chunks; a chunk gone is a damaged snapshot, never a short
 * one; a snapshot saved whole before chunks is still read.
 */
static void test_listing_chunks(void)
{
	char dir[] = "/tmp/hintfs-test-listing-XXXXXX";
	struct cache_config cfg = {.capacity = 1 << 20};
	struct listed l = {.in_order = true};
	struct listing_buf *lb;
	struct cache *c = NULL;
	char err[256];
	uint64_t count;
	int64_t at;

	CHECK(mkdtemp(dir) != NULL);
	cfg.dir = dir;
	CHECK(cache_open(&cfg, &c, err, sizeof(err)) == 0);
	if (!c)
		return;
	CHECK(listing_load(c, "L", NULL, listed_cb, &l, &count, &at) ==
	      -ENODATA);

	lb = record(c, "L", 10000);
	CHECK(listing_save(lb) == 0);
	listing_buf_destroy(lb);
	CHECK(meta_has(c, "L#a0") && meta_has(c, "L#a2")); /* chunks */
	CHECK(listing_load(c, "L", NULL, listed_cb, &l, &count, &at) == 0);
	CHECK(count == 10000 && l.n == 10000 && l.in_order);
	CHECK(!strcmp(l.first, "00000000"));

	/* Recorded, not saved: the snapshot in use stays, its chunks go. */
	lb = record(c, "L", 9000);
	CHECK(meta_has(c, "L#b0"));
	listing_buf_destroy(lb);
	CHECK(!meta_has(c, "L#b0") && meta_has(c, "L#a0"));
	l = (struct listed){.in_order = true};
	CHECK(listing_load(c, "L", NULL, listed_cb, &l, &count, &at) == 0);
	CHECK(count == 10000 && l.in_order);

	/* A new listing replaces the old one, chunks and all. */
	lb = record(c, "L", 5);
	CHECK(listing_save(lb) == 0);
	listing_buf_destroy(lb);
	CHECK(!meta_has(c, "L#a0") && meta_has(c, "L#b0"));
	l = (struct listed){.in_order = true};
	CHECK(listing_load(c, "L", NULL, listed_cb, &l, &count, &at) == 0);
	CHECK(count == 5 && l.n == 5 && l.in_order);

	/* A chunk gone: damaged. */
	CHECK(cache_meta_del(c, "L#b0") == 0);
	CHECK(listing_load(c, "L", NULL, listed_cb, &l, &count, &at) ==
	      -EPROTO);

	/* Saved whole before chunks (HFSLIST2): still read. */
	{
		char v2[24 + 2 * (22 + 9 + 3)], *p = v2;
		uint64_t n = 2, size;
		int64_t saved = 1700000000, mtime = 0;
		uint32_t klen = 9;
		uint16_t elen = 3;

		memcpy(p, "HFSLIST2", 8);
		memcpy(p + 8, &n, 8);
		memcpy(p + 16, &saved, 8);
		p += 24;
		for (size = 0; size < 2; size++) {
			memcpy(p, &klen, 4);
			memcpy(p + 4, &elen, 2);
			memcpy(p + 6, &size, 8);
			memcpy(p + 14, &mtime, 8);
			snprintf(p + 22, 10, "%08llu",
				 (unsigned long long)size);
			memcpy(p + 22 + 8, "k\"e\"", 4);
			p += 22 + 9 + 3;
		}
		CHECK(cache_meta_put(c, "V", v2, sizeof(v2)) == 0);
		l = (struct listed){.in_order = true};
		CHECK(listing_load(c, "V", NULL, listed_cb, &l, &count, &at) ==
		      0);
		CHECK(count == 2 && l.in_order && at == 1700000000);
		/* One byte short: damaged. */
		CHECK(cache_meta_put(c, "V", v2, sizeof(v2) - 1) == 0);
		CHECK(listing_load(c, "V", NULL, listed_cb, &l, &count, &at) ==
		      -EPROTO);
	}
	cache_close(c);
	snprintf(err, sizeof(err), "rm -rf '%s'", dir);
	CHECK(system(err) == 0);
}

int main(void)
{
	static void (*const tests[])(void) = {
	    test_listing_chunks,
	    test_namespace_and_reads,
	    test_errors,
	    test_hint,
	    test_hint_ranges,
	    test_queue_caps,
	    test_stop_commits_what_was_fetched,
	    test_write_failure_reads_through,
	    test_ctl_nodes,
	    test_ctl_socket,
	    test_follow_clock_order,
	    test_stats_are_the_table,
	    test_engine_counters_are_shown,
	};
	char cmd[128];

	if (!mkdtemp(cache_dir)) {
		perror("mkdtemp");
		return 1;
	}
	/* Each test starts from an empty cache directory. */
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'/*", cache_dir);
	for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
		if (i && system(cmd))
			fprintf(stderr, "cannot empty %s\n", cache_dir);
		tests[i]();
	}
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", cache_dir);
	if (system(cmd))
		fprintf(stderr, "cannot remove %s\n", cache_dir);
	fake_s3_reset();
	return check_done();
}
