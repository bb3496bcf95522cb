# The two commands: `make run` (set up, then open the app on the demo model) and
# `make test` (set up, then run the test suite). Both install what they need.
PY := .venv/bin/python
STAMP := .venv/.flashchat-setup

.PHONY: run test test-fast setup lint bench clean package package-check

run: $(STAMP)
	$(PY) -m engine_mlx demo
	$(PY) -m app

# llama.cpp's server (the DFlash2 parity tests run against it) is built once, ~7 min; its
# converter (a test converts an exported drafter with it) is set up once, ~2 min, or exits 3
# where no CPU build of torch exists, and that test skips with the reason.
#
# Then the lossless suites again on the GPU path (FLASHCHAT_PATH=gpu: every decision a Mac
# takes but the device: float16 tiny models, MLX's own products and sampler), ~2 min, with
# the kernels' reference ops: test_kernel_paths runs the kernels themselves in the emulator,
# on this path, in the first run.
GPU_PATH_SUITES := tests/engine_mlx/decoding tests/engine_mlx/auto \
	tests/engine_mlx/test_generation.py tests/engine_mlx/test_thinking.py \
	tests/engine_mlx/test_auto_mode.py tests/engine_mlx/test_session.py \
	tests/engine_mlx/test_prompt_cache.py tests/engine_mlx/test_time_split.py \
	tests/engine_mlx/test_modes.py \
	tests/engine_mlx/distributed/test_pipeline.py::test_a_split_target_replies_as_one_process

test: $(STAMP)
	bash scripts/build_llama_cpp.sh
	bash scripts/setup_llama_converter.sh || test $$? -eq 3
	QT_QPA_PLATFORM=offscreen FLASHCHAT_REQUIRE_ASSETS=1 $(PY) -m pytest -n auto --durations=30
	FLASHCHAT_PATH=gpu FLASHCHAT_KERNELS=0 QT_QPA_PLATFORM=offscreen $(PY) -m pytest -n auto -q \
		$(GPU_PATH_SUITES)

# The edit-test loop: everything but the tests marked slow (the real demo model, sampled
# distributions, fuzzing), under a minute on a 2-core CPU. `make test` runs them all; both
# run the tests on every core (pytest-xdist).
test-fast: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -n auto -m "not slow" -q

setup: $(STAMP)

$(STAMP): pyproject.toml scripts/setup.sh
	bash scripts/setup.sh
	touch $(STAMP)

lint: $(STAMP)
	.venv/bin/ruff check . && .venv/bin/ruff format --check .

bench: $(STAMP)
	$(PY) -m engine_mlx bench --depths 0,1024 --max-tokens 128 --json-out bench.json

# A self-contained FlashChat for this platform (PyInstaller; see packaging/README.md): Linux,
# dist/FlashChat/ with the `flashchat` executable; macOS, dist/FlashChat.app as well.
package: $(STAMP)
	$(PY) -m PyInstaller --noconfirm --distpath dist --workpath build/pyinstaller \
		packaging/pyinstaller/flashchat.spec

# The bundle, started with an empty data folder, answers one question and quits.
package-check: package
	FLASHCHAT_HOME=$$(mktemp -d) xvfb-run -a dist/FlashChat/flashchat \
		--model "$$($(PY) -m engine_mlx demo)" --ask "What is the capital of France?"

clean:
	rm -rf .venv build *.egg-info
