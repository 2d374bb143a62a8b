/**
 * Scripted in-process gateways (ws's server on a free loopback port) for
 * the tests: fakeGateway answers each request through a callback;
 * listenLoopback serves a ws server built by hand.
 */
import { createServer, type IncomingMessage, type Server } from "node:http";
import { WebSocketServer, type WebSocket } from "ws";

export type Msg = Record<string, any>;

export interface FakeGateway {
  addr: string;
  /** Every request received, in order, with the index of the connection it came on. */
  got: Array<Msg & { conn: number }>;
  upgrades: IncomingMessage[];
  close(): Promise<void>;
}

export interface FakeGatewayOptions {
  /** Answers the upgrade with an HTTP status instead, when it returns one. */
  refuse?: (req: IncomingMessage) => { status: number; headers?: Record<string, string>; body?: string } | undefined;
  /** false: the server selects no subprotocol. */
  protocol?: boolean;
  /** Announced in the upgrade's Lockgate-Features header (none when empty). */
  features?: string;
}

/** wsServer is a ws server that selects lockgate.v1 (unless protocol is false) and announces features. */
export function wsServer(opts: { protocol?: boolean; features?: string } = {}): WebSocketServer {
  const wss = new WebSocketServer({ noServer: true, handleProtocols: (p: Set<string>) => (opts.protocol === false ? false : p.has("lockgate.v1") ? "lockgate.v1" : false) });
  if (opts.features) wss.on("headers", (headers) => headers.push(`Lockgate-Features: ${opts.features}`));
  return wss;
}

/**
 * listenLoopback starts http on a free loopback port and returns its
 * address and a close that ends every connection of wss and of http.
 */
export async function listenLoopback(http: Server, wss: WebSocketServer): Promise<{ addr: string; close(): Promise<void> }> {
  await new Promise<void>((res) => http.listen(0, "127.0.0.1", res));
  return {
    addr: `127.0.0.1:${(http.address() as { port: number }).port}`,
    close: async () => {
      for (const ws of wss.clients) ws.terminate();
      wss.close();
      http.closeAllConnections();
      await new Promise<void>((res) => http.close(() => res()));
    },
  };
}

/**
 * fakeGateway starts a gateway on a free loopback port; onMsg answers each
 * request (send replies with reply()).
 */
export async function fakeGateway(
  onMsg: (m: Msg, reply: (r: Msg) => void, ws: WebSocket, conn: number) => void,
  opts: FakeGatewayOptions = {},
): Promise<FakeGateway> {
  const http: Server = createServer();
  const wss = wsServer(opts);
  const got: FakeGateway["got"] = [];
  const upgrades: IncomingMessage[] = [];
  let conns = 0;
  http.on("upgrade", (req, socket, head) => {
    upgrades.push(req);
    const r = opts.refuse?.(req);
    if (r) {
      const body = r.body ?? "";
      const hdrs = Object.entries({ "Content-Type": "application/json", "Content-Length": String(Buffer.byteLength(body)), ...(r.headers ?? {}) })
        .map(([k, v]) => `${k}: ${v}\r\n`)
        .join("");
      socket.end(`HTTP/1.1 ${r.status} Refused\r\n${hdrs}\r\n${body}`);
      return;
    }
    wss.handleUpgrade(req, socket, head, (ws) => {
      const conn = ++conns;
      ws.on("message", (data) => {
        const m = JSON.parse(data.toString()) as Msg;
        got.push({ ...m, conn });
        onMsg(m, (r) => ws.send(JSON.stringify({ id: m.id, success: r.type !== "error", ...r })), ws, conn);
      });
    });
  });
  const { addr, close } = await listenLoopback(http, wss);
  return { addr, got, upgrades, close };
}
