import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  CreateBucketCommand,
  ListObjectsV2Command,
  S3Client,
  type S3ClientConfig,
} from '@aws-sdk/client-s3';
import { freePort } from './net';
import { sleep } from '../wait-for';

// s3rver (an S3-compatible server from npm), in a child process of its own on a free port,
// started by the spec that needs it as the SNS specs start fauxqs: no service for CI to start.

const CREDENTIALS = { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' };

/** A running s3rver and the client configuration that reaches it. */
export interface S3rver {
  readonly endpoint: string;
  config(): S3ClientConfig;
  stop(): Promise<void>;
}

export async function startS3rver(): Promise<S3rver> {
  const port = await freePort();
  const directory = mkdtempSync(join(tmpdir(), 'outbox-s3rver-'));
  const child: ChildProcess = spawn(
    process.execPath,
    [
      join(__dirname, '../../../node_modules/s3rver/bin/s3rver.js'),
      '--directory',
      directory,
      '--address',
      '127.0.0.1',
      '--port',
      String(port),
      '--silent',
    ],
    { stdio: 'ignore' },
  );
  const endpoint = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 20_000;
  for (;;) {
    try {
      // ListBuckets without a signature: any answer means it listens.
      await fetch(endpoint);
      break;
    } catch {
      // not listening yet
    }
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill();
      rmSync(directory, { recursive: true, force: true });
      throw new Error(`s3rver did not start on port ${port}`);
    }
    await sleep(100);
  }
  // maxAttempts 1: a test sees what the store makes of one failure, not of the SDK's retries.
  const config: S3ClientConfig = {
    endpoint,
    region: 'us-east-1',
    credentials: CREDENTIALS,
    forcePathStyle: true,
    maxAttempts: 1,
  };
  return {
    endpoint,
    config: () => ({ ...config }),
    stop: async () => {
      if (child.exitCode === null) {
        const exited = new Promise((resolve) => child.once('exit', resolve));
        child.kill();
        await exited;
      }
      rmSync(directory, { recursive: true, force: true });
    },
  };
}

/** A bucket of its own for one test. */
export async function createBucket(client: S3Client): Promise<string> {
  const bucket = `outbox-${randomUUID().slice(0, 18)}`;
  await client.send(new CreateBucketCommand({ Bucket: bucket }));
  return bucket;
}

/** The keys in `bucket`, sorted. */
export async function bucketKeys(client: S3Client, bucket: string): Promise<string[]> {
  const { Contents } = await client.send(new ListObjectsV2Command({ Bucket: bucket }));
  return (Contents ?? []).map((o) => o.Key ?? '').sort();
}
