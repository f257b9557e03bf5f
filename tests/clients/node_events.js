// Lease events and blocking acquires with ioredis and node-redis 4 (RESP2).
//
//     node node_events.js PORT
//
// Each client subscribes to `__lease__:*` on a duplicated connection, sees a
// takeover by a blocking acquire (expired, then acquired) and a release,
// and sees a blocking acquire time out with null. Expects a fresh server;
// exits non-zero on the first reply that breaks the contract. Run by
// tests/node_client.rs.
//
// Leases are taken on the server's clock (no explicit `now`): events and
// blocked acquires follow that clock.

const assert = require("node:assert/strict");
const Redis = require("ioredis");
const { createClient } = require("redis");

// Milliseconds allowed for anything awaited here, for a loaded machine.
const PATIENCE = 20000;

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// A RESP2 lease reply as an object.
function fields(reply) {
  assert.ok(Array.isArray(reply) && reply.length === 10, String(reply));
  const out = {};
  for (let i = 0; i < reply.length; i += 2) out[reply[i]] = reply[i + 1];
  out.fencing_token = Number(out.fencing_token);
  return out;
}

// Polls `probe` (which may return a promise) every 10 ms until it is
// true: nothing says when a message reached another connection, or when
// the server noticed a closed one.
async function until(what, probe) {
  const deadline = Date.now() + PATIENCE;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`no ${what} after ${PATIENCE} ms`);
    await sleep(10);
  }
}

// The takeover both clients check: w1 takes `run` for 0.3 s, w2's blocking
// acquire (sent by `block`) is granted when that lease expires, w3's times
// out while w2 holds the run, then w2 releases. `events` is what the
// subscriber has received on the run's channel so far; `acquire` and
// `release` run on an ordinary connection. Returns w2's token.
async function takeover(run, { acquire, block, release, events }) {
  const first = fields(await acquire([run, "w1", "TTL", "0.3"]));
  const second = fields(await block([run, "w2", "TTL", "5", "BLOCK", "5000"]));
  assert.equal(second.worker_id, "w2");
  assert.equal(second.fencing_token, first.fencing_token + 1);
  assert.ok(
    Number(second.expires_at) - 5 >= Number(first.expires_at) - 0.001,
    `granted before w1's lease expired: ${first.expires_at} ${second.expires_at}`,
  );
  // While w2 holds the run, a block of 200 ms ends with null.
  const started = Date.now();
  assert.equal(await block([run, "w3", "BLOCK", "200"]), null);
  assert.ok(Date.now() - started >= 190, `answered after ${Date.now() - started} ms`);
  assert.equal(await release([second.lease_id, String(second.fencing_token)]), 1);
  const t1 = first.fencing_token;
  const t2 = second.fencing_token;
  const expected = [`acquired:${t1}:w1`, `expired:${t1}:w1`, `acquired:${t2}:w2`, `released:${t2}:w2`];
  await until(`events ${expected}`, () => events.length >= expected.length);
  assert.deepEqual(events, expected);
  return t2;
}

async function withIoredis(port) {
  const r = new Redis({ port, host: "127.0.0.1", lazyConnect: true });
  await r.connect();
  // A subscribed connection serves nothing else: the subscriber is a copy
  // of r's options on a connection of its own.
  const sub = r.duplicate();
  const events = [];
  sub.on("pmessage", (pattern, channel, message) => {
    assert.equal(pattern, "__lease__:*");
    if (channel === "__lease__:io-run") events.push(message);
  });
  assert.equal(await sub.psubscribe("__lease__:*"), 1);
  assert.equal(await r.call("PUBSUB", "NUMPAT"), 1);
  // ioredis rejects a command still unanswered after commandTimeout ms:
  // the blocking connection's must exceed the longest BLOCK it sends.
  const waiter = r.duplicate({ commandTimeout: 10000 });
  const last = await takeover("io-run", {
    acquire: (args) => r.call("LEASE.ACQUIRE", ...args),
    block: (args) => waiter.call("LEASE.ACQUIRE", ...args),
    release: (args) => r.call("LEASE.RELEASE", ...args),
    events,
  });

  // The trap: a commandTimeout shorter than the block rejects the promise
  // but leaves the connection open, still queued on the server; only
  // closing the connection takes it out of the queue.
  const held = fields(await r.call("LEASE.ACQUIRE", "io-run", "holder", "TTL", "30"));
  assert.equal(held.fencing_token, last + 1);
  const short = r.duplicate({ commandTimeout: 200 });
  await assert.rejects(short.call("LEASE.ACQUIRE", "io-run", "w4", "BLOCK", "0"), /Command timed out/);
  assert.deepEqual(await r.call("LEASE.WAITERS", "io-run"), ["w4"]);
  short.disconnect();
  await until("w4 out of the queue", async () => (await r.call("LEASE.WAITERS", "io-run")).length === 0);

  await sub.punsubscribe("__lease__:*");
  assert.equal(await r.call("PUBSUB", "NUMPAT"), 0);
  for (const client of [sub, waiter, r]) client.disconnect();
}

async function withNodeRedis(port) {
  const client = createClient({ url: `redis://127.0.0.1:${port}` });
  client.on("error", (err) => { throw err; });
  await client.connect();
  const sub = client.duplicate();
  await sub.connect();
  const events = [];
  // node-redis 4 passes (message, channel) to a pattern listener.
  await sub.pSubscribe("__lease__:*", (message, channel) => {
    if (channel === "__lease__:nr-run") events.push(message);
  });
  assert.equal(await client.sendCommand(["PUBSUB", "NUMPAT"]), 1);
  // node-redis 4 has no per-command timeout unless one is set up (its
  // socket options time out connecting only): a command waits for its
  // reply however long the block. It still needs a connection of its own:
  // a client sends its commands over one connection, and a blocked
  // acquire would hold up every command behind it.
  const waiter = client.duplicate();
  await waiter.connect();
  await takeover("nr-run", {
    acquire: (args) => client.sendCommand(["LEASE.ACQUIRE", ...args]),
    block: (args) => waiter.sendCommand(["LEASE.ACQUIRE", ...args]),
    release: (args) => client.sendCommand(["LEASE.RELEASE", ...args]),
    events,
  });
  await sub.pUnsubscribe("__lease__:*");
  assert.equal(await client.sendCommand(["PUBSUB", "NUMPAT"]), 0);
  for (const c of [sub, waiter, client]) await c.quit();
}

(async () => {
  const port = Number(process.argv[2]);
  await withIoredis(port);
  console.log("ioredis events ok");
  await withNodeRedis(port);
  console.log("node-redis events ok");
})().catch((err) => {
  console.error(err);
  process.exit(1);
});
