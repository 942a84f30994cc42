// nestjs-outbox/gap-repair: the producer's HTTP route that answers consumers' gap-repair
// requests (docs/gap-repair.md). No optional peer beyond Nest's HTTP platform of the app.
export { OutboxGapRepairModule } from './outbox-gap-repair.module';
export {
  DEFAULT_GAP_REPAIR_PATH,
  type GapRepairHttpRequest,
  type OutboxGapRepairModuleOptions,
} from './gap-repair-route.options';
export { OutboxGapRepairer, GAP_REPAIR_FOR_HEADER } from '../../module/admin/outbox-gap-repair';
export type {
  GapRepairAnswer,
  GapRepairClient,
  GapRepairRequest,
  OutboxGapRepairOptions,
} from '../../module/admin/gap-repair.interfaces';
