# curesv — see README.md.
#
#   make            build build/plain/libcuresv.so (needs the CUDA headers: CUDA_HOME)
#   make test       install what the tests need, then run every test: plain, ASan+UBSan, TSan
#   make demo       run the hand-off demo under the shim (real GPU if there is one, else simulated)
#   make bench      print the benchmark tables
#
# VARIANT selects a build flavour, each in its own folder: plain (default), asan, tsan.

CC ?= cc
CUDA_HOME ?= /usr/local/cuda
BUILD ?= build
VARIANT ?= plain
O := $(BUILD)/$(VARIANT)

WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wno-unused-parameter
BASE := -std=c11 -D_GNU_SOURCE -fPIC -pthread -g $(WARN) -Icore -Ishim
ifeq ($(VARIANT),plain)
  FLAVOUR := -O2
else ifeq ($(VARIANT),asan)
  FLAVOUR := -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
else ifeq ($(VARIANT),tsan)
  FLAVOUR := -O1 -fno-omit-frame-pointer -fsanitize=thread
else
  $(error VARIANT must be plain, asan or tsan, not '$(VARIANT)')
endif
CFLAGS_ALL := $(BASE) $(FLAVOUR) $(CFLAGS)
LDFLAGS_ALL := -pthread $(filter -fsanitize=%,$(FLAVOUR)) $(LDFLAGS)

CORE_SRC := $(wildcard core/*.c)
CORE_OBJ := $(CORE_SRC:%.c=$(O)/%.o)
UNIT_SRC := $(filter-out tests/unit/tsan_boxfort.c,$(wildcard tests/unit/*.c))
ifeq ($(VARIANT),tsan)
  UNIT_SRC += tests/unit/tsan_boxfort.c
endif
UNIT_OBJ := $(UNIT_SRC:%.c=$(O)/%.o)
# A sanitizer finding fails the test that caused it.
export ASAN_OPTIONS := abort_on_error=1:detect_leaks=1
export UBSAN_OPTIONS := halt_on_error=1:print_stacktrace=1
export TSAN_OPTIONS := halt_on_error=1:second_deadlock_stack=1

.PHONY: all core unit check-unit test deps bench clean
all: $(O)/libcuresv.so

core: $(O)/libcuresv_core.a

$(O)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -MMD -MP -c $< -o $@

$(O)/libcuresv_core.a: $(CORE_OBJ)
	@rm -f $@
	ar rcs $@ $^

# ---- unit tests (Criterion, no CUDA) ---------------------------------------------------------------
$(O)/unit: $(UNIT_OBJ) $(O)/libcuresv_core.a
	$(CC) $(LDFLAGS_ALL) $^ -lcriterion -o $@

# Sanitizer runs get fewer iterations where a test scales them (CURESV_TEST_SCALE divides them).
check-unit: $(O)/unit
	CURESV_TEST_VARIANT=$(VARIANT) $(O)/unit --jobs 2 $(UNIT_ARGS)

# ---- everything ---------------------------------------------------------------------------------------
deps:
	@scripts/install-deps

test: deps
	$(MAKE) VARIANT=plain check-unit
	$(MAKE) VARIANT=asan check-unit
	$(MAKE) VARIANT=tsan check-unit

bench:
	$(MAKE) VARIANT=plain $(BUILD)/plain/table_bench
	$(BUILD)/plain/table_bench

$(O)/table_bench: tests/bench/table_bench.c $(O)/libcuresv_core.a
	$(CC) $(CFLAGS_ALL) $^ $(LDFLAGS_ALL) -o $@

clean:
	rm -rf $(BUILD)

-include $(CORE_OBJ:.o=.d) $(UNIT_OBJ:.o=.d)
