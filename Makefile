# The README's two commands:
#   make train   builds zerotrain and trains the default model on the built-in data
#   make test    builds zerotrain and runs every test (ctest)
# Both install missing Debian packages first (scripts/setup.sh).
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release

.PHONY: all setup build test train bench asan tsan clean

all: build

setup:
	@bash scripts/setup.sh

build: setup
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# only what training needs: the library and the zt command (not the tests)
train: setup
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS) --target zt_cli
	@$(BUILD)/zt train

bench: build
	@for b in $(BUILD)/bench/bench_*; do OMP_NUM_THREADS=$(JOBS) $$b; done

# AddressSanitizer + UndefinedBehaviorSanitizer build (-O2 -g: the CLI tests train models) of
# every test: unit, the MPI runs under mpirun (label mpi) and the CLI tests (label integration).
asan: setup
	@cmake -S . -B $(BUILD)-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZT_SANITIZE=ON >/dev/null
	@cmake --build $(BUILD)-asan -j $(JOBS)
	@cd $(BUILD)-asan && ZT_ALLOC_CACHE_MB=0 ctest --output-on-failure -j $(JOBS)

# ThreadSanitizer build of the tests of the threaded parts: the stores' helper thread
# (test_store), write-behind evictions (test_storage) and activation offload's prefetch through it (test_offload), the comm layer
# (test_comm), per-thread state used from several threads (saved-tensor hooks, errors, the
# allocator's accounting). libgomp is not instrumented:
# these run with OMP_NUM_THREADS=1 and tests/tsan.supp (see tests/CMakeLists.txt).
ZT_TSAN_TESTS = test_offload test_store test_storage test_comm test_hooks_saved_tensor test_errors test_allocator
tsan: setup
	@cmake -S . -B $(BUILD)-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZT_TSAN=ON >/dev/null
	@cmake --build $(BUILD)-tsan -j $(JOBS) --target $(ZT_TSAN_TESTS)
	@cd $(BUILD)-tsan && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/tests/tsan.supp" \
	  ctest --output-on-failure -j $(JOBS) -L unit -R '^($(subst $(eval) ,|,$(ZT_TSAN_TESTS)))$$'

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-tsan
