// The boundaries of lib/, checked by `npm run lint` (dependency-cruiser). This file is the
// architecture drawing: read it before adding a folder.
//
//   core          the outbox itself, loaded by `nestjs-outbox`: the root files, message/,
//                 options/, store/, dispatch/, workers/, module/ (with admin/), errors/,
//                 observers/, internal/,
//                 drivers/ (SQL ports over pg, mysql2, better-sqlite3 and libSQL, typed
//                 structurally so that no driver is loaded), typeorm/ (the default
//                 connection) and publishers/ (the port, and the in-process and routing
//                 publishers).
//   entry points  one folder each, published as a subpath with optional peers
//                 (entry-points.json): connections/<library>/, publishers/<broker>/,
//                 integrations/<name>/ (cls/ among them: no peer, and the bridges share
//                 its record of a transaction's writes), inbox/, operations/console/,
//                 operations/gap-repair/ (the producer's gap-repair route),
//                 testing/, log-tailing/ (the log sources, one folder per database below it),
//                 schema/, admin/ and debezium/ (re-exports of the core for one task).
//   tools         operations/cli/ (the `outbox` bin): may use core and driver ports.
//
// The rules: the core imports no entry point; an entry point imports the core and its own
// folder only (integrations/bridge/ is shared by the two event-bus bridges); within the core,
// the lower units never reach up to the ones built on them; no cycles.

const ENTRY_POINTS = [
  '^lib/connections/[^/]+/',
  '^lib/publishers/(microservices|kafka|rabbitmq|jetstream|redis-streams|sqs|sns)/',
  '^lib/integrations/(prometheus|terminus|opentelemetry|cqrs|event-emitter|cls|s3|cloudevents)/',
  '^lib/inbox/',
  '^lib/operations/console/',
  '^lib/testing/',
  '^lib/log-tailing/',
  '^lib/(schema|admin|debezium|claim-check|erasure)/',
];
const ENTRY = `(${ENTRY_POINTS.join('|')})`;
const TOOLS = '^lib/operations/cli/';
const SHARED_BY_ENTRIES = '^lib/integrations/bridge/';

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'core-imports-no-entry-point',
      comment:
        'The core (what `nestjs-outbox` loads) must not reach an entry point: that would load its optional peer, and tie the core to one library or broker.',
      severity: 'error',
      from: { path: '^lib/', pathNot: [ENTRY, TOOLS, SHARED_BY_ENTRIES] },
      to: { path: [ENTRY, TOOLS, SHARED_BY_ENTRIES] },
    },
    {
      name: 'entry-point-imports-core-and-own-folder',
      comment:
        'An entry point imports the core and its own folder only: another entry point would load that one’s peer too. Shared code goes to the core (drivers/ for SQL ports).',
      severity: 'error',
      from: { path: ENTRY_POINTS.map((p) => `(${p})`) },
      to: {
        path: [ENTRY, TOOLS],
        pathNot: ['$1'],
      },
    },
    {
      name: 'bridge-only-for-the-event-bus-bridges',
      severity: 'error',
      from: { pathNot: ['^lib/integrations/(cqrs|event-emitter|bridge)/'] },
      to: { path: SHARED_BY_ENTRIES },
    },
    {
      name: 'nothing-imports-the-cli',
      severity: 'error',
      from: { pathNot: [TOOLS, '^test/'] },
      to: { path: TOOLS },
    },
    {
      name: 'base-imports-nothing-above-it',
      comment:
        'errors/, internal/, the messages and the constants are the base: every unit may use them, they use none.',
      severity: 'error',
      from: { path: ['^lib/errors/', '^lib/internal/', '^lib/outbox\\.(messages|constants)\\.ts$'] },
      to: {
        path: '^lib/',
        pathNot: ['^lib/errors/', '^lib/internal/', '^lib/outbox\\.(messages|constants)\\.ts$'],
        dependencyTypesNot: ['type-only'],
      },
    },
    {
      name: 'options-and-message-below-store-and-dispatch',
      comment:
        'What a message is and which options exist are decided before any database or worker: they reach neither (types excepted).',
      severity: 'error',
      from: { path: ['^lib/options/', '^lib/message/'] },
      to: {
        path: [
          '^lib/store/',
          '^lib/dispatch/',
          '^lib/workers/',
          '^lib/module/',
          '^lib/operations/',
          '^lib/drivers/',
          '^lib/typeorm/',
          '^lib/outbox\\.(module|service)\\.ts$',
        ],
        dependencyTypesNot: ['type-only'],
      },
    },
    {
      name: 'store-below-dispatch-and-module',
      comment:
        'The store runs statements; the workers and the module use it, never the other way round.',
      severity: 'error',
      from: { path: ['^lib/store/', '^lib/drivers/'] },
      to: {
        path: ['^lib/dispatch/', '^lib/workers/', '^lib/module/', '^lib/operations/', '^lib/outbox\\.(module|service)\\.ts$'],
      },
    },
    {
      name: 'dispatch-parts-below-the-dispatcher',
      comment:
        'The dispatcher wires its parts; the pipeline, the sources and the health parts never reach back up to it, and the sources reach the pipeline only, never each other.',
      severity: 'error',
      from: { path: '^lib/dispatch/(pipeline|poll|log|partitions|leases|health)/' },
      to: { path: '^lib/dispatch/outbox\\.dispatcher\\.ts$' },
    },
    {
      name: 'sources-do-not-reach-each-other',
      severity: 'error',
      from: { path: '^lib/dispatch/(poll|log|partitions)/' },
      to: { path: '^lib/dispatch/(poll|log|partitions)/', pathNot: ['^lib/dispatch/$1/'] },
    },
    {
      name: 'pipeline-knows-no-source',
      comment:
        'The pipeline delivers any batch by the hold it carries (pipeline/batch-hold.ts) and knows no mode: it never reaches into a source or into the row leases (leases/ adds its gate and worker).',
      severity: 'error',
      from: { path: '^lib/dispatch/pipeline/' },
      to: { path: '^lib/dispatch/(poll|log|partitions|leases)/' },
    },
    {
      name: 'workers-are-not-the-dispatcher',
      comment: 'The interval workers (unlocker, cleaner, partition maintainer) run beside the dispatcher and share none of its parts.',
      severity: 'error',
      from: { path: '^lib/workers/' },
      to: { path: '^lib/dispatch/' },
    },
    {
      name: 'message-does-not-use-options',
      severity: 'error',
      from: { path: '^lib/message/' },
      to: { path: '^lib/options/', dependencyTypesNot: ['type-only'] },
    },
    {
      name: 'no-circular',
      severity: 'error',
      from: { path: '^lib/' },
      to: { circular: true },
    },
    {
      name: 'no-index-import-inside-lib',
      comment: 'lib/index.ts is the public face; nothing inside lib/ imports it.',
      severity: 'error',
      from: { path: '^lib/' },
      to: { path: '^lib/index\\.ts$' },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    exclude: { path: '^lib/.*\\.d\\.ts$' },
  },
};
