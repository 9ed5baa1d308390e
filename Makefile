# The README's commands. Each one sets up .venv from nothing when it is missing.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NEWEST ?= .venv-newest
DOCS_STAMP := $(VENV)/.docs-installed
CHROMIUM ?= /usr/bin/chromium
DEMO_OUT ?= demo_out
# one thread: the same figures on any number of cores (more threads sum in another order and change the last digits)
DEMO_THREADS ?= 1
DEMO_ARGS ?= --epochs 8 --epochs-decay 7 --bs 4 --load-size 72 --crop-size 64 --ngf 32 --lr 2e-4 --gan-mode lsgan --seed 0
CYCLEGAN_OUT ?= cyclegan_demo_out
CYCLEGAN_ARGS ?= --epochs 6 --epochs-decay 4 --bs 4 --load-size 36 --crop-size 32 --ngf 16 --n-blocks 3 --lr 5e-4 --lambda-idt 0 --seed 0
CUT_OUT ?= cut_demo_out
CUT_ARGS ?= --epochs 6 --epochs-decay 4 --bs 4 --load-size 36 --crop-size 32 --ngf 16 --n-blocks 3 --lr 5e-4 --seed 0
PIX2PIXHD_OUT ?= pix2pixhd_demo_out
PIX2PIXHD_ARGS ?= --epochs 6 --epochs-decay 4 --bs 4 --load-size 64 --ngf 16 --n-downsampling 3 --n-blocks 3 --ndf 16 --vgg off --seed 0
# the tests' and notebooks' temporary files go to a fresh folder, removed afterwards pass or fail (a full run writes a few GB);
# a short path under /tmp, as Chromium's sockets there must fit in 107 characters
SCRATCH = d=$$(mktemp -d); trap 'rm -rf "$$d"' EXIT; export TMPDIR=$$d

.PHONY: install demo demo-cyclegan demo-cut demo-pix2pixhd test test-all test-newest check-export pytest pytest-slow nbcheck bench gpu-check readme docs docs-check clean

$(STAMP): constraints.txt settings.ini setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -U pip
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

$(DOCS_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[dev,docs]"
	touch $(DOCS_STAMP)

## Train pix2pix on the built-in sample data and write the results to $(DEMO_OUT)/
demo: install
	OMP_NUM_THREADS=$(DEMO_THREADS) $(BIN)/gan_callbacks train --sample --overwrite --out $(DEMO_OUT) $(DEMO_ARGS)

## Train CycleGAN on the built-in unpaired sample (A: photos, B: negatives of other photos) into $(CYCLEGAN_OUT)/
demo-cyclegan: install
	$(BIN)/gan_callbacks train --model cyclegan --sample --overwrite --out $(CYCLEGAN_OUT) $(CYCLEGAN_ARGS)

## Train CUT on the same unpaired sample, with CycleGAN's demo budget (epochs, size, width), into $(CUT_OUT)/
demo-cut: install
	$(BIN)/gan_callbacks train --model cut --sample --overwrite --out $(CUT_OUT) $(CUT_ARGS)

## Train pix2pixHD on the built-in label-map sample (classes and instances of the sample photos -> the photos) into $(PIX2PIXHD_OUT)/
demo-pix2pixhd: install
	OMP_NUM_THREADS=$(DEMO_THREADS) $(BIN)/gan_callbacks train --model pix2pixhd --sample --overwrite --out $(PIX2PIXHD_OUT) $(PIX2PIXHD_ARGS)

## The fast loop: the library matches the notebooks, pytest without the slow tests, every notebook run once and printing what it stores
test: install check-export pytest nbcheck

## Everything CI checks: the fast loop, the slow tests (several processes, signals, long fits, the browser), pytest on the newest releases
test-all: test pytest-slow test-newest

check-export: install
	@rm -rf .export_check && cp -r gan_callbacks .export_check
	$(BIN)/nbdev_export
	@if diff -r -x __pycache__ .export_check gan_callbacks; then rm -rf .export_check; \
	else rm -rf .export_check; echo "gan_callbacks/ differs from what nbdev_export makes of nbs/: run nbdev_export and commit"; exit 1; fi
	$(BIN)/python tools/readme.py --check
	$(BIN)/python tools/cli_facts.py --check

## README.md is made from nbs/index.ipynb
readme: install
	$(BIN)/python tools/readme.py

pytest: install
	@$(SCRATCH); $(BIN)/python -m pytest tests/ -q -m "not slow"; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; exit 1; fi; exit $$rc

## The tests marked slow (`@pytest.mark.slow`), which `make test` leaves out
pytest-slow: install
	@$(SCRATCH); $(BIN)/python -m pytest tests/ -q -m slow; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; exit 1; fi; exit $$rc

## Every notebook runs (as nbdev_test runs it) and its stored text outputs are what it prints (one thread, seeded; fastai's time column aside)
nbcheck: install
	@$(SCRATCH); ls nbs/*.ipynb | xargs -P 2 -n 1 $(BIN)/python tools/run_nb.py --check

## pytest (not the notebooks) in a second environment, built from nothing with the newest releases the ranges of settings.ini allow
test-newest:
	rm -rf $(NEWEST) && $(PYTHON) -m venv $(NEWEST)
	$(NEWEST)/bin/python -m pip install -q -U pip
	$(NEWEST)/bin/python -m pip install -q -e ".[onnx,tensorboard,wandb,app,png,sweep]" pytest playwright
	@$(NEWEST)/bin/python -m pip list 2>/dev/null | grep -iE '^(fastai|fastcore|fasttransform|plum-dispatch|accelerate|torch|torchvision) '
	@$(SCRATCH); $(NEWEST)/bin/python -m pytest tests/ -q -p no:cacheprovider; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; exit 1; fi; exit $$rc

## The documentation site, from the notebooks and README.md, into _docs/ (nothing fetched from the network)
docs: $(DOCS_STAMP)
	$(BIN)/python tools/docs.py

## Open every page of _docs/ in headless Chromium: fails on broken pages, links, anchors, images and JavaScript errors
docs-check: $(DOCS_STAMP)
	@test -x $(CHROMIUM) || { echo "docs-check needs Chromium at $(CHROMIUM) (Debian: apt-get install chromium)"; exit 1; }
	$(BIN)/python tools/docs_check.py _docs --chromium $(CHROMIUM) --shots nbs/images

bench: install
	$(BIN)/python benchmarks/bench_step.py

## On a CUDA GPU: the tests marked cuda, then the GPU's figures (img/s, peak memory, share of its peak) into gpu_check.md; without one it says so
gpu-check: install
	$(BIN)/python benchmarks/gpu_check.py

clean:
	rm -rf $(DEMO_OUT) $(CYCLEGAN_OUT) $(CUT_OUT) .pytest_cache _proc _docs
