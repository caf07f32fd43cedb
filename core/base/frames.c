#include "base/frames.h"

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>
#include <unwind.h>

#ifdef CURESV_LIBBACKTRACE
#include <backtrace.h>
#endif

/* The main program's path: the loader names it "" (and dladdr gives argv[0], maybe relative). */
static char exe[PATH_MAX];
static pthread_once_t prepared = PTHREAD_ONCE_INIT;

static void prepare_once(void)
{
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	exe[n > 0 ? n : 0] = '\0';
	uintptr_t pc[2];
	curesv_frames_capture(pc, 2, (curesv_frames_skip){ 0, 0 });
}

void curesv_frames_prepare(void)
{
	pthread_once(&prepared, prepare_once);
}

static const char *object_name(const char *name)
{
	return name && name[0] ? name : exe[0] ? exe : NULL;
}

/* ---- the object of an address ------------------------------------------------------------------ */

struct find {
	uintptr_t addr;
	uintptr_t lo, hi, bias;
	const char *name;
	bool found;
};

static int find_object(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct find *f = arg;
	uintptr_t lo = UINTPTR_MAX, hi = 0;
	bool holds = false;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD)
			continue;
		uintptr_t start = info->dlpi_addr + ph->p_vaddr, end = start + ph->p_memsz;
		holds |= f->addr >= start && f->addr < end;
		lo = start < lo ? start : lo;
		hi = end > hi ? end : hi;
	}
	if (!holds)
		return 0;
	*f = (struct find){ f->addr, lo, hi, info->dlpi_addr, info->dlpi_name, true };
	return 1;
}

curesv_frames_skip curesv_frames_object_of(const void *code)
{
	struct find f = { .addr = (uintptr_t)code };
	dl_iterate_phdr(find_object, &f);
	return f.found ? (curesv_frames_skip){ f.lo, f.hi } : (curesv_frames_skip){ 0, 0 };
}

bool curesv_frames_locate(uintptr_t pc, const char **object, uintptr_t *offset)
{
	uintptr_t at = pc - 1; /* the call, which may be a function's last instruction */
#ifdef DLFO_STRUCT_HAS_EH_DBASE
	struct dl_find_object o;
	if (_dl_find_object((void *)at, &o) != 0)
		return false;
	*object = object_name(o.dlfo_link_map->l_name);
	*offset = pc - o.dlfo_link_map->l_addr;
#else
	struct find f = { .addr = at };
	if (!dl_iterate_phdr(find_object, &f))
		return false;
	*object = object_name(f.name);
	*offset = pc - f.bias;
#endif
	return *object != NULL;
}

/* ---- capture ----------------------------------------------------------------------------------- */

struct walk {
	uintptr_t *pcs;
	unsigned n, max;
	curesv_frames_skip skip;
	bool leading;           /* still among the frames to leave out */
	bool first;             /* the capture's own frame */
};

static _Unwind_Reason_Code step(struct _Unwind_Context *ctx, void *arg)
{
	struct walk *w = arg;
	uintptr_t pc = (uintptr_t)_Unwind_GetIP(ctx);
	if (pc == 0)
		return _URC_END_OF_STACK;
	if (w->first) {
		w->first = false;
		return _URC_NO_REASON;
	}
	if (w->leading && pc >= w->skip.lo && pc < w->skip.hi)
		return _URC_NO_REASON;
	w->leading = false;
	w->pcs[w->n++] = pc;
	return w->n == w->max ? _URC_END_OF_STACK : _URC_NO_REASON;
}

__attribute__((noinline)) unsigned curesv_frames_capture(uintptr_t *pcs, unsigned max,
							 curesv_frames_skip skip)
{
	struct walk w = { pcs, 0, max, skip, true, true };
	if (max > 0)
		_Unwind_Backtrace(step, &w);
	return w.n;
}

/* ---- naming ------------------------------------------------------------------------------------ */

#ifdef CURESV_LIBBACKTRACE
struct named {
	curesv_frame_info *f;
	const char *function;   /* the debug information's name of the function */
};

static struct backtrace_state *bt;
static pthread_once_t bt_made = PTHREAD_ONCE_INIT;

/* Missing debug information is the usual case, not an error to report. */
static void bt_error(void *data, const char *msg, int errnum)
{
}

static void bt_make(void)
{
	bt = backtrace_create_state(NULL, 1, bt_error, NULL);
}

/* The innermost level that names a file: the call's place, inlined or not. */
static int bt_line(void *data, uintptr_t pc, const char *file, int line, const char *function)
{
	struct named *n = data;
	if (!file)
		return 0; /* an outer inline level may have one */
	n->f->file = file;
	n->f->line = line > 0 ? (unsigned)line : 0;
	n->function = function;
	return 1;
}

static void bt_symbol(void *data, uintptr_t pc, const char *name, uintptr_t value, uintptr_t size)
{
	curesv_frame_info *f = ((struct named *)data)->f;
	if (name && value) {
		f->symbol = name;
		f->symbol_offset = f->pc - value;
	}
}
#endif

bool curesv_frames_lines(void)
{
#ifdef CURESV_LIBBACKTRACE
	return true;
#else
	return false;
#endif
}

void curesv_frames_symbolize(uintptr_t pc, curesv_frame_info *out)
{
	*out = (curesv_frame_info){ .pc = pc };
	curesv_frames_prepare();
	void *at = (void *)(pc - 1);
	Dl_info info;
	struct link_map *map = NULL;
	if (dladdr1(at, &info, (void **)&map, RTLD_DL_LINKMAP) && map) {
		out->object = object_name(map->l_name);
		out->object_offset = pc - map->l_addr;
		if (info.dli_sname && info.dli_saddr) {
			out->symbol = info.dli_sname;
			out->symbol_offset = pc - (uintptr_t)info.dli_saddr;
		}
	}
#ifdef CURESV_LIBBACKTRACE
	if (!out->object)
		return;
	pthread_once(&bt_made, bt_make);
	if (!bt)
		return;
	struct named n = { out, NULL };
	backtrace_pcinfo(bt, pc - 1, bt_line, bt_error, &n);
	if (!out->symbol)
		backtrace_syminfo(bt, pc - 1, bt_symbol, bt_error, &n);
	if (!out->symbol && n.function) {
		out->symbol = n.function;
		out->symbol_offset = CURESV_FRAME_NO_OFFSET;
	}
#endif
}
