/* libFuzzer harness: the configuration parser over a fuzzed environment.
 *
 * The input is a list of environment entries separated by NUL bytes (so an entry may hold any
 * other byte, newlines included), e.g. "CURESV_CAPACITY=0=80G,1=4k\0CURESV_X\n=1". Oracles:
 *   - curesv_parse_size agrees with an independent parser on every entry's value and on the entry
 *     itself: both accept with the same bytes, or both refuse;
 *   - every SIZE the configuration accepted (CURESV_CAPACITY in both forms, each reservation's size,
 *     CURESV_TABLE_SLOTS) is what the independent parser reads in the value the variable had;
 *   - each diagnostic is one clean line, and what curesv_diag_log writes to fd 2 is curesv lines. */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "config/config.h"
#include "oracles.h"

#define MAX_ENTRIES 64

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	oracle_init();
	return 0;
}

/* The value of `name` as curesv_config_load's getter finds it: the first entry "NAME=...". */
ORACLE static const char *value_of(char *const *envp, const char *name)
{
	size_t n = strlen(name);
	for (; *envp; envp++)
		if (strncmp(*envp, name, n) == 0 && (*envp)[n] == '=')
			return *envp + n + 1;
	return NULL;
}

ORACLE static void check_size_parsers(const char *text)
{
	uint64_t got = 0, want = 0;
	size_t len = strlen(text);
	const char *why = curesv_parse_size(text, len, &got);
	bool ok = ref_parse_size(text, len, &want);
	oracle_what = "curesv_parse_size", oracle_text = text, oracle_len = len;
	if (!why != ok)
		oracle_fail("curesv says %s, the reference %s", why ? why : "valid",
			    ok ? "valid" : "invalid");
	if (ok && got != want)
		oracle_fail("%llu bytes, the reference %llu", (unsigned long long)got,
			    (unsigned long long)want);
	oracle_text = NULL;
}

/* Item `k` (0-based) of a comma-separated list, as [*item, *item + *len). */
ORACLE static bool list_item(const char *list, unsigned k, const char **item, size_t *len)
{
	const char *p = list;
	for (unsigned i = 0; i < k; i++) {
		p = strchr(p, ',');
		if (!p)
			return false;
		p++;
	}
	*item = p;
	const char *comma = strchr(p, ',');
	*len = comma ? (size_t)(comma - p) : strlen(p);
	return true;
}

ORACLE static void expect_size(const char *what, const char *text, size_t len, uint64_t have)
{
	uint64_t want = 0;
	oracle_what = what, oracle_text = text, oracle_len = len;
	if (!ref_parse_size(text, len, &want))
		oracle_fail("accepted, but the reference refuses this SIZE");
	if (want != have)
		oracle_fail("holds %llu bytes, the reference reads %llu", (unsigned long long)have,
			    (unsigned long long)want);
	oracle_text = NULL;
}

ORACLE static void check_capacity(const curesv_config *cfg, char *const *envp)
{
	const char *v = value_of(envp, "CURESV_CAPACITY");
	if (!v)
		return;
	if (!strchr(v, '=')) {
		uint64_t want;
		/* a capacity of 0 is refused, as a reservation of 0 bytes is */
		bool ok = ref_parse_size(v, strlen(v), &want) && want != 0;
		oracle_what = "CURESV_CAPACITY", oracle_text = v, oracle_len = strlen(v);
		if (ok != cfg->capacity_all_set)
			oracle_fail("accepted: %d, the reference: %d", cfg->capacity_all_set, ok);
		if (ok && want != cfg->capacity_all)
			oracle_fail("%llu bytes, the reference %llu",
				    (unsigned long long)cfg->capacity_all, (unsigned long long)want);
		oracle_text = NULL;
		return;
	}
	/* DEVICE=SIZE,...: each device set has an item of that exact device number whose size the
	 * reference reads the same (bad items are dropped with their own error, the others kept) */
	for (int dev = 0; dev < CURESV_MAX_DEVICES; dev++) {
		if (!cfg->capacity_set[dev])
			continue;
		const char *item;
		size_t len;
		bool found = false;
		for (unsigned k = 0; !found && list_item(v, k, &item, &len); k++) {
			const char *eq = memchr(item, '=', len);
			size_t digits = eq ? (size_t)(eq - item) : 0;
			/* any count of leading zeros names the same device ("007" is 7) */
			bool number = digits > 0;
			long ordinal = 0;
			for (size_t i = 0; number && i < digits; i++) {
				number = item[i] >= '0' && item[i] <= '9';
				if (ordinal < CURESV_MAX_DEVICES)
					ordinal = ordinal * 10 + (item[i] - '0');
			}
			if (!number || ordinal != dev)
				continue;
			uint64_t want;
			size_t vlen = len - digits - 1;
			if (ref_parse_size(eq + 1, vlen, &want) && want == cfg->capacity[dev])
				found = true;
		}
		oracle_what = "CURESV_CAPACITY", oracle_text = v, oracle_len = strlen(v);
		if (!found)
			oracle_fail("device %d holds %llu bytes, which no item of the variable says", dev,
				    (unsigned long long)cfg->capacity[dev]);
		oracle_text = NULL;
	}
}

/* Every reservation kept is an item of the variable of its name whose size the reference reads the
 * same (a bad item is dropped with its own error and the others are kept, so item k need not be
 * reservation k). */
ORACLE static void check_reservations(const curesv_config *cfg, char *const *envp)
{
	const char *v = value_of(envp, "CURESV_RESERVATIONS");
	oracle_what = "CURESV_RESERVATIONS", oracle_text = v ? v : "", oracle_len = v ? strlen(v) : 0;
	for (unsigned r = 0; r < cfg->n_reservations; r++) {
		const char *name = cfg->reservations[r].name, *item;
		size_t len, n = strlen(name);
		bool found = false;
		for (unsigned k = 0; v && !found && list_item(v, k, &item, &len); k++) {
			const char *eq = memchr(item, '=', len), *end = item + len;
			if (!eq || (size_t)(eq - item) != n || memcmp(item, name, n) != 0)
				continue;
			const char *at = memchr(eq + 1, '@', (size_t)(end - eq - 1));
			uint64_t want;
			found = ref_parse_size(eq + 1, (size_t)((at ? at : end) - eq - 1), &want) &&
				want == cfg->reservations[r].size;
		}
		if (!found)
			oracle_fail("reservation %u ('%s', %llu bytes) is no item of the variable", r, name,
				    (unsigned long long)cfg->reservations[r].size);
	}
}

ORACLE static void check_table_slots(const curesv_config *cfg, char *const *envp)
{
	const char *v = value_of(envp, "CURESV_TABLE_SLOTS");
	uint64_t n = 0;
	bool ok = v && ref_parse_size(v, strlen(v), &n) && n >= 8 && n <= (UINT64_C(1) << 26) &&
		  (n & (n - 1)) == 0;
	uint64_t want = ok ? n : 65536;
	oracle_what = "CURESV_TABLE_SLOTS", oracle_text = v, oracle_len = v ? strlen(v) : 0;
	if (cfg->table_slots != want)
		oracle_fail("%llu slots, the reference %llu", (unsigned long long)cfg->table_slots,
			    (unsigned long long)want);
	oracle_text = NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char buf[1 << 16];
	static char *envp[MAX_ENTRIES + 1];
	if (size >= sizeof buf)
		return -1;
	memcpy(buf, data, size);
	buf[size] = '\0';
	unsigned n = 0;
	for (char *p = buf; p <= buf + size && n < MAX_ENTRIES; p += strlen(p) + 1)
		if (*p)
			envp[n++] = p;
	envp[n] = NULL;

	static curesv_config cfg;
	static curesv_diag diag;
	unsigned errors = curesv_config_load(&cfg, envp, &diag);
	oracle_what = "curesv_config_load";
	if (errors != diag.errors || diag.count > CURESV_DIAG_LINES ||
	    diag.count > diag.errors + diag.warnings)
		oracle_fail("%u errors returned, %u counted, %u warnings, %u lines", errors,
			    diag.errors, diag.warnings, diag.count);

	for (unsigned i = 0; i < n; i++) {
		const char *eq = strchr(envp[i], '=');
		check_size_parsers(envp[i]);
		if (eq)
			check_size_parsers(eq + 1);
	}
	if (cfg.enable) { /* CURESV_ENABLE=0 reads nothing else */
		check_capacity(&cfg, envp);
		check_reservations(&cfg, envp);
		check_table_slots(&cfg, envp);
	}

	for (unsigned i = 0; i < diag.count; i++) {
		char line[CURESV_DIAG_WIDTH + 16];
		int k = snprintf(line, sizeof line, "curesv: %s\n", diag.line[i].text);
		check_lines("a diagnostic line", line, (size_t)k);
	}
	capture_stderr();
	curesv_diag_log(&diag);
	size_t len;
	const char *out = captured_stderr(&len);
	check_lines("curesv_diag_log on fd 2", out, len);
	if (diag.count && len == 0)
		oracle_fail("%u diagnostics, nothing logged", diag.count);
	return 0;
}
