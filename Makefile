# Bulwark: two commands do all the set-up on a fresh Debian 12 machine.
#   make run    builds and starts a local cluster (router on 127.0.0.1:27017)
#   make test   runs every test: unit, integration (Rust driver), pymongo and the
#               MongoDB specification suites against a live local cluster
SHELL := /bin/bash
APT_PACKAGES := build-essential pkg-config openssl automake autoconf libtool rsync libclang-dev protobuf-compiler python3-venv
CARGO ?= cargo
PORT ?= 27017
DIR ?= ./bulwark-data

.PHONY: run test deps build release unit integration compat bench fmt lint clean-data

# Installs the Debian packages the build needs, only when one is missing.
deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi
	@command -v $(CARGO) >/dev/null || { echo "cargo not found: install Rust from https://rustup.rs"; exit 1; }

release: deps
	$(CARGO) build --release --bin bulwark

run: release
	./target/release/bulwark local --port $(PORT) --dir $(DIR)

test: deps
	bash scripts/test-all.sh

unit: deps
	$(CARGO) test --workspace --exclude tests

integration: deps
	$(CARGO) test -p tests

compat: release
	bash scripts/compat.sh

bench: release
	$(CARGO) run --release -p tests --bin crud-bench

fmt:
	$(CARGO) fmt --all

lint:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# The three-site docker-compose cluster (deploy/): builds the Debian base image when it is
# missing, the release binary and the bulwark image, starts it, and waits until it is
# healthy. Routers on 127.0.0.1:27017-27019 (sites A, B, C); see the README.
.PHONY: cluster-up cluster-down
cluster-up: release
	bash deploy/cluster.sh up

# The sharded layout (deploy/docker-compose.sharded.yml): config servers and two shards,
# a member of each per site, and a router per site on the same ports.
.PHONY: cluster-up-sharded
cluster-up-sharded: release
	LAYOUT=sharded bash deploy/cluster.sh up

# Removes the cluster's containers, networks and data volumes (LAYOUT=sharded for that one).
cluster-down:
	bash deploy/cluster.sh down
