/*
 * fs/follow.c - what the engine learns of its readers when the kernel
 * sends no OPEN and no RELEASE (zero-message opens, the default data path).
 *
 * The engine's hint cursor moves on the opens it is told of, and an object
 * stays in the cache (and a read-through of a large object stays in the fetch
 * table) while a reader has it open (pf_note_open/pf_note_close). Without
 * OPEN, a reader shows itself only by its READs, and only for bytes not in
 * the kernel's page cache: so a READ at offset 0 stands for the open, and
 * the READ that reaches the end of the file for the close. A training
 * sample (one READ of 128 KiB covers it) opens and closes around its one
 * read. A larger file read part-way is remembered here, in a table of at
 * most FOLLOW_MAX readers; one idle for FOLLOW_IDLE_NS, or the oldest when
 * the table is full, is closed: a reader that stops half-way cannot keep
 * an object out of eviction for ever.
 *
 * Readers stamp their entries on the clock read before fl->mu, so stamps
 * are not in lock order: a reader that read the clock first may take the
 * lock last and find a stamp newer than its own now. Idle time is
 * therefore measured forward only (follow_idle()), and a stamp never moves
 * back (follow_stamp()): a live entry is never taken for idle by another
 * reader's clock.
 *
 * A file served whole from the page cache is invisible here: its hint
 * entry is never consumed. The window does not stick behind it (it runs
 * from the newest entry read, order_base()), and such a file needs no
 * fetch; doc/design.md 3 says what else it means.
 */
#include "fs/fs_internal.h"
#include "common/clock.h"

#include <stdlib.h>

/* Readers part-way through a large file at once: 16 ranks x 8 DataLoader
 * workers x 2 shards each, with room. */
#define FOLLOW_MAX 256
/* A reader that read nothing of its file for 10 s has stopped (a read-through
 * refetches what it needs if it comes back). */
#define FOLLOW_IDLE_NS (10ull * 1000000000ull)

struct follow_entry {
	uint64_t ino;	  /* 0: a free entry */
	uint64_t last_ns; /* its last read */
};

struct fs_follow {
	pthread_mutex_t mu;
	uint64_t (*clock_ns)(void); /* mono_ns(), or a test's clock */
	struct follow_entry e[FOLLOW_MAX];
};

struct fs_follow *fs_follow_create(uint64_t (*clock_ns)(void))
{
	struct fs_follow *fl = calloc(1, sizeof(*fl));

	if (!fl)
		return NULL;
	pthread_mutex_init(&fl->mu, NULL);
	fl->clock_ns = clock_ns ? clock_ns : mono_ns;
	return fl;
}

void fs_follow_destroy(struct fs_follow *fl)
{
	if (!fl)
		return;
	pthread_mutex_destroy(&fl->mu);
	free(fl);
}

/* Whether @e, a live entry, has read nothing for FOLLOW_IDLE_NS at @now. A
 * stamp after @now is another reader's, whose clock was read after ours:
 * not idle (unsigned, now - last_ns would be huge). fl->mu held. */
static bool follow_idle(const struct follow_entry *e, uint64_t now)
{
	return now > e->last_ns && now - e->last_ns > FOLLOW_IDLE_NS;
}

/* Stamps @e with a read at @now; an earlier @now leaves the later stamp.
 * fl->mu held. */
static void follow_stamp(struct follow_entry *e, uint64_t now)
{
	if (now > e->last_ns)
		e->last_ns = now;
}

/*
 * Finds @ino in the table; with @add, makes room for it (closing the idle
 * and, when full, the oldest). Returns its entry or NULL. fl->mu held.
 */
static struct follow_entry *follow_find(struct fs *fs, struct fs_follow *fl,
					uint64_t ino, uint64_t now, bool add)
{
	struct follow_entry *hit = NULL, *free_e = NULL, *oldest = NULL;
	struct pf *pf = atomic_load(&fs->pf);

	for (int i = 0; i < FOLLOW_MAX; i++) {
		struct follow_entry *e = &fl->e[i];

		if (e->ino && e->ino != ino && follow_idle(e, now)) {
			pf_note_close(pf, (uint32_t)(e->ino - 1));
			e->ino = 0;
		}
		if (e->ino == ino && ino)
			hit = e;
		else if (!e->ino && !free_e)
			free_e = e;
		else if (e->ino && (!oldest || e->last_ns < oldest->last_ns))
			oldest = e;
	}
	if (hit || !add)
		return hit;
	if (!free_e) {
		pf_note_close(pf, (uint32_t)(oldest->ino - 1));
		free_e = oldest;
	}
	free_e->ino = ino;
	free_e->last_ns = 0; /* new: the caller stamps it */
	return free_e;
}

void fs_follow_read(struct fs *fs, uint64_t ino, size_t size, off_t off,
		    bool done)
{
	struct fs_follow *fl = fs->follow;
	const struct tree_node *n;
	struct follow_entry *e;
	struct pf *pf;
	uint64_t now;
	bool end;

	if (fs->open_per_file || ino < 1 || ino > tree_count(fs->tree) ||
	    off < 0)
		return;
	n = tree_node(fs->tree, (uint32_t)(ino - 1));
	pf = atomic_load(&fs->pf);
	if (n->is_dir || !pf)
		return;
	end = (uint64_t)off + size >= n->size;
	if (off == 0 && end) {
		/* One READ is the whole file: open before, close after. */
		if (done)
			pf_note_close(pf, (uint32_t)(ino - 1));
		else
			pf_note_open(pf, (uint32_t)(ino - 1));
		return;
	}
	/* Before a read: an open at 0, a stamp in the middle; after: a
	 * close at the end. */
	if (!fl || done != end)
		return;
	now = fl->clock_ns();
	pthread_mutex_lock(&fl->mu);
	e = follow_find(fs, fl, ino, now, off == 0);
	if (off != 0 && !end) {
		if (e)
			follow_stamp(e, now);
	} else if (off == 0) {
		/* A new reader from the start: the entry counts one open
		 * (another reader's open of the same file is consumed but
		 * not counted twice). */
		pf_note_open(pf, (uint32_t)(ino - 1));
		if (e->last_ns)
			pf_note_close(pf, (uint32_t)(ino - 1));
		follow_stamp(e, now);
	} else if (e) {
		pf_note_close(pf, (uint32_t)(ino - 1));
		*e = (struct follow_entry){0};
	}
	pthread_mutex_unlock(&fl->mu);
}
