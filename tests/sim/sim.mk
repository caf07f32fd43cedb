# SIMULATION ONLY: builds the simulated CUDA stack of tests/sim, for machines without a GPU.
#
# Included by the top Makefile, or used alone from the repository root:
#     make -f tests/sim/sim.mk sim-selftest
#     make -f tests/sim/sim.mk BUILD=build-asan SIM_EXTRA_CFLAGS=-fsanitize=address,undefined sim-selftest
#
# Reads:   CC, CUDA_HOME (default /usr/local/cuda), BUILD (default build), AR,
#          SIM_EXTRA_CFLAGS (added when compiling and linking the sim and the selftest)
# Defines: SIM_DIR              $(BUILD)/sim unless set before the include: libcuda.so.1,
#                               libcudart.so.13 (+ libcudart.so and libcuda.so links for
#                               -lcudart / -lcuda), libcudart_sim_static.a
#          SIM_CFLAGS           include flags: the CUDA headers and tests/sim (cuda_sim.h)
#          SIM_LIBCUDA, SIM_LIBCUDART, SIM_LIBCUDART_STATIC   the three products
# Targets: sim (all three), sim-selftest (build and run tests/sim/selftest.c against the shared
#          and against the static runtime), sim-clean
# Run programs built on the sim with LD_LIBRARY_PATH=$(SIM_DIR) (this machine's ld.so.conf may
# point at the real libcudart.so.13). Environment: CUDA_SIM_* (tests/sim/cuda_sim.h) and
# CUDART_SIM_LOOKUP=latest (tests/sim/cudart_sim.c).

SIM_SRC := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
_sim_standalone := $(filter 1,$(words $(MAKEFILE_LIST)))
_sim_saved_goal := $(.DEFAULT_GOAL)

ifneq ($(_sim_standalone),)
ifeq ($(origin CC),default)
CC := gcc
endif
endif
CUDA_HOME ?= /usr/local/cuda
BUILD ?= build
AR ?= ar
SIM_EXTRA_CFLAGS ?=

SIM_DIR ?= $(BUILD)/sim
SIM_CFLAGS := -I$(CUDA_HOME)/include -I$(SIM_SRC)
SIM_LIBCUDA := $(SIM_DIR)/libcuda.so.1
SIM_LIBCUDART := $(SIM_DIR)/libcudart.so.13
SIM_LIBCUDART_STATIC := $(SIM_DIR)/libcudart_sim_static.a

_sim_cflags := -std=c11 -D_GNU_SOURCE -Wall -Wextra -O2 -g -fPIC -pthread
# The sim defines the driver and runtime themselves: with this, the real headers declare every
# ABI variant (legacy, _v2, _ptsz) under its own name, so the compiler checks each definition.
_sim_internal := -D__CUDA_API_VERSION_INTERNAL
_sim_cuda_h := $(CUDA_HOME)/include/cuda.h
_sim_spy := $(SIM_DIR)/libsim_selftest_spy.so
_sim_run := LD_LIBRARY_PATH=$(abspath $(SIM_DIR))$${LD_LIBRARY_PATH:+:$$LD_LIBRARY_PATH}

.PHONY: sim sim-selftest sim-clean

sim: $(SIM_LIBCUDA) $(SIM_DIR)/libcuda.so $(SIM_LIBCUDART) $(SIM_DIR)/libcudart.so $(SIM_LIBCUDART_STATIC)

# Only reached when the headers are missing: say so instead of "No rule to make target".
$(_sim_cuda_h):
	@echo "curesv: $@ not found: the shim and the simulated CUDA stack compile against the real CUDA 13 headers; set CUDA_HOME (now '$(CUDA_HOME)')" >&2
	@exit 1

$(SIM_DIR):
	mkdir -p $@

# The driver: one object per concern (sim_internal.h is what they share).
_sim_driver_obj := $(addprefix $(SIM_DIR)/,cuda_sim.o sim_streams.o sim_vmm.o sim_graph.o)
_sim_driver_h := $(addprefix $(SIM_SRC)/,cuda_sim.h sim_internal.h sim_procs.h)

$(_sim_driver_obj): $(SIM_DIR)/%.o: $(SIM_SRC)/%.c $(_sim_driver_h) $(_sim_cuda_h) | $(SIM_DIR)
	$(CC) $(_sim_cflags) $(SIM_EXTRA_CFLAGS) $(_sim_internal) $(SIM_CFLAGS) -c $< -o $@

$(SIM_DIR)/cudart_sim.o: $(SIM_SRC)/cudart_sim.c $(_sim_cuda_h) | $(SIM_DIR)
	$(CC) $(_sim_cflags) $(SIM_EXTRA_CFLAGS) $(_sim_internal) $(SIM_CFLAGS) -c $< -o $@

$(SIM_LIBCUDA): $(_sim_driver_obj)
	$(CC) -shared -pthread $(SIM_EXTRA_CFLAGS) -Wl,-soname,libcuda.so.1 -Wl,-z,defs -o $@ $^

$(SIM_LIBCUDART): $(SIM_DIR)/cudart_sim.o $(SIM_SRC)/cudart_sim.map
	$(CC) -shared -pthread $(SIM_EXTRA_CFLAGS) -Wl,-soname,libcudart.so.13 -Wl,-z,defs \
		-Wl,--version-script,$(SIM_SRC)/cudart_sim.map -o $@ $< -ldl

$(SIM_DIR)/libcudart.so: $(SIM_LIBCUDART)
	ln -sf libcudart.so.13 $@

$(SIM_DIR)/libcuda.so: $(SIM_LIBCUDA)
	ln -sf libcuda.so.1 $@

# Same position-independent object as the shared runtime: programs link it like
# libcudart_static.a, with -ldl -pthread.
$(SIM_LIBCUDART_STATIC): $(SIM_DIR)/cudart_sim.o
	rm -f $@
	$(AR) rcs $@ $^

# ---------------------------------------------------------------- self-test

# Compiled as a client: without __CUDA_API_VERSION_INTERNAL, like any CUDA program.
_sim_selftest_obj := $(addprefix $(SIM_DIR)/,selftest.o selftest_vmm.o selftest_streams.o selftest_graph.o)
_sim_selftest_h := $(addprefix $(SIM_SRC)/,cuda_sim.h selftest.h selftest_spy.h)

$(_sim_selftest_obj): $(SIM_DIR)/%.o: $(SIM_SRC)/%.c $(_sim_selftest_h) $(_sim_cuda_h) | $(SIM_DIR)
	$(CC) $(_sim_cflags) $(SIM_EXTRA_CFLAGS) $(SIM_CFLAGS) -c $< -o $@

$(SIM_DIR)/selftest: $(_sim_selftest_obj) $(SIM_LIBCUDART) $(SIM_DIR)/libcudart.so $(SIM_LIBCUDA)
	$(CC) -pthread $(SIM_EXTRA_CFLAGS) -o $@ $(_sim_selftest_obj) -L$(SIM_DIR) -lcudart $(SIM_LIBCUDA) -ldl

$(SIM_DIR)/selftest_static: $(_sim_selftest_obj) $(SIM_LIBCUDART_STATIC) $(SIM_LIBCUDA)
	$(CC) -pthread $(SIM_EXTRA_CFLAGS) -o $@ $(_sim_selftest_obj) $(SIM_LIBCUDART_STATIC) $(SIM_LIBCUDA) -ldl

# Never sanitized: it runs inside the sanitizer runtime's own start-up (see selftest_spy.c).
$(_sim_spy): $(SIM_SRC)/selftest_spy.c $(SIM_SRC)/selftest_spy.h $(_sim_cuda_h) | $(SIM_DIR)
	$(CC) $(_sim_cflags) $(SIM_CFLAGS) -shared -o $@ $< -ldl

sim-selftest: $(SIM_DIR)/selftest $(SIM_DIR)/selftest_static $(_sim_spy)
	$(_sim_run) $(SIM_DIR)/selftest
	$(_sim_run) $(SIM_DIR)/selftest_static

sim-clean:
	rm -rf $(SIM_DIR)

# Do not take over the includer's default goal; alone, `make -f sim.mk` builds the sim.
ifneq ($(_sim_standalone),)
.DEFAULT_GOAL := sim
else
.DEFAULT_GOAL := $(_sim_saved_goal)
endif
