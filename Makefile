# Taskmaster developer tasks. `make run` needs nothing running: it starts a local
# PostgreSQL in ./.data unless TASKMASTER_DATABASE_URL is set.

GO ?= go

.PHONY: run test build lint

## run: serve on a local PostgreSQL kept in ./.data (or on TASKMASTER_DATABASE_URL)
run: build
	./bin/taskmaster dev

## test: every test with the race detector; starts its own throwaway PostgreSQL
test:
	$(GO) test -race -count=1 ./...

## build: the binary in bin/taskmaster
build:
	$(GO) build -o bin/taskmaster ./cmd/taskmaster

## lint: go vet
lint:
	$(GO) vet ./...
