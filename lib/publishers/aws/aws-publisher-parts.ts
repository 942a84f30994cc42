import { PermanentPublishError } from '../../errors/permanent-publish.error';
import { PublisherUnavailableError } from '../../errors/publisher-unavailable.error';
import { describeError } from '../../internal/describe-error';
import { raceAbort } from '../../internal/race-abort';
import type { PublisherOptionChecks } from '../kit/publisher-options-check';
import type {
  OutboxMessageDraft,
  PublisherRefusal,
  PublishOutcome,
} from '../outbox-publisher.interface';
import type { AwsBatchAnswer } from './aws-batch-sender';
import type { AwsBatchEntryFailure } from './aws-error.classifier';
import {
  awsMessageBytesBound,
  awsMessageParts,
  awsTooLargeProblem,
  type AwsMessageParts,
} from './aws-message-attributes';

// What SQS and SNS publishers share around their one `send`: the client they build or are given,
// the checks of the options they share, the health check's and the size limit's answers. Typed
// structurally, so that this folder loads no AWS package.

/** An AWS SDK v3 client as the publishers use it. */
interface AwsClient {
  send(...args: never[]): Promise<unknown>;
  destroy(): void;
}

/** The user's client, or the configuration of the one the publisher builds and owns. */
export interface AwsClientOption<C, Config> {
  readonly client: C | undefined;
  readonly clientConfig: Config;
}

/**
 * The `client` option: a client (anything with `send`) or its configuration. `service` names the
 * SDK's class in the message ('SQS' gives `SQSClient`).
 */
export function resolveAwsClient<C extends AwsClient, Config extends object>(
  checks: PublisherOptionChecks,
  client: C | Config | undefined,
  service: 'SQS' | 'SNS',
): AwsClientOption<C, Config | Record<string, never>> {
  if (client === undefined) return { client: undefined, clientConfig: {} };
  // Never echo the value: a configuration may hold credentials.
  if (client === null || typeof client !== 'object') {
    checks.fail(
      'client',
      `it is neither an ${service}Client nor an ${service}ClientConfig object`,
      `Pass new ${service}Client({ region: 'eu-west-1' }), or its configuration, or leave it out.`,
    );
  }
  if (typeof (client as { send?: unknown }).send === 'function') {
    return { client: client as C, clientConfig: {} };
  }
  return { client: undefined, clientConfig: client as Config };
}

/** The limits both publishers take: requests in flight and the size of a message. */
export function resolveAwsLimits(
  checks: PublisherOptionChecks,
  options: { readonly maxConcurrentRequests?: number; readonly maxMessageBytes?: number },
  defaultMessageBytes: number,
  mostMessageBytes: number,
): { maxConcurrentRequests: number; maxMessageBytes: number } {
  return {
    maxConcurrentRequests: checks.integer(
      options.maxConcurrentRequests,
      10,
      'maxConcurrentRequests',
      1,
      1_000,
    ),
    maxMessageBytes: checks.integer(
      options.maxMessageBytes,
      defaultMessageBytes,
      'maxMessageBytes',
      1_024,
      mostMessageBytes,
      ' bytes',
    ),
  };
}

/**
 * The client the publisher uses: the user's (left to them on close), or one it builds with
 * timeouts that fail a dead endpoint well within a lease (the SDK's own default waits forever).
 */
export function awsClient<C extends AwsClient, Config>(
  option: AwsClientOption<C, Config>,
  build: (config: Config & { requestHandler: object }) => C,
): { readonly client: C; readonly owned: boolean } {
  if (option.client !== undefined) return { client: option.client, owned: false };
  return {
    client: build({
      requestHandler: { connectionTimeout: 3_000, requestTimeout: 10_000 },
      ...option.clientConfig,
    }),
    owned: true,
  };
}

/** A health check's call: an outage when the service does not answer or refuses. */
export async function awsPing(
  service: string,
  signal: AbortSignal,
  call: () => Promise<unknown>,
): Promise<void> {
  const check = (async () => {
    try {
      await call();
    } catch (error) {
      throw new PublisherUnavailableError(`${service} is unreachable: ${describeError(error)}`, {
        cause: error,
      });
    }
  })();
  await raceAbort(check, signal);
}

/**
 * The refusal at enqueue of a message over `max` (body and attributes). A cheap bound first: the
 * exact size needs the attributes built, which most messages are far enough below not to need.
 */
export function awsSizeRefusal(
  service: string,
  message: OutboxMessageDraft,
  max: number,
): PublisherRefusal | undefined {
  const binary = typeof message.payload !== 'string';
  const payloadBytes =
    typeof message.payload === 'string' ? message.payload.length * 3 : message.payload.byteLength;
  if (awsMessageBytesBound(payloadBytes, binary, JSON.stringify(message.headers).length) <= max)
    return undefined;
  const parts = awsMessageParts(message);
  if (parts.bytes <= max) return undefined;
  return { reason: 'payload-too-large', problem: awsTooLargeProblem(service, parts, max) };
}

/** The outcome of a message over `max` at publish (enqueued before the limit applied), if it is. */
export function awsTooLarge(
  service: string,
  parts: AwsMessageParts,
  max: number,
): PublishOutcome | undefined {
  if (parts.bytes <= max) return undefined;
  return { ok: false, error: new PermanentPublishError(awsTooLargeProblem(service, parts, max)) };
}

/** A batch call's answer as the batch sender reads it. */
export function awsBatchAnswer(answer: {
  readonly Successful?: readonly { readonly Id?: string }[];
  readonly Failed?: readonly AwsBatchEntryFailure[];
}): AwsBatchAnswer {
  return {
    successful: (answer.Successful ?? []).map((s) => s.Id ?? ''),
    failed: answer.Failed ?? [],
  };
}
