# Entry points for people and CI. Everything runs from the repository root.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
WORKERS ?= 2
# STORE=0 leaves out lab-store, the lab's Redis host for Ray's GCS fault tolerance (default: with it).
STORE ?= 1

.PHONY: venv lint sanity unit unit-verl integration test demo lab-up lab-down lab-slurm lab-venv lab-assets system-deps

# System packages the lab and the playbooks need (Debian/Ubuntu, as root).
# Slurm and munge make the lab a Slurm cluster too (make lab-slurm); their packages start no daemon here.
# redis-server is for lab-store (Redis for Ray's GCS fault tolerance, roles/ray_store); prometheus (with promtool) for
# roles/ray_prometheus on the lab's head and the rules' unit tests; chromium (and a font for its screenshots) for the
# browser checks of tests/integration/browser.py.
system-deps:
	@command -v sshd >/dev/null && command -v ip >/dev/null && command -v findmnt >/dev/null && command -v crontab >/dev/null \
	  && command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null && command -v munged >/dev/null \
	  && command -v redis-server >/dev/null && command -v prometheus >/dev/null && command -v promtool >/dev/null \
	  && command -v chromium >/dev/null && test -d /usr/share/fonts/truetype/dejavu || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    openssh-server openssh-client iproute2 util-linux cron slurmctld slurmd slurm-client munge redis-server \
	    prometheus chromium fonts-dejavu-core)

$(BIN)/ansible-playbook: requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements-dev.txt
	touch $@

venv: $(BIN)/ansible-playbook

# E30x (blank lines) is still a preview rule in ruff, and the one Ansible's pep8 sanity test failed a stop on:
# checked here it is found in seconds, before the sanity venvs are made.
lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff check --preview --select E301,E302,E303,E304,E305,E306 .
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/ansible-lint

# Ansible's sanity tests (all but pylint: validate-modules, ansible-doc, pep8, import, ...) on a collection-shaped
# copy of the plugins in a temporary folder (scripts/sanity.py); tests/sanity/ignore.txt lists what they may find,
# each line with why. Their venvs are made once, from PyPI, under ~/.ansible/test/.
sanity: venv
	$(BIN)/python scripts/sanity.py

# Two processes, a file each (its module fixtures stay in one process): the unit suite is CPU-bound, and the
# verl probe's file (real verl imports) alone takes about as long as all the rest.
unit: venv
	$(BIN)/pytest -q -n 2 --dist loadfile tests/unit

# The verl CPU plugin's tests need torch and verl: they run in the nodes' venv (the main one skips them).
# That venv has no Ansible, so the Ansible-side conftest is left out.
unit-verl: lab-venv
	PYTHONPATH=$(CURDIR)/lab:$(CURDIR)/lab/assets:$(CURDIR)/roles/code_snapshot/files $(LAB_VENV)/bin/python -m pytest -q -p no:cacheprovider --noconftest tests/unit/lab/test_verl_cpu.py tests/unit/roles/test_acceptance_measure.py

# Each test's time goes to .reports/integration.xml (.ci/run ends with the slowest); --durations prints them too.
integration: venv system-deps
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/pytest -q -x -p no:cacheprovider --durations=10 \
	  --junitxml=.reports/integration.xml tests/integration
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/molecule test

test: lint sanity unit unit-verl integration

# The lab's nodes run Ray from .venv-verl, like a GPU image that ships Ray, torch and verl (CPU builds here).
LAB_VENV := .venv-verl
$(LAB_VENV)/bin/python: requirements-verl.txt lab/install_verl.sh
	bash lab/install_verl.sh $(LAB_VENV)
	touch $@

lab-venv: $(LAB_VENV)/bin/python

# The lab's site data: a tiny model and SFT data set, and the verl source to snapshot.
lab-assets: lab-venv
	$(LAB_VENV)/bin/python lab/assets/make_tiny_assets.py .lab/private/common/tiny
	@test -f .lab/src/verl-0.9.1.tar.gz || $(LAB_VENV)/bin/pip download -q --no-deps --no-binary=:all: verl==0.9.1 -d .lab/src

# The lab's tools run with the venv's Python: they import the project's helpers through Ansible (plugin_utils).
lab-up: venv lab-venv system-deps
	$(BIN)/python lab/lab.py up --workers $(WORKERS) $(if $(filter 0 no false,$(STORE)),--no-store)
	$(MAKE) lab-assets

# Slurm on the lab: slurmctld on lab-head (the login node), slurmd on the workers, munge everywhere.
lab-slurm: lab-up
	$(BIN)/python lab/lab_slurm.py up

lab-down:
	$(BIN)/python lab/lab.py down

# The main job on the embedded default: the lab, the cluster, a job, and where its record is.
# DEMO_SPEC=smoke is the quick option (seconds instead of a minute).
DEMO_SPEC ?= sft
DEMO_ID ?= demo-$(DEMO_SPEC)-$(shell date -u +%Y%m%dT%H%M%SZ)
demo: lab-up
	$(BIN)/ansible-playbook up.yml
	$(BIN)/ansible-playbook status.yml
	$(BIN)/ansible-playbook submit.yml -e spec=$(DEMO_SPEC) -e submission_id=$(DEMO_ID) -e wait=true
	@echo "The job's record (/private/jobs/$(DEMO_ID) on every node, .lab/private/jobs/$(DEMO_ID) here):"
	@find .lab/private/jobs/$(DEMO_ID) -type f | sort
	@cat .lab/private/jobs/$(DEMO_ID)/status.json
