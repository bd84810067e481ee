# Taskmaster developer tasks. `make run` needs nothing running: it starts a local
# PostgreSQL in ./.data unless TASKMASTER_DATABASE_URL is set.

GO ?= go

.PHONY: run test fuzz build lint browser screenshots

## run: serve on a local PostgreSQL kept in ./.data (or on TASKMASTER_DATABASE_URL)
run: build
	./bin/taskmaster dev

## test: every test with the race detector; starts its own throwaway PostgreSQL
test: browser
	$(GO) test -race -count=1 ./...

## browser: Debian's chromium for the dashboard's browser tests (tests/ui), if
## missing; they skip without it unless TASKMASTER_REQUIRE_BROWSER is set
browser:
	@command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ] || \
		{ echo "installing chromium (dashboard browser tests)"; \
		  (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium) || \
		  echo "warning: could not install chromium: tests/ui will skip (or fail with TASKMASTER_REQUIRE_BROWSER=1)"; }

## screenshots: regenerate docs/dashboard/*.png from the browser tests
screenshots: browser
	TASKMASTER_UI_SCREENSHOTS=1 $(GO) test -count=1 ./tests/ui/

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
