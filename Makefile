# The two commands a newcomer runs, as root, on a fresh Debian machine:
#   make demo   - installs everything, brings the local 3-node cluster up, runs example jobs
#   make test   - installs everything, runs ruff and pytest (unit + real-cluster tests)
PREFIX ?= /opt/gpualert
VENV   := $(PREFIX)/venv
PY     := $(VENV)/bin/python
CLUSTER := docker/slurm-cluster/cluster
DCLUSTER := docker/slurm-cluster/dcluster

.PHONY: install plugin demo test lint unit bench eval corpus cluster-up cluster-down clean \
        dockerd dcluster-up dcluster-down deb rpm test-matrix

install:
	scripts/install.sh

plugin:
	$(MAKE) -C spank

demo: install
	$(CLUSTER) up
	$(PY) scripts/demo.py

# mypy: core, recovery and notify type-checked ([tool.mypy] in pyproject.toml)
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

# dockerd: the container cluster's tests (-m docker) build their images and start it themselves.
test: install dockerd
	scripts/install-test-deps.sh
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy
	scripts/run-pytest.sh

unit: install
	scripts/install-test-deps.sh
	scripts/run-pytest.sh -m "not cluster"

# Cells beyond CI's (issue 33): the cgroup v2 guest on Slurm 26.05 too (tests/test_tap_cgroup_v2.py).
test-matrix: install dockerd
	scripts/install-test-deps.sh
	GPUALERT_TEST_MATRIX=1 scripts/run-pytest.sh tests/test_tap_cgroup_v2.py

bench: install
	$(PY) bench/run.py

# The tuning corpus, the held-out sets (written by engineers who had not seen the rules), the
# real-world tuning set, the real logs people pasted (../shared/realworld and its second set
# ../shared/realworld2, read-only: labels.csv), then GPUAlert's published corpus (../shared/peer-corpus, read-only, scored through its
# mapping.yaml). A missing set fails: every figure is meant to be there.
PEER_CORPUS ?= ../shared/peer-corpus
REALWORLD ?= ../shared/realworld
REALWORLD2 ?= ../shared/realworld2
eval: install
	$(VENV)/bin/gpualert eval corpus/
	@for d in corpus/holdout corpus/holdout2 corpus/holdout3 corpus/holdout4 corpus/holdout5 corpus/holdout6 corpus/holdout7 corpus/holdout8 corpus/holdout9 corpus/realworld; do \
	    [ -f $$d/labels.jsonl ] && { echo; echo "######## $$d"; $(VENV)/bin/gpualert eval $$d/ || exit 1; } || true; \
	done
	@[ -f $(PEER_CORPUS)/mapping.yaml ] || { echo "make eval: peer corpus $(PEER_CORPUS) not found (a clean clone needs ../shared/peer-corpus beside it)" >&2; exit 1; }
	@[ -f $(REALWORLD)/labels.csv ] || { echo "make eval: real-world set $(REALWORLD) not found (a clean clone needs ../shared/realworld beside it)" >&2; exit 1; }
	@[ -f $(REALWORLD2)/labels.csv ] || { echo "make eval: real-world set $(REALWORLD2) not found (a clean clone needs ../shared/realworld2 beside it)" >&2; exit 1; }
	@echo; echo "######## $(REALWORLD)"; $(VENV)/bin/gpualert eval $(REALWORLD)/
	@echo; echo "######## $(REALWORLD2)"; $(VENV)/bin/gpualert eval $(REALWORLD2)/
	@echo; echo "######## $(PEER_CORPUS)"; $(VENV)/bin/gpualert eval $(PEER_CORPUS)/

corpus: install
	scripts/make-corpus.sh

# The Debian package, dist/gpualert-slurm_<version>_amd64.deb (debian/, README.Debian); built
# in build/deb/ with dpkg-buildpackage, which `make-deb.sh` installs with the rest of the
# build dependencies. install: the bundled NVML binding is taken from the venv.
deb: install
	scripts/make-deb.sh

# The RPM for the RHEL family, dist/gpualert-slurm-<version>-1.x86_64.rpm, from
# packaging/rpm/gpualert-slurm.spec (packaging/rpm/README.md) with Debian's rpmbuild, which
# `make-rpm.sh` installs (with rpmlint) once; the plugin against this machine's Slurm headers
# (SLURM_PREFIX=/usr). install: the bundled libraries are taken from the venv.
rpm: install
	scripts/make-rpm.sh

cluster-up:
	$(CLUSTER) up

cluster-down:
	$(CLUSTER) down

# The container cluster (one container per node): docker/slurm-cluster/README.md.
dockerd:
	$(DCLUSTER) dockerd

dcluster-up: install
	$(DCLUSTER) up

dcluster-down:
	$(DCLUSTER) down

clean:
	$(MAKE) -C spank clean
	rm -rf build *.egg-info
