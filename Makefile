# Taskmaster developer tasks. `make run` needs nothing running: it starts a local
# PostgreSQL in ./.data unless TASKMASTER_DATABASE_URL is set.

GO ?= go

.PHONY: run test fuzz build lint browser sdks screenshots

## run: serve on a local PostgreSQL kept in ./.data (or on TASKMASTER_DATABASE_URL)
run: build
	./bin/taskmaster dev

## test: every test with the race detector; starts its own throwaway PostgreSQL
## (the Python and TypeScript SDKs' tests run in tests/sdks)
test: browser sdks
	$(GO) test -race -count=1 -timeout 30m ./...

## sdks: the tools of the Python and TypeScript SDKs (Debian's python3, nodejs,
## npm and mypy, if missing), their dependencies (npm ci) and type checks
## (tsc --noEmit, mypy --strict); without the tools the checks and tests/sdks
## skip, unless TASKMASTER_REQUIRE_SDKS=1
sdks:
	@missing=""; \
	for tool in python3 node npm mypy; do command -v $$tool >/dev/null 2>&1 || missing="$$missing $$tool"; done; \
	if [ -n "$$missing" ]; then \
		pkgs=$$(echo "$$missing" | sed 's/\bnode\b/nodejs/'); \
		echo "installing$$pkgs (SDK tests)"; \
		(apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y $$pkgs) || \
		echo "warning: could not install$$pkgs: the SDK checks and tests/sdks will skip (or fail with TASKMASTER_REQUIRE_SDKS=1)"; \
	fi
	@if command -v npm >/dev/null 2>&1; then \
		cd client/typescript && npm ci --no-audit --no-fund && npx tsc --noEmit -p tsconfig.json; \
	elif [ "$$TASKMASTER_REQUIRE_SDKS" = 1 ]; then echo "npm is missing" >&2; exit 1; fi
	@if command -v mypy >/dev/null 2>&1; then \
		cd client/python && mypy --strict taskmaster tests; \
	elif [ "$$TASKMASTER_REQUIRE_SDKS" = 1 ]; then echo "mypy is missing" >&2; exit 1; fi

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
