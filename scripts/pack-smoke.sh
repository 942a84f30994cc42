#!/usr/bin/env bash
# Packs the library, installs the tarball into a fresh app outside the repository and runs it
# against PostgreSQL: proves the published package (exports map, subpaths, typings) works.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$root"
tarball=$(npm pack --silent --pack-destination "$work" | tail -n 1)
dep() { node -p "require('$root/node_modules/$1/package.json').version"; }
cd "$work"
cat > package.json <<JSON
{ "name": "outbox-pack-smoke", "version": "1.0.0", "private": true }
JSON
npm install --no-audit --no-fund --prefer-offline --loglevel=error "./$tarball" \
  "@nestjs/common@$(dep @nestjs/common)" "@nestjs/core@$(dep @nestjs/core)" "@nestjs/schedule@$(dep @nestjs/schedule)" \
  "@nestjs/microservices@$(dep @nestjs/microservices)" "typeorm@$(dep typeorm)" "pg@$(dep pg)" \
  "reflect-metadata@$(dep reflect-metadata)" "rxjs@$(dep rxjs)" "typescript@$(dep typescript)" "@types/node@$(dep @types/node)"
cp "$root/scripts/pack-smoke/app.ts" .
npx tsc --strict --experimentalDecorators --emitDecoratorMetadata --target ES2022 --module commonjs \
  --moduleResolution node --esModuleInterop --skipLibCheck app.ts
node app.js
