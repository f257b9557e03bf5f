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

(async () => {
  const port = Number(process.argv[2]);
  await withIoredis(port);
  await withNodeRedis(port);
  console.log("node clients ok");
})().catch((err) => {
  console.error(err);
  process.exit(1);
});
