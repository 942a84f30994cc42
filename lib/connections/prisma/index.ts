/**
 * `nestjs-outbox/prisma`: the outbox on Prisma Client (PostgreSQL, MySQL/MariaDB, SQLite):
 * `OutboxModule.forRoot({ connection: prismaOutbox(prisma), publisher })`, then
 * `outbox.enqueue(event, tx)` inside `prisma.$transaction(async (tx) => …)`. Only types of
 * Prisma are named here, so loading this file loads neither Prisma nor a driver.
 */
export { prismaOutbox } from './prisma.connection';
export { prismaSqlPort, prismaSqlRunner, type PrismaDatabase } from './prisma.sql-port';
export type { PrismaClientLike, PrismaRawClient, PrismaTransactionClient } from './prisma-client';
