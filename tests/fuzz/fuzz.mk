# tests/fuzz/fuzz.mk: libFuzzer targets for qgate's parsers (see tests/fuzz/README.md).
# Included by the main Makefile, or used on its own from the project root:
#   make -f tests/fuzz/fuzz.mk fuzz-smoke
#   make -f tests/fuzz/fuzz.mk fuzz FUZZ_SECONDS=600
# Self-contained: it uses no variable of the main Makefile, and its own all start with FUZZ_.
#
#   fuzz        every target for FUZZ_SECONDS (default 60) on build/fuzz/corpus/<t>/, then one
#               summary line per target with libFuzzer's stat::number_of_executed_units
#   fuzz-smoke  every regression input of tests/fuzz/regress/<t>/ once, then every target
#               briefly (FUZZ_SMOKE_SECONDS, default 5, at most FUZZ_SMOKE_RUNS executions);
#               fails if anything crashes
#   fuzz-bins   just build build/fuzz/fuzz_<t>
#
# Corpora: build/fuzz/corpus/<t>/ is seeded by tests/fuzz/seed.sh (real-q vectors, hand-written
# inputs, tests/fuzz/regress/<t>/) and receives the new inputs libFuzzer finds; nothing is ever
# written under tests/.
#
# Crashes: libFuzzer writes the input that crashed (or leaked, or timed out) to
# build/fuzz/crash-<t>-crash-<sha1> (-artifact_prefix). Reproduce with
#   build/fuzz/fuzz_<t> build/fuzz/crash-<t>-crash-<sha1>
# and once the bug is fixed, copy that file into tests/fuzz/regress/<t>/ (kept in git) under a
# name that says what it was: fuzz-smoke replays every file there, so the bug stays fixed.

FUZZ_SAVED_GOAL := $(.DEFAULT_GOAL)
FUZZ_MK := $(lastword $(MAKEFILE_LIST))
FUZZ_STANDALONE := $(if $(filter 1,$(words $(MAKEFILE_LIST))),1,)

FUZZ_TARGETS := handshake frame codec kzip config proxy auth sim

FUZZ_SECONDS ?= 60
FUZZ_SMOKE_SECONDS ?= 5
FUZZ_SMOKE_RUNS ?= 2000000
FUZZ_TIMEOUT ?= 10
FUZZ_CC ?= clang
FUZZ_DIR := build/fuzz
FUZZ_CORPUS := $(FUZZ_DIR)/corpus
FUZZ_REGRESS := tests/fuzz/regress
FUZZ_INC := $(patsubst %,-I%,$(wildcard src/*/))
FUZZ_CFLAGS := -std=c17 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined \
               -fno-sanitize-recover=undefined $(FUZZ_INC) -Wall -Wextra -Werror

# The project sources each fuzzer is built with (compiled straight into it, with the fuzzer's
# instrumentation; config.c needs log.c and net.c).
FUZZ_SRC_handshake := src/kdb/kipc.c
FUZZ_SRC_frame     := src/kdb/kipc.c src/kdb/kcodec.c src/kdb/kvalidate.c
FUZZ_SRC_codec     := src/kdb/kcodec.c src/kdb/kvalidate.c src/kdb/kipc.c
FUZZ_SRC_kzip      := src/kdb/kzip.c src/kdb/kipc.c
FUZZ_SRC_config    := src/base/config.c src/base/log.c src/base/net.c
FUZZ_SRC_proxy     := src/base/net.c src/base/log.c
FUZZ_SRC_auth      := src/base/auth.c src/base/config.c src/base/log.c src/base/net.c
FUZZ_SRC_sim       := $(filter-out src/gateway/main.c,$(wildcard src/*/*.c)) $(filter-out tests/sim/main.c,$(wildcard tests/sim/*.c))
# Extra flags per target (the simulation links the whole gateway, pools included).
FUZZ_XFLAGS_sim    := -Itests/sim -pthread -lm

# Longest input libFuzzer makes for each target (-max_len).
FUZZ_MAXLEN_handshake := 2048
FUZZ_MAXLEN_frame     := 8192
FUZZ_MAXLEN_codec     := 65536
FUZZ_MAXLEN_kzip      := 65536
FUZZ_MAXLEN_config    := 16384
FUZZ_MAXLEN_proxy     := 4096
FUZZ_MAXLEN_auth      := 16384
FUZZ_MAXLEN_sim       := 8192

FUZZ_BINS := $(FUZZ_TARGETS:%=$(FUZZ_DIR)/fuzz_%)
FUZZ_HDRS := $(wildcard src/*/*.h) $(wildcard tests/sim/*.h) tests/fuzz/check.h

.PHONY: fuzz fuzz-smoke fuzz-bins fuzz-deps fuzz-seed

fuzz-bins: $(FUZZ_BINS)

# clang and libclang-rt-14-dev (libFuzzer's runtime), installed with apt-get when missing.
fuzz-deps:
	@FUZZ_CC=$(FUZZ_CC) bash tests/fuzz/deps.sh

fuzz-seed: fuzz-deps
	@FUZZ_CC=$(FUZZ_CC) bash tests/fuzz/seed.sh

define FUZZ_RULE
$(FUZZ_DIR)/fuzz_$(1): tests/fuzz/fuzz_$(1).c $(FUZZ_SRC_$(1)) $(FUZZ_HDRS) $(FUZZ_MK) | fuzz-deps
	@mkdir -p $(FUZZ_DIR)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $$@ tests/fuzz/fuzz_$(1).c $(FUZZ_SRC_$(1)) $(FUZZ_XFLAGS_$(1))
endef
$(foreach t,$(filter-out sim,$(FUZZ_TARGETS)),$(eval $(call FUZZ_RULE,$(t))))

# The simulation's fuzzer is the whole gateway: its files compiled one by one (make -j compiles
# them side by side), with the fuzzer's coverage and no libFuzzer main until the link.
FUZZ_OBJ_sim := $(patsubst %.c,$(FUZZ_DIR)/obj/%.o,$(FUZZ_SRC_sim))
$(FUZZ_DIR)/obj/%.o: %.c $(FUZZ_HDRS) $(FUZZ_MK) | fuzz-deps
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(subst -fsanitize=fuzzer,-fsanitize=fuzzer-no-link,$(FUZZ_CFLAGS)) -Itests/sim -c -o $@ $<
$(FUZZ_DIR)/fuzz_sim: tests/fuzz/fuzz_sim.c $(FUZZ_OBJ_sim) $(FUZZ_HDRS) $(FUZZ_MK) | fuzz-deps
	@mkdir -p $(FUZZ_DIR)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ tests/fuzz/fuzz_sim.c $(FUZZ_OBJ_sim) $(FUZZ_XFLAGS_sim)

# fuzz_run NAME MAXLEN LIMITS...: one libFuzzer run on the target's corpus, its output in
# build/fuzz/<NAME>.log; prints the tail of the log on failure; appends a summary line.
FUZZ_SH_RUN = fuzz_run() { \
	t=$$1; ml=$$2; shift 2; log=$(FUZZ_DIR)/fuzz-$$t.log; \
	if $(FUZZ_DIR)/fuzz_$$t "$$@" -max_len=$$ml -timeout=$(FUZZ_TIMEOUT) -print_final_stats=1 \
	    -artifact_prefix=$(FUZZ_DIR)/crash-$$t- $(FUZZ_CORPUS)/$$t >$$log 2>&1; then st=ok; \
	else st=FAILED; fail=1; echo "---- fuzz_$$t FAILED; end of $$log:"; tail -n 40 $$log; \
	    ls -1 $(FUZZ_DIR)/crash-$$t-* 2>/dev/null | sed 's/^/---- input: /'; fi; \
	execs=$$(sed -n 's/^stat::number_of_executed_units: *//p' $$log | tail -n 1); \
	files=$$(find $(FUZZ_CORPUS)/$$t -type f | wc -l); \
	printf 'fuzz_%-10s %-6s executions: %-10s corpus: %s files\n' $$t $$st "$${execs:-?}" $$files >>$(FUZZ_DIR)/summary.txt; \
	}

fuzz: fuzz-seed $(FUZZ_BINS)
	@fail=0; : >$(FUZZ_DIR)/summary.txt; $(FUZZ_SH_RUN); \
	for spec in $(foreach t,$(FUZZ_TARGETS),$(t):$(FUZZ_MAXLEN_$(t))); do \
	    t=$${spec%%:*}; echo "== fuzz_$$t: $(FUZZ_SECONDS) s (log: $(FUZZ_DIR)/fuzz-$$t.log)"; \
	    fuzz_run $$t $${spec#*:} -max_total_time=$(FUZZ_SECONDS); \
	done; \
	echo "== fuzz summary ($(FUZZ_SECONDS) s per target)"; cat $(FUZZ_DIR)/summary.txt; \
	if [ $$fail -ne 0 ]; then echo "fuzz: a target failed; see the inputs above (build/fuzz/crash-*)"; exit 1; fi

fuzz-smoke: fuzz-seed $(FUZZ_BINS)
	@fail=0; : >$(FUZZ_DIR)/summary.txt; $(FUZZ_SH_RUN); \
	for t in $(FUZZ_TARGETS); do \
	    files=$$(find $(FUZZ_REGRESS)/$$t -type f 2>/dev/null | sort); \
	    if [ -z "$$files" ]; then echo "== fuzz_$$t: no regression inputs in $(FUZZ_REGRESS)/$$t"; continue; fi; \
	    echo "== fuzz_$$t: replaying $$(echo "$$files" | wc -l) regression inputs of $(FUZZ_REGRESS)/$$t"; \
	    if ! $(FUZZ_DIR)/fuzz_$$t $$files >$(FUZZ_DIR)/regress-$$t.log 2>&1; then \
	        fail=1; echo "---- regression input of $$t crashed; end of $(FUZZ_DIR)/regress-$$t.log:"; \
	        tail -n 40 $(FUZZ_DIR)/regress-$$t.log; fi; \
	done; \
	for spec in $(foreach t,$(FUZZ_TARGETS),$(t):$(FUZZ_MAXLEN_$(t))); do \
	    t=$${spec%%:*}; echo "== fuzz_$$t: smoke, $(FUZZ_SMOKE_SECONDS) s or $(FUZZ_SMOKE_RUNS) executions"; \
	    fuzz_run $$t $${spec#*:} -max_total_time=$(FUZZ_SMOKE_SECONDS) -runs=$(FUZZ_SMOKE_RUNS); \
	done; \
	echo "== fuzz-smoke summary"; cat $(FUZZ_DIR)/summary.txt; \
	if [ $$fail -ne 0 ]; then echo "fuzz-smoke: FAILED"; exit 1; fi; echo "fuzz-smoke: all passed"

# Keep the including Makefile's default goal; on its own, the default is to build the fuzzers.
ifeq ($(FUZZ_STANDALONE),1)
.DEFAULT_GOAL := fuzz-bins
else
.DEFAULT_GOAL := $(FUZZ_SAVED_GOAL)
endif
