#include "payers/streams.h"


static curesv_entry entry_of(uint64_t handle, const curesv_stream_info *in)
{
	return (curesv_entry){ .ptr = handle, .bytes = curesv_ref_serial(in->ref),
			       .origin = curesv_ref_handle(in->ref), .thread = in->ctx,
			       .device = (int16_t)in->device, .kind = in->flags };
}

static void info_of(const curesv_entry *e, curesv_stream_info *out)
{
	*out = (curesv_stream_info){ .device = e->device, .ref = e->bytes << 24 | e->origin,
				     .ctx = e->thread, .flags = e->kind };
}

static void moved(curesv_streams *s)
{
	/* release: a thread that sees the new epoch re-reads the map */
	atomic_fetch_add_explicit(&s->epoch, 1, memory_order_release);
}

bool curesv_streams_init(curesv_streams *s)
{
	atomic_init(&s->epoch, 1);
	pthread_mutex_init(&s->lock, NULL);
	return curesv_table_init(&s->map, CURESV_STREAM_SLOTS);
}

size_t curesv_streams_bytes(void)
{
	return curesv_table_bytes(CURESV_STREAM_SLOTS);
}

bool curesv_streams_init_in(curesv_streams *s, void *mem)
{
	atomic_init(&s->epoch, 1);
	pthread_mutex_init(&s->lock, NULL);
	return curesv_table_init_in(&s->map, CURESV_STREAM_SLOTS, mem);
}

void curesv_streams_destroy(curesv_streams *s)
{
	curesv_table_destroy(&s->map);
	pthread_mutex_destroy(&s->lock);
}

bool curesv_streams_lock(curesv_streams *s, bool wait)
{
	if (!wait)
		return curesv_trylock(&s->lock);
	curesv_lock(&s->lock);
	return true;
}

void curesv_streams_unlock(curesv_streams *s)
{
	curesv_unlock(&s->lock);
}

bool curesv_streams_set(curesv_streams *s, uint64_t handle, const curesv_stream_info *info)
{
	curesv_streams_lock(s, true);
	bool ok = curesv_streams_put(s, handle, info);
	curesv_streams_unlock(s);
	return ok;
}

/* With no other writer, replacing finds the one record there is: the handle stays recorded once. */
bool curesv_streams_put(curesv_streams *s, uint64_t handle, const curesv_stream_info *info)
{
	if (handle == 0)
		return false;
	curesv_entry e = entry_of(handle, info), old;
	bool ok = curesv_table_insert_replacing(&s->map, &e, &old);
	moved(s);
	return ok;
}

bool curesv_streams_get(curesv_streams *s, uint64_t handle, curesv_stream_info *out)
{
	curesv_entry e;
	if (handle == 0 || !curesv_table_lookup(&s->map, handle, &e))
		return false;
	info_of(&e, out);
	return true;
}

bool curesv_streams_drop(curesv_streams *s, uint64_t handle, curesv_stream_info *out)
{
	curesv_entry e;
	if (handle == 0 || !curesv_table_remove(&s->map, handle, &e))
		return false;
	moved(s);
	if (out)
		info_of(&e, out);
	return true;
}

struct drop_walk {
	uint32_t ctx;           /* match this context tag, or */
	int device;             /* this device (ctx 0) */
	uint64_t keys[64];
	unsigned n;
	bool more;
};

static void collect(const curesv_entry *e, void *arg)
{
	struct drop_walk *w = arg;
	if ((e->kind & CURESV_STREAM_POOL) || (w->ctx ? e->thread != w->ctx : e->device != w->device))
		return;
	if (w->n < sizeof w->keys / sizeof w->keys[0])
		w->keys[w->n++] = e->ptr;
	else
		w->more = true;
}

static void drop_matching(curesv_streams *s, struct drop_walk *w)
{
	curesv_streams_lock(s, true);
	do {
		w->n = 0;
		w->more = false;
		curesv_table_walk(&s->map, collect, w);
		for (unsigned i = 0; i < w->n; i++)
			curesv_table_remove(&s->map, w->keys[i], NULL);
	} while (w->more);
	moved(s);
	curesv_streams_unlock(s);
}

void curesv_streams_drop_ctx(curesv_streams *s, uint32_t ctx)
{
	struct drop_walk w = { .ctx = ctx ? ctx : 1 };
	drop_matching(s, &w);
}

void curesv_streams_drop_device(curesv_streams *s, int device)
{
	struct drop_walk w = { .ctx = 0, .device = device };
	drop_matching(s, &w);
}

struct attached_walk {
	uint32_t handle;
	unsigned n;
};

static void count_attached(const curesv_entry *e, void *arg)
{
	struct attached_walk *w = arg;
	if ((e->kind & CURESV_STREAM_ATTACHED) && e->origin == w->handle &&
	    !(e->kind & CURESV_STREAM_POOL))
		w->n++;
}

unsigned curesv_streams_attached(curesv_streams *s, uint32_t handle)
{
	struct attached_walk w = { handle, 0 };
	curesv_table_walk(&s->map, count_attached, &w);
	return w.n;
}
