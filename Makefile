# curesv — see README.md; how it is built and tested: HACKING.md.
#
#   make            build build/plain/libcuresv.so (needs the CUDA headers: CUDA_HOME)
#   make test       install what the tests need, then run every test: plain, ASan+UBSan, TSan
#   make check-docs README's commands, and the man pages (see HACKING.md)
#   make demo       run the hand-off demo under the shim (real GPU if there is one, else simulated)
#   make bench      print the benchmark tables
#   make install    install under PREFIX (default /usr/local; DESTDIR for staging); make uninstall
#   make fuzz       run each libFuzzer harness of tests/fuzz for FUZZ_RUNS inputs (clang), and
#                   the scripts' fuzz driver for SCRIPTS_FUZZ_RUNS inputs
#   make soak       the randomized drift soak (tests/soak) for OPS operations on THREADS threads
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
  # Link-time optimisation lets the allocation path inline across the core's modules; the objects
  # keep their machine code too (fat), so the unit tests link them from a plain archive. Where the
  # compiler cannot link that way (no lto-wrapper), the library is built without.
  LTO_OK := $(shell printf 'int main(void){return 0;}\n' | $(CC) -x c -flto=auto - -o /dev/null \
	>/dev/null 2>&1 && echo yes)
  FLAVOUR := -O2 $(if $(LTO_OK),-flto=auto -ffat-lto-objects)
  LINK_LTO := $(if $(LTO_OK),-O2 -flto=auto)
else ifeq ($(VARIANT),asan)
  FLAVOUR := -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
else ifeq ($(VARIANT),tsan)
  FLAVOUR := -O1 -fno-omit-frame-pointer -fsanitize=thread -Wno-tsan
else
  $(error VARIANT must be plain, asan or tsan, not '$(VARIANT)')
endif
# File and line of the frames CURESV_BACKTRACE records: libbacktrace, which comes with gcc
# (libgcc-N-dev); where the compiler has none, frames are named by dladdr alone. Linked into
# libcuresv.so with its names hidden, so that a program's own copy stays its own.
BT_LIB := $(shell $(CC) -print-file-name=libbacktrace.a)
BT_OK := $(if $(filter /%,$(BT_LIB)),$(shell printf '\043include <backtrace.h>\nint main(void)\
	{return backtrace_create_state(0,1,0,0)==0;}\n' | $(CC) -x c - -x none $(BT_LIB) -o /dev/null \
	>/dev/null 2>&1 && echo yes))
ifeq ($(BT_OK),yes)
  BT_CFLAGS := -DCURESV_LIBBACKTRACE
  BT_LIBS := $(BT_LIB)
  BT_HIDE := -Wl,--exclude-libs,libbacktrace.a
endif
CFLAGS_ALL := $(BASE) $(FLAVOUR) $(BT_CFLAGS) $(CFLAGS)
LDFLAGS_ALL := -pthread $(filter -fsanitize=%,$(FLAVOUR)) $(LDFLAGS)

CUDA_INC := $(CUDA_HOME)/include
# With this cuda.h declares every ABI variant (cuMemAlloc_v2, cuMemAllocAsync_ptsz, legacy 32-bit
# ones) under its own name, so each hook is checked against the real prototype of its symbol.
SHIM_CFLAGS := -I$(CUDA_INC) -D__CUDA_API_VERSION_INTERNAL
# libcuresv.so is also a program (shim/main.c): the dynamic loader the compiler links programs for.
INTERP := $(shell $(CC) -\#\#\# -x c /dev/null -o /dev/null 2>&1 | tr ' ' '\n' | \
	grep -A1 -- '^-dynamic-linker$$' | tail -1)

CORE_SRC := $(wildcard core/*/*.c)
CORE_HDR := $(wildcard core/*.h core/*/*.h)
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

.PHONY: all core unit check-layers check-unit check-integration check-install check-tools check-live check-pool \
	check-docs check-pytest check-hazards test \
	deps deps-build \
	demo bench fuzz soak clean install uninstall
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

# So do the sigaction and signal interposers (the sanitizers install their handlers through them
# as they start), and the signal handler they install: never instrumented either.
$(O)/shim/signals.o: shim/signals.c Makefile | $(CUDA_INC)/cuda.h
	@mkdir -p $(@D)
	$(CC) $(filter-out -fsanitize=%,$(CFLAGS_ALL)) $(SHIM_CFLAGS) -MMD -MP -c $< -o $@

$(O)/shim/main.o: shim/main.c Makefile | $(CUDA_INC)/cuda.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) $(SHIM_CFLAGS) $(if $(INTERP),-DCURESV_INTERP='"$(INTERP)"') -MMD -MP \
		-c $< -o $@

$(O)/shim/%.o: shim/%.S Makefile
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -c $< -o $@

# libcuresv.so, or a bench build of it, from the objects given ($^).
LINK_SHIM = $(CC) -shared $(LDFLAGS_ALL) $(LINK_LTO) -Wl,-soname,libcuresv.so -Wl,-z,now \
	-Wl,-e,curesv_entry $^ $(BT_LIBS) $(BT_HIDE) -ldl -o $@

$(O)/libcuresv.so: $(SHIM_OBJ) $(CORE_OBJ)
	$(LINK_SHIM)

# The bench's clock on the runtime's tracked calls (shim/self_time.h): libcuresv.so with a tick
# counter read around each real call and tests/bench/self_time.c's sums, printed at exit. Bench only.
$(O)/selftime/shim/runtime.o: shim/runtime.c Makefile | $(CUDA_INC)/cuda.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) $(SHIM_CFLAGS) -DCURESV_SELF_TIME -MMD -MP -c $< -o $@

$(O)/selftime/self_time.o: tests/bench/self_time.c shim/self_time.h Makefile
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -DCURESV_SELF_TIME -c $< -o $@

$(O)/libcuresv-selftime.so: $(filter-out $(O)/shim/runtime.o,$(SHIM_OBJ)) $(O)/selftime/shim/runtime.o \
		$(O)/selftime/self_time.o $(CORE_OBJ)
	$(LINK_SHIM)

$(O)/libcuresv_core.a: $(CORE_OBJ)
	@rm -f $@
	ar rcs $@ $^

# ---- unit tests (Criterion, no CUDA) ---------------------------------------------------------------
$(O)/unit: $(UNIT_OBJ) $(O)/libcuresv_core.a
	$(CC) $(LDFLAGS_ALL) $^ $(BT_LIBS) -lcriterion -o $@

# Sanitizer runs get fewer iterations where a test scales them (test_scale in tests/unit/helpers.h
# divides them by CURESV_TEST_VARIANT).
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
	exit_in_handler handoff_rt exit_status layout linked linked_badorder libc10_cuda.so badnames \
	streams graphs vmm fork_free fork_in_handler trace_child peak_handoff reload two_runtimes \
	libcudaplugin12.so slow_free churn no_alloc orphans live_hold leak_sites handoff_sites table_hw \
	hold live_fork live_fds meminfo meminfo_static signal_in_exit)

$(IT)/%: tests/integration/%.c core/curesv.h $(SIM_LINKS) | $(IT)
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
# Linked with the runtime alone: runs where libcuda.so.1 is missing (no driver answers).
$(IT)/handoff_rt: tests/integration/handoff.c $(SIM_LINKS) | $(IT)
	$(IT_CC) $< -L$(SIM_DIR) -lcudart -o $@
# Loads the runtime itself, with dlopen: linked with neither runtime nor driver.
$(IT)/reload: tests/integration/reload.c | $(IT)
	$(IT_CC) $< -ldl -o $@
# Linked with another major version of the runtime than the program that loads it.
$(IT)/libcudaplugin12.so: tests/integration/plugin12.c $(SIM_LIBCUDART12) | $(IT)
	$(IT_CC) -fPIC -shared $< -L$(SIM_DIR) -l:libcudart.so.12 -o $@
$(IT)/two_runtimes: tests/integration/two_runtimes.c $(IT)/libcudaplugin12.so $(SIM_LINKS)
	$(IT_CC) $< -L$(SIM_DIR) -lcudart -ldl -o $@
$(IT)/no_alloc: tests/integration/no_alloc.c $(SIM_LINKS) | $(IT)
	$(IT_CC) $< -L$(SIM_DIR) -lcudart -o $@
$(IT)/libc10_cuda.so: tests/integration/fake_c10.c | $(IT)
	$(IT_CC) -fPIC -shared $< -o $@
$(IT)/layout: tests/integration/layout.c core/curesv.h | $(IT)
	$(IT_CC) -Ishim $< -o $@
# -lcuresv after -lcudart, as curesv(3) says; then before it under --as-needed, the mistake it warns of.
$(IT)/linked: tests/integration/linked.c $(O)/libcuresv.so $(SIM_LINKS) | $(IT)
	$(IT_CC) -Ishim -Wl,--as-needed $< -L$(SIM_DIR) -lcudart -L$(O) -Wl,-rpath,$(abspath $(O)) \
		-lcuresv -o $@
$(IT)/linked_badorder: tests/integration/linked.c $(O)/libcuresv.so $(SIM_LINKS) | $(IT)
	$(IT_CC) -Ishim -Wl,--as-needed $< -L$(O) -Wl,-rpath,$(abspath $(O)) -lcuresv \
		-L$(SIM_DIR) -lcudart -o $@
# A .cu program built with nvcc three ways: against the simulated runtime (-cudart shared, and
# -cudart none with its archive) and with nvcc's default static runtime, which the simulated driver
# cannot serve. Built only where nvcc is (run.py skips those cases elsewhere, saying why).
NVCC ?= $(CUDA_HOME)/bin/nvcc
NVCC_PROGS := $(if $(wildcard $(NVCC)),$(addprefix $(IT)/,nvcc_shared nvcc_none nvcc_static))
$(IT)/nvcc_shared: tests/integration/nvcc_host.cu | $(IT)
	$(NVCC) -cudart shared $< -o $@
$(IT)/nvcc_none: tests/integration/nvcc_host.cu $(SIM_LIBCUDART_STATIC) | $(IT)
	$(NVCC) -cudart none $< $(SIM_LIBCUDART_STATIC) -ldl -o $@
$(IT)/nvcc_static: tests/integration/nvcc_host.cu | $(IT)
	$(NVCC) $< -o $@
$(IT):
	mkdir -p $@

# The programs are built once, plain; a sanitized shim is preloaded behind its runtime.
IT_BIN := $(BUILD)/plain/it
SAN_RUNTIME := $(strip $(if $(filter asan,$(VARIANT)),$(shell $(CC) -print-file-name=libasan.so),\
	$(if $(filter tsan,$(VARIANT)),$(shell $(CC) -print-file-name=libtsan.so))))

check-integration: $(O)/libcuresv.so sim
	$(MAKE) VARIANT=plain $(subst $(IT),$(IT_BIN),$(IT_PROGS) $(NVCC_PROGS))
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
	LD_LIBRARY_PATH=$(abspath $(SIM_DIR)):$(abspath $(IT_BIN)) python3 tests/integration/run.py \
		--lib $(O)/libcuresv.so --bin $(IT_BIN) --stack sim \
		$(if $(SAN_RUNTIME),--sanitizer-runtime $(SAN_RUNTIME))
	$(if $(filter plain,$(VARIANT)),$(PRIVILEGED))

# The cases that need root (a set-user-ID program, a full filesystem): each says SKIPPED where it
# cannot run. Plain shim only: the loader preloads no sanitizer runtime into a set-user-ID program.
PRIVILEGED := python3 tests/integration/privileged.py --lib $(O)/libcuresv.so --sim $(SIM_DIR) \
	--bin $(IT_BIN) --src tests/integration --cc "$(IT_CC)"

# Shared pools (CURESV_POOL): members of one pool under stress, SIGKILL, pid reuse and pid
# namespaces, hundreds joining at once and the bound of members, permissions, torn and hostile
# files, CURESV_MEMINFO=budget, observe mode, declarations and transfers (tests/integration/pool.py,
# which reads the pool file by the offsets pool_layout prints). POOL_ARGS adds the driver's options
# (--seconds for the stress, a case's name).
POOL_PROGS := $(addprefix $(IT_BIN)/,pool_layout pool_stress pool_proc)
# Under ASan: every case but the hundreds of processes (joining, bound), the stress for 5 s.
POOL_ASAN_ARGS := --seconds 5 threads release observe declare meminfo hostile permissions pid stress
$(IT)/pool_layout: tests/integration/pool_layout.c core/pool/pool.h | $(IT)
	$(IT_CC) -D_GNU_SOURCE -Icore $< -o $@

check-pool: $(O)/libcuresv.so sim
	$(MAKE) VARIANT=plain $(POOL_PROGS)
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
	LD_LIBRARY_PATH=$(abspath $(SIM_DIR)) python3 tests/integration/pool.py \
		--lib $(O)/libcuresv.so --bin $(IT_BIN) \
		$(if $(SAN_RUNTIME),--sanitizer-runtime $(SAN_RUNTIME)) $(POOL_ARGS)

# ---- the drift soak: random operations of every family racing control calls, exact books ---------
# Built once, plain; run under $(O)'s shim (a sanitized one behind its runtime), observe and enforce.
OPS ?= 1000000
THREADS ?= 16
# make test's run under the TSan shim, which is 20 to 40 times slower than the plain one
TSAN_OPS ?= 200000
SOAK_BIN := $(BUILD)/plain/soak/soak
SOAK_SRC := tests/soak/soak.c tests/soak/families.c

$(SOAK_BIN): $(SOAK_SRC) tests/soak/soak.h core/curesv.h $(CORE_HDR) $(SIM_LINKS)
	@mkdir -p $(@D)
	$(IT_CC) -Wall -Wextra -Ishim -Icore $(SOAK_SRC) $(IT_DYN) -ldl -o $@

soak: $(O)/libcuresv.so sim
	$(MAKE) VARIANT=plain $(SOAK_BIN)
	LD_LIBRARY_PATH=$(abspath $(SIM_DIR)) python3 tests/soak/run.py --lib $(O)/libcuresv.so \
		--bin $(SOAK_BIN) --ops $(OPS) --threads $(THREADS) \
		$(if $(SAN_RUNTIME),--sanitizer-runtime $(SAN_RUNTIME))

# ---- installing ---------------------------------------------------------------------------------------
PREFIX ?= /usr/local
DESTDIR ?=
BINDIR ?= $(PREFIX)/bin
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
MANDIR ?= $(PREFIX)/share/man
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
PYTHONDIR ?= $(LIBDIR)/python3/dist-packages
VERSION := $(shell sed -n 's/^\#define CURESV_VERSION "\(.*\)"/\1/p' core/curesv.h)
# `man curesv_reserve` & co. open curesv(3): every function its NAME section lists.
MAN3_LINKS := $(shell sed -n '/^\.SH NAME/,/\\-/{/^\.SH/d;s/\\-.*//;s/,/ /g;p}' scripts/man/curesv.3)
# The scripts that read curesv's output, installed beside the launcher (curesv-top loads
# curesv-stat from its own folder).
TOOLS := curesv-plot curesv-merge curesv-export curesv-stat curesv-top
# The man pages: the launcher's and one per tool, the API's, and the formats'.
MAN1 := curesv $(TOOLS)
INSTALLED := $(BINDIR)/curesv $(TOOLS:%=$(BINDIR)/%) $(LIBDIR)/libcuresv.so $(INCLUDEDIR)/curesv.h \
	$(PKGCONFIGDIR)/curesv.pc $(MAN1:%=$(MANDIR)/man1/%.1) $(MANDIR)/man3/curesv.3 \
	$(MAN3_LINKS:%=$(MANDIR)/man3/%.3) $(MANDIR)/man5/curesv-report.5 $(PYTHONDIR)/curesv.py \
	$(PYTHONDIR)/curesv_pytest.py
# Paths under PREFIX are written relative to it, so pkg-config --define-prefix can move them.
pc_path = $(patsubst $(PREFIX)/%,$${prefix}/%,$(1))

# The files that name install folders are written at each install: PREFIX may differ from the last.
# The man3 names are symbolic links, not .so requests, which man -l resolves against the current folder.
install:
	$(MAKE) VARIANT=plain $(BUILD)/plain/libcuresv.so
	printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$(call pc_path,$(LIBDIR))' \
		'includedir=$(call pc_path,$(INCLUDEDIR))' '' 'Name: curesv' \
		'Description: origin-attributed CUDA memory reservations: the control API of libcuresv.so' \
		'Version: $(VERSION)' 'Cflags: -I$${includedir}' 'Libs: -L$${libdir} -lcuresv' \
		> $(BUILD)/curesv.pc
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) \
		$(DESTDIR)$(PKGCONFIGDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man3 \
		$(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(PYTHONDIR)
	install -m 755 $(BUILD)/plain/libcuresv.so $(DESTDIR)$(LIBDIR)/libcuresv.so
	sed -e 's|^installed_lib=$$|installed_lib=$(LIBDIR)/libcuresv.so|' \
		-e 's|^installed_pydir=$$|installed_pydir=$(PYTHONDIR)|' scripts/curesv > $(BUILD)/curesv.sh
	install -m 755 $(BUILD)/curesv.sh $(DESTDIR)$(BINDIR)/curesv
	sed -e 's|^INSTALLED_LIB = ""$$|INSTALLED_LIB = "$(LIBDIR)/libcuresv.so"|' scripts/curesv-stat \
		> $(BUILD)/curesv-stat.py
	install -m 755 $(filter-out scripts/curesv-stat,$(TOOLS:%=scripts/%)) $(DESTDIR)$(BINDIR)/
	install -m 755 $(BUILD)/curesv-stat.py $(DESTDIR)$(BINDIR)/curesv-stat
	install -m 644 core/curesv.h $(DESTDIR)$(INCLUDEDIR)/curesv.h
	install -m 644 $(BUILD)/curesv.pc $(DESTDIR)$(PKGCONFIGDIR)/curesv.pc
	install -m 644 $(MAN1:%=scripts/man/%.1) $(DESTDIR)$(MANDIR)/man1/
	install -m 644 scripts/man/curesv.3 $(DESTDIR)$(MANDIR)/man3/curesv.3
	install -m 644 scripts/man/curesv-report.5 $(DESTDIR)$(MANDIR)/man5/curesv-report.5
	for f in $(MAN3_LINKS); do ln -sfn curesv.3 $(DESTDIR)$(MANDIR)/man3/$$f.3; done
	install -m 644 scripts/curesv.py $(DESTDIR)$(PYTHONDIR)/curesv.py
	sed -e 's|^INSTALLED_LAUNCHER = ""$$|INSTALLED_LAUNCHER = "$(BINDIR)/curesv"|' \
		scripts/curesv_pytest.py > $(BUILD)/curesv_pytest.py
	install -m 644 $(BUILD)/curesv_pytest.py $(DESTDIR)$(PYTHONDIR)/curesv_pytest.py

uninstall:
	rm -f $(addprefix $(DESTDIR),$(INSTALLED))

# make install into a staging folder, then use what it installed (tests/integration/check_install.py).
check-install: $(O)/libcuresv.so sim
	$(MAKE) VARIANT=plain $(IT_BIN)/handoff $(IT_BIN)/live_hold
	LD_LIBRARY_PATH=$(abspath $(SIM_DIR)) python3 tests/integration/check_install.py \
		--bin $(IT_BIN) --sim $(SIM_DIR)

# A shared pool's member driven line by line (tests/integration/pool_member.c): the pool's own
# code, no CUDA stack, for the readers' tests.
$(IT)/pool_member: tests/integration/pool_member.c $(O)/libcuresv_core.a | $(IT)
	$(CC) $(CFLAGS_ALL) $< $(O)/libcuresv_core.a $(BT_LIBS) $(LDFLAGS_ALL) -o $@

# The scripts that read curesv's output (curesv-plot, curesv-merge, curesv-export), on output made
# under the shim; curesv-stat --pool and curesv-top's pools on pools of driven members.
check-tools: $(O)/libcuresv.so sim
	$(MAKE) VARIANT=plain $(IT_BIN)/handoff $(IT_BIN)/timelines $(IT_BIN)/stress $(IT_BIN)/pipeline \
		$(IT_BIN)/exit_status $(IT_BIN)/streams $(IT_BIN)/orphans $(IT_BIN)/leak_sites \
		$(IT_BIN)/pool_member
	LD_LIBRARY_PATH=$(abspath $(SIM_DIR)) python3 tests/integration/tools.py \
		--lib $(O)/libcuresv.so --bin $(IT_BIN)
	LD_LIBRARY_PATH=$(abspath $(SIM_DIR)) python3 tests/integration/export.py \
		--lib $(O)/libcuresv.so --bin $(IT_BIN)
	python3 tests/integration/pool_read.py --lib $(O)/libcuresv.so --bin $(IT_BIN)

# The live books (CURESV_LIVE): curesv-stat and curesv-top on programs that run while they read
# them (tests/integration/live.py; curesv-top in a tmux terminal).
check-live: $(O)/libcuresv.so sim
	$(MAKE) VARIANT=plain $(IT_BIN)/live_hold $(IT_BIN)/live_fork $(IT_BIN)/live_fds
	LD_LIBRARY_PATH=$(abspath $(SIM_DIR)) python3 tests/integration/live.py \
		--lib $(O)/libcuresv.so --bin $(IT_BIN)

# The documentation: README.md's commands run on the simulated stack, its output blocks checked
# against what they print; the man pages render without a warning and name every option, variable
# and metric (tests/integration/docs.py; HACKING.md says how README's blocks are marked).
check-docs: $(O)/libcuresv.so sim
	$(MAKE) VARIANT=plain $(IT_BIN)/live_hold
	python3 tests/integration/docs.py

# The pytest plugin (pytest -p curesv): pytest's pytester runs small suites through it under the
# launcher, on the simulated stack (tests/pytest). Debian's python3-pytest lives in
# /usr/lib/python3/dist-packages, where a python3 of its own (pyenv) does not look: added then.
check-pytest: $(O)/libcuresv.so sim
	pypath=$(abspath scripts); python3 -c 'import pytest' 2>/dev/null || \
		pypath=$$pypath:/usr/lib/python3/dist-packages; \
	PYTHONPATH=$$pypath CURESV_LIB=$(abspath $(O)/libcuresv.so) CUDA_SIM_DEVICES=2 \
	LD_LIBRARY_PATH=$(abspath $(SIM_DIR)) scripts/curesv --no-report -- \
		python3 -m pytest -p pytester -p no:cacheprovider -q tests/pytest $(PYTEST_ARGS)

# The catalogue of hazards (tests/integration/hazards.py; its table is tests/HAZARDS.md): each
# feature that touches files, descriptors or signals, run through each hazard a preloaded library
# meets, against the same program without curesv. Cases that need root say SKIPPED without it.
$(IT)/hazard: tests/integration/hazard.c $(SIM_LINKS) | $(IT)
	$(IT_CC) $< $(IT_DYN) -ldl -o $@
$(IT)/seccomp_run: tests/integration/seccomp_run.c | $(IT)
	$(IT_CC) $< -o $@

check-hazards: $(O)/libcuresv.so sim
	$(MAKE) VARIANT=plain $(IT_BIN)/hazard $(IT_BIN)/seccomp_run
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
	LD_LIBRARY_PATH=$(abspath $(SIM_DIR)) python3 tests/integration/hazards.py \
		--lib $(O)/libcuresv.so --bin $(IT_BIN) \
		$(if $(SAN_RUNTIME),--sanitizer-runtime $(SAN_RUNTIME)) $(HAZARDS_ARGS)

# ---- the demo ---------------------------------------------------------------------------------------
demo: deps-build
	$(MAKE) VARIANT=plain $(BUILD)/plain/libcuresv.so $(BUILD)/plain/it/handoff
	scripts/demo

# ---- everything ---------------------------------------------------------------------------------------
deps:
	@scripts/install-deps test

deps-build:
	@scripts/install-deps build

# The core's layers: no include cycle between its modules, nothing from shim/ (HACKING.md, "How curesv
# is built").
check-layers:
	python3 tests/layers/check_layers.py

test: deps
	$(MAKE) check-layers
	$(MAKE) VARIANT=plain check-unit check-integration check-install check-tools check-live \
		check-docs check-pytest check-hazards check-pool sim-selftest soak
	$(MAKE) VARIANT=asan check-unit check-integration check-hazards soak
	$(MAKE) VARIANT=asan check-pool POOL_ARGS="$(POOL_ASAN_ARGS)"
	$(MAKE) VARIANT=tsan check-unit check-integration check-hazards
	$(MAKE) VARIANT=tsan soak OPS=$(TSAN_OPS)
	$(MAKE) -j2 fuzz

# ---- fuzzing: libFuzzer harnesses over core/, built with clang, ASan and UBSan --------------------------
# Each runs FUZZ_RUNS inputs from its seeds (tests/fuzz/seeds/NAME) and the corpus it grew before
# (build/fuzz/corpus-NAME); an input that fails an oracle, or runs past 60 s, is saved in build/fuzz/.
# FUZZ_ARGS adds libFuzzer options (e.g. FUZZ_ARGS=-max_total_time=600).
FUZZ_CC ?= clang
FUZZ_RUNS ?= 100000
FUZZ := $(BUILD)/fuzz
FUZZERS := config report stat suppressions pool
FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE -g -O1 -pthread -Icore -Ishim \
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all

$(FUZZ)/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/oracles.h tests/utf8_reference.h $(CORE_SRC) $(CORE_HDR) Makefile
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $< $(CORE_SRC) -o $@

# One run per harness, so that make -j2 fuzz runs both at once (not .PHONY: make would not look
# for their pattern rule). The harnesses are kept, not removed as intermediate files.
fuzz: $(FUZZERS:%=fuzz-%) fuzz-scripts
.SECONDARY: $(FUZZERS:%=$(FUZZ)/fuzz_%)

# The readers of curesv-plot and curesv-merge, mutated inputs from tests/fuzz/seeds/{plot,merge}
# (tests/fuzz/scripts_fuzz.py: Python's standard library, a fixed seed, failing inputs saved in
# build/fuzz/). About a minute at SCRIPTS_FUZZ_RUNS inputs per script.
SCRIPTS_FUZZ_RUNS ?= 2000
.PHONY: fuzz-scripts
fuzz-scripts:
	@mkdir -p $(FUZZ)
	@python3 tests/fuzz/scripts_fuzz.py --runs $(SCRIPTS_FUZZ_RUNS) --out $(FUZZ) \
		>$(FUZZ)/scripts.log 2>&1 || { tail -n 40 $(FUZZ)/scripts.log; \
		echo "scripts_fuzz failed (all of it: $(FUZZ)/scripts.log)"; exit 1; }
	@tail -n 3 $(FUZZ)/scripts.log

# fuzz_stat's inputs each read a whole report out of an 85 MiB live file: a fifth as many.
FUZZ_RUNS_stat ?= $(shell expr $(FUZZ_RUNS) / 5)
# fuzz_pool's each read a 2.7 MiB pool file, a copy of it where it is cut short: a fifth as many.
FUZZ_RUNS_pool ?= $(shell expr $(FUZZ_RUNS) / 5)
# fuzz_report's inputs each write a whole report (text and JSON) of an engine they fill: half as
# many, about 5 minutes on one core, so that make test stays well inside its time on 2 cores.
FUZZ_RUNS_report ?= $(shell expr $(FUZZ_RUNS) / 2)

fuzz-%: $(FUZZ)/fuzz_%
	@mkdir -p $(FUZZ)/corpus-$*
	@$(FUZZ)/fuzz_$* -runs=$(or $(FUZZ_RUNS_$*),$(FUZZ_RUNS)) -timeout=60 -artifact_prefix=$(FUZZ)/ \
		$(if $(wildcard tests/fuzz/$*.dict),-dict=tests/fuzz/$*.dict) $(FUZZ_ARGS) \
		$(FUZZ)/corpus-$* tests/fuzz/seeds/$* >$(FUZZ)/$*.log 2>&1 || \
		{ tail -n 40 $(FUZZ)/$*.log; echo "fuzz_$* failed (all of it: $(FUZZ)/$*.log)"; exit 1; }
	@echo "fuzz_$*: $$(grep -a '^Done' $(FUZZ)/$*.log)"

bench: deps-build
	$(MAKE) VARIANT=plain $(BUILD)/plain/table_bench $(BUILD)/plain/trace_bench \
		$(BUILD)/plain/alloc_bench $(BUILD)/plain/libspin_shim.so $(BUILD)/plain/libcuresv.so \
		$(BUILD)/plain/libcuresv-selftime.so sim $(BUILD)/plain/it/live_fork
	LD_LIBRARY_PATH=$(abspath $(SIM_DIR)) scripts/bench --stack sim --bin $(BUILD)/plain

# The table's peers are C++ designs (std::unordered_map, std::map): written in C++.
CXX ?= c++
$(O)/tests/bench/peers.o: tests/bench/peers.cc tests/bench/peers.h Makefile
	@mkdir -p $(@D)
	$(CXX) -std=c++17 -O2 -g -pthread -c $< -o $@

$(O)/table_bench: tests/bench/table_bench.c $(O)/tests/bench/peers.o $(O)/libcuresv_core.a
	$(CC) $(CFLAGS_ALL) -Itests/bench $^ $(BT_LIBS) $(LDFLAGS_ALL) -lstdc++ -o $@

$(O)/trace_bench: tests/bench/trace_bench.c $(O)/libcuresv_core.a
	$(CC) $(CFLAGS_ALL) $^ $(BT_LIBS) $(LDFLAGS_ALL) -o $@

$(O)/alloc_bench: tests/bench/alloc_bench.c $(SIM_LINKS)
	@mkdir -p $(@D)
	$(IT_CC) $< $(IT_DYN) -o $@

$(O)/libspin_shim.so: tests/bench/spin_shim.c
	@mkdir -p $(@D)
	$(IT_CC) -fPIC -shared $< -ldl -o $@

clean:
	rm -rf $(BUILD)

-include $(CORE_OBJ:.o=.d) $(UNIT_OBJ:.o=.d) $(SHIM_OBJ:.o=.d) $(O)/selftime/shim/runtime.d
