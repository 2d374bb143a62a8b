/**
 * Prefix watches (docs/protocol.md, "Prefix watches") against scripted
 * in-process gateways: client.watch(prefix, {prefix: true}) sends
 * `prefix: true` (key "" allowed: every key), each event's key is the
 * message's own, not the watched prefix; unsupported without the
 * gateway's "watchprefix", before anything is sent.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { Client, LockgateError, UnsupportedError, type WatchEvent } from "../src/index.js";
import { fakeGateway, type Msg } from "./gateway.js";

const All = "wanted,shared,semaphore,multikey,watch,lockdelay,sessions,watchprefix";
const tok = (key: string, value: number) => ({ key, value });

/** A gateway whose watches stream, for any watch, synced then events of the keys a and b/1 (with their own keys). */
const streaming = (m: Msg, reply: (r: Msg) => void) => {
  if (m.commandType !== 9) return;
  const synced: Msg = { type: "event", event: "synced", revision: 10 };
  if (m.key) synced.key = m.key; // the prefix "" has no key, as the gateway's omitempty
  reply(synced);
  reply({ type: "event", key: "a", event: "granted", owner: "x", fencingToken: tok("a", 5), revision: 11 });
  reply({ type: "event", key: "b/1", event: "expired", owner: "y", fencingToken: tok("b/1", 6), revision: 12 });
};

test("watch with prefix: sends prefix true (key \"\" for every key); events carry their own keys", async () => {
  const f = await fakeGateway(streaming, { features: All });
  try {
    const c = new Client([f.addr]);
    const ctl = new AbortController();
    const w = await c.watch("", { prefix: true, signal: ctl.signal });
    assert.equal(w.prefix, true);
    assert.equal(w.key, "");
    const got: WatchEvent[] = [];
    for await (const ev of w) {
      got.push(ev);
      if (got.length === 3) ctl.abort();
    }
    assert.deepEqual(
      got.map((e) => [e.type, e.key, e.owner, e.fencingToken, e.revision]),
      [
        ["synced", "", "", undefined, 10],
        ["granted", "a", "x", 5n, 11],
        ["expired", "b/1", "y", 6n, 12],
      ],
    );
    const sent = f.got.find((m) => m.commandType === 9)!;
    assert.equal(sent.key, "");
    assert.equal(sent.prefix, true);

    // A prefix that is not empty: synced names it.
    const p = await c.watch("b/", { prefix: true });
    assert.deepEqual([await p.next()].map((e) => [e?.type, e?.key]), [["synced", "b/"]]);
    assert.equal((await p.next())?.key, "a");
    p.close();
    assert.equal(f.got.filter((m) => m.commandType === 9)[1]!.prefix, true);
    await c.close();
  } finally {
    await f.close();
  }
});

test("a watch without prefix sends no prefix and reports the watched key, whatever the message says", async () => {
  const f = await fakeGateway(streaming, { features: All });
  try {
    const c = new Client([f.addr]);
    const w = await c.watch("wk");
    assert.equal(w.prefix, false);
    const keys = [(await w.next())?.key, (await w.next())?.key];
    assert.deepEqual(keys, ["wk", "wk"]);
    w.close();
    const sent = f.got.find((m) => m.commandType === 9)!;
    assert.equal(sent.key, "wk");
    assert.equal("prefix" in sent, false);
    await c.close();
  } finally {
    await f.close();
  }
});

test("watch with prefix: invalid_key for a malformed prefix, \"\" refused without prefix, unsupported without watchprefix; nothing sent", async () => {
  const f = await fakeGateway(streaming, { features: "wanted,watch" });
  try {
    const c = new Client([f.addr]);
    await assert.rejects(c.watch(""), (e: unknown) => e instanceof LockgateError && e.code === "invalid_key");
    await assert.rejects(c.watch("a\u0001", { prefix: true }), (e: unknown) => e instanceof LockgateError && e.code === "invalid_key");
    await assert.rejects(c.watch("k".repeat(257), { prefix: true }), (e: unknown) => e instanceof LockgateError && e.code === "invalid_key");
    await assert.rejects(c.watch("", { prefix: true }), (e: unknown) => e instanceof UnsupportedError && e.feature === "watchprefix");
    assert.equal(f.got.length, 0, "nothing reached the gateway");
    // The key watch is still offered.
    const w = await c.watch("k");
    assert.equal((await w.next())?.type, "synced");
    w.close();
    await c.close();
  } finally {
    await f.close();
  }
});
