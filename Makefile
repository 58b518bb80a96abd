# shoal — see README.md.
SHELL := /bin/sh
GO ?= go
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/shoal-run/shoal/internal/cli.Version=$(VERSION)
DATA_DIR ?= /var/lib/shoal

.PHONY: all build deps deps-test deps-bench test run bench bench-quick fmt vet clean

all: build

# A static binary (no cgo) starts faster: every CLI command pays for it.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/shoal ./cmd/shoal

deps:
	scripts/install-deps.sh run

deps-test:
	scripts/install-deps.sh test

deps-bench:
	scripts/install-deps.sh bench

# Every test: unit and integration (real runc, CNI, etcd, registry); needs root.
test: deps-test build
	@test "$$(id -u)" = 0 || { echo "make test: run as root (integration tests start real containers)"; exit 1; }
	gofmt -l . | tee /dev/stderr | (! read -r _)
	$(GO) vet ./...
	SHOAL_BIN=$(CURDIR)/bin/shoal $(GO) test -count=1 -timeout 40m ./...

run: deps build
	scripts/run.sh $(DATA_DIR)

bench: deps-bench build
	bin/shoal bench all --out docs

bench-quick: deps-bench build
	BENCH_QUICK=1 bin/shoal bench all --out docs

fmt:
	gofmt -w .

vet:
	$(GO) vet ./...

clean:
	rm -rf bin
