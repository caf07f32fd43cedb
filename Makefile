# curesv — see README.md.
#
#   make            build build/plain/libcuresv.so (needs the CUDA headers: CUDA_HOME)
#   make test       install what the tests need, then run every test: plain, ASan+UBSan, TSan
#   make demo       run the hand-off demo under the shim (real GPU if there is one, else simulated)
#   make bench      print the benchmark tables
#   make fuzz       run each libFuzzer harness of tests/fuzz for FUZZ_RUNS inputs (clang)
#
# VARIANT selects a build flavour, each in its own folder: plain (default), asan, tsan.

CC ?= cc
CUDA_HOME ?= /usr/local/cuda
BUILD ?= build
VARIANT ?= plain
O := $(BUILD)/$(VARIANT)

WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wno-unused-parameter
# Hidden by default: only the CUDA entry points and the control API leave libcuresv.so. Thread-locals
# use the initial-exec model: one instruction on the allocation path instead of a call.
BASE := -std=c11 -D_GNU_SOURCE -fPIC -pthread -g $(WARN) -Icore -Ishim -fvisibility=hidden \
	-ftls-model=initial-exec
ifeq ($(VARIANT),plain)
  FLAVOUR := -O2
else ifeq ($(VARIANT),asan)
  FLAVOUR := -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
else ifeq ($(VARIANT),tsan)
  FLAVOUR := -O1 -fno-omit-frame-pointer -fsanitize=thread -Wno-tsan
else
  $(error VARIANT must be plain, asan or tsan, not '$(VARIANT)')
endif
CFLAGS_ALL := $(BASE) $(FLAVOUR) $(CFLAGS)
LDFLAGS_ALL := -pthread $(filter -fsanitize=%,$(FLAVOUR)) $(LDFLAGS)

CUDA_INC := $(CUDA_HOME)/include
# With this cuda.h declares every ABI variant (cuMemAlloc_v2, cuMemAllocAsync_ptsz, legacy 32-bit
# ones) under its own name, so each hook is checked against the real prototype of its symbol.
SHIM_CFLAGS := -I$(CUDA_INC) -D__CUDA_API_VERSION_INTERNAL

CORE_SRC := $(wildcard core/*.c)
SHIM_SRC := $(wildcard shim/*.c) $(wildcard shim/*.S)
SHIM_OBJ := $(patsubst %,$(O)/%.o,$(basename $(SHIM_SRC)))
CORE_OBJ := $(CORE_SRC:%.c=$(O)/%.o)
UNIT_SRC := $(filter-out tests/unit/tsan_boxfort.c,$(wildcard tests/unit/*.c))
ifeq ($(VARIANT),tsan)
  UNIT_SRC += tests/unit/tsan_boxfort.c
endif
UNIT_OBJ := $(UNIT_SRC:%.c=$(O)/%.o)
# A sanitizer finding fails the test that caused it.
export ASAN_OPTIONS := abort_on_error=1:detect_leaks=1
export LSAN_OPTIONS := suppressions=$(abspath tests/unit/lsan.supp)
export UBSAN_OPTIONS := halt_on_error=1:print_stacktrace=1
export TSAN_OPTIONS := halt_on_error=1:second_deadlock_stack=1

.PHONY: all core unit check-unit check-integration test deps deps-build demo bench fuzz clean
all: $(O)/libcuresv.so

core: $(O)/libcuresv_core.a

$(O)/%.o: %.c Makefile
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -MMD -MP -c $< -o $@

$(O)/shim/%.o: shim/%.c Makefile | $(CUDA_INC)/cuda.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) $(SHIM_CFLAGS) -MMD -MP -c $< -o $@

# The dlsym override runs inside the sanitizer runtimes' own start-up (they resolve their
# interceptors with dlsym before their shadow memory exists): never instrument it.
$(O)/shim/dlsym.o: shim/dlsym.c Makefile | $(CUDA_INC)/cuda.h
	@mkdir -p $(@D)
	$(CC) $(filter-out -fsanitize=%,$(CFLAGS_ALL)) $(SHIM_CFLAGS) -MMD -MP -c $< -o $@

$(O)/shim/%.o: shim/%.S Makefile
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -c $< -o $@

$(O)/libcuresv.so: $(SHIM_OBJ) $(CORE_OBJ)
	$(CC) -shared $(LDFLAGS_ALL) -Wl,-soname,libcuresv.so -Wl,-z,now $^ -ldl -o $@

$(O)/libcuresv_core.a: $(CORE_OBJ)
	@rm -f $@
	ar rcs $@ $^

# ---- unit tests (Criterion, no CUDA) ---------------------------------------------------------------
$(O)/unit: $(UNIT_OBJ) $(O)/libcuresv_core.a
	$(CC) $(LDFLAGS_ALL) $^ -lcriterion -o $@

# Sanitizer runs get fewer iterations where a test scales them (CURESV_TEST_SCALE divides them).
check-unit: $(O)/unit
	CURESV_TEST_VARIANT=$(VARIANT) $(O)/unit --jobs 2 $(UNIT_ARGS)

# ---- integration: unmodified programs under the shim, on the simulated CUDA stack --------------------
SIM_DIR := $(BUILD)/sim
include tests/sim/sim.mk

IT := $(O)/it
IT_CC := $(CC) -std=c11 -O1 -g -pthread -I$(CUDA_INC)
IT_DYN := -L$(SIM_DIR) -lcudart -lcuda
IT_STATIC := $(SIM_LIBCUDART_STATIC) -L$(SIM_DIR) -lcuda -ldl
# What -lcudart and -lcuda find: the unversioned links next to the simulated libraries.
SIM_LINKS := $(SIM_DIR)/libcudart.so $(SIM_DIR)/libcuda.so
IT_PROGS := $(addprefix $(IT)/,handoff handoff_static families families_ptds families_static \
	stress badfree oom rtld_next rename busy_exit control timelines wrapped_driver fork_child \
	exit_in_handler badnames)

$(IT)/%: tests/integration/%.c $(SIM_LINKS) | $(IT)
	$(IT_CC) -Ishim $< $(IT_DYN) -o $@
$(IT)/%_static: tests/integration/%.c $(SIM_LIBCUDART_STATIC) $(SIM_LINKS) | $(IT)
	$(IT_CC) $< $(IT_STATIC) -o $@
$(IT)/families_ptds: tests/integration/families.c $(SIM_LINKS) | $(IT)
	$(IT_CC) -DCUDA_API_PER_THREAD_DEFAULT_STREAM $< $(IT_DYN) -o $@
$(IT)/libwrapopen.so: tests/integration/wrapopen.c | $(IT)
	$(IT_CC) -fPIC -shared $< -ldl -o $@
$(IT)/rtld_next: tests/integration/rtld_next.c $(IT)/libwrapopen.so
	$(IT_CC) $< -L$(IT) -lwrapopen -o $@
$(IT)/libwrapmem.so: tests/integration/wrapmem.c | $(IT)
	$(IT_CC) -fPIC -shared $< -ldl -o $@
$(IT)/wrapped_driver: tests/integration/wrapped_driver.c $(IT)/libwrapmem.so $(SIM_LINKS)
	$(IT_CC) $< -L$(IT) -lwrapmem -L$(SIM_DIR) -lcuda -o $@
$(IT):
	mkdir -p $@

# The programs are built once, plain; a sanitized shim is preloaded behind its runtime.
IT_BIN := $(BUILD)/plain/it
SAN_RUNTIME := $(strip $(if $(filter asan,$(VARIANT)),$(shell $(CC) -print-file-name=libasan.so),\
	$(if $(filter tsan,$(VARIANT)),$(shell $(CC) -print-file-name=libtsan.so))))

check-integration: $(O)/libcuresv.so sim
	$(MAKE) VARIANT=plain $(subst $(IT),$(IT_BIN),$(IT_PROGS))
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
	LD_LIBRARY_PATH=$(abspath $(SIM_DIR)):$(abspath $(IT_BIN)) python3 tests/integration/run.py \
		--lib $(O)/libcuresv.so --bin $(IT_BIN) --stack sim \
		$(if $(SAN_RUNTIME),--sanitizer-runtime $(SAN_RUNTIME))

# ---- the demo ---------------------------------------------------------------------------------------
demo: deps-build
	$(MAKE) VARIANT=plain $(BUILD)/plain/libcuresv.so $(BUILD)/plain/it/handoff
	scripts/demo

# ---- everything ---------------------------------------------------------------------------------------
deps:
	@scripts/install-deps test

deps-build:
	@scripts/install-deps build

test: deps
	$(MAKE) VARIANT=plain check-unit check-integration sim-selftest
	$(MAKE) VARIANT=asan check-unit check-integration
	$(MAKE) VARIANT=tsan check-unit check-integration
	$(MAKE) -j2 fuzz

# ---- fuzzing: libFuzzer harnesses over core/, built with clang, ASan and UBSan --------------------------
# Each runs FUZZ_RUNS inputs from its seeds (tests/fuzz/seeds/NAME) and the corpus it grew before
# (build/fuzz/corpus-NAME); an input that fails an oracle, or runs past 60 s, is saved in build/fuzz/.
# FUZZ_ARGS adds libFuzzer options (e.g. FUZZ_ARGS=-max_total_time=600).
FUZZ_CC ?= clang
FUZZ_RUNS ?= 100000
FUZZ := $(BUILD)/fuzz
FUZZERS := config report
FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE -g -O1 -pthread -Icore -Ishim \
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all

$(FUZZ)/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/oracles.h $(CORE_SRC) $(wildcard core/*.h) Makefile
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $< $(CORE_SRC) -o $@

# One run per harness, so that make -j2 fuzz runs both at once (not .PHONY: make would not look
# for their pattern rule). The harnesses are kept, not removed as intermediate files.
fuzz: $(FUZZERS:%=fuzz-%)
.SECONDARY: $(FUZZERS:%=$(FUZZ)/fuzz_%)

fuzz-%: $(FUZZ)/fuzz_%
	@mkdir -p $(FUZZ)/corpus-$*
	@$(FUZZ)/fuzz_$* -runs=$(FUZZ_RUNS) -timeout=60 -artifact_prefix=$(FUZZ)/ \
		$(if $(wildcard tests/fuzz/$*.dict),-dict=tests/fuzz/$*.dict) $(FUZZ_ARGS) \
		$(FUZZ)/corpus-$* tests/fuzz/seeds/$* >$(FUZZ)/$*.log 2>&1 || \
		{ tail -n 40 $(FUZZ)/$*.log; echo "fuzz_$* failed (all of it: $(FUZZ)/$*.log)"; exit 1; }
	@echo "fuzz_$*: $$(grep -a '^Done' $(FUZZ)/$*.log)"

bench: deps-build
	$(MAKE) VARIANT=plain $(BUILD)/plain/table_bench $(BUILD)/plain/alloc_bench \
		$(BUILD)/plain/libcuresv.so sim
	LD_LIBRARY_PATH=$(abspath $(SIM_DIR)) scripts/bench --stack sim --bin $(BUILD)/plain

$(O)/table_bench: tests/bench/table_bench.c $(O)/libcuresv_core.a
	$(CC) $(CFLAGS_ALL) $^ $(LDFLAGS_ALL) -o $@

$(O)/alloc_bench: tests/bench/alloc_bench.c $(SIM_LINKS)
	$(IT_CC) $< $(IT_DYN) -o $@

clean:
	rm -rf $(BUILD)

-include $(CORE_OBJ:.o=.d) $(UNIT_OBJ:.o=.d) $(SHIM_OBJ:.o=.d)
