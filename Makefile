# The README's two commands:
#   make train   builds zerotrain and trains the default model on the built-in data
#   make test    builds zerotrain and runs every test (ctest)
# Both install missing Debian packages first (scripts/setup.sh).
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release

.PHONY: all setup build test train bench asan clean

all: build

setup:
	@bash scripts/setup.sh

build: setup
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

train: build
	@$(BUILD)/zt train

bench: build
	@for b in $(BUILD)/bench/bench_*; do OMP_NUM_THREADS=$(JOBS) $$b; done

# AddressSanitizer + UndefinedBehaviorSanitizer build of the unit tests.
asan: setup
	@cmake -S . -B $(BUILD)-asan -DCMAKE_BUILD_TYPE=Debug -DZT_SANITIZE=ON >/dev/null
	@cmake --build $(BUILD)-asan -j $(JOBS)
	@cd $(BUILD)-asan && ZT_ALLOC_CACHE_MB=0 ctest --output-on-failure -j $(JOBS) -L unit

clean:
	rm -rf $(BUILD) $(BUILD)-asan
