# FMHA_v2: builds bin/fmha.exe from src/ and the kernels that setup.py generated.
#
#   python3 setup.py && make -j      build (generated/makefile lists kernels and -gencode flags)
#   make deps                        pip requirements, and ccache when missing
#   make list                        the kernels this build contains
#   make clean | make distclean      remove obj/ bin/ | and generated/ too
#
# Overridable: NVCC, NVCC_FLAGS, PYTHON, USE_CCACHE=1 (environment or command line).
# Objects do not depend on NVCC_FLAGS: after changing it, make clean.

NVCC ?= nvcc
NVCC_FLAGS ?= -O3 -lineinfo
PYTHON ?= python3

GEN_DIR := generated
OBJ_DIR := obj
BIN_DIR := bin
FMHA_EXE := $(BIN_DIR)/fmha.exe

# What the code needs whatever NVCC_FLAGS says. --expt-relaxed-constexpr lets device code
# call constexpr helpers (tile arithmetic) that are not marked __device__.
BASE_FLAGS := -std=c++17 -Isrc --expt-relaxed-constexpr
# -MMD -MP: each object lists the headers it includes, so editing a header rebuilds exactly
# its users and deleting one does not break the build.
DEP_FLAGS = -MMD -MP -MF $(@:.o=.d)

# Source path -> object path: obj/ mirrors the source tree. generated/makefile uses it too.
obj = $(patsubst %,$(OBJ_DIR)/%.o,$(basename $(1)))

.DEFAULT_GOAL := all
.SUFFIXES:
.DELETE_ON_ERROR:
.PHONY: all list deps clean distclean

# Goals that must work before setup.py ran and before ccache is installed.
SETUP_GOALS := deps clean distclean
BUILDING := $(filter-out $(SETUP_GOALS),$(or $(MAKECMDGOALS),all))

ifeq ($(wildcard $(GEN_DIR)/makefile),)

all list $(FMHA_EXE):
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

# Wildcards, not lists: new driver or reference files are picked up without editing this.
HAND_SRCS := $(wildcard src/*.cpp src/*.cu src/reference/*.cpp src/reference/*.cu)
SRCS := $(HAND_SRCS) $(KERNEL_SRCS) $(GEN_DIR)/registry.cpp
OBJS := $(call obj,$(SRCS))

# Hand-written device code runs wherever the driver runs; kernels got their family's
# GENCODE from generated/makefile.
$(call obj,$(filter %.cu,$(HAND_SRCS))): GENCODE := $(SRC_GENCODE)
# The arch list is in no source file: this stamp is how a new list reaches make.
$(call obj,$(filter %.cu,$(SRCS))): $(ARCH_STAMP)

all: $(FMHA_EXE)

$(FMHA_EXE): $(OBJS)
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_FLAGS) -cudart static -o $@ $^

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

deps:
	$(PYTHON) -m pip install -r requirements.txt
	@if command -v ccache >/dev/null 2>&1; then \
	    echo "ccache: $$(command -v ccache)"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update && apt-get install -y ccache; \
	else \
	    echo "ccache is missing and this is not root with apt-get: install it yourself (only USE_CCACHE=1 needs it)"; \
	fi

clean:
	rm -rf $(OBJ_DIR) $(BIN_DIR)

# Also the generated sources: the next build needs python3 setup.py again.
distclean: clean
	rm -rf $(GEN_DIR)
