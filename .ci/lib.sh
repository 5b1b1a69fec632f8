# Shared set-up for `.ci/up` (run the system) and `.ci/test` (run every test). Idempotent: safe to re-run.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
mkdir -p .run
step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
die() { printf '\n\033[31mERROR:\033[0m %s\n' "$*" >&2; exit 1; }
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"

apt_install() {  # apt_install <package>...: only what is missing
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  step "installing Debian packages: ${missing[*]}"
  $SUDO apt-get install -y -q "${missing[@]}" >/dev/null 2>&1 || {
    $SUDO apt-get update -q >/dev/null 2>&1 && $SUDO apt-get install -y -q "${missing[@]}" >/dev/null; } \
    || die "could not install ${missing[*]}: run 'sudo apt-get install -y ${missing[*]}'"
}

wal2json_package() {  # the wal2json build of the PostgreSQL major installed (Debian 12's 15 before any is)
  local v; v=$(ls /usr/lib/postgresql 2>/dev/null | sort -V | tail -1 || true)
  echo "postgresql-${v:-15}-wal2json"
}

ensure_python() {
  command -v python3 >/dev/null || die "Python 3.11+ is not installed: run 'sudo apt-get install -y python3 python3-venv'"
  python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || die "Python 3.11+ is required (found $(python3 -V))"
  if [ ! -x .venv/bin/python ]; then step "creating virtualenv .venv"; python3 -m venv .venv; fi
  if [ ! -f .venv/.installed ] || ! cmp -s requirements.lock .venv/.installed; then
    step "installing pinned Python packages (requirements.lock)"
    .venv/bin/pip install -q --upgrade pip 2>/dev/null || true
    .venv/bin/pip install -q -r requirements.lock
    cp requirements.lock .venv/.installed
  fi
  if [ ! -x .venv/bin/outbox ] || ! cmp -s pyproject.toml .venv/.pyproject; then
    step "installing this project (editable) and its \`outbox\` command"
    .venv/bin/pip install -q --no-deps -e . >/dev/null 2>&1 || .venv/bin/pip install --no-deps -e .
    cp pyproject.toml .venv/.pyproject
  fi
  export PATH="$ROOT/.venv/bin:$PATH"
}

ensure_bun() {  # Reflex builds its frontend with bun; bun itself comes from the npm registry
  command -v npm >/dev/null || die "Node.js/npm is not installed: run 'sudo apt-get install -y nodejs npm'"
  if [ ! -x .tools/node_modules/.bin/bun ]; then
    step "installing bun from the npm registry"
    npm install --silent --prefix .tools bun@1.4.5 >/dev/null
  fi
  export PATH="$ROOT/.tools/node_modules/.bin:$PATH" REFLEX_USE_SYSTEM_BUN=1
  export REFLEX_TELEMETRY_ENABLED=false REFLEX_CHECK_LATEST_VERSION=0 NPM_CONFIG_REGISTRY=https://registry.npmjs.org
}

PG_HOST=127.0.0.1; PG_PORT=${OUTBOX_PG_PORT:-5432}
ensure_postgres() {
  if pg_isready -q -h $PG_HOST -p "$PG_PORT" 2>/dev/null; then return 0; fi
  local bindir; bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
  [ -n "$bindir" ] || die "PostgreSQL is not installed: run 'sudo apt-get install -y postgresql' (then re-run this command)"
  if [ -d /etc/postgresql ] && command -v pg_ctlcluster >/dev/null; then
    step "starting the installed PostgreSQL cluster"
    local v; v=$(ls /etc/postgresql | sort -V | tail -1)
    $SUDO pg_ctlcluster --skip-systemctl-redirect "$v" main start 2>/dev/null || true
    for _ in $(seq 20); do pg_isready -q -h $PG_HOST -p "$PG_PORT" && return 0; sleep 0.5; done
  fi
  step "starting a project-local PostgreSQL (.run/pgdata) on port 55432"
  PG_PORT=55432
  local run=() data=$ROOT/.run/pgdata
  if [ "$(id -u)" = 0 ]; then
    # As root the server runs as `postgres`, who may not enter a checkout inside a private (0700) directory: a new
    # cluster lives in that user's home, one per checkout, and .run/pgdata links to it (its server.log too).
    run=(runuser -u postgres --)
    if [ ! -f .run/pgdata/PG_VERSION ]; then
      local home; home=$(getent passwd postgres | cut -d: -f6)
      [ -n "$home" ] || die "there is no postgres user: run 'sudo apt-get install -y postgresql'"
      data="$home/outbox-$(printf %s "$ROOT" | sha1sum | cut -c1-12)"
      install -d -o postgres -m 700 "$data"
      [ -L .run/pgdata ] || rm -rf .run/pgdata  # what a failed initdb left (no PG_VERSION)
      ln -sfn "$data" .run/pgdata
    fi
    data=$(readlink -f .run/pgdata)
  fi
  mkdir -p "$data"
  (cd / && { [ -f "$data/PG_VERSION" ] || "${run[@]}" "$bindir/initdb" -D "$data" -U postgres --auth=trust >/dev/null; } &&
    "${run[@]}" "$bindir/pg_ctl" -D "$data" -o "-p $PG_PORT -k /tmp -h 127.0.0.1" -l "$data/server.log" -w start >/dev/null)
  pg_isready -q -h $PG_HOST -p "$PG_PORT" || die "PostgreSQL did not start; see .run/pgdata/server.log"
}

# The suite in parallel (3 workers, each with its own system of API, relay, lane workers and pools) opens up to ~250
# connections at its peak: Debian's default of 100 failed tests with "too many clients". Raised once, for good
# (ALTER SYSTEM, then a restart of the cluster we started or found); a server we cannot restart is left as it is,
# with a warning and a suite in fewer workers.
PG_MIN_CONNECTIONS=${OUTBOX_PG_MIN_CONNECTIONS:-300}
ensure_pg_connections() {
  local have v data
  have=$(psql -h $PG_HOST -p "$PG_PORT" -U postgres -Atc 'show max_connections' 2>/dev/null) || return 0
  [ "${have:-0}" -ge "$PG_MIN_CONNECTIONS" ] && return 0
  step "raising PostgreSQL max_connections from $have to $PG_MIN_CONNECTIONS (the parallel suite needs them)"
  if psql -h $PG_HOST -p "$PG_PORT" -U postgres -qc "ALTER SYSTEM SET max_connections = $PG_MIN_CONNECTIONS" \
      >/dev/null 2>&1; then
    if [ "$PG_PORT" = 55432 ] && [ -f .run/pgdata/PG_VERSION ]; then
      data=$(readlink -f .run/pgdata)
      if [ "$(id -u)" = 0 ]; then (cd / && runuser -u postgres -- "$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)/pg_ctl" -D "$data" -w restart >/dev/null) || true
      else (cd / && "$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)/pg_ctl" -D "$data" -w restart >/dev/null) || true; fi
    elif [ -d /etc/postgresql ] && command -v pg_ctlcluster >/dev/null; then
      v=$(ls /etc/postgresql | sort -V | tail -1)
      $SUDO pg_ctlcluster --skip-systemctl-redirect "$v" main restart 2>/dev/null || true
    fi
    for _ in $(seq 40); do pg_isready -q -h $PG_HOST -p "$PG_PORT" && break; sleep 0.5; done
  fi
  have=$(psql -h $PG_HOST -p "$PG_PORT" -U postgres -Atc 'show max_connections' 2>/dev/null || echo 0)
  if [ "${have:-0}" -lt "$PG_MIN_CONNECTIONS" ]; then
    printf '\n\033[33mWARNING:\033[0m PostgreSQL allows %s connections (the parallel suite wants %s); running the tests in 1 worker. Raise it: ALTER SYSTEM SET max_connections = %s, then restart PostgreSQL.\n' "$have" "$PG_MIN_CONNECTIONS" "$PG_MIN_CONNECTIONS" >&2
    export OUTBOX_TEST_WORKERS=${OUTBOX_TEST_WORKERS:-1}
  fi
}

REDIS_PORT=${OUTBOX_REDIS_PORT:-6379}
ensure_redis() {
  if redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1; then return 0; fi
  command -v redis-server >/dev/null || die "Redis is not installed: run 'sudo apt-get install -y redis-server' (then re-run this command)"
  step "starting a project-local Redis on port $REDIS_PORT (nothing kept on disk)"
  redis-server --daemonize yes --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no --dir "$ROOT/.run" \
    --logfile "$ROOT/.run/redis.log"
  for _ in $(seq 20); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && return 0; sleep 0.25; done
  die "Redis did not start; see .run/redis.log"
}

export_urls() {
  export OUTBOX_PG_BASE="postgresql+psycopg://postgres@$PG_HOST:$PG_PORT"
  export OUTBOX_DATABASE_URL="${OUTBOX_DATABASE_URL:-$OUTBOX_PG_BASE/outbox}"
  export OUTBOX_REDIS_URL="${OUTBOX_REDIS_URL:-redis://127.0.0.1:$REDIS_PORT/0}"
}
