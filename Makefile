# Taskmaster developer tasks. `make run` needs nothing running: it starts a local
# PostgreSQL in ./.data unless TASKMASTER_DATABASE_URL is set.

GO ?= go

.PHONY: run test fuzz build lint

## run: serve on a local PostgreSQL kept in ./.data (or on TASKMASTER_DATABASE_URL)
run: build
	./bin/taskmaster dev

## test: every test with the race detector; starts its own throwaway PostgreSQL
test:
	$(GO) test -race -count=1 ./...

FUZZTIME ?= 20s
FUZZPARALLEL ?= 2

## fuzz: run every fuzz target (func FuzzXxx in any package) for FUZZTIME each;
## `make test` already runs their seed corpora
fuzz:
	@set -e; for dir in $$(grep -rl --include='*_test.go' --exclude-dir=.git --exclude-dir=.data '^func Fuzz' . | xargs -n1 dirname | sort -u); do \
		for target in $$(grep -h '^func Fuzz' $$dir/*_test.go | sed 's/^func \(Fuzz[A-Za-z0-9_]*\).*/\1/'); do \
			echo "== $$dir $$target ($(FUZZTIME))"; \
			$(GO) test -run='^$$' -fuzz="^$$target\$$" -fuzztime=$(FUZZTIME) -parallel=$(FUZZPARALLEL) $$dir; \
		done; \
	done

## build: the binary in bin/taskmaster
build:
	$(GO) build -o bin/taskmaster ./cmd/taskmaster

## lint: go vet
lint:
	$(GO) vet ./...
