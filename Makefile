# qgate: kdb+ gateway. `make demo` runs the main job; `make test` builds and runs every test.
# SANITIZE=address (ASan+UBSan) or SANITIZE=thread (TSan) builds into build/asan, build/tsan.

CC      ?= gcc
SANITIZE ?=
WARN    := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wvla
# src/ is in folders by layer (tests/layering checks the order): base, kdb, jobs, core, client,
# worker, gateway; every folder is on the include path, so a header is named by its file alone.
SRC_DIRS := base kdb jobs core client worker gateway
SRC_INC  := $(SRC_DIRS:%=-Isrc/%)
CFLAGS_COMMON := -std=c17 -D_GNU_SOURCE -g -pthread $(SRC_INC) -MMD -MP $(WARN)

ifeq ($(SANITIZE),address)
B       := build/asan
SANFLAGS := -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
else ifeq ($(SANITIZE),thread)
B       := build/tsan
SANFLAGS := -O1 -fsanitize=thread -fno-omit-frame-pointer
else ifeq ($(SANITIZE),)
B       := build/rel
SANFLAGS := -O2
# the release build (make, make install, make deb) is hardened as Debian's dpkg-buildflags
# with hardening=+all would have it, plus stack-clash probes; bench-codec and qload measure the
# same with and without (docs/deployment.md). HARDEN_CFLAGS= HARDEN_LDFLAGS= turns it off.
HARDEN_CFLAGS  ?= -D_FORTIFY_SOURCE=2 -fstack-protector-strong -fstack-clash-protection -fPIE \
                  -Wformat -Werror=format-security
HARDEN_LDFLAGS ?= -fPIE -pie -Wl,-z,relro -Wl,-z,now
else
$(error SANITIZE must be empty, address or thread)
endif

CFLAGS  := $(CFLAGS_COMMON) $(SANFLAGS) $(HARDEN_CFLAGS) $(EXTRA_CFLAGS)
LDFLAGS := -pthread $(SANFLAGS) $(HARDEN_LDFLAGS)

LIB_SRC   := $(filter-out src/gateway/main.c,$(wildcard $(SRC_DIRS:%=src/%/*.c)))
LIB_OBJ   := $(LIB_SRC:%.c=$(B)/%.o)
BENCH_MAINS  := qworker qclient qsend codec gw30 qload qsoak qfan qrtt qnotify qslow qscrape qfloor
BENCH_COMMON := $(filter-out $(BENCH_MAINS:%=bench/%.c),$(wildcard bench/*.c))
BENCH_COMMON_OBJ := $(BENCH_COMMON:%.c=$(B)/%.o)
UNIT_SRC  := $(wildcard tests/unit/test_*.c)
UNIT_BIN  := $(UNIT_SRC:tests/unit/%.c=$(B)/tests/%)
BENCH_BIN := $(B)/qworker $(B)/qclient $(B)/qsend $(B)/qload $(B)/qsoak $(B)/qfan $(B)/qrtt $(B)/qnotify $(B)/bench-codec $(B)/gw30 $(B)/qslow $(B)/qscrape $(B)/qfloor
GW_BIN    := $(B)/qgate
# the objects a pattern rule's chain makes (bench/q%.o, tests/unit/%.o) are kept, not removed as
# intermediates: else each make builds them again (helper round 36d: make demo after make)
.SECONDARY: $(BENCH_MAINS:%=$(B)/bench/%.o) $(UNIT_SRC:%.c=$(B)/%.o) $(B)/tests/unit/tutil.o

.PHONY: all bins unit sim test-sim test test-layering test-unit test-integration test-interop test-net test-tsan checks test-beside sim-and-builds demo bench bench-smoke docs deps-test clean bench-codec install uninstall deb
all: bins

bins: $(GW_BIN) $(BENCH_BIN)

$(B)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(B)/libqgate.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(B)/qgate: $(B)/src/gateway/main.o $(B)/libqgate.a
	$(CC) $(LDFLAGS) -o $@ $^ -lm

$(B)/q%: $(B)/bench/q%.o $(BENCH_COMMON_OBJ) $(B)/libqgate.a
	$(CC) $(LDFLAGS) -o $@ $^ -lm
$(B)/gw30: $(B)/bench/gw30.o $(BENCH_COMMON_OBJ) $(B)/libqgate.a
	$(CC) $(LDFLAGS) -o $@ $^ -lm
$(B)/bench-codec: $(B)/bench/codec.o $(BENCH_COMMON_OBJ) $(B)/libqgate.a
	$(CC) $(LDFLAGS) -o $@ $^ -lm

$(B)/tests/%: $(B)/tests/unit/%.o $(B)/tests/unit/tutil.o $(BENCH_COMMON_OBJ) $(B)/libqgate.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ -lcmocka -lm

unit: $(UNIT_BIN)

# tests/sim: the deterministic simulation of the loop (every tests/sim/*.c: the driver in sim.c,
# the rest by concern) and its command line (main.c)
SIM_OBJ := $(patsubst %.c,$(B)/%.o,$(wildcard tests/sim/*.c))
$(B)/sim: $(SIM_OBJ) $(B)/libqgate.a
	$(CC) $(LDFLAGS) -o $@ $^ -lm
$(B)/tests/sim/%.o: tests/sim/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests/sim -c $< -o $@

# make sim SECONDS=600: as many seeds as fit (from SEED, default 1), each a child process, under
# ASan and UBSan. make test runs seeds 1..SIM_SEEDS, stopping early after SIM_SECONDS.
SECONDS ?= 60
SEED ?= 1
SIM_SEEDS ?= 400
SIM_SECONDS ?= 150
sim:
	$(MAKE) --no-print-directory SANITIZE=address build/asan/sim
	ASAN_OPTIONS=detect_leaks=1 build/asan/sim --seed $(SEED) --seconds $(SECONDS)

test-sim: $(B)/sim
	@echo "== tests/sim: seeds 1..$(SIM_SEEDS) (at most $(SIM_SECONDS) s)"
	@ASAN_OPTIONS=detect_leaks=1 $(B)/sim --seed 1 --seeds $(SIM_SEEDS) --seconds $(SIM_SECONDS)
	@for s in $$(grep -o '^[0-9][0-9]*' tests/sim/regress.txt); do \
	    ASAN_OPTIONS=detect_leaks=1 $(B)/sim --seed $$s > /dev/null 2>&1 || \
	    { echo "tests/sim: regression seed $$s fails again: tests/sim/run --seed $$s"; exit 1; }; done
	@echo "== tests/sim: the seeds of tests/sim/regress.txt pass"

# ---- tests ---------------------------------------------------------------------------------
# cmocka and node-q are installed on first use (apt-get, npm ci from the lockfile).
deps-test:
	@tests/deps.sh

# Each build is made first with both cores (-j2); then the simulation beside the TSan and fuzz
# builds; then the integration tests (two lanes of their own) beside a third lane that runs the
# layering check, the unit tests, interop, net, TSan and the fuzz smoke one after another (most of
# these wait on sockets and timers: 2026-12-07, the stages one after another used 59% of the two
# cores over 612 s). Each stage's time is printed (== make test: STAGE: N s), and each test's.
STAGE = s=$$(date +%s); $(1) && echo "== make test: $(2): $$(( $$(date +%s) - s )) s"
test: deps-test
	@$(call STAGE,$(MAKE) --no-print-directory -j2 SANITIZE=address bins unit build/asan/sim,asan build)
	@$(call STAGE,$(MAKE) --no-print-directory sim-and-builds,sim (the tsan and fuzz builds beside it))
	@$(call STAGE,$(MAKE) --no-print-directory checks,integration (beside it: layering$(comma) unit$(comma) interop$(comma) net$(comma) tsan$(comma) fuzz smoke))
	@echo "make test: all passed"
comma := ,

# The simulation runs one process at a time (a fake clock: the load beside it changes nothing but
# how many seeds fit), so the TSan and fuzz builds take the other core meanwhile.
sim-and-builds:
	@mkdir -p build; ( $(MAKE) --no-print-directory SANITIZE=thread bins $(TSAN_UNITS:$(B)/%=build/tsan/%) && \
	    $(MAKE) --no-print-directory fuzz-bins ) > build/side-builds.log 2>&1 & side=$$!; \
	$(MAKE) --no-print-directory SANITIZE=address test-sim; st=$$?; \
	if ! wait $$side; then echo "the tsan and fuzz builds failed:"; tail -n 40 build/side-builds.log; exit 1; fi; exit $$st

# The integration tests, and beside them the rest (test-beside); the third lane's output is
# printed when both are done. Each stops at its first failure.
# THIRD_IT: integration tests run in the third lane, after the rest of it (so that the three end
# near together: 2026-12-07, test_pipeline's 40 s moved there when test_session grew by 10; then,
# in CI's run at cad434d, the main lane 356 s, run.sh's other 329 and this one 249: test_regress's
# 32 s moved here).
THIRD_IT := test_pipeline.sh test_regress.sh
checks:
	@mkdir -p build; $(MAKE) --no-print-directory test-beside > build/beside.log 2>&1 & b=$$!; \
	$(MAKE) --no-print-directory SANITIZE=address test-integration IT_SKIP="$(THIRD_IT)"; st=$$?; \
	wait $$b; bt=$$?; cat build/beside.log; \
	[ $$bt = 0 ] || echo "make test: a test beside the integration tests failed (above)"; \
	[ $$st = 0 ] && [ $$bt = 0 ]

test-beside:
	@$(call STAGE,$(MAKE) --no-print-directory SANITIZE=address test-layering test-unit,layering and unit)
	@$(call STAGE,$(MAKE) --no-print-directory SANITIZE=address test-interop test-net,interop and net)
	@$(call STAGE,$(MAKE) --no-print-directory SANITIZE=thread test-tsan,tsan)
	@$(call STAGE,$(MAKE) --no-print-directory fuzz-smoke FUZZ_SMOKE_SECONDS=2,fuzz smoke)
	@$(call STAGE,$(MAKE) --no-print-directory SANITIZE=address bins && for t in $(THIRD_IT); do \
	    echo "== tests/integration/$$t"; BIN=build/asan bash tests/integration/$$t || exit 1; done,integration ($(THIRD_IT)))

# The thread code under ThreadSanitizer: the pool and loop unit tests, and the gateway's
# integration suite (loop thread and both pools under real traffic).
TSAN_UNITS := $(B)/tests/test_pool $(B)/tests/test_gateway $(B)/tests/test_loop
test-tsan: $(TSAN_UNITS) bins
	@set -e; for t in $(TSAN_UNITS); do echo "== $$t (tsan)"; TSAN_OPTIONS="halt_on_error=1 exitcode=66" $$t; done
	@echo "== tests/integration/test_gateway.sh (tsan)"; TSAN_OPTIONS="halt_on_error=1 exitcode=66" BIN=$(B) bash tests/integration/test_gateway.sh

# The shape of src/: includes down the layers, no cycle, pool code reaching no loop function.
test-layering: $(B)/libqgate.a
	@echo "== tests/layering"; bash tests/layering/selftest.sh $(B)/libqgate.a

test-unit: unit
	@set -e; for t in $(UNIT_BIN); do echo "== $$t"; $$t; done

test-integration: bins
	@BIN=$(B) bash tests/integration/run.sh

test-interop: bins
	@BIN=$(B) bash tests/interop/run.sh

# tests/net: scenarios across hosts made of network namespaces (root; each test makes and removes its own)
test-net: bins
	@set -e; for t in tests/net/test_*.sh; do echo "== $$t"; s=$$(date +%s); BIN=$(B) bash $$t; \
	    echo "== $$t: $$(( $$(date +%s) - s )) s"; done

# ---- demo and benchmarks -------------------------------------------------------------------
demo: bins
	@BIN=$(B) bash bench/demo.sh

# Every scenario against every target (bench/run); results under bench/results/.
bench: bins
	BIN=$(B) bench/run all

# docs/configuration.md's table of keys, qgate.1's CONFIGURATION key list and gateway.conf.example's
# keys, made from src/base/config.c's cfg_keys (qgate --print-config=markdown, =man, and plain)
# between their markers; test_config fails while one is stale. DOCS_SPLICE puts the file MADE between the lines
# starting BEGIN_MARK and END_MARK (from the environment: awk -v would eat the backslashes).
DOCS_SPLICE = awk 'index($$0, ENVIRON["BEGIN_MARK"]) == 1 { print; while ((getline l < ENVIRON["MADE"]) > 0) print l; \
                       skip = 1; found++; next } \
                   index($$0, ENVIRON["END_MARK"]) == 1 { skip = 0; found++ } !skip { print } \
                   END { if (found != 2) { print FILENAME ": the markers of make docs are missing" > "/dev/stderr"; exit 1 } }'
docs: build/rel/qgate
	@build/rel/qgate --print-config=markdown > build/rel/keys.md
	@MADE=build/rel/keys.md BEGIN_MARK='<!-- the table below is made by `make docs`' \
	    END_MARK='<!-- end of the table made by make docs -->' $(DOCS_SPLICE) docs/configuration.md > docs/configuration.md.new || { rm -f docs/configuration.md.new; exit 1; }
	@mv docs/configuration.md.new docs/configuration.md
	@echo "docs/configuration.md: the table of keys made from src/base/config.c"
	@build/rel/qgate --print-config=man > build/rel/keys.man
	@MADE=build/rel/keys.man BEGIN_MARK='.\" the key list below is made by `make docs`' \
	    END_MARK='.\" end of the key list made by make docs' $(DOCS_SPLICE) pkg/qgate.1 > pkg/qgate.1.new || { rm -f pkg/qgate.1.new; exit 1; }
	@mv pkg/qgate.1.new pkg/qgate.1
	@echo "pkg/qgate.1: CONFIGURATION's key list made from src/base/config.c"
	@build/rel/qgate --print-config | sed -e 's/^\[group NAME\]$$/[group main]/' \
	    -e 's/^workers = $$/workers = localhost:5001,localhost:5002/' > build/rel/keys.conf
	@MADE=build/rel/keys.conf BEGIN_MARK='# the keys below are made by `make docs`' \
	    END_MARK='# end of the keys made by make docs' $(DOCS_SPLICE) gateway.conf.example > gateway.conf.example.new \
	    || { rm -f gateway.conf.example.new; exit 1; }
	@mv gateway.conf.example.new gateway.conf.example
	@echo "gateway.conf.example: its keys made from src/base/config.c"

# Every scenario against every target, briefly on small data (make test runs bench/run --quick).
bench-smoke: bins
	BIN=$(B) bench/run --smoke all

bench-codec: bins
	$(B)/bench-codec

# ---- installing and packaging ----------------------------------------------------------------
# make install [PREFIX=/usr/local] [DESTDIR=]: the binary, the man page, the example config, the
# systemd unit (its paths under PREFIX) and the logrotate file; a config in SYSCONFDIR/qgate
# only where there is none (bind = 127.0.0.1 there). make deb: the same tree with PREFIX=/usr,
# made a .deb by pkg/mkdeb.sh: build/deb/qgate_VERSION_ARCH.deb (lintian-clean: docs/deployment.md).
PREFIX  ?= /usr/local
DESTDIR ?=
BINDIR  := $(PREFIX)/bin
MANDIR  := $(PREFIX)/share/man
DOCDIR  := $(PREFIX)/share/doc/qgate
UNITDIR := $(PREFIX)/lib/systemd/system
SYSCONFDIR := $(if $(filter /usr,$(PREFIX)),/etc,$(PREFIX)/etc)

install: $(GW_BIN)
	install -D -m 0755 $(GW_BIN) $(DESTDIR)$(BINDIR)/qgate
	install -D -m 0644 pkg/qgate.1 $(DESTDIR)$(MANDIR)/man1/qgate.1
	install -D -m 0644 gateway.conf.example $(DESTDIR)$(DOCDIR)/gateway.conf.example
	install -D -m 0644 README.md $(DESTDIR)$(DOCDIR)/README.md
	install -d -m 0755 $(DESTDIR)$(DOCDIR)/docs
	install -m 0644 docs/*.md $(DESTDIR)$(DOCDIR)/docs/
	install -d -m 0755 $(DESTDIR)$(UNITDIR)
	sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' pkg/qgate.service.in > $(DESTDIR)$(UNITDIR)/qgate.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/qgate.service
	install -D -m 0644 pkg/qgate.logrotate $(DESTDIR)$(SYSCONFDIR)/logrotate.d/qgate
	@if [ -e $(DESTDIR)$(SYSCONFDIR)/qgate/gateway.conf ]; then \
	    echo "kept $(DESTDIR)$(SYSCONFDIR)/qgate/gateway.conf"; \
	else \
	    install -d -m 0755 $(DESTDIR)$(SYSCONFDIR)/qgate && \
	    sed 's|^bind = 0.0.0.0$$|# installed listening on this host only: set users_file before opening it up\nbind = 127.0.0.1|' \
	        gateway.conf.example > $(DESTDIR)$(SYSCONFDIR)/qgate/gateway.conf && \
	    chmod 0644 $(DESTDIR)$(SYSCONFDIR)/qgate/gateway.conf && \
	    echo "installed $(DESTDIR)$(SYSCONFDIR)/qgate/gateway.conf"; \
	fi

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/qgate $(DESTDIR)$(MANDIR)/man1/qgate.1 $(DESTDIR)$(UNITDIR)/qgate.service \
	    $(DESTDIR)$(SYSCONFDIR)/logrotate.d/qgate
	rm -rf $(DESTDIR)$(DOCDIR)
	@echo "kept $(DESTDIR)$(SYSCONFDIR)/qgate/gateway.conf (remove it yourself if you wish)"

# The package's binary is built afresh in build/deb/obj (the release flags, hardened), never
# from objects an older build left.
deb:
	rm -rf build/deb
	$(MAKE) --no-print-directory SANITIZE= B=build/deb/obj install DESTDIR=$(CURDIR)/build/deb/root PREFIX=/usr
	pkg/mkdeb.sh build/deb/root build/deb

clean:
	rm -rf build

# libFuzzer targets: make fuzz (FUZZ_SECONDS each, default 60), make fuzz-smoke
include tests/fuzz/fuzz.mk

-include $(shell find build -name '*.d' -type f 2>/dev/null)

# bench/trace/run: one "echo x" through qgate built with -finstrument-functions (build/trace):
# the loop thread's calls across files per leg of the request (issue 22). TRACE_ARGS=--tree
# prints every call; TRACE_ARGS="--src DIR" measures another tree.
.PHONY: trace
trace:
	@bench/trace/run $(TRACE_ARGS)
