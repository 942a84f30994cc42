#!/usr/bin/env bash
# Packs the library, installs the tarball into a fresh app outside the repository and runs it
# against PostgreSQL and RabbitMQ: proves the published package (exports map, CommonJS and ES
# module entries, subpaths, typings, peer ranges) works in a user's app.
#
#   scripts/pack-smoke.sh [pinned|latest|oldest]
#     pinned  (default) the versions in this repository's node_modules, which the test suites use
#     latest  the newest release of every dependency (@latest): what `npm install` gives a new
#             user today, so a new major outside the peer ranges fails here (ERESOLVE) first
#     oldest  the oldest supported majors: NestJS 10, @nestjs/schedule 4, TypeORM 0.3.17,
#             amqplib 0.10
#
# PACK_SMOKE_TARBALL: a tarball `npm pack` made already, used instead of packing (and building)
# again; CI packs once for the three modes.
#
# Needs PostgreSQL (PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE; default 127.0.0.1:5432,
# postgres, db test) and RabbitMQ (RABBITMQ_URL, default amqp://guest:guest@127.0.0.1:5672);
# no Docker.
set -euo pipefail
mode=${1:-pinned}
root=$(cd "$(dirname "$0")/.." && pwd)
# Every subpath of the package (entry-points.json, the one list), with the optional peers each
# loads: the ES module app imports each, and checks that import() and require() give the same
# exports. The oldest mode leaves out terminus (@nestjs/terminus 11 needs NestJS 11).
subpaths=$(node "$root/scripts/entry-points.mjs" --names | grep -v '^nestjs-outbox$' | tr '\n' ' ')
peers=$(node "$root/scripts/entry-points.mjs" --peers | tr '\n' ' ')
# The oldest version a peer range of package.json allows: its first version.
oldest_peer() {
  node -p "const r = require('$root/package.json').peerDependencies['$1']; '$1@' + /\d+\.\d+\.\d+/.exec(r)[0]"
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$root"
if [[ -n "${PACK_SMOKE_TARBALL:-}" ]]; then
  # A tarball packed already (CI packs once for the three modes).
  cp "$PACK_SMOKE_TARBALL" "$work/"
# npm pack builds first (prepack); its output is shown only when it fails.
elif ! npm pack --pack-destination "$work" > "$work/pack.log" 2>&1; then
  cat "$work/pack.log" >&2
  exit 1
fi
tarball=$(cd "$work" && ls nestjs-outbox-*.tgz)
pinned() { echo "$1@$(node -p "JSON.parse(require('fs').readFileSync('$root/node_modules/$1/package.json', 'utf8')).version")"; }
node_major=$(node -p 'process.versions.node.split(".")[0]')

case "$mode" in
  pinned)
    deps=()
    for p in @nestjs/common @nestjs/core @nestjs/schedule @nestjs/microservices @nestjs/typeorm \
      typeorm pg reflect-metadata rxjs amqplib @types/amqplib kafkajs typescript @types/node \
      prom-client @nestjs/terminus @opentelemetry/api; do
      deps+=("$(pinned "$p")")
    done
    for p in $peers; do [[ " ${deps[*]} " == *" $p@"* ]] || deps+=("$(pinned "$p")"); done
    cjs_flags=(--module commonjs --moduleResolution node)
    ;;
  latest)
    deps=(@nestjs/common@latest @nestjs/core@latest @nestjs/schedule@latest
      @nestjs/microservices@latest @nestjs/typeorm@latest typeorm@latest pg@latest
      reflect-metadata@latest rxjs@latest amqplib@latest kafkajs@latest typescript@latest
      "@types/node@$node_major" prom-client@latest @nestjs/terminus@latest @opentelemetry/api@latest)
    # A peer that the newest TypeORM also names as an optional peer takes TypeORM's range (ioredis
    # 6 is outside typeorm 1.x's ^5, and npm refuses the pair): what a TypeORM app can install.
    typeorm_peers=$(npm view typeorm@latest peerDependencies --json 2>/dev/null || echo '{}')
    for p in $peers; do
      [[ " ${deps[*]} " == *" $p@"* ]] && continue
      range=$(node -p "JSON.parse(process.argv[1])[process.argv[2]] ?? 'latest'" "$typeorm_peers" "$p")
      deps+=("$p@$range")
    done
    # The CommonJS app as a current project compiles it: TypeScript 7 has no node10 resolution,
    # and NodeNext keeps import() an import in CommonJS output.
    cjs_flags=(--module nodenext)
    ;;
  oldest)
    deps=(@nestjs/common@10 @nestjs/core@10 @nestjs/schedule@4 @nestjs/microservices@10
      @nestjs/typeorm@10 typeorm@0.3.17 "$(pinned pg)" reflect-metadata@0.1.13 rxjs@7.2
      amqplib@0.10 @types/amqplib kafkajs@2.2.4 "$(pinned typescript)" "@types/node@$node_major"
      prom-client@15.0.0 @opentelemetry/api@1.9.0)
    # nestjs-outbox/terminus needs @nestjs/terminus 11+, hence NestJS 11+: not installed here.
    subpaths="${subpaths/nestjs-outbox\/terminus /}"
    for p in $peers; do
      [[ "$p" == @nestjs/terminus || " ${deps[*]} " == *" $p@"* ]] || deps+=("$(oldest_peer "$p")")
    done
    cjs_flags=(--module commonjs --moduleResolution node)
    ;;
  *)
    echo "usage: $0 [pinned|latest|oldest]" >&2
    exit 2
    ;;
esac

# The pinned and oldest versions are what the npm cache holds once fetched (packuments taken from
# it without asking the registry again); latest asks the registry, for today's newest.
install=(npm install --no-audit --no-fund --loglevel=error)
[[ "$mode" == latest ]] || install+=(--prefer-offline)

cd "$work"
cat > package.json <<JSON
{ "name": "outbox-pack-smoke", "version": "1.0.0", "private": true }
JSON
echo "== pack-smoke ($mode): npm install ./$tarball ${deps[*]}"
# No --legacy-peer-deps: a peer range that excludes what a user gets must fail, as it would for them.
"${install[@]}" "./$tarball" "${deps[@]}"
node -e '
  const v = (p) => JSON.parse(require("fs").readFileSync(`node_modules/${p}/package.json`, "utf8")).version;
  console.log("== installed: " + ["@nestjs/core", "@nestjs/schedule", "@nestjs/typeorm", "typeorm",
    "amqplib", "kafkajs", "typescript"].map((p) => p + " " + v(p)).join(", "));'

# The documentation's app snippets (`// name.ts` blocks), unedited, as files of the CommonJS app:
# their `.js` relative imports resolve to the .ts files under CommonJS resolution too.
node "$root/scripts/pack-smoke/readme-snippets.mjs" "$root" .
cp "$root/scripts/pack-smoke/app.ts" "$root/scripts/pack-smoke/esm-app.mts" .

common=(--strict --experimentalDecorators --emitDecoratorMetadata --target ES2022 --types node)
npx tsc "${common[@]}" "${cjs_flags[@]}" --esModuleInterop --skipLibCheck app.ts
npx tsc "${common[@]}" --module nodenext --skipLibCheck esm-app.mts
# Our typings checked in full, for both entry kinds of the root and of every subpath the ES module
# app loads (skipLibCheck above skips every .d.ts; a subpath of types only, or a type that moved
# to one, is checked nowhere else). Only errors in them count: old releases of other packages
# have typings of their own that NodeNext rejects (rxjs 7.2 has no types in its exports map),
# which is not ours to fix.
mapfile -t typings < <(node -e '
  const { exports } = require("./node_modules/nestjs-outbox/package.json");
  for (const name of ["nestjs-outbox", ...process.argv.slice(1)]) {
    const entry = exports[name === "nestjs-outbox" ? "." : `./${name.slice("nestjs-outbox/".length)}`];
    console.log(`node_modules/nestjs-outbox/${entry.import.types.slice(2)}`);
    console.log(`node_modules/nestjs-outbox/${entry.require.types.slice(2)}`);
  }' $subpaths)
npx tsc "${common[@]}" --module nodenext --noEmit "${typings[@]}" > typings.log || true
if grep -q '^node_modules/nestjs-outbox/' typings.log; then
  grep -A3 '^node_modules/nestjs-outbox/' typings.log
  exit 1
fi

node app.js
PACK_SMOKE_SUBPATHS="$subpaths" node esm-app.mjs
# The package's bin is installed and starts.
npx --no-install outbox --help > outbox-help.txt
grep -q 'outbox' outbox-help.txt

psql_admin() {
  PGPASSWORD="${PGPASSWORD:-}" psql -h "${PGHOST:-127.0.0.1}" -p "${PGPORT:-5432}" \
    -U "${PGUSER:-postgres}" -d "${PGDATABASE:-test}" -qc "$1"
}
smoke_db="pack_smoke_docs_$$"
pg_url="postgres://${PGUSER:-postgres}${PGPASSWORD:+:$PGPASSWORD}@${PGHOST:-127.0.0.1}:${PGPORT:-5432}/$smoke_db"
psql_admin "CREATE DATABASE $smoke_db"
trap 'psql_admin "DROP DATABASE IF EXISTS $smoke_db" || true; rm -rf "$work"' EXIT

if [[ "$mode" == pinned ]]; then
  # The documentation's test of the app, under jest in this CommonJS app, configured as the
  # Installation section says (ts-jest, and the mapper for `.js` relative imports); twice, since
  # a message left by the first run must not break the second.
  echo "== pack-smoke (pinned): the documentation's spec under jest, twice"
  node "$root/scripts/pack-smoke/readme-snippets.mjs" "$root" . "a test"
  "${install[@]}" "$(pinned jest)" "$(pinned ts-jest)" \
    "$(pinned @types/jest)" "$(pinned @nestjs/testing)"
  cat > tsconfig.json <<'JSON'
{ "compilerOptions": { "module": "commonjs", "target": "ES2022", "strict": true, "esModuleInterop": true,
  "experimentalDecorators": true, "emitDecoratorMetadata": true, "skipLibCheck": true, "types": ["node", "jest"] } }
JSON
  cat > jest.config.js <<'JS'
module.exports = {
  preset: 'ts-jest',
  testEnvironment: 'node',
  moduleNameMapper: { '^(\\.{1,2}/.*)\\.js$': '$1' },
};
JS
  for run in 1 2; do TEST_DATABASE_URL="$pg_url" npx jest orders.service.spec.ts; done
fi

# On the newest versions, a Nest 12 app exactly as `nest new` makes it today (an ES module app:
# "type": "module", module nodenext, vitest), the documentation followed literally: the install
# lines of Installation, every app snippet copied in unedited over the generated files, `nest
# build`, `node dist/main.js` started and stopped with SIGTERM, the documentation's test run with
# the generated `npm test` (vitest) twice, the ambient-transaction variant type-checked, and a
# driver that makes the app deliver over TCP and ClientProxyPublisher deliver over NATS.
if [[ "$mode" == latest ]]; then
  echo "== pack-smoke (latest): a new Nest app (nest new) built from the documentation"
  npx -y -p @nestjs/cli@latest nest new nest-app --skip-git --package-manager npm --skip-install \
    --strict > nest-new.log 2>&1 || { cat nest-new.log >&2; exit 1; }
  cd nest-app
  rm -f src/app.controller.ts src/app.controller.spec.ts src/app.service.ts test/app.e2e-spec.ts
  node "$root/scripts/pack-smoke/readme-snippets.mjs" "$root" src inbox "a test"
  cp "$root/scripts/pack-smoke/readme-app.driver.ts" src/
  npm install --no-audit --no-fund --loglevel=error "../$tarball" @nestjs/schedule @nestjs/typeorm \
    typeorm pg @nestjs/microservices @nats-io/transport-node kafkajs amqplib prom-client \
    @nestjs/terminus "@opentelemetry/api@~1.9" @nestjs/config nestjs-cls @nestjs-cls/transactional \
    @nestjs-cls/transactional-adapter-typeorm
  node -e '
    const v = (p) => JSON.parse(require("fs").readFileSync(`node_modules/${p}/package.json`, "utf8")).version;
    console.log("== nest new: " + ["@nestjs/core", "@nestjs/microservices", "typeorm", "typescript",
      "vitest"].map((p) => p + " " + v(p)).join(", "));'
  npm run build
  PORT=0 DATABASE_URL="$pg_url" node dist/main.js > main.log 2>&1 &
  main_pid=$!
  for _ in $(seq 1 100); do grep -q 'successfully started' main.log && break; sleep 0.2; done
  kill -TERM "$main_pid"
  # With shutdown hooks, Nest closes the app and then re-raises the signal: 143 is a clean stop.
  status=0
  wait "$main_pid" || status=$?
  if [[ $status -ne 0 && $status -ne 143 ]]; then
    cat main.log >&2
    echo "pack-smoke: main.js exited with $status on SIGTERM" >&2
    exit 1
  fi
  grep -q 'Dispatcher stopped' main.log || { cat main.log >&2; exit 1; }
  # Getting started's PostgreSQL migrations include schema step 9: the app runs the default
  # there, delivery partitions, with no notice about a missing step.
  if ! grep -q 'partitions of the key space' main.log || grep -q 'has no delivery partitions' main.log; then
    cat main.log >&2
    echo "pack-smoke: the app of getting-started does not deliver by partitions" >&2
    exit 1
  fi
  for run in 1 2; do TEST_DATABASE_URL="$pg_url" npm test; done
  mkdir ambient
  node "$root/scripts/pack-smoke/readme-snippets.mjs" "$root" ambient "with an ambient"
  echo '{ "extends": "./tsconfig.json", "compilerOptions": { "noEmit": true, "incremental": false }, "include": ["ambient/**/*.ts"] }' > tsconfig.ambient.json
  npx tsc -p tsconfig.ambient.json
  PACK_SMOKE_DATABASE="$smoke_db" node dist/readme-app.driver.js
  cd ..
fi
echo "== pack-smoke ($mode): passed"
