# FMHA_v2: builds lib/libfmha.so (the kernels that setup.py generated, the registry and the
# C API of include/fmha.h, src/api/) and bin/fmha.exe (the driver, src/, linked to it).
#
#   python3 setup.py && make -j      build both (generated/makefile lists kernels and -gencode flags);
#                                    a bare -j runs as many nvcc jobs as the cores and memory
#                                    hold (JOBS overrides), make -j N runs N
#   make deps                        pip requirements, and ccache and GoogleTest when missing
#   make lib                         lib/libfmha.so alone
#   make list                        the kernels this build contains
#   make test | make check           build bin/unit_tests (tests/unit/, GoogleTest) | and run it
#   make clean | make distclean      remove obj/ bin/ lib/ | and generated/ too
#
# Overridable: NVCC, NVCC_FLAGS, LINEINFO=1, JOBS, PYTHON, USE_CCACHE=1, GTEST_ROOT, UNIT_FLAGS
# (environment or command line). A change of NVCC_FLAGS or LINEINFO rebuilds every object.

NVCC ?= nvcc
NVCC_FLAGS ?= -O3
PYTHON ?= python3

# LINEINFO=1: source lines in the device code, for ncu and compute-sanitizer reports. Off by
# default: the line tables are most of a cubin (bench/NOTES.md §38).
lineinfo_flag := $(shell echo '$(LINEINFO)' | tr A-Z a-z)
ifneq ($(filter-out 0 1 true false on off,$(lineinfo_flag)),)
  $(error LINEINFO=$(LINEINFO): expected one of 0/1/true/false/on/off)
endif
ifneq ($(filter 1 true on,$(lineinfo_flag)),)
  NVCC_FLAGS += -lineinfo
endif

# A bare `make -j` would start every nvcc at once (150+ jobs of up to ~0.5 GB each: a 24 GB
# machine runs out of memory). It re-runs make with -j$(JOBS): one job a core, at most one a
# GiB of available memory. make -j N is left alone. Make 4.3 shows -j only to recipes, so the
# check sits in one.
JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); \
    m=$$(awk '/^MemAvailable:/ {print int($$2 / 1048576)}' /proc/meminfo 2>/dev/null); \
    m=$${m:-$$n}; j=$$(( n < m ? n : m )); echo $$(( j > 0 ? j : 1 )))
bounded = $(MAKE) --no-print-directory $(if $(filter -j,$(MAKEFLAGS)),-j$(JOBS)) $(1)

GEN_DIR := generated
OBJ_DIR := obj
BIN_DIR := bin
LIB_DIR := lib
FMHA_EXE := $(BIN_DIR)/fmha.exe
FMHA_LIB := $(LIB_DIR)/libfmha.so

# What the code needs whatever NVCC_FLAGS says. --expt-relaxed-constexpr lets device code
# call constexpr helpers (tile arithmetic) that are not marked __device__; -fPIC: the
# library's objects are position-independent (the driver's too, at no cost that matters).
BASE_FLAGS := -std=c++17 -Isrc -Iinclude --expt-relaxed-constexpr -Xcompiler -fPIC
# -MMD -MP: each object lists the headers it includes, so editing a header rebuilds exactly
# its users and deleting one does not break the build.
DEP_FLAGS = -MMD -MP -MF $(@:.o=.d)

# Source path -> object path: obj/ mirrors the source tree. generated/makefile uses it too.
obj = $(patsubst %,$(OBJ_DIR)/%.o,$(basename $(1)))

.DEFAULT_GOAL := all
.SUFFIXES:
.DELETE_ON_ERROR:
.PHONY: all lib list deps clean distclean

# Goals that must work before setup.py ran and before ccache is installed.
SETUP_GOALS := deps clean distclean
BUILDING := $(filter-out $(SETUP_GOALS),$(or $(MAKECMDGOALS),all))

ifeq ($(wildcard $(GEN_DIR)/makefile),)

all lib list $(FMHA_EXE) $(FMHA_LIB):
	@echo "$(GEN_DIR)/ is missing: run python3 setup.py first" >&2; exit 1

else

include $(GEN_DIR)/makefile

# USE_CCACHE: the generated default, or the environment / command line. ccache wraps the
# whole nvcc call, so one cache entry covers the device code and the host code together.
ccache_flag := $(shell echo '$(USE_CCACHE)' | tr A-Z a-z)
ifneq ($(filter-out 0 1 true false on off,$(ccache_flag)),)
  $(error USE_CCACHE=$(USE_CCACHE): expected one of 0/1/true/false/on/off)
endif
ifneq ($(and $(BUILDING),$(filter 1 true on,$(ccache_flag))),)
  CCACHE := $(shell command -v ccache)
  ifeq ($(CCACHE),)
    $(error USE_CCACHE=$(USE_CCACHE) but ccache is not installed: run make deps)
  endif
endif
COMPILE = $(CCACHE) $(NVCC)

# Wildcards, not lists: new driver, reference or API files are picked up without editing this.
DRIVER_SRCS := $(wildcard src/*.cpp src/*.cu src/reference/*.cpp src/reference/*.cu)
API_SRCS := $(wildcard src/api/*.cpp src/api/*.cu)
HAND_SRCS := $(DRIVER_SRCS) $(API_SRCS)
LIB_SRCS := $(API_SRCS) $(KERNEL_SRCS) $(GEN_DIR)/registry.cpp
SRCS := $(DRIVER_SRCS) $(LIB_SRCS)
OBJS := $(call obj,$(SRCS))

# Hand-written device code runs wherever the driver runs; kernels got their family's
# GENCODE from generated/makefile.
$(call obj,$(filter %.cu,$(HAND_SRCS))): GENCODE := $(SRC_GENCODE)
# The backward's library file also carries the wgmma kernels (sm_90a): sm_90 becomes sm_90a
# there, and a define tells its host code that the image exists (the plan names the kernel).
bwd_comma := ,
BWD_GENCODE := $(subst arch=compute_90$(bwd_comma)code=sm_90,arch=compute_90a$(bwd_comma)code=sm_90a,$(SRC_GENCODE))
$(call obj,src/api/backward.cu): GENCODE := $(BWD_GENCODE) $(if $(findstring compute_90a,$(BWD_GENCODE)),-DFMHA_WGMMA_BWD_IMAGE)
# The arch list is in no source file: this stamp is how a new list reaches make.
$(call obj,$(filter %.cu,$(SRCS))): $(ARCH_STAMP)

all:
	+@$(call bounded,$(FMHA_LIB) $(FMHA_EXE))

lib:
	+@$(call bounded,$(FMHA_LIB))

# Objects depend on the flags they were compiled with: this stamp changes with them.
FLAGS_STAMP := $(OBJ_DIR)/nvcc_flags.stamp
ifneq ($(BUILDING),)
  $(shell mkdir -p $(OBJ_DIR) && echo '$(NVCC_FLAGS)' | cmp -s - $(FLAGS_STAMP) \
      || echo '$(NVCC_FLAGS)' > $(FLAGS_STAMP))
endif
$(OBJS): $(FLAGS_STAMP)

# The library carries its own static CUDA runtime (no libcudart.so to find at run time);
# fmha.exe finds the library next to it through its rpath ($ORIGIN/../lib).
$(FMHA_LIB): $(call obj,$(LIB_SRCS))
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_FLAGS) -shared -cudart static -o $@ $^

$(FMHA_EXE): $(call obj,$(DRIVER_SRCS)) $(FMHA_LIB)
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_FLAGS) -cudart static -o $@ $(call obj,$(DRIVER_SRCS)) -L$(LIB_DIR) -lfmha \
	    -Xlinker -rpath,'$$ORIGIN/../$(LIB_DIR)'

$(OBJ_DIR)/%.o: %.cu
	@mkdir -p $(@D)
	$(COMPILE) $(BASE_FLAGS) $(NVCC_FLAGS) $(GENCODE) $(DEP_FLAGS) -c $< -o $@

$(OBJ_DIR)/%.o: %.cpp
	@mkdir -p $(@D)
	$(COMPILE) $(BASE_FLAGS) $(NVCC_FLAGS) $(DEP_FLAGS) -c $< -o $@

list:
	@printf '%s\n' $(notdir $(basename $(KERNEL_SRCS)))

-include $(OBJS:.o=.d)

endif

# --- Device unit tests: tests/unit/ mirrors src/fmha/, one GoogleTest binary ---------------
#
# make test builds bin/unit_tests from every tests/unit/**/*.cu (gtest + gtest_main, static
# cudart); make check also runs it. It needs neither setup.py nor a GPU: without one the
# device tests skip with "no CUDA device" and the host-only tests still run.
#   -gencode: generated/makefile's SRC_GENCODE when setup.py ran (the archs fmha.exe is built
#             for), else TORCH_CUDA_ARCH_LIST parsed as setup.py parses it (default 8.0;9.0).
#   GTEST_ROOT: a GoogleTest with include/gtest/ and lib/libgtest*.a (lib/<triplet>/ too);
#             default /usr (Debian's libgtest-dev). tests/unit/pack_gtest.sh copies the
#             system's into .gtest/ for machines without it: make test GTEST_ROOT=.gtest

UNIT_DIR := tests/unit
UNIT_COMMA := ,
UNIT_BIN := $(BIN_DIR)/unit_tests
UNIT_FLAGS ?= -O2
# Sources one level below tests/unit/, like src/fmha/<layer>/.
UNIT_SRCS := $(wildcard $(UNIT_DIR)/*.cu $(UNIT_DIR)/*/*.cu)
UNIT_OBJS := $(call obj,$(UNIT_SRCS))
# Holds the unit objects' -gencode flags, rewritten only when they change: a new arch list
# rebuilds the unit tests, with or without generated/.
UNIT_STAMP := $(OBJ_DIR)/$(UNIT_DIR)/gencode.stamp

GTEST_ROOT ?= /usr
GTEST_INC := $(GTEST_ROOT)/include
GTEST_LIBDIR := $(patsubst %/,%,$(dir $(firstword $(wildcard \
    $(GTEST_ROOT)/lib/libgtest.a $(GTEST_ROOT)/lib/*/libgtest.a $(GTEST_ROOT)/lib64/libgtest.a))))
GTEST_FOUND := $(and $(wildcard $(GTEST_INC)/gtest/gtest.h),$(wildcard $(GTEST_LIBDIR)/libgtest_main.a))
# -isystem /usr/include would reorder the compiler's own system directories: only add others.
GTEST_CFLAGS := $(if $(filter /usr/include /usr/include/,$(GTEST_INC)),,-isystem $(GTEST_INC))
GTEST_LIBS := $(GTEST_LIBDIR)/libgtest_main.a $(GTEST_LIBDIR)/libgtest.a -lpthread

.PHONY: test check

ifeq ($(GTEST_FOUND),)

test check $(UNIT_BIN):
	@echo "GoogleTest not found: run make deps (or set GTEST_ROOT)" >&2; exit 1

else

# Decided only when a unit goal is asked for (the python call costs a moment).
ifneq ($(filter test check $(UNIT_BIN),$(MAKECMDGOALS)),)
  UNIT_GENCODE := $(or $(SRC_GENCODE),$(shell $(PYTHON) $(UNIT_DIR)/gencode.py))
  ifeq ($(UNIT_GENCODE),)
    $(error no -gencode flags for the unit tests: see the TORCH_CUDA_ARCH_LIST message above)
  endif
  # sm_90 as sm_90a: the wgmma (QGMMA) unit tests need the arch-specific features, and the
  # sm_90a image runs every other test on Hopper as well.
  UNIT_GENCODE := $(subst arch=compute_90$(UNIT_COMMA)code=sm_90,arch=compute_90a$(UNIT_COMMA)code=sm_90a,$(UNIT_GENCODE))
  $(shell mkdir -p $(dir $(UNIT_STAMP)) && echo '$(UNIT_GENCODE)' | cmp -s - $(UNIT_STAMP) \
      || echo '$(UNIT_GENCODE)' > $(UNIT_STAMP))
endif

test:
	+@$(call bounded,$(UNIT_BIN))

check: test
	$(UNIT_BIN)

$(UNIT_BIN): $(UNIT_OBJS)
	@mkdir -p $(@D)
	$(NVCC) -cudart static -o $@ $^ $(GTEST_LIBS)

# A static pattern rule: wins over the kernel rule above, and works without generated/.
# $(COMPILE) is ccache-wrapped when USE_CCACHE says so (only known once setup.py ran).
$(UNIT_OBJS): $(OBJ_DIR)/%.o: %.cu $(UNIT_STAMP)
	@mkdir -p $(@D)
	$(or $(COMPILE),$(NVCC)) $(BASE_FLAGS) -I$(UNIT_DIR) $(GTEST_CFLAGS) $(UNIT_FLAGS) $(UNIT_GENCODE) \
	    $(DEP_FLAGS) -c $< -o $@

-include $(UNIT_OBJS:.o=.d)

endif

deps:
	$(PYTHON) -m pip install -r requirements.txt
	@if command -v ccache >/dev/null 2>&1; then \
	    echo "ccache: $$(command -v ccache)"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update && apt-get install -y ccache; \
	else \
	    echo "ccache is missing and this is not root with apt-get: install it yourself (only USE_CCACHE=1 needs it)"; \
	fi
	@if [ -n "$(GTEST_FOUND)" ]; then \
	    echo "GoogleTest: $(GTEST_INC) $(GTEST_LIBDIR)"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update && apt-get install -y libgtest-dev; \
	else \
	    echo "GoogleTest is missing and this is not root with apt-get: install libgtest-dev or set GTEST_ROOT (only make test needs it)"; \
	fi

clean:
	rm -rf $(OBJ_DIR) $(BIN_DIR) $(LIB_DIR)

# Also the generated sources: the next build needs python3 setup.py again.
distclean: clean
	rm -rf $(GEN_DIR)
