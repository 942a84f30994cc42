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
# Needs PostgreSQL (PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE; default 127.0.0.1:5432,
# postgres, db test) and RabbitMQ (RABBITMQ_URL, default amqp://guest:guest@127.0.0.1:5672);
# no Docker.
set -euo pipefail
mode=${1:-pinned}
# The subpaths whose client libraries the modes install (oldest: all but terminus); the ES module app checks that each
# gives the same exports through import() and require().
subpaths="nestjs-outbox/microservices nestjs-outbox/kafka nestjs-outbox/rabbitmq nestjs-outbox/testing"
subpaths+=" nestjs-outbox/inbox nestjs-outbox/prometheus nestjs-outbox/terminus nestjs-outbox/opentelemetry"
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$root"
# npm pack builds first (prepack); its output is shown only when it fails.
if ! npm pack --pack-destination "$work" > "$work/pack.log" 2>&1; then
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
    cjs_flags=(--module commonjs --moduleResolution node)
    ;;
  latest)
    deps=(@nestjs/common@latest @nestjs/core@latest @nestjs/schedule@latest
      @nestjs/microservices@latest @nestjs/typeorm@latest typeorm@latest pg@latest
      reflect-metadata@latest rxjs@latest amqplib@latest kafkajs@latest typescript@latest
      "@types/node@$node_major" prom-client@latest @nestjs/terminus@latest @opentelemetry/api@latest)
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
    subpaths="${subpaths/ nestjs-outbox\/terminus/}"
    cjs_flags=(--module commonjs --moduleResolution node)
    ;;
  *)
    echo "usage: $0 [pinned|latest|oldest]" >&2
    exit 2
    ;;
esac

cd "$work"
cat > package.json <<JSON
{ "name": "outbox-pack-smoke", "version": "1.0.0", "private": true }
JSON
echo "== pack-smoke ($mode): npm install ./$tarball ${deps[*]}"
# No --legacy-peer-deps: a peer range that excludes what a user gets must fail, as it would for them.
npm install --no-audit --no-fund --loglevel=error "./$tarball" "${deps[@]}"
node -e '
  const v = (p) => JSON.parse(require("fs").readFileSync(`node_modules/${p}/package.json`, "utf8")).version;
  console.log("== installed: " + ["@nestjs/core", "@nestjs/schedule", "@nestjs/typeorm", "typeorm",
    "amqplib", "kafkajs", "typescript"].map((p) => p + " " + v(p)).join(", "));'

# The README's Usage snippets, as files of the CommonJS app: `// name.ts` blocks, no variants.
node -e '
  const fs = require("fs");
  const readme = fs.readFileSync(process.argv[1], "utf8");
  const blocks = [...readme.matchAll(/^```ts\n\/\/ ([\w.-]+\.ts)\n([\s\S]*?)^```/gm)];
  for (const [, file, code] of blocks) fs.writeFileSync(file, code);
  if (blocks.length < 4) throw new Error("README snippets not found");
' "$root/README.md"
cp "$root/scripts/pack-smoke/app.ts" "$root/scripts/pack-smoke/esm-app.mts" .

common=(--strict --experimentalDecorators --emitDecoratorMetadata --target ES2022 --types node)
npx tsc "${common[@]}" "${cjs_flags[@]}" --esModuleInterop --skipLibCheck app.ts
npx tsc "${common[@]}" --module nodenext --skipLibCheck esm-app.mts
# Our typings checked in full, for both entry kinds (skipLibCheck above skips every .d.ts). Only
# errors in them count: old releases of other packages have typings of their own that NodeNext
# rejects (rxjs 7.2 has no types in its exports map), which is not ours to fix.
dts=node_modules/nestjs-outbox/dist
npx tsc "${common[@]}" --module nodenext --noEmit "$dts/esm/index.d.mts" \
  "$dts/esm/testing/index.d.mts" "$dts/cjs/index.d.ts" "$dts/cjs/testing/index.d.ts" > typings.log || true
if grep -q '^node_modules/nestjs-outbox/' typings.log; then
  grep -A3 '^node_modules/nestjs-outbox/' typings.log
  exit 1
fi

node app.js
PACK_SMOKE_SUBPATHS="$subpaths" node esm-app.mjs
# The package's bin is installed and starts.
npx --no-install outbox --help > outbox-help.txt
grep -q 'outbox' outbox-help.txt

# On the newest versions, the README's Usage snippets once more as an ES module app, the shape
# `nest new` generates on Nest 12 ("type": "module", module nodenext), with `.js` added to their
# relative imports as the README says: compiled, booted against PostgreSQL (a database of its
# own), delivering over TCP; and a vitest spec beside it, as such a project tests. vitest 4: the
# newest major (5) wants Node 22's types.
if [[ "$mode" == latest ]]; then
  echo "== pack-smoke (latest): the README as an ES module app, and a vitest spec"
  npm install --no-audit --no-fund --loglevel=error "vitest@4"
  mkdir -p esm/src
  node -e '
    const fs = require("fs");
    const readme = fs.readFileSync(process.argv[1], "utf8");
    const blocks = [...readme.matchAll(/^```ts\n\/\/ ([\w.-]+\.ts)\n([\s\S]*?)^```/gm)];
    const withJs = (code) =>
      code.replace(/(from\s+["\x27])(\.\.?\/[^"\x27]+?)(["\x27])/g, (m, a, p, b) =>
        p.endsWith(".js") ? m : `${a}${p}.js${b}`);
    for (const [, file, code] of blocks) fs.writeFileSync(`esm/src/${file}`, withJs(code));
  ' "$root/README.md"
  cp "$root/scripts/pack-smoke/esm-readme.mts" "$root/scripts/pack-smoke/readme.spec.ts" esm/src/
  echo '{ "name": "outbox-pack-smoke-esm", "private": true, "type": "module" }' > esm/package.json
  cat > esm/tsconfig.json <<'JSON'
{
  "compilerOptions": {
    "module": "nodenext", "moduleResolution": "nodenext", "target": "ES2023", "strict": true,
    "experimentalDecorators": true, "emitDecoratorMetadata": true, "skipLibCheck": true,
    "types": ["node"], "rootDir": "src", "outDir": "dist"
  },
  "include": ["src/**/*.ts", "src/**/*.mts"],
  "exclude": ["src/**/*.spec.ts"]
}
JSON
  (cd esm && ../node_modules/.bin/tsc -p tsconfig.json)
  esm_db="pack_smoke_esm_$$"
  psql_admin() {
    PGPASSWORD="${PGPASSWORD:-}" psql -h "${PGHOST:-127.0.0.1}" -p "${PGPORT:-5432}" \
      -U "${PGUSER:-postgres}" -d "${PGDATABASE:-test}" -qc "$1"
  }
  psql_admin "CREATE DATABASE $esm_db"
  trap 'psql_admin "DROP DATABASE IF EXISTS $esm_db" || true; rm -rf "$work"' EXIT
  PACK_SMOKE_DATABASE="$esm_db" node esm/dist/esm-readme.mjs
  (cd esm && ../node_modules/.bin/vitest run --reporter=dot src/readme.spec.ts)
fi
echo "== pack-smoke ($mode): passed"
