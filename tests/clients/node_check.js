// Drives a running leased with ioredis and node-redis 4 (RESP2 both).
//
//     node node_check.js PORT
//
// Exits non-zero on the first reply that breaks the contract. Run by
// tests/node_client.rs; `npm ci` in this folder installs the clients.

const assert = require("node:assert/strict");
const Redis = require("ioredis");
const { createClient } = require("redis");

// A RESP2 lease reply as an object.
function fields(reply) {
  assert.ok(Array.isArray(reply) && reply.length % 2 === 0, String(reply));
  const out = {};
  for (let i = 0; i < reply.length; i += 2) out[reply[i]] = reply[i + 1];
  return out;
}

async function withIoredis(port) {
  // ioredis sends INFO first and waits for loading:0 before any command.
  const r = new Redis({ port, host: "127.0.0.1", lazyConnect: true });
  await r.connect();
  const lease = fields(await r.call("LEASE.ACQUIRE", "io-run", "io-worker", "100"));
  assert.deepEqual(Object.keys(lease), [
    "run_id", "worker_id", "lease_id", "fencing_token", "expires_at",
  ]);
  assert.equal(lease.lease_id, `io-run:io-worker:${lease.fencing_token}`);
  assert.equal(lease.expires_at, "110");
  assert.equal(await r.call("LEASE.ACQUIRE", "io-run", "other", "101"), null);
  assert.equal(await r.call("LEASE.HEARTBEAT", lease.lease_id, lease.fencing_token, "105"), 1);
  assert.equal(await r.call("LEASE.VALIDATE", "io-run", lease.lease_id, lease.fencing_token, "114"), 1);
  await assert.rejects(r.call("LEASE.HEARTBEAT", lease.lease_id, "x"), /value is not an integer or out of range/);
  assert.equal(await r.ping(), "PONG");
  const pipe = r.pipeline();
  for (let i = 0; i < 50; i++) pipe.call("LEASE.ACQUIRE", `io-p${i}`, "w", "120");
  const results = await pipe.exec();
  const tokens = results.map(([err, reply]) => {
    assert.equal(err, null);
    return fields(reply).fencing_token;
  });
  tokens.forEach((token, i) => assert.equal(token, tokens[0] + i));
  assert.equal(await r.call("LEASE.RELEASE", lease.lease_id, lease.fencing_token), 1);
  r.disconnect();
}

async function withNodeRedis(port) {
  // node-redis 4 sends CLIENT SETINFO on connect.
  const client = createClient({ url: `redis://127.0.0.1:${port}` });
  client.on("error", (err) => { throw err; });
  await client.connect();
  const lease = fields(await client.sendCommand(["LEASE.ACQUIRE", "nr-run", "nr-worker", "200"]));
  assert.equal(lease.lease_id, `nr-run:nr-worker:${lease.fencing_token}`);
  const got = fields(await client.sendCommand(["LEASE.GET", "nr-run", "210"]));
  assert.equal(got.expired, 1);
  const info = await client.sendCommand(["CLIENT", "INFO"]);
  assert.match(info, /lib-name=node-redis/);
  assert.equal(await client.ping(), "PONG");
  await client.quit();
}

// LEASE.HISTORY on the server's clock (after the checks with explicit
// times): a released tenure, then the active one, newest first, each a
// flat array with its times as strings and a null ended_at while active.
async function withHistory(port) {
  const r = new Redis({ port, host: "127.0.0.1", lazyConnect: true });
  await r.connect();
  assert.deepEqual(await r.call("LEASE.HISTORY", "io-history"), []);
  const first = fields(await r.call("LEASE.ACQUIRE", "io-history", "w1", "TTL", "100"));
  assert.equal(await r.call("LEASE.HEARTBEAT", first.lease_id, first.fencing_token), 1);
  assert.equal(await r.call("LEASE.RELEASE", first.lease_id, first.fencing_token), 1);
  const second = fields(await r.call("LEASE.ACQUIRE", "io-history", "w2", "TTL", "100"));
  const tenures = (await r.call("LEASE.HISTORY", "io-history")).map(fields);
  assert.equal(tenures.length, 2);
  for (const tenure of tenures) {
    assert.deepEqual(Object.keys(tenure), [
      "lease_id", "worker_id", "fencing_token", "acquired_at", "expires_at",
      "ended_at", "end", "heartbeats",
    ]);
    assert.equal(typeof tenure.acquired_at, "string");
    assert.ok(Number(tenure.acquired_at) <= Number(tenure.expires_at), tenure);
  }
  const [active, released] = tenures;
  assert.equal(active.lease_id, second.lease_id);
  assert.equal(active.fencing_token, second.fencing_token);
  assert.equal(active.ended_at, null);
  assert.equal(active.end, "active");
  assert.equal(active.heartbeats, 0);
  assert.equal(released.lease_id, first.lease_id);
  assert.equal(released.worker_id, "w1");
  assert.equal(released.end, "released");
  assert.equal(released.heartbeats, 1);
  assert.ok(Number(released.ended_at) < Number(released.expires_at), released);
  const newest = await r.call("LEASE.HISTORY", "io-history", "COUNT", "1");
  assert.deepEqual(newest.map(fields), [active]);
  await assert.rejects(r.call("LEASE.HISTORY", "io-history", "COUNT", "0"), /must be positive/);
  await assert.rejects(r.call("LEASE.HISTORY"), /wrong number of arguments for 'lease.history'/);
  assert.equal(await r.ping(), "PONG");
  r.disconnect();
}

(async () => {
  const port = Number(process.argv[2]);
  await withIoredis(port);
  await withNodeRedis(port);
  await withHistory(port);
  console.log("node clients ok");
})().catch((err) => {
  console.error(err);
  process.exit(1);
});
