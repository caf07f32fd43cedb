/* libFuzzer harness: the text and JSON report writers, and every log line written on the way.
 *
 * The input's first bytes choose a configuration (mode, attribution, table size and policy,
 * capacity, CURESV_BACKTRACE, CURESV_REQUIRE_TRANSFER, reservations and CURESV_ATTACH rules whose patterns are raw fuzzed
 * bytes), which goes through curesv_config_load like the environment would, so the engine is always built from a
 * valid configuration. The rest is a program: allocations and frees (known, unknown, failing),
 * renames (prctl and pthread_setname_np, with raw fuzzed names), reserve/release/attach/transfer
 * with fuzzed names through the control functions of core/engine.h, device totals and counts, and
 * switches to a fresh thread. Then both reports are written to memfds. Oracles: every line of the
 * text report and of fd 2 is one curesv line (oracles.h), and the JSON report is valid JSON whose
 * strings are all UTF-8. */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>

#include "engine/engine.h"
#include "oracles.h"
#include "report/report.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int text_fd = -1, json_fd = -1;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	oracle_init();
	text_fd = memfd_create("curesv-text", MFD_CLOEXEC);
	json_fd = memfd_create("curesv-json", MFD_CLOEXEC);
	if (text_fd < 0 || json_fd < 0)
		abort();
	curesv_log_set_level(CURESV_LOG_DEBUG); /* the debug lines name threads and rules too */
	return 0;
}

/* ---- reading the input ------------------------------------------------------------------------ */

struct input {
	const uint8_t *p;
	size_t n;
};

static uint8_t byte(struct input *in)
{
	if (in->n == 0)
		return 0;
	in->n--;
	return *in->p++;
}

static uint16_t word(struct input *in)
{
	return (uint16_t)(byte(in) | byte(in) << 8);
}

/* A string of up to `max` raw bytes (a NUL ends it early, as it would a C string). */
static const char *raw_string(struct input *in, char *out, size_t max)
{
	size_t len = byte(in) % (max + 1);
	for (size_t i = 0; i < len; i++)
		out[i] = (char)byte(in);
	out[len] = '\0';
	return out;
}

/* A reservation name: mostly valid ones from a pool, so that reservations exist to be used;
 * otherwise raw bytes, which the control functions must refuse or take whole. */
static const char *res_name(struct input *in, char *out)
{
	static const char *const pool[] = { "scan", "pipe", "r", "a.b-c_9", "x" };
	uint8_t k = byte(in) % 8;
	if (k < 5)
		return pool[k];
	if (k == 5)
		return NULL;
	return raw_string(in, out, 40);
}

/* ---- the configuration ------------------------------------------------------------------------ */

static void load_config(struct input *in, curesv_config *cfg)
{
	static char env[9][1024];
	char *envp[10];
	int n = 0;
	uint8_t b = byte(in);
	snprintf(env[n++], sizeof env[0], "CURESV_MODE=%s", b & 1 ? "enforce" : "observe");
	snprintf(env[n++], sizeof env[0], "CURESV_ATTRIBUTION=%s", b & 2 ? "caller" : "origin");
	snprintf(env[n++], sizeof env[0], "CURESV_TABLE_FULL=%s", b & 4 ? "fail" : "passthrough");
	snprintf(env[n++], sizeof env[0], "CURESV_TABLE_SLOTS=%u", 8u << (byte(in) % 8));
	static const char *const caps[] = { NULL, "1M", "0=256K,1=64K", "16M" };
	if (caps[b >> 3 & 3])
		snprintf(env[n++], sizeof env[0], "CURESV_CAPACITY=%s", caps[b >> 3 & 3]);
	if (b & 0x20) /* where each allocation was made: the reports' frames */
		snprintf(env[n++], sizeof env[0], "CURESV_BACKTRACE=4");
	if (b & 0xc0) /* the hand-off audit: its sites, names and stacks in both reports */
		snprintf(env[n++], sizeof env[0], "CURESV_REQUIRE_TRANSFER=%s",
			 b & 0x80 ? "all" : "1");
	int k = snprintf(env[n], sizeof env[0], "CURESV_RESERVATIONS=");
	for (unsigned i = 0, count = byte(in) % 4; i < count; i++) {
		char name[48];
		const char *nm = res_name(in, name);
		k += snprintf(env[n] + k, sizeof env[0] - (size_t)k, "%s%s=%uK@%u", i ? "," : "",
			      nm ? nm : "", (unsigned)(byte(in) % 128 + 1), (unsigned)(byte(in) % 3));
	}
	n++;
	k = snprintf(env[n], sizeof env[0], "CURESV_ATTACH=");
	for (unsigned i = 0, count = byte(in) % 4; i < count; i++) {
		char glob[24], name[48];
		raw_string(in, glob, 20);
		const char *nm = res_name(in, name);
		k += snprintf(env[n] + k, sizeof env[0] - (size_t)k, "%s%s=%s", i ? "," : "", glob,
			      nm ? nm : "");
	}
	n++;
	envp[n] = NULL;
	for (int i = 0; i < n; i++)
		envp[i] = env[i];
	curesv_diag diag;
	curesv_config_load(cfg, envp, &diag); /* what is invalid keeps its default */
	curesv_diag_log(&diag);
}

/* ---- the program ------------------------------------------------------------------------------ */

#define MAX_INPUT 32768 /* bytes; an allocation takes 5 */
#define MAX_LIVE 256
#define MAX_THREADS 8

static struct {
	curesv_engine e;
	struct input in;
	uint64_t live[MAX_LIVE];
	unsigned nlive;
	uint64_t next_ptr;
} S;

enum op { ALLOC, FREE, FREE_UNKNOWN, RENAME, RESERVE, RELEASE, ATTACH, TRANSFER, DEVICE_TOTAL,
	  DEVICE_COUNT, NEW_THREAD, N_OPS };

static void op_alloc(struct input *in)
{
	int device = byte(in) % 3;
	uint8_t f = byte(in);
	uint64_t bytes = ((uint64_t)word(in) + 1) * 16;
	/* Large ones: up to 16 GiB, or past the 64 TiB curesv accounts (untracked). The live bytes of
	 * one account stay below 2^47 in sum (MAX_INPUT holds fewer than 8192 allocations): the
	 * ledger's word holds no more, and a charge past that does not return. */
	if (f & 0x80)
		bytes = f & 0x40 ? CURESV_SIZE_LIMIT + bytes : bytes << 14;
	curesv_alloc_op op;
	if (!curesv_alloc_begin(&S.e, device, bytes, (enum curesv_kind)(f & 3), &op))
		return; /* refused (enforce) */
	if ((f & 0xc0) == 0x40)
		curesv_alloc_resize(&S.e, &op, bytes + (uint64_t)(f & 0x3f) * 512); /* pitched */
	bool real_ok = (f & 0x38) != 0x38;
	uint64_t ptr = UINT64_C(0x7f0000000000) + ++S.next_ptr * (UINT64_C(2) << 20);
	if (curesv_alloc_end(&S.e, &op, real_ok, real_ok ? ptr : 0) && real_ok &&
	    S.nlive < MAX_LIVE)
		S.live[S.nlive++] = ptr;
}

static void op_free(struct input *in)
{
	if (S.nlive == 0)
		return;
	unsigned i = byte(in) % S.nlive;
	bool ok = byte(in) % 8 != 0;
	curesv_free_op op;
	curesv_free_begin(&S.e, S.live[i], &op);
	curesv_free_end(&S.e, &op, ok);
	if (ok)
		S.live[i] = S.live[--S.nlive];
}

static void op_rename(struct input *in)
{
	char name[24];
	raw_string(in, name, 20);
	if (byte(in) & 1)
		prctl(PR_SET_NAME, name, 0, 0, 0);
	else
		pthread_setname_np(pthread_self(), name); /* ERANGE past 15 bytes: the name stays */
	curesv_attach_invalidate(); /* as the shim's rename hooks do */
}

/* Runs operations until the input ends or asks for a new thread. */
static void *program(void *arg)
{
	struct input *in = &S.in;
	char name[48], other[48];
	op_rename(in);
	while (in->n > 0) {
		switch ((enum op)(byte(in) % N_OPS)) {
		case ALLOC: op_alloc(in); break;
		case FREE: op_free(in); break;
		case FREE_UNKNOWN: {
			curesv_free_op op;
			curesv_free_begin(&S.e, (uint64_t)word(in) << 21 | 1, &op);
			curesv_free_end(&S.e, &op, true);
			break;
		}
		case RENAME: op_rename(in); break;
		case RESERVE: {
			const char *nm = res_name(in, name);
			curesv_engine_reserve(&S.e, nm, ((uint64_t)word(in) + 1) * 1024, byte(in) % 3);
			break;
		}
		case RELEASE: curesv_engine_release(&S.e, res_name(in, name)); break;
		case ATTACH: curesv_thread_attach(res_name(in, name)); break;
		case TRANSFER: {
			uint64_t ptr = S.nlive ? S.live[byte(in) % S.nlive] : word(in);
			curesv_engine_transfer(&S.e, ptr, res_name(in, other));
			break;
		}
		case DEVICE_TOTAL:
			curesv_engine_device_total(&S.e, byte(in) % 3, ((uint64_t)word(in) + 1) << 16);
			break;
		case DEVICE_COUNT: curesv_engine_device_count(&S.e, byte(in) % 4); break;
		case NEW_THREAD: return NULL;
		case N_OPS: break;
		}
	}
	return NULL;
}

ORACLE static void check_reports(void)
{
	ftruncate(text_fd, 0);
	ftruncate(json_fd, 0);
	lseek(text_fd, 0, SEEK_SET);
	lseek(json_fd, 0, SEEK_SET);
	oracle_what = "curesv_report_write";
	if (!curesv_report_write(&S.e, text_fd, CURESV_REPORT_TEXT, 4242) ||
	    !curesv_report_write(&S.e, json_fd, CURESV_REPORT_JSON, 4242))
		oracle_fail("a write to a memfd failed");
	size_t len;
	const char *text = memfd_contents(text_fd, &len);
	check_lines("the text report", text, len);
	if (len == 0)
		oracle_fail("empty text report");
	const char *json = memfd_contents(json_fd, &len);
	check_json("the JSON report", json, len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > MAX_INPUT)
		return -1;
	memset(&S.live, 0, sizeof S.live);
	S.nlive = 0;
	S.in = (struct input){ data, size };
	capture_stderr();
	curesv_config cfg;
	load_config(&S.in, &cfg);
	if (!curesv_engine_init(&S.e, &cfg)) {
		size_t len;
		captured_stderr(&len);
		oracle_what = "curesv_engine_init";
		oracle_fail("cannot build an engine from a valid configuration");
	}
	for (int t = 0; t < MAX_THREADS && S.in.n > 0; t++) {
		pthread_t tid;
		if (pthread_create(&tid, NULL, program, NULL) != 0)
			break;
		pthread_join(tid, NULL);
	}
	check_reports();
	curesv_engine_destroy(&S.e);
	size_t len;
	const char *err = captured_stderr(&len);
	check_lines("fd 2", err, len);
	return 0;
}
