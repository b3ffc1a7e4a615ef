# Thin front door: deps / build / demo / test. Everything real lives in CMake and `sift`.
BUILD_DIR ?= build
BUILD_TYPE ?= RelWithDebInfo
SIFT_CUDA ?= auto
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
DEMO_DIR ?= out/demo
MOVIELENS_DIR ?= out/movielens

# Debian 12 packages (architecture.md's table). BUILD_PACKAGES build `sift` (the images use
# `make deps-build`); TEST_PACKAGES are what the tests add: gtest, promtool and prometheus, a
# local Slurm cluster (slurmctld, slurmd, munge), yamllint, and Python for the deploy checks.
BUILD_PACKAGES := build-essential cmake ninja-build pkg-config libabsl-dev libyaml-cpp-dev \
  libcli11-dev nlohmann-json3-dev zlib1g-dev libprotobuf-dev protobuf-compiler \
  libdnnl-dev libgrpc++-dev protobuf-compiler-grpc grpc-proto prometheus-cpp-dev libgloo-dev \
  libssl-dev
# `sift report` renders with Debian's Python: matplotlib for the plots, scipy's ks_2samp.
REPORT_PACKAGES := python3-matplotlib python3-scipy python3-numpy
TEST_PACKAGES := libgtest-dev libgmock-dev python3 python3-venv prometheus \
  slurmctld slurmd slurm-client munge yamllint
# PyPI packages of the deploy checks (deploy/requirements.txt), in a venv at .venv.
VENV ?= .venv
# `make build BUILD_TARGET=sift` builds only the binary (the images do).
BUILD_TARGET ?=

.PHONY: all deps deps-build build demo data-movielens test test-all clean format fuzz docs
# The targets run in order even under `make -j` (two apt-get runs would race for dpkg's lock);
# the parallelism is inside cmake --build and ctest.
.NOTPARALLEL:

all: build

# Idempotent: installs only what is missing.
define apt_install
	@missing=$$(for p in $(1); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "make deps: installing $$missing"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	else echo "make deps: all packages present"; fi
endef

deps-build:
	$(call apt_install,$(BUILD_PACKAGES))

deps:
	$(call apt_install,$(BUILD_PACKAGES) $(REPORT_PACKAGES) $(TEST_PACKAGES))
	@if ! [ -x $(VENV)/bin/python3 ] || ! cmp -s deploy/requirements.txt $(VENV)/requirements.txt; then \
	  echo "make deps: installing deploy/requirements.txt into $(VENV)"; \
	  python3 -m venv $(VENV) && $(VENV)/bin/pip install -q --disable-pip-version-check \
	    -r deploy/requirements.txt && cp deploy/requirements.txt $(VENV)/requirements.txt; \
	else echo "make deps: $(VENV) up to date"; fi

$(BUILD_DIR)/build.ninja:
	@command -v cmake >/dev/null && command -v ninja >/dev/null && [ -d /usr/lib/x86_64-linux-gnu/cmake/absl ] || $(MAKE) deps-build
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DSIFT_CUDA=$(SIFT_CUDA) $(CMAKE_FLAGS)

build: deps-build $(BUILD_DIR)/build.ninja
	cmake --build $(BUILD_DIR) -j $(JOBS) $(if $(BUILD_TARGET),--target $(BUILD_TARGET))

# The embedded default: build the binary, then `sift local` — a coordinator, 2 embedding servers
# and 1 worker as child processes on loopback train SIM on the `tiny` synthetic dataset (generated
# first when missing, `--preset tiny`, with its oracle and heuristic AUCs) for 3 epochs, synchronously (staleness
# 0: the same result as single-process training); prints progress, the AUC table, the oracle
# ratio and samples/s, and stops every process. Then the command of the full-size run.
demo: deps-build $(BUILD_DIR)/build.ninja
	cmake --build $(BUILD_DIR) -j $(JOBS) --target sift
	$(BUILD_DIR)/sift local --servers 2 --workers 1 --dataset $(DEMO_DIR)/tiny --preset tiny \
	  --work-dir $(DEMO_DIR)/local
	@echo
	@echo "Full run (small preset; its time on each measured CPU: docs/results.md):"
	@echo "  $(BUILD_DIR)/sift data gen --preset small --seed 1 --out $(DEMO_DIR)/small"
	@echo "  $(BUILD_DIR)/sift train --dataset $(DEMO_DIR)/small --model sim --epochs 3 --batch-size 32768 --results-dir $(DEMO_DIR)/sim_small"

# The real MovieLens-100K (docs/own-data.md): scripts/fetch-movielens.sh takes RecBole 1.2.1's
# atomic files out of its PyPI wheel into $(MOVIELENS_DIR)/raw/ (never commit them: the GroupLens
# licence forbids redistribution), then `sift data events` imports two timelines, category = each
# movie's first genre, each user's last 10 ratings the test split: ml-100k (every rating: 943 users,
# 1,682 items, 19 categories, 100,000 events) and ml-100k-r4 (ratings >= 4 only).
data-movielens: deps-build $(BUILD_DIR)/build.ninja
	cmake --build $(BUILD_DIR) -j $(JOBS) --target sift
	scripts/fetch-movielens.sh $(MOVIELENS_DIR)/raw
	$(BUILD_DIR)/sift data events --events $(MOVIELENS_DIR)/raw/ml-100k.inter \
	  --items $(MOVIELENS_DIR)/raw/ml-100k.item --items-key item_id --items-category class \
	  --category-separator ' ' --user user_id --item item_id --time timestamp --test-events 10 \
	  --out $(MOVIELENS_DIR)/ml-100k
	$(BUILD_DIR)/sift data events --events $(MOVIELENS_DIR)/raw/ml-100k.inter \
	  --items $(MOVIELENS_DIR)/raw/ml-100k.item --items-key item_id --items-category class \
	  --category-separator ' ' --user user_id --item item_id --time timestamp --test-events 10 \
	  --min-value rating=4 --out $(MOVIELENS_DIR)/ml-100k-r4
	@echo
	@echo "Train on it (docs/own-data.md):"
	@echo "  $(BUILD_DIR)/sift data inspect $(MOVIELENS_DIR)/ml-100k"
	@echo "  $(BUILD_DIR)/sift train --dataset $(MOVIELENS_DIR)/ml-100k --model sim --recipe sift --epochs 10 --batch-size 1024 --results-dir $(MOVIELENS_DIR)/results/sim"

# The generated reference pages (docs/reference/): every subcommand's flags and every job spec
# key, from the program's own definitions. `make test` fails when they are out of date.
docs: deps-build $(BUILD_DIR)/build.ninja
	cmake --build $(BUILD_DIR) -j $(JOBS) --target sift
	@mkdir -p docs/reference
	$(BUILD_DIR)/sift help-markdown --out docs/reference/cli.md
	$(BUILD_DIR)/sift help-markdown --job-spec --out docs/reference/job-spec.md

# Every test but the gpu-labelled ones (unit, integration, slow).
test: deps build
	cd $(BUILD_DIR) && ctest -LE gpu --output-on-failure -j $(JOBS) --timeout 900

# Everything, including gpu tests (skip themselves without a device).
test-all: deps build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

format:
	git ls-files '*.cc' '*.h' '*.cu' | xargs clang-format -i

clean:
	rm -rf $(BUILD_DIR)

# Every fuzz target (tests/fuzz/README.md) under libFuzzer + ASan + UBSan until it has used
# FUZZ_SECONDS of CPU time (scripts/fuzz-run.sh), FUZZ_JOBS at a time, each on a fresh copy of its
# seed corpus in $(FUZZ_WORK_DIR)/<target>/corpus (the git tree is never written; the regression
# reproducers are read as a second corpus). clang-14 and libfuzzer-14-dev are installed when
# missing; $(FUZZ_BUILD_DIR) is configured once with the sanitizer flags for every library the
# targets link. Fails when any target finds a crash, leak, UB, timeout (> 10 s) or OOM (> 2 GB);
# its reproducer is in $(FUZZ_WORK_DIR)/<target>/artifacts.
FUZZ_SECONDS ?= 60
FUZZ_JOBS ?= 1
FUZZ_BUILD_DIR ?= build-fuzz-clang
FUZZ_WORK_DIR ?= out/fuzz
FUZZ_TARGETS ?= tfrecord tf_example feature_spec job_spec py_literal amazon_lines event_log binary_file \
  dataset checkpoint_manifest snapshot embedding_shard coordinator
FUZZ_PACKAGES := clang-14 libfuzzer-14-dev
FUZZ_CFLAGS := -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined \
  -fno-omit-frame-pointer

fuzz: deps-build
	$(call apt_install,$(FUZZ_PACKAGES))
	@[ -f $(FUZZ_BUILD_DIR)/build.ninja ] || CC=clang-14 CXX=clang++-14 cmake -S . -B $(FUZZ_BUILD_DIR) \
	  -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSIFT_CUDA=off -DSIFT_FUZZ=ON \
	  -DCMAKE_C_FLAGS="$(FUZZ_CFLAGS)" -DCMAKE_CXX_FLAGS="$(FUZZ_CFLAGS)" \
	  -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined \
	  -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=address,undefined
	cmake --build $(FUZZ_BUILD_DIR) -j $(JOBS) --target $(addprefix fuzz_,$(FUZZ_TARGETS))
	scripts/fuzz-run.sh $(FUZZ_BUILD_DIR) $(FUZZ_WORK_DIR) $(FUZZ_SECONDS) $(FUZZ_JOBS) $(FUZZ_TARGETS)
