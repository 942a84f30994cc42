import * as transport from '@nats-io/transport-node';

/** The part of a NATS header set the publisher writes (`MsgHdrs` of @nats-io/transport-node). */
export interface NatsHeaderSet {
  set(name: string, value: string): void;
}

/** The part of @nats-io/transport-node's `NatsConnection` the publisher uses. */
export interface NatsConnectionLike {
  /** Resolves once the connection has closed: with the error that closed it, if any. */
  closed(): Promise<void | Error>;
  isClosed(): boolean;
  close(): Promise<void>;
}

/**
 * An authenticator of @nats-io/transport-node: `usernamePasswordAuthenticator`,
 * `tokenAuthenticator`, `nkeyAuthenticator`, `jwtAuthenticator`, `credsAuthenticator`.
 */
export type NatsAuthenticator = (nonce?: string) => unknown;

/** TLS settings of the NATS connection (@nats-io/transport-node's `NodeTlsOptions`). */
export interface NatsTlsOptions {
  /** Client certificate (PEM) or its file. */
  readonly cert?: string;
  readonly certFile?: string;
  /** Client key (PEM) or its file. */
  readonly key?: string;
  readonly keyFile?: string;
  /** Certificate authority (PEM) or its file. */
  readonly ca?: string;
  readonly caFile?: string;
  /** TLS before the server's INFO (servers started with `handshake_first`). */
  readonly handshakeFirst?: boolean;
  /** @default true */
  readonly rejectUnauthorized?: boolean;
}

/** How the publisher proves who it is to the server; never logged. */
export interface NatsCredentials {
  readonly user: string | undefined;
  readonly pass: string | undefined;
  readonly token: string | undefined;
  readonly authenticator: NatsAuthenticator | NatsAuthenticator[] | undefined;
  readonly tls: NatsTlsOptions | undefined;
}

/** What the publisher passes to `connect()`. */
export interface NatsConnectOptions extends NatsCredentials {
  readonly servers: string[];
  readonly name: string;
  readonly timeout: number;
  readonly reconnect: boolean;
  readonly pingInterval: number;
  readonly maxPingOut: number;
  readonly noAsyncTraces: boolean;
}

/**
 * The client's typings re-export its core through a subpath (`@nats-io/nats-core/internal`)
 * that TypeScript's `node` module resolution, which this package builds with, cannot follow:
 * `headers` and the connection's type are invisible to it, though the module has them. They
 * are typed here by what the publisher uses.
 */
const client = transport as unknown as {
  connect(options: NatsConnectOptions): Promise<NatsConnectionLike>;
  headers(): NatsHeaderSet;
};

export const connectNats = (options: NatsConnectOptions): Promise<NatsConnectionLike> =>
  client.connect(options);

export const natsHeaders = (): NatsHeaderSet => client.headers();
