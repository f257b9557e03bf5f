// Transactions through ioredis' and node-redis 4's multi() (MULTI ...
// EXEC), RESP2 both.
//
//     node node_transactions.js PORT
//
// Exits non-zero on the first reply that breaks the contract. Run by
// tests/node_client.rs; `npm ci` in this folder installs the clients.

const assert = require("node:assert/strict");
const Redis = require("ioredis");
const { createClient } = require("redis");

// The fencing token of a RESP2 lease reply.
function token(reply) {
  assert.ok(Array.isArray(reply), String(reply));
  return reply[reply.indexOf("fencing_token") + 1];
}

function consecutive(tokens) {
  tokens.forEach((t, i) => assert.equal(t, tokens[0] + i, String(tokens)));
}

async function withIoredis(port) {
  const r = new Redis({ port, host: "127.0.0.1", lazyConnect: true });
  await r.connect();
  const tx = r.multi();
  for (let i = 0; i < 20; i++) tx.call("LEASE.ACQUIRE", `io-tx-${i}`, "w");
  const results = await tx.exec();
  assert.equal(results.length, 20);
  const tokens = results.map(([err, reply]) => {
    assert.equal(err, null);
    return token(reply);
  });
  consecutive(tokens);

  // A queuing error: EXECABORT, nothing applied, no token spent.
  const aborted = r.multi();
  aborted.call("LEASE.ACQUIRE", "io-aborted", "w");
  aborted.call("NOSUCH");
  await assert.rejects(aborted.exec(), /EXECABORT Transaction discarded because of previous errors/);
  assert.equal(await r.call("LEASE.GET", "io-aborted"), null);
  assert.equal(token(await r.call("LEASE.ACQUIRE", "io-next", "w")), tokens[19] + 1);

  // One command's error is its own; a held run answers null at once.
  const mixed = r.multi();
  mixed.call("LEASE.HEARTBEAT", "io-tx-0:w:1", "zero");
  mixed.call("LEASE.ACQUIRE", "io-tx-0", "other", "BLOCK", "0");
  const [[heartbeatError], [, held]] = await mixed.exec();
  assert.match(String(heartbeatError), /value is not an integer or out of range/);
  assert.equal(held, null);

  await assert.rejects(r.watch("io-tx-0"), /WATCH is not supported/);
  assert.equal(await r.unwatch(), "OK");
  r.disconnect();
  console.log("ioredis transactions ok");
}

async function withNodeRedis(port) {
  const client = createClient({ url: `redis://127.0.0.1:${port}` });
  client.on("error", (err) => { throw err; });
  await client.connect();
  const tx = client.multi();
  for (let i = 0; i < 20; i++) tx.addCommand(["LEASE.ACQUIRE", `nr-tx-${i}`, "w"]);
  const results = await tx.exec();
  assert.equal(results.length, 20);
  const tokens = results.map(token);
  consecutive(tokens);

  const aborted = client.multi();
  aborted.addCommand(["LEASE.ACQUIRE", "nr-aborted", "w"]);
  aborted.addCommand(["NOSUCH"]);
  await assert.rejects(aborted.exec(), /EXECABORT|unknown command/);
  assert.equal(await client.sendCommand(["LEASE.GET", "nr-aborted"]), null);
  const next = await client.sendCommand(["LEASE.ACQUIRE", "nr-next", "w"]);
  assert.equal(token(next), tokens[19] + 1);

  const withPing = client.multi();
  withPing.addCommand(["LEASE.ACQUIRE", "nr-with-ping", "w"]);
  withPing.addCommand(["PING"]);
  const [lease, pong] = await withPing.exec();
  assert.equal(token(lease), tokens[19] + 2);
  assert.equal(pong, "PONG");
  assert.equal(await client.ping(), "PONG");
  await client.quit();
  console.log("node-redis transactions ok");
}

(async () => {
  const port = Number(process.argv[2]);
  await withIoredis(port);
  await withNodeRedis(port);
})().catch((err) => {
  console.error(err);
  process.exit(1);
});
