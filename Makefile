# shoal — see README.md.
SHELL := /bin/sh
GO ?= go
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/shoal-run/shoal/internal/cli.Version=$(VERSION)
DATA_DIR ?= /var/lib/shoal

.PHONY: all build examples deps deps-test deps-bench test run bench bench-quick fmt vet clean

all: build examples

# A static binary (no cgo) starts faster: every CLI command pays for it.
# bin/shoal-bench is the benchmark harness that `shoal bench` runs from
# next to bin/shoal; shoal itself carries none of it. bin/shoal-init is the
# process of warm job sandboxes, found next to bin/shoal too: a small static
# C program, so that a job's step starts with no language runtime.
CC ?= cc
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/shoal ./cmd/shoal
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o bin/shoal-bench ./cmd/shoal-bench
	@command -v $(CC) >/dev/null || { echo "make build: no C compiler ($(CC)) for bin/shoal-init: run make deps (installs gcc and libc6-dev)"; exit 1; }
	$(CC) -static -O2 -Wall -Wextra -Werror -s -o bin/shoal-init cmd/shoal-init/shoal-init.c

# Example apps: one static binary per folder, ready for
# `shoal image build bin/examples/NAME --tag NAME:1 --entrypoint /NAME --port 8080`.
EXAMPLES := hello slowboot cpuburn selfscale grpcecho
examples:
	@for e in $(EXAMPLES); do \
		CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o bin/examples/$$e/$$e ./examples/$$e || exit 1; \
	done

deps:
	scripts/install-deps.sh run

deps-test:
	scripts/install-deps.sh test

deps-bench:
	scripts/install-deps.sh bench

# Every test: unit and integration (real runc, CNI, etcd, registry); needs root.
# The Debian example images the e2e tests deploy are built first (minutes
# on a fresh machine, nothing once cached), outside any test's time limit.
# internal/e2e alone ran past 40 minutes on a 2-core host at load 35: the
# bound of a package's run is 90. go test starts packages in the order
# named, -p (the CPUs) at a time: internal/e2e, the longest, goes first
# and the others run beside it, not after it (named in ./...'s order,
# e2e came after the benchmark suites, whose quick runs take a lock one
# at a time: two started together left one of the slots waiting).
test: deps-test build examples
	@test "$$(id -u)" = 0 || { echo "make test: run as root (integration tests start real containers)"; exit 1; }
	scripts/debian-images.sh apache-php nginx python galera >/dev/null
	gofmt -l . | tee /dev/stderr | (! read -r _)
	$(GO) vet ./...
	SHOAL_BIN=$(CURDIR)/bin/shoal SHOAL_EXAMPLES=$(CURDIR)/bin/examples $(GO) test -count=1 -timeout 90m ./internal/e2e ./...

run: deps build examples
	scripts/run.sh $(DATA_DIR)

bench: deps-bench build examples
	bin/shoal bench all --out docs

bench-quick: deps-bench build examples
	BENCH_QUICK=1 bin/shoal bench all --out docs

fmt:
	gofmt -w .

vet:
	$(GO) vet ./...

clean:
	rm -rf bin
