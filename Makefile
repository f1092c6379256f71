# clustersim: `make demo` and `make test` set up everything on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# the demo: a 1F1B pipeline that fits its memory (tests/test_pipeline.py holds it to its header)
DEMO   ?= scenarios/pipeline/dgx_a100_llama2_7b.yaml
# pytest workers (pytest-xdist): one per core, as CI gives 2
TEST_JOBS ?= auto
# How pytest runs: each worker starts with its share of the slow tests (tests/slow_tests.txt),
# then the others in file order; one that runs out takes half of what another has left
# (--dist worksteal), so the workers end together.  The 15 slowest are printed.
# Python may cache compiled modules (and pytest its rewritten test modules): a machine that
# sets PYTHONDONTWRITEBYTECODE would otherwise compile every module in every worker and
# every subprocess again.  pytest's plugins are named here, not found by their entry points
# (PYTEST_DISABLE_PLUGIN_AUTOLOAD): pytest rewrites the asserts of every module of a
# package that offers a plugin, and clustersim offers one (clustersim_golden), so on a fresh
# checkout each worker rewrote clustersim's 300 modules before its first test (collection
# 14.5 s instead of 9.0).  Plain `pytest` still finds them all by their entry points.
PYTEST_PLUGINS := -p xdist.plugin -p _hypothesis_pytestplugin -p clustersim.pytest_plugin
PYTEST := PYTHONDONTWRITEBYTECODE= PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 $(PY) -m pytest \
	$(PYTEST_PLUGINS) -n $(TEST_JOBS) --dist worksteal

.PHONY: demo test test-quick slow-tests lint docs bench fuzz install clean ps-vs-ring browser

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test,docs]'
	touch $(STAMP)

install: $(STAMP)

# run the demo, then write its report.html; report ends with the lines to read first
demo: $(STAMP)
	$(VENV)/bin/clustersim run $(DEMO) -o reports/demo
	$(VENV)/bin/clustersim report reports/demo

lint: $(STAMP)
	$(VENV)/bin/ruff check clustersim tests bench
	$(VENV)/bin/ruff format --check clustersim tests bench

# Chromium for tests/test_report_browser.py: Debian's package, installed by apt when make runs
# as root; otherwise the command is printed and that test skips, saying so.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium) \
	  || echo "make browser: apt-get could not install chromium; tests/test_report_browser.py will skip"; \
	else \
	  echo "make browser: no chromium; install it (Debian/Ubuntu: sudo apt-get install chromium) or tests/test_report_browser.py skips"; \
	fi

# The documentation site (mkdocs.yml), strict: a broken link or a page missing from the nav
# fails; the scenario and CLI references are generated from the code as it builds.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

test: $(STAMP) lint browser docs
	$(PYTEST) --durations=15
	$(VENV)/bin/clustersim reproduce -q -o reports/reproduce

# The quick loop: the tests not marked slow (pytest 107 s on 2 cores, in a checkout that ran before).
test-quick: $(STAMP)
	$(PYTEST) -m "not slow"

# Measure every test again and list the slow ones (tests/slow_tests.txt), then run the quick
# loop and add what is slow there (a test reading a run that a slow test makes in the suite).
slow-tests: $(STAMP)
	$(PYTEST) --durations=0 > reports/durations.txt || (tail -20 reports/durations.txt; exit 1)
	$(PY) tests/record_slow_tests.py reports/durations.txt tests/slow_tests.txt
	$(PYTEST) -m "not slow" --durations=0 > reports/durations_quick.txt \
		|| (tail -20 reports/durations_quick.txt; exit 1)
	$(PY) tests/record_slow_tests.py --add reports/durations_quick.txt reports/durations.txt \
		tests/slow_tests.txt

bench: $(STAMP)
	$(PY) bench/bench_engine.py
	$(PY) bench/bench_contention.py
	$(PY) bench/bench_rate_solver.py
	$(PY) bench/bench_allreduce.py
	$(PY) bench/bench_outputs.py
	$(PY) bench/bench_analytical.py
	$(PY) bench/bench_contended_ring.py
	$(PY) bench/bench_goodput.py
	$(PY) bench/bench_estimates.py
	$(PY) bench/bench_scale.py
	$(PY) bench/bench_auto.py
	$(PY) bench/bench_lone_flows.py
	$(PY) bench/bench_fill_memo.py
	$(PY) bench/bench_kept_components.py
	$(PY) bench/bench_per_send.py

FUZZ_EXAMPLES ?= 10000

fuzz: $(STAMP)
	CLUSTERSIM_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) bench/fuzz.py

PS_VS_RING_KEY := cluster.rack_uplink.oversubscription
PS_PARTITION_KEY := data_parallel.ps.partition_bytes

ps-vs-ring: $(STAMP)
	rm -f reports/ps_vs_ring/README.md reports/ps_vs_ring/ps_vs_ring.png  # compare replaces only its own outputs
	$(VENV)/bin/clustersim compare scenarios/ps_vs_ring/*.yaml --set $(PS_VS_RING_KEY)=1,2,4,8,16 -o reports/ps_vs_ring
	cp reports/ps_vs_ring/compare.png reports/ps_vs_ring/ps_vs_ring.png
	$(PY) -c 'from clustersim.studies.sweep import write_reading; print("wrote", write_reading("reports/ps_vs_ring", "$(PS_VS_RING_KEY)"))'
	rm -f reports/ps_vs_ring_partitions/README.md
	$(VENV)/bin/clustersim compare scenarios/ps_vs_ring/*_ps_servers_1x.yaml --set $(PS_PARTITION_KEY)=64MB,16MB,4MB,1MB,256KB -o reports/ps_vs_ring_partitions
	$(PY) -c 'from clustersim.studies.sweep import write_reading; print("wrote", write_reading("reports/ps_vs_ring_partitions", "$(PS_PARTITION_KEY)"))'

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis site
