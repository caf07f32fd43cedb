/* What a loaded configuration says about a device: its capacity, and reservations past it. */
#include "config/settings.h"

#include <inttypes.h>
#include <stdio.h>

#include "base/units.h"

uint64_t curesv_config_capacity(const curesv_config *cfg, int device, bool *set)
{
	*set = false;
	if (device < 0 || device >= CURESV_MAX_DEVICES)
		return 0;
	if (cfg->capacity_set[device]) {
		*set = true;
		return cfg->capacity[device];
	}
	if (cfg->capacity_all_set) {
		*set = true;
		return cfg->capacity_all;
	}
	return 0;
}

/* "'scan=16M'" as written, or "'scan' (16777216 bytes)" when the text was too long to keep. */
static void shown_entry(const struct curesv_reservation_spec *r, char *out, size_t n)
{
	if (r->size_text[0])
		snprintf(out, n, "'%s=%s'", r->name, r->size_text);
	else
		snprintf(out, n, "'%s' (%" PRIu64 " bytes)", r->name, r->size);
}

bool curesv_config_overcommit(const curesv_config *c, int device, uint64_t capacity,
			      const char *capacity_shown, char *out, size_t n)
{
	uint64_t total = 0, before = 0;
	int first = -1;
	unsigned after = 0;
	for (unsigned i = 0; i < c->n_reservations; i++) {
		if (c->reservations[i].device != device)
			continue;
		if (first < 0)
			before = total;
		total += c->reservations[i].size;
		if (total <= capacity)
			continue;
		if (first < 0)
			first = (int)i;
		else
			after++;
	}
	if (first < 0)
		return false;
	char tot[32], entry[CURESV_NAME_MAX + 48], rest[48] = "", outcome[CURESV_NAME_MAX + 160];
	shown_entry(&c->reservations[first], entry, sizeof entry);
	if (after)
		snprintf(rest, sizeof rest, " and the %u after it", after);
	if (c->mode == CURESV_MODE_ENFORCE) {
		/* the ledger holds them so (ledger.c: hold_to_capacity_locked): in declared order */
		char left[32];
		uint64_t room = capacity - before;
		snprintf(outcome, sizeof outcome, "enforce mode holds them to it: '%s' gets %s%s, the "
			 "shared pool nothing", c->reservations[first].name,
			 curesv_format_bytes((int64_t)room, left), after ? ", later ones nothing" : "");
	} else {
		snprintf(outcome, sizeof outcome, "all are kept, the shared pool is empty");
	}
	snprintf(out, n, "CURESV_RESERVATIONS: device %d: reservations total %s (%" PRIu64 " bytes), "
		 "more than its capacity of %s: %s%s do%s not fit; %s", device,
		 curesv_format_bytes((int64_t)total, tot), total, capacity_shown, entry, rest,
		 after ? "" : "es", outcome);
	return true;
}

bool curesv_config_enforce_overcommit(const curesv_config *c, char *out, size_t n)
{
	if (c->mode != CURESV_MODE_ENFORCE)
		return false;
	for (int dev = 0; dev < CURESV_MAX_DEVICES; dev++) {
		bool set;
		uint64_t cap = curesv_config_capacity(c, dev, &set), total = 0;
		if (!set)
			continue;
		for (unsigned i = 0; i < c->n_reservations; i++)
			if (c->reservations[i].device == dev)
				total += c->reservations[i].size;
		if (total <= cap)
			continue;
		char tot[32], capacity[32];
		snprintf(out, n, "CURESV_MODE=enforce: device %d: the reservations (%s) do not fit its "
			 "capacity (%s), which enforce mode never lets the device pass: make them fit (at "
			 "run time they would be held to it)", dev, curesv_format_bytes((int64_t)total, tot),
			 curesv_format_bytes((int64_t)cap, capacity));
		return true;
	}
	return false;
}

bool curesv_config_capacity_shown(const curesv_config *c, int device, char *out, size_t n)
{
	bool set;
	uint64_t cap = curesv_config_capacity(c, device, &set);
	if (!set)
		return false;
	const char *text = c->capacity_set[device] ? c->capacity_text[device] : c->capacity_all_text;
	char fmt[32];
	snprintf(out, n, "%s (%" PRIu64 " bytes, CURESV_CAPACITY)",
		 text[0] ? text : curesv_format_bytes((int64_t)cap, fmt), cap);
	return true;
}
